"""LocalProvider: agent-code on its own gateway, in process — no key, no network.

It builds the rollout gateway on a local engine (by default the embedded llama.cpp with
the bundled Qwen2.5-Coder-0.5B), serves it on a free loopback port in a background
thread, and talks to it through :class:`AnthropicProvider` like any other endpoint. So
the agent exercises exactly the path a rollout does, and every turn is recorded.
"""

from __future__ import annotations

import atexit
import uuid
from typing import TYPE_CHECKING

from agent_code.providers.anthropic import AnthropicProvider
from agent_code.types import ModelResponse

if TYPE_CHECKING:
    from agent_code.gateway.server import BackgroundServer

DEFAULT_ENGINE = "llamacpp"
DEFAULT_LOCAL_MAX_TOKENS = 1024


class LocalProvider:
    name = "local"

    def __init__(self, engine: str = DEFAULT_ENGINE, model: str = "agent-code-local",
                 max_tokens: int | None = None, tokenizer: str | None = None) -> None:
        from agent_code.gateway.app import create_app
        from agent_code.gateway.server import BackgroundServer, build_gateway

        self.engine_spec = engine
        self.gateway = build_gateway(engine, tokenizer=tokenizer, model_name=model)
        self.server: BackgroundServer | None = BackgroundServer(create_app(self.gateway)).__enter__()
        atexit.register(self.close)
        self.session_id = f"local-{uuid.uuid4().hex[:12]}"
        url = self.server.url
        self.client = AnthropicProvider(model=model, base_url=url, auth_token=self.session_id,
                                        max_tokens=max_tokens or DEFAULT_LOCAL_MAX_TOKENS, max_retries=0)
        self.model = model
        self.base_url = f"{url} (in process, engine {engine})"

    def complete(self, messages, tools=None, system=None, tool_choice=None) -> ModelResponse:
        return self.client.complete(messages, tools=tools, system=system, tool_choice=tool_choice)

    def close(self) -> None:
        if self.server is not None:
            self.server.__exit__(None, None, None)
            self.server = None
