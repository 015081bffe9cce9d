"""MCP against the real reference servers from npm (``@modelcontextprotocol/server-everything``
and ``server-filesystem``, installed into ``.cache/node`` by ``scripts/test.sh`` from
``tests/node/package.json``), over stdio and Streamable HTTP, with the real ``mcp`` SDK: a
scripted agent lists and calls tools, is refused by rules and hooks, times out, and survives
its servers being killed; ``.mcp.json`` as Claude Code users write it; project servers that
were never approved never start. Each server process is started once per module where it can be.
"""

from __future__ import annotations

import json
import os
import shutil
import socket
import subprocess
import sys
import time
from pathlib import Path

import pytest

from agent_code.agent.hooks import Hooks, parse_hooks
from agent_code.agent.loop import Agent
from agent_code.mcp import (APPROVALS_FILE, CONNECTED, ApprovalStore, McpManager, parse_servers, plan,
                            project_servers, server_tools)
from agent_code.policy import PermissionPolicy, RuleSet
from agent_code.providers.scripted import ScriptedProvider
from agent_code.tools import ToolContext, default_tools
from tests.conftest import REPO, cli_env

NODE_MODULES = next((Path(p) for p in (os.environ.get("AGENT_CODE_NODE_MODULES"),
                                       REPO / ".cache" / "node" / "node_modules") if p and Path(p).is_dir()),
                    REPO / ".cache" / "node" / "node_modules")
EVERYTHING = NODE_MODULES / "@modelcontextprotocol" / "server-everything" / "dist" / "index.js"
FILESYSTEM = NODE_MODULES / "@modelcontextprotocol" / "server-filesystem" / "dist" / "index.js"
NODE = shutil.which("node")
pytestmark = pytest.mark.skipif(
    NODE is None or not EVERYTHING.is_file() or not FILESYSTEM.is_file(),
    reason="needs node and the npm packages @modelcontextprotocol/server-everything and server-filesystem "
           "(bash scripts/test.sh installs them into .cache/node from tests/node/package.json)")


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def start_http_server() -> tuple[subprocess.Popen, str]:
    """server-everything in its Streamable HTTP mode on a loopback port (its README: PORT)."""
    port = free_port()
    proc = subprocess.Popen([NODE, str(EVERYTHING), "streamableHttp"], env={**os.environ, "PORT": str(port)},
                            stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)
    deadline = time.monotonic() + 30
    assert proc.stderr is not None
    while time.monotonic() < deadline:
        line = proc.stderr.readline()
        if "listening on port" in line:
            return proc, f"http://127.0.0.1:{port}/mcp"
        if not line and proc.poll() is not None:
            break
    proc.kill()
    raise RuntimeError("server-everything (streamableHttp) did not start")


def stop(proc: subprocess.Popen) -> None:
    if proc.poll() is None:
        proc.kill()
    proc.wait(timeout=10)
    if proc.stderr is not None:
        proc.stderr.close()


@pytest.fixture(scope="module")
def http_url():
    proc, url = start_http_server()
    yield url
    stop(proc)


@pytest.fixture(scope="module")
def project(tmp_path_factory) -> Path:
    root = tmp_path_factory.mktemp("project")
    (root / "notes.txt").write_text("the answer is 42\n")
    return root


@pytest.fixture(scope="module")
def servers(project, http_url):
    """One manager for the module: everything over stdio, filesystem over stdio, everything
    over HTTP (as ``remote``, with a 1.5 s call timeout)."""
    configs = parse_servers({"mcpServers": {
        "everything": {"command": NODE, "args": [str(EVERYTHING), "stdio"]},
        "filesystem": {"command": NODE, "args": [str(FILESYSTEM), str(project)]},
        "remote": {"type": "http", "url": http_url, "timeout": 1500},
    }}, "cli", "--mcp-config test")
    with McpManager(project) as manager:
        manager.start(configs)
        assert {n: s.status for n, s in manager.servers.items()} == {
            "everything": CONNECTED, "filesystem": CONNECTED, "remote": CONNECTED}, \
            {n: s.error for n, s in manager.servers.items()}
        yield manager


def make_agent(manager, root: Path, tmp_path: Path, turns: list[list[dict]], mode: str = "bypassPermissions",
               **policy) -> tuple[Agent, list[dict]]:
    tools = default_tools()
    for tool in server_tools(manager):
        tools.register(tool)
    script = tmp_path / f"script-{len(list(tmp_path.glob('script-*')))}.jsonl"
    script.write_text("".join(json.dumps({"content": t}) + "\n" for t in turns))
    events: list[dict] = []
    agent = Agent(ScriptedProvider(script), tools, ToolContext(root), on_event=events.append,
                  permissions=PermissionPolicy(mode, root=root, **policy))
    return agent, events


def use(name: str, tool_input: dict, n: int) -> list[dict]:
    return [{"type": "tool_use", "id": f"t{n}", "name": name, "input": tool_input}]


def results(events: list[dict]) -> list[tuple[str, bool, str]]:
    return [(e["name"], e["is_error"], e["content"]) for e in events if e["type"] == "tool_result"]


def test_a_scripted_agent_lists_and_calls_tools_over_stdio_and_http(servers, project, tmp_path):
    tools = {t.name: t for t in server_tools(servers)}
    everything = {t.name: t for t in servers.servers["everything"].tools}
    # the server's own JSON Schema, and its read-only hint as the kind
    assert tools["mcp__everything__echo"].input_schema == everything["echo"].input_schema
    assert tools["mcp__everything__echo"].input_schema["properties"]["message"]["type"] == "string"
    assert {n: tools[n].kind for n in ("mcp__everything__echo", "mcp__remote__echo",
                                        "mcp__everything__toggle-simulated-logging",
                                        "mcp__filesystem__read_text_file", "mcp__filesystem__write_file")} == {
        "mcp__everything__echo": "read", "mcp__remote__echo": "read",
        "mcp__everything__toggle-simulated-logging": "execute",
        "mcp__filesystem__read_text_file": "read", "mcp__filesystem__write_file": "execute"}

    agent, events = make_agent(servers, project, tmp_path, [
        use("mcp__everything__echo", {"message": "over stdio"}, 1),
        use("mcp__remote__echo", {"message": "over http"}, 2),
        use("mcp__remote__get-tiny-image", {}, 3),
        use("mcp__everything__get-resource-reference", {"resourceType": "Text", "resourceId": 0}, 4),
        use("mcp__filesystem__read_text_file", {"path": str(project / "notes.txt")}, 5),
        use("mcp__filesystem__write_file", {"path": str(project / "made.txt"), "content": "by mcp\n"}, 6),
        [{"type": "text", "text": "all done"}],
    ])
    result = agent.run("use the servers")
    assert result.ok and result.final == "all done"
    got = results(events)
    assert got[0] == ("mcp__everything__echo", False, "Echo: over stdio")
    assert got[1] == ("mcp__remote__echo", False, "Echo: over http")
    assert not got[2][1] and "[image: image/png" in got[2][2] and "not shown]" in got[2][2]
    assert got[3][1] is True and "Invalid resourceId: 0" in got[3][2]       # the server's isError result
    assert got[4] == ("mcp__filesystem__read_text_file", False, "the answer is 42\n".rstrip("\n")) or \
        got[4][2].startswith("the answer is 42")
    assert not got[5][1] and (project / "made.txt").read_text() == "by mcp\n"


def test_deny_rules_and_hooks_apply_to_mcp_tools_by_name(servers, project, tmp_path):
    rules = RuleSet.from_lists(deny=["mcp__everything__*"], source=".agent/settings.json")
    hooks = Hooks(parse_hooks({"PreToolUse": [{"matcher": "mcp__remote__get-.*", "hooks": [
        {"type": "command", "command": "echo 'no sums today' >&2; exit 2"}]}]}), project)
    agent, events = make_agent(servers, project, tmp_path, [
        use("mcp__everything__echo", {"message": "refused"}, 1),
        use("mcp__remote__echo", {"message": "allowed"}, 2),
        use("mcp__remote__get-sum", {"a": 1, "b": 2}, 3),
        [{"type": "text", "text": "ok"}],
    ], rules=rules, pre_tool_use=hooks.pre_tool_use)
    result = agent.run("try")   # bypassPermissions: the deny rule holds in every mode
    got = results(events)
    assert got[0][1] and "deny rule mcp__everything__*" in got[0][2] and ".agent/settings.json" in got[0][2]
    assert got[1] == ("mcp__remote__echo", False, "Echo: allowed")
    assert got[2][1] and "no sums today" in got[2][2]
    assert [d["tool_name"] for d in result.permission_denials] == ["mcp__everything__echo", "mcp__remote__get-sum"]
    # plan mode offers the read-only ones only, and refuses the others if called anyway
    agent.set_permission_mode("plan")
    offered = {t.name for t in agent.offered_tools()}
    assert "mcp__filesystem__read_text_file" in offered and "mcp__filesystem__write_file" not in offered
    assert not agent.permissions.check(agent.tools.get("mcp__filesystem__write_file"), {}).allowed


def test_a_call_past_its_timeout_is_a_tool_error_and_the_server_stays(servers, project, tmp_path):
    agent, events = make_agent(servers, project, tmp_path, [
        use("mcp__remote__trigger-long-running-operation", {"duration": 10, "steps": 5}, 1),
        use("mcp__remote__echo", {"message": "still here"}, 2),
        [{"type": "text", "text": "ok"}],
    ])
    started = time.monotonic()
    assert agent.run("slow").ok
    got = results(events)
    assert got[0][1] and "did not answer within 1.5 s" in got[0][2]
    assert got[1] == ("mcp__remote__echo", False, "Echo: still here")
    assert time.monotonic() - started < 8


def test_an_http_server_killed_mid_session_is_a_clear_tool_error(project, tmp_path):
    proc, url = start_http_server()
    try:
        with McpManager(project) as manager:
            manager.start(parse_servers({"mcpServers": {"web": {"type": "http", "url": url}}}, "cli", "test"))
            agent, events = make_agent(manager, project, tmp_path, [
                use("mcp__web__echo", {"message": "before"}, 1),
                use("bash", {"command": f"kill -9 {proc.pid}"}, 2),
                use("mcp__web__echo", {"message": "after"}, 3),
                use("mcp__web__echo", {"message": "again"}, 4),
                [{"type": "text", "text": "survived"}],
            ])
            result = agent.run("go")
            got = results(events)
            assert result.ok and result.final == "survived"
            assert got[0] == ("mcp__web__echo", False, "Echo: before")
            assert got[2][1] and "MCP server 'web'" in got[2][2]
            assert got[3][1] and "MCP server 'web' is not running" in got[3][2]
            assert manager.servers["web"].status != CONNECTED
    finally:
        stop(proc)


# --- the CLI, in subprocesses ----------------------------------------------------------

def trust_folder(root: Path, home: Path, how: str) -> None:
    from agent_code.agent.settings import trust_folder as record

    record(root, home, how=how)


def run_agent_code(*args: str, home: Path, cwd: Path, input: str | None = None,
                   **env: str) -> subprocess.CompletedProcess[str]:
    """The CLI with the OS sandbox off: these tests are about the MCP client (servers that
    leave markers outside the project, an agent that kills its own server with bash), and the
    wall would stop both by itself (tests/test_confine_wall.py runs a server inside it)."""
    env = {"AGENT_CODE_SANDBOX": "0", **env}
    return subprocess.run([sys.executable, "-m", "agent_code", *args], capture_output=True, text=True,
                          cwd=cwd, env=cli_env(HOME=str(home), **env), input=input, timeout=90)


def write_script(path: Path, turns: list[list[dict]]) -> Path:
    path.write_text("".join(json.dumps({"content": t}) + "\n" for t in turns))
    return path


def stream_results(stdout: str) -> list[tuple[str, bool, str]]:
    events = [json.loads(line) for line in stdout.splitlines() if line.strip()]
    return [(e["name"], e["is_error"], e["content"]) for e in events if e["type"] == "tool_result"]


def test_a_stdio_server_killed_mid_session_headless(tmp_path):
    """The real CLI, headless: the agent kills its server (bash), the next calls are clear
    tool errors, and the run ends with the model's answer (exit 0)."""
    home, root = tmp_path / "home", tmp_path / "project"
    home.mkdir()
    root.mkdir()
    pid_file = tmp_path / "server.pid"
    config = tmp_path / "servers.json"
    config.write_text(json.dumps({"mcpServers": {"everything": {
        "command": "bash", "args": ["-c", 'echo $$ > "$0"; exec "$1" "$2" stdio', str(pid_file), NODE,
                                    str(EVERYTHING)]}}}))
    script = write_script(tmp_path / "s.jsonl", [
        use("mcp__everything__echo", {"message": "one"}, 1),
        use("bash", {"command": f"kill -9 $(cat {pid_file})"}, 2),
        use("mcp__everything__echo", {"message": "two"}, 3),
        use("mcp__everything__echo", {"message": "three"}, 4),
        [{"type": "text", "text": "the server died; finished without it"}],
    ])
    proc = run_agent_code("--provider", "scripted", "--script", str(script), "--mcp-config", str(config),
                          "--permission-mode", "bypassPermissions", "--output-format", "stream-json",
                          "-p", "go", home=home, cwd=root)
    assert proc.returncode == 0, proc.stderr
    got = stream_results(proc.stdout)
    assert got[0] == ("mcp__everything__echo", False, "Echo: one")
    assert got[2][1] and "MCP server 'everything' stopped" in got[2][2]
    assert got[3][1] and "MCP server 'everything' is not running" in got[3][2]
    final = json.loads(proc.stdout.splitlines()[-1])
    assert final["type"] == "result" and final["result"] == "the server died; finished without it"
    init = json.loads(proc.stdout.splitlines()[0])
    assert init["mcp_servers"] == [{"name": "everything", "status": "connected"}]
    assert "mcp__everything__echo" in init["tools"]


def claude_code_mcp_json(http_url: str) -> dict:
    """A project's .mcp.json in Claude Code's format (stdio with env, http with headers;
    ``${VAR}`` and ``${VAR:-default}`` expansion)."""
    return {"mcpServers": {
        "everything": {"command": "node", "args": ["${EVERYTHING_JS}", "stdio"],
                       "env": {"LOG_LEVEL": "${LOG_LEVEL:-error}"}},
        "remote": {"type": "http", "url": http_url, "headers": {"Authorization": "Bearer ${MCP_TOKEN}"}},
    }}


def test_claude_codes_mcp_json_works_unchanged(tmp_path, http_url):
    home, root = tmp_path / "home", tmp_path / "project"
    home.mkdir()
    root.mkdir()
    (root / ".mcp.json").write_text(json.dumps(claude_code_mcp_json(http_url), indent=2))
    trust_folder(root, home, how="the user said yes")   # the folder's trust (tests/test_folder_trust.py)
    env = {"EVERYTHING_JS": str(EVERYTHING), "MCP_TOKEN": "t0k", "PATH": f"{Path(NODE).parent}:{os.environ['PATH']}"}

    # headless, on purpose: --mcp-config names the file
    script = write_script(tmp_path / "s.jsonl", [
        use("mcp__everything__echo", {"message": "stdio"}, 1) + use("mcp__remote__echo", {"message": "http"}, 2),
        [{"type": "text", "text": "done"}]])
    proc = run_agent_code("--provider", "scripted", "--script", str(script), "--mcp-config", ".mcp.json",
                          "--output-format", "stream-json", "-p", "go", home=home, cwd=root, **env)
    assert proc.returncode == 0, proc.stderr
    assert stream_results(proc.stdout) == [("mcp__everything__echo", False, "Echo: stdio"),
                                           ("mcp__remote__echo", False, "Echo: http")]

    # the REPL, after the user approved `everything` once (the start-up question on a terminal)
    store = ApprovalStore(home / ".agent-code" / APPROVALS_FILE)
    old = os.environ.copy()
    os.environ.update(env)
    try:
        plan(root, project_servers(root), store, repl=True, ask=lambda config: config.name == "everything")
    finally:
        os.environ.clear()
        os.environ.update(old)
    assert not (root / ".agent-code").exists() and store.path.is_file()
    repl_script = write_script(tmp_path / "r.jsonl", [use("mcp__everything__echo", {"message": "in the repl"}, 1),
                                                      [{"type": "text", "text": "echoed"}]])
    proc = run_agent_code("--provider", "scripted", "--script", str(repl_script), home=home, cwd=root,
                          input="echo something\n/mcp\n/exit\n", **env)
    assert proc.returncode == 0, proc.stderr
    assert "Echo: in the repl" in proc.stdout and "final: echoed" in proc.stdout
    listing = proc.stdout[proc.stdout.index("everything  [project: .mcp.json, approved]"):]
    assert "connected" in listing.splitlines()[0] and "mcp__everything__echo  (read)" in listing
    assert "remote  [project: .mcp.json]  declined" in listing


def test_an_unapproved_project_server_never_starts_headless(tmp_path, capsys):
    home, root = tmp_path / "home", tmp_path / "project"
    home.mkdir()
    root.mkdir()
    marker = tmp_path / "server-started"
    (root / ".mcp.json").write_text(json.dumps({"mcpServers": {"marked": {
        "command": "bash", "args": ["-c", 'touch "$0"; exec "$1" "$2" stdio', str(marker), NODE,
                                    str(EVERYTHING)]}}}))
    trust_folder(root, home, how="the user said yes")   # trusted: each server still needs its approval
    script = write_script(tmp_path / "s.jsonl", [use("mcp__marked__echo", {"message": "x"}, 1),
                                                 [{"type": "text", "text": "done"}]])
    # a run with a prompt: not started; its tool does not exist
    proc = run_agent_code("--provider", "scripted", "--script", str(script), "--output-format", "stream-json",
                          "-p", "go", home=home, cwd=root)
    assert proc.returncode == 0, proc.stderr
    assert stream_results(proc.stdout)[0][1] is True and "unknown tool" in stream_results(proc.stdout)[0][2]
    assert not marker.exists()
    # the REPL on piped input (no terminal to ask on): not started either
    proc = run_agent_code("--provider", "scripted", "--script", str(script), home=home, cwd=root,
                          input="/mcp\n/exit\n")
    assert proc.returncode == 0, proc.stderr
    assert "marked  [project: .mcp.json]  not approved" in proc.stdout
    assert not marker.exists()
    # nor does `agent-code mcp list` start it
    from agent_code.cli import main

    old_home = os.environ.get("HOME")
    os.environ["HOME"] = str(home)
    try:
        main(["mcp", "list", "-C", str(root)])
    except SystemExit as exc:
        assert exc.code in (0, None)
    finally:
        os.environ["HOME"] = old_home or ""
    assert "not approved" in capsys.readouterr().out and not marker.exists()
    assert not (home / ".agent-code" / APPROVALS_FILE).exists()   # nobody answered anything
    # the marker works: named on purpose with --mcp-config, the same server starts
    proc = run_agent_code("--provider", "scripted", "--script", str(script), "--mcp-config", ".mcp.json",
                          "--output-format", "stream-json", "-p", "go", home=home, cwd=root)
    assert proc.returncode == 0, proc.stderr
    assert marker.exists() and stream_results(proc.stdout)[0] == ("mcp__marked__echo", False, "Echo: x")


def test_the_repl_approves_a_declined_project_server_on_a_terminal(project, tmp_path, monkeypatch):
    """``/mcp approve NAME``: asked on the terminal, remembered in the user's store, started,
    its tools added to the running session; on piped input it is refused."""
    import io

    from agent_code.cli.repl import Repl
    from agent_code.mcp import DECLINED

    class Terminal(io.StringIO):
        def isatty(self) -> bool:
            return True

    monkeypatch.setenv("HOME", str(tmp_path / "home"))
    (config,) = parse_servers({"mcpServers": {"everything": {"command": NODE, "args": [str(EVERYTHING), "stdio"]}}},
                              "project", ".mcp.json")
    with McpManager(project) as manager:
        manager.add(config, DECLINED, "you declined it")
        agent, _ = make_agent(manager, project, tmp_path, [[{"type": "text", "text": "-"}]])
        assert agent.tools.get("mcp__everything__echo") is None
        piped = Repl(agent, stdin=io.StringIO("y\n"), stdout=io.StringIO(), interactive=False, mcp=manager)
        piped.command("/mcp approve everything")
        assert "needs a terminal" in piped.out.getvalue() and manager.servers["everything"].status == DECLINED
        out = Terminal()
        repl = Repl(agent, stdin=Terminal("y\n"), stdout=out, interactive=True, mcp=manager)
        repl.command("/mcp approve everything")
        assert "start MCP server 'everything'" in out.getvalue() and "everything: connected" in out.getvalue()
        assert agent.tools.get("mcp__everything__echo") is not None
        assert ApprovalStore(tmp_path / "home" / ".agent-code" / APPROVALS_FILE).decision(project, config) == "approved"
        repl.command("/mcp")
        assert "everything  [project: .mcp.json, approved]  connected" in out.getvalue()
