"""The y/N questions the CLI asks a person at a terminal (an MCP server to start, a settings
change to accept): asked only when stdin and stdout both are a terminal, since piped input may
be a command the agent ran and must never answer yes."""

from __future__ import annotations

import sys
from typing import TextIO


def terminal(stdin: TextIO | None = None, stdout: TextIO | None = None) -> tuple[TextIO, TextIO] | None:
    """``(stdin, stdout)`` (the process's own by default) when both are a terminal, else None:
    there is nobody to ask."""
    stdin, out = stdin or sys.stdin, stdout or sys.stdout
    try:
        if not (stdin.isatty() and out.isatty()):
            return None
    except (AttributeError, ValueError):  # no isatty, or a closed stream
        return None
    return stdin, out


def yes_no(stdin: TextIO, out: TextIO, question: str) -> bool:
    """``question [y/N]`` until the answer is y/yes or n/no; Enter, end of input and Ctrl-C
    mean no."""
    while True:
        out.write(f"{question} [y/N] ")
        out.flush()
        try:
            line = stdin.readline()
        except KeyboardInterrupt:
            out.write("\n")
            return False
        answer = line.strip().lower()
        if not line or answer in ("", "n", "no"):
            return False
        if answer in ("y", "yes"):
            return True
