"""``agent-code mcp [list] [-C DIR] [--mcp-config FILE]...``: the MCP servers a session in DIR
would have, their state and their tools; and the MCP part of a session's start
(:func:`session_servers`, used by ``cli/run.py``; the servers themselves: ``agent_code/mcp``).

``list`` starts what the REPL would start — the user's servers (``~/.agent-code/settings.json``
``mcpServers``), those of ``--mcp-config``, and the project's (``.mcp.json``) that the user
approved and whose files are still those approved, in a folder the user trusts
(``cli/trust.py``) — prints each server (scope, file, what runs with secrets masked,
``connected`` with its tools and their kinds, or ``failed``/``not approved``/``declined``
with why, e.g. "changed since you approved it: server.py") and stops them again. Stdio
servers run inside the OS sandbox, as in a session (``agent_code/confine``).
It never asks: approving a project server is the REPL's, on a terminal.
Exit codes: 0 listed, 1 a servers file that cannot be read.
"""

from __future__ import annotations

import sys
from pathlib import Path
from typing import TYPE_CHECKING, Any, Callable, List, Optional, TextIO

import typer

from agent_code.cli.confirm import terminal, yes_no
from agent_code.cli.project import fail, project_dir

if TYPE_CHECKING:
    from agent_code.agent.loop import Agent
    from agent_code.agent.settings import Settings
    from agent_code.confine import Wall
    from agent_code.mcp import McpManager, ServerConfig, Verdict

app = typer.Typer(add_completion=False, pretty_exceptions_enable=False, rich_markup_mode=None,
                  invoke_without_command=True, help="MCP servers: their state and tools.")
_given: dict[str, Any] = {}
CWD = typer.Option(None, "--cwd", "-C", help="Project directory (default: the current one).")
CONFIG = typer.Option(None, "--mcp-config", metavar="FILE", help="More servers: a JSON file (or string) with "
                                                                "mcpServers, as for a run.")


def _warn(message: str) -> None:
    print(f"agent-code: warning: {message}", file=sys.stderr)


def configured_servers(root: Path, user_servers: dict[str, Any], cli_values: list[str],
                       warn: Callable[[str], None] = _warn, project: bool = True) -> list[Any]:
    """Every server a session in ``root`` knows about, project < user < --mcp-config by name;
    the project's (``.mcp.json``) only with ``project`` (a folder the user trusts: cli/trust.py).
    Raises ``McpConfigError`` for an unreadable ``--mcp-config``; a broken ``.mcp.json`` is a
    warning (its servers are left out)."""
    from agent_code.mcp import McpConfigError, cli_servers, merge, parse_servers, project_servers

    cli = [server for value in cli_values for server in cli_servers(value, Path.cwd())]
    try:
        servers = project_servers(root) if project else []
    except McpConfigError as exc:
        warn(f"{exc}; its MCP servers are not used")
        servers = []
    user = parse_servers({"mcpServers": user_servers}, "user", "~/.agent-code/settings.json")
    return merge(servers, user, cli)


def session_servers(agent: Agent, root: Path, settings: Settings | None, cli_values: list[str], *, repl: bool,
                    ask: Callable[..., bool] | None = None, version: str = "0",
                    warn: Callable[[str], None] = _warn, project: bool = True,
                    wall: Wall | None = None) -> McpManager | None:
    """Start the session's MCP servers and add their tools to ``agent``; the
    :class:`~agent_code.mcp.McpManager` (close it at the end), or None when there are none.
    ``project``: the project's ``.mcp.json`` is read (a folder the user trusts)."""
    from agent_code.agent.settings import user_dir
    from agent_code.mcp import (APPROVALS_FILE, FAILED, INVALID, NOT_APPROVED, NOT_STARTED, ApprovalStore, McpManager,
                                plan, start_servers)
    from agent_code.mcp.config import printable

    servers = configured_servers(root, getattr(settings, "mcp_servers", {}) or {}, cli_values, warn, project)
    if not servers:
        return None
    planned = plan(root, servers, ApprovalStore(user_dir() / APPROVALS_FILE), repl=repl, ask=ask, warn=warn)
    manager = McpManager(root, client_version=version, wall=wall)
    start_servers(manager, planned)
    for state in manager.servers.values():
        if state.status in (FAILED, INVALID):
            warn(printable(f"MCP server {state.name} ({state.config.source}): {state.status}: {state.error}"))
        elif state.status in (NOT_STARTED, NOT_APPROVED) and state.config.scope == "project":
            print(printable(f"agent-code: note: MCP server {state.name} ({state.config.source}) not started: "
                            f"{state.error}"),
                  file=sys.stderr)
    add_tools(agent, manager, warn)
    return manager


def add_tools(agent: Agent, manager: McpManager, warn: Callable[[str], None] = _warn) -> None:
    """Register the connected servers' tools that ``agent`` does not have yet."""
    from agent_code.mcp import server_tools

    for tool in server_tools(manager):
        existing = agent.tools.get(tool.name)
        if existing is None:
            agent.tools.register(tool)
        elif existing.origin != tool.origin:
            warn(f"MCP tool {tool.name} is left out: a tool of that name exists ({existing.origin or 'built in'})")


def mcp_question(stdin: TextIO | None = None,
                 stdout: TextIO | None = None) -> Callable[[ServerConfig, Optional[Verdict]], bool] | None:
    """The REPL's start-up question about a project server not yet approved (or changed since):
    y/N. None — nobody to ask, so it does not start — unless stdin and stdout are a terminal
    (piped input may be a command the agent ran). The question shows what runs (secrets
    masked), the files the approval covers and, from ``verdict``, what changed."""
    from agent_code.mcp.config import printable

    pair = terminal(stdin, stdout)
    if pair is None:
        return None
    stdin, out = pair

    def ask(config: ServerConfig, verdict: Optional[Verdict] = None) -> bool:
        print(f"The project's {config.source} names the MCP server '{printable(config.name)}':\n"
              f"  {config.describe()}", file=out)
        if config.env:
            print(f"  with environment variables {printable(', '.join(k for k, _ in config.env))}", file=out)
        if verdict is not None:
            files = verdict.footprint.files()
            if files:
                print(f"  it runs {printable(', '.join(files[:10]))}" + (f" and {len(files) - 10} more" if len(files) > 10
                                                               else ""), file=out)
            if verdict.why():
                print(f"  {printable(verdict.why() or '')}", file=out)
            for why in verdict.footprint.unpinned:
                print(f"  {why}: an approval lasts this start only", file=out)
        print("A server is a program that runs as you, and the project (or a session of the agent) wrote "
              "this entry: approve only one you know.", file=out, flush=True)
        return yes_no(stdin, out, f"start MCP server '{printable(config.name)}' (now and in later sessions)?")

    return ask


@app.callback()
def mcp(ctx: typer.Context, cwd: Optional[Path] = CWD, mcp_config: Optional[List[str]] = CONFIG) -> None:
    """MCP servers: ``list`` (the default) shows them, their state and their tools."""
    _given.update(cwd=cwd, mcp_config=mcp_config)
    if ctx.invoked_subcommand is None:
        list_(cwd, mcp_config)


@app.command("list")
def list_(cwd: Optional[Path] = CWD, mcp_config: Optional[List[str]] = CONFIG) -> None:
    """Each server: where it is configured, whether it is approved, starts or fails, and its tools."""
    from agent_code import __version__
    from agent_code.agent.settings import SettingsError, folder_trusted, load_trusted_settings, user_dir
    from agent_code.mcp.config import PROJECT_FILE
    from agent_code.mcp import (APPROVALS_FILE, ApprovalStore, McpConfigError, McpManager, describe_servers, plan,
                                start_servers)

    root = project_dir("mcp", cwd, _given.get("cwd"))
    trusted = folder_trusted(root)
    try:
        settings = load_trusted_settings(root, warn=_warn, project_trusted=trusted)
        servers = configured_servers(root, settings.mcp_servers, list(mcp_config or _given.get("mcp_config") or []),
                                     project=trusted)
    except (SettingsError, McpConfigError) as exc:
        fail("mcp", str(exc))
    planned = plan(root, servers, ApprovalStore(user_dir() / APPROVALS_FILE), repl=True)
    from agent_code.cli.sandbox import session_wall

    wall = session_wall(root, settings.sandbox) if any(p.start for p in planned) else None
    with McpManager(root, client_version=__version__, wall=wall) as manager:
        start_servers(manager, planned)
        print("\n".join(describe_servers(manager)))
    if not trusted and ((root / PROJECT_FILE).exists() or (root / PROJECT_FILE).is_symlink()):
        print(f"{PROJECT_FILE}: not used: the folder is not trusted (agent-code --trust-project, or answer yes at "
              "the REPL's start there)")


def main(argv: list[str]) -> None:
    app(args=argv, prog_name="agent-code mcp")
