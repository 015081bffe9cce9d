"""Side requests: what a client asks the model beside the conversation it is having.

Claude Code, for one, asks for a title for the session (a short request with a system prompt of
its own and no tools) while it works. Such a request is a root of its own in the session's turn
tree; it must not be taken for the conversation (``main``) nor for a sub-agent or a compaction.

A root turn is a *side* request when

* its system prompt carries a marker of a known side request (:data:`MARKERS`), or
* it offers the model no tools while another root of the session does (agent CLIs always send
  their tools with the real conversation and its sub-agents) — unless its system prompt is one
  such tooled root's: that is the agent's own step without tools (agent-code's small profile
  asked for the fix as a code block this way before it kept its tools and said
  ``tool_choice: none``), never a side request. A client's real side requests (Claude Code's
  title and topic checks) have a system prompt of their own.

The first root that is not a side request is the conversation: its chain that ends at its latest
turn is ``main`` (``samples.py``).
"""

from __future__ import annotations

from typing import Any, Iterable, Sequence

from agent_code.protocols.canonical import ToolSchema
from agent_code.trajectory.records import TurnRecord

# (client, what, text its system prompt holds); one row per known side request
MARKERS: tuple[tuple[str, str, str], ...] = (
    ("Claude Code", "session title", "Generate a concise, sentence-case title"),
    ("Claude Code", "topic check", "Analyze if this message indicates a new conversation topic"),
)


def system_of(messages: Sequence[dict[str, Any]]) -> str:
    if messages and isinstance(messages[0], dict) and messages[0].get("role") == "system":
        content = messages[0].get("content")
        return content if isinstance(content, str) else str(content)
    return ""


def marked(messages: Sequence[dict[str, Any]]) -> str | None:
    """The known side request whose marker the system prompt holds, if any."""
    system = system_of(messages)
    return next((f"{client}: {what}" for client, what, text in MARKERS if text in system), None)


def is_side(messages: Sequence[dict[str, Any]], tools: Sequence[ToolSchema] | None,
            tooled_systems: Iterable[str]) -> bool:
    """Whether a root request is a side request (``tooled_systems``: the system prompts of the
    session's OTHER roots that offered tools)."""
    if marked(messages) is not None:
        return True
    systems = set(tooled_systems)
    return not tools and bool(systems) and system_of(messages) not in systems


def side_roots(roots: Iterable[TurnRecord]) -> set[int]:
    """Indexes of the side requests among a session's root turns."""
    roots = list(roots)
    with_tools = [r for r in roots if r.tools]
    return {r.index for r in roots
            if is_side(r.messages, r.tools, (system_of(o.messages) for o in with_tools if o is not r))}


def tool_names(tools: Iterable[object] | None) -> frozenset[str]:
    """The names of the tools a request offers (canonical or Anthropic form)."""
    names = set()
    for tool in tools or ():
        if isinstance(tool, dict):
            fn = tool.get("function", tool)
            if isinstance(fn, dict) and isinstance(fn.get("name"), str):
                names.add(fn["name"])
    return frozenset(names)


def same_agent(a_messages: Sequence[dict[str, Any]], a_tools: Sequence[ToolSchema] | None,
               b_messages: Sequence[dict[str, Any]], b_tools: Sequence[ToolSchema] | None) -> bool:
    """Whether two roots speak as the same agent: the same system prompt and the same tools. A
    root that differs in either is a sub-agent (Codex's sub-agents keep the parent's system
    prompt but get other tools); one that differs in neither is a compaction or a restart."""
    return system_of(a_messages) == system_of(b_messages) and tool_names(a_tools) == tool_names(b_tools)
