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
    "permissions": "agent_code.cli.permissions:main",
    "settings": "agent_code.cli.settings:main",
    "worktree": "agent_code.cli.worktree:main",
    "mcp": "agent_code.cli.mcp:main",
}
# name -> what it does, for ``agent-code --help`` (every dispatched sub-command has a line)
SUBCOMMAND_SUMMARIES: dict[str, str] = {
    "serve": "the rollout gateway (Anthropic Messages, OpenAI Chat and Responses)",
    "inspect": "show exported training samples (--html: token by token)",
    "recover": "rebuild samples from a trajectory directory's turn logs",
    "rollout": "run a CLI agent on tasks in sandboxes; grade; export samples",
    "permissions": "check -- COMMAND: allow, ask or deny, and the rule that decided it",
    "settings": "settings files changed since you accepted them; accept them",
    "worktree": "list or remove the git worktrees of --worktree NAME",
    "mcp": "list the MCP servers, their state (approved, starts or fails) and tools",
}


def subcommands_help() -> str:
    """The sub-command list ``agent-code --help`` shows, one line each."""
    width = max(len(name) for name in SUBCOMMANDS)
    lines = [f"  {name:<{width}} {SUBCOMMAND_SUMMARIES.get(name, '')}".rstrip() for name in SUBCOMMANDS]
    return "Sub-commands (agent-code COMMAND --help for each):\n\n\b\n" + "\n".join(lines)


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
