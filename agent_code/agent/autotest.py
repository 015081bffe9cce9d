"""Run the project's tests after every file change (the small-model profile).

Small models skip the "run the tests again" step of the working pattern, and then write the
same wrong fix again and again. :func:`auto_test` returns an ``after_tool`` hook for the agent
loop: after a successful ``write_file`` or ``edit_file`` that changed something, it runs the
test command through the ``bash`` tool — so the permission policy decides as for any command
(a mode that would not run it gets no test run), and the bash tool's timeout and process
clean-up apply — and appends the tail of its output to the tool's result.

The command: the one given (``--test-cmd``), else ``python -m pytest -q -x`` when the project
has tests (a ``tests/`` or ``test/`` directory, or ``test_*.py`` at its top), else none.
"""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING, Callable

from agent_code.policy.permissions import runs_as_read_only
from agent_code.types import ToolCall, ToolResult

if TYPE_CHECKING:
    from agent_code.agent.loop import Agent

PYTEST = "python -m pytest -q -x"
TAIL_LINES = 30
CHANGERS = ("write_file", "edit_file")


def detect_test_command(root: Path) -> str | None:
    """``python -m pytest -q -x`` when ``root`` has tests, else None."""
    if (root / "tests").is_dir() or (root / "test").is_dir() or any(root.glob("test_*.py")):
        return PYTEST
    return None


def auto_test(agent: "Agent", command: str) -> Callable[[ToolCall, ToolResult], ToolResult]:
    """The hook (see the module doc) for ``agent``, running ``command``.

    The run is a ``bash`` call the model did not make, treated as if it had: the session's
    permission policy decides it (mode, rules, self-protection, PreToolUse hooks, the ``ask``
    callback) exactly as the agent loop would; it runs with the environment that decision implies
    (``ctx.read_only_commands``, restored after); the bash tool's timeout and process clean-up
    apply; and the other ``after_tool`` hooks (PostToolUse) see it like any bash call."""

    def hook(call: ToolCall, result: ToolResult) -> ToolResult:
        if call.name not in CHANGERS or result.is_error or result.content.startswith("No change"):
            return result
        bash = agent.tools.get("bash")
        if bash is None or bash.kind != "execute":
            return result
        policy = agent.permissions
        if not policy.check(bash, {"command": command}).allowed:
            return result
        test_call = ToolCall(f"{call.id}-tests", "bash", {"command": command})
        ctx = agent.ctx
        before = ctx.read_only_commands
        ctx.read_only_commands = runs_as_read_only(policy.mode, bash, {"command": command})
        try:
            ran = agent.tools.run(test_call, ctx)
        finally:
            ctx.read_only_commands = before
        for other in list(agent.after_tool):  # PostToolUse hooks see the command (not this hook)
            if other is not hook:
                ran = other(test_call, ran)
        lines = ran.content.rstrip("\n").splitlines()
        shown = "\n".join(lines[-TAIL_LINES:])
        more = f" (last {TAIL_LINES} of {len(lines)} lines)" if len(lines) > TAIL_LINES else ""
        return ToolResult(result.tool_use_id, f"{result.content}\n\nTests after this change (`{command}`){more}:\n"
                                              f"{shown}", result.is_error)

    return hook
