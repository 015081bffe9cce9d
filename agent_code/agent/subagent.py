"""Sub-agents: the ``task`` tool hands a self-contained job to a child agent.

Why: a search or an investigation can take many tool calls whose output the main
conversation never needs again. A child agent does that work in a **fresh history** and
only its final answer comes back, as the ``task`` call's ``tool_result`` — the parent's
context grows by one answer, not by every file the child read.

What the child shares with its parent, and why:

* the **provider** (same model, same endpoint; through the rollout gateway its turns are
  recorded in the same session, as a new branch);
* the **permission policy object** itself: the same mode (a plan-mode parent gets a
  read-only child), the same asker and rules, and a later mode switch applies to both;
* the **tool context**: the project root, the read-before-edit file records and the
  backups (an edit by the child can be undone like any other, and the parent's record of
  a file the child changed is not silently stale: the stale check still fires);
* the parent's ``after_tool`` hooks (a PostToolUse hook sees the child's calls too);
* the parent's tools **minus** the agent-bound ones (``task`` itself — no recursion —,
  ``todo_write`` and ``exit_plan_mode``, which belong to the main conversation).

Its events reach the parent's ``on_event`` wrapped as ``{"type": "subagent",
"parent_tool_use_id", "description", "event": {...}}``, so a stream-json consumer sees the
child's steps nested under the call that started them. Its token usage and permission
denials count towards the parent's run.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from agent_code.tools.base import ToolError, ToolRegistry

if TYPE_CHECKING:
    from agent_code.agent.loop import Agent

SUBAGENT_NOTE = """\
You are a sub-agent: the main agent gave you one task, described in the user message. Work
on it with your tools, then answer with what the main agent needs (findings with file paths
and line numbers, what you changed, what is left). Your final answer is all it will see.
You cannot dispatch further sub-agents."""
MAX_SUBAGENT_STEPS = 30


def subagent_tools(parent: Agent) -> ToolRegistry:
    """The parent's tools without the ones bound to the parent agent."""
    registry = ToolRegistry(max_result_chars=parent.tools.max_result_chars)
    bound = {id(t) for t in parent.agent_tools}
    for t in parent.tools.list():
        if id(t) not in bound:
            registry.register(t)
    return registry


def run_subagent(parent: Agent, description: str, prompt: str) -> str:
    """Run ``prompt`` in a child of ``parent``; its final answer, or a ToolError saying why
    there is none."""
    from agent_code.agent.loop import Agent

    call = parent.current_call
    parent_id = call.id if call is not None else None

    def forward(event: dict[str, Any]) -> None:
        parent.on_event({"type": "subagent", "parent_tool_use_id": parent_id, "description": description,
                         "event": event})

    child = Agent(parent.provider, subagent_tools(parent), parent.ctx,
                  system=((parent.system or "").rstrip() + "\n\n" + SUBAGENT_NOTE).strip(),
                  max_steps=min(parent.max_steps, MAX_SUBAGENT_STEPS), on_event=forward,
                  permissions=parent.permissions, after_tool=parent.after_tool,
                  context_window=parent.context_window)
    forward({"type": "system", "subtype": "init", "tools": [t.name for t in child.tools.list()],
             "max_steps": child.max_steps, "prompt": prompt})
    result = child.run(prompt)
    parent.add_usage(result.usage)
    parent.add_denials(result.permission_denials)
    if result.status == "success":
        return result.final.strip() or "(the sub-agent finished without an answer)"
    if result.status == "max_steps":
        raise ToolError(f"the sub-agent stopped after {child.max_steps} steps without an answer; "
                        "give it a smaller task or do it yourself")
    raise ToolError(f"the sub-agent failed: {result.error}")
