"""The small profile runs the project's tests after each file change (issue 16), through the
bash tool and the permission policy: a mode that would not run the command gets no test run."""

from __future__ import annotations

import sys
import time

import pytest

from agent_code.agent.autotest import PYTEST, auto_test, detect_test_command
from agent_code.agent.loop import Agent
from agent_code.policy import PermissionPolicy, RuleSet
from agent_code.tools import ToolContext, default_tools
from agent_code.tools.base import Tool
from agent_code.types import ToolCall, ToolResult


class NoModel:
    name, model = "none", "none"

    def complete(self, messages, tools=None, system=None):
        raise AssertionError("no model call expected")


def _project(tmp_path):
    root = tmp_path / "proj"
    (root / "tests").mkdir(parents=True)
    (root / "calc.py").write_text("def twice(x):\n    return x + 2\n")
    (root / "tests" / "test_calc.py").write_text(
        "import sys, os\nsys.path.insert(0, os.path.dirname(os.path.dirname(__file__)))\n"
        "from calc import twice\n\ndef test_twice():\n    assert twice(5) == 10\n")
    return root


def _agent(root, mode):
    return Agent(NoModel(), default_tools("small"), ToolContext(root), permissions=mode)


def test_a_change_is_followed_by_the_tests_output(tmp_path):
    root = _project(tmp_path)
    assert detect_test_command(root) == PYTEST
    agent = _agent(root, "bypassPermissions")
    hook = auto_test(agent, f"{sys.executable} -m pytest -q -x -p no:cacheprovider")
    agent.ctx.files.record((root / "calc.py").resolve(), (root / "calc.py").read_bytes())
    call = ToolCall("w1", "write_file", {"path": "calc.py", "content": "def twice(x):\n    return x * 3\n"})
    out = hook(call, agent.tools.run(call, agent.ctx))
    assert out.tool_use_id == "w1" and not out.is_error
    assert out.content.startswith("Wrote calc.py.") and "Tests after this change" in out.content
    assert "1 failed" in out.content and "assert 15 == 10" in out.content
    fixed = ToolCall("w2", "write_file", {"path": "calc.py", "content": "def twice(x):\n    return x * 2\n"})
    assert "1 passed" in hook(fixed, agent.tools.run(fixed, agent.ctx)).content


def test_no_test_run_for_reads_errors_no_change_or_a_mode_that_refuses_commands(tmp_path):
    root = _project(tmp_path)
    bypass = _agent(root, "bypassPermissions")
    hook = auto_test(bypass, "touch RAN")
    for call, result in [
        (ToolCall("r", "read_file", {"path": "calc.py"}), ToolResult("r", "     1\tdef twice(x):")),
        (ToolCall("e", "write_file", {"path": "calc.py", "content": "x"}), ToolResult("e", "not read", True)),
        (ToolCall("n", "write_file", {"path": "calc.py", "content": "x"}), ToolResult("n", "No change: calc.py already")),
    ]:
        assert hook(call, result) is result
    assert not (root / "RAN").exists()
    edits_only = _agent(root, "acceptEdits")  # edits yes, commands no: the tests do not run either
    call = ToolCall("w", "write_file", {"path": "new.py", "content": "x = 1\n"})
    result = edits_only.tools.run(call, edits_only.ctx)
    assert auto_test(edits_only, "touch RAN")(call, result) is result and not (root / "RAN").exists()
    assert "Tests after" in hook(call, ToolResult("w", "Wrote new.py.")).content and (root / "RAN").exists()


def test_no_tests_no_command(tmp_path):
    (tmp_path / "app.py").write_text("x = 1\n")
    assert detect_test_command(tmp_path) is None
    (tmp_path / "test_app.py").write_text("def test(): pass\n")
    assert detect_test_command(tmp_path) == PYTEST


# --- attacks (security review of autotest) --------------------------------------------------------
# The test run is a bash call the model did not make: it must get exactly the policy a bash call of
# the model's would (mode, rules, self-protection, PreToolUse hooks, the ask callback), run with the
# environment that decision implies, stay inside the bash tool's timeout and clean-up, and be seen
# by the PostToolUse hooks like any other command.


def _written(agent, name="new.py"):
    call = ToolCall("w", "write_file", {"path": name, "content": "x = 1\n"})
    return call, ToolResult("w", f"Created {name} (1 line).")


@pytest.mark.parametrize("mode", ["default", "plan", "acceptEdits"])
def test_modes_that_would_not_run_the_command_get_no_test_run(tmp_path, mode):
    root = _project(tmp_path)
    agent = _agent(root, mode)
    call, result = _written(agent)
    assert auto_test(agent, "touch RAN")(call, result) is result
    assert not (root / "RAN").exists()


def test_rules_and_self_protection_apply_even_in_bypass_permissions(tmp_path):
    root = _project(tmp_path)
    agent = Agent(NoModel(), default_tools("small"), ToolContext(root),
                  permissions=PermissionPolicy("bypassPermissions", rules=RuleSet.from_lists(deny=["bash(touch:*)"]),
                                               root=root))
    call, result = _written(agent)
    assert auto_test(agent, "touch RAN")(call, result) is result and not (root / "RAN").exists()
    agent.permissions = PermissionPolicy("acceptEdits", root=root, rules=RuleSet.from_lists(allow=["bash"]))
    assert auto_test(agent, "echo x > .agent/settings.json")(call, result) is result  # self-protection
    assert not (root / ".agent").exists()


def test_a_pre_tool_use_hook_sees_and_may_refuse_the_test_run(tmp_path):
    root = _project(tmp_path)
    seen = []

    def hook(tool, arguments):
        seen.append((tool.name, dict(arguments)))
        return "no" if "touch" in arguments["command"] else None

    agent = Agent(NoModel(), default_tools("small"), ToolContext(root),
                  permissions=PermissionPolicy("bypassPermissions", root=root, pre_tool_use=hook))
    call, result = _written(agent)
    assert auto_test(agent, "touch RAN")(call, result) is result and not (root / "RAN").exists()
    assert seen == [("bash", {"command": "touch RAN"})]
    assert "hello" in auto_test(agent, "echo hello")(call, result).content


def test_the_ask_callback_decides_in_default_mode(tmp_path):
    root = _project(tmp_path)
    answers = []
    agent = Agent(NoModel(), default_tools("small"), ToolContext(root),
                  permissions=PermissionPolicy("default", root=root,
                                               ask=lambda tool, args: answers.append(args["command"]) or False))
    call, result = _written(agent)
    assert auto_test(agent, "touch RAN")(call, result) is result and not (root / "RAN").exists()
    assert answers == ["touch RAN"]


def test_the_run_gets_the_environment_its_permission_implies(tmp_path):
    """A command allowed only because it is read-only (plan mode) runs with the read-only
    environment; any other with the ordinary one — whatever the previous call left set."""
    root = _project(tmp_path)
    flags = []
    spy = Tool("bash", "spy", {"type": "object", "properties": {"command": {"type": "string"}},
                               "required": ["command"]},
               lambda ctx, command: flags.append(ctx.read_only_commands) or "ok", kind="execute")
    tools = default_tools("small")
    tools.tools["bash"] = spy
    agent = Agent(NoModel(), tools, ToolContext(root), permissions="plan")
    call, result = _written(agent)
    agent.ctx.read_only_commands = False
    assert "ok" in auto_test(agent, "ls")(call, result).content
    agent.permissions = PermissionPolicy.of("bypassPermissions")
    agent.ctx.read_only_commands = True
    assert "ok" in auto_test(agent, "python -m pytest -q")(call, result).content
    assert flags == [True, False]


def test_background_processes_do_not_outlive_the_test_run(tmp_path):
    root = _project(tmp_path)
    agent = _agent(root, "bypassPermissions")
    call, result = _written(agent)
    started = time.monotonic()
    out = auto_test(agent, "(sleep 3; touch LATE) & echo started")(call, result)
    assert "started" in out.content and time.monotonic() - started < 3
    time.sleep(3.5)
    assert not (root / "LATE").exists()


def test_post_tool_use_hooks_see_the_test_run(tmp_path):
    root = _project(tmp_path)
    agent = _agent(root, "bypassPermissions")
    seen = []

    def post(call, result):
        seen.append((call.name, call.arguments))
        return ToolResult(result.tool_use_id, result.content + "\n[post]", result.is_error)

    hook = auto_test(agent, "echo hi")
    agent.after_tool += [hook, post]
    call, result = _written(agent)
    out = hook(call, result)
    assert ("bash", {"command": "echo hi"}) in seen and "[post]" in out.content


def test_edit_file_changes_are_followed_by_tests_too(tmp_path):
    root = _project(tmp_path)
    agent = _agent(root, "bypassPermissions")
    call = ToolCall("e", "edit_file", {"path": "calc.py", "old_string": "+", "new_string": "*"})
    assert "Tests after" in auto_test(agent, "echo hi")(call, ToolResult("e", "Edited calc.py: 1 replacement.")).content
