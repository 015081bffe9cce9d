"""MCP servers: their tools join the agent's, on the official ``mcp`` SDK.

- ``config`` — the servers of ``.mcp.json`` (Claude Code's format), the user's settings and
  ``--mcp-config``;
- ``approvals`` — the user's answers about project servers, in ``~/.agent-code/``;
- ``client`` — :class:`McpManager`: the SDK's async sessions (stdio, Streamable HTTP) on a
  loop of their own, calls with timeouts, servers that die mid-session;
- ``tools`` — each server tool as an agent-code tool ``mcp__<server>__<tool>``.

**Which servers start** (:func:`plan`): the user's own (``mcpServers`` in
``~/.agent-code/settings.json``) and those passed with ``--mcp-config`` always; a project's
(``.mcp.json``) only in the REPL, and only once the user approved it there — asked at the
start on a terminal, remembered per project and per entry *and* per what the entry runs
(``footprint``: the resolved command, the files its arguments and environment name; a change
is asked about again, and the server stays off until then — ``agent-code mcp list`` says
"changed since you approved it: FILE"). The footprint approved is checked again immediately
before the process is spawned. A run with a prompt (``-p``, headless) never starts a project's servers: the
project, or a session of the agent, may have written ``.mcp.json``; pass
``--mcp-config .mcp.json`` to use it there on purpose.
"""

from __future__ import annotations

import inspect
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Callable

from agent_code.mcp.approvals import APPROVALS_FILE, ApprovalStore, Verdict
from agent_code.mcp.client import (CONNECTED, DECLINED, EXITED, FAILED, INVALID, NOT_APPROVED, NOT_STARTED,
                                   STOPPED, McpCallError, McpManager, ServerState)
from agent_code.mcp.config import (PROJECT_FILE, McpConfigError, ServerConfig, cli_servers, merge, parse_servers,
                                   project_servers)
from agent_code.mcp.footprint import Footprint, footprint
from agent_code.mcp.tools import result_text, server_tools, tool_name

__all__ = ["APPROVALS_FILE", "ApprovalStore", "CONNECTED", "DECLINED", "EXITED", "FAILED", "Footprint", "INVALID",
           "McpCallError", "McpConfigError", "McpManager", "NOT_APPROVED", "NOT_STARTED", "PROJECT_FILE",
           "STOPPED", "ServerConfig", "ServerState", "Planned", "Verdict", "cli_servers", "describe_servers",
           "footprint", "guard", "merge", "parse_servers", "plan", "project_servers", "result_text", "server_tools", "start_servers",
           "tool_name"]

HEADLESS_NOTE = ("a run with a prompt starts no project server (pass --mcp-config .mcp.json to use them); "
                 "the REPL starts it once you approve it")
UNAPPROVED_NOTE = "not approved yet: start agent-code (the REPL) in a terminal here to approve it"
DECLINED_NOTE = "you declined it (/mcp approve NAME in the REPL approves it)"


@dataclass
class Planned:
    config: ServerConfig
    start: bool
    status: str = NOT_STARTED
    reason: str | None = None
    approved: Footprint | None = None   # a project server's footprint as approved: checked again at spawn


def ask_about(ask: Callable[..., bool], config: ServerConfig, verdict: Verdict) -> bool:
    """``ask(config, verdict)`` when ``ask`` takes the verdict (what changed, what it runs),
    else ``ask(config)``."""
    try:
        takes = len(inspect.signature(ask).parameters) >= 2
    except (TypeError, ValueError):
        takes = False
    return ask(config, verdict) if takes else ask(config)


def plan(root: Path, servers: list[ServerConfig], approvals: ApprovalStore, *, repl: bool,
         ask: Callable[..., bool] | None = None,
         warn: Callable[[str], None] | None = None) -> list[Planned]:
    """Which of ``servers`` start in this session (module doc). ``repl``: an interactive
    session (project servers may start); ``ask``: the start-up question for a project server
    not yet answered or changed since — ``ask(config)`` or ``ask(config, verdict)`` (None:
    nobody to ask)."""
    out = []
    for config in servers:
        if config.problem is not None:
            out.append(Planned(config, False, INVALID, config.problem))
        elif config.scope != "project":
            out.append(Planned(config, True))
        elif not repl:
            out.append(Planned(config, False, NOT_STARTED, HEADLESS_NOTE))
        else:
            verdict = approvals.check(root, config)
            decision = verdict.decision
            if decision is None and ask is not None:
                decision = "approved" if ask_about(ask, config, verdict) else "declined"
                try:   # what was shown is what is recorded, and what the spawn is checked against
                    approvals.record(root, config, decision, verdict.footprint)
                except OSError as exc:
                    if warn is not None:
                        warn(f"your answer about the MCP server {config.name} could not be saved in "
                             f"{approvals.path} ({exc.strerror or exc}); you will be asked again")
            if decision == "approved":
                out.append(Planned(config, True, approved=verdict.footprint))
            elif decision == "declined":
                out.append(Planned(config, False, DECLINED, DECLINED_NOTE))
            else:
                why = verdict.why()
                out.append(Planned(config, False, NOT_APPROVED, f"{why}; {UNAPPROVED_NOTE}" if why else UNAPPROVED_NOTE))
    return out


def guard(config: ServerConfig, root: Path, approved: Footprint) -> Callable[[], str | None]:
    """The check run immediately before a project server is spawned: None when what it runs
    is still what was approved, else why it must not start."""
    def check() -> str | None:
        changed = footprint(config, root).changed(approved.pins)
        if not changed:
            return None
        return ("not started: changed since you approved it: " + ", ".join(changed[:8])
                + (f" and {len(changed) - 8} more" if len(changed) > 8 else ""))

    return check


def start_servers(manager: McpManager, planned: list[Planned]) -> None:
    """Start the planned servers (concurrently) and list the others with their reason; an
    approved project server is checked against its approval immediately before its spawn."""
    for p in planned:
        if not p.start:
            manager.add(p.config, p.status, p.reason)
    guards: dict[str, Any] = {p.config.name: guard(p.config, manager.root, p.approved)
                              for p in planned if p.start and p.approved is not None}
    manager.start([p.config for p in planned if p.start], guards=guards)
    order = [p.config.name for p in planned]
    manager.servers = {name: manager.servers[name] for name in order if name in manager.servers}


def describe_servers(manager: McpManager, tools: bool = True) -> list[str]:
    """What ``agent-code mcp list`` and ``/mcp`` print: a line per server (its scope, where it
    was read, what runs, its state) and, when connected, a line per tool with its kind."""
    from agent_code.mcp.config import printable
    from agent_code.mcp.tools import make_tool

    if not manager.servers:
        return ["no MCP servers (add them to .mcp.json, ~/.agent-code/settings.json \"mcpServers\", "
                "or pass --mcp-config FILE)"]
    lines = []
    for state in manager.servers.values():
        config = state.config
        status = state.status
        if status == CONNECTED:
            named = f" {state.server_name} {state.server_version or ''}".rstrip() if state.server_name else ""
            status = f"connected{named}, {len(state.tools)} tool{'s' if len(state.tools) != 1 else ''}"
        approval = ""
        if config.scope == "project" and state.status not in (NOT_APPROVED, DECLINED, INVALID, NOT_STARTED):
            approval = ", approved"
        lines.append(printable(f"{config.name}  [{config.scope}: {config.source}{approval}]  {status}"))
        if config.problem is None:
            lines.append(f"    {config.describe()}")
        if state.error:
            lines.append(f"    {printable(state.error)}")
        if tools and state.status == CONNECTED:
            for spec in state.tools:
                tool = make_tool(manager, config.name, spec)
                lines.append(f"    {tool.name}  ({tool.kind})")
    return lines
