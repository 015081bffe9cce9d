"""Hooks from settings: PreToolUse exit 2 blocks the call (stderr to the model), PostToolUse
exit 2 appends its stderr to the result, Stop exit 2 keeps the agent going (at most N
times); other exit codes and timeouts are reported, never blocking. Real ``bash -c`` hook
commands, a scripted model."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from agent_code.agent import Agent
from agent_code.agent.hooks import HookConfigError, Hooks, parse_hooks
from agent_code.agent.settings import configure_agent, merge_settings
from agent_code.providers.scripted import ScriptedProvider
from agent_code.tools import ToolContext, default_tools
from conftest import cli_env, run_cli


def use(id_, name, **input_):
    return {"type": "tool_use", "id": id_, "name": name, "input": input_}


def text(t):
    return [{"type": "text", "text": t}]


def make_agent(tmp_path: Path, hooks: dict, *turns, mode="bypassPermissions", **kwargs):
    script = tmp_path / "script.jsonl"
    script.write_text("\n".join(json.dumps(t) for t in turns) + "\n")
    project = tmp_path / "project"
    project.mkdir(exist_ok=True)
    events: list[dict] = []
    agent = Agent(ScriptedProvider(script), default_tools(), ToolContext(project), on_event=events.append,
                  permissions=mode)
    reports: list[str] = []
    settings = merge_settings([("test-settings", {"hooks": hooks})])
    configured = configure_agent(agent, settings, project, home=tmp_path / "home", report=reports.append)
    for key, value in kwargs.items():
        setattr(configured, key, value)
    return agent, events, reports, project


def hook(command, matcher="", timeout=None):
    spec = {"type": "command", "command": command}
    if timeout is not None:
        spec["timeout"] = timeout
    return [{"matcher": matcher, "hooks": [spec]}]


def results(events):
    return {e["tool_use_id"]: e for e in events if e["type"] == "tool_result"}


def test_pre_tool_use_exit_2_blocks_the_call_with_its_stderr(tmp_path):
    payload_file = tmp_path / "payload.json"
    agent, events, reports, project = make_agent(
        tmp_path, {"PreToolUse": hook(f"cat > {payload_file}; echo 'no writes on Fridays' >&2; exit 2",
                                      matcher="write_file|bash")},
        [use("w1", "write_file", path="new.txt", content="x")], [use("e1", "echo", text="hi")], text("ok"))
    result = agent.run("go")
    got = results(events)
    assert got["w1"]["is_error"] and "Blocked by a PreToolUse hook" in got["w1"]["content"]
    assert "no writes on Fridays" in got["w1"]["content"]
    assert not (project / "new.txt").exists()
    assert result.permission_denials[0]["tool_use_id"] == "w1"
    assert not got["e1"]["is_error"] and got["e1"]["content"] == "hi"  # the matcher does not match echo
    payload = json.loads(payload_file.read_text())
    assert payload["hook_event_name"] == "PreToolUse" and payload["tool_name"] == "write_file"
    assert payload["tool_input"] == {"path": "new.txt", "content": "x"} and payload["cwd"] == str(project)
    assert "session_id" in payload and reports == []


def test_pre_tool_use_exit_0_passes_and_other_codes_are_reported_not_blocking(tmp_path):
    agent, events, reports, project = make_agent(
        tmp_path, {"PreToolUse": hook("exit 0", matcher="write_file") + hook("echo oops >&2; exit 1", matcher=".*")},
        [use("w1", "write_file", path="new.txt", content="x")], text("ok"))
    agent.run("go")
    assert not results(events)["w1"]["is_error"] and (project / "new.txt").read_text() == "x"
    assert len(reports) == 1 and "exited 1" in reports[0] and "oops" in reports[0] and "not blocking" in reports[0]


def test_hooks_do_not_run_for_calls_already_refused(tmp_path):
    marker = tmp_path / "ran"
    agent, events, reports, _ = make_agent(tmp_path, {"PreToolUse": hook(f"touch {marker}")},
                                           [use("w1", "write_file", path="n.txt", content="x")], text("ok"),
                                           mode="plan")
    agent.run("go")
    assert results(events)["w1"]["is_error"] and not marker.exists()


def test_post_tool_use_exit_2_appends_stderr_for_the_model(tmp_path):
    payload_file = tmp_path / "post.json"
    agent, events, _, _ = make_agent(
        tmp_path, {"PostToolUse": hook(f"cat > {payload_file}; echo 'lint: line too long' >&2; exit 2",
                                       matcher="echo")},
        [use("e1", "echo", text="hello")], text("ok"))
    result = agent.run("go")
    content = results(events)["e1"]["content"]
    assert content.startswith("hello") and content.endswith("[PostToolUse hook feedback]\nlint: line too long")
    assert result.messages[2]["content"][0]["content"] == content  # what the model reads
    payload = json.loads(payload_file.read_text())
    assert payload["hook_event_name"] == "PostToolUse"
    assert payload["tool_response"] == {"content": "hello", "is_error": False}


def test_post_tool_use_exit_0_leaves_the_result_alone(tmp_path):
    agent, events, _, _ = make_agent(tmp_path, {"PostToolUse": hook("echo ignored >&2; exit 0")},
                                     [use("e1", "echo", text="hello")], text("ok"))
    agent.run("go")
    assert results(events)["e1"]["content"] == "hello"


def test_stop_exit_2_continues_with_stderr_at_most_n_times(tmp_path):
    counter = tmp_path / "count"
    agent, events, reports, _ = make_agent(
        tmp_path, {"Stop": hook(f"echo x >> {counter}; echo 'run the tests first' >&2; exit 2")},
        text("first"), text("second"), text("third"), text("fourth"), text("never"),
        max_stop_continuations=3)
    result = agent.run("go")
    assert result.final == "fourth" and result.steps == 4
    prompts = [m for m in result.messages if m["role"] == "user"]
    assert [p["content"][-1]["text"] for p in prompts[1:]] == ["run the tests first"] * 3
    assert counter.read_text().count("x") == 3 and "stopping" in reports[-1]


def test_stop_exit_0_stops_and_payload_says_whether_a_stop_hook_is_active(tmp_path):
    log = tmp_path / "stop.jsonl"
    agent, _, _, _ = make_agent(
        tmp_path, {"Stop": hook(f"cat >> {log}; echo >> {log}; "
                                f"if [ $(wc -l < {log}) -lt 2 ]; then echo again >&2; exit 2; fi")},
        text("first"), text("second"), text("never"))
    result = agent.run("go")
    assert result.final == "second"
    payloads = [json.loads(line) for line in log.read_text().splitlines() if line.strip()]
    assert [p["stop_hook_active"] for p in payloads] == [False, True]
    assert payloads[0]["last_assistant_message"] == "first" and payloads[0]["hook_event_name"] == "Stop"


def test_a_hook_that_times_out_is_killed_and_reported(tmp_path):
    agent, events, reports, _ = make_agent(tmp_path, {"PreToolUse": hook("sleep 5; exit 2", timeout=0.3)},
                                           [use("e1", "echo", text="hi")], text("ok"))
    agent.run("go")
    assert not results(events)["e1"]["is_error"]
    assert reports and "timed out after 0.3 s" in reports[0]


def test_matchers_match_the_whole_tool_name():
    config = parse_hooks({"PreToolUse": [{"matcher": "edit", "hooks": [{"type": "command", "command": "x"}]},
                                         {"matcher": "edit_file|write_file", "hooks": []},
                                         {"matcher": "*", "hooks": []}]})
    m = config["PreToolUse"]
    assert not m[0].matches("edit_file") and m[0].matches("edit")
    assert m[1].matches("write_file") and not m[1].matches("bash")
    assert m[2].matches("anything")
    assert not Hooks({}, Path("."))


@pytest.mark.parametrize("section, message", [
    ([], "must be an object"),
    ({"BeforeTool": []}, "unknown hook event"),
    ({"Stop": {}}, "must be a list"),
    ({"Stop": [{"hooks": [{"type": "prompt", "prompt": "x"}]}]}, "only {\"type\": \"command\"}"),
    ({"Stop": [{"hooks": [{"command": ""}]}]}, "non-empty string"),
    ({"Stop": [{"hooks": [{"command": "x", "timeout": -1}]}]}, "positive number"),
])
def test_bad_hook_sections(section, message):
    with pytest.raises(HookConfigError) as err:
        parse_hooks(section, "f.json")
    assert message in str(err.value) and "f.json" in str(err.value)


def test_cli_runs_hooks_from_the_project_settings(tmp_path):
    project = tmp_path / "p"
    (project / ".agent").mkdir(parents=True)
    (project / ".agent/settings.json").write_text(json.dumps({"hooks": {
        "PreToolUse": [{"matcher": "bash", "hooks": [{"type": "command",
                                                       "command": "echo \"blocked by policy: $(jq -r .tool_input.command 2>/dev/null || cat)\" >&2; exit 2"}]}]}}))
    script = tmp_path / "s.jsonl"
    script.write_text(json.dumps([use("b1", "bash", command="touch x.txt")]) + "\n" + json.dumps(text("ok")) + "\n")
    proc = run_cli("--provider", "scripted", "--script", str(script), "-C", str(project), "--output-format",
                   "stream-json", "--no-session-persistence", "--permission-mode", "bypassPermissions",
                   "--trust-project", "go",
                   env=cli_env(HOME=str(tmp_path / "home")))
    assert proc.returncode == 0, proc.stderr
    result = next(json.loads(line) for line in proc.stdout.splitlines() if '"tool_result"' in line)
    assert result["is_error"] and "blocked by policy" in result["content"]
    assert not (project / "x.txt").exists()
