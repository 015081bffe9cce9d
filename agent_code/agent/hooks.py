"""Hooks: shell commands from the settings files that run around tool calls and at the end.

Shape (as in Claude Code)::

    "hooks": {
      "PreToolUse":  [{"matcher": "bash|edit_file", "hooks": [{"type": "command", "command": "...", "timeout": 30}]}],
      "PostToolUse": [{"matcher": "*",              "hooks": [{"type": "command", "command": "..."}]}],
      "Stop":        [{"hooks": [{"type": "command", "command": "..."}]}]
    }

``matcher`` is a regular expression that must match the whole tool name (``edit_file|
write_file``, ``.*_file``); empty, missing or ``*`` matches every tool (Stop has none).
Each command runs with ``bash -c`` in the project directory (inside the OS sandbox,
:mod:`agent_code.confine`, when the session has one: no network, the project writable), with
``AGENT_CODE_PROJECT_DIR`` (and ``CLAUDE_PROJECT_DIR``) set, and gets one JSON object on
stdin::

    {"session_id": "..." | null, "transcript_path": "..." | null, "cwd": "/project",
     "hook_event_name": "PreToolUse", "tool_name": "bash", "tool_input": {...},
     "tool_response": {"content": "...", "is_error": false}     (PostToolUse only)
     "stop_hook_active": false, "last_assistant_message": "..."  (Stop only)}

Its exit code decides:

* ``0`` — go on (stdout is ignored);
* ``2`` — block: **PreToolUse** refuses the call and its stderr is the ``tool_result``
  error the model reads; **PostToolUse** appends its stderr to the result the model
  reads (the tool already ran); **Stop** keeps the agent going with its stderr as the
  next user message, at most :data:`MAX_STOP_CONTINUATIONS` times in a row;
* anything else, a timeout (default :data:`DEFAULT_TIMEOUT_S` s; the hook's process
  group is killed) or a command that cannot start — reported to the user on stderr,
  and the run goes on as if the hook had passed.
"""

from __future__ import annotations

import json
import os
import re
import signal
import subprocess
import sys
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any, Callable

from agent_code.types import ToolCall, ToolResult

if TYPE_CHECKING:
    from agent_code.agent.loop import AgentResult
    from agent_code.confine import Wall
    from agent_code.tools.base import Tool

EVENTS = ("PreToolUse", "PostToolUse", "Stop")
DEFAULT_TIMEOUT_S = 60
MAX_STOP_CONTINUATIONS = 3
BLOCK = 2


class HookConfigError(ValueError):
    """A ``hooks`` section that cannot be used; the message says where and why."""


@dataclass(frozen=True)
class HookCommand:
    command: str
    timeout: float = DEFAULT_TIMEOUT_S
    source: str = ""


@dataclass(frozen=True)
class HookMatcher:
    matcher: str
    hooks: tuple[HookCommand, ...]

    def matches(self, tool_name: str | None) -> bool:
        if self.matcher in ("", "*") or tool_name is None:
            return True
        return re.fullmatch(self.matcher, tool_name) is not None


@dataclass(frozen=True)
class HookOutcome:
    """How one hook command ended: exit ``code`` (None: timed out or did not start)."""

    hook: HookCommand
    code: int | None
    stdout: str = ""
    stderr: str = ""
    error: str | None = None  # why it did not finish (timeout, cannot start)

    @property
    def blocks(self) -> bool:
        return self.code == BLOCK


def parse_hooks(section: object, source: str = "") -> dict[str, list[HookMatcher]]:
    """Read a settings file's ``hooks`` object; raises :class:`HookConfigError`."""
    where = f" in {source}" if source else ""
    if section is None:
        return {}
    if not isinstance(section, dict):
        raise HookConfigError(f"'hooks'{where} must be an object keyed by event ({', '.join(EVENTS)})")
    out: dict[str, list[HookMatcher]] = {}
    for event, entries in section.items():
        if event not in EVENTS:
            raise HookConfigError(f"unknown hook event {event!r}{where}; expected one of {', '.join(EVENTS)}")
        if not isinstance(entries, list):
            raise HookConfigError(f"hooks.{event}{where} must be a list of {{\"matcher\", \"hooks\"}} objects")
        for n, entry in enumerate(entries):
            at = f"hooks.{event}[{n}]{where}"
            if not isinstance(entry, dict) or not isinstance(entry.get("hooks"), list):
                raise HookConfigError(f"{at} must be an object with a 'hooks' list")
            matcher = entry.get("matcher") or ""
            if not isinstance(matcher, str):
                raise HookConfigError(f"{at}: 'matcher' must be a string (a tool-name regex)")
            if matcher not in ("", "*"):
                try:
                    re.compile(matcher)
                except re.error as exc:
                    raise HookConfigError(f"{at}: 'matcher' {matcher!r} is not a valid regex: {exc}") from None
            commands = []
            for k, hook in enumerate(entry["hooks"]):
                if not isinstance(hook, dict) or hook.get("type", "command") != "command":
                    raise HookConfigError(f"{at}.hooks[{k}]: only {{\"type\": \"command\"}} hooks are supported")
                command, timeout = hook.get("command"), hook.get("timeout", DEFAULT_TIMEOUT_S)
                if not isinstance(command, str) or not command.strip():
                    raise HookConfigError(f"{at}.hooks[{k}]: 'command' must be a non-empty string")
                if isinstance(timeout, bool) or not isinstance(timeout, (int, float)) or timeout <= 0:
                    raise HookConfigError(f"{at}.hooks[{k}]: 'timeout' must be a positive number of seconds")
                commands.append(HookCommand(command, float(timeout), source))
            out.setdefault(event, []).append(HookMatcher(matcher, tuple(commands)))
    return out


def run_hook(hook: HookCommand, payload: dict[str, Any], cwd: Path, wall: Wall | None = None) -> HookOutcome:
    """Run one hook command with ``payload`` as JSON on stdin, in its own process group
    (killed whole at the timeout or on Ctrl-C), inside ``wall`` when given."""
    env = {**os.environ, "AGENT_CODE_PROJECT_DIR": str(cwd), "CLAUDE_PROJECT_DIR": str(cwd)}
    argv = ["bash", "-c", hook.command]
    if wall is not None:
        argv, env = wall.wrap(argv, env)
    try:
        proc = subprocess.Popen(argv, cwd=cwd, env=env, stdin=subprocess.PIPE,
                                stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                                start_new_session=True)
    except OSError as exc:
        return HookOutcome(hook, None, error=f"cannot start: {exc.strerror or exc}")
    try:
        stdout, stderr = proc.communicate(json.dumps(payload, ensure_ascii=False, default=str), timeout=hook.timeout)
    except subprocess.TimeoutExpired:
        _kill(proc)
        return HookOutcome(hook, None, error=f"timed out after {hook.timeout:g} s")
    except BaseException:
        _kill(proc)
        raise
    return HookOutcome(hook, proc.returncode, stdout, stderr)


def _kill(proc: subprocess.Popen) -> None:
    try:
        os.killpg(proc.pid, signal.SIGKILL)
    except (ProcessLookupError, PermissionError):
        pass
    proc.communicate()


def _report_to_stderr(message: str) -> None:
    print(f"agent-code: {message}", file=sys.stderr)


@dataclass
class Hooks:
    """The hooks of one agent session, as the callbacks the agent takes:
    :meth:`pre_tool_use` for :class:`PermissionPolicy`, :meth:`post_tool_use` for
    ``Agent.after_tool``, :meth:`stop` for ``Agent.on_stop``."""

    config: dict[str, list[HookMatcher]]
    cwd: Path
    session: Callable[[], dict[str, Any]] = dict  # {"session_id", "transcript_path"} when known
    report: Callable[[str], None] = _report_to_stderr
    max_stop_continuations: int = MAX_STOP_CONTINUATIONS
    wall: Wall | None = None   # the OS sandbox the hook commands run in (None: unconfined)
    stop_continuations: int = field(default=0, init=False)

    def __bool__(self) -> bool:
        return any(self.config.get(e) for e in EVENTS)

    def _run(self, event: str, tool_name: str | None, payload: dict[str, Any]) -> list[HookOutcome]:
        base = {"session_id": None, "transcript_path": None, **self.session(), "cwd": str(self.cwd),
                "hook_event_name": event}
        outcomes = []
        for matcher in self.config.get(event, []):
            if not matcher.matches(tool_name):
                continue
            for hook in matcher.hooks:
                outcome = run_hook(hook, {**base, **payload}, self.cwd, self.wall)
                if outcome.code not in (0, BLOCK):
                    why = outcome.error or f"exited {outcome.code}"
                    detail = f": {outcome.stderr.strip()}" if outcome.stderr.strip() else ""
                    self.report(f"{event} hook `{hook.command}` {why}{detail} (not blocking)")
                outcomes.append(outcome)
        return outcomes

    def pre_tool_use(self, tool: Tool, arguments: object) -> str | None:
        """None to let the call run; the reason (a hook's stderr) to refuse it."""
        name = tool.name
        blocking = [o for o in self._run("PreToolUse", name, {"tool_name": name, "tool_input": arguments})
                    if o.blocks]
        if not blocking:
            return None
        reasons = "\n".join(o.stderr.strip() for o in blocking if o.stderr.strip())
        return (f"Blocked by a PreToolUse hook: {name} was not run."
                + (f"\n{reasons}" if reasons else ""))

    def post_tool_use(self, call: ToolCall, result: ToolResult) -> ToolResult:
        """The result, with the stderr of every hook that exited 2 appended for the model."""
        response = {"content": result.content, "is_error": result.is_error}
        outcomes = self._run("PostToolUse", call.name,
                             {"tool_name": call.name, "tool_input": call.arguments, "tool_response": response})
        feedback = [o.stderr.strip() for o in outcomes if o.blocks and o.stderr.strip()]
        if not feedback:
            return result
        note = "\n\n[PostToolUse hook feedback]\n" + "\n".join(feedback)
        return ToolResult(result.tool_use_id, result.content + note, result.is_error)

    def stop(self, result: AgentResult) -> str | None:
        """Text to keep the agent going with (a Stop hook exited 2), or None to stop.
        After :attr:`max_stop_continuations` continuations in a row the agent stops anyway."""
        if not self.config.get("Stop"):
            return None
        if self.stop_continuations >= self.max_stop_continuations:
            self.report(f"Stop hooks asked to continue {self.stop_continuations} times in a row; stopping")
            self.stop_continuations = 0
            return None
        payload = {"stop_hook_active": self.stop_continuations > 0,
                   "last_assistant_message": result.final}
        blocking = [o for o in self._run("Stop", None, payload) if o.blocks]
        if not blocking:
            self.stop_continuations = 0
            return None
        self.stop_continuations += 1
        text = "\n".join(o.stderr.strip() for o in blocking if o.stderr.strip())
        return text or "A Stop hook asked you to continue: the task is not finished yet."
