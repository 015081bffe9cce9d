"""``POST /v1/chat/completions`` end to end: the official OpenAI SDK against a real server on
127.0.0.1 with a scripted engine and a real Qwen chat template; token-exact samples; session
identity; hundreds of malformed bodies answered 4xx in OpenAI's error format."""

from __future__ import annotations

import json

import httpx
import openai
import pytest

from malformed import WRONG, generic_bodies

from agent_code.trajectory.samples import Sample
from gateway_fixtures import check_token_exact, qwen3_renderer, qwen25_renderer, scripted_gateway
from test_gateway_hostile import raw_post

TOOLS = [
    {"type": "function", "function": {
        "name": "system_date", "description": "Current date.", "strict": True,
        "parameters": {"type": "object", "properties": {}, "required": [], "additionalProperties": False}}},
    {"type": "function", "function": {
        "name": "echo", "description": "Echo text.", "strict": True,
        "parameters": {"type": "object", "properties": {"text": {"type": "string"}}, "required": ["text"],
                       "additionalProperties": False}}},
]


def hermes(name: str, arguments: dict, before: str = "") -> str:
    return f"{before}<tool_call>\n{json.dumps({'name': name, 'arguments': arguments})}\n</tool_call>"


# turn 1: text and TWO parallel calls; turn 2: one call; turn 3: the answer
SCRIPT = [
    {"text": hermes("system_date", {}, before="Let me check.\n") + "\n" + hermes("echo", {"text": "checking"})},
    {"text": hermes("echo", {"text": "2026-12-02"})},
    {"text": "Today is 2026-12-02."},
]
RESULTS = {"system_date": "2026-12-02", "echo": "echoed"}


def assistant_message(message) -> dict:
    """The assistant message as a client resends it (what Qwen Code and SDK agents do)."""
    out = {"role": "assistant", "content": message.content}
    if message.tool_calls:
        out["tool_calls"] = [{"id": c.id, "type": "function",
                              "function": {"name": c.function.name, "arguments": c.function.arguments}}
                             for c in message.tool_calls]
    reasoning = getattr(message, "reasoning_content", None)
    if reasoning:
        out["reasoning_content"] = reasoning
    return out


def converse(client: openai.OpenAI, stream: bool, turns: int = 3) -> list:
    messages: list = [{"role": "system", "content": "You are terse."},
                      {"role": "user", "content": "What is the date? Echo it."}]
    replies = []
    for _ in range(turns):
        kwargs = dict(model="served", max_completion_tokens=256, tools=TOOLS, messages=messages)
        if stream:  # the SDK's stream helper accumulates the deltas and parses strict arguments
            with client.chat.completions.stream(**kwargs, stream_options={"include_usage": True}) as s:
                completion = s.get_final_completion()
        else:
            completion = client.chat.completions.create(**kwargs)
        replies.append(completion)
        message = completion.choices[0].message
        messages.append(assistant_message(message))
        if not message.tool_calls:
            break
        messages += [{"role": "tool", "tool_call_id": c.id, "content": RESULTS[c.function.name]}
                     for c in message.tool_calls]
    return replies


@pytest.mark.parametrize("stream", [False, True], ids=["json", "sse"])
def test_sdk_multi_turn_with_parallel_tool_calls_is_token_exact(tmp_path, stream):
    renderer = qwen25_renderer()
    with scripted_gateway(tmp_path, SCRIPT, renderer) as (url, gateway):
        client = openai.OpenAI(base_url=f"{url}/v1", api_key="chat-1", max_retries=0)
        replies = converse(client, stream)
        r = httpx.post(f"{url}/v1/sessions/chat-1/finish", json={"reward": 1.0})
        assert r.status_code == 200, r.text
        samples = [Sample.from_dict(s) for s in r.json()["samples"]]
        turns = gateway.store.get("chat-1").turns

    first, second, third = (c.choices[0] for c in replies)
    assert first.finish_reason == "tool_calls" and first.message.content == "Let me check."
    calls = first.message.tool_calls
    assert [c.function.name for c in calls] == ["system_date", "echo"]
    assert [json.loads(c.function.arguments) for c in calls] == [{}, {"text": "checking"}]
    assert len({c.id for c in calls}) == 2 and all(c.id.startswith("call_") for c in calls)
    if stream:
        assert calls[1].function.parsed_arguments == {"text": "checking"}
    assert second.finish_reason == "tool_calls" and not second.message.content  # null (JSON) or "" (stream)
    assert json.loads(second.message.tool_calls[0].function.arguments) == {"text": "2026-12-02"}
    assert third.finish_reason == "stop" and third.message.content == "Today is 2026-12-02."
    assert not third.message.tool_calls

    # every turn recorded, as the engine sampled it, through the shared pipeline
    assert len(turns) == 3 and {t.protocol for t in turns} == {"openai-chat"}
    for turn, line in zip(turns, SCRIPT):
        assert turn.output_ids.tolist() == renderer.encode(line["text"]) + renderer.end_of_turn_ids[:1]
        assert turn.prompt_ids.tolist() == renderer.render(turn.messages, turn.tools)
    # the echoed history is the canonical one: both calls, dict arguments, no wire ids
    assert turns[1].messages[2] == {"role": "assistant", "content": "Let me check.", "tool_calls": [
        {"type": "function", "function": {"name": "system_date", "arguments": {}}},
        {"type": "function", "function": {"name": "echo", "arguments": {"text": "checking"}}}]}
    assert turns[1].messages[3:] == [{"role": "tool", "content": "2026-12-02"}, {"role": "tool", "content": "echoed"}]
    assert [t.parent for t in turns] == [None, 0, 1]  # held tokens reused: one chain
    assert replies[0].usage.prompt_tokens == len(turns[0].prompt_ids)
    assert replies[0].usage.completion_tokens == len(turns[0].output_ids)
    assert len(samples) == 1
    check_token_exact(samples, turns)


def test_stream_chunks_tool_call_deltas_and_usage(tmp_path):
    renderer = qwen25_renderer()
    with scripted_gateway(tmp_path, [SCRIPT[0], {"text": "one two three four five six", "finish_reason": "length"}],
                          renderer) as (url, gateway):
        client = openai.OpenAI(base_url=f"{url}/v1", api_key="chunks", max_retries=0)
        kwargs = dict(model="served", tools=TOOLS, messages=[{"role": "user", "content": "go"}], stream=True,
                      stream_options={"include_usage": True})
        chunks = list(client.chat.completions.create(**kwargs))
        assert chunks[0].choices[0].delta.role == "assistant"
        ids = {c.id for c in chunks}
        assert len(ids) == 1 and ids.pop().startswith("chatcmpl-")
        deltas = [d for c in chunks for choice in c.choices for d in choice.delta.tool_calls or []]
        firsts = [d for d in deltas if d.id]
        assert [(d.index, d.function.name) for d in firsts] == [(0, "system_date"), (1, "echo")]
        arguments = {0: "", 1: ""}
        for d in deltas:
            arguments[d.index] += d.function.arguments or ""
        assert {k: json.loads(v) for k, v in arguments.items()} == {0: {}, 1: {"text": "checking"}}
        text = "".join(c.choices[0].delta.content or "" for c in chunks if c.choices)
        assert text == "Let me check."
        finishes = [c.choices[0].finish_reason for c in chunks if c.choices and c.choices[0].finish_reason]
        assert finishes == ["tool_calls"]
        assert chunks[-1].choices == [] and chunks[-1].usage.completion_tokens == len(
            gateway.store.get("chunks").turns[0].output_ids)
        # a reply cut off by the budget finishes with "length"
        chunks = list(client.chat.completions.create(**{**kwargs, "messages": [{"role": "user", "content": "x"}]}))
        assert [c.choices[0].finish_reason for c in chunks if c.choices and c.choices[0].finish_reason] == ["length"]


def test_reasoning_content_round_trips(tmp_path):
    renderer = qwen3_renderer()
    script = [{"text": "<think>\nThe user wants the date.\n</think>\n\n" + hermes("system_date", {})},
              {"text": "<think>\nGot it.\n</think>\n\nIt is 2026-12-02."}]
    with scripted_gateway(tmp_path, script, renderer) as (url, gateway):
        client = openai.OpenAI(base_url=f"{url}/v1", api_key="think", max_retries=0)
        messages = [{"role": "user", "content": "date?"}]
        first = client.chat.completions.create(model="m", tools=TOOLS, messages=messages).choices[0].message
        assert first.reasoning_content == "The user wants the date."
        messages += [assistant_message(first), {"role": "tool", "tool_call_id": first.tool_calls[0].id,
                                                "content": "2026-12-02"}]
        chunks = list(client.chat.completions.create(model="m", tools=TOOLS, messages=messages, stream=True))
        reasoning = "".join(getattr(c.choices[0].delta, "reasoning_content", None) or "" for c in chunks)
        assert reasoning == "Got it."
        turns = gateway.store.get("think").turns
    assert turns[1].messages[1]["reasoning_content"] == "The user wants the date."
    assert turns[1].parent == 0 and turns[1].drift == []


def test_identity_rules(tmp_path):
    """Bearer wins; else metadata.session_id, else user; else sessions grouped by history."""
    renderer = qwen25_renderer()
    script = [{"text": hermes("echo", {"text": "a"})}, {"text": "done a"},
              {"text": hermes("echo", {"text": "b"})}, {"text": "done b"},
              {"text": "meta"}, {"text": "user"}, {"text": "bearer"}, {"text": "after"}]
    with scripted_gateway(tmp_path, script, renderer) as (url, gateway):
        def post(body, headers=None):
            r = httpx.post(f"{url}/v1/chat/completions", json={"model": "m", "tools": TOOLS, **body},
                           headers=headers or {})
            assert r.status_code == 200, r.text
            return r

        def two_turns(prompt):
            messages = [{"role": "user", "content": prompt}]
            r1 = post({"messages": messages})
            message = r1.json()["choices"][0]["message"]
            messages += [message, {"role": "tool", "tool_call_id": message["tool_calls"][0]["id"], "content": "ok"}]
            r2 = post({"messages": messages})
            messages += [r2.json()["choices"][0]["message"], {"role": "user", "content": "and then?"}]
            return r1.headers["x-agent-code-session"], r2.headers["x-agent-code-session"], messages

        a1, a2, a_history = two_turns("first conversation")
        b1, b2, _ = two_turns("second conversation")
        assert a1 == a2 and b1 == b2 and a1 != b1 and a1.startswith("anon-")
        assert [t.parent for t in gateway.store.get(a1).turns] == [None, 0]
        plain = [{"role": "user", "content": "hi"}]
        assert post({"messages": plain, "metadata": {"session_id": "by-meta"}, "user": "u"}) \
            .headers["x-agent-code-session"] == "by-meta"
        assert post({"messages": plain, "user": "by-user"}).headers["x-agent-code-session"] == "by-user"
        assert post({"messages": plain, "user": "by-user"}, {"authorization": "Bearer by-key"}) \
            .headers["x-agent-code-session"] == "by-key"
        # a finished identity-less session is not joined again: its continuation starts a new one
        httpx.post(f"{url}/v1/sessions/{a1}/finish", json={"reward": 0})
        after = post({"messages": a_history}).headers["x-agent-code-session"]
        assert after.startswith("anon-") and after not in (a1, b1)


# ---------------------------------------------------------------------------------------------
# hostile bodies

GOOD = {"model": "m", "messages": [{"role": "user", "content": "hi"}]}
LIMIT = 64 * 1024
CALL = {"id": "call_1", "type": "function", "function": {"name": "echo", "arguments": "{}"}}


def _variants() -> list[tuple[str, bytes, dict[str, str]]]:
    bodies = generic_bodies(GOOD)
    add = bodies.add
    add("deep-in-content", {**GOOD, "messages": [{"role": "user", "content": json.loads("[" * 200 + "]" * 200)}]})
    add("deep-arguments", {**GOOD, "messages": [GOOD["messages"][0], {"role": "assistant", "tool_calls": [
        {**CALL, "function": {"name": "echo", "arguments": "[" * 5000 + "]" * 5000}}]}]})
    add("huge-string", {**GOOD, "messages": [{"role": "user", "content": "x" * (LIMIT + 10)}]})
    for field in ("model", "messages"):
        add(f"missing-{field}", {k: v for k, v in GOOD.items() if k != field})
    expect = {"model": str, "messages": list, "tools": list, "stream": bool, "temperature": (int, float),
              "top_p": (int, float), "top_k": int, "seed": int, "max_tokens": int, "max_completion_tokens": int,
              "stop": (str, list), "n": int, "tool_choice": (str, dict), "stream_options": dict,
              "metadata": dict, "user": str, "parallel_tool_calls": bool, "logprobs": bool,
              "response_format": dict, "presence_penalty": (int, float), "frequency_penalty": (int, float)}
    for field, ok in expect.items():
        for j, value in enumerate(WRONG):
            numeric = ok in (int, (int, float))
            if isinstance(value, ok) and not (isinstance(value, bool) and numeric):
                continue
            if value is None and field not in ("model", "messages"):
                continue  # null for an optional field means "not given"
            add(f"type-{field}-{j}", {**GOOD, field: value})
    for name, extra in [("temperature-high", {"temperature": 3}), ("top-p-high", {"top_p": 1.5}),
                        ("max-tokens-zero", {"max_tokens": 0}), ("max-completion-negative", {"max_completion_tokens": -1}),
                        ("max-tokens-float", {"max_tokens": 2.5}), ("max-tokens-huge-float", {"max_tokens": 1e308}),
                        ("max-tokens-string", {"max_tokens": "16"}), ("n-2", {"n": 2}), ("stop-empty", {"stop": ""}),
                        ("stop-list-int", {"stop": [1]}), ("stop-list-empty-string", {"stop": ["a", ""]}),
                        ("tool-choice-bogus", {"tool_choice": "sometimes"}),
                        ("tool-choice-undeclared", {"tool_choice": {"type": "function", "function": {"name": "x"}}}),
                        ("tool-choice-no-name", {"tool_choice": {"type": "function", "function": {}}}),
                        ("tool-choice-type-int", {"tool_choice": {"type": 1}}),
                        ("tool-choice-function-str", {"tool_choice": {"type": "function", "function": "echo"}}),
                        ("metadata-int-value", {"metadata": {"session_id": 5}}),
                        ("include-usage-str", {"stream": True, "stream_options": {"include_usage": "yes"}}),
                        ("response-format-no-type", {"response_format": {}}),
                        ("legacy-functions", {"functions": [{"name": "f"}]}),
                        ("legacy-function-call", {"function_call": "auto"}),
                        ("empty-messages", {"messages": []}), ("model-empty", {"model": ""})]:
        add(name, {**GOOD, **extra})
    user = {"role": "user", "content": "hi"}
    bad_messages = [
        [None], [1], ["hi"], [[]], [{}], [{"role": "user"}], [{"content": "hi"}], [{"role": "robot", "content": "hi"}],
        [{"role": 1, "content": "hi"}], [{"role": None, "content": "x"}], [{"role": "function", "content": "x"}],
        [{"role": "User", "content": "x"}], [{"role": "user", "content": 5}], [{"role": "user", "content": None}],
        [{"role": "user", "content": {}}], [{"role": "user", "content": [None]}], [{"role": "user", "content": [1]}],
        [{"role": "user", "content": ["x"]}], [{"role": "user", "content": [{}]}],
        [{"role": "user", "content": [{"type": 5}]}], [{"role": "user", "content": [{"type": "text"}]}],
        [{"role": "user", "content": [{"type": "text", "text": 1}]}],
        [{"role": "user", "content": [{"type": "video", "video": "x"}]}],
        [{"role": "system"}], [{"role": "system", "content": 3}], [{"role": "developer", "content": [{"type": "image_url"}]}],
        [{"role": "system", "content": [{"type": "text", "text": None}]}],
        [user, {"role": "assistant", "content": 5}], [user, {"role": "assistant", "content": {}}],
        [user, {"role": "assistant", "content": [{"type": "image_url", "image_url": {"url": "x"}}]}],
        [user, {"role": "assistant", "content": "x", "reasoning_content": 5}],
        [user, {"role": "assistant", "content": "x", "function_call": {"name": "f", "arguments": "{}"}}],
        [user, {"role": "assistant", "tool_calls": "x"}], [user, {"role": "assistant", "tool_calls": {}}],
        [user, {"role": "assistant", "tool_calls": [None]}], [user, {"role": "assistant", "tool_calls": [1]}],
    ]
    # assistant tool calls malformed in every field
    for j, call in enumerate([
        {**CALL, "id": None}, {**CALL, "id": ""}, {**CALL, "id": 7}, {**CALL, "id": ["a"]}, {k: v for k, v in CALL.items() if k != "id"},
        {**CALL, "type": "custom"}, {**CALL, "type": 3}, {**CALL, "function": None}, {**CALL, "function": "echo"},
        {**CALL, "function": {"arguments": "{}"}}, {**CALL, "function": {"name": "", "arguments": "{}"}},
        {**CALL, "function": {"name": 5, "arguments": "{}"}}, {**CALL, "function": {"name": "echo"}},
        {**CALL, "function": {"name": "echo", "arguments": "{not json"}},
        {**CALL, "function": {"name": "echo", "arguments": "[1, 2]"}},
        {**CALL, "function": {"name": "echo", "arguments": "\"text\""}},
        {**CALL, "function": {"name": "echo", "arguments": "42"}},
        {**CALL, "function": {"name": "echo", "arguments": 42}},
        {**CALL, "function": {"name": "echo", "arguments": None}},
        {**CALL, "function": {"name": "echo", "arguments": ["a"]}},
        {**CALL, "function": {"name": "echo", "arguments": "{\"a\": NaN"}},
    ]):
        bad_messages.append([user, {"role": "assistant", "content": None, "tool_calls": [call]}])
    # tool messages with bad ids, or answering nothing
    answered = [user, {"role": "assistant", "content": None, "tool_calls": [CALL]}]
    for tool in [{"role": "tool", "content": "r"}, {"role": "tool", "tool_call_id": None, "content": "r"},
                 {"role": "tool", "tool_call_id": "", "content": "r"}, {"role": "tool", "tool_call_id": 1, "content": "r"},
                 {"role": "tool", "tool_call_id": "call_other", "content": "r"},
                 {"role": "tool", "tool_call_id": ["call_1"], "content": "r"},
                 {"role": "tool", "tool_call_id": "call_1"}, {"role": "tool", "tool_call_id": "call_1", "content": 5},
                 {"role": "tool", "tool_call_id": "call_1", "content": [{"type": "text"}]}]:
        bad_messages.append(answered + [tool])
    bad_messages.append([user, {"role": "tool", "tool_call_id": "call_1", "content": "orphan"}])
    bad_messages.append([{"role": "tool", "tool_call_id": "call_1", "content": "first"}])
    for j, messages in enumerate(bad_messages):
        add(f"messages-{j}", {**GOOD, "messages": messages})
    fn = {"name": "t", "parameters": {"type": "object"}}
    bad_tools = [[None], [1], ["t"], [{}], [{"type": 1}], [{"type": "function"}], [{"type": "function", "function": "t"}],
                 [{"type": "function", "function": {}}], [{"type": "function", "function": {"name": 1}}],
                 [{"type": "function", "function": {"name": ""}}],
                 [{"type": "function", "function": {**fn, "parameters": "x"}}],
                 [{"type": "function", "function": {**fn, "parameters": []}}],
                 [{"type": "function", "function": {**fn, "description": 5}}],
                 [{"type": "function", "function": {**fn, "strict": "yes"}}],
                 [{"type": "function", "function": fn}, {"type": "function", "function": fn}]]
    for j, tools in enumerate(bad_tools):
        add(f"tools-{j}", {**GOOD, "tools": tools})
    for j, headers in enumerate([{"content-type": "text/plain"}, {"authorization": "Bearer"},
                                 {"authorization": "Basic Zm9vOmJhcg=="}, {"x-api-key": "x" * 4000},
                                 {"content-encoding": "gzip"}]):
        add(f"headers-{j}", b"{not json", headers)
    add("lone-surrogate-role", b'{"model": "m", "messages": [{"role": "\\ud800", "content": "x"}]}')
    return bodies.cases


def check_hostile(url: str, path: str, cases: list, good: dict, gateway, expected_text: str, reply_text) -> None:
    """Every case answered 4xx in OpenAI's error format; then healthy, and a good request works."""
    statuses: dict[int, int] = {}
    for name, raw, headers in cases:
        status, payload = raw_post(url, path, raw, {"content-type": "application/json", **headers})
        statuses[status] = statuses.get(status, 0) + 1
        assert 400 <= status < 500, (name, status, payload[:300])
        error = json.loads(payload)["error"]
        assert set(error) == {"message", "type", "param", "code"}, name
        assert isinstance(error["message"], str) and error["message"] and isinstance(error["type"], str), name
        assert error["param"] is None or isinstance(error["param"], str), name
    assert set(statuses) <= {400, 413, 415}, statuses   # 415: a text/plain body (request_guard.py)
    assert sum(len(s.turns) for s in gateway.store.sessions.values()) == 0
    with httpx.Client(base_url=url, timeout=30) as client:
        assert client.get("/healthz").json()["status"] == "ok"
        r = client.post(path, json=good)
        assert r.status_code == 200, r.text
        assert reply_text(r.json()) == expected_text
    assert sum(len(s.turns) for s in gateway.store.sessions.values()) == 1


def test_hostile_bodies_get_4xx_in_openai_format(tmp_path):
    cases = _variants()
    assert len(cases) >= 200, len(cases)
    with scripted_gateway(tmp_path, [{"text": "fine"}], qwen25_renderer(), max_body_bytes=LIMIT) as (url, gateway):
        check_hostile(url, "/v1/chat/completions", cases, GOOD, gateway, "fine",
                      lambda body: body["choices"][0]["message"]["content"])
        # errors name the offending parameter, the way OpenAI does
        r = httpx.post(f"{url}/v1/chat/completions", json={**GOOD, "messages": [
            {"role": "user", "content": "x"},
            {"role": "assistant", "tool_calls": [{**CALL, "function": {"name": "echo", "arguments": "{bad"}}]}]})
        assert r.json()["error"]["param"] == "messages[1].tool_calls[0].function.arguments"
        assert r.json()["error"]["code"] == "invalid_tool_arguments"
        r = httpx.get(f"{url}/v1/chat/completions")
        assert r.status_code == 405 and set(r.json()["error"]) == {"message", "type", "param", "code"}
