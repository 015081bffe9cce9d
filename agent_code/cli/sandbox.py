"""The OS sandbox at the CLI's start (agent_code/confine): open it, say so when there is none,
close it at exit.

On by default. ``--no-sandbox`` turns it off (one short line on stderr says so),
``AGENT_CODE_SANDBOX=0`` too, silently (the environment is the set-and-forget way: scripts, CI),
and so does ``"sandbox": {"enabled": false}`` in ``~/.agent-code/settings.json``
(never a project's file: agent/settings.py). Where the machine cannot sandbox (not Linux, no
``bwrap``, user namespaces refused), :meth:`NoWall.banner` says on stderr, once, what that means
and how to get it or silence it.
"""

from __future__ import annotations

import atexit
import os
import sys
from pathlib import Path
from typing import Callable

from agent_code.confine import NoWall, Wall, WallSettings, open_wall

ENV = "AGENT_CODE_SANDBOX"


def sandbox_off(flag: bool) -> str | None:
    """Why the sandbox is off by the user's word (the flag, the environment), or None."""
    if flag:
        return "turned off by --no-sandbox"
    if os.environ.get(ENV, "").strip().lower() in ("0", "false", "no", "off"):
        return f"turned off by {ENV}={os.environ[ENV]}"
    return None


def session_wall(root: Path, settings: WallSettings, no_sandbox: bool = False,
                 say: Callable[[str], None] | None = None) -> Wall | None:
    """The wall for the session in ``root`` (closed at exit), or None after one line on stderr."""
    if say is None:
        def say(line: str) -> None:
            print(line, file=sys.stderr)

    off = sandbox_off(no_sandbox)
    if off is not None and not no_sandbox:
        return None
    opened = NoWall(off) if off is not None else open_wall(root, settings)
    if isinstance(opened, NoWall):
        say(opened.banner())
        return None
    atexit.register(opened.close)
    return opened


def wall_opener(root: Path, no_sandbox: bool = False) -> Callable[[WallSettings], Wall | None]:
    """For :func:`agent_code.agent.settings.apply_cli_settings`: the settings' section -> the wall."""
    return lambda settings: session_wall(root, settings, no_sandbox)
