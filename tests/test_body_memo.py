"""A request body that extends the session's previous one is parsed by its new part only
(gateway/body_memo.py): the same value as a full parse, the same errors, and nothing reused
from a body that differs anywhere before its new messages."""

from __future__ import annotations

import json

import httpx
import pytest

from agent_code.engines.instant import InstantEngine
from agent_code.gateway.app import create_app
from agent_code.gateway.body_memo import MIN_BYTES, BodyMemo, parse_body, remember
from agent_code.gateway.http import HttpError, parse_json_body
from agent_code.gateway.pipeline import Gateway
from agent_code.gateway.server import BackgroundServer
from gateway_fixtures import qwen3_renderer

BIG = "You are a careful agent. Read before you write. \u2014 é " * 900   # > MIN_BYTES


def body(messages: list, **extra: object) -> dict:
    return {"model": "m", "max_tokens": 64, "messages": messages, "system": BIG,
            "tools": [{"name": "Read", "description": "Read a file.",
                       "input_schema": {"type": "object", "properties": {"file_path": {"type": "string"}},
                                        "required": ["file_path"], "minimum": 0, "strict": True}}], **extra}


def encode(value: dict, **options: object) -> bytes:
    return json.dumps(value, **options).encode()  # type: ignore[arg-type]


def turn(n: int) -> list[dict]:
    return [{"role": "assistant", "content": [{"type": "tool_use", "id": f"toolu_{n}", "name": "Read",
                                                "input": {"path": f"src/{n}.py", "n": n, "f": 0.5, "ok": True,
                                                          "none": None, "big": 2 ** 53}}]},
            {"role": "user", "content": [{"type": "tool_result", "tool_use_id": f"toolu_{n}",
                                          "content": f"line {n} ]}}\" , \\u005d \U0001F600 \\ud83d\\ude00\n" * 50}]}]


def same(a: object, b: object) -> bool:
    """``a == b`` with JSON's types kept apart (1, 1.0 and True differ), at any depth (no recursion)."""
    stack = [(a, b)]
    while stack:
        x, y = stack.pop()
        if type(x) is not type(y):
            return False
        if isinstance(x, dict):
            if list(x) != list(y):  # type: ignore[arg-type]
                return False
            stack.extend((x[k], y[k]) for k in x)  # type: ignore[index]
        elif isinstance(x, (list, tuple)):
            if len(x) != len(y):  # type: ignore[arg-type]
                return False
            stack.extend(zip(x, y))  # type: ignore[call-overload]
        elif x != y:
            return False
    return True


def grown(memo: BodyMemo | None, messages: list, **options: object) -> tuple[dict, BodyMemo | None, bytes]:
    raw = encode(body(messages), **options)
    value, memo = parse_body(raw, memo, "messages")
    return value, memo, raw


@pytest.mark.parametrize("options", [{}, {"ensure_ascii": False}, {"indent": 1}, {"separators": (",", ":")}])
def test_an_extended_body_reads_as_the_full_parse_reusing_the_rest(options: dict) -> None:
    messages: list = [{"role": "user", "content": "Fix the test."}]
    first, memo, _ = grown(None, messages, **options)
    assert memo is not None and first == parse_json_body(encode(body(messages), **options))
    for n in range(6):
        messages += turn(n)
        value, memo, raw = grown(memo, messages, **options)
        assert same(value, parse_json_body(raw))
        assert value["tools"] is first["tools"] and value["system"] is first["system"]   # read once
        assert value["messages"][:1] == first["messages"] and value["messages"][0] is first["messages"][0]
        assert memo is not None and memo.value is value
        assert type(value["messages"][-2]["content"][0]["input"]["big"]) is int


def edited_bodies() -> list[tuple[str, bytes, bytes]]:
    """(what, previous body, next body): the next one is not the previous with messages added."""
    messages: list = [{"role": "user", "content": "Fix the test."}, *turn(0)]
    before = encode(body(messages))
    more = [*messages, *turn(1)]
    edited_early = [{"role": "user", "content": "Fix the TEST."}, *turn(0), *turn(1)]
    return [
        ("an earlier message edited", before, encode(body(edited_early))),
        ("the system prompt changed", before, encode({**body(more), "system": BIG + "!"})),
        ("a key after the list", before, encode({**body(more), "max_tokens": 65})),
        ("the same body again", before, before),
        ("a message taken away", before, encode(body(messages[:1]))),
        ("another key order", before, encode({"messages": more, **{k: v for k, v in body(more).items()
                                                                 if k != "messages"}})),
    ]


@pytest.mark.parametrize("what,before,after", edited_bodies(), ids=[e[0] for e in edited_bodies()])
def test_a_body_that_differs_before_its_new_messages_is_parsed_whole(what: str, before: bytes, after: bytes) -> None:
    first, memo = parse_body(before, None, "messages")
    assert memo is not None
    value, _ = parse_body(after, memo, "messages")
    assert same(value, parse_json_body(after))
    assert value["tools"] is not first["tools"], f"{what}: nothing may be reused"


def hostile_tails() -> list[tuple[str, bytes]]:
    """New parts that a full parse refuses, or reads differently from a list of new items."""
    item = b'{"role":"user","content":"x"}'
    return [
        ("NaN", b', {"role":"user","content":NaN}]'),
        ("Infinity", b', {"role":"user","content":[1,-Infinity]}]'),
        ("a float out of range", b', {"role":"user","content":1e400}]'),
        ("an integer past any float", b', {"n":' + b"9" * 400 + b"}]"),
        ("an integer just below int64", b', {"n":[-9223372036854775809, 18446744073709551616]}]'),
        ("a lone surrogate escape", b', {"role":"user","content":"\\ud800"}]'),
        ("a lone low surrogate", b', {"role":"user","content":"a\\udc00"}]'),
        ("bytes that are not UTF-8", b', {"role":"user","content":"\xff\xfe"}]'),
        ("an encoded surrogate", b', {"role":"user","content":"\xed\xa0\x80"}]'),
        ("a raw control character", b', {"role":"user","content":"a\x01b"}]'),
        ("a trailing comma", b", " + item + b",]"),
        ("two items without a comma", b", " + item + b" " + item + b"]"),
        ("a key smuggled after the list", b", " + item + b'], "model": "other"'),
        ("the list closed twice", b", " + item + b"]]"),
        ("deep nesting", b", " + b"[" * 100_000 + b"]" * 100_000 + b"]"),
        *((f"nesting {d} deep", b", " + b"[" * d + b"]" * d + b"]") for d in (990, 993, 1021, 1022, 1023, 1024)),
        *((f"nesting {d} deep beside a 19-digit run", b', 1234567890123456789, ' + b"[" * d + b"]" * d + b"]")
          for d in (985, 989, 991, 993, 995)),
        ("another list opened after it", b", " + item + b"], [" + item + b"]"),
        ("the list's key again after it", b", " + item + b'], "messages": [' + item + b"]"),
        ("nothing but a comma", b",]"),
        ("garbage", b", <html>]"),
    ]


@pytest.mark.parametrize("what,new", hostile_tails(), ids=[h[0] for h in hostile_tails()])
def test_a_new_part_gets_the_full_parse_and_its_answer(what: str, new: bytes) -> None:
    messages: list = [{"role": "user", "content": "Fix the test."}]
    raw = encode(body(messages), separators=(",", ":"))
    _, memo = parse_body(raw, None, "messages")
    assert memo is not None
    hostile = memo.head + new + memo.tail
    try:
        expected: object = parse_json_body(hostile)
    except HttpError as exc:
        expected = ("error", exc.status, exc.message)
    try:
        got: object = parse_body(hostile, memo, "messages")[0]
    except HttpError as exc:
        got = ("error", exc.status, exc.message)
    assert same(got, expected), what
    if what == "a key smuggled after the list":
        assert got["model"] == "other" and got["messages"][-1] == {"role": "user", "content": "x"}  # type: ignore[index]
    if what == "the list's key again after it":
        assert got["messages"] == [{"role": "user", "content": "x"}]  # type: ignore[index]


@pytest.mark.parametrize("raw,why", [
    (b'{"messages":[{"a":1}],"messages":[{"b":' + b"2" * 10 + b"}]," + b'"pad":"' + b"x" * MIN_BYTES + b'"}',
     "the list's key twice"),
    (b"\xef\xbb\xbf" + encode(body([{"role": "user", "content": "x"}])), "a byte-order mark"),
    (encode({**body([]), "messages": []}), "an empty list"),
    (encode({**body([]), "messages": "text"}), "not a list"),
    (encode({k: v for k, v in body([]).items() if k != "messages"}), "no list"),
])
def test_no_memo_for_a_body_of_another_shape(raw: bytes, why: str) -> None:
    assert remember(raw, parse_json_body(raw), "messages") is None, why


def test_a_body_the_standard_library_reads_keeps_no_memo() -> None:
    """orjson would turn a 19-digit integer into a float, so such a body is read by the standard
    library, whose nesting limit is not orjson's: no memo, each next body read whole."""
    raw = encode(body([{"role": "user", "content": "x", "n": -9223372036854775809}]))
    value, memo = parse_body(raw, None, "messages")
    assert memo is None and value["messages"][0]["n"] == -9223372036854775809


def test_translation_leaves_the_parsed_body_as_it_was() -> None:
    """The parsed body is shared with the next request's: no protocol may change it in place."""
    import copy

    from agent_code.protocols import anthropic, openai_chat, openai_responses

    messages = [{"role": "user", "content": [{"type": "text", "text": "Fix it."}]}, *turn(0), *turn(1)]
    anthropic_body = body(messages, temperature=0.5, metadata={"user_id": "u"}, stop_sequences=["X"],
                          thinking={"type": "enabled", "budget_tokens": 1024}, tool_choice={"type": "auto"})
    tools = [{"type": "function", "function": {"name": "Read", "description": "Read.", "parameters": {
        "type": "object", "properties": {"file_path": {"type": "string"}}}}}]
    chat_body = {"model": "m", "max_tokens": 9, "tools": tools, "messages": [
        {"role": "system", "content": "sys"}, {"role": "user", "content": [{"type": "text", "text": "go"}]},
        {"role": "assistant", "content": None, "tool_calls": [{"id": "c1", "type": "function", "function": {
            "name": "Read", "arguments": '{"file_path": "a.py"}'}}]},
        {"role": "tool", "tool_call_id": "c1", "content": "x = 1"}]}
    responses_body = {"model": "m", "instructions": "sys", "tools": [{"type": "function", **tools[0]["function"]}],
                      "input": [{"type": "message", "role": "user", "content": [{"type": "input_text", "text": "go"}]},
                                {"type": "function_call", "call_id": "c1", "name": "Read",
                                 "arguments": '{"file_path": "a.py"}'},
                                {"type": "function_call_output", "call_id": "c1", "output": "x = 1"}]}
    for translate, value in ((anthropic.translate_request, anthropic_body), (openai_chat.translate_request, chat_body),
                             (openai_responses.translate_request, responses_body)):
        before = copy.deepcopy(value)
        translate(value)
        assert value == before, translate.__module__


def test_a_small_body_keeps_no_memo() -> None:
    raw = encode({"model": "m", "max_tokens": 5, "messages": [{"role": "user", "content": "hi"}]})
    assert parse_body(raw, None, "messages")[1] is None


def test_the_gateway_reads_a_growing_conversation_by_its_new_part() -> None:
    """Over HTTP: the session keeps the memo and reads each next body by its new part (the
    system prompt and tools parsed once), the turns it records are the full render of what the
    client sent, and a hostile body after it is refused as it would be without a memo."""
    renderer = qwen3_renderer()
    gateway = Gateway(InstantEngine(renderer), renderer, model_name="m")
    messages: list = [{"role": "user", "content": "Fix the test."}]
    headers = {"x-api-key": "s1", "content-type": "application/json"}
    first_tools = None
    with BackgroundServer(create_app(gateway)) as server, httpx.Client(base_url=server.url) as client:
        for n in range(4):
            raw = encode(body(messages))
            r = client.post("/v1/messages", content=raw, headers=headers)
            assert r.status_code == 200, r.text
            memo = gateway.store.get("s1").body_memo
            assert memo is not None and memo.value == json.loads(raw)
            first_tools = first_tools if first_tools is not None else memo.value["tools"]
            assert memo.value["tools"] is first_tools   # read once, then reused
            record = gateway.store.get("s1").turns[-1]
            assert record.prompt_ids.tolist() == renderer.render(record.messages, record.tools, cached=False)
            reply = r.json()["content"]
            call = next(b for b in reply if b["type"] == "tool_use")
            messages += [{"role": "assistant", "content": reply},
                         {"role": "user", "content": [{"type": "tool_result", "tool_use_id": call["id"],
                                                       "content": f"contents of {n} ]\n" * 40}]}]
        held = gateway.store.get("s1").body_memo
        assert held is not None
        for bad in (b', {"role":"user","content":NaN}]', b', {"role":"user","content":"\\ud800"}]'):
            r = client.post("/v1/messages", content=held.head + bad + held.tail, headers=headers)
            assert r.status_code == 400 and r.json()["type"] == "error", r.text
            assert r.json()["error"]["message"].startswith("request body is not valid"), r.text
        assert len(gateway.store.get("s1").turns) == 4   # nothing recorded for them


@pytest.mark.parametrize("path,key", [("/v1/chat/completions", "messages"), ("/v1/responses", "input")])
def test_the_openai_routes_keep_a_memo_per_keyed_session(path: str, key: str) -> None:
    renderer = qwen3_renderer()
    gateway = Gateway(InstantEngine(renderer), renderer, model_name="m")
    tools = [{"type": "function", "function": {"name": "Read", "description": "Read a file.", "parameters": {
        "type": "object", "properties": {"file_path": {"type": "string"}}, "required": ["file_path"]}}}]
    if key == "input":
        tools = [{"type": "function", **tools[0]["function"]}]
        items: list = [{"role": "user", "content": BIG}]
    else:
        items = [{"role": "system", "content": BIG}, {"role": "user", "content": "Fix the test."}]
    first_tools = None
    with BackgroundServer(create_app(gateway)) as server, httpx.Client(base_url=server.url) as client:
        for n in range(3):
            raw = encode({"model": "m", key: items, "tools": tools, "max_tokens": 32})
            r = client.post(path, content=raw, headers={"authorization": "Bearer s2",
                                                        "content-type": "application/json"})
            assert r.status_code == 200, r.text
            memo = gateway.store.get("s2").body_memo
            assert memo is not None and memo.value == json.loads(raw)
            first_tools = first_tools if first_tools is not None else memo.value["tools"]
            assert memo.value["tools"] is first_tools
            if key == "input":
                calls = [o for o in r.json()["output"] if o["type"] == "function_call"]
                items += [*r.json()["output"], *({"type": "function_call_output", "call_id": c["call_id"],
                                                  "output": f"file {n}"} for c in calls)]
            else:
                message = r.json()["choices"][0]["message"]
                items += [{k: v for k, v in message.items() if v is not None},
                          *({"role": "tool", "tool_call_id": c["id"], "content": f"file {n}"}
                            for c in message.get("tool_calls") or [])]



def test_a_memo_is_used_only_for_its_own_list_key() -> None:
    """A memo of a ``messages`` body handed a body read under another key (a Responses ``input``
    on the same session): nothing reused, the full read's value."""
    messages: list = [{"role": "user", "content": "Fix the test."}]
    first, memo = parse_body(encode(body(messages)), None, "messages")
    assert memo is not None
    raw = encode(body([*messages, *turn(0)]))
    value, other = parse_body(raw, memo, "input")
    assert same(value, parse_json_body(raw)) and value["tools"] is not first["tools"] and other is None


def test_another_session_cannot_ride_on_a_memo() -> None:
    """Session B sends the body that extends session A's: B has no memo of its own, so its body
    is read whole, and A's memo is left as it was."""
    renderer = qwen3_renderer()
    gateway = Gateway(InstantEngine(renderer), renderer, model_name="m")
    messages: list = [{"role": "user", "content": "Fix the test."}]
    with BackgroundServer(create_app(gateway)) as server, httpx.Client(base_url=server.url) as client:
        r = client.post("/v1/messages", content=encode(body(messages)),
                        headers={"x-api-key": "a", "content-type": "application/json"})
        assert r.status_code == 200, r.text
        held = gateway.store.get("a").body_memo
        assert held is not None
        extended = held.head + b', {"role": "user", "content": "and more"}]' + held.tail
        r = client.post("/v1/messages", content=extended, headers={"x-api-key": "b",
                                                                   "content-type": "application/json"})
        assert r.status_code == 200, r.text
        b_memo = gateway.store.get("b").body_memo
        assert b_memo is not None and b_memo.value["tools"] is not held.value["tools"]   # read whole
        assert same(b_memo.value, json.loads(extended))
        assert gateway.store.get("a").body_memo is held
