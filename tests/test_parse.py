"""Completion parsers: raw model text → ParsedReply. Table-driven, plus a little fuzzing."""

from __future__ import annotations

import random

import pytest

from agent_code.parse import REASONING_PARSERS, TOOL_PARSERS, detect_parsers, parse_completion
from agent_code.parse.reasoning import split_reasoning
from agent_code.protocols.canonical import ParsedReply, ToolCallOut

TOOLS = [
    {"type": "function", "function": {"name": "read_file", "description": "", "parameters": {
        "type": "object", "required": ["path"],
        "properties": {"path": {"type": "string"}, "limit": {"type": "integer"}, "ratio": {"type": "number"},
                       "recursive": {"type": "boolean"}, "opts": {"type": "object"}, "globs": {"type": "array"},
                       "maybe": {"type": ["integer", "null"]}, "either": {"anyOf": [{"type": "integer"},
                                                                                     {"type": "string"}]}}}}},
    {"type": "function", "function": {"name": "date", "description": "", "parameters": {"type": "object"}}},
]


def call(name, **arguments):
    return ToolCallOut(name=name, arguments=arguments)


def H(obj: str) -> str:
    return f"<tool_call>\n{obj}\n</tool_call>"


def Q(name: str, *params: tuple[str, str]) -> str:
    body = "".join(f"<parameter={k}>\n{v}\n</parameter>\n" for k, v in params)
    return f"<tool_call>\n<function={name}>\n{body}</function>\n</tool_call>"


READ = '{"name": "read_file", "arguments": {"path": "a.py"}}'

HERMES = [
    ("plain text", "  Hello there.\n", ParsedReply(text="Hello there.")),
    ("one call", "Let me read it.\n\n" + H(READ), ParsedReply(text="Let me read it.", tool_calls=[call("read_file", path="a.py")])),
    ("two calls", H(READ) + "\n" + H('{"name": "date", "arguments": {}}'),
     ParsedReply(tool_calls=[call("read_file", path="a.py"), call("date")])),
    ("two objects in one block", H(READ + '\n{"name": "date", "arguments": {}}'),
     ParsedReply(tool_calls=[call("read_file", path="a.py"), call("date")])),
    ("parameters key and string arguments",
     H('{"name": "read_file", "parameters": {"path": "b"}}') + H('{"name": "read_file", "arguments": "{\\"path\\": \\"c\\"}"}'),
     ParsedReply(tool_calls=[call("read_file", path="b"), call("read_file", path="c")])),
    ("missing arguments is {}", H('{"name": "date"}'), ParsedReply(tool_calls=[call("date")])),
    ("undeclared tool", "x " + H('{"name": "rm", "arguments": {}}'),
     ParsedReply(text="x " + H('{"name": "rm", "arguments": {}}'),
                 ill_formed=["hermes: call to undeclared tool 'rm'"])),
    ("bad json", H('{"name": "read_file", "arguments": {"path": }}'),
     ParsedReply(text=H('{"name": "read_file", "arguments": {"path": }}'),
                 ill_formed=["hermes: invalid JSON in <tool_call> (Expecting value: line 1 column 45 (char 44)): "
                             "'{\"name\": \"read_file\", \"arguments\": {\"path\": }}'"])),
    ("non-dict arguments", H('{"name": "read_file", "arguments": [1]}'),
     ParsedReply(text=H('{"name": "read_file", "arguments": [1]}'),
                 ill_formed=["hermes: read_file: arguments must be an object, got list"])),
    ("not an object", H("[1, 2]"), ParsedReply(text=H("[1, 2]"), ill_formed=["hermes: <tool_call> holds list, not an object"])),
    ("empty block", "<tool_call>\n</tool_call>", ParsedReply(text="<tool_call>\n</tool_call>", ill_formed=["hermes: empty <tool_call>"])),
    ("NaN is not JSON", H('{"name": "read_file", "arguments": {"path": NaN}}'),
     ParsedReply(text=H('{"name": "read_file", "arguments": {"path": NaN}}'),
                 ill_formed=["hermes: invalid JSON in <tool_call> (NaN is not JSON): "
                             "'{\"name\": \"read_file\", \"arguments\": {\"path\": NaN}}'"])),
    ("missing required keeps the call", H('{"name": "read_file", "arguments": {"limit": 3}}'),
     ParsedReply(tool_calls=[call("read_file", limit=3)],
                 ill_formed=["hermes: read_file: missing required argument(s) 'path' (call kept)"])),
    ("stopped on </tool_call>: complete JSON accepted", "Ok.\n<tool_call>\n" + READ + "\n",
     ParsedReply(text="Ok.", tool_calls=[call("read_file", path="a.py")])),
    ("truncated mid-JSON", 'Ok.\n<tool_call>\n{"name": "read_file", "argu',
     ParsedReply(text='Ok.\n<tool_call>\n{"name": "read_file", "argu',
                 ill_formed=["hermes: unterminated <tool_call>",
                             "hermes: invalid JSON in <tool_call> (Unterminated string starting at: line 1 column 23 "
                             "(char 22)): '{\"name\": \"read_file\", \"argu'"])),
    ("good block kept, bad block text kept", H(READ) + "\n" + H('{"name": "nope"}'),
     ParsedReply(text=H('{"name": "nope"}'), tool_calls=[call("read_file", path="a.py")],
                 ill_formed=["hermes: call to undeclared tool 'nope'"])),
    ("stray closing tag is text", "a </tool_call> b", ParsedReply(text="a </tool_call> b")),
]

QWEN3 = [
    ("typed parameters", "I'll look.\n" + Q("read_file", ("path", "src/a b.py"), ("limit", "20"), ("ratio", "0.5"),
                                              ("recursive", "True"), ("opts", '{"x": [1]}'), ("globs", '["*.py"]'),
                                              ("maybe", "null"), ("either", "7")),
     ParsedReply(text="I'll look.", tool_calls=[call("read_file", path="src/a b.py", limit=20, ratio=0.5, recursive=True,
                                                     opts={"x": [1]}, globs=["*.py"], maybe=None, either="7")])),
    ("string keeps inner whitespace and newlines", Q("read_file", ("path", "  line1\n\nline2  ")),
     ParsedReply(tool_calls=[call("read_file", path="  line1\n\nline2  ")])),
    ("string that looks like JSON stays a string", Q("read_file", ("path", "123")),
     ParsedReply(tool_calls=[call("read_file", path="123")])),
    ("integer given as 3.0", Q("read_file", ("path", "p"), ("limit", "3.0")),
     ParsedReply(tool_calls=[call("read_file", path="p", limit=3)])),
    ("unconvertible value stays text, call kept", Q("read_file", ("path", "p"), ("limit", "ten")),
     ParsedReply(tool_calls=[call("read_file", path="p", limit="ten")],
                 ill_formed=["qwen3_coder: read_file: could not convert 'limit' to the declared type; kept as text (call kept)"])),
    ("undeclared parameter is a string", Q("date", ("tz", "5")), ParsedReply(tool_calls=[call("date", tz="5")])),
    ("two calls in one block and a second block",
     "<tool_call>\n<function=date>\n</function>\n<function=date>\n</function>\n</tool_call>\n" + Q("read_file", ("path", "x")),
     ParsedReply(tool_calls=[call("date"), call("date"), call("read_file", path="x")])),
    ("bare function without wrapper", "ok\n<function=read_file>\n<parameter=path>\nx\n</parameter>\n</function>",
     ParsedReply(text="ok", tool_calls=[call("read_file", path="x")])),
    ("missing </parameter>", "<tool_call>\n<function=read_file>\n<parameter=path>\nx\n<parameter=limit>\n4\n</function>\n</tool_call>",
     ParsedReply(tool_calls=[call("read_file", path="x", limit=4)])),
    ("stopped on </tool_call>", "<tool_call>\n<function=read_file>\n<parameter=path>\nx\n</parameter>\n</function>\n",
     ParsedReply(tool_calls=[call("read_file", path="x")])),
    ("truncated inside function", "Go\n<tool_call>\n<function=read_file>\n<parameter=path>\nx",
     ParsedReply(text="Go\n<tool_call>\n<function=read_file>\n<parameter=path>\nx",
                 ill_formed=["qwen3_coder: unterminated <function=read_file>"])),
    ("undeclared function", Q("rm", ("path", "/")),
     ParsedReply(text=Q("rm", ("path", "/")), ill_formed=["qwen3_coder: call to undeclared tool 'rm'"])),
    ("tool_call without function", "<tool_call>\nhello\n</tool_call>",
     ParsedReply(text="<tool_call>\nhello\n</tool_call>",
                 ill_formed=["qwen3_coder: no <function=...> in <tool_call>: 'hello'"])),
    ("missing required", Q("read_file", ("limit", "1")),
     ParsedReply(tool_calls=[call("read_file", limit=1)],
                 ill_formed=["qwen3_coder: read_file: missing required argument(s) 'path' (call kept)"])),
]

FENCED = [
    ("fenced json call", 'Reading.\n```json\n{"name": "read_file", "arguments": {"path": "a"}}\n```\n',
     ParsedReply(text="Reading.", tool_calls=[call("read_file", path="a")])),
    ("bare object with input key", 'Sure {"name": "read_file", "input": {"path": "b"}} done',
     ParsedReply(text="Sure  done", tool_calls=[call("read_file", path="b")])),
    ("fenced list of calls", '```\n[{"name": "date", "parameters": {}}, {"name": "read_file", "arguments": {"path": "c"}}]\n```',
     ParsedReply(tool_calls=[call("date"), call("read_file", path="c")])),
    ("undeclared name left alone", '```json\n{"name": "Bob", "arguments": {}}\n```',
     ParsedReply(text='```json\n{"name": "Bob", "arguments": {}}\n```')),
    ("ordinary json left alone", 'Config: {"path": "x", "name": "read_file"}',
     ParsedReply(text='Config: {"path": "x", "name": "read_file"}')),
    ("python fence left alone", '```python\nx = {"name": "read_file", "arguments": {"path": 1}}\n```',
     ParsedReply(text='```python\nx = {"name": "read_file", "arguments": {"path": 1}}\n```')),
    ("non-dict arguments left alone", '{"name": "read_file", "arguments": 5}',
     ParsedReply(text='{"name": "read_file", "arguments": 5}')),
]


@pytest.mark.parametrize("case, text, expected", HERMES, ids=[c[0] for c in HERMES])
def test_hermes(case, text, expected):
    assert parse_completion(text, tool_parser="hermes", reasoning_parser="none", tools=TOOLS) == expected


@pytest.mark.parametrize("case, text, expected", QWEN3, ids=[c[0] for c in QWEN3])
def test_qwen3_coder(case, text, expected):
    assert parse_completion(text, tool_parser="qwen3_coder", reasoning_parser="none", tools=TOOLS) == expected


@pytest.mark.parametrize("case, text, expected", FENCED, ids=[c[0] for c in FENCED])
def test_fenced_json(case, text, expected):
    assert parse_completion(text, tool_parser="fenced_json", reasoning_parser="none", tools=TOOLS) == expected
    # the same text reaches the fallback from a parser that found nothing
    assert parse_completion(text, tool_parser="none", reasoning_parser="none", tools=TOOLS) == expected


REASONING = [
    # (text, opened, (reasoning, rest))
    ("<think>\nplan\n</think>\n\nanswer", False, ("plan", "\n\nanswer")),
    ("\n<think>plan</think>answer", False, ("plan", "answer")),
    ("<think>\n\n</think>\n\nanswer", False, (None, "\n\nanswer")),
    ("<think>cut off mid thought", False, ("cut off mid thought", "")),
    ("plan started by the prompt\n</think>\nanswer", False, ("plan started by the prompt", "\nanswer")),
    ("no reasoning here", False, (None, "no reasoning here")),
    ("answer mentions <think> then </think> later", False, (None, "answer mentions <think> then </think> later")),
    ("still thinking when cut", True, ("still thinking when cut", "")),
    ("<think>again</think>x", True, ("again", "x")),
    ("thought with <think> inside</think>x", True, ("thought with <think> inside", "x")),
]


@pytest.mark.parametrize("text, opened, expected", REASONING)
def test_split_reasoning(text, opened, expected):
    assert split_reasoning(text, opened=opened) == expected


def test_reasoning_then_calls_and_fallback_rules():
    text = "<think>\nneed the file\n</think>\n\n" + H(READ)
    assert parse_completion(text, tool_parser="hermes", reasoning_parser="think", tools=TOOLS) == ParsedReply(
        reasoning="need the file", tool_calls=[call("read_file", path="a.py")])
    # a tool call inside the reasoning is reasoning, not a call
    inside = "<think>maybe " + H(READ) + "</think>Done."
    assert parse_completion(inside, tool_parser="hermes", reasoning_parser="think", tools=TOOLS) == ParsedReply(
        text="Done.", reasoning="maybe " + H(READ))
    # the prompt opened <think> and the completion was cut inside it
    assert parse_completion("half a thought", tool_parser="hermes", reasoning_parser="think", tools=TOOLS,
                            prompt_opened_think=True) == ParsedReply(reasoning="half a thought")
    # the reasoning parser "none" leaves tags alone
    assert parse_completion("<think>x</think>y", tool_parser="none", reasoning_parser="none",
                            tools=None) == ParsedReply(text="<think>x</think>y")
    # no fallback after an ill-formed primary block, nor when disabled
    broken = H('{"name": "nope"}') + '\n{"name": "read_file", "arguments": {"path": "a"}}'
    reply = parse_completion(broken, tool_parser="hermes", reasoning_parser="none", tools=TOOLS)
    assert reply.tool_calls == [] and reply.ill_formed == ["hermes: call to undeclared tool 'nope'"]
    bare = '{"name": "read_file", "arguments": {"path": "a"}}'
    assert parse_completion(bare, tool_parser="hermes", reasoning_parser="none", tools=TOOLS,
                            fallback_fenced=False) == ParsedReply(text=bare)
    assert parse_completion(bare, tool_parser="hermes", reasoning_parser="none",
                            tools=TOOLS).tool_calls == [call("read_file", path="a")]


@pytest.mark.parametrize("tools", [None, []])
def test_no_declared_tools_means_no_calls(tools):
    reply = parse_completion(H(READ), tool_parser="hermes", reasoning_parser="none", tools=tools)
    assert reply == ParsedReply(text=H(READ), ill_formed=["hermes: call to undeclared tool 'read_file'"])
    assert parse_completion(READ, tool_parser="none", reasoning_parser="none", tools=tools) == ParsedReply(text=READ)


DETECT = [
    ("{% for t in tools %}<tool_call>\n<function={{ t.name }}>\n<parameter=x>{% endfor %}", ("qwen3_coder", "none")),
    ("<tool_call>\n{\"name\": <function-name>}\n</tool_call>", ("hermes", "none")),
    ("{{ '<think>\\n' }}<tool_call>", ("hermes", "think")),
    ("{{ reasoning }}</think>", ("none", "think")),
    ("{{ bos_token }}{{ m.content }}", ("none", "none")),
    ("", ("none", "none")),
]


@pytest.mark.parametrize("template, expected", DETECT)
def test_detect_parsers(template, expected):
    assert detect_parsers(template) == expected


def test_registries_and_unknown_names():
    assert set(TOOL_PARSERS) == {"hermes", "qwen3_coder", "deepseek_v3", "fenced_json", "none"}
    assert set(REASONING_PARSERS) == {"think", "none"}
    with pytest.raises(ValueError, match="unknown tool parser 'xml'"):
        parse_completion("", tool_parser="xml", reasoning_parser="none", tools=None)
    with pytest.raises(ValueError, match="unknown reasoning parser 'r1'"):
        parse_completion("", tool_parser="none", reasoning_parser="r1", tools=None)


PIECES = ["<tool_call>", "</tool_call>", "<function=read_file>", "<function=", "</function>", "<parameter=path>",
          "<parameter=limit>", "</parameter>", "<think>", "</think>", "```json\n", "```", "{", "}", "[", "]", '"',
          '"name"', ": ", '"read_file"', '"arguments"', '"date"', "{}", "\n", " ", "x", "1", "null", "NaN", ",",
          "\\", "\ud800", "é", READ]


def test_fuzz_never_raises():
    rng = random.Random(7)
    samples = [H(READ), Q("read_file", ("path", "a"), ("limit", "2")),
               '<think>t</think>```json\n{"name": "date", "arguments": {}}\n```', "[" * 3000, "{\"a\":" * 3000]
    for _ in range(600):
        samples.append("".join(rng.choice(PIECES) for _ in range(rng.randint(0, 40))))
        base = rng.choice(samples[:3])
        samples.append(base[:rng.randint(0, len(base))])  # truncations
        samples.append("".join(chr(rng.randint(0, 0x2FF)) for _ in range(rng.randint(0, 30))))
    for text in samples:
        for tool_parser in TOOL_PARSERS:
            for reasoning_parser in REASONING_PARSERS:
                reply = parse_completion(text, tool_parser=tool_parser, reasoning_parser=reasoning_parser,
                                         tools=TOOLS, prompt_opened_think=len(text) % 2 == 0)
                assert isinstance(reply, ParsedReply) and reply.text == reply.text.strip()
                assert all(isinstance(c.arguments, dict) and c.name in ("read_file", "date")
                           for c in reply.tool_calls)
                assert all(isinstance(line, str) and line for line in reply.ill_formed)
