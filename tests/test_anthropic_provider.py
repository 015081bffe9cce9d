"""AnthropicProvider through the real SDK against a local Anthropic-wire server."""

from __future__ import annotations

import copy
import re
import socket

import pytest

from agent_code.agent import Agent
from agent_code.providers import ProviderError
from agent_code.providers.anthropic import AnthropicProvider
from agent_code.tools import ToolContext, default_tools
from anthropic_server import FakeAnthropic, api_error, message
from conftest import cli_env, run_cli

THINKING = {"type": "thinking", "thinking": "The model has no clock; ask system_date.",
            "signature": "EqQBCkgIARABGAIiQL0s+Fz/9w==sig"}
TURN1 = [THINKING, {"type": "text", "text": "Checking the date."},
         {"type": "tool_use", "id": "toolu_01A", "name": "system_date", "input": {}}]
REDACTED = {"type": "redacted_thinking", "data": "EmwKAhgBEgy3va3pzix/LafPsn4a"}
TURN2 = [REDACTED, {"type": "tool_use", "id": "toolu_02B", "name": "echo", "input": {"text": "repeat me"}}]
TURN3 = [{"type": "text", "text": "Today is the date system_date returned; echo said: repeat me."}]
DATE = re.compile(r"^\d{4}-\d{2}-\d{2} \d{2}:\d{2}:\d{2} \S+$")


def test_agent_loop_over_the_wire(tmp_path, monkeypatch):
    monkeypatch.setenv("ANTHROPIC_AUTH_TOKEN", "tok-test")
    monkeypatch.delenv("ANTHROPIC_API_KEY", raising=False)
    with FakeAnthropic([message(copy.deepcopy(TURN1)), message(copy.deepcopy(TURN2)),
                        message(copy.deepcopy(TURN3))]) as server:
        provider = AnthropicProvider(model="deepseek-v4-flash", base_url=server.url, max_tokens=512)
        tools = default_tools()
        result = Agent(provider, tools, ToolContext(tmp_path), system="SYS").run("What is the date? Then echo.")

    assert result.status == "success" and result.steps == 3
    assert result.final == TURN3[0]["text"]
    assert result.usage.input_tokens == 30 and result.usage.output_tokens == 15
    assert [r["path"] for r in server.requests] == ["/v1/messages"] * 3
    assert server.requests[0]["headers"]["authorization"] == "Bearer tok-test"

    first, second, third = server.bodies
    assert first["model"] == "deepseek-v4-flash" and first["max_tokens"] == 512 and first["system"] == "SYS"
    assert first["messages"] == [{"role": "user", "content": [{"type": "text", "text": "What is the date? Then echo."}]}]
    assert first["tools"] == tools.schemas()
    assert all(set(t) == {"name", "description", "input_schema"} for t in first["tools"])

    # turn 2: the assistant blocks come back verbatim (thinking + signature), then the result
    assert second["messages"][:1] == first["messages"]
    assert second["messages"][1] == {"role": "assistant", "content": TURN1}
    tool_msg = second["messages"][2]
    assert tool_msg["role"] == "user" and len(tool_msg["content"]) == 1
    block = tool_msg["content"][0]
    assert block["type"] == "tool_result" and block["tool_use_id"] == "toolu_01A"
    assert block["is_error"] is False and DATE.match(block["content"])
    assert len(second["messages"]) == 3

    # turn 3: the whole history again, redacted thinking included, and echo's result
    assert third["messages"][:3] == second["messages"]
    assert third["messages"][3] == {"role": "assistant", "content": TURN2}
    assert third["messages"][4] == {"role": "user", "content": [
        {"type": "tool_result", "tool_use_id": "toolu_02B", "content": "repeat me", "is_error": False}]}


def test_api_key_env_is_used(tmp_path, monkeypatch):
    monkeypatch.delenv("ANTHROPIC_AUTH_TOKEN", raising=False)
    monkeypatch.setenv("ANTHROPIC_API_KEY", "sk-official")
    with FakeAnthropic([message([{"type": "text", "text": "hi"}])]) as server:
        provider = AnthropicProvider(base_url=server.url)
        assert provider.complete([{"role": "user", "content": "hi"}]).text == "hi"
    headers = server.requests[0]["headers"]
    # older SDKs send an API key as x-api-key, newer ones as a Bearer token
    assert "sk-official" in (headers.get("x-api-key"), headers.get("authorization", "").removeprefix("Bearer "))
    assert "tools" not in server.bodies[0] and "system" not in server.bodies[0]


def test_no_key_is_a_clear_error(no_credentials):
    with pytest.raises(ProviderError, match="ANTHROPIC_AUTH_TOKEN or ANTHROPIC_API_KEY"):
        AnthropicProvider(base_url="http://127.0.0.1:9")


def test_endpoint_errors_become_one_line(tmp_path, monkeypatch):
    monkeypatch.setenv("ANTHROPIC_AUTH_TOKEN", "bad")
    with FakeAnthropic([api_error(401, "authentication_error", "invalid x-api-key"),
                        api_error(400, "invalid_request_error", "messages: field required")]) as server:
        provider = AnthropicProvider(base_url=server.url, max_retries=0)
        with pytest.raises(ProviderError, match=r"refused the API key \(401\): invalid x-api-key"):
            provider.complete([{"role": "user", "content": "x"}])
        with pytest.raises(ProviderError, match=r"answered 400: messages: field required"):
            provider.complete([{"role": "user", "content": "x"}])


def _closed_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def test_cli_reports_missing_key_in_one_line(tmp_path):
    proc = run_cli("-C", str(tmp_path), "hello", env=cli_env())
    assert proc.returncode == 1
    assert proc.stderr.strip().count("\n") == 0 and "Traceback" not in proc.stderr
    assert "no API key" in proc.stderr


def test_cli_reports_refused_endpoint_in_one_line(tmp_path):
    url = f"http://127.0.0.1:{_closed_port()}"
    proc = run_cli("-C", str(tmp_path), "--base-url", url, "hello", env=cli_env(ANTHROPIC_AUTH_TOKEN="k"))
    assert proc.returncode == 1
    assert "Traceback" not in proc.stderr
    line = proc.stderr.strip()
    assert line.startswith(f"agent-code: error: cannot reach {url}: ") and "Connection refused" in line
    assert proc.stderr.strip().count("\n") == 0


def test_cli_end_to_end_against_the_server(tmp_path):
    with FakeAnthropic([message(copy.deepcopy(TURN1)), message(copy.deepcopy(TURN2)),
                        message(copy.deepcopy(TURN3))]) as server:
        proc = run_cli("-C", str(tmp_path), "--base-url", server.url, "date, then echo",
                       env=cli_env(ANTHROPIC_AUTH_TOKEN="k"))
    assert proc.returncode == 0, proc.stderr
    out = proc.stdout
    assert f"cwd: {tmp_path.resolve()}" in out
    assert f"provider: anthropic  model: deepseek-v4-flash  base_url: {server.url}" in out
    assert out.index("tool_call: system_date") < out.index("tool_call: echo") < out.index("final: Today is")
    assert server.bodies[2]["messages"][3]["content"][0] == REDACTED
