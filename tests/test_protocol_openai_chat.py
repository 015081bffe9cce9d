"""Chat Completions translation, both ways: table-driven tests of the pure functions in
agent_code.protocols.openai_chat (and the shared rules in openai_common)."""

from __future__ import annotations

import json

import pytest

from agent_code.protocols import openai_chat as wire
from agent_code.protocols import openai_common as oc
from agent_code.protocols.canonical import ParsedReply, ToolCallOut

USER = {"role": "user", "content": "hi"}


def call(name: str, arguments: str, call_id: str = "call_1") -> dict:
    return {"id": call_id, "type": "function", "function": {"name": name, "arguments": arguments}}


def translate(messages=None, **fields):
    return wire.translate_request({"model": "m", "messages": messages or [USER], **fields})


# (name, wire messages, canonical messages)
MESSAGE_CASES = [
    ("string content", [USER], [{"role": "user", "content": "hi"}]),
    ("system and developer become system, in place",
     [{"role": "system", "content": "S"}, USER, {"role": "developer", "content": [{"type": "text", "text": "D"}]}],
     [{"role": "system", "content": "S"}, {"role": "user", "content": "hi"}, {"role": "system", "content": "D"}]),
    ("text parts joined with a newline",
     [{"role": "user", "content": [{"type": "text", "text": "a"}, {"type": "text", "text": "b"}]}],
     [{"role": "user", "content": "a\nb"}]),
    ("empty parts list", [{"role": "user", "content": []}], [{"role": "user", "content": ""}]),
    ("image becomes a placeholder",
     [{"role": "user", "content": [{"type": "text", "text": "see"}, {"type": "image_url", "image_url": {"url": "x"}}]}],
     [{"role": "user", "content": "see\n" + oc.IMAGE_PLACEHOLDER}]),
    ("assistant null content, no calls", [USER, {"role": "assistant", "content": None}],
     [USER, {"role": "assistant", "content": ""}]),
    ("assistant without content key", [USER, {"role": "assistant"}], [USER, {"role": "assistant", "content": ""}]),
    ("assistant refusal part", [USER, {"role": "assistant", "content": [{"type": "refusal", "refusal": "no"}]}],
     [USER, {"role": "assistant", "content": "no"}]),
    ("reasoning kept", [USER, {"role": "assistant", "content": "x", "reasoning_content": "why"}],
     [USER, {"role": "assistant", "content": "x", "reasoning_content": "why"}]),
    ("empty reasoning dropped", [USER, {"role": "assistant", "content": "x", "reasoning_content": ""}],
     [USER, {"role": "assistant", "content": "x"}]),
    ("parallel calls, dict arguments, ids dropped, empty arguments are {}",
     [USER, {"role": "assistant", "content": None, "tool_calls": [call("a", "{\"k\": 1}", "c1"), call("b", "", "c2")]},
      {"role": "tool", "tool_call_id": "c2", "content": "rb"}, {"role": "tool", "tool_call_id": "c1", "content": "ra"}],
     [USER, {"role": "assistant", "content": "", "tool_calls": [
         {"type": "function", "function": {"name": "a", "arguments": {"k": 1}}},
         {"type": "function", "function": {"name": "b", "arguments": {}}}]},
      {"role": "tool", "content": "rb"}, {"role": "tool", "content": "ra"}]),
    ("empty tool_calls list is no calls", [USER, {"role": "assistant", "content": "x", "tool_calls": []}],
     [USER, {"role": "assistant", "content": "x"}]),
    ("tool content as parts",
     [USER, {"role": "assistant", "tool_calls": [call("a", "{}")]},
      {"role": "tool", "tool_call_id": "call_1", "content": [{"type": "text", "text": "r"}]}],
     [USER, {"role": "assistant", "content": "", "tool_calls": [{"type": "function", "function": {"name": "a", "arguments": {}}}]},
      {"role": "tool", "content": "r"}]),
]


@pytest.mark.parametrize("name,messages,expected", MESSAGE_CASES, ids=[c[0] for c in MESSAGE_CASES])
def test_messages(name, messages, expected):
    chat, _ = translate(messages)
    assert chat.messages == expected


# (name, body fields, param, code)
ERROR_CASES = [
    ("no model", {"model": None}, "model", "missing_required_parameter"),
    ("unknown role", {"messages": [{"role": "robot", "content": "x"}]}, "messages[0].role", "invalid_value"),
    ("bad arguments", {"messages": [USER, {"role": "assistant", "tool_calls": [call("a", "{x")]}]},
     "messages[1].tool_calls[0].function.arguments", "invalid_tool_arguments"),
    ("arguments not an object", {"messages": [USER, {"role": "assistant", "tool_calls": [call("a", "[]")]}]},
     "messages[1].tool_calls[0].function.arguments", "invalid_tool_arguments"),
    ("tool answers nothing", {"messages": [USER, {"role": "tool", "tool_call_id": "c", "content": "r"}]},
     "messages[1].tool_call_id", "invalid_tool_call_id"),
    ("tool answers another turn's call",
     {"messages": [USER, {"role": "assistant", "tool_calls": [call("a", "{}", "old")]}, {"role": "tool", "tool_call_id": "old", "content": "r"},
                   {"role": "assistant", "tool_calls": [call("a", "{}", "new")]}, {"role": "tool", "tool_call_id": "old", "content": "r"}]},
     "messages[4].tool_call_id", "invalid_tool_call_id"),
    ("n=2", {"n": 2}, "n", "unsupported_value"),
    ("forced tool undeclared", {"tool_choice": {"type": "function", "function": {"name": "x"}}}, "tool_choice", None),
    ("temperature out of range", {"temperature": 2.5}, "temperature", None),
    ("stop with an empty string", {"stop": ["a", ""]}, "stop[1]", None),
    ("bad content part", {"messages": [{"role": "user", "content": [{"type": "video"}]}]},
     "messages[0].content[0].type", "invalid_type"),
    ("duplicate tool", {"tools": [{"type": "function", "function": {"name": "t"}}] * 2}, "tools[1].function.name", None),
]


@pytest.mark.parametrize("name,fields,param,code", ERROR_CASES, ids=[c[0] for c in ERROR_CASES])
def test_errors_name_the_parameter(name, fields, param, code):
    with pytest.raises(oc.OpenAIRequestError) as info:
        wire.translate_request({"model": "m", "messages": [USER], **fields})
    assert info.value.param == param and info.value.code == code
    assert str(info.value).startswith(param + ":") and info.value.status == 400


@pytest.mark.parametrize("given,expected", [
    (None, None), ("none", {"type": "none"}), ("auto", {"type": "auto"}), ("required", {"type": "any"}),
    ({"type": "function", "function": {"name": "t"}}, {"type": "tool", "name": "t"}),
    ({"type": "allowed_tools", "allowed_tools": {"mode": "required", "tools": []}}, {"type": "any"}),
])
def test_tool_choice(given, expected):
    chat, _ = translate(tools=[{"type": "function", "function": {"name": "t"}}], tool_choice=given)
    assert chat.tool_choice == expected


def test_sampling_tools_and_notes():
    chat, info = translate(max_tokens=10, max_completion_tokens=20, temperature=0.5, top_p=0.9, top_k=5, seed=7,
                           stop="END", stream=True, stream_options={"include_usage": True}, user="u",
                           tools=[{"type": "function", "function": {"name": "t"}},
                                  {"type": "custom", "custom": {"name": "c"}}],
                           logprobs=True, enable_thinking=True)
    s = chat.sampling
    assert (s.max_new_tokens, s.temperature, s.top_p, s.top_k, s.seed, s.stop) == (20, 0.5, 0.9, 5, 7, ["END"])
    assert chat.tools == [{"type": "function", "function": {"name": "t", "description": "",
                                                            "parameters": {"type": "object", "properties": {}}}}]
    assert info.include_usage and info.identity == "u" and chat.stream
    notes = " ".join(chat.notes)
    assert "custom" in notes and "logprobs" in notes and "enable_thinking" in notes
    assert translate()[0].sampling.max_new_tokens == 1024  # SamplingParams' default without a gateway default
    assert wire.translate_request({"model": "m", "messages": [USER]}, default_max_tokens=99)[0].sampling.max_new_tokens == 99
    assert translate(stop=["a", "b"])[0].sampling.stop == ["a", "b"]
    assert translate(metadata={"session_id": "s"}, user="u")[1].identity == "s"


# ---------------------------------------------------------------------------------------------
# way out

REPLIES = [
    ParsedReply(text="Hello."),
    ParsedReply(text=""),
    ParsedReply(text="", tool_calls=[ToolCallOut("a", {"k": [1, "é"]}), ToolCallOut("b", {})]),
    ParsedReply(text="Let me look.", reasoning="I should look.", tool_calls=[ToolCallOut("a", {})]),
]


@pytest.mark.parametrize("reply", REPLIES, ids=["text", "empty", "two calls", "reasoning text call"])
def test_an_echoed_reply_translates_back_to_the_recorded_message(reply):
    """The invariant prefix reuse depends on: what a client resends is what was recorded."""
    body = wire.completion_body(reply, completion_id="c", created=0, model="m", finish_reason="stop",
                                prompt_tokens=1, completion_tokens=2)
    message = body["choices"][0]["message"]
    chat, _ = translate([USER, message] + [{"role": "tool", "tool_call_id": c["id"], "content": "r"}
                                           for c in message.get("tool_calls", [])])
    assert chat.messages[1] == reply.as_message()


@pytest.mark.parametrize("reply,finish,expected", [
    (ParsedReply(text="x"), "stop", "stop"), (ParsedReply(text="x"), "length", "length"),
    (ParsedReply(tool_calls=[ToolCallOut("a", {})]), "stop", "tool_calls"),
    (ParsedReply(tool_calls=[ToolCallOut("a", {})]), "length", "tool_calls"),
])
def test_finish_reason(reply, finish, expected):
    assert wire.finish_reason_for(reply, finish) == expected


def test_completion_body_shape():
    reply = ParsedReply(text="", tool_calls=[ToolCallOut("a", {"x": 1}), ToolCallOut("b", {})])
    body = wire.completion_body(reply, completion_id="chatcmpl-1", created=5, model="m", finish_reason="tool_calls",
                                prompt_tokens=3, completion_tokens=4)
    message = body["choices"][0]["message"]
    assert message["content"] is None and [c["function"]["name"] for c in message["tool_calls"]] == ["a", "b"]
    assert [c["id"] for c in message["tool_calls"]] == [c.id for c in reply.tool_calls]  # filled in place
    assert json.loads(message["tool_calls"][0]["function"]["arguments"]) == {"x": 1}
    assert body["usage"] == {"prompt_tokens": 3, "completion_tokens": 4, "total_tokens": 7}
    assert body["object"] == "chat.completion" and body["choices"][0]["finish_reason"] == "tool_calls"


def test_stream_chunks():
    reply = ParsedReply(text="abcdef", reasoning="rr", tool_calls=[ToolCallOut("a", {"x": "yyyy"}), ToolCallOut("b", {})])
    maker = wire.ChunkMaker(completion_id="chatcmpl-1", model="m", include_usage=True, created=1)
    chunks = [maker.opening()] + maker.reply(reply, finish_reason="tool_calls", prompt_tokens=2, completion_tokens=3,
                                             chunk_chars=4)
    deltas = [c["choices"][0]["delta"] for c in chunks if c["choices"]]
    assert deltas[0] == {"role": "assistant", "content": ""}
    assert "".join(d.get("reasoning_content", "") for d in deltas) == "rr"
    assert "".join(d.get("content", "") for d in deltas) == "abcdef"
    calls = [t for d in deltas for t in d.get("tool_calls", [])]
    assert [(t["index"], t["function"]["name"]) for t in calls if "id" in t] == [(0, "a"), (1, "b")]
    args = {0: "", 1: ""}
    for t in calls:
        args[t["index"]] += t["function"]["arguments"]
    assert {k: json.loads(v) for k, v in args.items()} == {0: {"x": "yyyy"}, 1: {}}
    assert [c["choices"][0]["finish_reason"] for c in chunks if c["choices"]][-1] == "tool_calls"
    assert chunks[-1]["choices"] == [] and chunks[-1]["usage"]["total_tokens"] == 5
    assert all(c["usage"] is None for c in chunks[:-1]) and {c["id"] for c in chunks} == {"chatcmpl-1"}


def test_error_body_format():
    status, body = oc.error_body(529, "overloaded_error", "engine error: x")
    assert status == 503 and body == {"error": {"message": "engine error: x", "type": "server_error", "param": None,
                                                "code": "engine_overloaded"}}
    status, body = oc.error_body(400, "invalid_request_error", "m: bad", "m", "invalid_value")
    assert status == 400 and body["error"] == {"message": "m: bad", "type": "invalid_request_error", "param": "m",
                                               "code": "invalid_value"}
    assert oc.sse_data({"a": "\ud800"}).decode("utf-8")  # a lone surrogate stays valid UTF-8
