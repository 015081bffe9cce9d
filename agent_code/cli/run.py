"""``agent-code [OPTIONS] [PROMPT]``: the agent's own command.

Exit codes: 0 final answer · 1 error (provider, endpoint, script, cwd, session) · 2 bad
usage · 3 stopped at ``--max-steps`` · 130 interrupted.

Each run is a session (``agent/sessions.py``): its turns go to
``<project>/.agent/sessions/<id>.jsonl`` as they happen; ``-c`` continues the latest one,
``--resume ID`` a given one. The system prompt carries the project's memory
(``agent/memory.py``); the agent compacts its context near ``--context-window``. The
project's own settings, hooks, skills and MCP servers are used only in a folder the user
trusts (``cli/trust.py``: asked once in the REPL, ``--trust-project``).
"""

from __future__ import annotations

import sys
from enum import Enum
from pathlib import Path
from typing import List, Optional

import typer

from agent_code import __version__
from agent_code.cli import subcommands_help
from agent_code.agent.compaction import DEFAULT_CONTEXT_WINDOW
from agent_code.agent.loop import DEFAULT_MAX_STEPS
from agent_code.policy import PermissionMode

EXIT_OK, EXIT_ERROR, EXIT_MAX_STEPS, EXIT_INTERRUPTED = 0, 1, 3, 130
# --provider scripted without --script replays the demo's script. A path into the package
# data, not an import: agent_code.demo sits above the CLI (it runs it).
DEMO_SCRIPT = Path(__file__).resolve().parent.parent / "demo" / "demo_script.jsonl"


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


SMALL_TOOLS_FIRST_STEPS = 2

app = typer.Typer(add_completion=False, pretty_exceptions_enable=False, rich_markup_mode=None)
# the help lists every sub-command agent_code.cli dispatches
_HELP = "agent-code: a coding agent on any Anthropic-compatible model.\n\n" + subcommands_help()


@app.command(help=_HELP, context_settings={"help_option_names": ["-h", "--help"]})
def run(
    prompt: Optional[str] = typer.Argument(None, help="Task for the agent. Omit it for a REPL."),
    print_mode: bool = typer.Option(False, "--print", "-p",
                                    help="Headless: print only the final answer (reads the prompt from stdin if none)."),
    cwd: Path = typer.Option(Path("."), "--cwd", "-C", help="Project directory; file tools cannot leave it."),
    worktree: Optional[str] = typer.Option(None, "--worktree", "-w", metavar="NAME",
                                           help="Run in the git worktree .agent/worktrees/NAME of the project's "
                                                "repository, on branch agent/NAME (created the first time)."),
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
    tool_profile: Optional[str] = typer.Option(
        None, "--tool-profile", metavar="PROFILE",
        help="full (every tool, sub-agents, todos) or small, for models of a few billion parameters or "
             "less: four tools with one-line descriptions, whole-file writes, the files the prompt names "
             "attached, the tests run after each change, and a prompt that spells out look, test, edit, "
             "re-test. Default: small for --local on the embedded model, else full."),
    max_tokens: Optional[int] = typer.Option(None, "--max-tokens", min=1, help="Most tokens per model reply."),
    output_format: OutputFormat = typer.Option(OutputFormat.text, "--output-format", help="text, json or stream-json."),
    permission_mode: PermissionMode = typer.Option(
        PermissionMode.DEFAULT, "--permission-mode",
        help="What tools may do: default (read only: edits and commands are refused, nobody can "
             "approve them), acceptEdits (read and edit files), plan (read only), "
             "bypassPermissions (read, edit and run commands)."),
    mcp_config: Optional[List[str]] = typer.Option(
        None, "--mcp-config", metavar="FILE",
        help="MCP servers for this run: a JSON file (or string) with mcpServers, as in .mcp.json; may be "
             "repeated. A run with a prompt starts only these and the user's own (~/.agent-code/settings.json)."),
    trust_project: Optional[bool] = typer.Option(
        None, "--trust-project/--no-trust-project",
        help="Trust this folder's own configuration (its .agent/settings*.json, hooks, .agents/skills and "
             ".mcp.json) and record that, as answering yes at the REPL's start does; a folder never trusted "
             "is otherwise used without it, headless. --no-trust-project: use none of it (but its deny and "
             "ask rules) even in a trusted folder."),
    continue_session: bool = typer.Option(False, "--continue", "-c",
                                          help="Continue the most recent session of this project."),
    resume: Optional[str] = typer.Option(None, "--resume", metavar="ID",
                                         help="Continue session ID (an id or a unique prefix of one)."),
    no_session_persistence: bool = typer.Option(False, "--no-session-persistence",
                                                help="Do not save this session under .agent/sessions."),
    context_window: int = typer.Option(DEFAULT_CONTEXT_WINDOW, "--context-window", min=1000, metavar="N",
                                       help="The model's context window in tokens; older turns are "
                                            "summarized when the context reaches 80% of it."),
    no_sandbox: bool = typer.Option(False, "--no-sandbox",
                                    help="Run commands, hooks and MCP servers without the OS sandbox (bubblewrap: "
                                         "writes only in the project and temp, no network) [env: "
                                         "AGENT_CODE_SANDBOX=0]."),
    version: bool = typer.Option(False, "--version", "-V", callback=_version, is_eager=True,
                                 help="Show the version and exit."),
) -> None:
    """agent-code: a coding agent on any Anthropic-compatible model (see ``_HELP``)."""
    from agent_code.agent.agent_tools import install_agent_tools
    from agent_code.agent.loop import Agent
    from agent_code.agent.memory import load_memory
    from agent_code.agent.prompt import system_prompt
    from agent_code.agent.sessions import SessionError, SessionLog, find_session, latest_session, load_session
    from agent_code.agent.settings import SettingsError, apply_cli_settings
    from agent_code.cli.render import make_renderer
    from agent_code.cli.repl import settings_question
    from agent_code.cli.sandbox import wall_opener
    from agent_code.providers import ProviderError, create_provider
    from agent_code.tools import TOOL_PROFILES, ToolContext, default_tools

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
    if continue_session and resume is not None:
        fail("use either -c/--continue or --resume ID, not both", code=2)
    if worktree is not None:  # the session's project is the worktree (agent_code/worktree.py)
        from agent_code.worktree import WorktreeError, ensure

        try:
            tree = ensure(root, worktree)
        except WorktreeError as exc:
            fail(f"--worktree {worktree}: {exc}")
        try:  # its settings files, where they are the versions you trust in the main checkout
            from agent_code.agent.settings import inherit_trust
            from agent_code.worktree import main_worktree

            inherit_trust(tree.path, main_worktree(tree.path))
        except (OSError, WorktreeError):
            pass  # not recorded: the settings review says what it does not use, and why
        root = tree.path
        if not print_mode and fmt == "text":
            print(f"agent-code: worktree {tree.name}: {root} on branch {tree.branch or '(detached HEAD)'} "
                  f"({'created' if tree.created else 'reused'})", file=sys.stderr)
    resumed = resumed_path = None
    if continue_session or resume is not None:
        try:
            resumed_path = latest_session(root) if continue_session else find_session(root, resume or "")
            resumed = load_session(resumed_path)
        except SessionError as exc:
            fail(str(exc))
    if local or engine:
        provider = ProviderName.local
    if provider is ProviderName.scripted and script is None:
        script = DEMO_SCRIPT
    try:
        llm = create_provider(provider.value, model, base_url=base_url, script=script, max_tokens=max_tokens,
                              engine=engine)
    except ProviderError as exc:
        fail(str(exc))
    except Exception as exc:  # a local engine that cannot start (model missing, ...)
        fail(f"{provider.value} provider: {exc}")
    session = None
    if resumed is not None and resumed_path is not None:
        session = SessionLog.reopen(resumed_path, resumed.id)
    elif not no_session_persistence:
        try:
            session = SessionLog.create(root, provider=llm.name, model=llm.model, version=__version__)
        except OSError as exc:  # a read-only project: run anyway, unsaved
            print(f"agent-code: warning: the session is not saved: {exc}", file=sys.stderr)
    memory, memory_files = load_memory(root)
    if fmt == "text":
        renderer = _TextExtras(renderer, quiet=print_mode)
    profile = tool_profile or ("small" if provider is ProviderName.local and not engine else "full")
    if profile not in TOOL_PROFILES:
        fail(f"--tool-profile {tool_profile}: choose {' or '.join(TOOL_PROFILES)}", code=2)
    agent = Agent(llm, default_tools(profile), ToolContext(root),
                  system=system_prompt(root, permission_mode.value, memory, profile),
                  max_steps=max_steps, on_event=renderer, permissions=permission_mode,
                  context_window=context_window, session=session)
    agent.system_for_mode = lambda mode: system_prompt(root, mode, memory, profile)
    test_command: str | None = None
    if profile == "full":  # task (sub-agents), todo_write, exit_plan_mode
        install_agent_tools(agent)
    else:  # a small model starts from the files the task names, and acts before it answers
        agent.tools_first_steps = SMALL_TOOLS_FIRST_STEPS
        from agent_code.agent.autotest import auto_test, detect_test_command
        from agent_code.agent.blocks import block_edits

        test_command = detect_test_command(root)
        if test_command is not None:  # every file change is followed by a test run
            agent.after_tool.append(auto_test(agent, test_command))
        agent.on_stop.append(block_edits(agent))  # a file it answers with in a code block is written
    try:  # the folder's trust (cli/trust.py), then permission rules, defaultMode, hooks and skills (agent/settings.py)
        from agent_code.cli.trust import decide, folder_question

        trusted = decide(root, flag=trust_project, ask=folder_question() if prompt is None else None,
                         current_session=session.path if session is not None else None)
        settings = apply_cli_settings(agent, root, accept=settings_question() if prompt is None else None,
                                      project_trusted=trusted, open_wall=wall_opener(root, no_sandbox))
    except SettingsError as exc:
        fail(str(exc))
    if profile == "small" and prompt is not None:  # the files the task names, as the session's policy allows
        from agent_code.agent.attach import attach_mentioned
        from agent_code.agent.autotest import with_test_report

        attached = attach_mentioned(prompt, agent.ctx, policy=agent.permissions)
        if attached != prompt and test_command is not None:  # the code, and the failure to fix
            reported = with_test_report(attached, agent, test_command)
            if reported != attached:  # its first answer is the fix, as a code block: no tool call
                from agent_code.agent.blocks import fix_request

                agent.tools_first_steps, agent.text_first_steps = 0, 1
                attached = f"{reported}\n\n{fix_request(agent)}"
        prompt = attached
    from agent_code.cli.mcp import mcp_question, session_servers
    from agent_code.mcp import McpConfigError

    try:  # MCP servers and their tools (agent_code/mcp): the project's only in the REPL, approved
        mcp = session_servers(agent, root, settings, mcp_config or [], repl=prompt is None,
                              ask=mcp_question() if prompt is None else None, version=__version__,
                              project=trusted, wall=agent.ctx.wall)
    except McpConfigError as exc:
        fail(str(exc))
    try:
        _session(agent, prompt, mcp, renderer, llm, root, resumed, session, max_steps, memory_files,
                 context_window, worktree)
    finally:
        if mcp is not None:
            mcp.close()


def _session(agent, prompt, mcp, renderer, llm, root, resumed, session, max_steps, memory_files, context_window,
             worktree) -> None:
    """The run itself, once the agent is built (its MCP servers are closed by the caller)."""
    from agent_code.agent.todos import todos_from_dicts

    if resumed is not None:
        agent.restore(resumed.messages, todos_from_dicts(resumed.todos))
    renderer.header({"cwd": str(root), "provider": llm.name, "model": llm.model,
                     "base_url": getattr(llm, "base_url", None), "tools": [t.name for t in agent.tools.list()],
                     "max_steps": max_steps, "permission_mode": agent.permissions.mode.value,
                     "session_id": session.id if session is not None else None,
                     "resumed": resumed is not None, "messages": len(agent.messages),
                     "memory": [f.source for f in memory_files], "context_window": context_window,
                     **({"worktree": worktree} if worktree is not None else {}),
                     **({"mcp_servers": [{"name": st.name, "status": st.status} for st in mcp.servers.values()]}
                        if mcp is not None else {}),
                     "version": __version__})
    for note in resumed.notes if resumed is not None else []:
        print(f"agent-code: note: session {resumed.id}: {note}", file=sys.stderr)

    if prompt is None:
        raise typer.Exit(_repl(agent, mcp))
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


class _TextExtras:
    """Text output for the events ``cli/render.py``'s text renderer does not draw: todo
    lists, compactions and a sub-agent's tool calls (indented under the ``task`` call)."""

    def __init__(self, renderer, quiet: bool) -> None:
        self.renderer = renderer
        self.quiet = quiet
        self.header = renderer.header

    def __call__(self, event: dict) -> None:
        kind = event.get("type")
        if kind not in ("todos", "compaction", "subagent"):
            self.renderer(event)
            return
        if self.quiet:
            return
        console = self.renderer.console
        if kind == "todos":
            from agent_code.agent.todos import render_todos, todos_from_dicts

            console.print("todos:", style="magenta", end=" ")
            console.print(render_todos(todos_from_dicts(event["todos"])).replace("\n", "\n       "), markup=False)
        elif kind == "compaction":
            console.print(f"compaction ({event['trigger']}): {event.get('replaced', 0)} messages summarized, "
                          f"{event.get('kept', 0)} kept"
                          + (f"; {event['error']}" if event.get("error") else ""), style="magenta", markup=False)
        else:
            inner = event["event"]
            if inner.get("type") == "tool_use":
                console.print(f"  [{event['description']}] tool_call: {inner['name']} "
                              f"{str(inner['input'])[:200]}", markup=False, style="dim")
            elif inner.get("type") == "result" and inner.get("is_error"):
                console.print(f"  [{event['description']}] stopped: {inner.get('error') or inner.get('result')}",
                              markup=False, style="dim")


def _repl(agent, mcp=None) -> int:
    """The interactive shell (``cli/repl.py``): prompt_toolkit, slash commands, asking."""
    from agent_code.agent.settings import user_dir
    from agent_code.cli.repl import run_repl

    return run_repl(agent, history_file=user_dir() / "history", mcp=mcp)


def run_main(argv: list[str]) -> None:
    app(args=argv, prog_name="agent-code")
