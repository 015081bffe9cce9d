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
        shown = run_tests(agent, command, f"{call.id}-tests", skip=hook)
        if shown is None:
            return result
        return ToolResult(result.tool_use_id, f"{result.content}\n\nTests after this change (`{command}`){shown}",
                          result.is_error)

    return hook


def run_tests(agent: "Agent", command: str, call_id: str,
              skip: Callable[[ToolCall, ToolResult], ToolResult] | None = None) -> str | None:
    """Run ``command`` as :func:`auto_test`'s hook does (the policy decides; the other
    ``after_tool`` hooks but ``skip`` see it); its output's tail, after a colon and a note of how
    much was left out, or None when the policy does not let it run."""
    bash = agent.tools.get("bash")
    if bash is None or bash.kind != "execute":
        return None
    policy = agent.permissions
    if not policy.check(bash, {"command": command}).allowed:
        return None
    test_call = ToolCall(call_id, "bash", {"command": command})
    ctx = agent.ctx
    before = ctx.read_only_commands
    ctx.read_only_commands = runs_as_read_only(policy.mode, bash, {"command": command})
    try:
        ran = agent.tools.run(test_call, ctx)
    finally:
        ctx.read_only_commands = before
    for other in list(agent.after_tool):  # PostToolUse hooks see the command (not the test hook)
        if other is not skip:
            ran = other(test_call, ran)
    lines = ran.content.rstrip("\n").splitlines()
    shown = "\n".join(lines[-TAIL_LINES:])
    more = f" (last {TAIL_LINES} of {len(lines)} lines)" if len(lines) > TAIL_LINES else ""
    return f"{more}:\n{shown}"


def with_test_report(prompt: str, agent: "Agent", command: str) -> str:
    """``prompt`` with the tests' output as they stand now (the small-model profile: a small model
    reads the failure it is to fix instead of guessing at it); as it was when they cannot run."""
    shown = run_tests(agent, command, "initial-tests")
    if shown is None:
        return prompt
    return f"{prompt}\n\nThe tests as they are now (`{command}`){shown}"
