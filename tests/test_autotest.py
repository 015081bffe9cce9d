"""The small profile runs the project's tests after each file change (issue 16), through the
bash tool and the permission policy: a mode that would not run the command gets no test run."""

from __future__ import annotations

import sys

from agent_code.agent.autotest import PYTEST, auto_test, detect_test_command
from agent_code.agent.loop import Agent
from agent_code.tools import ToolContext, default_tools
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
