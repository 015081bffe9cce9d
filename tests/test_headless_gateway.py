"""A headless agent-code run through the real gateway (scripted engine, the embedded model's
template): it reads a file, edits it, runs the tests with bash, dispatches a sub-agent and
finishes; then ``--resume`` continues the same conversation."""

from __future__ import annotations

import json
import sys

from conftest import cli_env, run_cli
from gateway_fixtures import qwen25_renderer, scripted_gateway

from agent_code.agent.compaction import check_tool_pairing
from agent_code.agent.sessions import replay, sessions_dir

TOKEN = "headless-gateway-session"


def hermes(name: str, arguments: dict, before: str = "") -> dict:
    return {"text": f"{before}<tool_call>\n{json.dumps({'name': name, 'arguments': arguments})}\n</tool_call>"}


def test_headless_run_through_the_gateway_then_resume(tmp_path):
    project = tmp_path / "project"
    project.mkdir()
    (project / "calc.py").write_text("def add(a, b):\n    return a - b\n")
    (project / "test_calc.py").write_text("from calc import add\n\n\ndef test_add():\n    assert add(2, 3) == 5\n")
    pytest_cmd = f"{sys.executable} -m pytest -q -p no:cacheprovider test_calc.py"
    lines = [
        hermes("read_file", {"path": "calc.py"}, before="Let me read the code.\n"),
        hermes("edit_file", {"path": "calc.py", "old_string": "return a - b", "new_string": "return a + b"}),
        hermes("bash", {"command": pytest_cmd}),
        hermes("task", {"description": "check other callers",
                        "prompt": "Find every use of add in the project and report them."}),
        hermes("grep", {"pattern": r"add\("}),                                   # the sub-agent
        {"text": "add is used in test_calc.py:5 only."},                       # its answer
        {"text": "Fixed add in calc.py (it subtracted); the test passes; test_calc.py is the only caller."},
        {"text": "I changed calc.py line 2 from a - b to a + b."},             # after --resume
    ]
    env = cli_env(ANTHROPIC_AUTH_TOKEN=TOKEN)
    with scripted_gateway(tmp_path, lines, qwen25_renderer()) as (url, gateway):
        base = ["--provider", "anthropic", "--base-url", url, "--model", "served", "--output-format", "stream-json",
                "--permission-mode", "bypassPermissions", "-C", str(project)]
        first = run_cli(*base, "-p", "Fix add and run the tests.", env=env, timeout=120)
        assert first.returncode == 0, first.stderr[-3000:]
        events = [json.loads(line) for line in first.stdout.splitlines()]
        session_id = events[0]["session_id"]
        resumed = run_cli(*base, "-p", "--resume", session_id, "What did you change?", env=env, timeout=120)
        assert resumed.returncode == 0, resumed.stderr[-3000:]
        turns = gateway.store.get(TOKEN).turns

    # the first run: read, edit, test, delegate, finish
    results = [e for e in events if e["type"] == "tool_result"]
    assert [r["name"] for r in results] == ["read_file", "edit_file", "bash", "task"]
    assert not any(r["is_error"] for r in results), results
    assert "1 passed" in results[2]["content"] and results[2]["content"].endswith("[exit code: 0]")
    assert results[3]["content"] == "add is used in test_calc.py:5 only."
    nested = [e for e in events if e["type"] == "subagent"]
    assert {e["parent_tool_use_id"] for e in nested} == {results[3]["tool_use_id"]}
    child = [e["event"] for e in nested if e["event"]["type"] == "tool_result"]
    assert child and child[0]["name"] == "grep" and "test_calc.py:5:" in child[0]["content"]
    assert events[-1]["type"] == "result" and events[-1]["subtype"] == "success"
    assert events[-1]["result"].startswith("Fixed add in calc.py")
    assert events[-1]["session_id"] == session_id
    assert (project / "calc.py").read_text() == "def add(a, b):\n    return a + b\n"

    # the session is on disk, sound, and the resumed run went on from it
    init = json.loads(resumed.stdout.splitlines()[0])
    assert init["session_id"] == session_id and init["resumed"] is True and init["messages"] == 10
    assert json.loads(resumed.stdout.splitlines()[-1])["result"] == "I changed calc.py line 2 from a - b to a + b."
    history = replay(sessions_dir(project) / f"{session_id}.jsonl").messages
    assert check_tool_pairing(history) == [] and len(history) == 12

    # what the gateway recorded: 5 parent turns + 2 sub-agent turns + 1 resumed turn
    assert len(turns) == 8
    subagent_turns, last = turns[4:6], turns[-1]
    assert subagent_turns[0].messages[-1] == {"role": "user",
                                              "content": "Find every use of add in the project and report them."}
    assert not any(t["function"]["name"] == "task" for t in subagent_turns[0].tools)
    # the resumed request carries the earlier turns: the first prompt, the tool results, the answer
    roles = [m["role"] for m in last.messages]
    assert roles.count("tool") == 4 and roles[-1] == "user"
    contents = [str(m.get("content")) for m in last.messages]
    assert any("Fix add and run the tests." in c for c in contents)
    assert any("1 passed" in c for c in contents)
    assert any(c.startswith("Fixed add in calc.py") for c in contents)
    assert last.messages[-1]["content"] == "What did you change?"
