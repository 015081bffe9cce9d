"""MockProvider: offline and deterministic, it only knows how to use ``echo``.

First turn: it asks ``echo`` to repeat the user's prompt. Once it sees the tool result
it answers with it (with ``tool_choice`` none, or no ``echo`` offered, it answers with the prompt at
once). Good for a smoke test of the loop without any model.
"""

from __future__ import annotations

from typing import Any

from agent_code.types import ModelResponse


def _last_user_blocks(messages: list[dict[str, Any]]) -> list[dict[str, Any]]:
    for msg in reversed(messages):
        if msg.get("role") == "user":
            content = msg.get("content")
            if isinstance(content, str):
                return [{"type": "text", "text": content}]
            return list(content or [])
    return []


class MockProvider:
    name = "mock"

    def __init__(self, model: str = "mock") -> None:
        self.model = model
        self._calls = 0

    def complete(self, messages, tools=None, system=None, tool_choice=None) -> ModelResponse:
        self._calls += 1
        blocks = _last_user_blocks(messages)
        results = [b for b in blocks if b.get("type") == "tool_result"]
        if results:
            content = results[-1].get("content", "")
            if isinstance(content, list):
                content = "".join(b.get("text", "") for b in content)
            return ModelResponse(content=[{"type": "text", "text": f"echo returned: {content}"}])
        prompt = "".join(b.get("text", "") for b in blocks if b.get("type") == "text")
        text_only = isinstance(tool_choice, dict) and tool_choice.get("type") == "none"
        if text_only or not any(t.get("name") == "echo" for t in tools or []):
            return ModelResponse(content=[{"type": "text", "text": prompt}])
        return ModelResponse(
            content=[{"type": "tool_use", "id": f"toolu_mock_{self._calls}", "name": "echo",
                      "input": {"text": prompt}}],
            stop_reason="tool_use",
        )
