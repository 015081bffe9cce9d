"""An engine pool: sessions pinned to replicas, new roots to the least loaded, failover that keeps
every session and turn token-exact. Routing is tested on the pool itself; failover through a
real gateway on loopback with the Anthropic SDK as the agent."""

from __future__ import annotations

import asyncio
import json

import anthropic
import httpx
import pytest

from agent_code.engines import create_engine
from agent_code.engines.base import EngineError
from agent_code.engines.instant import InstantEngine
from agent_code.engines.pool import PoolEngine
from agent_code.gateway.app import create_app
from agent_code.gateway.pipeline import Gateway
from agent_code.gateway.server import BackgroundServer
from agent_code.protocols.canonical import SamplingParams
from gateway_fixtures import qwen25_renderer

TOOLS = [{"name": "Read", "description": "Read a file.",
          "input_schema": {"type": "object", "properties": {"file_path": {"type": "string"}},
                           "required": ["file_path"]}}]


class Killable(InstantEngine):
    """An instant replica that can be made unreachable, like a crashed server."""

    def __init__(self, renderer, name: str) -> None:
        super().__init__(renderer)
        self.name, self.dead, self.served = name, False, 0

    async def generate(self, prompt_ids, sampling, *, session_id=None):
        if self.dead:
            raise EngineError(f"{self.name}: connection refused")
        self.served += 1
        return await super().generate(prompt_ids, sampling, session_id=session_id)


def pool_of(n: int, **kw) -> tuple[PoolEngine, list[Killable]]:
    replicas = [Killable(qwen25_renderer(), f"r{i}") for i in range(n)]
    return PoolEngine(replicas, names=[r.name for r in replicas], **kw), replicas


def test_sessions_stay_on_their_replica_and_new_roots_spread():
    pool, replicas = pool_of(3)
    s = SamplingParams(max_new_tokens=16)

    async def run() -> None:
        for turn in range(3):
            for sid in ("a", "b", "c", "d"):
                g = await pool.generate([1, 2, 3] * (turn + 1), s, session_id=sid)
                assert g.meta["replica"] == pool.pins[sid].name
        await pool.generate([1], s)          # no session: answered, nothing pinned
    asyncio.run(run())
    assert {sid: r.name for sid, r in pool.pins.items()} == {"a": "r0", "b": "r1", "c": "r2", "d": "r0"}
    assert [r.served for r in replicas] == [3 + 3, 3 + 1, 3]   # the unpinned one: fewest sessions


def test_new_roots_go_to_the_least_outstanding_and_respect_the_cap():
    pool, _ = pool_of(2, max_sessions=1)
    pool.replicas[0].outstanding = 500                     # r0 is busy answering a long prompt
    assert pool.pick("a").name == "r1"
    assert pool.pick("b").name == "r0"                     # r1 is at its cap of one session
    assert pool.pick("c").name == "r1"                     # both full: the least loaded still answers
    assert pool.pick("a").name == "r1"                     # a stays where it is


def test_every_replica_down_is_a_clear_engine_error():
    pool, replicas = pool_of(2)
    for r in replicas:
        r.dead = True
    with pytest.raises(EngineError, match="no healthy replica left in the pool.*r0: r0: connection refused"):
        asyncio.run(pool.generate([1, 2], SamplingParams(max_new_tokens=4), session_id="x"))


def test_a_spec_names_a_pool():
    renderer = qwen25_renderer()
    pool = create_engine("instant*3", renderer)
    assert isinstance(pool, PoolEngine) and len(pool.replicas) == 3
    urls = create_engine("vllm:http://127.0.0.1:1,http://127.0.0.1:2", renderer)
    assert isinstance(urls, PoolEngine) and [r.name for r in urls.replicas] == ["http://127.0.0.1:1",
                                                                               "http://127.0.0.1:2"]
    for bad in ("instant*0", "instant*65", "vllm:http://a,,http://b"):
        with pytest.raises(ValueError):
            create_engine(bad, renderer)


class Conversation:
    """A Claude-Code-like agent on one session: a tool call each turn, a tool result back."""

    def __init__(self, url: str, sid: str) -> None:
        self.sid = sid
        self.agent = anthropic.Anthropic(base_url=url, api_key=sid, max_retries=0)
        self.messages: list[dict] = [{"role": "user", "content": f"Look at the code ({sid})."}]

    def turn(self) -> None:
        reply = self.agent.messages.create(model="m", max_tokens=64, messages=self.messages, tools=TOOLS)
        call = next(b for b in reply.content if b.type == "tool_use")
        n = len(self.messages)
        self.messages += [{"role": "assistant", "content": [b.model_dump(exclude_none=True) for b in reply.content]},
                          {"role": "user", "content": [{"type": "tool_result", "tool_use_id": call.id,
                                                        "content": f"line {n} of {self.sid}\n" * 20}]}]


def check_token_exact(turns, sample: dict, renderer) -> None:
    """One chain: every turn extends the held ids of the one before, no drift, and the sample
    trains exactly the sampled ids of every turn."""
    for before, after in zip(turns, turns[1:]):
        assert after.parent == before.index and after.policy == "tokens"
        assert after.prefix_reused > len(before.prompt_ids)          # the sampled output is reused as held
    assert sample["metadata"]["drift"] == [] and sample["metadata"]["turns"] == len(turns)
    assert sum(sample["loss_mask"]) == sum(len(t.output_ids) for t in turns)


def test_killing_a_replica_mid_run_loses_no_session_and_no_turn():
    pool, replicas = pool_of(3)
    renderer = qwen25_renderer()
    gateway = Gateway(pool, renderer, model_name="m")
    admin = {"x-agent-code-admin": "adm"}
    with BackgroundServer(create_app(gateway, admin_token="adm")) as server:
        talks = [Conversation(server.url, f"s{i}") for i in range(6)]
        for _ in range(2):
            for talk in talks:
                talk.turn()
        victim = pool.pins["s0"]
        moved = sorted(victim.sessions)
        next(r for r in replicas if r.name == victim.name).dead = True
        served = next(r for r in replicas if r.name == victim.name).served
        for _ in range(3):                                 # the rest of every session, one replica dead
            for talk in talks:
                talk.turn()
        late = Conversation(server.url, "late")            # a new root avoids the dead replica
        late.turn()
        status = httpx.get(f"{server.url}/v1/engines", headers=admin).json()
        denied = httpx.get(f"{server.url}/v1/engines", headers={"x-api-key": "s0"})
        turns = {t.sid: list(gateway.store.get(t.sid).turns) for t in talks}
        pinned = {sid: pool.pins[sid].name for sid in [*moved, "late"]}
        samples = {t.sid: httpx.post(f"{server.url}/v1/sessions/{t.sid}/finish", headers=admin,
                                     json={"reward": 1.0}).json()["samples"] for t in talks}
    assert denied.status_code == 403
    assert len(moved) == 2 and next(r.served for r in replicas if r.name == victim.name) == served
    dead = next(r for r in status["replicas"] if r["name"] == victim.name)
    assert not dead["healthy"] and dead["failures"] == 1 and dead["sessions"] == []
    assert victim.name not in pinned.values()
    for sid, recorded in turns.items():
        assert len(recorded) == 5, sid                     # no turn lost
        [sample] = samples[sid]
        check_token_exact(recorded, sample, renderer)


def test_an_ended_session_leaves_no_pin():
    pool, _ = pool_of(2)
    gateway = Gateway(pool, qwen25_renderer(), model_name="m")
    admin = {"x-agent-code-admin": "adm"}
    with BackgroundServer(create_app(gateway, admin_token="adm")) as server:
        for sid in ("done", "dropped", "open"):
            Conversation(server.url, sid).turn()
        assert set(pool.pins) == {"done", "dropped", "open"}
        assert httpx.post(f"{server.url}/v1/sessions/done/finish", headers=admin, json={"reward": 0}).status_code == 200
        assert httpx.delete(f"{server.url}/v1/sessions/dropped", headers=admin).status_code == 200
    assert set(pool.pins) == {"open"}
    assert sorted(s for r in pool.replicas for s in r.sessions) == ["open"]


def test_a_keyless_gateway_lists_no_session_keys():
    """Session ids are API keys: /v1/engines names them only to the admin token's holder."""
    pool, _ = pool_of(2)
    gateway = Gateway(pool, qwen25_renderer(), model_name="m")
    with BackgroundServer(create_app(gateway)) as server:
        Conversation(server.url, "secret-key").turn()
        body = httpx.get(f"{server.url}/v1/engines").json()
        denied = httpx.get(f"{server.url}/v1/engines", headers={"x-api-key": "secret-key"})
    assert "secret-key" not in json.dumps(body)
    assert sorted(r["sessions"] for r in body["replicas"]) == [0, 1]
    assert denied.status_code == 403
