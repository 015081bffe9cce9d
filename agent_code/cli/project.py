"""What the ``mcp``, ``settings`` and ``worktree`` sub-commands share: the project directory
their ``-C/--cwd`` names, and failing with ``agent-code COMMAND: error: …`` and exit code 1."""

from __future__ import annotations

import sys
from pathlib import Path
from typing import NoReturn

import typer


def fail(command: str, message: str) -> NoReturn:
    """Print ``agent-code COMMAND: error: MESSAGE`` on stderr and exit 1."""
    print(f"agent-code {command}: error: {message}", file=sys.stderr)
    raise typer.Exit(1)


def project_dir(command: str, cwd: Path | None, given: Path | None = None) -> Path:
    """The directory ``-C`` named after the sub-command (``cwd``) or before it (``given``),
    else the current one, resolved; exit 1 when it is not a directory."""
    chosen = cwd or given or Path(".")
    root = chosen.expanduser().resolve()
    if not root.is_dir():
        fail(command, f"--cwd {chosen} is not a directory")
    return root
