"""Long generations never starve a stream: while the engine works, every protocol's SSE stream
sends a keep-alive at least every ``ping_interval_s``, so a client whose read watchdog is
shorter than the generation (but longer than the interval) never fires, and the final reply
arrives intact and recorded.

Keep-alives: Anthropic ``event: ping``; Chat Completions ``: keep-alive`` comment lines (the
OpenAI SDKs skip SSE comments); Responses a repeated ``response.in_progress`` event (Codex's
idle timer ignores comments). The engine is the scripted one with a ``delay`` of seconds.
"""

from __future__ import annotations

import json
import threading
import time
from typing import Any, Callable

import anthropic
import httpx
import openai
import pytest

from gateway_fixtures import qwen3_renderer, scripted_gateway

INTERVAL = 0.4          # the gateway's ping interval here
DELAY = 2.5             # the engine's time per reply: six intervals
WATCHDOG = 1.2          # every client's read timeout: three intervals, half the generation
CALL = {"name": "Read", "arguments": {"file_path": "src/app.py"}}
REPLY = "Let me look.\n<tool_call>\n" + json.dumps(CALL) + "\n</tool_call>"
SCHEMA = {"type": "object", "properties": {"file_path": {"type": "string"}}, "required": ["file_path"]}

# protocol: (path, request body, the keep-alive's bytes)
STREAMS: dict[str, tuple[str, dict[str, Any], bytes]] = {
    "anthropic": ("/v1/messages", {
        "model": "m", "max_tokens": 256, "stream": True, "messages": [{"role": "user", "content": "Fix it."}],
        "tools": [{"name": "Read", "description": "Read a file.", "input_schema": SCHEMA}]}, b"event: ping\n"),
    "openai-chat": ("/v1/chat/completions", {
        "model": "m", "stream": True, "messages": [{"role": "user", "content": "Fix it."}],
        "tools": [{"type": "function", "function": {"name": "Read", "description": "Read a file.",
                                                    "parameters": SCHEMA}}]}, b": keep-alive\n"),
    "openai-responses": ("/v1/responses", {
        "model": "m", "stream": True, "input": "Fix it.",
        "tools": [{"type": "function", "name": "Read", "description": "Read a file.", "parameters": SCHEMA}]},
        b"event: response.in_progress\n"),
}


@pytest.fixture
def renderer():
    return qwen3_renderer()


def timed_stream(url: str, path: str, body: dict[str, Any], session: str) -> tuple[list[float], bytes]:
    """The stream's bytes, and when each chunk arrived (seconds since the request was sent),
    read with a watchdog: a read that waits more than WATCHDOG seconds raises ReadTimeout."""
    timeout = httpx.Timeout(connect=10.0, read=WATCHDOG, write=10.0, pool=10.0)
    arrivals, chunks = [], []
    t0 = time.monotonic()
    with httpx.stream("POST", url + path, json=body, headers={"x-api-key": session}, timeout=timeout) as r:
        assert r.status_code == 200 and r.headers["content-type"].startswith("text/event-stream")
        for chunk in r.iter_raw():
            arrivals.append(time.monotonic() - t0)
            chunks.append(chunk)
    return arrivals, b"".join(chunks)


def events(raw: bytes) -> list[tuple[str | None, Any]]:
    """(event name, parsed data) of each SSE message; comments skipped."""
    out = []
    for block in raw.decode("utf-8").split("\n\n"):
        name, data = None, []
        for line in block.split("\n"):
            if line.startswith("event:"):
                name = line[6:].strip()
            elif line.startswith("data:"):
                data.append(line[5:].strip())
        if data:
            text = "\n".join(data)
            out.append((name, text if text == "[DONE]" else json.loads(text)))
    return out


def final_call(protocol: str, raw: bytes) -> tuple[str, dict[str, Any]]:
    """(the reply's text, its one tool call's {name, arguments}) rebuilt from the stream."""
    evs = events(raw)
    if protocol == "anthropic":
        text, name, partial = "", None, ""
        for kind, data in evs:
            if kind == "content_block_start" and data["content_block"]["type"] == "tool_use":
                name = data["content_block"]["name"]
            elif kind == "content_block_delta" and data["delta"]["type"] == "text_delta":
                text += data["delta"]["text"]
            elif kind == "content_block_delta" and data["delta"]["type"] == "input_json_delta":
                partial += data["delta"]["partial_json"]
        assert evs[-1][0] == "message_stop"
        return text, {"name": name, "arguments": json.loads(partial)}
    if protocol == "openai-chat":
        text, name, args = "", None, ""
        for _, data in evs[:-1]:
            for choice in data["choices"]:
                delta = choice["delta"]
                text += delta.get("content") or ""
                for call in delta.get("tool_calls") or []:
                    name = call["function"].get("name") or name
                    args += call["function"].get("arguments") or ""
        assert evs[-1][1] == "[DONE]"
        return text, {"name": name, "arguments": json.loads(args)}
    kind, data = evs[-1]
    assert kind == "response.completed"
    output = data["response"]["output"]
    text = "".join(p["text"] for o in output if o["type"] == "message" for p in o["content"])
    call = next(o for o in output if o["type"] == "function_call")
    return text, {"name": call["name"], "arguments": json.loads(call["arguments"])}


def in_threads(jobs: dict[str, Callable[[], Any]]) -> dict[str, Any]:
    """Run the jobs at once (the engine's delays overlap); their results or exceptions."""
    results: dict[str, Any] = {}

    def run(key: str, job: Callable[[], Any]) -> None:
        try:
            results[key] = job()
        except BaseException as exc:  # reported by the caller
            results[key] = exc

    threads = [threading.Thread(target=run, args=item) for item in jobs.items()]
    for t in threads:
        t.start()
    for t in threads:
        t.join(timeout=60)
    return results


def test_every_protocol_keeps_a_long_stream_alive(tmp_path, renderer):
    lines = [{"text": REPLY, "delay": DELAY}] * len(STREAMS)
    with scripted_gateway(tmp_path, lines, renderer, ping_interval_s=INTERVAL) as (url, gateway):
        results = in_threads({p: (lambda p=p: timed_stream(url, STREAMS[p][0], STREAMS[p][1], f"ka-{p}"))
                              for p in STREAMS})
        for protocol, (path, body, keepalive) in STREAMS.items():
            result = results[protocol]
            assert not isinstance(result, BaseException), f"{protocol}: {result!r}"
            arrivals, raw = result
            gaps = [b - a for a, b in zip(arrivals, arrivals[1:])]
            assert arrivals[-1] >= DELAY                      # the engine's time really passed
            assert max(gaps) < WATCHDOG, f"{protocol}: a {max(gaps):.2f} s silence"
            assert raw.count(keepalive) >= DELAY / INTERVAL - 2, f"{protocol}: {raw.count(keepalive)} keep-alives"
            text, call = final_call(protocol, raw)
            assert text.strip() == "Let me look." and call == CALL, protocol
            assert len(gateway.store.get(f"ka-{protocol}").turns) == 1


def test_without_keepalives_the_same_watchdog_fires(tmp_path, renderer):
    """The control: pings slower than the generation, and the client's read times out."""
    with scripted_gateway(tmp_path, [{"text": REPLY, "delay": DELAY}], renderer, ping_interval_s=30) as (url, gw):
        path, body, _ = STREAMS["openai-chat"]
        with pytest.raises(httpx.ReadTimeout):
            timed_stream(url, path, body, "no-pings")


def test_the_sdks_read_the_keepalives(tmp_path, renderer):
    """The official SDKs, with the same short read timeout, take each stream to its end."""
    lines = [{"text": REPLY, "delay": DELAY}] * 3
    timeout = WATCHDOG  # every phase, reads included
    with scripted_gateway(tmp_path, lines, renderer, ping_interval_s=INTERVAL) as (url, _):
        claude = anthropic.Anthropic(base_url=url, api_key="sdk-a", timeout=timeout, max_retries=0)
        oai = {key: openai.OpenAI(base_url=f"{url}/v1", api_key=key, timeout=timeout, max_retries=0)
               for key in ("sdk-c", "sdk-r")}
        body_a, body_c, body_r = (STREAMS[p][1] for p in STREAMS)

        def anthropic_sdk() -> tuple[str, dict]:
            kwargs = {k: v for k, v in body_a.items() if k != "stream"}
            with claude.messages.stream(**kwargs) as stream:
                message = stream.get_final_message()
            use = next(b for b in message.content if b.type == "tool_use")
            return message.content[0].text, {"name": use.name, "arguments": use.input}

        def chat_sdk() -> tuple[str, dict]:
            text, name, args = "", None, ""
            for chunk in oai["sdk-c"].chat.completions.create(**body_c):
                for choice in chunk.choices:
                    text += choice.delta.content or ""
                    for call in choice.delta.tool_calls or []:
                        name = call.function.name or name
                        args += call.function.arguments or ""
            return text, {"name": name, "arguments": json.loads(args)}

        def responses_sdk() -> tuple[str, dict]:
            kwargs = {k: v for k, v in body_r.items() if k != "stream"}
            with oai["sdk-r"].responses.stream(**kwargs) as stream:
                response = stream.get_final_response()
            call = next(o for o in response.output if o.type == "function_call")
            return response.output_text, {"name": call.name, "arguments": json.loads(call.arguments)}

        results = in_threads({"anthropic": anthropic_sdk, "chat": chat_sdk, "responses": responses_sdk})
        for name, result in results.items():
            assert not isinstance(result, BaseException), f"{name}: {result!r}"
            text, call = result
            assert text.strip() == "Let me look." and call == CALL, name
