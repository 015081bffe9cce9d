"""Sessions that declare the same tools share one translation of them (protocols/anthropic.py):
only when the wire tools write the same JSON text — key order and number types included, which
a chat template rendering them with ``tojson`` shows and ``==`` ignores."""

from __future__ import annotations

import copy

from agent_code.protocols import anthropic
from agent_code.protocols.jsontypes import same_key_order

SCHEMA = {"type": "object", "properties": {"file_path": {"type": "string"}, "limit": {"type": "integer", "default": 2000}},
          "required": ["file_path"]}
TOOLS = [{"name": "Read", "description": "Read a file.", "input_schema": SCHEMA},
         {"name": "Bash", "description": "Run a command.", "input_schema": {
             "type": "object", "properties": {"command": {"type": "string"}, "timeout": {"type": "number"}}}}]


def body(tools: list) -> dict:
    return {"model": "m", "max_tokens": 64, "tools": tools, "messages": [{"role": "user", "content": "hi"}]}


def translate(tools: list, memo=None):
    chat, memo = anthropic.translate_request_memo(body(tools), memo=memo)
    return chat.tools, memo


def reordered(tools: list) -> list:
    out = copy.deepcopy(tools)
    props = out[0]["input_schema"]["properties"]
    out[0]["input_schema"]["properties"] = dict(reversed(list(props.items())))
    return out


def test_a_second_session_with_the_same_tools_shares_their_translation():
    first, _ = translate(TOOLS)
    again, _ = translate(copy.deepcopy(TOOLS))
    assert again is first


def test_tools_that_differ_only_in_key_order_are_translated_on_their_own():
    first, _ = translate(TOOLS)
    other = reordered(TOOLS)
    assert other == TOOLS   # equal to ==
    mine, _ = translate(other)
    assert mine is not first
    assert list(mine[0]["function"]["parameters"]["properties"]) == ["limit", "file_path"]   # its own order


def test_a_session_that_resends_its_tools_reordered_gets_them_in_the_new_order():
    first, memo = translate(TOOLS)
    again, memo = translate(copy.deepcopy(TOOLS), memo)
    assert again is first
    mine, _ = translate(reordered(TOOLS), memo)
    assert mine is not first and list(mine[0]["function"]["parameters"]["properties"]) == ["limit", "file_path"]


def test_a_negative_zero_or_another_number_type_is_not_the_same_tools():
    first, _ = translate(TOOLS)
    for change in (-0.0, 2000.0):
        other = copy.deepcopy(TOOLS)
        other[0]["input_schema"]["properties"]["limit"]["default"] = change
        if change == -0.0:
            other[1]["input_schema"]["properties"]["timeout"]["default"] = 0.0
            first, _ = translate(copy.deepcopy(other))
            other[1]["input_schema"]["properties"]["timeout"]["default"] = -0.0
        mine, _ = translate(other)
        assert mine is not first


def test_key_order_past_what_orjson_writes():
    big = copy.deepcopy(TOOLS)
    big[0]["input_schema"]["properties"]["limit"]["default"] = 2 ** 70   # orjson refuses: walked instead
    assert same_key_order(big, copy.deepcopy(big))
    assert not same_key_order(big, reordered(big))
    assert not same_key_order({"a": 2 ** 70}, {"a": float(2 ** 70)})
