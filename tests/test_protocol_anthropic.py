"""The Anthropic protocol module: request translation (seed 000), validation, and replies the
official SDK accepts, as JSON and as an SSE stream."""

from __future__ import annotations

import copy
import json
import random
import re

import anthropic
import httpx2
import pytest

from agent_code.protocols.anthropic import (DOCUMENT_PLACEHOLDER, IMAGE_PLACEHOLDER, ProtocolError,
                                            ThinkingSigner, error_body, new_message_id, new_tool_use_id,
                                            ping_event, response_body, sse_encode, stop_reason_for,
                                            stream_events, translate_count_request, translate_request)
from agent_code.protocols.canonical import ChatRequest, ParsedReply, ToolCallOut

# --- seed 000: the request body (plus "model", which the wire requires) and its translation ----

SEED_BODY = {
    "model": "qwen",
    "system": [{"type": "text", "text": "你是代码助手。"}],
    "messages": [
        {"role": "user", "content": [{"type": "text", "text": "读取 README.md 并概括内容。"}]},
        {"role": "assistant", "content": [
            {"type": "text", "text": "我先读取文件。"},
            {"type": "tool_use", "id": "toolu_demo", "name": "read_file", "input": {"path": "README.md"}}]},
        {"role": "user", "content": [
            {"type": "tool_result", "tool_use_id": "toolu_demo",
             "content": [{"type": "text", "text": "# Demo\n这是一个学习项目。"}]},
            {"type": "text", "text": "请用一句话概括。"}]},
    ],
    "tools": [{"name": "read_file", "description": "读取文件",
               "input_schema": {"type": "object", "properties": {"path": {"type": "string"}},
                                "required": ["path"]}}],
    "max_tokens": 128,
}

SEED_MESSAGES = """[
  {
    "role": "system",
    "content": "你是代码助手。"
  },
  {
    "role": "user",
    "content": "读取 README.md 并概括内容。"
  },
  {
    "role": "assistant",
    "content": "我先读取文件。",
    "tool_calls": [
      {
        "type": "function",
        "function": {
          "name": "read_file",
          "arguments": {
            "path": "README.md"
          }
        }
      }
    ]
  },
  {
    "role": "tool",
    "content": "# Demo\\n这是一个学习项目。"
  },
  {
    "role": "user",
    "content": "请用一句话概括。"
  }
]"""

SEED_TOOLS = """[
  {
    "type": "function",
    "function": {
      "name": "read_file",
      "description": "读取文件",
      "parameters": {
        "type": "object",
        "properties": {
          "path": {
            "type": "string"
          }
        },
        "required": [
          "path"
        ]
      }
    }
  }
]"""


def body(**overrides):
    out = copy.deepcopy(SEED_BODY)
    out.update(overrides)
    return out


def user(*blocks):
    return {"role": "user", "content": list(blocks)}


def text(t):
    return {"type": "text", "text": t}


def test_seed_000_byte_for_byte():
    original = copy.deepcopy(SEED_BODY)
    req = translate_request(SEED_BODY)
    assert json.dumps(req.messages, ensure_ascii=False, indent=2) == SEED_MESSAGES
    assert json.dumps(req.tools, ensure_ascii=False, indent=2) == SEED_TOOLS
    assert req.sampling.max_new_tokens == 128 and req.sampling.stop == []
    assert req.model == "qwen" and req.stream is False and req.thinking is False and req.notes == []
    assert SEED_BODY == original  # pure: the body is not modified


# --- validation: every bad body is a ProtocolError naming the place ----------------------------

INVALID = [
    ([], "request body: must be a JSON object, got array"),
    ("hi", "request body: must be a JSON object, got string"),
    (None, "request body: must be a JSON object, got null"),
    (body(model=3), "model: must be a string, got number"),
    (body(model=""), "model: must be a non-empty string"),
    ({k: v for k, v in SEED_BODY.items() if k != "max_tokens"}, "max_tokens: field required"),
    (body(max_tokens=0), "max_tokens: must be a positive integer, got 0"),
    (body(max_tokens=1.5), "max_tokens: must be a positive integer, got 1.5"),
    (body(max_tokens=True), "max_tokens: must be a positive integer, got boolean"),
    (body(max_tokens="9"), "max_tokens: must be a positive integer, got string"),
    (body(messages=[]), "messages: must be a non-empty list"),
    (body(messages={"role": "user"}), "messages: must be a non-empty list"),
    (body(messages=["hi"]), "messages.0: must be an object, got string"),
    (body(messages=[{"role": "tool", "content": "x"}]),
     "messages.0.role: must be 'user', 'assistant' or 'system', got 'tool'"),
    (body(messages=[{"content": "x"}]), "messages.0.role: must be 'user', 'assistant' or 'system', got null"),
    (body(messages=[{"role": "user"}]), "messages.0.content: field required"),
    (body(messages=[{"role": "user", "content": 5}]),
     "messages.0.content: must be a string or a list of content blocks, got number"),
    (body(messages=[user("x")]), "messages.0.content.0: must be an object, got string"),
    (body(messages=[user({"text": "x"})]), "messages.0.content.0.type: must be a string naming the block type, got null"),
    (body(messages=[user({"type": "text"})]), "messages.0.content.0.text: field required"),
    (body(messages=[user({"type": "text", "text": ["x"]})]), "messages.0.content.0.text: must be a string, got array"),
    (body(messages=[user(text("a")), {"role": "assistant", "content": [
        {"type": "tool_use", "name": "f", "input": {}}]}]), "messages.1.content.0.id: field required"),
    (body(messages=[user(text("a")), {"role": "assistant", "content": [
        {"type": "tool_use", "id": "t", "input": {}}]}]), "messages.1.content.0.name: field required"),
    (body(messages=[user(text("a")), {"role": "assistant", "content": [
        {"type": "tool_use", "id": "t", "name": "f", "input": "{}"}]}]),
     "messages.1.content.0.input: must be an object, got string"),
    (body(messages=[user({"type": "tool_result", "content": "x"})]),
     "messages.0.content.0.tool_use_id: field required"),
    (body(messages=[user({"type": "tool_result", "tool_use_id": "t", "content": 7})]),
     "messages.0.content.0.content: must be a string or a list of content blocks, got number"),
    (body(messages=[user({"type": "tool_result", "tool_use_id": "t", "is_error": "yes"})]),
     "messages.0.content.0.is_error: must be a boolean, got string"),
    (body(messages=[user({"type": "tool_use", "id": "t", "name": "f", "input": {}})]),
     "messages.0.content.0.type: tool_use blocks belong in assistant messages"),
    (body(messages=[user(text("a")), {"role": "assistant", "content": [
        {"type": "tool_result", "tool_use_id": "t"}]}]),
     "messages.1.content.0.type: tool_result blocks belong in user messages"),
    (body(system=5), "system: must be a string or a list of text blocks, got number"),
    (body(system=[{"type": "image", "source": {}}]), "system.0.type: system blocks must be text blocks, got 'image'"),
    (body(system=[{"type": "text"}]), "system.0.text: field required"),
    (body(tools={"name": "x"}), "tools: must be a list, got object"),
    (body(tools=[{"input_schema": {}}]), "tools.0.name: field required"),
    (body(tools=[{"name": 1, "input_schema": {}}]), "tools.0.name: must be a string, got number"),
    (body(tools=[{"name": "f", "input_schema": []}]), "tools.0.input_schema: must be an object, got array"),
    (body(tools=[{"name": "f"}]), "tools.0.input_schema: field required"),
    (body(tools=[{"name": "f", "description": 3, "input_schema": {}}]),
     "tools.0.description: must be a string, got number"),
    (body(tools=[{"name": "f", "input_schema": {}}, {"name": "f", "input_schema": {}}]),
     "tools.1.name: duplicate tool name 'f'"),
    (body(temperature="hot"), "temperature: must be a non-negative number"),
    (body(temperature=float("nan")), "temperature: must be a non-negative number"),
    (body(top_p=1.5), "top_p: must be a number between 0 and 1"),
    (body(top_k=2.5), "top_k: must be a non-negative integer"),
    (body(stop_sequences="END"), "stop_sequences: must be a list of strings, got string"),
    (body(stop_sequences=["a", 1]), "stop_sequences.1: must be a non-empty string"),
    (body(stream="yes"), "stream: must be a boolean, got string"),
    (body(thinking="on"), "thinking: must be an object, got string"),
    (body(thinking={"budget_tokens": 10}), "thinking.type: must be a string, got null"),
    (body(thinking={"type": "enabled", "budget_tokens": "lots"}),
     "thinking.budget_tokens: must be a non-negative integer"),
    (body(tool_choice="auto"), "tool_choice: must be an object, got string"),
    (body(tool_choice={"name": "f"}), "tool_choice.type: must be a string"),
]


@pytest.mark.parametrize("wire, message", INVALID, ids=[m for _, m in INVALID])
def test_invalid_bodies(wire, message):
    with pytest.raises(ProtocolError) as info:
        translate_request(wire)
    assert str(info.value) == message
    assert info.value.status == 400 and info.value.kind == "invalid_request_error"
    assert isinstance(info.value, ValueError)


def test_protocol_error_413_kind():
    err = ProtocolError("too big", status=413)
    assert (err.status, err.kind, err.message) == (413, "request_too_large", "too big")


def _mutations(rng: random.Random, value, depth=0):
    """Random JSON values, many of them near-valid bodies."""
    atoms = [None, True, False, 0, -1, 7, 1.5, float("inf"), "", "x", "\ud800", [], {}, "text", "user",
             "assistant", "system", "tool_use", "tool_result", "thinking", "image"]
    roll = rng.random()
    if depth > 4 or roll < 0.15:
        return rng.choice(atoms)
    if isinstance(value, dict):
        out = {}
        for key, item in value.items():
            r = rng.random()
            if r < 0.1:
                continue
            out[key] = _mutations(rng, item, depth + 1) if r < 0.4 else item
        if rng.random() < 0.1:
            out[rng.choice(["type", "content", "input", "extra"])] = rng.choice(atoms)
        return out
    if isinstance(value, list):
        items = [(_mutations(rng, item, depth + 1) if rng.random() < 0.4 else item) for item in value]
        if items and rng.random() < 0.2:
            items.append(rng.choice(items))
        return items
    return rng.choice(atoms) if roll < 0.5 else value


FUZZ_BASE = body(
    stream=True, temperature=0.5, top_k=5, stop_sequences=["STOP"],
    thinking={"type": "enabled", "budget_tokens": 4096},
    tool_choice={"type": "auto"},
    messages=SEED_BODY["messages"] + [
        {"role": "system", "content": "reminder"},
        {"role": "assistant", "content": [
            {"type": "thinking", "thinking": "t", "signature": "s"},
            {"type": "redacted_thinking", "data": "d"},
            {"type": "tool_use", "id": "toolu_2", "name": "read_file", "input": {"path": "b"}}]},
        user({"type": "tool_result", "tool_use_id": "toolu_2", "is_error": True,
              "content": [text("boom"), {"type": "image", "source": {}}]},
             {"type": "document", "source": {}}, text("go on")),
    ])


def test_fuzz_only_protocol_errors():
    rng = random.Random(1234)
    signer = ThinkingSigner(b"k")
    ok = bad = 0
    for i in range(4000):
        if i % 2:  # the whole body
            wire = _mutations(rng, FUZZ_BASE)
        else:  # a valid envelope around mutated messages/system/tools: reaches the block rules
            wire = dict(FUZZ_BASE, messages=_mutations(rng, FUZZ_BASE["messages"]),
                        system=_mutations(rng, [text("S"), text("x-anthropic-billing-header: a")]),
                        tools=_mutations(rng, FUZZ_BASE["tools"]))
        for translate in (translate_request, translate_count_request):
            try:
                result = translate(wire, signer=signer)
            except ProtocolError as exc:
                assert exc.status == 400 and str(exc)
                bad += 1
            else:
                assert isinstance(result, ChatRequest)
                json.dumps(result.messages)  # stays JSON
                ok += 1
    assert ok > 100 and bad > 100
    assert translate_request(FUZZ_BASE).stream is True


def test_deep_nesting_is_a_protocol_error_or_accepted():
    deep: object = {}
    for _ in range(5000):
        deep = {"a": deep}
    try:
        translate_request(body(tools=[{"name": "f", "input_schema": deep}]))
    except ProtocolError:
        pass


# --- translation rules ------------------------------------------------------------------------


def test_system_blocks_joined_and_billing_header_dropped():
    req = translate_request(body(system=[
        text("x-anthropic-billing-header: cc_version=2.0.1; cc_entrypoint=cli"),
        text("You are Claude Code."), {"type": "text", "text": "Be brief.", "cache_control": {"type": "ephemeral"}}]))
    assert req.messages[0] == {"role": "system", "content": "You are Claude Code.\nBe brief."}
    assert req.notes == ["system.0: dropped the x-anthropic-billing-header block"]


def test_system_string_and_empty_system():
    assert translate_request(body(system="S")).messages[0] == {"role": "system", "content": "S"}
    assert translate_request(body(system="")).messages[0]["role"] == "user"
    req = translate_request(body(system=[text("x-anthropic-billing-header: a=b")]))
    assert req.messages[0]["role"] == "user" and len(req.notes) == 1


def test_mid_list_system_goes_into_following_user_after_its_tool_results():
    msgs = [user(text("q")),
            {"role": "assistant", "content": [{"type": "tool_use", "id": "t1", "name": "read_file",
                                               "input": {"path": "a"}}]},
            {"role": "system", "content": "file changed"},
            {"role": "system", "content": [text("todo empty")]},
            user({"type": "tool_result", "tool_use_id": "t1", "content": "A"}, text("next"))]
    req = translate_request(body(system=None, messages=msgs))
    assert req.messages[2:] == [
        {"role": "tool", "content": "A"},
        {"role": "user", "content": "<system-reminder>\nfile changed\n</system-reminder>\n"
                                    "<system-reminder>\ntodo empty\n</system-reminder>\nnext"}]


def test_mid_list_system_goes_into_previous_user_else_a_new_one():
    req = translate_request(body(system=None, messages=[
        user(text("q")), {"role": "system", "content": "R"}, {"role": "assistant", "content": "a"}]))
    assert req.messages == [{"role": "user", "content": "q\n<system-reminder>\nR\n</system-reminder>"},
                            {"role": "assistant", "content": "a"}]
    req = translate_request(body(system=None, messages=[
        user(text("q")), {"role": "assistant", "content": "a"}, {"role": "system", "content": "R"}]))
    assert req.messages[-1] == {"role": "user", "content": "<system-reminder>\nR\n</system-reminder>"}
    req = translate_request(body(system=None, messages=[{"role": "system", "content": "R"}]))
    assert req.messages == [{"role": "user", "content": "<system-reminder>\nR\n</system-reminder>"}]


def test_user_blocks_order_kept_and_string_content():
    req = translate_request(body(system=None, messages=[
        user(text("a"), text("b"), {"type": "tool_result", "tool_use_id": "t", "content": "r1"},
             {"type": "tool_result", "tool_use_id": "u", "content": [text("x"), text("y")]}, text("c")),
        {"role": "assistant", "content": "plain"}, {"role": "user", "content": "s"},
        {"role": "user", "content": []}]))
    assert req.messages == [{"role": "user", "content": "a\nb"}, {"role": "tool", "content": "r1"},
                            {"role": "tool", "content": "x\ny"}, {"role": "user", "content": "c"},
                            {"role": "assistant", "content": "plain"}, {"role": "user", "content": "s"},
                            {"role": "user", "content": ""}]


def test_tool_result_is_error_keeps_content_and_missing_content_is_empty():
    req = translate_request(body(system=None, messages=[user(
        {"type": "tool_result", "tool_use_id": "t", "is_error": True,
         "content": "<tool_use_error>File does not exist.</tool_use_error>"},
        {"type": "tool_result", "tool_use_id": "u"})]))
    assert req.messages == [{"role": "tool", "content": "<tool_use_error>File does not exist.</tool_use_error>"},
                            {"role": "tool", "content": ""}]
    assert req.notes == []


def test_images_documents_unknown_blocks_become_placeholders_with_notes():
    req = translate_request(body(system=None, messages=[
        user(text("see"), {"type": "image", "source": {"type": "base64", "data": "AAAA"}},
             {"type": "tool_result", "tool_use_id": "t",
              "content": [text("shot:"), {"type": "image", "source": {}}]},
             {"type": "document", "source": {}}, {"type": "search_result", "content": []}),
        {"role": "assistant", "content": [{"type": "server_tool_use", "id": "s", "name": "web_search",
                                           "input": {}}, text("done")]}]))
    assert req.messages == [
        {"role": "user", "content": f"see\n{IMAGE_PLACEHOLDER}"},
        {"role": "tool", "content": f"shot:\n{IMAGE_PLACEHOLDER}"},
        {"role": "user", "content": f"{DOCUMENT_PLACEHOLDER}\n[search_result block omitted]"},
        {"role": "assistant", "content": "[server_tool_use block omitted]\ndone"}]
    assert req.notes == [
        "messages.0.content.1: image replaced with a text placeholder",
        "messages.0.content.2.content.1: image replaced with a text placeholder",
        "messages.0.content.3: document replaced with a text placeholder",
        "messages.0.content.4: unsupported block type 'search_result' replaced with a text placeholder",
        "messages.1.content.0: unsupported block type 'server_tool_use' replaced with a text placeholder"]


def test_assistant_thinking_redacted_and_signatures():
    signer = ThinkingSigner(b"secret")
    good = signer.sign("plan A")
    wire = body(system=None, messages=[user(text("q")), {"role": "assistant", "content": [
        {"type": "thinking", "thinking": "plan A", "signature": good},
        {"type": "redacted_thinking", "data": "xyz"},
        {"type": "thinking", "thinking": "plan B", "signature": "forged"},
        text("Doing it."), {"type": "text", "text": "Now.", "citations": []},
        {"type": "tool_use", "id": "t1", "name": "read_file", "input": {"path": "a"}},
        {"type": "tool_use", "id": "t2", "name": "read_file", "input": {}}]}])
    req = translate_request(wire, signer=signer)
    assert req.messages[1] == {
        "role": "assistant", "content": "Doing it.\nNow.", "reasoning_content": "plan A\nplan B",
        "tool_calls": [{"type": "function", "function": {"name": "read_file", "arguments": {"path": "a"}}},
                       {"type": "function", "function": {"name": "read_file", "arguments": {}}}]}
    assert req.notes == ["messages.1.content.1: redacted_thinking block dropped",
                         "messages.1.content.2: thinking signature did not verify; reasoning kept"]
    # no signer: nothing is checked
    assert translate_request(wire).notes == ["messages.1.content.1: redacted_thinking block dropped"]


def test_server_tools_dropped_and_description_defaults():
    req = translate_request(body(tools=[
        {"type": "web_search_20250305", "name": "web_search", "max_uses": 5},
        {"type": "custom", "name": "f", "input_schema": {"type": "object"}, "cache_control": {"type": "ephemeral"}}]))
    assert req.tools == [{"type": "function", "function": {"name": "f", "description": "",
                                                           "parameters": {"type": "object"}}}]
    assert req.notes == ["tools.0: server tool 'web_search' (web_search_20250305) dropped"]
    assert translate_request(body(tools=[])).tools is None
    assert translate_request(body(tools=None)).tools is None


def test_sampling_thinking_and_tool_choice():
    req = translate_request(body(max_tokens=100, temperature=1, top_p=0.9, top_k=40, stop_sequences=["END"],
                                 stream=True, thinking={"type": "enabled", "budget_tokens": 32000},
                                 tool_choice={"type": "tool", "name": "read_file"}, metadata={"user_id": "u"}))
    s = req.sampling
    assert (s.max_new_tokens, s.temperature, s.top_p, s.top_k, s.stop) == (100, 1.0, 0.9, 40, ["END"])
    assert req.thinking is True and req.stream is True
    assert req.tool_choice == {"type": "tool", "name": "read_file"}
    assert all("END" not in json.dumps(m) and "100" not in json.dumps(m) for m in req.messages)
    assert translate_request(body(thinking={"type": "disabled"})).thinking is False
    assert translate_request(body(thinking={"type": "adaptive"})).thinking is True


def test_count_request_needs_no_max_tokens():
    wire = {k: v for k, v in SEED_BODY.items() if k != "max_tokens"}
    req = translate_count_request(wire)
    assert json.dumps(req.messages, ensure_ascii=False, indent=2) == SEED_MESSAGES
    with pytest.raises(ProtocolError, match="^max_tokens: must be a positive integer, got -1$"):
        translate_count_request(dict(wire, max_tokens=-1))
    with pytest.raises(ProtocolError, match="^messages: must be a non-empty list$"):
        translate_count_request({"model": "m"})


# --- way out ----------------------------------------------------------------------------------


def test_ids_and_signer():
    assert re.fullmatch(r"msg_01[A-Za-z0-9]{22}", new_message_id())
    assert re.fullmatch(r"toolu_01[A-Za-z0-9]{22}", new_tool_use_id())
    assert new_message_id() != new_message_id()
    signer = ThinkingSigner("k")
    sig = signer.sign("thought")
    assert sig == "/j6BbqOn6zvhxDlLZ4SXHzLwIFwJ1VZ4Sv+k+Eccgq4="
    assert signer.verify("thought", sig) and not signer.verify("thought!", sig)
    assert not signer.verify("thought", sig[:-2]) and not signer.verify("thought", "é")
    assert not ThinkingSigner("other").verify("thought", sig)
    assert ThinkingSigner().sign("x") != ThinkingSigner().sign("x")  # random secrets
    assert signer.verify("\ud800", signer.sign("\ud800"))


STOP_CASES = [
    (ParsedReply(tool_calls=[ToolCallOut("f", {})]), "length", None, ("tool_use", None)),
    (ParsedReply(text="a"), "length", None, ("max_tokens", None)),
    (ParsedReply(text="a"), "stop", "END", ("stop_sequence", "END")),
    (ParsedReply(text="a"), "stop", None, ("end_turn", None)),
    (ParsedReply(), "abort", None, ("end_turn", None)),
]


@pytest.mark.parametrize("reply, finish, stop, expected", STOP_CASES)
def test_stop_reason_for(reply, finish, stop, expected):
    assert stop_reason_for(reply, finish, stop) == expected


def full_reply():
    return ParsedReply(text="Reading it.", reasoning="I should read the file first.",
                       tool_calls=[ToolCallOut("read_file", {"path": "README.md", "opts": [1, {"é": None}]}),
                                   ToolCallOut("list", {}, id="toolu_given")])


def test_response_body_exact_and_sdk_valid():
    signer = ThinkingSigner(b"k")
    reply = full_reply()
    out = response_body(reply, model="qwen", message_id="msg_1", stop_reason="tool_use", stop_sequence=None,
                        input_tokens=12, output_tokens=34, signer=signer)
    first_id = reply.tool_calls[0].id
    assert re.fullmatch(r"toolu_01\w{22}", first_id)
    assert out == {
        "id": "msg_1", "type": "message", "role": "assistant", "model": "qwen",
        "content": [{"type": "thinking", "thinking": "I should read the file first.",
                     "signature": signer.sign("I should read the file first.")},
                    {"type": "text", "text": "Reading it."},
                    {"type": "tool_use", "id": first_id, "name": "read_file",
                     "input": {"path": "README.md", "opts": [1, {"é": None}]}},
                    {"type": "tool_use", "id": "toolu_given", "name": "list", "input": {}}],
        "stop_reason": "tool_use", "stop_sequence": None,
        "usage": {"input_tokens": 12, "output_tokens": 34}}
    message = anthropic.types.Message.model_validate(out)
    assert [b.type for b in message.content] == ["thinking", "text", "tool_use", "tool_use"]
    assert message.content[2].input == {"path": "README.md", "opts": [1, {"é": None}]}
    # ids stay stable on a second rendering of the same reply
    again = response_body(reply, model="qwen", message_id="msg_1", stop_reason="tool_use", stop_sequence=None,
                          input_tokens=12, output_tokens=34, signer=signer)
    assert again == out


def test_response_body_without_thinking_request_or_content():
    out = response_body(full_reply(), model="m", message_id="msg_2", stop_reason="tool_use", stop_sequence=None,
                        input_tokens=1, output_tokens=2, thinking_requested=False)
    assert [b["type"] for b in out["content"]] == ["text", "tool_use", "tool_use"]
    empty = response_body(ParsedReply(), model="m", message_id="msg_3", stop_reason="end_turn",
                          stop_sequence=None, input_tokens=1, output_tokens=0)
    assert empty["content"] == []
    assert anthropic.types.Message.model_validate(empty).content == []
    unsigned = response_body(ParsedReply(reasoning="r"), model="m", message_id="msg_4", stop_reason="end_turn",
                             stop_sequence=None, input_tokens=1, output_tokens=1)
    assert unsigned["content"] == [{"type": "thinking", "thinking": "r", "signature": ""}]


def test_stream_events_exact_sequence():
    reply = ParsedReply(text="Hello world", reasoning="think", tool_calls=[ToolCallOut("f", {"a": 1}, id="toolu_x")])
    events = stream_events(reply, model="m", message_id="msg_s", stop_reason="tool_use", stop_sequence=None,
                           input_tokens=5, output_tokens=9, signer=ThinkingSigner(b"k"), chunk_chars=6)
    sig = ThinkingSigner(b"k").sign("think")
    assert events == [
        ("message_start", {"type": "message_start", "message": {
            "id": "msg_s", "type": "message", "role": "assistant", "model": "m", "content": [],
            "stop_reason": None, "stop_sequence": None, "usage": {"input_tokens": 5, "output_tokens": 1}}}),
        ("content_block_start", {"type": "content_block_start", "index": 0,
                                 "content_block": {"type": "thinking", "thinking": "", "signature": ""}}),
        ("content_block_delta", {"type": "content_block_delta", "index": 0,
                                 "delta": {"type": "thinking_delta", "thinking": "think"}}),
        ("content_block_delta", {"type": "content_block_delta", "index": 0,
                                 "delta": {"type": "signature_delta", "signature": sig}}),
        ("content_block_stop", {"type": "content_block_stop", "index": 0}),
        ("content_block_start", {"type": "content_block_start", "index": 1,
                                 "content_block": {"type": "text", "text": ""}}),
        ("content_block_delta", {"type": "content_block_delta", "index": 1,
                                 "delta": {"type": "text_delta", "text": "Hello "}}),
        ("content_block_delta", {"type": "content_block_delta", "index": 1,
                                 "delta": {"type": "text_delta", "text": "world"}}),
        ("content_block_stop", {"type": "content_block_stop", "index": 1}),
        ("content_block_start", {"type": "content_block_start", "index": 2,
                                 "content_block": {"type": "tool_use", "id": "toolu_x", "name": "f", "input": {}}}),
        ("content_block_delta", {"type": "content_block_delta", "index": 2,
                                 "delta": {"type": "input_json_delta", "partial_json": '{"a": '}}),
        ("content_block_delta", {"type": "content_block_delta", "index": 2,
                                 "delta": {"type": "input_json_delta", "partial_json": '1}'}}),
        ("content_block_stop", {"type": "content_block_stop", "index": 2}),
        ("message_delta", {"type": "message_delta", "delta": {"stop_reason": "tool_use", "stop_sequence": None},
                           "usage": {"output_tokens": 9}}),
        ("message_stop", {"type": "message_stop"}),
    ]


def test_sse_encoding_ping_and_error_body():
    assert sse_encode("message_stop", {"type": "message_stop"}) == \
        b'event: message_stop\ndata: {"type":"message_stop"}\n\n'
    assert sse_encode("x", {"t": "é"}) == 'event: x\ndata: {"t":"é"}\n\n'.encode()
    assert sse_encode("x", {"t": "\ud800"}) == b'event: x\ndata: {"t":"\\ud800"}\n\n'
    assert ping_event() == b'event: ping\ndata: {"type":"ping"}\n\n'
    assert error_body("invalid_request_error", "max_tokens: field required") == {
        "type": "error", "error": {"type": "invalid_request_error", "message": "max_tokens: field required"}}


def _sdk_client(payload: bytes, content_type: str) -> anthropic.Anthropic:
    def handler(request: httpx2.Request) -> httpx2.Response:
        return httpx2.Response(200, headers={"content-type": content_type}, content=payload)
    return anthropic.Anthropic(api_key="k", base_url="http://gateway.test", max_retries=0,
                               http_client=httpx2.Client(transport=httpx2.MockTransport(handler)))


@pytest.mark.parametrize("chunk", [1, 5, 64])
def test_sdk_accumulates_our_stream(chunk):
    signer = ThinkingSigner(b"k")
    reply = full_reply()
    events = stream_events(reply, model="qwen", message_id="msg_stream", stop_reason="tool_use",
                           stop_sequence=None, input_tokens=7, output_tokens=40, signer=signer, chunk_chars=chunk)
    payload = b"".join(sse_encode(name, data) for name, data in events[:2]) + ping_event() + \
        b"".join(sse_encode(name, data) for name, data in events[2:])
    client = _sdk_client(payload, "text/event-stream")
    with client.messages.stream(model="qwen", max_tokens=10, messages=[{"role": "user", "content": "hi"}]) as stream:
        final = stream.get_final_message()
    thinking, text_block, call, empty_call = final.content
    assert thinking.type == "thinking" and thinking.thinking == "I should read the file first."
    assert thinking.signature == signer.sign(thinking.thinking)
    assert text_block.text == "Reading it."
    assert (call.type, call.id, call.name, call.input) == (
        "tool_use", reply.tool_calls[0].id, "read_file", {"path": "README.md", "opts": [1, {"é": None}]})
    assert (empty_call.id, empty_call.input) == ("toolu_given", {})
    assert final.stop_reason == "tool_use" and final.usage.output_tokens == 40 and final.usage.input_tokens == 7
    assert final.id == "msg_stream"


def test_sdk_reads_our_json_body():
    out = response_body(ParsedReply(text="hi"), model="m", message_id="msg_j", stop_reason="stop_sequence",
                        stop_sequence="END", input_tokens=3, output_tokens=1)
    client = _sdk_client(json.dumps(out).encode(), "application/json")
    message = client.messages.create(model="m", max_tokens=5, messages=[{"role": "user", "content": "x"}])
    assert message.content[0].text == "hi" and message.stop_sequence == "END"
