"""Responses translation, both ways: table-driven tests of the pure functions in
agent_code.protocols.openai_responses."""

from __future__ import annotations

import json

import pytest

from agent_code.protocols import openai_common as oc
from agent_code.protocols import openai_responses as wire
from agent_code.protocols.anthropic import ThinkingSigner
from agent_code.protocols.canonical import ParsedReply, ToolCallOut

SIGNER = ThinkingSigner(b"test-secret")
USER = {"role": "user", "content": "hi"}
FC = {"type": "function_call", "call_id": "c1", "name": "a", "arguments": "{\"k\": 1}"}
TOOLS = [{"type": "function", "name": "a"}, {"type": "custom", "name": "apply_patch"},
         {"type": "namespace", "name": "mcp", "description": "d", "tools": [{"type": "function", "name": "look"}]}]


def translate(input_, **fields):
    return wire.translate_request({"model": "m", "input": input_, **fields}, signer=SIGNER)


def assistant(content="", **extra):
    return {"role": "assistant", "content": content, **extra}


def calls(*pairs):
    return [{"type": "function", "function": {"name": n, "arguments": a}} for n, a in pairs]


# (name, instructions, input, canonical messages)
INPUT_CASES = [
    ("a string", None, "hello", [{"role": "user", "content": "hello"}]),
    ("instructions, then leading developer/system merged",
     "I", [{"role": "developer", "content": "D1"}, {"role": "system", "content": [{"type": "input_text", "text": "D2"}]},
           USER, {"role": "developer", "content": "late"}],
     [{"role": "system", "content": "I\n\nD1\n\nD2"}, USER, {"role": "system", "content": "late"}]),
    ("developer without instructions", None, [{"role": "developer", "content": "D"}, USER],
     [{"role": "system", "content": "D"}, USER]),
    ("user parts and media placeholders", None,
     [{"type": "message", "role": "user", "content": [{"type": "input_text", "text": "a"},
                                                       {"type": "input_image", "image_url": "x"}]}],
     [{"role": "user", "content": "a\n" + oc.IMAGE_PLACEHOLDER}]),
    ("model-side items merge into one assistant message", None,
     [USER, {"type": "reasoning", "summary": [], "content": [{"type": "reasoning_text", "text": "think"}]},
      {"type": "message", "role": "assistant", "content": [{"type": "output_text", "text": "On it."}]},
      FC, {"type": "custom_tool_call", "call_id": "c2", "name": "apply_patch", "input": "PATCH"},
      {"type": "function_call", "call_id": "c3", "name": "look", "namespace": "mcp", "arguments": ""},
      {"type": "function_call_output", "call_id": "c1", "output": "r1"},
      {"type": "custom_tool_call_output", "call_id": "c2", "output": [{"type": "input_text", "text": "r2"}]},
      {"type": "function_call_output", "call_id": "c3", "output": "r3"}],
     [USER, assistant("On it.", reasoning_content="think",
                      tool_calls=calls(("a", {"k": 1}), ("apply_patch", {"input": "PATCH"}), ("mcp__look", {}))),
      {"role": "tool", "content": "r1"}, {"role": "tool", "content": "r2"}, {"role": "tool", "content": "r3"}]),
    ("two assistant turns stay apart", None,
     [USER, {"role": "assistant", "content": "one"}, {"role": "user", "content": "more"},
      {"role": "assistant", "content": [{"type": "output_text", "text": "two"}]}],
     [USER, assistant("one"), {"role": "user", "content": "more"}, assistant("two")]),
    ("agent message", None,
     [{"type": "agent_message", "author": "worker", "recipient": "root",
       "content": [{"type": "input_text", "text": "found it"}, {"type": "encrypted_content", "encrypted_content": "x"}]}],
     [{"role": "user", "content": '<agent_message author="worker" recipient="root">\nfound it\n'
                                  "[encrypted content omitted]\n</agent_message>"}]),
    ("unreplayable items dropped", None,
     [USER, {"type": "web_search_call", "id": "ws", "status": "completed", "action": {"type": "search"}},
      {"type": "local_shell_call", "call_id": "x", "status": "completed", "action": {}}], [USER]),
]


@pytest.mark.parametrize("name,instructions,input_,expected", INPUT_CASES, ids=[c[0] for c in INPUT_CASES])
def test_input(name, instructions, input_, expected):
    chat, _ = translate(input_, instructions=instructions, tools=TOOLS)
    assert chat.messages == expected


def test_notes_for_what_was_dropped_or_rewritten():
    chat, _ = translate([{"role": "user", "content": [{"type": "input_file", "file_id": "f"}]},
                         {"type": "compaction", "encrypted_content": "x"}],
                        tools=[*TOOLS, {"type": "web_search"}, {"type": "brand_new_tool"}], frobnicate=1)
    notes = "\n".join(chat.notes)
    for expected in ("input[0].content[0]: input_file part", "input[1]: compaction item",
                     "tools[3]: hosted tool 'web_search'", "tools[4]: unknown tool type 'brand_new_tool'",
                     "frobnicate"):
        assert expected in notes


# reasoning: sealed by this gateway (any signature state), from content, or unreadable
def _reasoning(**item):
    return [USER, {"type": "reasoning", "summary": [], **item}, {"role": "user", "content": "next"}]


@pytest.mark.parametrize("item,text,note", [
    ({"encrypted_content": wire.seal_reasoning("deep thought", SIGNER)}, "deep thought", None),
    ({"encrypted_content": wire.seal_reasoning("deep thought", ThinkingSigner(b"other"))}, "deep thought",
     "did not verify"),
    ({"encrypted_content": "gAAAAAB-foreign", "content": [{"type": "reasoning_text", "text": "visible"}]}, "visible", None),
    ({"encrypted_content": "gAAAAAB-foreign"}, None, "cannot be read"),
    ({"summary": [{"type": "summary_text", "text": "a summary"}]}, None, "summary"),
    ({"content": [{"type": "reasoning_text", "text": "a"}, {"type": "reasoning_text", "text": "b"}]}, "a\nb", None),
], ids=["sealed", "tampered", "content", "foreign", "summary only", "two parts"])
def test_reasoning_items(item, text, note):
    chat, _ = translate(_reasoning(**item))
    reply = chat.messages[1]
    assert reply["role"] == "assistant" and reply.get("reasoning_content") == text
    assert (note is None and not chat.notes) or any(note in n for n in chat.notes)


def test_seal_round_trip_handles_any_text():
    for text in ["", "plain", "ünïcödé ✓", "a.b.c", "\ud800 lone"]:
        assert wire.open_reasoning(wire.seal_reasoning(text, SIGNER), SIGNER) == (text, True)
    assert wire.open_reasoning("agent-code.v1.!!!.sig", SIGNER) is None
    assert wire.open_reasoning("something else", SIGNER) is None


def test_tools_and_tool_choice():
    custom = {"type": "custom", "name": "apply_patch", "description": "Patch.",
              "format": {"type": "grammar", "syntax": "lark", "definition": "start: x"}}
    chat, info = translate("x", tools=[{"type": "function", "name": "f", "parameters": {"type": "object"}}, custom,
                                       {"type": "namespace", "name": "ns", "description": "",
                                        "tools": [{"type": "custom", "name": "c"}]}],
                           tool_choice={"type": "custom", "name": "apply_patch"})
    functions = [t["function"] for t in chat.tools]
    assert [f["name"] for f in functions] == ["f", "apply_patch", "ns__c"]
    assert functions[1]["description"] == "Patch."
    assert functions[1]["parameters"]["required"] == ["input"]
    assert "start: x" in functions[1]["parameters"]["properties"]["input"]["description"]
    assert info.tool_refs == {"f": wire.ToolRef("function", "f"), "apply_patch": wire.ToolRef("custom", "apply_patch"),
                              "ns__c": wire.ToolRef("custom", "c", "ns")}
    assert chat.tool_choice == {"type": "tool", "name": "apply_patch"}
    chat, _ = translate("x", tools=TOOLS, tool_choice={"type": "function", "name": "look", "namespace": "mcp"})
    assert chat.tool_choice == {"type": "tool", "name": "mcp__look"}
    assert translate("x", tools=TOOLS, tool_choice="required")[0].tool_choice == {"type": "any"}
    assert translate("x", tools=[{"type": "web_search"}])[0].tools is None


def test_sampling_and_echo():
    chat, info = translate("x", max_output_tokens=50, temperature=0.2, top_p=0.5, store=False, user="u",
                           reasoning={"effort": "high", "summary": "auto"}, prompt_cache_key="k", stream=True)
    assert (chat.sampling.max_new_tokens, chat.sampling.temperature, chat.sampling.top_p) == (50, 0.2, 0.5)
    assert chat.stream and chat.thinking and info.identity == "u"
    assert info.echo["max_output_tokens"] == 50 and info.echo["store"] is False
    assert info.echo["reasoning"] == {"effort": "high", "summary": "auto"}
    default = wire.translate_request({"model": "m", "input": "x"}, default_max_tokens=77)[0]
    assert default.sampling.max_new_tokens == 77


ERROR_CASES = [
    ("previous response", {"previous_response_id": "r"}, "previous_response_id", "unsupported_parameter"),
    ("item reference", {"input": [{"type": "item_reference", "id": "x"}]}, "input[0]", "unsupported_parameter"),
    ("unknown item", {"input": [{"type": "nope"}]}, "input[0].type", "invalid_type"),
    ("unknown role", {"input": [{"role": "tool", "content": "x"}]}, "input[0].role", "invalid_value"),
    ("orphan output", {"input": [USER, {"type": "function_call_output", "call_id": "zz", "output": "r"}]},
     "input[1].call_id", "invalid_tool_call_id"),
    ("duplicate call id", {"input": [USER, FC, FC]}, "input[2].call_id", "invalid_tool_call_id"),
    ("bad arguments", {"input": [USER, {**FC, "arguments": "{"}]}, "input[1].arguments", "invalid_tool_arguments"),
    ("custom input not a string", {"input": [USER, {"type": "custom_tool_call", "call_id": "c", "name": "p", "input": 1}]},
     "input[1].input", None),
    ("background", {"background": True}, "background", "unsupported_parameter"),
    ("nested namespace", {"tools": [{"type": "namespace", "name": "a", "tools": [{"type": "namespace", "name": "b", "tools": []}]}]},
     "tools[0].tools[0].type", "invalid_value"),
    ("forced tool undeclared", {"tool_choice": {"type": "function", "name": "zz"}}, "tool_choice", None),
    ("instructions list", {"instructions": [USER]}, "instructions", None),
]


@pytest.mark.parametrize("name,fields,param,code", ERROR_CASES, ids=[c[0] for c in ERROR_CASES])
def test_errors_name_the_parameter(name, fields, param, code):
    with pytest.raises(oc.OpenAIRequestError) as info:
        wire.translate_request({"model": "m", "input": [USER], **fields}, signer=SIGNER)
    assert (info.value.param, info.value.code) == (param, code)


# ---------------------------------------------------------------------------------------------
# way out

REFS = {"a": wire.ToolRef("function", "a"), "apply_patch": wire.ToolRef("custom", "apply_patch"),
        "mcp__look": wire.ToolRef("function", "look", "mcp")}
REPLIES = [
    ParsedReply(text="Done."),
    ParsedReply(text="", reasoning="hmm"),
    ParsedReply(text="On it.", reasoning="plan", tool_calls=[
        ToolCallOut("a", {"k": [1]}), ToolCallOut("apply_patch", {"input": "P\nQ"}), ToolCallOut("mcp__look", {})]),
]


@pytest.mark.parametrize("reply", REPLIES, ids=["text", "reasoning only", "everything"])
def test_echoed_output_translates_back_to_the_recorded_message(reply):
    """The invariant prefix reuse depends on — even with reasoning content stripped, as Codex does."""
    items = wire.output_items(reply, REFS, SIGNER)
    resent = [{k: v for k, v in i.items() if not (i["type"] == "reasoning" and k == "content")} for i in items]
    outputs = [{"type": f"{i['type']}_output", "call_id": i["call_id"], "output": "r"}
               for i in items if i["type"].endswith("call")]
    chat, _ = translate([USER, *resent, *outputs], tools=TOOLS)
    assert chat.messages[1] == reply.as_message()
    assert not chat.notes


def test_output_items():
    items = wire.output_items(REPLIES[2], REFS, SIGNER)
    assert [i["type"] for i in items] == ["reasoning", "message", "function_call", "custom_tool_call", "function_call"]
    assert items[3]["input"] == "P\nQ" and items[3]["name"] == "apply_patch"
    assert (items[4]["name"], items[4]["namespace"]) == ("look", "mcp")
    assert json.loads(items[2]["arguments"]) == {"k": [1]}
    assert [i["call_id"] for i in items[2:]] == [c.id for c in REPLIES[2].tool_calls]
    # a custom call whose arguments did not use "input": its one string, else the JSON
    odd = ParsedReply(tool_calls=[ToolCallOut("apply_patch", {"patch": "X"}), ToolCallOut("apply_patch", {"a": 1})])
    assert [i["input"] for i in wire.output_items(odd, REFS, SIGNER)] == ["X", '{"a": 1}']


def test_response_object_and_events():
    _, info = translate("x", tools=TOOLS, max_output_tokens=9)
    writer = wire.ResponseWriter(info, model="m", response_id="resp_1", created_at=1)
    opening = writer.opening()
    final = writer.final(REPLIES[2], finish_reason="stop", input_tokens=5, output_tokens=6, signer=SIGNER)
    assert final["status"] == "completed" and final["incomplete_details"] is None
    assert final["usage"]["total_tokens"] == 11 and final["max_output_tokens"] == 9 and final["tools"] == TOOLS
    events = opening + [writer.keepalive()] + writer.reply_events(final, chunk_chars=2)
    assert [d["sequence_number"] for _, d in events] == list(range(len(events)))
    assert all(kind == d["type"] for kind, d in events)
    kinds = [k for k, _ in events]
    assert kinds[:3] == ["response.created", "response.in_progress", "response.in_progress"]
    assert kinds[-1] == "response.completed" and kinds.count("response.output_item.added") == 5
    added = [d["item"] for k, d in events if k == "response.output_item.added"]
    done = [d["item"] for k, d in events if k == "response.output_item.done"]
    assert [a["id"] for a in added] == [d["id"] for d in done] == [i["id"] for i in final["output"]]
    assert all(a["status"] == "in_progress" for a in added) and all(d["status"] == "completed" for d in done)
    text = "".join(d["delta"] for k, d in events if k == "response.output_text.delta")
    assert text == "On it."
    assert "".join(d["delta"] for k, d in events if k == "response.custom_tool_call_input.delta") == "P\nQ"
    cut = writer.final(ParsedReply(text="par"), finish_reason="length", input_tokens=1, output_tokens=9, signer=SIGNER)
    assert cut["status"] == "incomplete" and cut["incomplete_details"] == {"reason": "max_output_tokens"}
    assert writer.reply_events(cut)[-1][0] == "response.incomplete"
    kind, failed = writer.failed("engine error: boom")
    assert kind == "response.failed" and failed["response"]["error"]["message"] == "engine error: boom"
