"""What a trainer needs of the gateway (issue 40): the weight version an engine reports, end to end;
the client's pause / resume / weights; a gateway on an engine object the trainer owns; a rollout's
caps on context and new tokens. Real gateways on loopback, the official Anthropic SDK as the agent,
SGLang's wire protocol from its local fake."""

from __future__ import annotations

import asyncio
import time
from typing import Any, Sequence

import anthropic
import httpx
import pytest

from agent_code.engines.base import Generation
from agent_code.engines.sglang import SGLangEngine
from agent_code.gateway.app import create_app
from agent_code.gateway.server import BackgroundServer, build_gateway
from agent_code.protocols.canonical import SamplingParams
from agent_code.rollout.client import GatewayClient, GatewayClientError
from agent_code.rollout.groups import local_gateway
from agent_code.rollout.runner import RolloutConfig, run_rollout
from agent_code.tasks import load_tasks
from agent_code.trajectory.store import TurnLog
from fakes.sglang_server import FakeModel, FakeSGLang
from gateway_fixtures import qwen25_renderer, scripted_gateway, write_script
from rollout_fixtures import say, tasks_file

TOKEN = "admin-secret"
TOOLS = [{"name": "read_file", "description": "Read a file.",
          "input_schema": {"type": "object", "properties": {"path": {"type": "string"}}, "required": ["path"]}}]
CALL = '<tool_call>\n{"name": "read_file", "arguments": {"path": "a.py"}}\n</tool_call>'


def sdk(url: str, key: str) -> anthropic.Anthropic:
    return anthropic.Anthropic(base_url=url, api_key=key, max_retries=0)


def ask(agent: anthropic.Anthropic, text: str = "What is in a.py?", max_tokens: int = 64) -> Any:
    return agent.messages.create(model="m", max_tokens=max_tokens, messages=[{"role": "user", "content": text}],
                                 tools=TOOLS)


# ----------------------------------------------------------------------------- SGLang's weight version

def test_sglang_s_own_weight_version_becomes_the_generation_s():
    """SGLang names its weights in every reply's meta_info (``"default"`` until one is set); the
    engine hands the named ones on, streamed or not, and leaves out what names none."""
    prompt = [5, 6, 7]
    with FakeSGLang() as fake:
        engine = SGLangEngine(fake.url)

        async def go() -> list[dict[str, Any]]:
            metas = [(await engine.generate(prompt, SamplingParams(max_new_tokens=8))).meta]
            async with httpx.AsyncClient() as http:
                r = await http.post(f"{fake.url}/update_weight_version", json={"new_version": "step-8"})
                assert r.json()["new_version"] == "step-8"
            metas.append((await engine.generate(prompt, SamplingParams(max_new_tokens=8))).meta)
            async for item in engine.stream(prompt, SamplingParams(max_new_tokens=8)):
                last = item
            assert isinstance(last, Generation)
            metas.append(last.meta)
            for value in (12, "", "  ", "x" * 300, {"v": 1}, True, None):   # no version of its own
                fake.weight_version = value
                metas.append((await engine.generate(prompt, SamplingParams(max_new_tokens=8))).meta)
            await engine.close()
            return metas

        metas = asyncio.run(go())
    assert "weight_version" not in metas[0]                    # "default": SGLang was told no version
    assert metas[1]["weight_version"] == metas[2]["weight_version"] == "step-8"
    assert metas[3]["weight_version"] == "12"                  # an integer is a version too
    assert all("weight_version" not in m for m in metas[4:])


def test_the_turn_and_the_sample_carry_sglang_s_version(tmp_path):
    """End to end through the gateway: a turn generated while SGLang says ``default`` records the
    gateway's own version; after SGLang is told ``sg-2`` the next turn (streamed, this time)
    records ``sg-2``, in the session's turns, the turn log and the sample's spans."""
    renderer = qwen25_renderer()
    eot = list(renderer.end_of_turn_ids)
    model = FakeModel(eos_id=eot[0])
    model.replies.extend([list(renderer.encode(CALL)) + eot, list(renderer.encode("It sets x.")) + eot])
    with FakeSGLang(model=model, context_length=32768) as fake:
        gateway = build_gateway(f"sglang:{fake.url}", tokenizer=renderer, trajectory_dir=str(tmp_path / "traj"),
                                weight_version="g1")
        with BackgroundServer(create_app(gateway, admin_token=TOKEN)) as server:
            agent = sdk(server.url, "sess")
            first = ask(agent)
            call = next(b for b in first.content if b.type == "tool_use")
            httpx.post(f"{fake.url}/update_weight_version", json={"new_version": "sg-2"}).raise_for_status()
            messages = [{"role": "user", "content": "What is in a.py?"},
                        {"role": "assistant", "content": [b.model_dump(exclude_none=True) for b in first.content]},
                        {"role": "user", "content": [{"type": "tool_result", "tool_use_id": call.id,
                                                      "content": "x = 1"}]}]
            with agent.messages.stream(model="m", max_tokens=64, messages=messages, tools=TOOLS) as stream:
                assert stream.get_final_message().content[0].text == "It sets x."
            turns = list(gateway.store.get("sess").turns)
            [sample] = httpx.post(f"{server.url}/v1/sessions/sess/finish", headers={"x-agent-code-admin": TOKEN},
                                  json={"reward": 1.0}).json()["samples"]
    assert [r["body"]["stream"] for r in fake.requests if r["path"] == "/generate"] == [False, True]
    assert [t.weight_version for t in turns] == ["g1", "sg-2"]
    [logged] = TurnLog(tmp_path / "traj").sessions().values()
    assert [t.weight_version for t in logged] == ["g1", "sg-2"]
    spans = sample["metadata"]["weight_versions"]
    assert [(s["turn"], s["version"]) for s in spans] == [(0, "g1"), (1, "sg-2")]
    prompt = len(sample["tokens"]) - sample["response_length"]
    for s, turn in zip(spans, turns):
        assert sample["tokens"][prompt + s["start"]:prompt + s["end"]] == list(turn.output_ids)


# ----------------------------------------------------------------------------- the client's weight routes

def test_the_client_pauses_resumes_and_reads_the_weights(tmp_path):
    """``GatewayClient.pause/resume/weights`` over the admin routes: a turn sent while paused waits
    and, admitted after ``resume("v8")``, records ``v8``; ``reject`` refuses turns; the routes refuse
    a client without the token and a bad argument, as GatewayClientError."""
    qwen25_renderer()
    script = write_script(tmp_path, [say(CALL), say("The file defines x.")])

    async def go() -> None:
        async with local_gateway(f"scripted:{script}", admin_token=TOKEN) as gw:
            async with GatewayClient(gw.url, admin_token=TOKEN) as client:
                await client.open_session("s1")
                status = await client.pause()
                assert status["paused"] and status["mode"] == "wait" and status["drained"], status
                held = asyncio.ensure_future(asyncio.to_thread(ask, sdk(gw.url, "s1")))
                deadline = time.monotonic() + 10
                while (await client.weights())["waiting"] != 1:
                    assert time.monotonic() < deadline, "the paused turn never reached the gate"
                    await asyncio.sleep(0.02)
                assert not held.done() and await client.turns("s1") == []
                status = await client.resume("v8")
                assert status["weight_version"] == "v8" and not status["paused"], status
                reply = await asyncio.wait_for(held, 10)
                assert reply.stop_reason == "tool_use"
                assert [t.get("weight_version") for t in await client.turns("s1")] == ["v8"]

                assert (await client.pause("reject"))["mode"] == "reject"
                with pytest.raises(anthropic.InternalServerError) as refused:
                    await asyncio.to_thread(ask, sdk(gw.url, "s1"), "again")
                assert refused.value.status_code == 503 and len(await client.turns("s1")) == 1
                assert (await client.resume())["weight_version"] == "v8"    # no version: it stays
                assert (await client.weights()) == {"weight_version": "v8", "paused": False, "mode": None,
                                                    "generating": 0, "waiting": 0, "drained": True}

                with pytest.raises(GatewayClientError, match="'wait' or 'reject'"):
                    await client.pause("later")   # type: ignore[arg-type]
                with pytest.raises(GatewayClientError, match="400.*'weight_version' must be"):
                    await client.resume("")
            for token in (None, "guess", "s1"):   # no token, a wrong one, a session's key
                async with GatewayClient(gw.url, admin_token=token) as stranger:
                    for call in (stranger.pause(), stranger.resume("evil"), stranger.weights()):
                        with pytest.raises(GatewayClientError, match="40[13]"):
                            await call
            async with GatewayClient(gw.url, admin_token=TOKEN) as client:
                assert (await client.weights())["weight_version"] == "v8"

    asyncio.run(go())


# ----------------------------------------------------------------------------- an engine object

class CountingEngine:
    """An engine of the test's own, as a trainer would hand in: it says how many prompt ids it got
    (so the reply shows the gateway really called it), with fixed logprobs, and names its weights."""

    name = "counting"

    def __init__(self, text_of: Any) -> None:
        self.text_of = text_of          # the served tokenizer (not named 'tokenizer' or 'renderer')
        self.calls: list[tuple[list[int], str | None]] = []
        self.closed = False

    async def generate(self, prompt_ids: Sequence[int], sampling: SamplingParams, *,
                       session_id: str | None = None) -> Generation:
        self.calls.append((list(prompt_ids), session_id))
        whole = list(self.text_of.encode(f"You sent {len(prompt_ids)} prompt tokens.")) + \
            list(self.text_of.end_of_turn_ids)
        ids = whole[:sampling.max_new_tokens]
        return Generation(ids, [-0.25] * len(ids), "stop" if ids == whole else "length",
                          prompt_tokens=len(prompt_ids), meta={"weight_version": "trainer-3"})

    async def close(self) -> None:
        self.closed = True


def test_a_gateway_on_an_engine_object_the_trainer_owns(tmp_path):
    renderer = qwen25_renderer()
    engine = CountingEngine(renderer)

    async def go() -> None:
        async with local_gateway(engine, tokenizer=renderer, admin_token=TOKEN, max_turns=5) as gw:
            async with GatewayClient(gw.url, admin_token=TOKEN) as client:
                await client.open_session("trainer.0")
                reply = await asyncio.to_thread(lambda: sdk(gw.url, "trainer.0").messages.create(
                    model="m", max_tokens=64, messages=[{"role": "user", "content": "hello"}]))
                [(prompt, session)] = engine.calls
                assert session == "trainer.0"
                assert reply.content[0].text == f"You sent {len(prompt)} prompt tokens."
                [turn] = await client.turns("trainer.0")
                assert turn["prompt_ids"] == prompt and turn["weight_version"] == "trainer-3"
                assert turn["output_ids"] == list(renderer.encode(reply.content[0].text)) + \
                    list(renderer.end_of_turn_ids)
                [sample] = await client.finish("trainer.0", reward=1.0)
                assert sample.tokens[-len(turn["output_ids"]):] == turn["output_ids"]
                assert sample.rollout_log_probs[-len(turn["output_ids"]):] == [-0.25] * len(turn["output_ids"])

    asyncio.run(go())
    assert not engine.closed           # the trainer's engine: the gateway never closes it


def test_an_engine_object_needs_a_tokenizer_it_or_the_caller_names(tmp_path):
    from agent_code.render import models

    renderer = qwen25_renderer()
    engine = CountingEngine(renderer)
    with pytest.raises(ValueError, match="needs tokenizer="):
        build_gateway(engine=engine)                      # never the default model's tokenizer, silently
    engine.tokenizer = str(models.default_gguf().resolve())   # type: ignore[attr-defined]
    assert build_gateway(engine=engine).renderer is renderer  # a named tokenizer (the same, cached)
    named = CountingEngine(renderer)
    named.renderer = renderer                                 # type: ignore[attr-defined]
    gateway = build_gateway(engine=named, weight_version="w")
    assert gateway.engine is named and gateway.renderer is renderer and gateway.weights.version == "w"

    class NoGenerate:
        name = "broken"

        async def close(self) -> None: ...

    with pytest.raises(TypeError, match="is not an engine"):
        build_gateway(engine=NoGenerate(), tokenizer=renderer)  # type: ignore[arg-type]
    with pytest.raises(TypeError, match="not both"):
        build_gateway("instant", engine=engine)
    with pytest.raises(TypeError, match="needs an engine"):
        build_gateway()
    # the spec string, positional or by keyword, as before
    script = write_script(tmp_path, [say("hi")])
    assert type(build_gateway(f"scripted:{script}").engine).__name__ == "ScriptedEngine"
    assert type(build_gateway(engine=f"scripted:{script}").engine).__name__ == "ScriptedEngine"


# ----------------------------------------------------------------------------- caps on a session's turns

def test_a_session_s_max_new_tokens_caps_each_turn(tmp_path):
    """``max_new_tokens`` on a session caps what a turn samples: a request asking for more (or for
    nothing: the protocol's default) gets the cap and stops as max_tokens, in every protocol and
    streamed too, and the session's own sampling override does not lift it; a request asking for
    fewer keeps its own. Bad values are refused when the session opens."""
    import openai

    renderer = qwen25_renderer()
    long = "one two three four five six seven eight nine ten eleven twelve"
    with scripted_gateway(tmp_path, [say(long)] * 8, renderer, admin_token=TOKEN) as (url, gateway):
        async def go() -> None:
            async with GatewayClient(url, admin_token=TOKEN) as client:
                opened = await client.open_session("capped", max_new_tokens=5, max_context_tokens=100_000)
                assert (opened["max_new_tokens"], opened["max_context_tokens"]) == (5, 100_000)
                # the session's sampling sets every turn's max_new_tokens (the trainer decides): still capped
                await client.open_session("overridden", max_new_tokens=5, sampling={"max_new_tokens": 64})
                for bad in (0, -1):
                    with pytest.raises(GatewayClientError, match="'max_new_tokens' must be a int of at least 1"):
                        await client.open_session(f"bad{bad}", max_new_tokens=bad)
                for bad_value in ("5", True, 2.5):
                    r = httpx.post(f"{url}/v1/sessions", headers={"x-agent-code-admin": TOKEN},
                                   json={"session_id": "bad", "max_new_tokens": bad_value})
                    assert r.status_code == 400 and "'max_new_tokens'" in r.text, r.text

        asyncio.run(go())
        agent = sdk(url, "capped")
        count = [{"role": "user", "content": "count"}]
        capped = agent.messages.create(model="m", max_tokens=4096, messages=count)
        fewer = agent.messages.create(model="m", max_tokens=3, messages=count)
        with agent.messages.stream(model="m", max_tokens=4096, messages=count) as stream:
            streamed = stream.get_final_message()
        oa = openai.OpenAI(base_url=f"{url}/v1", api_key="capped", max_retries=0)
        chat = oa.chat.completions.create(model="m", messages=count, max_completion_tokens=4096)
        chat_default = oa.chat.completions.create(model="m", messages=count)
        response = oa.responses.create(model="m", input="count", max_output_tokens=4096)
        overridden = sdk(url, "overridden").messages.create(model="m", max_tokens=4096, messages=count)
        turns = gateway.store.get("capped").turns
        [overridden_turn] = gateway.store.get("overridden").turns
    assert overridden.stop_reason == "max_tokens" and len(overridden_turn.output_ids) == 5
    assert capped.stop_reason == fewer.stop_reason == streamed.stop_reason == "max_tokens"
    assert chat.choices[0].finish_reason == chat_default.choices[0].finish_reason == "length"
    assert response.status == "incomplete"
    assert [len(t.output_ids) for t in turns] == [5, 3, 5, 5, 5, 5]
    assert {t.finish_reason for t in turns} == {"length"}
    assert list(turns[0].output_ids) == list(renderer.encode(long))[:5]


def test_a_rollout_s_config_caps_its_session(tmp_path):
    """``RolloutConfig.max_new_tokens`` and ``max_context_tokens`` reach the rollout's session: the
    first rollout's turn is cut at ``max_new_tokens``; the second's budget leaves its first turn some
    20 tokens past its prompt, and the turn stops there, finishing ``length``."""
    renderer = qwen25_renderer()
    [task] = load_tasks(tasks_file(tmp_path, ["slugs-lowercase"]))
    long = " ".join(["word"] * 60)
    lines = [say(long, "slugs-lowercase.0"), say("Done.", "slugs-lowercase.0"),
             say(long, "slugs-lowercase.1"), say("Done.", "slugs-lowercase.1")]

    async def rollout(url: str, k: int, config: RolloutConfig) -> Any:
        async with GatewayClient(url) as client:
            result, _ = await run_rollout(task, k, config, client)
            return result

    with scripted_gateway(tmp_path, lines, renderer) as (url, gateway):
        first = asyncio.run(rollout(url, 0, RolloutConfig(budget=60, model="m", keep_sessions=True,
                                                          max_new_tokens=7)))
        session = gateway.store.get(first.session_id)
        assert session.summary()["max_new_tokens"] == 7 and session.max_context_tokens is None
        assert session.turns, (first.abort_reason, first.error, first.log[-2000:], first.stderr[-2000:])
        head = session.turns[0]
        assert (len(head.output_ids), head.finish_reason) == (7, "length"), first.error
        budget = len(head.prompt_ids) + 20
        second = asyncio.run(rollout(url, 1, RolloutConfig(budget=60, model="m", keep_sessions=True,
                                                           max_new_tokens=50, max_context_tokens=budget)))
        session = gateway.store.get(second.session_id)
        assert (session.max_new_tokens, session.max_context_tokens) == (50, budget)
        head = session.turns[0]
    # the same task and profile: about the same first prompt (the sandbox's path may differ in length)
    room = budget - len(head.prompt_ids)
    assert 5 < room < 35 and head.finish_reason == "length"
    assert list(head.output_ids) == list(renderer.encode(long))[:room]
