"""Real token streaming through the gateway.

* The prefix property of :mod:`agent_code.parse.incremental`, hard: random completions mixing
  text, whitespace, partial markers, think blocks and tool calls in all three formats, read at
  every character boundary (finer than any token boundary): what is certain is always a prefix
  of the final parse, only grows, and a settled reasoning is the final one.
* End to end on a paced scripted engine (``token_delay``): the first content delta arrives
  early on all three endpoints; text streams before a tool call whose arguments come in
  several deltas; the official SDKs' stream helpers get exactly the non-streamed reply; the
  recorded turn is the same as without streaming.
"""

from __future__ import annotations

import asyncio
import json
import random
import time

import anthropic
import httpx
import openai
import pytest

from agent_code.engines.scripted import ScriptedEngine
from agent_code.gateway.app import create_app
from agent_code.gateway.pipeline import Gateway
from agent_code.gateway.server import BackgroundServer
from agent_code.parse import parse_completion
from agent_code.parse.incremental import Progress, advance, certain, without_stop_tail
from gateway_fixtures import deepseek_v3_renderer, qwen3_renderer, qwen25_renderer, scripted_gateway, write_script

# --------------------------------------------------------------------------------------------
# the prefix property

DECLARED = [{"type": "function", "function": {"name": "echo", "parameters": {
    "type": "object", "properties": {"text": {"type": "string"}, "n": {"type": "integer"}}, "required": ["text"]}}},
    {"type": "function", "function": {"name": "date", "parameters": {"type": "object", "properties": {}}}}]


def _call(rng: random.Random) -> str:
    name = rng.choice(["echo", "date", "nope"])
    args = rng.choice([{}, {"text": "hi <b>"}, {"text": "a\n b ", "n": 3}, {"n": "x"}])
    body = json.dumps({"name": name, "arguments": args})
    shape = rng.randrange(10)
    if shape >= 7:                                                     # DeepSeek-V3
        fenced = f"{name}\n```json\n{json.dumps(args)}\n```"
        one = f"<｜tool▁call▁begin｜>function<｜tool▁sep｜>{fenced}<｜tool▁call▁end｜>"
        if shape == 7:
            return f"<｜tool▁calls▁begin｜>{one}\n{one}<｜tool▁calls▁end｜>"
        if shape == 8:
            return f"<｜tool▁calls▁begin｜>{one}"                       # stopped before the end marker
        return f"<｜tool▁calls▁begin｜><｜tool▁call▁begin｜>function<｜tool▁sep｜>{name}\n```json\n{{\"n\": "
    if shape == 0:
        return f"<tool_call>\n{body}\n</tool_call>"
    if shape == 1:
        return f"<tool_call>\n{body}"                                  # unterminated
    if shape == 2:
        params = "".join(f"<parameter={k}>\n{v}\n</parameter>\n" for k, v in args.items())
        return f"<tool_call>\n<function={name}>\n{params}</function>\n</tool_call>"
    if shape == 3:
        return f"<function={name}>\n</function>"                       # bare qwen3_coder block
    if shape == 4:
        return f"```{rng.choice(['json', '', 'python', 'tool_call'])}\n{body}\n```"
    if shape == 5:
        return body                                                    # a bare JSON object
    return "<tool_call>{\"name\": broken"


FRAGMENTS = ["Hello", " world", "\n\n", "  ", "\t", "<", "<tool", "<tool_call", "</tool_call>", "<think>",
             "</think>", "<th", "</thi", "{", "{ ", "{\"", "}", "```", "``", "`", "<function=", "<parameter=x>",
             "é", "ok.", "STOP", "ST", "\n", "<｜tool▁calls▁begin｜>", "<｜tool▁call▁begin｜>", "<｜tool▁sep｜>",
             "<｜tool▁call▁end｜>", "<｜tool▁calls▁end｜>", "<｜tool", "<｜"]


def random_completion(rng: random.Random) -> str:
    parts = []
    if rng.random() < 0.4:
        parts.append(rng.choice(["", " ", "\n"]) + "<think>" + rng.choice(["", "\n", "hmm ", " a\nb  "]))
        if rng.random() < 0.8:
            parts.append("</think>" + rng.choice(["", "\n\n", " "]))
    elif rng.random() < 0.15:
        parts.append("lone thought </think>\n")
    for _ in range(rng.randrange(8)):
        parts.append(_call(rng) if rng.random() < 0.3 else rng.choice(FRAGMENTS))
    return "".join(parts)


def _final(text: str, tool_parser: str, reasoning_parser: str, tools) -> Progress:
    reply = parse_completion(text, tool_parser=tool_parser, reasoning_parser=reasoning_parser, tools=tools)
    return Progress(reply.reasoning or "", True, reply.text)


@pytest.mark.parametrize("tool_parser", ["hermes", "qwen3_coder", "deepseek_v3", "fenced_json", "none"])
@pytest.mark.parametrize("reasoning_parser", ["think", "none"])
def test_certain_is_always_a_prefix_of_the_final_parse(tool_parser, reasoning_parser):
    rng = random.Random(f"{tool_parser}/{reasoning_parser}")
    checked = 0
    for _ in range(400):
        body = random_completion(rng)
        tools = rng.choice([DECLARED, DECLARED, None])
        stops = rng.choice([(), ("STOP",), ("</tool_call>", "ST")])
        full = body + (stops[0] if stops and rng.random() < 0.5 else "")
        # the final text: the stop string the engine stopped on is cut, as Gateway.parse does
        final_text = full[:-len(stops[0])] if stops and full.endswith(stops[0]) else full
        final = _final(final_text, tool_parser, reasoning_parser, tools)
        sent = Progress()
        streamed = {"reasoning": "", "text": ""}
        for k in range(len(full) + 1):
            now = certain(full[:k], tool_parser=tool_parser, reasoning_parser=reasoning_parser, tools=tools,
                          stops=stops)
            assert final.reasoning.startswith(now.reasoning), (full, k, now)
            assert final.text.startswith(now.text), (full, k, now)
            if now.reasoning_done:
                assert now.reasoning == final.reasoning, (full, k, now)
            else:
                assert now.text == ""
            news, sent = advance(sent, now)
            for kind, piece in news:
                if kind != "reasoning_done":
                    streamed[kind] += piece
            checked += 1
        assert streamed == {"reasoning": sent.reasoning, "text": sent.text}
        assert final.reasoning.startswith(streamed["reasoning"]) and final.text.startswith(streamed["text"])
    assert checked > 4000


def test_certain_streams_what_it_can():
    kw = dict(tool_parser="hermes", reasoning_parser="think", tools=DECLARED)
    assert certain("<think>\nplan it</th", **kw) == Progress("plan it", False, "")
    assert certain("<think>plan</think>\n\nHello wor", **kw) == Progress("plan", True, "Hello wor")
    assert certain("<think>x</think>Hi <tool_c", **kw) == Progress("x", True, "Hi")
    assert certain("<think>x</think>Look: {\"name\"", **kw) == Progress("x", True, "Look:")
    assert certain("Hello", **kw) == Progress("", False, "")     # a lone </think> may still come
    assert certain("Hello", tool_parser="hermes", reasoning_parser="none", tools=None) == Progress("", True, "Hello")
    assert certain("a <tool_call>{", tool_parser="hermes", reasoning_parser="none", tools=None).text == "a <tool_call>{"
    assert without_stop_tail("done.\nUs", ["\nUser:"]) == "done."


# --------------------------------------------------------------------------------------------
# end to end

TOOLS_ANTHROPIC = [{"name": "echo", "description": "Echo text.", "input_schema": {
    "type": "object", "properties": {"text": {"type": "string"}}, "required": ["text"]}}]
TOOLS_CHAT = [{"type": "function", "function": {"name": "echo", "description": "Echo text.",
                                                "parameters": TOOLS_ANTHROPIC[0]["input_schema"]}}]
TOOLS_RESPONSES = [{"type": "function", "name": "echo", "description": "Echo text.",
                    "parameters": TOOLS_ANTHROPIC[0]["input_schema"]}]
LONG_TEXT = " ".join(f"word{k}" for k in range(60)) + "."
CALL_TEXT = ("I will echo it now, " + LONG_TEXT + "\n<tool_call>\n" +
             json.dumps({"name": "echo", "arguments": {"text": "x" * 150}}) + "\n</tool_call>")


def _sse_timeline(url: str, path: str, body: dict, key: str) -> list[tuple[float, str, dict]]:
    """(seconds since the request, event name or "", data) for every SSE data line."""
    out, event = [], ""
    start = time.monotonic()
    headers = {"x-api-key": key, "authorization": f"Bearer {key}"}
    with httpx.stream("POST", url + path, json=body, headers=headers, timeout=60) as response:
        assert response.status_code == 200
        for line in response.iter_lines():
            if line.startswith("event: "):
                event = line[7:]
            elif line.startswith("data: ") and line != "data: [DONE]":
                out.append((time.monotonic() - start, event, json.loads(line[6:])))
    return out


def _first_content(timeline, is_content) -> float:
    return next(t for t, event, data in timeline if is_content(event, data))


ENDPOINTS = {
    "anthropic": ("/v1/messages", lambda: {"model": "m", "max_tokens": 2000, "stream": True, "tools": TOOLS_ANTHROPIC,
                                           "messages": [{"role": "user", "content": "go"}]},
                  lambda e, d: e == "content_block_delta" and d["delta"]["type"] == "text_delta"),
    "chat": ("/v1/chat/completions", lambda: {"model": "m", "stream": True, "tools": TOOLS_CHAT,
                                              "messages": [{"role": "user", "content": "go"}]},
             lambda e, d: bool(d.get("choices") and d["choices"][0]["delta"].get("content"))),
    "responses": ("/v1/responses", lambda: {"model": "m", "stream": True, "tools": TOOLS_RESPONSES, "input": "go"},
                  lambda e, d: e == "response.output_text.delta"),
}


@pytest.mark.parametrize("endpoint", sorted(ENDPOINTS))
def test_first_delta_arrives_early_and_text_precedes_one_chunked_call(tmp_path, endpoint):
    renderer = qwen25_renderer()
    path, body, is_text = ENDPOINTS[endpoint]
    with scripted_gateway(tmp_path, [{"text": CALL_TEXT, "token_delay": 0.01}], renderer) as (url, gw):
        timeline = _sse_timeline(url, path, body(), "stream-1")
        turn = gw.store.get("stream-1").turns[0] if endpoint == "anthropic" else None
    total = timeline[-1][0]
    assert total > 0.5                                         # the pace was real
    assert _first_content(timeline, is_text) < 0.25 * total
    if endpoint == "anthropic":
        kinds = [(d["index"], d["delta"]["type"]) for _, e, d in timeline if e == "content_block_delta"]
        assert kinds[0] == (0, "text_delta")
        args = [k for k in kinds if k[1] == "input_json_delta"]
        assert len(args) > 1 and {i for i, _ in args} == {1}
        assert kinds.index(args[0]) > max(n for n, k in enumerate(kinds) if k[1] == "text_delta")
        assert turn.reply["tool_calls"][0]["function"]["name"] == "echo"
    elif endpoint == "chat":
        deltas = [d["choices"][0]["delta"] for _, _, d in timeline if d.get("choices")]
        calls = [d["tool_calls"][0] for d in deltas if d.get("tool_calls")]
        assert len(calls) > 2 and {c["index"] for c in calls} == {0} and calls[0]["function"]["name"] == "echo"
        last_text = max(n for n, d in enumerate(deltas) if d.get("content"))
        assert deltas.index({"tool_calls": [calls[0]]}) > last_text
    else:
        names = [e for _, e, _ in timeline]
        assert names.count("response.function_call_arguments.delta") > 1
        assert names.index("response.function_call_arguments.delta") > \
            max(n for n, e in enumerate(names) if e == "response.output_text.delta")


def _script(text: str, copies: int, token_delay: float = 0.002) -> list[dict]:
    return [{"text": text, "token_delay": token_delay} for _ in range(copies)]


REPLIES = [
    "Hello there!  \n\nHow are you?  ",
    CALL_TEXT,
    "Look: {\"name\": \"echo\", \"arguments\": {\"text\": \"hi\"}} and ```json\n{\"a\": 1}\n``` done.",
    "Broken <tool_call>{\"name\": oops</tool_call> but fine.",
]


@pytest.mark.parametrize("reply", range(len(REPLIES)))
def test_anthropic_sdk_stream_equals_the_json_reply(tmp_path, reply):
    renderer = qwen25_renderer()
    with scripted_gateway(tmp_path, _script(REPLIES[reply], 2), renderer) as (url, gw):
        client = anthropic.Anthropic(base_url=url, api_key="a", max_retries=0)
        kwargs = dict(model="m", max_tokens=2000, tools=TOOLS_ANTHROPIC, messages=[{"role": "user", "content": "go"}])
        whole = client.messages.create(**kwargs)
        with client.messages.stream(**kwargs) as stream:
            streamed = stream.get_final_message()
        turns = gw.store.get("a").turns
    strip = lambda m: [{k: v for k, v in b.model_dump().items() if k != "id"} for b in m.content]  # noqa: E731
    assert strip(streamed) == strip(whole) and streamed.stop_reason == whole.stop_reason
    first, second = turns
    assert (first.output_ids, first.logprobs, first.reply) == (second.output_ids, second.logprobs, second.reply)


def test_anthropic_thinking_streams_as_thinking_deltas(tmp_path):
    renderer = qwen3_renderer()
    text = "<think>\nFirst I think " + LONG_TEXT + "\n</think>\n\nThe answer is " + LONG_TEXT
    with scripted_gateway(tmp_path, _script(text, 2, 0.005), renderer) as (url, gw):
        client = anthropic.Anthropic(base_url=url, api_key="t", max_retries=0)
        kwargs = dict(model="m", max_tokens=2000, messages=[{"role": "user", "content": "go"}],
                      thinking={"type": "enabled", "budget_tokens": 1024})
        whole = client.messages.create(**kwargs)
        timeline = _sse_timeline(url, "/v1/messages", {**kwargs, "stream": True}, "t")
    total = timeline[-1][0]
    thinking = [t for t, e, d in timeline if e == "content_block_delta" and d["delta"]["type"] == "thinking_delta"]
    assert len(thinking) > 3 and thinking[0] < 0.25 * total
    streamed = "".join(d["delta"].get("text", "") for _, e, d in timeline if e == "content_block_delta")
    assert streamed == whole.content[1].text
    assert "".join(d["delta"].get("thinking", "") for _, e, d in timeline
                   if e == "content_block_delta") == whole.content[0].thinking


@pytest.mark.parametrize("reply", range(len(REPLIES)))
def test_openai_chat_stream_accumulates_to_the_json_reply(tmp_path, reply):
    renderer = qwen25_renderer()
    with scripted_gateway(tmp_path, _script(REPLIES[reply], 2), renderer) as (url, _gw):
        client = openai.OpenAI(base_url=f"{url}/v1", api_key="c", max_retries=0)
        kwargs = dict(model="m", tools=TOOLS_CHAT, messages=[{"role": "user", "content": "go"}])
        whole = client.chat.completions.create(**kwargs).choices[0]
        content, calls, finish = "", {}, None
        for chunk in client.chat.completions.create(stream=True, **kwargs):
            if not chunk.choices:
                continue
            delta = chunk.choices[0].delta
            content += delta.content or ""
            for call in delta.tool_calls or []:
                entry = calls.setdefault(call.index, {"name": "", "arguments": ""})
                entry["name"] += (call.function.name or "") if call.function else ""
                entry["arguments"] += (call.function.arguments or "") if call.function else ""
            finish = chunk.choices[0].finish_reason or finish
    assert content == (whole.message.content or "")
    assert [calls[k] for k in sorted(calls)] == [{"name": c.function.name, "arguments": c.function.arguments}
                                                for c in whole.message.tool_calls or []]
    assert finish == whole.finish_reason


@pytest.mark.parametrize("reply", range(len(REPLIES)))
def test_openai_responses_stream_equals_the_json_reply(tmp_path, reply):
    renderer = qwen25_renderer()
    with scripted_gateway(tmp_path, _script(REPLIES[reply], 2), renderer) as (url, _gw):
        client = openai.OpenAI(base_url=f"{url}/v1", api_key="r", max_retries=0)
        kwargs = dict(model="m", tools=TOOLS_RESPONSES, input="go")
        whole = client.responses.create(**kwargs)
        with client.responses.stream(**kwargs) as stream:
            for _ in stream:
                pass
            streamed = stream.get_final_response()
    def shape(response):
        return [{k: v for k, v in item.model_dump(exclude_none=True).items() if k not in ("id", "call_id")} for item in response.output]
    assert shape(streamed) == shape(whole) and streamed.output_text == whole.output_text


def test_pings_flow_while_nothing_is_certain(tmp_path):
    renderer = qwen3_renderer()   # think parser: plain text could still become reasoning
    with scripted_gateway(tmp_path, [{"text": "Plain " + LONG_TEXT, "token_delay": 0.02}], renderer,
                          ping_interval_s=0.2) as (url, _gw):
        timeline = _sse_timeline(url, "/v1/messages", {"model": "m", "max_tokens": 2000, "stream": True,
                                                       "messages": [{"role": "user", "content": "go"}]}, "p")
    pings = [t for t, e, _ in timeline if e == "ping"]
    first_text = _first_content(timeline, lambda e, d: e == "content_block_delta")
    assert len([t for t in pings if t < first_text]) >= 3


class WatchedStream:
    """The scripted engine's stream, noting a request whose stream was cancelled or closed early."""

    def __init__(self, engine):
        self.engine, self.name, self.cancelled, self.finished = engine, engine.name, 0, 0

    async def generate(self, prompt_ids, sampling, *, session_id=None):
        raise AssertionError("a streamed request must use stream()")

    async def stream(self, prompt_ids, sampling, *, session_id=None):
        try:
            async for item in self.engine.stream(prompt_ids, sampling, session_id=session_id):
                yield item
        except (asyncio.CancelledError, GeneratorExit):
            self.cancelled += 1
            raise
        self.finished += 1

    async def close(self):
        pass


def test_disconnect_mid_stream_cancels_the_engine_and_records_nothing(tmp_path):
    renderer = qwen25_renderer()
    engine = WatchedStream(ScriptedEngine(write_script(tmp_path, [{"text": LONG_TEXT * 4, "token_delay": 0.05}]),
                                          renderer))
    gateway = Gateway(engine, renderer)
    body = {"model": "m", "max_tokens": 2000, "stream": True, "messages": [{"role": "user", "content": "hi"}]}
    with BackgroundServer(create_app(gateway, ping_interval_s=0.1)) as server:
        with httpx.Client(base_url=server.url, timeout=10) as client:
            with client.stream("POST", "/v1/messages", json=body, headers={"x-api-key": "s"}) as r:
                for line in r.iter_lines():
                    if "text_delta" in line:
                        break   # a delta of the reply arrived: hang up mid-stream
        deadline = time.monotonic() + 10
        while engine.cancelled == 0 and time.monotonic() < deadline:
            time.sleep(0.05)
        assert engine.cancelled == 1 and engine.finished == 0
        assert gateway.store.get("s").turns == []


def test_openai_responses_reasoning_streams_and_equals_the_json_reply(tmp_path):
    renderer = qwen3_renderer()
    text = "<think>\nFirst " + LONG_TEXT + "\n</think>\n\nSo: " + CALL_TEXT
    with scripted_gateway(tmp_path, _script(text, 2), renderer) as (url, _gw):
        client = openai.OpenAI(base_url=f"{url}/v1", api_key="r", max_retries=0)
        kwargs = dict(model="m", tools=TOOLS_RESPONSES, input="go")
        whole = client.responses.create(**kwargs)
        with client.responses.stream(**kwargs) as stream:
            kinds = [event.type for event in stream]
            streamed = stream.get_final_response()
    def shape(response):
        return [{k: v for k, v in item.model_dump(exclude_none=True).items() if k not in ("id", "call_id")}
                for item in response.output]
    assert shape(streamed) == shape(whole) and [i.type for i in whole.output] == ["reasoning", "message",
                                                                                 "function_call"]
    assert kinds.count("response.reasoning_text.delta") > 3 and kinds.count("response.output_text.delta") > 3
    assert kinds.index("response.output_text.delta") > kinds.index("response.reasoning_text.done")


@pytest.mark.parametrize("which", ["qwen2.5", "qwen3", "deepseek-v3"])
def test_gateway_certain_is_a_prefix_at_every_token_boundary(which):
    """The decode layer too: partial ids (an incomplete UTF-8 character, an end-of-turn token,
    a stop string) never make the certain part stray from the final parse."""
    from agent_code.engines.base import Generation
    from agent_code.protocols.canonical import ChatRequest, SamplingParams

    renderer = {"qwen2.5": qwen25_renderer, "qwen3": qwen3_renderer, "deepseek-v3": deepseek_v3_renderer}[which]()
    gw = Gateway(None, renderer)
    rng = random.Random(which)
    for _ in range(150):
        body = random_completion(rng) + rng.choice(["", " 日本語 🙂 𝔘𝔫𝔦 🪿ꙮ", "é\n"])
        tools = rng.choice([DECLARED, None])
        request = ChatRequest(messages=[{"role": "user", "content": "go"}], tools=tools, sampling=SamplingParams())
        stops = rng.choice([[], ["STOP"]])
        ids = list(renderer.encode(body + ("STOP" if stops else ""))) + list(renderer.end_of_turn_ids)
        sampling = SamplingParams(stop=stops)
        final, _ = gw.parse(Generation(ids, [0.0] * len(ids), "stop"), sampling, request)
        want = Progress(final.reasoning or "", True, final.text)
        for k in range(len(ids) + 1):
            now = gw.certain(ids[:k], sampling, request)
            assert want.reasoning.startswith(now.reasoning) and want.text.startswith(now.text), (body, k, now)
            assert not now.reasoning_done or now.reasoning == want.reasoning


@pytest.mark.parametrize("kind,endpoint", [("sglang", "anthropic"), ("vllm", "chat")])
def test_http_engines_stream_through_the_gateway(kind, endpoint):
    """SGLang and vLLM (local fakes of their HTTP streams) hand tokens over as they come: the
    first text delta arrives early, and the recorded turn holds every sampled id with its logprob."""
    from agent_code.engines.sglang import SGLangEngine
    from agent_code.engines.vllm import VLLMEngine
    from fakes.sglang_server import FakeModel, FakeSGLang
    from fakes.vllm_server import FakeVLLM

    renderer = qwen25_renderer()
    model = FakeModel(eos_id=renderer.end_of_turn_ids[0], decode=renderer.decode)
    reply = renderer.encode(CALL_TEXT) + [model.eos_id]
    model.replies.append(reply)
    fake_cls, engine_cls = (FakeSGLang, SGLangEngine) if kind == "sglang" else (FakeVLLM, VLLMEngine)
    path, body, is_text = ENDPOINTS[endpoint]
    with fake_cls(model=model, token_delay=0.01, **({"context_length": 32768} if kind == "sglang"
                                                      else {"max_model_len": 32768})) as fake:
        gateway = Gateway(engine_cls(fake.url), renderer)
        with BackgroundServer(create_app(gateway)) as server:
            timeline = _sse_timeline(server.url, path, body(), "http-1")
        [turn] = gateway.store.get("http-1").turns
    total = timeline[-1][0]
    assert total > 0.5 and _first_content(timeline, is_text) < 0.25 * total
    assert list(turn.output_ids) == reply
    assert list(turn.logprobs) == pytest.approx([FakeModel.logprob(k, t) for k, t in enumerate(reply)], rel=1e-6)
    assert turn.reply["tool_calls"][0]["function"]["name"] == "echo"
