"""A client that goes away mid-generation cancels the engine request; nothing is recorded
and the session stays usable. JSON and SSE alike."""

from __future__ import annotations

import asyncio
import time

import httpx
import pytest

from agent_code.engines.scripted import ScriptedEngine
from agent_code.gateway.app import create_app
from agent_code.gateway.pipeline import Gateway
from agent_code.gateway.server import BackgroundServer
from gateway_fixtures import qwen3_renderer, write_script


class Watching:
    """The real scripted engine, plus a note of every request that got cancelled."""

    def __init__(self, engine):
        self.engine, self.name, self.cancelled, self.finished = engine, engine.name, 0, 0

    async def generate(self, prompt_ids, sampling, *, session_id=None):
        try:
            result = await self.engine.generate(prompt_ids, sampling, session_id=session_id)
        except asyncio.CancelledError:
            self.cancelled += 1
            raise
        self.finished += 1
        return result

    async def close(self):
        pass


@pytest.mark.parametrize("stream", [False, True], ids=["json", "sse"])
def test_disconnect_cancels_the_engine_and_records_nothing(tmp_path, stream):
    renderer = qwen3_renderer()
    engine = Watching(ScriptedEngine(write_script(tmp_path, [{"text": "slow", "delay": 30}, {"text": "fast"}]),
                                     renderer))
    gateway = Gateway(engine, renderer)
    body = {"model": "m", "max_tokens": 20, "stream": stream, "messages": [{"role": "user", "content": "hi"}]}
    with BackgroundServer(create_app(gateway, ping_interval_s=0.1)) as server:
        with httpx.Client(base_url=server.url, timeout=httpx.Timeout(5, read=0.5)) as client:
            if stream:  # read message_start and a ping, then hang up
                with client.stream("POST", "/v1/messages", json=body, headers={"x-api-key": "s"}) as r:
                    assert b"message_start" in next(r.iter_bytes())
            else:  # give up waiting for the reply
                with pytest.raises(httpx.ReadTimeout):
                    client.post("/v1/messages", json=body, headers={"x-api-key": "s"})
        deadline = time.monotonic() + 10
        while engine.cancelled == 0 and time.monotonic() < deadline:
            time.sleep(0.05)
        assert engine.cancelled == 1 and engine.finished == 0
        assert gateway.store.get("s").turns == []
        # the session is still usable, and the server healthy
        r = httpx.post(f"{server.url}/v1/messages", json={**body, "stream": False}, headers={"x-api-key": "s"})
        assert r.status_code == 200 and r.json()["content"][0]["text"] == "fast"
        assert len(gateway.store.get("s").turns) == 1
