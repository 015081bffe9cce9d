"""Model providers. ``create_provider`` keeps the CLI ignorant of their constructors and
imports each one only when asked for (the Anthropic SDK is slow to import)."""

from __future__ import annotations

from pathlib import Path

from agent_code.providers.base import ModelProvider, ProviderError

PROVIDERS = ("anthropic", "local", "mock", "scripted")


def create_provider(name: str, model: str, base_url: str | None = None,
                    script: str | Path | None = None, max_tokens: int | None = None,
                    engine: str | None = None) -> ModelProvider:
    if name == "anthropic":
        from agent_code.providers.anthropic import DEFAULT_MAX_TOKENS, AnthropicProvider

        return AnthropicProvider(model=model, base_url=base_url, max_tokens=max_tokens or DEFAULT_MAX_TOKENS)
    if name == "local":
        from agent_code.providers.local import DEFAULT_ENGINE, LocalProvider

        return LocalProvider(engine=engine or DEFAULT_ENGINE, max_tokens=max_tokens)
    if name == "mock":
        from agent_code.providers.mock import MockProvider

        return MockProvider(model=model)
    if name == "scripted":
        from agent_code.providers.scripted import ScriptedProvider

        if script is None:  # the CLI fills in the demo's script
            raise ProviderError("the scripted provider needs a script (--script FILE)")
        return ScriptedProvider(script, model=model)
    raise ProviderError(f"unknown provider '{name}' (choose from {', '.join(PROVIDERS)})")


__all__ = ["ModelProvider", "ProviderError", "create_provider", "PROVIDERS"]
