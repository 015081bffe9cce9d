"""The model side of the loop: anything with ``complete(messages, tools, system)``.

``ModelProvider`` is a Protocol, not a base class: the agent depends on the capability,
so a new provider is one small module that never imports the loop.
"""

from __future__ import annotations

from typing import Any, Protocol, runtime_checkable

from agent_code.types import ModelResponse


class ProviderError(Exception):
    """A model call failed in a way the user must fix (key, endpoint, script). One line."""


@runtime_checkable
class ModelProvider(Protocol):
    name: str
    model: str

    def complete(
        self,
        messages: list[dict[str, Any]],
        tools: list[dict[str, Any]] | None = None,
        system: str | None = None,
    ) -> ModelResponse:
        """Send the conversation (Anthropic message dicts) and the tool schemas
        (``{"name", "description", "input_schema"}``); return the assistant turn. Every
        provider the CLI makes also takes ``tool_choice`` (Anthropic's shape): ``{"type":
        "any"}`` requires a call, ``{"type": "none"}`` asks for text with the same tools still
        offered (so the prompt's prefix stays the same); the loop passes it only then."""
        ...
