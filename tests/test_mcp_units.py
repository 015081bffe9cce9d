"""MCP without a server: the config in Claude Code's format, approvals, which servers a session
starts, tool names, results as text, rules and plan mode on MCP tools (agent_code/mcp)."""

from __future__ import annotations

import io
import json
from pathlib import Path
from types import SimpleNamespace

import pytest
from mcp import types as mt

from agent_code.agent.settings import merge_settings
from agent_code.cli.mcp import mcp_question
from agent_code.mcp import (DECLINED, INVALID, NOT_APPROVED, NOT_STARTED, ApprovalStore, McpConfigError, McpManager,
                            cli_servers, parse_servers, plan, project_servers, result_text, tool_name)
from agent_code.mcp.tools import make_tool
from agent_code.policy import PermissionPolicy, RuleSet
from agent_code.tools.base import ToolContext, ToolRegistry, validate_arguments
from agent_code.types import ToolCall

# as Claude Code's documentation writes a project's .mcp.json
CLAUDE_CODE_MCP_JSON = {
    "mcpServers": {
        "everything": {"command": "npx", "args": ["-y", "@modelcontextprotocol/server-everything"], "env": {}},
        "db": {"type": "stdio", "command": "${DB_MCP:-/usr/local/bin/db-mcp}", "args": ["--dsn", "${DB_DSN}"],
               "env": {"DB_USER": "${DB_USER:-reader}"}},
        "tracker": {"type": "http", "url": "https://mcp.example.com/mcp",
                    "headers": {"Authorization": "Bearer ${TRACKER_TOKEN}"}},
    }
}


def test_claude_code_mcp_json_reads_unchanged(tmp_path, monkeypatch):
    monkeypatch.setenv("DB_DSN", "postgres://x")
    monkeypatch.setenv("TRACKER_TOKEN", "t0k")
    monkeypatch.delenv("DB_MCP", raising=False)
    monkeypatch.delenv("DB_USER", raising=False)
    (tmp_path / ".mcp.json").write_text(json.dumps(CLAUDE_CODE_MCP_JSON))
    servers = {s.name: s for s in project_servers(tmp_path)}
    assert [s.problem for s in servers.values()] == [None, None, None]
    assert servers["everything"].transport == "stdio" and servers["everything"].command == "npx"
    assert servers["everything"].args == ("-y", "@modelcontextprotocol/server-everything")
    db = servers["db"]
    assert (db.command, db.args, db.env) == ("/usr/local/bin/db-mcp", ("--dsn", "postgres://x"),
                                             (("DB_USER", "reader"),))
    tracker = servers["tracker"]
    assert tracker.transport == "http" and tracker.headers == (("Authorization", "Bearer t0k"),)
    assert {s.scope for s in servers.values()} == {"project"}
    # an unset variable without a default: that server cannot start, the others can
    monkeypatch.delenv("TRACKER_TOKEN")
    tracker = {s.name: s for s in project_servers(tmp_path)}["tracker"]
    assert tracker.transport is None and "TRACKER_TOKEN" in tracker.problem


@pytest.mark.parametrize("entry, problem", [
    ({"type": "sse", "url": "http://x/sse"}, "sse transport is deprecated"),
    ({"args": ["x"]}, "needs a 'command'"),
    ({"type": "http"}, "needs a 'url'"),
    ({"type": "websocket", "url": "ws://x"}, "unknown transport"),
    ({"url": "ftp://x"}, "must start with http"),
    ({"command": "x", "args": "not a list"}, "'args' must be a list"),
    ({"command": "x", "timeout": -1}, "'timeout'"),
    ("just a string", "must be an object"),
])
def test_an_unusable_entry_is_listed_with_its_reason(entry, problem):
    (server,) = parse_servers({"mcpServers": {"s": entry}}, "project", ".mcp.json")
    assert server.problem is not None and problem in server.problem


def test_url_without_type_is_http_and_timeout_is_in_ms():
    (server,) = parse_servers({"mcpServers": {"s": {"url": "http://127.0.0.1:1/mcp", "timeout": 1500}}},
                              "user", "settings")
    assert server.transport == "http" and server.timeout_s == 1.5


def test_files_that_cannot_be_read_are_errors(tmp_path):
    (tmp_path / ".mcp.json").write_text("{not json")
    with pytest.raises(McpConfigError, match=r"\.mcp\.json is not valid JSON"):
        project_servers(tmp_path)
    with pytest.raises(McpConfigError, match="no such file"):
        cli_servers(str(tmp_path / "missing.json"))
    with pytest.raises(McpConfigError, match="mcpServers"):
        cli_servers('{"mcpServers": []}')
    assert [s.name for s in cli_servers('{"mcpServers": {"a": {"command": "x"}}}')] == ["a"]
    assert project_servers(tmp_path / "nowhere") == []


def test_user_servers_come_only_from_the_users_settings_file():
    merged = merge_settings([("~/.agent-code/settings.json", {"mcpServers": {"mine": {"command": "x"}}}),
                             (".agent/settings.json", {"mcpServers": {"theirs": {"command": "y"}}})])
    assert merged.mcp_servers == {"mine": {"command": "x"}}
    assert any("mcpServers" in w and ".mcp.json" in w for w in merged.warnings)


def test_which_servers_start(tmp_path):
    """The user's and --mcp-config's always; a project's only in the REPL once approved,
    remembered per project and per entry as written, in the user's store."""
    store = ApprovalStore(tmp_path / "home" / ".agent-code" / "mcp-approvals.json")
    project = tmp_path / "project"
    project.mkdir()
    servers = (parse_servers({"mcpServers": {"p1": {"command": "a"}, "p2": {"command": "b"},
                                             "bad": {"type": "sse", "url": "http://x"}}}, "project", ".mcp.json")
               + parse_servers({"mcpServers": {"u": {"command": "c"}}}, "user", "~/.agent-code/settings.json")
               + parse_servers({"mcpServers": {"c": {"command": "d"}}}, "cli", "--mcp-config x"))

    def states(planned):
        return {p.config.name: (p.start, p.status) for p in planned}

    headless = states(plan(project, servers, store, repl=True, ask=None))
    assert headless == {"p1": (False, NOT_APPROVED), "p2": (False, NOT_APPROVED), "bad": (False, INVALID),
                        "u": (True, NOT_STARTED), "c": (True, NOT_STARTED)}
    asked = []
    answers = {"p1": True, "p2": False}
    repl = states(plan(project, servers, store, repl=True,
                       ask=lambda config: asked.append(config.name) or answers[config.name]))
    assert asked == ["p1", "p2"]
    assert repl["p1"] == (True, NOT_STARTED) and repl["p2"] == (False, DECLINED)
    # remembered: not asked again; a run with a prompt still starts no project server
    assert states(plan(project, servers, store, repl=True, ask=lambda c: 1 / 0))["p1"] == (True, NOT_STARTED)
    assert states(plan(project, servers, store, repl=False))["p1"][0] is False
    # the answer is the user's, outside the project; a changed entry is asked about again
    assert not list(project.iterdir())
    assert "p1" in json.loads(store.path.read_text())["projects"][str(project.resolve())]
    changed = parse_servers({"mcpServers": {"p1": {"command": "a", "args": ["--evil"]}}}, "project", ".mcp.json")
    assert store.decision(project, changed[0]) is None
    # another project with the same entry is another question
    other = tmp_path / "other"
    other.mkdir()
    assert store.decision(other, servers[0]) is None


class FakeTerminal(io.StringIO):
    def isatty(self) -> bool:
        return True


def test_the_approval_question_is_asked_on_a_terminal_only():
    (server,) = parse_servers({"mcpServers": {"db": {"command": "db-mcp", "env": {"TOKEN": "s3cret"}}}},
                              "project", ".mcp.json")
    assert mcp_question(io.StringIO("y\n"), io.StringIO()) is None     # piped: nobody to ask
    out = FakeTerminal()
    assert mcp_question(FakeTerminal("maybe\ny\n"), out)(server) is True
    assert "db-mcp" in out.getvalue() and "TOKEN" in out.getvalue() and "s3cret" not in out.getvalue()
    assert mcp_question(FakeTerminal("\n"), FakeTerminal())(server) is False
    assert mcp_question(FakeTerminal(""), FakeTerminal())(server) is False


def test_tool_names():
    assert tool_name("everything", "get-sum") == "mcp__everything__get-sum"
    assert tool_name("my server", "a.b/c") == "mcp__my_server__a_b_c"
    long = [tool_name("s" * 40, "t" * 40 + suffix) for suffix in ("1", "2")]
    assert all(len(n) == 64 for n in long) and long[0] != long[1]


def test_results_as_text():
    png = "iVBORw0KGgo="
    result = mt.CallToolResult(content=[
        mt.TextContent(type="text", text="hello"),
        mt.ImageContent(type="image", data=png, mime_type="image/png"),
        mt.AudioContent(type="audio", data=png, mime_type="audio/wav"),
        mt.ResourceLink(type="resource_link", uri="file:///x.txt", name="x"),
        mt.EmbeddedResource(type="resource", resource=mt.TextResourceContents(uri="mem://a", text="inside")),
        mt.EmbeddedResource(type="resource", resource=mt.BlobResourceContents(uri="mem://b", blob=png,
                                                                               mime_type="application/zip")),
    ])
    assert result_text(result).splitlines() == [
        "hello", "[image: image/png, 8 bytes — not shown]", "[audio: audio/wav, 8 bytes — not shown]",
        "[resource link: file:///x.txt (x)]", "[resource mem://a]", "inside",
        "[resource mem://b: application/zip, 8 bytes — not shown]"]
    assert result_text(mt.CallToolResult(content=[], structured_content={"t": 1})) == '{\n  "t": 1\n}'
    assert result_text(mt.CallToolResult(content=[])) == "(no output)"


def _spec(name: str, read_only: bool | None, schema: dict | None = None) -> mt.Tool:
    annotations = mt.ToolAnnotations(read_only_hint=read_only) if read_only is not None else None
    return mt.Tool(name=name, description=f"{name} tool",
                   input_schema=schema or {"type": "object", "properties": {"q": {"type": "string"}}},
                   annotations=annotations)


def _mcp_registry() -> tuple[ToolRegistry, McpManager]:
    manager = McpManager(Path("."))
    registry = ToolRegistry()
    for name, ro in (("search", True), ("delete", False), ("run", None)):
        registry.register(make_tool(manager, "everything", _spec(name, ro, {
            "type": "object", "properties": {"command": {"type": "string"}, "q": {"type": ["string", "null"]}}})))
    return registry, manager


def test_kind_follows_read_only_hint_and_the_schema_is_the_servers():
    registry, _ = _mcp_registry()
    kinds = {t.name: (t.kind, t.origin) for t in registry.list()}
    assert kinds == {"mcp__everything__search": ("read", "mcp:everything"),
                     "mcp__everything__delete": ("execute", "mcp:everything"),
                     "mcp__everything__run": ("execute", "mcp:everything")}
    assert registry.get("mcp__everything__run").input_schema["properties"]["q"] == {"type": ["string", "null"]}
    # JSON Schema the built-in validator does not model (a list of types, boolean schemas) is left to the server
    assert validate_arguments({"properties": {"q": {"type": ["string", "null"]}, "b": True}}, {"q": 1, "b": 2}) == []


def test_a_call_to_a_server_that_is_not_running_is_a_tool_error():
    registry, _ = _mcp_registry()
    result = registry.run(ToolCall("t1", "mcp__everything__search", {"q": "x"}), ToolContext(Path(".")))
    assert result.is_error and "MCP server 'everything' is not running" in result.content


def test_rules_name_mcp_tools_by_pattern_and_server():
    registry, _ = _mcp_registry()
    search, delete = registry.get("mcp__everything__search"), registry.get("mcp__everything__delete")
    for deny in ("mcp__everything__*", "mcp__everything", "mcp__*", "MCP__Everything__*"):
        policy = PermissionPolicy("bypassPermissions", rules=RuleSet.from_lists(deny=[deny], source="test"))
        explained = policy.explain(search, {"q": "x"})
        assert explained.behavior == "deny" and explained.rule == deny, deny
        assert "deny rule" in explained.message
    for other in ("mcp__every", "mcp__other__*", "mcp__everything__s", "mcp__everything__x*"):
        policy = PermissionPolicy("bypassPermissions", rules=RuleSet.from_lists(deny=[other]))
        assert policy.explain(search, {"q": "x"}).behavior == "allow", other
    # an allow rule for one tool; the default mode asks about the rest of the server's execute tools
    policy = PermissionPolicy("default", rules=RuleSet.from_lists(allow=["mcp__everything__delete(x*)"]))
    assert policy.explain(delete, {"q": "xyz"}).behavior == "allow"
    assert policy.explain(delete, {"q": "abc"}).behavior == "ask"
    assert policy.explain(search, {"q": "abc"}).behavior == "allow"   # read-only: allowed like read_file


def test_an_mcp_tools_command_argument_is_not_read_as_a_shell_command():
    """Plan mode runs a read-only *shell* command as a read; an MCP tool's ``command`` is its
    server's business, so it stays what its kind says — and the deny list does not read it."""
    registry, _ = _mcp_registry()
    run = registry.get("mcp__everything__run")
    plan_mode = PermissionPolicy("plan")
    assert plan_mode.explain(run, {"command": "ls"}).behavior == "deny"
    bypass = PermissionPolicy("bypassPermissions")
    assert bypass.explain(run, {"command": "rm -rf /"}).behavior == "allow"
    assert bypass.explain(run, {"command": "eval $x"}).behavior == "allow"


def test_plan_mode_offers_only_read_only_mcp_tools():
    from agent_code.agent.loop import Agent
    from agent_code.tools import default_tools

    registry, _ = _mcp_registry()
    tools = default_tools()
    for t in registry.list():
        tools.register(t)
    agent = Agent(SimpleNamespace(name="none", model="none"), tools, ToolContext(Path(".")), permissions="plan")
    offered = {t.name for t in agent.offered_tools()}
    assert "mcp__everything__search" in offered
    assert not offered & {"mcp__everything__delete", "mcp__everything__run"}
    assert {"bash", "write_file"} <= offered   # agent-code's own tools stay (the policy refuses them)
    agent.set_permission_mode("default")
    assert {"mcp__everything__delete", "mcp__everything__run"} <= {t.name for t in agent.offered_tools()}
