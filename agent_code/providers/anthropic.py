"""AnthropicProvider: any Anthropic-Messages-compatible endpoint through the official SDK.

The endpoint is a setting, not a dependency: the official API, DeepSeek's
Anthropic-compatible endpoint, or agent-code's own rollout gateway.

The assistant's content blocks are taken from the raw JSON body, not rebuilt from the
SDK's typed objects: thinking and redacted_thinking blocks keep their signatures byte
for byte, and block types this SDK version does not know survive too. They go back to
the server unchanged on the next turn, which endpoints with thinking require.
"""

from __future__ import annotations

import json
import os
from typing import Any

from agent_code.providers.base import ProviderError
from agent_code.types import ModelResponse, Usage

DEFAULT_MODEL = "deepseek-v4-flash"
DEFAULT_BASE_URL = "https://api.deepseek.com/anthropic"
DEFAULT_MAX_TOKENS = 8192


def _credentials() -> tuple[str | None, str | None]:
    """(auth_token, api_key): ANTHROPIC_AUTH_TOKEN is handed to the SDK as a Bearer token
    (DeepSeek and gateway style), ANTHROPIC_API_KEY as an API key (official API style)."""
    return os.environ.get("ANTHROPIC_AUTH_TOKEN") or None, os.environ.get("ANTHROPIC_API_KEY") or None


def _error_message(exc: Exception) -> str:
    body = getattr(exc, "body", None)
    if isinstance(body, dict):
        err = body.get("error")
        if isinstance(err, dict) and err.get("message"):
            return str(err["message"])
        if body.get("message"):
            return str(body["message"])
    return str(getattr(exc, "message", None) or exc).splitlines()[0]


class AnthropicProvider:
    name = "anthropic"

    def __init__(
        self,
        model: str = DEFAULT_MODEL,
        base_url: str | None = None,
        max_tokens: int = DEFAULT_MAX_TOKENS,
        timeout: float = 600.0,
        max_retries: int = 2,
        auth_token: str | None = None,
    ) -> None:
        """``auth_token`` overrides the environment (``--local`` passes its session id)."""
        env_token, api_key = _credentials()
        if auth_token:
            api_key = None
        auth_token = auth_token or env_token
        if not (auth_token or api_key):
            raise ProviderError(
                "no API key: set ANTHROPIC_AUTH_TOKEN or ANTHROPIC_API_KEY "
                "(or run offline with --provider mock or --provider scripted)"
            )
        self.model = model
        self.max_tokens = max_tokens
        self.base_url = base_url or os.environ.get("ANTHROPIC_BASE_URL") or DEFAULT_BASE_URL
        import anthropic  # heavy (~1 s): only imported when this provider is actually used

        self._sdk = anthropic
        self.client = anthropic.Anthropic(
            api_key=api_key, auth_token=auth_token, base_url=self.base_url,
            timeout=timeout, max_retries=max_retries,
        )

    def complete(
        self,
        messages: list[dict[str, Any]],
        tools: list[dict[str, Any]] | None = None,
        system: str | None = None,
        tool_choice: dict[str, Any] | None = None,
    ) -> ModelResponse:
        kwargs: dict[str, Any] = {"model": self.model, "max_tokens": self.max_tokens, "messages": messages}
        if system:
            kwargs["system"] = system
        if tools:
            kwargs["tools"] = tools
            if tool_choice:
                kwargs["tool_choice"] = tool_choice
        sdk = self._sdk
        try:
            raw = self.client.messages.with_raw_response.create(**kwargs)
            data = json.loads(raw.http_response.text)
        except sdk.APITimeoutError:
            raise ProviderError(f"request to {self.base_url} timed out") from None
        except sdk.APIConnectionError as exc:
            cause = exc.__cause__ or exc
            raise ProviderError(f"cannot reach {self.base_url}: {str(cause).splitlines()[0] or type(cause).__name__}") from None
        except sdk.AuthenticationError as exc:
            raise ProviderError(f"{self.base_url} refused the API key (401): {_error_message(exc)}") from None
        except sdk.APIStatusError as exc:
            raise ProviderError(f"{self.base_url} answered {exc.status_code}: {_error_message(exc)}") from None
        except ValueError as exc:  # not JSON
            raise ProviderError(f"{self.base_url} sent a response that is not JSON: {exc}") from None
        return self._to_response(data)

    def _to_response(self, data: object) -> ModelResponse:
        if not isinstance(data, dict) or not isinstance(data.get("content"), list):
            raise ProviderError(f"{self.base_url} sent an unexpected response (no 'content' list)")
        usage = data.get("usage") or {}
        return ModelResponse(
            content=[b for b in data["content"] if isinstance(b, dict)],
            stop_reason=data.get("stop_reason") or "end_turn",
            usage=Usage(int(usage.get("input_tokens") or 0), int(usage.get("output_tokens") or 0)),
            model=data.get("model"),
        )
