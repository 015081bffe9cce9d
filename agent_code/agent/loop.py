"""The agent loop: model → tool_use → tools → tool_result → model … → final answer.

Messages are kept in the Anthropic Messages shape. After each assistant turn that asks
for tools, every ``tool_use`` gets a ``tool_result`` (same id, same order) and all of
them go back together in the next **user** message, as the protocol requires. The loop
stops on a reply without tool calls, or after ``max_steps`` model calls.

Before a tool runs, the loop asks its :class:`PermissionPolicy` (``policy/permissions.py``)
whether the call may run; the policy decides from the tool's ``kind``, never its name. A
denied call is not run: its ``tool_result`` is the denial (``is_error: true``), and the
call is listed in the result's ``permission_denials``.

Everything the loop does is reported through ``on_event`` as plain JSON-able dicts
(``assistant``, ``tool_use``, ``tool_result``, ``result``; and ``todos``, ``plan``,
``compaction``, ``subagent`` — a sub-agent's own events, wrapped); the CLI renders them as
text or streams them as JSON lines, and a harness can follow a headless run from them.

The agent's state beyond the history lives here too, each part in its own module:

* **session** (``agent/sessions.py``): with a :class:`SessionLog`, every change to the
  history is appended to the session's file as it happens (``_append``, ``_reset``, and a
  rewind when a prompt is folded into the previous user message), so ``--resume`` can
  pick the conversation up.
* **context** (``agent/compaction.py``): the provider's token usage is kept per model call
  (``turn_usage``); before each call, when the context reaches ``COMPACT_AT`` of
  ``context_window``, older turns are summarized (``compact``; also on demand). Tool
  pairs are never split.
* **todos and plans** (``agent/todos.py``, ``agent/agent_tools.py``): ``todos`` is the list
  ``todo_write`` keeps; ``exit_plan_mode`` hands its plan to ``on_plan`` (the REPL asks
  the user) or, headless, ends the run with the plan as its answer.
* **sub-agents** (``agent/subagent.py``): the ``task`` tool runs a child :class:`Agent`
  with this agent's provider, permission policy and tools minus the agent-bound ones.
"""

from __future__ import annotations

import json
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from agent_code.agent.compaction import (
    DEFAULT_CONTEXT_WINDOW,
    KEEP_TURNS,
    Compaction,
    CompactionError,
    compact_history,
    estimate_tokens,
    should_compact,
)
from agent_code.agent.todos import Todo
from agent_code.policy import PermissionMode, PermissionPolicy
from agent_code.policy.permissions import runs_as_read_only
from agent_code.providers.base import ModelProvider, ProviderError
from agent_code.tools.base import Tool, ToolContext, ToolRegistry
from agent_code.types import ModelResponse, ToolCall, ToolResult, Usage

if TYPE_CHECKING:
    from agent_code.agent.sessions import SessionLog

# A small cap such as 8 model calls is too few: a real task (find the code, read it, edit, run the
# tests, fix, re-run) routinely takes 20-40 tool calls; 8 would cut most of them off
# mid-way. 50 leaves room for that while still bounding a model that loops forever.
DEFAULT_MAX_STEPS = 50

Event = dict[str, Any]
# what ``on_plan`` answers: True (approved; the callback has switched the mode), False
# (rejected: the run ends so the user can say more), or text (rejected, with feedback that
# goes back to the model, which stays in plan mode and revises)
PlanVerdict = bool | str
MANUAL_KEEP_TURNS = 2  # /compact keeps fewer turns verbatim than the automatic compaction
REGROW = 0.1  # after a compaction, compact again only once the context grew by this much of the window
REPEAT_NOTE = ("\n\n[note: this exact call was already made earlier in this task, with the same result. "
               "Use what you have and give your answer, or try something different.]")


@dataclass
class AgentResult:
    final: str
    status: str  # "success" | "max_steps" | "error"
    steps: int
    messages: list[dict[str, Any]]
    usage: Usage = field(default_factory=Usage)
    error: str | None = None
    permission_denials: list[dict[str, Any]] = field(default_factory=list)  # calls refused this run

    @property
    def ok(self) -> bool:
        return self.status == "success"


def assistant_message(response: ModelResponse) -> dict[str, Any]:
    """The assistant turn as it goes back into history: the provider's blocks, verbatim."""
    return {"role": "assistant", "content": response.content}


def tool_results_message(results: list[ToolResult]) -> dict[str, Any]:
    """All results of one assistant turn, in order, in a single user message."""
    return {"role": "user", "content": [
        {"type": "tool_result", "tool_use_id": r.tool_use_id, "content": r.content, "is_error": r.is_error}
        for r in results
    ]}


def _usage_dict(usage: Usage | None) -> dict[str, int]:
    usage = usage or Usage()
    return {"input_tokens": usage.input_tokens, "output_tokens": usage.output_tokens}


class Agent:
    """A conversation with a provider and a tool set; ``run`` may be called repeatedly
    (the REPL does), each call continuing the same history."""

    def __init__(
        self,
        provider: ModelProvider,
        tools: ToolRegistry,
        ctx: ToolContext,
        system: str | None = None,
        max_steps: int = DEFAULT_MAX_STEPS,
        on_event: Callable[[Event], None] | None = None,
        permissions: PermissionPolicy | PermissionMode | str | None = None,
        after_tool: list[Callable[[ToolCall, ToolResult], ToolResult]] | None = None,
        on_stop: list[Callable[[AgentResult], str | None]] | None = None,
        context_window: int = DEFAULT_CONTEXT_WINDOW,
        session: SessionLog | None = None,
        on_plan: Callable[[str], PlanVerdict] | None = None,
    ) -> None:
        if max_steps < 1:
            raise ValueError("max_steps must be at least 1")
        self.provider = provider
        self.tools = tools
        self.ctx = ctx
        self.system = system
        self.max_steps = max_steps
        self.on_event = on_event or (lambda event: None)
        self.permissions = PermissionPolicy.of(permissions)  # None: the default mode
        self.messages: list[dict[str, Any]] = []
        self.usage = Usage()
        # extension points (hooks): each after_tool callback may replace a call's result;
        # an on_stop callback that returns text keeps the agent going with it as a user message
        self.after_tool = list(after_tool or [])
        self.on_stop = list(on_stop or [])
        if context_window < 1:
            raise ValueError("context_window must be at least 1")
        self.context_window = context_window
        self.session = session
        self.on_plan = on_plan
        self.todos: list[Todo] = []
        self.turn_usage: list[Usage] = []       # the provider's usage, one entry per model call
        self.agent_tools: list[Tool] = []       # tools bound to this agent (not given to sub-agents)
        self.system_for_mode: Callable[[str], str] | None = None  # rebuilds `system` on a mode change
        # the first steps of a run in which the model must call a tool (tool_choice "any"): a
        # small model otherwise answers from its imagination before looking (--tool-profile small)
        self.tools_first_steps = 0
        # the first steps of a run in which the model must answer in text (tool_choice "none"): a
        # small model that was handed the code and the failing tests answers with the fix (a code
        # block, agent/blocks.py) instead of calling the tests again and again. The tools are still
        # sent: the prompt's prefix (the chat template renders them) stays the same on every step,
        # so a rollout is one token chain and one training sample
        self.text_first_steps = 0
        self.current_call: ToolCall | None = None  # the call whose tool is running
        self._context_base = 0                  # input+output tokens of the last model call ...
        self._context_mark = 0                  # ... which saw the history up to this length
        self._stop_with: str | None = None      # set by exit_plan_mode: end the run with this answer
        self._compacted_to: int | None = None   # context size right after the last compaction
        self._run_usage = Usage()               # this run's usage (sub-agents add theirs)
        self._run_denials: list[dict[str, Any]] = []

    # --- history: every change goes through here, so the session log sees it ----------

    def _append(self, message: dict[str, Any], usage: Usage | None = None) -> None:
        self.messages.append(message)
        if self.session is not None:
            self.session.message(message, _usage_dict(usage) if usage is not None else None)

    def _reset(self, messages: list[dict[str, Any]], reason: str, **info: object) -> None:
        self.messages[:] = messages  # in place: AgentResult.messages is this same list
        if self.session is not None:
            self.session.reset(self.messages, reason, **info)

    def restore(self, messages: list[dict[str, Any]], todos: list[Todo] | None = None) -> None:
        """Start from a resumed session's history (already in its log: nothing is written)."""
        self.messages[:] = messages
        self.todos = list(todos or [])
        self._context_base = self._context_mark = 0
        self._compacted_to = None

    def set_todos(self, todos: list[Todo]) -> None:
        self.todos = list(todos)
        items = [t.to_dict() for t in todos]
        self.on_event({"type": "todos", "todos": items})
        if self.session is not None:
            self.session.todos(items)

    def set_permission_mode(self, mode: PermissionMode | str) -> None:
        """Switch the permission mode (the REPL's /permissions, an approved plan); the system
        prompt's mode line follows when the agent knows how to rebuild it."""
        self.permissions.mode = PermissionMode(mode)
        if self.system_for_mode is not None:
            self.system = self.system_for_mode(self.permissions.mode.value)

    def add_usage(self, usage: Usage) -> None:
        """Count tokens spent on this agent's behalf (a sub-agent's) in the current run."""
        self._run_usage.add(usage)

    def add_denials(self, denials: list[dict[str, Any]]) -> None:
        self._run_denials.extend(denials)

    # --- plans ---------------------------------------------------------------------------

    def submit_plan(self, plan: str) -> str:
        """What ``exit_plan_mode`` does: ask ``on_plan``, or (headless) end the run with the plan."""
        self.on_event({"type": "plan", "plan": plan})
        if self.on_plan is None:
            self._stop_with = plan
            return "The plan was handed to the user; this run ends here with the plan as its answer."
        verdict = self.on_plan(plan)
        if verdict is True:
            return (f"The user approved the plan. Permission mode is now {self.permissions.mode.value}: "
                    "carry the plan out.")
        if isinstance(verdict, str) and verdict.strip():
            return (f"The user did not approve the plan and said: {verdict.strip()}\nStay in plan mode: "
                    "revise the plan and present it again with exit_plan_mode.")
        self._stop_with = "The plan was not approved."
        return "The user did not approve the plan; stop here and wait for their instructions."

    # --- context -------------------------------------------------------------------------

    def context_tokens(self) -> int:
        """The context the next request will carry, in tokens: the last model call's usage
        (input + output) plus an estimate for what was added since; all estimated when
        there is no usage (a provider that reports none, or right after a compaction)."""
        if self._context_base and self._context_mark <= len(self.messages):
            return self._context_base + estimate_tokens(self.messages[self._context_mark:])
        return (estimate_tokens(self.messages) + estimate_tokens(self.system or "")
                + estimate_tokens(self.tools.schemas()))

    def compact(self, keep_turns: int = MANUAL_KEEP_TURNS) -> str:
        """Compact the history now (the REPL's /compact); a one-line account of what happened."""
        try:
            done = self._compact("manual", keep_turns)
        except CompactionError as exc:
            return f"could not compact: {exc}"
        return done.describe() if done is not None else "nothing to compact yet"

    def _compact(self, trigger: str, keep_turns: int) -> Compaction | None:
        before = self.context_tokens()
        done = compact_history(self.provider, self.messages, context_window=self.context_window,
                               keep_turns=keep_turns, tokens_before=before)
        if done is None:
            return None
        if done.usage:
            used = Usage(done.usage.get("input_tokens", 0), done.usage.get("output_tokens", 0))
            # a manual compaction happens between runs; an automatic one is part of this run
            (self.usage if trigger == "manual" else self._run_usage).add(used)
        self._reset(done.messages, "compaction", trigger=trigger, summary=done.summary)
        self._context_base = self._context_mark = 0
        done.tokens_after = self._compacted_to = self.context_tokens()
        self.on_event({"type": "compaction", "trigger": trigger, "replaced": done.replaced, "kept": done.kept,
                       "tokens_before": done.tokens_before, "tokens_after": done.tokens_after,
                       "fallback": done.fallback, "error": done.error, "summary": done.summary})
        return done

    def _maybe_compact(self) -> None:
        tokens = self.context_tokens()
        if not should_compact(tokens, self.context_window):
            return
        if self._compacted_to is not None and tokens < self._compacted_to + REGROW * self.context_window:
            return  # still full right after compacting (a huge last turn, a huge prompt): no thrashing
        try:
            self._compact("auto", KEEP_TURNS)
        except CompactionError as exc:  # keep the (valid) history; the request may still fit
            self.on_event({"type": "compaction", "trigger": "auto", "error": str(exc), "replaced": 0})

    def _add_user_text(self, prompt: str) -> None:
        block = {"type": "text", "text": prompt}
        last = self.messages[-1] if self.messages else None
        if last and last["role"] == "user" and isinstance(last["content"], list):
            # e.g. the previous run stopped at max_steps right after tool results: one user
            # message, rewritten as a new object (a rollback restores the old one untouched)
            merged = {"role": "user", "content": [*last["content"], block]}
            self.messages.pop()
            if self.session is not None:
                self.session.rewind(len(self.messages))
            self._append(merged)
        else:
            self._append({"role": "user", "content": [block]})

    def run(self, prompt: str) -> AgentResult:
        started = time.monotonic()
        before = list(self.messages)
        usage = self._run_usage = Usage()
        denials = self._run_denials = []
        self._stop_with = None
        try:
            self._add_user_text(prompt)
            result = self._loop(usage, denials)
        except KeyboardInterrupt:
            # leave a history the API accepts: no tool_use without its tool_result
            if len(self.messages) != len(before) or any(a is not b for a, b in zip(self.messages, before)):
                self._reset(before, "interrupted")
            raise
        finally:
            self.current_call = None
        self.usage.add(usage)
        result.permission_denials = denials
        event = {
            "type": "result", "subtype": result.status, "is_error": not result.ok, "result": result.final,
            "error": result.error, "num_steps": result.steps, "usage": _usage_dict(usage),
            "duration_ms": int((time.monotonic() - started) * 1000), "permission_denials": denials,
            "context_tokens": self.context_tokens(), "context_window": self.context_window,
        }
        if self.session is not None:
            event["session_id"] = self.session.id
        self.on_event(event)
        return result

    def _run_tool(self, call: ToolCall, denials: list[dict[str, Any]]) -> ToolResult:
        """Run one call if the permission policy allows it; a denial becomes its result."""
        t = self.tools.get(call.name)
        if t is not None:  # unknown tools are reported by the registry
            # a command is let run unasked because of a wall only if it runs in that very wall
            self.permissions.wall = self.ctx.wall
            decision = self.permissions.check(t, call.arguments)
            if not decision.allowed:
                denials.append({"tool_name": call.name, "tool_use_id": call.id, "tool_input": call.arguments})
                return ToolResult(call.id, decision.message, is_error=True)
        self.current_call = call
        self.ctx.read_only_commands = t is not None and runs_as_read_only(self.permissions.mode, t, call.arguments)
        try:
            result = self.tools.run(call, self.ctx)
        finally:
            self.current_call = None
        for hook in self.after_tool:
            result = hook(call, result)
        return result

    def act(self, call: ToolCall) -> ToolResult:
        """Run a call the model did not make as if it had (a scaffold's: the code block a small
        model answered with, written by ``write_file``): the permission policy decides, the
        ``after_tool`` hooks run, and the tool_use and tool_result events go out (no step: it is
        not one of the model's)."""
        self.on_event({"type": "tool_use", "step": None, "id": call.id, "name": call.name, "input": call.arguments})
        result = self._run_tool(call, self._run_denials)
        self.on_event({"type": "tool_result", "step": None, "tool_use_id": result.tool_use_id, "name": call.name,
                       "content": result.content, "is_error": result.is_error})
        return result

    def offered_tools(self) -> list[Tool]:
        """The tools the model is offered: all of them, except in plan mode an MCP server's
        tools that are not read-only (plan mode could never run them)."""
        if self.permissions.mode is not PermissionMode.PLAN:
            return self.tools.list()
        return [t for t in self.tools.list() if t.origin is None or t.read_only]

    def _tool_choice(self, step: int) -> dict[str, Any]:
        """The ``tool_choice`` argument for ``step``: ``none`` on the text-first steps, ``any`` on
        the tools-first steps, nothing (the provider's auto) otherwise."""
        if step <= self.text_first_steps:
            return {"tool_choice": {"type": "none"}}
        if step <= self.tools_first_steps:
            return {"tool_choice": {"type": "any"}}
        return {}

    def _loop(self, usage: Usage, denials: list[dict[str, Any]]) -> AgentResult:
        seen: set[str] = set()  # calls already made in this run, to flag exact repeats
        for step in range(1, self.max_steps + 1):
            schemas = [t.to_anthropic() for t in self.offered_tools()]
            self._maybe_compact()
            try:
                choice = self._tool_choice(step) if schemas else {}
                response = self.provider.complete(self.messages, tools=schemas, system=self.system, **choice)
            except ProviderError as exc:
                return AgentResult("", "error", step - 1, self.messages, usage, error=str(exc))
            usage.add(response.usage)
            turn = response.usage or Usage()
            self.turn_usage.append(turn)
            message = assistant_message(response)
            self._append(message, turn)
            # the context the provider just saw, plus its reply; 0 (no usage): estimate instead
            self._context_base = turn.input_tokens + turn.output_tokens if turn.input_tokens else 0
            self._context_mark = len(self.messages)
            self.on_event({"type": "assistant", "step": step, "message": message,
                           "stop_reason": response.stop_reason, "usage": _usage_dict(response.usage),
                           "context_tokens": self.context_tokens()})
            calls = response.tool_calls
            if not calls:
                done = AgentResult(response.text, "success", step, self.messages, usage)
                more = next((text for hook in self.on_stop if (text := hook(done))), None)
                if more is None or step == self.max_steps:
                    return done
                self._add_user_text(more)
                continue
            results = []
            for call in calls:
                self.on_event({"type": "tool_use", "step": step, "id": call.id, "name": call.name,
                               "input": call.arguments})
                result = self._run_tool(call, denials)
                key = json.dumps([call.name, call.arguments], sort_keys=True, default=str)
                if key in seen:
                    # small models loop; say so plainly instead of silently repeating the output
                    result = ToolResult(result.tool_use_id, result.content + REPEAT_NOTE, result.is_error)
                seen.add(key)
                self.on_event({"type": "tool_result", "step": step, "tool_use_id": result.tool_use_id,
                               "name": call.name, "content": result.content, "is_error": result.is_error})
                results.append(result)
            self._append(tool_results_message(results))
            if self._stop_with is not None:  # exit_plan_mode: the plan is the answer
                return AgentResult(self._stop_with, "success", step, self.messages, usage)
        return AgentResult(f"reached max_steps={self.max_steps} without a final answer", "max_steps",
                           self.max_steps, self.messages, usage)


def run_agent(prompt: str, provider: ModelProvider, tools: ToolRegistry, ctx: ToolContext,
              **kwargs: Any) -> AgentResult:
    """One-shot convenience: a fresh :class:`Agent`, one prompt."""
    return Agent(provider, tools, ctx, **kwargs).run(prompt)
