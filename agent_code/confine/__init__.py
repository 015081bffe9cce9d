"""confine: the OS sandbox around the agent's own commands (the wall a person's agent runs in).

The bash tool's commands, hooks and MCP stdio servers run inside it on Linux (bubblewrap):
the file system is writable only in the project (or worktree) and a per-session temp dir,
the protected paths (git's hooks and config, ``.agent/``, the hooks path) are read-only even
there, the network is off except for the domains an allow rule names (through a proxy), and
nothing gains privileges. The permission policy stands on top of it as the second wall.

Public face (filled in by :mod:`agent_code.confine.wall`):

- :class:`WallSettings` — the ``sandbox`` section of the settings;
- :func:`open_wall` — a :class:`Wall` for a project, or a :class:`NoWall` saying why not;
- :meth:`Wall.wrap` — an argv (and environment) that runs a program inside the wall;
- :meth:`Wall.contains_write` — whether the wall lets a command write a path.
"""

from agent_code.confine.wall import NoWall, Wall, WallSettings, open_wall, wall_settings

__all__ = ["NoWall", "Wall", "WallSettings", "open_wall", "wall_settings"]
