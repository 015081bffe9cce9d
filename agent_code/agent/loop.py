"""The agent loop: model → tool_use → tools → tool_result → model … → final answer.

Messages are kept in the Anthropic Messages shape. After each assistant turn that asks
for tools, every ``tool_use`` gets a ``tool_result`` (same id, same order) and all of
them go back together in the next **user** message, as the protocol requires. The loop
stops on a reply without tool calls, or after ``max_steps`` model calls.

Before a tool runs, the loop asks its :class:`PermissionPolicy` (``agent/permissions.py``)
whether the call may run; the policy decides from the tool's ``kind``, never its name. A
denied call is not run: its ``tool_result`` is the denial (``is_error: true``), and the
call is listed in the result's ``permission_denials``.

Everything the loop does is reported through ``on_event`` as plain JSON-able dicts
(``assistant``, ``tool_use``, ``tool_result``, ``result``); the CLI renders them as text
or streams them as JSON lines, and a harness can follow a headless run from them.
"""

from __future__ import annotations

import json
import time
from dataclasses import dataclass, field
from typing import Any, Callable

from agent_code.agent.permissions import PermissionMode, PermissionPolicy
from agent_code.providers.base import ModelProvider, ProviderError
from agent_code.tools.base import ToolContext, ToolRegistry
from agent_code.types import ModelResponse, ToolCall, ToolResult, Usage

# The lesson stops at 8 model calls. A real task (find the code, read it, edit, run the
# tests, fix, re-run) routinely takes 20-40 tool calls; 8 would cut most of them off
# mid-way. 50 leaves room for that while still bounding a model that loops forever.
DEFAULT_MAX_STEPS = 50

Event = dict[str, Any]
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
        on_stop: list[Callable[["AgentResult"], str | None]] | None = None,
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

    def _add_user_text(self, prompt: str) -> None:
        block = {"type": "text", "text": prompt}
        last = self.messages[-1] if self.messages else None
        if last and last["role"] == "user" and isinstance(last["content"], list):
            # e.g. the previous run stopped at max_steps right after tool results
            last["content"].append(block)
        else:
            self.messages.append({"role": "user", "content": [block]})

    def run(self, prompt: str) -> AgentResult:
        started = time.monotonic()
        checkpoint = len(self.messages)
        usage = Usage()
        denials: list[dict[str, Any]] = []
        try:
            self._add_user_text(prompt)
            result = self._loop(usage, denials)
        except KeyboardInterrupt:
            # leave a history the API accepts: no tool_use without its tool_result
            del self.messages[checkpoint:]
            raise
        self.usage.add(usage)
        result.permission_denials = denials
        self.on_event({
            "type": "result", "subtype": result.status, "is_error": not result.ok, "result": result.final,
            "error": result.error, "num_steps": result.steps, "usage": _usage_dict(usage),
            "duration_ms": int((time.monotonic() - started) * 1000), "permission_denials": denials,
        })
        return result

    def _run_tool(self, call: ToolCall, denials: list[dict[str, Any]]) -> ToolResult:
        """Run one call if the permission policy allows it; a denial becomes its result."""
        t = self.tools.get(call.name)
        if t is not None:  # unknown tools are reported by the registry
            decision = self.permissions.check(t, call.arguments)
            if not decision.allowed:
                denials.append({"tool_name": call.name, "tool_use_id": call.id, "tool_input": call.arguments})
                return ToolResult(call.id, decision.message, is_error=True)
        result = self.tools.run(call, self.ctx)
        for hook in self.after_tool:
            result = hook(call, result)
        return result

    def _loop(self, usage: Usage, denials: list[dict[str, Any]]) -> AgentResult:
        schemas = self.tools.schemas()
        seen: set[str] = set()  # calls already made in this run, to flag exact repeats
        for step in range(1, self.max_steps + 1):
            try:
                response = self.provider.complete(self.messages, tools=schemas, system=self.system)
            except ProviderError as exc:
                return AgentResult("", "error", step - 1, self.messages, usage, error=str(exc))
            usage.add(response.usage)
            message = assistant_message(response)
            self.messages.append(message)
            self.on_event({"type": "assistant", "step": step, "message": message,
                           "stop_reason": response.stop_reason, "usage": _usage_dict(response.usage)})
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
            self.messages.append(tool_results_message(results))
        return AgentResult(f"reached max_steps={self.max_steps} without a final answer", "max_steps",
                           self.max_steps, self.messages, usage)


def run_agent(prompt: str, provider: ModelProvider, tools: ToolRegistry, ctx: ToolContext,
              **kwargs: Any) -> AgentResult:
    """One-shot convenience: a fresh :class:`Agent`, one prompt."""
    return Agent(provider, tools, ctx, **kwargs).run(prompt)
