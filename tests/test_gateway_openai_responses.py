"""``POST /v1/responses`` (and ``/responses``) end to end: the official OpenAI SDK against a real
server on 127.0.0.1 with a scripted engine and a real Qwen chat template — parallel function
calls, a Codex-style freeform ``apply_patch`` custom tool, a namespaced tool, hosted tools that
are dropped with a note, reasoning that round-trips through ``encrypted_content``, the exact SSE
event sequence, token-exact samples; and hundreds of malformed bodies answered 4xx in OpenAI's
error format."""

from __future__ import annotations

import json
import time

import httpx
import openai
import pytest

from malformed import WRONG, generic_bodies

from agent_code.engines.scripted import ScriptedEngine
from agent_code.gateway.app import create_app
from agent_code.gateway.pipeline import Gateway
from agent_code.gateway.server import BackgroundServer
from agent_code.trajectory.samples import Sample
from gateway_fixtures import check_token_exact, qwen3_renderer, qwen25_renderer, scripted_gateway, write_script
from test_gateway_cancel import Watching
from test_gateway_openai_chat import check_hostile, hermes

PATCH = "*** Begin Patch\n*** Add File: hello.txt\n+hello\n*** End Patch"
TOOLS = [
    {"type": "function", "name": "system_date", "description": "Current date.", "strict": True,
     "parameters": {"type": "object", "properties": {}, "required": [], "additionalProperties": False}},
    {"type": "function", "name": "echo", "description": "Echo text.", "strict": True,
     "parameters": {"type": "object", "properties": {"text": {"type": "string"}}, "required": ["text"],
                    "additionalProperties": False}},
    {"type": "custom", "name": "apply_patch", "description": "Edit files with a patch.",
     "format": {"type": "grammar", "syntax": "lark", "definition": "start: begin_patch hunk+ end_patch"}},
    {"type": "namespace", "name": "mcp", "description": "An MCP server.", "tools": [
        {"type": "function", "name": "lookup", "description": "Look a key up.",
         "parameters": {"type": "object", "properties": {"key": {"type": "string"}}}}]},
    {"type": "web_search"},
]

# turn 1: text + two parallel function calls; turn 2: a custom (freeform) call and a namespaced
# call in parallel; turn 3: the answer
SCRIPT = [
    {"text": hermes("system_date", {}, before="Let me check.\n") + "\n" + hermes("echo", {"text": "checking"})},
    {"text": hermes("apply_patch", {"input": PATCH}) + "\n" + hermes("mcp__lookup", {"key": "k"})},
    {"text": "Patched on 2026-12-02."},
    {"text": "ok"},
]
OUTPUTS = {"system_date": "2026-12-02", "echo": "echoed", "lookup": "v", "apply_patch": "Done!"}


def next_input(response, *, drop_reasoning_content: bool = True) -> list[dict]:
    """What a client resends: the output items (reasoning without its content, as Codex does),
    then one output per call."""
    items, outputs = [], []
    for item in response.output:
        data = item.model_dump(exclude_none=True)
        if data["type"] == "reasoning" and drop_reasoning_content:
            data.pop("content", None)
        items.append(data)
        if data["type"] == "function_call":
            outputs.append({"type": "function_call_output", "call_id": data["call_id"], "output": OUTPUTS[data["name"]]})
        elif data["type"] == "custom_tool_call":
            outputs.append({"type": "custom_tool_call_output", "call_id": data["call_id"],
                            "output": OUTPUTS[data["name"]]})
    return items + outputs


def converse(client: openai.OpenAI, stream: bool, tools=TOOLS, turns: int = 3) -> list:
    history: list = [{"role": "developer", "content": "You are terse."},
                     {"role": "user", "content": [{"type": "input_text", "text": "Date, then patch."}]}]
    replies = []
    for _ in range(turns):
        kwargs = dict(model="served", instructions="Be helpful.", input=history, tools=tools, store=False,
                      include=["reasoning.encrypted_content"], max_output_tokens=300)
        if stream:  # the SDK's stream helper checks the event sequence as it accumulates
            with client.responses.stream(**kwargs) as s:
                response = s.get_final_response()
        else:
            response = client.responses.create(**kwargs)
        replies.append(response)
        history = history + next_input(response)
        if not any(item.type.endswith("call") for item in response.output):
            break
    return replies


@pytest.mark.parametrize("stream", [False, True], ids=["json", "sse"])
def test_sdk_multi_turn_with_parallel_custom_and_namespaced_calls(tmp_path, stream):
    renderer = qwen25_renderer()
    with scripted_gateway(tmp_path, SCRIPT, renderer) as (url, gateway):
        # no /v1 in the base URL: the client posts to /responses, as Codex does with such a base
        client = openai.OpenAI(base_url=url if stream else f"{url}/v1", api_key="resp-1", max_retries=0)
        replies = converse(client, stream)
        notes = httpx.post(f"{url}/v1/responses", headers={"authorization": "Bearer other"}, json={
            "model": "m", "input": "hi", "tools": TOOLS}).headers["x-agent-code-notes"]
        r = httpx.post(f"{url}/v1/sessions/resp-1/finish", json={"reward": 1.0})
        assert r.status_code == 200, r.text
        samples = [Sample.from_dict(s) for s in r.json()["samples"]]
        turns = gateway.store.get("resp-1").turns

    first, second, third = replies
    assert first.status == "completed" and [i.type for i in first.output] == ["message", "function_call", "function_call"]
    assert first.output[0].content[0].text == "Let me check." and first.output_text == "Let me check."
    calls = first.output[1:]
    assert [(c.name, json.loads(c.arguments)) for c in calls] == [("system_date", {}), ("echo", {"text": "checking"})]
    assert len({c.call_id for c in calls}) == 2 and all(c.call_id.startswith("call_") for c in calls)
    assert [i.type for i in second.output] == ["custom_tool_call", "function_call"]
    patch, lookup = second.output
    assert (patch.name, patch.input) == ("apply_patch", PATCH)
    assert (lookup.name, lookup.namespace, json.loads(lookup.arguments)) == ("lookup", "mcp", {"key": "k"})
    assert third.output_text == "Patched on 2026-12-02." and third.status == "completed"
    assert first.usage.input_tokens == len(turns[0].prompt_ids)
    assert first.usage.output_tokens == len(turns[0].output_ids)
    assert first.usage.total_tokens == first.usage.input_tokens + first.usage.output_tokens
    assert "web_search" in notes

    assert len(turns) == 3 and {t.protocol for t in turns} == {"openai-responses"}
    for turn, line in zip(turns, SCRIPT[:3]):
        assert turn.output_ids.tolist() == renderer.encode(line["text"]) + renderer.end_of_turn_ids[:1]
        assert turn.prompt_ids.tolist() == renderer.render(turn.messages, turn.tools)
    # instructions and the leading developer message are one system prompt
    assert turns[0].messages == [{"role": "system", "content": "Be helpful.\n\nYou are terse."},
                                 {"role": "user", "content": "Date, then patch."}]
    # tools as the model sees them: the custom tool takes one string, the namespace is flattened,
    # the hosted tool is gone
    names = [t["function"]["name"] for t in turns[0].tools]
    assert names == ["system_date", "echo", "apply_patch", "mcp__lookup"]
    assert turns[0].tools[2]["function"]["parameters"]["required"] == ["input"]
    assert "begin_patch" in turns[0].tools[2]["function"]["parameters"]["properties"]["input"]["description"]
    # resent items merge into the canonical assistant message the gateway recorded
    assert turns[2].messages[5] == {"role": "assistant", "content": "", "tool_calls": [
        {"type": "function", "function": {"name": "apply_patch", "arguments": {"input": PATCH}}},
        {"type": "function", "function": {"name": "mcp__lookup", "arguments": {"key": "k"}}}]}
    assert turns[2].messages[6:] == [{"role": "tool", "content": "Done!"}, {"role": "tool", "content": "v"}]
    assert [t.parent for t in turns] == [None, 0, 1]
    assert len(samples) == 1
    check_token_exact(samples, turns)


def test_event_sequence_reasoning_round_trip_and_keepalive(tmp_path):
    renderer = qwen3_renderer()
    script = [{"text": "<think>\nNeed the date and a patch.\n</think>\n\nOn it.\n"
                       + hermes("system_date", {}) + "\n" + hermes("apply_patch", {"input": PATCH}), "delay": 0.3},
              {"text": "<think>\nDone.\n</think>\n\nAll set."}]
    with scripted_gateway(tmp_path, script, renderer, ping_interval_s=0.05) as (url, gateway):
        client = openai.OpenAI(base_url=f"{url}/v1", api_key="events", max_retries=0)
        history = [{"role": "user", "content": "go"}]
        events = list(client.responses.create(model="m", input=history, tools=TOOLS, stream=True))
        kinds = [e.type for e in events]
        assert [e.sequence_number for e in events] == list(range(len(events)))
        assert kinds[:2] == ["response.created", "response.in_progress"]
        assert kinds.count("response.in_progress") > 1  # keep-alives while the engine worked
        body = [k for k in kinds if k != "response.in_progress"][1:]
        assert body == [
            "response.output_item.added", "response.content_part.added", "response.reasoning_text.delta",
            "response.reasoning_text.done", "response.content_part.done", "response.output_item.done",
            "response.output_item.added", "response.content_part.added", "response.output_text.delta",
            "response.output_text.done", "response.content_part.done", "response.output_item.done",
            "response.output_item.added", "response.function_call_arguments.delta",
            "response.function_call_arguments.done", "response.output_item.done",
            "response.output_item.added", "response.custom_tool_call_input.delta",
            "response.custom_tool_call_input.done", "response.output_item.done", "response.completed"]
        done = [e.item for e in events if e.type == "response.output_item.done"]
        assert [i.type for i in done] == ["reasoning", "message", "function_call", "custom_tool_call"]
        assert done[0].content[0].text == "Need the date and a patch."
        assert done[0].encrypted_content.startswith("agent-code.v1.")
        completed = events[-1].response
        assert [i.id for i in completed.output] == [i.id for i in done]
        assert {e.response.id for e in events if hasattr(e, "response")} == {completed.id}
        assert "".join(e.delta for e in events if e.type == "response.custom_tool_call_input.delta") == PATCH

        # resend the reasoning item WITHOUT its content (as Codex does): the sealed text round-trips
        history += next_input(completed)
        second = client.responses.create(model="m", input=history, tools=TOOLS)
        assert second.output_text == "All set."
        turns = gateway.store.get("events").turns
        assert turns[1].messages[1]["reasoning_content"] == "Need the date and a patch."
        assert turns[1].parent == 0 and turns[1].drift == []


def test_incomplete_and_failed_responses(tmp_path):
    renderer = qwen25_renderer()
    with scripted_gateway(tmp_path, [{"text": "one two three four five six seven"}], renderer) as (url, gateway):
        client = openai.OpenAI(base_url=f"{url}/v1", api_key="cut", max_retries=0)
        response = client.responses.create(model="m", input="count", max_output_tokens=3)
        assert response.status == "incomplete" and response.incomplete_details.reason == "max_output_tokens"
        assert response.usage.output_tokens == 3
        # the script is used up: the request fails (a plain request error, which no client retries) —
        # an error object, or response.failed in a stream
        with pytest.raises(openai.APIStatusError) as info:
            client.responses.create(model="m", input="again")
        assert info.value.status_code == 400 and info.value.body["type"] == "invalid_request_error"
        assert info.value.body["code"] == "invalid_prompt" and "script" in info.value.body["message"]
        events = list(client.responses.create(model="m", input="again", stream=True))
        assert [e.type for e in events] == ["response.created", "response.in_progress", "response.failed"]
        assert events[-1].response.status == "failed" and events[-1].response.error.code == "invalid_prompt"
        assert "script" in events[-1].response.error.message
        assert len(gateway.store.get("cut").turns) == 1


def test_input_as_a_string_and_identity_by_history(tmp_path):
    renderer = qwen25_renderer()
    script = [{"text": hermes("echo", {"text": "x"})}, {"text": "done"}]
    with scripted_gateway(tmp_path, script, renderer) as (url, gateway):
        r1 = httpx.post(f"{url}/responses", json={"model": "m", "input": "echo x", "tools": TOOLS})
        assert r1.status_code == 200, r1.text
        sid = r1.headers["x-agent-code-session"]
        assert sid.startswith("anon-")
        call = r1.json()["output"][0]
        history = [{"role": "user", "content": "echo x"}, call,
                   {"type": "function_call_output", "call_id": call["call_id"], "output": "x"}]
        r2 = httpx.post(f"{url}/responses", json={"model": "m", "input": history, "tools": TOOLS})
        assert r2.status_code == 200 and r2.headers["x-agent-code-session"] == sid
        assert [t.parent for t in gateway.store.get(sid).turns] == [None, 0]


# ---------------------------------------------------------------------------------------------
# hostile bodies

GOOD = {"model": "m", "input": [{"role": "user", "content": "hi"}]}
LIMIT = 64 * 1024
FC = {"type": "function_call", "call_id": "call_1", "name": "echo", "arguments": "{}"}
CC = {"type": "custom_tool_call", "call_id": "call_2", "name": "apply_patch", "input": "x"}


def _variants() -> list[tuple[str, bytes, dict[str, str]]]:
    bodies = generic_bodies(GOOD)
    add = bodies.add
    add("deep-in-content", {**GOOD, "input": [{"role": "user", "content": json.loads("[" * 200 + "]" * 200)}]})
    add("deep-arguments", {**GOOD, "input": [{**FC, "arguments": "[" * 5000 + "]" * 5000}]})
    add("huge-string", {**GOOD, "input": "x" * (LIMIT + 10)})
    for field in ("model", "input"):
        add(f"missing-{field}", {k: v for k, v in GOOD.items() if k != field})
    expect = {"model": str, "input": (str, list), "instructions": str, "tools": list, "stream": bool,
              "temperature": (int, float), "top_p": (int, float), "top_k": int, "seed": int,
              "max_output_tokens": int, "tool_choice": (str, dict), "parallel_tool_calls": bool,
              "store": bool, "include": list, "reasoning": dict, "text": dict, "metadata": dict, "user": str,
              "truncation": str, "prompt_cache_key": str, "max_tool_calls": int, "stream_options": dict}
    for field, ok in expect.items():
        for j, value in enumerate(WRONG):
            numeric = ok in (int, (int, float))
            if isinstance(value, ok) and not (isinstance(value, bool) and numeric):
                continue
            if value is None and field not in ("model", "input"):
                continue
            if field == "truncation" and value == "s":
                pass  # a string, but not a known value: still refused
            elif field == "input" and value == "":
                continue  # an empty string is a valid (empty) user message
            add(f"type-{field}-{j}", {**GOOD, field: value})
    add("truncation-bogus", {**GOOD, "truncation": "sometimes"})
    for name, extra in [("temperature-high", {"temperature": 2.5}), ("top-p-high", {"top_p": 1.5}),
                        ("max-output-zero", {"max_output_tokens": 0}), ("max-output-float", {"max_output_tokens": 2.5}),
                        ("max-output-string", {"max_output_tokens": "16"}), ("empty-input", {"input": []}),
                        ("model-empty", {"model": ""}), ("previous-response", {"previous_response_id": "resp_1"}),
                        ("conversation", {"conversation": "conv_1"}), ("prompt", {"prompt": {"id": "p"}}),
                        ("background", {"background": True}), ("include-int", {"include": [1]}),
                        ("text-format-str", {"text": {"format": "json"}}), ("metadata-int", {"metadata": {"a": 1}}),
                        ("tool-choice-bogus", {"tool_choice": "sometimes"}),
                        ("tool-choice-undeclared", {"tool_choice": {"type": "function", "name": "nope"}}),
                        ("tool-choice-no-name", {"tool_choice": {"type": "function"}}),
                        ("tool-choice-type-int", {"tool_choice": {"type": 3}})]:
        add(name, {**GOOD, **extra})
    user = {"role": "user", "content": "hi"}
    bad_inputs = [
        [None], [1], ["hi"], [[]], [{}], [{"type": 5}], [{"type": None, "role": "user", "content": "x"}],
        [{"type": "message"}], [{"type": "message", "role": "user"}], [{"role": "robot", "content": "x"}],
        [{"role": 1, "content": "x"}], [{"role": "tool", "content": "x"}], [{"role": "User", "content": "x"}],
        [{"role": "user", "content": 5}], [{"role": "user", "content": None}], [{"role": "user", "content": {}}],
        [{"role": "user", "content": [None]}], [{"role": "user", "content": [1]}], [{"role": "user", "content": ["x"]}],
        [{"role": "user", "content": [{}]}], [{"role": "user", "content": [{"type": 5}]}],
        [{"role": "user", "content": [{"type": "input_text"}]}],
        [{"role": "user", "content": [{"type": "input_text", "text": 1}]}],
        [{"role": "user", "content": [{"type": "input_video", "url": "x"}]}],
        [{"role": "developer", "content": [{"type": "input_image", "image_url": "x"}]}],
        [{"role": "system", "content": 7}], [user, {"role": "assistant", "content": 5}],
        [user, {"role": "assistant", "content": [{"type": "input_image"}]}],
        [user, {"role": "assistant", "content": [{"type": "output_text", "text": None}]}],
        [{"type": "bogus_item"}], [{"type": "item_reference", "id": "msg_1"}],
        [{"type": "agent_message", "author": "a", "recipient": "b", "content": "x"}],
        [{"type": "agent_message", "author": 1, "recipient": "b", "content": []}],
        [{"type": "agent_message", "content": [{"type": "video"}]}],
        [{"type": "agent_message", "content": [{"type": "input_text"}]}],
        [user, {"type": "reasoning", "summary": "x"}], [user, {"type": "reasoning", "content": "x"}],
        [user, {"type": "reasoning", "content": [{"type": "reasoning_text"}]}],
        [user, {"type": "reasoning", "content": [None]}], [user, {"type": "reasoning", "encrypted_content": 5}],
    ]
    for j, call in enumerate([
        {**FC, "call_id": None}, {**FC, "call_id": ""}, {**FC, "call_id": 7}, {k: v for k, v in FC.items() if k != "call_id"},
        {**FC, "name": None}, {**FC, "name": ""}, {**FC, "name": 3}, {**FC, "namespace": 3},
        {k: v for k, v in FC.items() if k != "arguments"}, {**FC, "arguments": "{not json"}, {**FC, "arguments": "[1]"},
        {**FC, "arguments": "\"s\""}, {**FC, "arguments": 42}, {**FC, "arguments": None}, {**FC, "arguments": ["a"]},
        {**CC, "call_id": None}, {**CC, "call_id": 1}, {**CC, "name": None}, {**CC, "input": None}, {**CC, "input": 3},
        {k: v for k, v in CC.items() if k != "input"},
    ]):
        bad_inputs.append([user, call])
    bad_inputs.append([user, FC, FC])  # a call_id used twice
    for output in [{"type": "function_call_output", "output": "r"},
                   {"type": "function_call_output", "call_id": None, "output": "r"},
                   {"type": "function_call_output", "call_id": "", "output": "r"},
                   {"type": "function_call_output", "call_id": 5, "output": "r"},
                   {"type": "function_call_output", "call_id": "call_other", "output": "r"},
                   {"type": "function_call_output", "call_id": "call_1"},
                   {"type": "function_call_output", "call_id": "call_1", "output": 5},
                   {"type": "function_call_output", "call_id": "call_1", "output": {"a": 1}},
                   {"type": "function_call_output", "call_id": "call_1", "output": [{"type": "input_text"}]},
                   {"type": "function_call_output", "call_id": "call_1", "output": [{"type": "bogus"}]},
                   {"type": "custom_tool_call_output", "call_id": "call_9", "output": "r"},
                   {"type": "custom_tool_call_output", "call_id": "call_1"}]:
        bad_inputs.append([user, FC, output])
    bad_inputs.append([user, {"type": "function_call_output", "call_id": "call_1", "output": "orphan"}])
    for j, items in enumerate(bad_inputs):
        add(f"input-{j}", {**GOOD, "input": items})
    fn = {"type": "function", "name": "t", "parameters": {"type": "object"}}
    bad_tools = [[None], [1], ["t"], [{}], [{"type": 1}], [{"type": "function"}], [{"type": "function", "name": 1}],
                 [{"type": "function", "name": ""}], [{**fn, "parameters": "x"}], [{**fn, "parameters": []}],
                 [{**fn, "description": 5}], [{**fn, "strict": "yes"}], [fn, fn],
                 [{"type": "custom"}], [{"type": "custom", "name": 5}], [{"type": "custom", "name": "c", "format": "x"}],
                 [{"type": "custom", "name": "c", "format": {"type": "bogus"}}],
                 [{"type": "custom", "name": "c", "format": {"type": "grammar"}}],
                 [{"type": "custom", "name": "c", "format": {"type": "grammar", "definition": 5}}],
                 [{"type": "namespace"}], [{"type": "namespace", "name": "n"}],
                 [{"type": "namespace", "name": "n", "tools": "x"}], [{"type": "namespace", "name": "n", "tools": [1]}],
                 [{"type": "namespace", "name": "n", "tools": [{"type": "function"}]}],
                 [{"type": "namespace", "name": "n", "tools": [{"type": "namespace", "name": "m", "tools": []}]}],
                 [{"type": "function", "name": "n__t"}, {"type": "namespace", "name": "n", "tools": [{"type": "function", "name": "t"}]}]]
    for j, tools in enumerate(bad_tools):
        add(f"tools-{j}", {**GOOD, "tools": tools})
    for j, headers in enumerate([{"content-type": "text/plain"}, {"authorization": "Bearer"},
                                 {"authorization": "Basic Zm9vOmJhcg=="}, {"x-api-key": "x" * 4000},
                                 {"content-encoding": "gzip"}]):
        add(f"headers-{j}", b"{not json", headers)
    add("lone-surrogate-type", b'{"model": "m", "input": [{"type": "\\ud800"}]}')
    return bodies.cases


@pytest.mark.parametrize("path", ["/v1/responses", "/responses"])
def test_hostile_bodies_get_4xx_in_openai_format(tmp_path, path):
    cases = _variants()
    assert len(cases) >= 200, len(cases)
    with scripted_gateway(tmp_path, [{"text": "fine"}], qwen25_renderer(), max_body_bytes=LIMIT) as (url, gateway):
        check_hostile(url, path, cases, GOOD, gateway, "fine", lambda body: body["output"][0]["content"][0]["text"])
        r = httpx.post(f"{url}{path}", json={**GOOD, "previous_response_id": "resp_1"})
        assert r.json()["error"]["param"] == "previous_response_id"
        assert "full history" in r.json()["error"]["message"]


@pytest.mark.parametrize("path,body", [
    ("/v1/responses", {"model": "m", "input": "hi", "stream": True}),
    ("/v1/chat/completions", {"model": "m", "messages": [{"role": "user", "content": "hi"}], "stream": True}),
], ids=["responses", "chat"])
def test_disconnect_cancels_the_engine_and_records_nothing(tmp_path, path, body):
    """The shared turn flow's cancellation, through both OpenAI protocols' streams."""
    renderer = qwen25_renderer()
    engine = Watching(ScriptedEngine(write_script(tmp_path, [{"text": "slow", "delay": 30}, {"text": "fast"}]),
                                     renderer))
    gateway = Gateway(engine, renderer)
    with BackgroundServer(create_app(gateway, ping_interval_s=0.1)) as server:
        with httpx.Client(base_url=server.url, timeout=httpx.Timeout(5, read=0.5)) as client:
            with client.stream("POST", path, json=body, headers={"x-api-key": "s"}) as r:
                assert r.status_code == 200 and next(r.iter_bytes())  # the opening events, then hang up
        deadline = time.monotonic() + 10
        while engine.cancelled == 0 and time.monotonic() < deadline:
            time.sleep(0.05)
        assert engine.cancelled == 1 and engine.finished == 0
        assert gateway.store.get("s").turns == []
        r = httpx.post(f"{server.url}{path}", json={**body, "stream": False}, headers={"x-api-key": "s"})
        assert r.status_code == 200 and len(gateway.store.get("s").turns) == 1
