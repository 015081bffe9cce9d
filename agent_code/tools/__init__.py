"""The tools the agent can call, and :func:`default_tools` to get them registered."""

from __future__ import annotations

import dataclasses

from agent_code.tools import builtin as _builtin
from agent_code.tools import edit as _edit
from agent_code.tools import files as _files
from agent_code.tools import grep as _grep  # the module; `_grep.grep` is the tool
from agent_code.tools import shell as _shell
from agent_code.tools import skill as _skill
from agent_code.tools.base import Tool, ToolContext, ToolError, ToolKind, ToolRegistry, tool

__all__ = ["Tool", "ToolContext", "ToolError", "ToolKind", "ToolRegistry", "tool", "default_tools",
           "SMALL_PROFILE"]

# The small-model profile: the six tools a bug fix needs, each described in a line (a 0.5B-1.5B
# model reads a short list better, and its prompt is ~60% shorter); same names, schemas and code.
SMALL_PROFILE: dict[str, str] = {
    "list_files": "List the files and directories in a directory of the project.",
    "read_file": "Read a text file; lines come numbered (the numbers are not part of the file).",
    "grep": "Search file contents for a regular expression; answers path:line: text.",
    "edit_file": "Replace old_string (exact text from the file, found once) with new_string.",
    "write_file": "Write a whole file (creates or replaces it).",
    "bash": "Run a shell command in the project directory, e.g. python -m pytest -q.",
}


def default_tools(profile: str = "full") -> ToolRegistry:
    """A fresh registry with every built-in tool: read tools first, then edit_file,
    write_file and bash. Registering a tool does not let it run: the permission mode
    decides per call from its ``kind`` (see ``agent_code.policy``). ``profile="small"``:
    only the tools of :data:`SMALL_PROFILE`, with their one-line descriptions."""
    if profile not in ("full", "small"):
        raise ValueError(f"unknown tool profile {profile!r} (choose from full, small)")
    registry = ToolRegistry()
    for t in (_builtin.echo, _builtin.system_date, _files.read_file, _files.list_files,
              _files.glob, _grep.grep, _files.project_tree, _edit.edit_file, _edit.write_file,
              _shell.bash, _skill.skill):
        if profile == "small":
            if t.name not in SMALL_PROFILE:
                continue
            t = dataclasses.replace(t, description=SMALL_PROFILE[t.name])
        registry.register(t)
    return registry
