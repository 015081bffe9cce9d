"""A scripted engine that runs out of lines says so plainly, as an error no client retries
(issue 20, part 4): a 400 ``invalid_request_error`` in each protocol's own format — before, it
was Anthropic's 529 ``overloaded_error`` (OpenAI: 503 ``server_error``), which the SDKs and
Claude Code retry, for minutes."""

from __future__ import annotations

import json
import time
from typing import Any

import anthropic
import openai
import pytest

from agent_code.engines.scripted import ScriptedEngine
from gateway_fixtures import qwen3_renderer, qwen25_renderer, write_script
from test_faults import PROTOCOLS, gateway_over, json_error, post, stream_completed, stream_error


class Counting:
    """Counts the requests that reached the engine."""

    def __init__(self, engine: Any) -> None:
        self.engine, self.name, self.calls = engine, engine.name, 0

    async def generate(self, *args: Any, **kw: Any):
        self.calls += 1
        return await self.engine.generate(*args, **kw)

    async def close(self) -> None:
        await self.engine.close()


@pytest.mark.parametrize("stream", [False, True], ids=["json", "sse"])
@pytest.mark.parametrize("protocol", PROTOCOLS)
def test_exhausted_script_is_a_plain_non_retryable_error(tmp_path, protocol, stream):
    renderer = qwen3_renderer()
    engine = ScriptedEngine(write_script(tmp_path, [{"text": "the only line"}]), renderer)
    with gateway_over(engine, renderer, ping_interval_s=0.1) as (url, _):
        assert post(url, protocol, "k", stream=stream).status_code == 200
        r = post(url, protocol, "k", stream=stream, text="again")
        if stream:   # the stream had started: the protocol's own error event ends it
            assert r.status_code == 200 and not stream_completed(protocol, r.text)
            err = stream_error(r.text)
        else:
            assert r.status_code == 400, (r.status_code, r.text)
            err = json_error(protocol, r)
    assert err is not None and "ran out" in err["message"] and str(engine.path) in err["message"]
    if protocol == "anthropic":
        assert err["type"] == "invalid_request_error"
    else:   # Codex retries a response.failed unless its code is one of a few; invalid_prompt is one
        assert err["code"] == "invalid_prompt" and err.get("type", "invalid_request_error") == "invalid_request_error"


def test_the_sdks_do_not_retry_an_exhausted_script(tmp_path):
    """The official Anthropic and OpenAI SDKs, with retries on, give up at once (one request)."""
    renderer = qwen3_renderer()
    engine = Counting(ScriptedEngine(write_script(tmp_path, []), renderer))
    with gateway_over(engine, renderer) as (url, _):
        client = anthropic.Anthropic(base_url=url, api_key="a", max_retries=3)
        with pytest.raises(anthropic.BadRequestError, match="ran out"):
            client.messages.create(model="m", max_tokens=16, messages=[{"role": "user", "content": "hi"}])
        assert engine.calls == 1
        oa = openai.OpenAI(base_url=url + "/v1", api_key="o", max_retries=3)
        with pytest.raises(openai.BadRequestError, match="ran out"):
            oa.chat.completions.create(model="m", messages=[{"role": "user", "content": "hi"}])
        assert engine.calls == 2
        with pytest.raises(openai.BadRequestError, match="ran out"):
            oa.responses.create(model="m", input="hi")
        assert engine.calls == 3


def test_claude_code_stops_at_once_when_the_script_runs_out(tmp_path):
    """The real Claude Code: an error naming the script at once — the failed stream and Claude
    Code's own non-streaming fallback, no minutes of retries."""
    from test_claude_code import claude_binary, run_claude

    claude = claude_binary()
    renderer = qwen25_renderer()
    engine = Counting(ScriptedEngine(write_script(tmp_path, []), renderer))
    work = tmp_path / "work"
    work.mkdir()
    with gateway_over(engine, renderer) as (url, _):
        start = time.monotonic()
        proc = run_claude(claude, "say hi", work, url, "cc-out", "served-model")
        took = time.monotonic() - start
    events = [json.loads(line) for line in proc.stdout.splitlines() if line.strip().startswith("{")]
    result = events[-1] if events else {}
    assert result.get("type") == "result" and result.get("is_error"), proc.stdout[-2000:]
    assert "ran out" in proc.stdout, proc.stdout[-2000:]
    # the stream's error event, then Claude Code's one non-streaming fallback request: no retries
    assert engine.calls <= 2, engine.calls
    assert took < 60, took
    print(f"claude code gave up after {took:.1f} s and {engine.calls} request(s)")
