"""An engine pool's health: only a failure of the replica drains it, and a health probe brings it back.

The attack: one request the replicas refuse for its content (a prompt over the context: SGLang and
vLLM answer 400, or an error event in a stream) made the pool drain the replica, retry on the next,
which refused it too, and drain that one: every session of the gateway got 529 for ``recheck_s``,
and the agent could do it again at will. Now such a refusal is that request's own 400 (in its
protocol's format) and nobody else's; a replica is drained only by a failure of its own (a 5xx, a
dropped connection), and a drained one is taken back by the pool's probe of its ``/health`` route,
without a request having to try it. Real fake engine servers on loopback, real HTTP."""

from __future__ import annotations

import asyncio
import time

import anthropic
import httpx
import openai
import pytest

from agent_code.engines.base import EngineError, EngineRequestError
from agent_code.engines.pool import PoolEngine
from agent_code.engines.sglang import SGLangEngine
from agent_code.engines.vllm import VLLMEngine
from agent_code.gateway.app import create_app
from agent_code.gateway.pipeline import Gateway
from agent_code.gateway.server import BackgroundServer
from agent_code.protocols.canonical import SamplingParams
from fakes.sglang_server import FakeSGLang
from fakes.vllm_server import FakeVLLM
from gateway_fixtures import qwen25_renderer

CONTEXT = 400
LONG = "word " * 2000          # far over CONTEXT tokens


def fakes(kind: str, n: int = 2, **kw) -> list:
    if kind == "sglang":
        return [FakeSGLang(context_length=CONTEXT, **kw) for _ in range(n)]
    return [FakeVLLM(max_model_len=CONTEXT, **kw) for _ in range(n)]


def engine_for(kind: str, url: str):
    return SGLangEngine(url) if kind == "sglang" else VLLMEngine(url, model="fake/vllm-model")


def pool_over(kind: str, servers: list, **kw) -> PoolEngine:
    return PoolEngine([engine_for(kind, s.url) for s in servers], names=[f"r{i}" for i in range(len(servers))],
                      **kw)


def generations(fake) -> int:
    return sum(1 for r in fake.requests if r["path"] in ("/generate", "/v1/completions"))


@pytest.mark.parametrize("kind", ["sglang", "vllm"])
@pytest.mark.parametrize("stream", [False, True], ids=["json", "sse"])
def test_an_over_long_prompt_drains_no_replica(kind, stream) -> None:
    """Through a real gateway: the over-long request gets its own 400 (Anthropic and OpenAI
    formats), is sent to one replica only, and both replicas stay healthy: the next sessions are
    served."""
    servers = fakes(kind)
    for s in servers:
        s.__enter__()
    try:
        pool = pool_over(kind, servers)
        gateway = Gateway(pool, qwen25_renderer(), model_name="m")
        with BackgroundServer(create_app(gateway)) as server:
            agent = anthropic.Anthropic(base_url=server.url, api_key="attacker", max_retries=0)
            chat = openai.OpenAI(base_url=server.url + "/v1", api_key="attacker-o", max_retries=0)
            long = [{"role": "user", "content": LONG}]
            for _ in range(3):                           # again and again
                with pytest.raises(anthropic.APIStatusError) as refused:
                    if stream:   # the stream had begun: the refusal is its error event
                        with agent.messages.stream(model="m", max_tokens=16, messages=long) as events:
                            events.get_final_message()
                    else:
                        agent.messages.create(model="m", max_tokens=16, messages=long)
                assert refused.value.status_code == (200 if stream else 400)
                body = refused.value.body
                assert body["error"]["type"] == "invalid_request_error" and "context" in body["error"]["message"]
            if stream:
                with pytest.raises(openai.APIError, match="context"):
                    for _ in chat.chat.completions.create(model="m", max_tokens=16, messages=long, stream=True):
                        pass
            else:
                with pytest.raises(openai.BadRequestError) as oa:
                    chat.chat.completions.create(model="m", max_tokens=16, messages=long)
                assert oa.value.body["type"] == "invalid_request_error"
            status = httpx.get(f"{server.url}/v1/engines").json()
            sent = [generations(s) for s in servers]
            for sid in ("honest-1", "honest-2", "honest-3"):
                reply = anthropic.Anthropic(base_url=server.url, api_key=sid, max_retries=0).messages.create(
                    model="m", max_tokens=16, messages=[{"role": "user", "content": "hi"}])
                assert reply.stop_reason == "end_turn"
    finally:
        for s in servers:
            s.__exit__(None, None, None)
    assert [r["healthy"] for r in status["replicas"]] == [True, True], status   # before the fix: [False, False]
    assert [r["failures"] for r in status["replicas"]] == [0, 0]
    assert sum(sent) == 4                                # each refused request went to one replica only


@pytest.mark.parametrize("status, payload", [(400, {"error": {"message": "too long"}}),
                                             (413, {"error": {"message": "too large"}}),
                                             (422, {"detail": "invalid sampling parameters"})])
def test_each_refusal_of_the_request_is_its_own_error(status, payload) -> None:
    [server] = fakes("sglang", 1)
    with server:
        pool = pool_over("sglang", [server])

        async def run() -> None:
            server.error_next = (status, payload)
            with pytest.raises(EngineRequestError):
                await pool.generate([5, 6, 7], SamplingParams(max_new_tokens=4), session_id="a")
            assert pool.replicas[0].healthy and pool.replicas[0].failures == 0
            await pool.generate([5, 6, 7], SamplingParams(max_new_tokens=4), session_id="a")
            await pool.close()
        asyncio.run(run())


@pytest.mark.parametrize("kind", ["sglang", "vllm"])
@pytest.mark.parametrize("failure", ["http500", "connection"])
def test_a_failed_replica_is_drained_and_its_health_route_brings_it_back(kind, failure) -> None:
    """A 500, or a server gone (connections refused), drains the replica: the request is served
    by the other one. While it is down the probe keeps it drained; once it answers ``/health``
    again it is healthy — without any request sent to it."""
    servers = fakes(kind)
    for s in servers:
        s.__enter__()
    victim_port = int(servers[0].url.rsplit(":", 1)[1])
    pool = pool_over(kind, servers, probe_s=0.1, recheck_s=3600)
    restarted = None

    async def run() -> None:
        nonlocal restarted
        sampling = SamplingParams(max_new_tokens=4)
        await pool.generate([1, 2, 3], sampling, session_id="a")          # pinned to r0
        assert pool.pins["a"].name == "r0"
        if failure == "http500":
            servers[0].error_next = (500, {"error": {"message": "CUDA out of memory (fake)"}})
        else:
            servers[0].__exit__(None, None, None)
        generation = await pool.generate([1, 2, 3, 4], sampling, session_id="a")
        assert generation.meta["replica"] == "r1"                         # failed over
        assert not pool.replicas[0].healthy and pool.replicas[0].failures == 1
        if failure == "connection":
            await asyncio.sleep(0.5)                                       # several probes, all refused
            assert not pool.replicas[0].healthy
            restarted = (FakeSGLang if kind == "sglang" else FakeVLLM)(port=victim_port)
            restarted.__enter__()
        before = generations(restarted or servers[0])
        deadline = time.monotonic() + 5
        while not pool.replicas[0].healthy:                                # no request: only the probe
            assert time.monotonic() < deadline, "the probe did not bring the replica back"
            await asyncio.sleep(0.05)
        assert generations(restarted or servers[0]) == before
        assert pool._prober is not None
        await asyncio.sleep(0.3)
        assert pool._prober.done()                                         # nothing drained: the probe stops
        served = await pool.generate([9], sampling, session_id="new")     # new roots may go there again
        assert served.meta["replica"] == "r0"
        await pool.close()

    try:
        asyncio.run(run())
    finally:
        for s in [*servers, restarted]:
            if s is not None:
                try:
                    s.__exit__(None, None, None)
                except Exception:
                    pass


def test_every_replica_down_is_still_an_engine_error() -> None:
    servers = fakes("sglang")
    for s in servers:
        s.__enter__()
    pool = pool_over("sglang", servers, probe_s=0.1)
    for s in servers:
        s.error_next = (503, {"error": {"message": "overloaded"}})

    async def run() -> None:
        with pytest.raises(EngineError, match="no healthy replica left") as info:
            await pool.generate([1, 2], SamplingParams(max_new_tokens=4), session_id="x")
        assert not isinstance(info.value, EngineRequestError)
        await pool.close()
    try:
        asyncio.run(run())
    finally:
        for s in servers:
            s.__exit__(None, None, None)
