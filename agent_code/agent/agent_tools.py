"""The tools bound to one agent: ``task``, ``todo_write`` and ``exit_plan_mode``.

Ordinary tools (``agent_code/tools``) only see the :class:`~agent_code.tools.ToolContext`.
These three act on the agent itself — run a sub-agent with its provider, keep its todo
list, hand its plan to the user — so each is made by a factory closing over that agent,
and :func:`install_agent_tools` registers them and lists them in ``agent.agent_tools``
(which is how a sub-agent knows to leave them out: by object, never by name).

All three are of kind ``read``: they change nothing on disk themselves. ``task`` may lead
to edits, but every call its sub-agent makes goes through the same permission policy.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Annotated

from agent_code.agent.subagent import run_subagent
from agent_code.agent.todos import STATUSES, TodoError, parse_todos, render_todos
from agent_code.policy import PermissionMode
from agent_code.tools.base import Tool, ToolContext, ToolError, tool

if TYPE_CHECKING:
    from agent_code.agent.loop import Agent


def task_tool(agent: Agent) -> Tool:
    @tool("task")
    def task(
        ctx: ToolContext,
        description: Annotated[str, "A short (3-6 words) name for the task."],
        prompt: Annotated[str, "The full task for the sub-agent: what to do or find out, and what to "
                               "report back. It does not see this conversation: include every detail it needs."],
    ) -> str:
        """Hand a self-contained task (a search across the code, an investigation, a focused
        change) to a sub-agent with a fresh context and the same tools (except task). It
        works on its own and answers with its findings, which come back as this result. Use
        it to keep long explorations out of the main conversation."""
        if not prompt.strip():
            raise ToolError("prompt is empty: say what the sub-agent should do")
        return run_subagent(agent, description.strip() or "task", prompt)

    return task


TODO_SCHEMA = {
    "type": "object",
    "properties": {"todos": {
        "type": "array",
        "description": "The whole list, in order; it replaces the previous one.",
        "items": {"type": "object", "properties": {
            "content": {"type": "string", "description": "What to do, imperative and short."},
            "status": {"type": "string", "enum": list(STATUSES)},
        }, "required": ["content", "status"], "additionalProperties": False},
    }},
    "required": ["todos"],
    "additionalProperties": False,
}


def todo_write_tool(agent: Agent) -> Tool:
    def todo_write(ctx: ToolContext, todos: list) -> str:
        try:
            parsed = parse_todos(todos)
        except TodoError as exc:
            raise ToolError(str(exc)) from None
        agent.set_todos(parsed)
        return "Todo list updated:\n" + render_todos(parsed)

    return Tool(
        name="todo_write",
        description=("Write your todo list for the current task: send the whole list each time, each "
                     "item with content and status (pending, in_progress, completed). Use it for work "
                     "with three or more steps; keep one item in_progress, and mark items completed as "
                     "soon as they are done."),
        input_schema=TODO_SCHEMA, fn=todo_write, kind="read")


def exit_plan_mode_tool(agent: Agent) -> Tool:
    @tool("exit_plan_mode")
    def exit_plan_mode(
        ctx: ToolContext,
        plan: Annotated[str, "The plan in markdown: the steps, the files to change and how, how to check it."],
    ) -> str:
        """In plan mode, present your finished plan to the user for approval. Call it once you
        have investigated enough to propose concrete changes; do not call it outside plan mode."""
        if agent.permissions.mode is not PermissionMode.PLAN:
            raise ToolError(f"not in plan mode (the permission mode is {agent.permissions.mode.value}): "
                            "there is nothing to exit; carry on with the task")
        if not plan.strip():
            raise ToolError("the plan is empty")
        return agent.submit_plan(plan.strip())

    return exit_plan_mode


def install_agent_tools(agent: Agent) -> list[Tool]:
    """Register ``task``, ``todo_write`` and ``exit_plan_mode`` on ``agent``."""
    made = [task_tool(agent), todo_write_tool(agent), exit_plan_mode_tool(agent)]
    for t in made:
        agent.tools.register(t)
        agent.agent_tools.append(t)
    return made
