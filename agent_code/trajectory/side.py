"""Side requests: what a client asks the model beside the conversation it is having.

Claude Code, for one, asks for a title for the session (a short request with a system prompt of
its own and no tools) while it works. Such a request is a root of its own in the session's turn
tree; it must not be taken for the conversation (``main``) nor for a sub-agent or a compaction.

A root turn is a *side* request when

* its system prompt carries a marker of a known side request (:data:`MARKERS`), or
* it offers the model no tools while another root of the session does (agent CLIs always send
  their tools with the real conversation and its sub-agents).

The first root that is not a side request is the conversation: its first chain is ``main``.
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


def _system(messages: Sequence[dict[str, Any]]) -> str:
    if messages and isinstance(messages[0], dict) and messages[0].get("role") == "system":
        content = messages[0].get("content")
        return content if isinstance(content, str) else str(content)
    return ""


def marked(messages: Sequence[dict[str, Any]]) -> str | None:
    """The known side request whose marker the system prompt holds, if any."""
    system = _system(messages)
    return next((f"{client}: {what}" for client, what, text in MARKERS if text in system), None)


def is_side(messages: Sequence[dict[str, Any]], tools: Sequence[ToolSchema] | None, others_have_tools: bool) -> bool:
    """Whether a root request is a side request (``others_have_tools``: another root of the
    session offered tools)."""
    return marked(messages) is not None or (not tools and others_have_tools)


def side_roots(roots: Iterable[TurnRecord]) -> set[int]:
    """Indexes of the side requests among a session's root turns."""
    roots = list(roots)
    with_tools = [r for r in roots if r.tools]
    return {r.index for r in roots if is_side(r.messages, r.tools, any(o is not r for o in with_tools))}


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
    return _system(a_messages) == _system(b_messages) and tool_names(a_tools) == tool_names(b_tools)
