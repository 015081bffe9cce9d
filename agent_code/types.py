"""The small value types shared by providers, tools and the agent loop.

Messages themselves stay plain dicts in the Anthropic Messages shape
(``{"role": ..., "content": [blocks]}``): that is the wire format the agent speaks,
and keeping it as data means a provider can hand back blocks verbatim.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any


@dataclass(frozen=True)
class ToolCall:
    """One ``tool_use`` block the model asked for."""

    id: str
    name: str
    arguments: object  # normally a dict; anything else is reported back as a tool error


@dataclass(frozen=True)
class ToolResult:
    """What running a tool produced, ready for a ``tool_result`` block."""

    tool_use_id: str
    content: str
    is_error: bool = False


@dataclass
class Usage:
    input_tokens: int = 0
    output_tokens: int = 0

    def add(self, other: "Usage | None") -> None:
        if other is not None:
            self.input_tokens += other.input_tokens
            self.output_tokens += other.output_tokens


@dataclass
class ModelResponse:
    """One assistant turn.

    ``content`` holds the assistant's content blocks exactly as the provider received
    them (thinking and redacted_thinking blocks with their signatures included); the
    loop sends them back unchanged on the next turn. ``text`` and ``tool_calls`` are
    views of the same blocks for convenience.
    """

    content: list[dict[str, Any]] = field(default_factory=list)
    stop_reason: str = "end_turn"
    usage: Usage | None = None
    model: str | None = None

    @property
    def text(self) -> str:
        return "\n".join(b.get("text", "") for b in self.content if b.get("type") == "text")

    @property
    def tool_calls(self) -> list[ToolCall]:
        return [
            ToolCall(id=b.get("id", ""), name=b.get("name", ""), arguments=b.get("input", {}))
            for b in self.content
            if b.get("type") == "tool_use"
        ]
