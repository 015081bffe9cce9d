"""What the load work changed on the gateway's hot path keeps its meaning: the segment-cached
tokenization gives the tokenizer's own ids, a turn shares its parent's history objects
without changing what it records, the history keys are computed once per turn and agree with
a fresh computation, samples serialize as before, and the ``instant`` engine answers as
documented."""

from __future__ import annotations

import asyncio
import dataclasses
import json

import anthropic
import pytest

from agent_code.engines import create_engine
from agent_code.engines.instant import DEFAULT_REPLY, InstantEngine
from agent_code.protocols.canonical import SamplingParams
from agent_code.render.template import SegmentCache
from agent_code.trajectory.history import conversation_key
from agent_code.trajectory.samples import Sample
from gateway_fixtures import qwen3_renderer, qwen25_renderer, scripted_gateway

TOOLS = [{"type": "function", "function": {"name": "Read", "description": "Read a file. " * 200,
                                           "parameters": {"type": "object",
                                                          "properties": {"file_path": {"type": "string"}}}}}]
AWKWARD = ["\u0301abc<|im_end|>\u0301 x", "  <|im_end|><|im_end|>  ", "é" * 2000 + "<|im_start|>",
           "<tool_call>\n{}\n</tool_call>" * 200, " \n\n" * 800, "<|im_end", "im_end|>" * 300, ""]


@pytest.fixture(params=["qwen3", "qwen2.5"])
def renderer(request):
    return qwen3_renderer() if request.param == "qwen3" else qwen25_renderer()


def conversation(extra: list[str]) -> list[dict]:
    messages = [{"role": "system", "content": "You are a careful coding agent. " * 300},
                {"role": "user", "content": "Fix the bug."}]
    for text in extra:
        messages += [{"role": "assistant", "content": text}, {"role": "user", "content": text + " and more " * 150}]
    return messages


def test_segment_cached_ids_are_the_tokenizers_own(renderer):
    cache = renderer._segments
    assert isinstance(cache, SegmentCache)
    for messages in (conversation([]), conversation(AWKWARD)):
        for tools in (TOOLS, None):
            expected = renderer.render(messages, tools, cached=False)
            assert renderer.render(messages, tools) == expected  # may fill the cache
            hits = cache.hits
            assert renderer.render(messages, tools) == expected  # from the cache
            assert cache.hits > hits


def test_segment_cache_is_bounded_and_refuses_unsafe_delimiters(renderer):
    calls = []

    def encode(text):
        calls.append(text)
        return renderer.encode(text)

    eot = renderer.end_of_turn_text
    cache = SegmentCache(encode, eot, renderer.end_of_turn_ids[0], min_chars=10, max_chars=100)
    texts = [f"segment {i} " * 4 for i in range(5)]  # 40+ chars each: at most two kept
    ids = [cache.encode(eot.join([t, "short"])) for t in texts]
    assert ids == [renderer.encode(eot.join([t, "short"])) for t in texts]
    assert cache._chars <= 100 and len(cache._kept) == 2
    calls.clear()
    assert cache.encode(texts[-1]) == renderer.encode(texts[-1]) and calls == []    # kept
    assert cache.encode(texts[0]) == renderer.encode(texts[0]) and calls == [texts[0]]  # evicted
    # a delimiter that another added token overlaps is not safe to split at ("ab<|im" would match
    # first in "ab<|im_end|>")
    renderer._added[10**9] = dataclasses.make_dataclass("Tok", ["content"])("ab" + eot[:4])
    try:
        assert SegmentCache.for_renderer(renderer) is None
    finally:
        del renderer._added[10**9]


def test_turns_share_their_parents_history_and_record_the_same(tmp_path):
    renderer = qwen3_renderer()
    call = "<tool_call>\n" + json.dumps({"name": "echo", "arguments": {"text": "x"}}) + "\n</tool_call>"
    tools = [{"name": "echo", "description": "Echo.", "input_schema": {
        "type": "object", "properties": {"text": {"type": "string"}}, "required": ["text"]}}]
    with scripted_gateway(tmp_path, [{"text": call}] * 3, renderer) as (url, gateway):
        client = anthropic.Anthropic(base_url=url, api_key="share", max_retries=0)
        messages: list = [{"role": "user", "content": "Go."}]
        sent = []
        for _ in range(3):
            reply = client.messages.create(model="m", max_tokens=64, system="Be brief.", tools=tools,
                                           messages=messages)
            sent.append(json.loads(json.dumps(messages)))
            messages.append({"role": "assistant", "content": [b.model_dump(exclude_none=True) for b in reply.content]})
            use = next(b for b in reply.content if b.type == "tool_use")
            messages.append({"role": "user", "content": [{"type": "tool_result", "tool_use_id": use.id,
                                                          "content": "result"}]})
        turns = gateway.store.get("share").turns
    assert [t.parent for t in turns] == [None, 0, 1]
    for earlier, later in zip(turns, turns[1:]):
        assert later.tools is earlier.tools                          # one tools object per chain
        assert all(a is b for a, b in zip(later.messages, earlier.messages))
        assert later.messages[len(earlier.messages)] is earlier.reply
        assert later.prompt_ids[:len(earlier.prompt_ids)] == earlier.prompt_ids
    for turn in turns:  # the history's key, computed once in the plan, is the fresh one
        assert gateway.store.get("share").history.by_key[conversation_key(turn)] == turn.index
    # what is recorded is still the request's canonical history (equal, shared or not)
    from agent_code.protocols.anthropic import translate_request
    for turn, wire in zip(turns, sent):
        chat = translate_request({"model": "m", "max_tokens": 64, "system": "Be brief.", "tools": tools,
                                  "messages": wire})
        assert turn.messages == chat.messages and turn.tools == chat.tools


def test_sample_to_dict_is_a_deep_copy_like_asdict():
    sample = Sample("s", 0, "main", [1, 2, 3], 2, [0, 1], [0.0, -0.5], reward=1.0,
                    metadata={"turns": [0], "drift": [{"kind": "fork"}]})
    out = sample.to_dict()
    assert out == dataclasses.asdict(sample)
    out["tokens"].append(9)
    out["metadata"]["drift"][0]["kind"] = "changed"
    assert sample.tokens == [1, 2, 3] and sample.metadata["drift"][0]["kind"] == "fork"


def test_instant_engine_replies_at_once_as_documented():
    renderer = qwen3_renderer()
    engine = create_engine("instant", renderer)
    assert isinstance(engine, InstantEngine) and engine.text == DEFAULT_REPLY
    gen = asyncio.run(engine.generate([1, 2, 3], SamplingParams(max_new_tokens=512)))
    assert gen.finish_reason == "stop" and gen.prompt_tokens == 3
    assert gen.output_ids == renderer.encode(DEFAULT_REPLY) + renderer.end_of_turn_ids
    assert gen.logprobs == [-(k + 1) / 1024 for k in range(len(gen.output_ids))]
    cut = asyncio.run(engine.generate([1], SamplingParams(max_new_tokens=3)))
    assert cut.finish_reason == "length" and cut.output_ids == gen.output_ids[:3]
    text = create_engine("instant:Done: all good.", renderer)
    assert text.text == "Done: all good."
    stopped = asyncio.run(text.generate([1], SamplingParams(max_new_tokens=64, stop=[":"])))
    assert stopped.finish_reason == "stop" and stopped.meta["stop"] == ":"
    assert renderer.decode(stopped.output_ids) == "Done:"


# ----------------------------------------------------------------------------- the template, rendered directly

DIRECT_CALL = {"type": "function", "function": {"name": "Read", "arguments": {"file_path": "a.py", "limit": 2,
                                                                              "offset": 1.5, "all": True, "x": None}}}
DIRECT_CONVERSATIONS = [
    conversation(AWKWARD[:4]),
    [{"role": "system", "content": "s"}, {"role": "user", "content": "hi", "name": None},
     {"role": "assistant", "content": None, "tool_calls": [DIRECT_CALL]},
     {"role": "tool", "content": "x = 1\n" * 40, "tool_call_id": None}, {"role": "user", "content": "Go on. 你好 🙂"}],
    [{"role": "user", "content": "Why?"}, {"role": "assistant", "content": "Because.", "reasoning_content": "think"},
     {"role": "user", "content": "So?"}, {"role": "assistant", "content": "", "reasoning": "more", "tool_calls":
                                          [DIRECT_CALL, DIRECT_CALL]}, {"role": "tool", "content": "one"},
     {"role": "tool", "content": "two"}],
    [{"role": "user", "content": [{"type": "text", "text": "blocks"}]}, {"role": "assistant", "content": "ok",
                                                                          "thinking": "t"}],
]


@pytest.fixture(params=["qwen3", "qwen2.5", "qwen3-coder", "deepseek-v3"])
def any_renderer(request):
    from gateway_fixtures import deepseek_v3_renderer, qwen3_coder_renderer

    return {"qwen3": qwen3_renderer, "qwen2.5": qwen25_renderer, "qwen3-coder": qwen3_coder_renderer,
            "deepseek-v3": deepseek_v3_renderer}[request.param]()


def test_direct_template_renders_what_apply_chat_template_does(any_renderer):
    """The template rendered straight from its compilation (``DirectTemplate``, for plain JSON)
    gives ``apply_chat_template``'s text, with and without tools and the generation prompt, and
    leaves the messages as they were."""
    direct = any_renderer._direct
    assert direct is not None
    for messages in DIRECT_CONVERSATIONS:
        for tools in (TOOLS, None):
            for generation in (True, False):
                before = json.dumps(messages)
                try:
                    expected = any_renderer.tokenizer.apply_chat_template(
                        messages, tools=tools, tokenize=False, add_generation_prompt=generation)
                except Exception as exc:   # a template that refuses it refuses it directly too
                    with pytest.raises(type(exc)):
                        direct.render(messages, tools, generation)
                    continue
                assert direct.render(messages, tools, generation) == expected
                assert any_renderer.render_text(messages, tools, add_generation_prompt=generation) == expected
                assert json.dumps(messages) == before


def test_direct_template_leaves_what_is_not_plain_json_to_transformers(renderer):
    """A string subclass, an object, a tuple of messages, a callable tool or template keywords
    take ``apply_chat_template`` (whose placeholders and conversions the direct path does not
    copy): ``render`` answers None and ``render_text`` still gives transformers' text."""

    class Text(str):
        pass

    def read_file(path: str) -> str:
        """Read a file.

        Args:
            path: The file.
        """
        return path

    direct = renderer._direct
    plain = [{"role": "user", "content": "hi"}]
    odd: list[tuple[object, object]] = [
        ([{"role": "user", "content": Text("hi")}], None), ([{"role": "user", "content": object()}], None),
        (tuple(plain), None), (plain, [read_file]), ([{"role": "user", "content": "hi", 1.5j: 1}], None)]
    for messages, tools in odd:
        assert direct.render(messages, tools, True) is None
        expected = renderer.tokenizer.apply_chat_template(messages, tools=tools, tokenize=False,
                                                          add_generation_prompt=True)
        assert renderer.render_text(messages, tools) == expected
    expected = renderer.tokenizer.apply_chat_template(plain, tokenize=False, add_generation_prompt=True,
                                                      enable_thinking=False)
    assert renderer.render_text(plain, None, enable_thinking=False) == expected


def test_direct_template_on_recorded_client_sessions(renderer):
    """Every request the real Claude Code, Codex and Qwen Code sent (tests/data), rendered both ways."""
    import gzip
    from pathlib import Path

    data = Path(__file__).resolve().parent / "data" / "client_sessions.json.gz"
    with gzip.open(data, "rt", encoding="utf-8") as fh:
        sessions = json.load(fh)
    count = 0
    for requests in sessions.values():
        for request in requests:
            messages, tools = request["messages"], request.get("tools") or None
            expected = renderer.tokenizer.apply_chat_template(messages, tools=tools, tokenize=False,
                                                              add_generation_prompt=True)
            assert renderer._direct.render(messages, tools, True) == expected
            count += 1
    assert count > 10


def test_disconnected_reads_a_ready_message_and_waits_for_none():
    """``http.disconnected`` answers as Starlette's ``is_disconnected`` does: a disconnect ready at
    once is seen (and remembered); a receive that would wait is unwound (its waiter removed)
    without waiting; another ready message is no disconnect."""
    from starlette.requests import Request

    from agent_code.gateway.http import disconnected

    async def main() -> None:
        gone, never = asyncio.Event(), asyncio.Event()
        received: list[str] = []

        async def receive():
            received.append("called")
            if not gone.is_set():
                await never.wait()
            return {"type": "http.disconnect"}

        request = Request({"type": "http", "method": "POST", "path": "/", "headers": []}, receive)
        assert not disconnected(request) and not disconnected(request)
        assert not never._waiters and len(received) == 2   # nothing left waiting
        gone.set()
        assert disconnected(request) and disconnected(request)
        assert len(received) == 3 and await request.is_disconnected()

        async def more():
            return {"type": "http.request", "body": b"", "more_body": False}

        assert not disconnected(Request({"type": "http", "method": "POST", "path": "/", "headers": []}, more))

    asyncio.run(main())
