"""Command-line entry point.

``agent-code [OPTIONS] [PROMPT]`` runs the agent (one-shot, headless with ``-p``, or a
REPL when there is no prompt). Sub-commands, as later layers add them, are dispatched
by their first word; anything else is the agent's own command line.

``--version`` is answered before anything else is imported, so it stays instant.
"""

from __future__ import annotations

import sys

from agent_code import __version__

# name -> "module:function"; each takes the remaining argv
SUBCOMMANDS: dict[str, str] = {
    "serve": "agent_code.cli.serve:main",
    "inspect": "agent_code.cli.inspect:main",
    "recover": "agent_code.cli.recover:main",
    "rollout": "agent_code.cli.rollout:main",
}


def main(argv: list[str] | None = None) -> None:
    args = list(sys.argv[1:] if argv is None else argv)
    if args in (["--version"], ["-V"]):
        print(f"agent-code {__version__}")
        return
    if args and args[0] in SUBCOMMANDS:
        import importlib

        module, func = SUBCOMMANDS[args[0]].split(":")
        getattr(importlib.import_module(module), func)(args[1:])
        return
    from agent_code.cli.run import run_main

    run_main(args)
