"""Permission modes: the mode table, the denial messages, and the loop asking the policy
(scripted provider: a denied edit_file is an is_error tool_result and the file is untouched)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from agent_code.agent import Agent
from agent_code.policy.permissions import (Decision, PermissionMode, PermissionPolicy, decide,
                                           mode_behavior)
from agent_code.providers.scripted import ScriptedProvider
from agent_code.tools import ToolContext, default_tools
from agent_code.tools.base import ToolRegistry, tool
from conftest import run_cli

D, A, P, B = "default", "acceptEdits", "plan", "bypassPermissions"


@pytest.mark.parametrize("mode, read, edit, execute", [
    (D, "allow", "ask", "ask"),
    (A, "allow", "allow", "ask"),
    (P, "allow", "deny", "deny"),
    (B, "allow", "allow", "allow"),
])
def test_mode_table(mode, read, edit, execute):
    assert [mode_behavior(mode, k) for k in ("read", "edit", "execute")] == [read, edit, execute]


@pytest.mark.parametrize("mode, allowed", [
    (D, {"read"}), (A, {"read", "edit"}), (P, {"read"}), (B, {"read", "edit", "execute"}),
])
def test_headless_decisions(mode, allowed):
    for kind in ("read", "edit", "execute"):
        decision = decide(mode, "some_tool", kind)
        assert decision.allowed == (kind in allowed), (mode, kind)
        assert (decision.message == "") == decision.allowed


def test_denials_say_not_to_retry_and_how_to_grant():
    edit = decide(D, "edit_file", "edit").message
    assert edit.startswith("Permission denied: edit_file changes files")
    assert "Do not retry" in edit and "--permission-mode acceptEdits" in edit
    command = decide(A, "bash", "execute").message
    assert "bash runs commands" in command and "--permission-mode bypassPermissions" in command
    assert "acceptEdits" not in command.split("--permission-mode")[1]
    plan = decide(P, "write_file", "edit").message
    assert "plan mode is read-only" in plan and "give your plan" in plan


def test_ask_is_answered_by_the_asker_when_there_is_one():
    assert decide(D, "edit_file", "edit", ask=lambda: True) == Decision(True)
    assert not decide(D, "edit_file", "edit", ask=lambda: False).allowed
    asked = []
    assert not decide(P, "edit_file", "edit", ask=lambda: asked.append(1) or True).allowed
    assert asked == []  # plan denies outright: nobody is asked


def test_policy_from_names_and_unknown_modes():
    assert PermissionPolicy.of("acceptEdits").mode is PermissionMode.ACCEPT_EDITS
    assert PermissionPolicy.of(None).mode is PermissionMode.DEFAULT
    policy = PermissionPolicy(PermissionMode.PLAN)
    assert PermissionPolicy.of(policy) is policy
    with pytest.raises(ValueError):
        PermissionPolicy.of("yolo")
    with pytest.raises(ValueError):
        tool(kind="delete")(lambda ctx: "x")  # type: ignore[arg-type]


# --- the loop asks the policy -----------------------------------------------------------

def script(tmp_path: Path, *turns) -> ScriptedProvider:
    path = tmp_path / "script.jsonl"
    path.write_text("\n".join(json.dumps(t) for t in turns) + "\n")
    return ScriptedProvider(path)


def use(id_, name, **input_):
    return {"type": "tool_use", "id": id_, "name": name, "input": input_}


def edit_run(tmp_path: Path, mode: str | None):
    project = tmp_path / "project"
    project.mkdir()
    (project / "calc.py").write_text("def add(a, b):\n    return a - b\n")
    provider = script(tmp_path,
                      [use("r1", "read_file", path="calc.py")],
                      [use("e1", "edit_file", path="calc.py", old_string="return a - b",
                           new_string="return a + b")],
                      [{"type": "text", "text": "done"}])
    events: list[dict] = []
    kwargs = {} if mode is None else {"permissions": mode}
    result = Agent(provider, default_tools(), ToolContext(project), on_event=events.append,
                   **kwargs).run("fix add")
    tool_results = {e["tool_use_id"]: e for e in events if e["type"] == "tool_result"}
    return project / "calc.py", result, tool_results, events


@pytest.mark.parametrize("mode", [None, "default", "plan"])
def test_edit_is_refused_without_permission_and_the_file_is_unchanged(tmp_path, mode):
    path, result, results, events = edit_run(tmp_path, mode)
    assert result.status == "success"
    assert not results["r1"]["is_error"]
    assert results["e1"]["is_error"] and results["e1"]["content"].startswith("Permission denied")
    assert path.read_text() == "def add(a, b):\n    return a - b\n"
    # the model got the denial as an error tool_result
    block = result.messages[4]["content"][0]
    assert block["tool_use_id"] == "e1" and block["is_error"] is True
    assert result.permission_denials == [{"tool_name": "edit_file", "tool_use_id": "e1", "tool_input": {
        "path": "calc.py", "old_string": "return a - b", "new_string": "return a + b"}}]
    assert events[-1]["permission_denials"] == result.permission_denials


@pytest.mark.parametrize("mode", ["acceptEdits", "bypassPermissions", PermissionMode.BYPASS_PERMISSIONS])
def test_edit_lands_when_the_mode_allows_it(tmp_path, mode):
    path, result, results, events = edit_run(tmp_path, mode)
    assert not results["e1"]["is_error"], results["e1"]["content"]
    assert results["e1"]["content"].startswith("Edited calc.py: 1 replacement.")
    assert path.read_text() == "def add(a, b):\n    return a + b\n"
    assert result.permission_denials == [] and events[-1]["permission_denials"] == []


def test_the_loop_decides_by_kind_not_by_name(tmp_path):
    """A custom tool named like a read tool but of kind execute is still refused."""
    ran = []

    @tool("read_file", kind="execute")
    def sneaky(ctx, path: str) -> str:
        """Looks harmless, runs things."""
        ran.append(path)
        return "ran"

    registry = ToolRegistry()
    registry.register(sneaky)
    provider = script(tmp_path, [use("s1", "read_file", path="x")], [{"type": "text", "text": "ok"}])
    events: list[dict] = []
    Agent(provider, registry, ToolContext(tmp_path), on_event=events.append,
          permissions="acceptEdits").run("go")
    result = next(e for e in events if e["type"] == "tool_result")
    assert result["is_error"] and "runs commands" in result["content"] and ran == []


def test_bash_runs_only_in_bypass_mode(tmp_path):
    for mode, expect_ran in (("acceptEdits", False), ("bypassPermissions", True)):
        marker = tmp_path / f"ran-{mode}"
        provider = script(tmp_path, [use("b1", "bash", command=f"touch {marker}")],
                          [{"type": "text", "text": "ok"}])
        Agent(provider, default_tools(), ToolContext(tmp_path), permissions=mode).run("go")
        assert marker.exists() == expect_ran, mode


@pytest.mark.parametrize("mode, lands", [(None, False), ("plan", False), ("acceptEdits", True)])
def test_cli_permission_mode_option(tmp_path, mode, lands):
    project = tmp_path / "project"
    project.mkdir()
    (project / "a.py").write_text("x = 1\n")
    turns = [[use("r1", "read_file", path="a.py")],
             [use("e1", "edit_file", path="a.py", old_string="x = 1", new_string="x = 2")],
             [{"type": "text", "text": "done"}]]
    (tmp_path / "s.jsonl").write_text("\n".join(json.dumps(t) for t in turns) + "\n")
    args = ["--provider", "scripted", "--script", str(tmp_path / "s.jsonl"), "-C", str(project),
            "--output-format", "stream-json"] + ([] if mode is None else ["--permission-mode", mode])
    proc = run_cli(*args, "fix it")
    assert proc.returncode == 0, proc.stderr
    events = [json.loads(line) for line in proc.stdout.splitlines()]
    assert events[0]["permission_mode"] == (mode or "default")
    assert (project / "a.py").read_text() == ("x = 2\n" if lands else "x = 1\n")
    denied = events[-1]["permission_denials"]
    assert [d["tool_use_id"] for d in denied] == ([] if lands else ["e1"])


def test_system_prompt_says_what_the_mode_allows(tmp_path):
    from agent_code.agent.prompt import system_prompt

    assert "Permission mode" not in system_prompt(tmp_path)
    for mode in PermissionMode:
        text = system_prompt(tmp_path, mode.value)
        assert f"Permission mode: {mode.value}." in text
        assert "commands" in text.split("Permission mode")[1]
        # the project by its name only: no absolute path, so the prompt is the same in every
        # checkout and sandbox and an engine's prefix cache reuses it (issue 16)
        assert f"project {tmp_path.name} " in text and str(tmp_path) not in text
    assert "refused" not in system_prompt(tmp_path, "bypassPermissions").split("Permission mode")[1]
