"""``agent-code [OPTIONS] [PROMPT]``: the agent's own command.

Exit codes: 0 final answer · 1 error (provider, endpoint, script, cwd) · 2 bad usage ·
3 stopped at ``--max-steps`` · 130 interrupted.
"""

from __future__ import annotations

import sys
from enum import Enum
from pathlib import Path
from typing import Optional

import typer

from agent_code import __version__
from agent_code.agent.loop import DEFAULT_MAX_STEPS
from agent_code.agent.permissions import PermissionMode

EXIT_OK, EXIT_ERROR, EXIT_MAX_STEPS, EXIT_INTERRUPTED = 0, 1, 3, 130

REPL_HELP = """commands:
  /help   show this help
  /exit   leave (also /quit, Ctrl-D)
anything else is sent to the agent; the conversation continues until you leave."""


class OutputFormat(str, Enum):
    text = "text"
    json = "json"
    stream_json = "stream-json"


class ProviderName(str, Enum):
    anthropic = "anthropic"
    local = "local"
    mock = "mock"
    scripted = "scripted"


def _version(value: bool) -> None:
    if value:
        print(f"agent-code {__version__}")
        raise typer.Exit()


app = typer.Typer(add_completion=False, pretty_exceptions_enable=False, rich_markup_mode=None)


@app.command(context_settings={"help_option_names": ["-h", "--help"]})
def run(
    prompt: Optional[str] = typer.Argument(None, help="Task for the agent. Omit it for a REPL."),
    print_mode: bool = typer.Option(False, "--print", "-p",
                                    help="Headless: print only the final answer (reads the prompt from stdin if none)."),
    cwd: Path = typer.Option(Path("."), "--cwd", "-C", help="Project directory; file tools cannot leave it."),
    provider: ProviderName = typer.Option(ProviderName.anthropic, "--provider", help="Model provider."),
    local: bool = typer.Option(False, "--local",
                               help="Same as --provider local: start the gateway in process on a local engine."),
    engine: Optional[str] = typer.Option(None, "--engine",
                                         help="Engine for --local (default: llamacpp, the embedded model)."),
    model: str = typer.Option("deepseek-v4-flash", "--model", help="Model name sent to the endpoint."),
    base_url: Optional[str] = typer.Option(None, "--base-url",
                                           help="Anthropic-compatible endpoint [env: ANTHROPIC_BASE_URL]."),
    script: Optional[Path] = typer.Option(None, "--script",
                                          help="JSONL of assistant turns for --provider scripted (default: the bundled demo)."),
    max_steps: int = typer.Option(DEFAULT_MAX_STEPS, "--max-steps", min=1, help="Most model calls per prompt."),
    max_tokens: Optional[int] = typer.Option(None, "--max-tokens", min=1, help="Most tokens per model reply."),
    output_format: OutputFormat = typer.Option(OutputFormat.text, "--output-format", help="text, json or stream-json."),
    permission_mode: PermissionMode = typer.Option(
        PermissionMode.DEFAULT, "--permission-mode",
        help="What tools may do: default (read only: edits and commands are refused, nobody can "
             "approve them), acceptEdits (read and edit files), plan (read only), "
             "bypassPermissions (read, edit and run commands)."),
    version: bool = typer.Option(False, "--version", "-V", callback=_version, is_eager=True,
                                 help="Show the version and exit."),
) -> None:
    """agent-code: a coding agent on any Anthropic-compatible model.

    Sub-commands: serve (the rollout gateway; see agent-code serve --help).
    """
    from agent_code.agent.loop import Agent
    from agent_code.agent.prompt import system_prompt
    from agent_code.cli.render import make_renderer
    from agent_code.providers import ProviderError, create_provider
    from agent_code.tools import ToolContext, default_tools

    fmt = output_format.value
    renderer = make_renderer(fmt, quiet=print_mode)

    def fail(message: str, code: int = EXIT_ERROR) -> None:
        if fmt != "text":
            renderer({"type": "result", "subtype": "error", "is_error": True, "result": "", "error": message,
                      "num_steps": 0})
        print(f"agent-code: error: {message}", file=sys.stderr)
        raise typer.Exit(code)

    root = cwd.expanduser().resolve()
    if not root.is_dir():
        fail(f"--cwd {cwd} is not a directory")
    if prompt is None and print_mode:
        prompt = sys.stdin.read().rstrip("\n")
    if prompt is not None and not prompt.strip():
        fail("the prompt is empty", code=2)
    if local or engine:
        provider = ProviderName.local
    try:
        llm = create_provider(provider.value, model, base_url=base_url, script=script, max_tokens=max_tokens,
                              engine=engine)
    except ProviderError as exc:
        fail(str(exc))
    except Exception as exc:  # a local engine that cannot start (model missing, ...)
        fail(f"{provider.value} provider: {exc}")
    tools = default_tools()
    renderer.header({"cwd": str(root), "provider": llm.name, "model": llm.model,
                     "base_url": getattr(llm, "base_url", None), "tools": [t.name for t in tools.list()],
                     "max_steps": max_steps, "permission_mode": permission_mode.value,
                     "version": __version__})
    agent = Agent(llm, tools, ToolContext(root), system=system_prompt(root, permission_mode.value),
                  max_steps=max_steps, on_event=renderer, permissions=permission_mode)

    if prompt is None:
        raise typer.Exit(_repl(agent))
    try:
        result = agent.run(prompt)
    except KeyboardInterrupt:
        print("agent-code: interrupted", file=sys.stderr)
        raise typer.Exit(EXIT_INTERRUPTED)
    if result.status == "error":
        print(f"agent-code: error: {result.error}", file=sys.stderr)
        raise typer.Exit(EXIT_ERROR)
    if result.status == "max_steps":
        print(f"agent-code: {result.final}", file=sys.stderr)
        raise typer.Exit(EXIT_MAX_STEPS)


def _repl(agent) -> int:
    """Read prompts until /exit or end of input; one conversation throughout."""
    print("agent-code REPL — /help for commands, /exit to leave", file=sys.stderr)
    while True:
        try:
            line = input("> ")
        except EOFError:
            return EXIT_OK
        except KeyboardInterrupt:
            print("\n(use /exit or Ctrl-D to leave)", file=sys.stderr)
            continue
        line = line.strip()
        if not line:
            continue
        if line.startswith("/"):
            command = line.split()[0]
            if command in ("/exit", "/quit"):
                return EXIT_OK
            if command == "/help":
                print(REPL_HELP)
            else:
                print(f"unknown command {command}; /help lists them")
            continue
        try:
            result = agent.run(line)
        except KeyboardInterrupt:
            print("\n(interrupted; the turn was dropped)", file=sys.stderr)
            continue
        if result.status == "error":
            print(f"agent-code: error: {result.error}", file=sys.stderr)


def run_main(argv: list[str]) -> None:
    app(args=argv, prog_name="agent-code")
