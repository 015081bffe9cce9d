"""`serve` answers while the gateway loads: /healthz at once, other requests once it is built,
a failed build as a 503 in the protocol's format and exit 1."""

from __future__ import annotations

import asyncio
import subprocess
import sys
import threading
import time
from pathlib import Path

import httpx
import pytest
from starlette.applications import Starlette
from starlette.requests import Request
from starlette.responses import JSONResponse
from starlette.routing import Route

from agent_code.gateway.starting import StartingApp


async def echo(request: Request) -> JSONResponse:
    return JSONResponse({"served": request.url.path, "body": (await request.json())})


INNER = Starlette(routes=[Route("/v1/messages", echo, methods=["POST"]),
                          Route("/v1/chat/completions", echo, methods=["POST"])])


def test_healthz_answers_while_loading_and_requests_wait_for_the_gateway():
    async def scenario() -> None:
        gate = threading.Event()
        starting = StartingApp()

        def build():
            gate.wait(30)
            return INNER

        loading = asyncio.ensure_future(starting.load(build))
        transport = httpx.ASGITransport(app=starting)
        async with httpx.AsyncClient(transport=transport, base_url="http://gw") as client:
            health = await client.get("/healthz")
            assert health.status_code == 200 and health.json()["status"] == "starting"
            pending = asyncio.ensure_future(client.post("/v1/messages", json={"n": 1}))
            await asyncio.sleep(0.3)
            assert not pending.done()          # held, not refused, while the gateway loads
            gate.set()
            reply = await pending
            assert reply.status_code == 200 and reply.json() == {"served": "/v1/messages", "body": {"n": 1}}
            assert await loading is INNER
            again = await client.post("/v1/chat/completions", json={"n": 2})
            assert again.json()["served"] == "/v1/chat/completions"

    asyncio.run(scenario())


def test_a_failed_load_answers_waiting_requests_in_their_protocol_format():
    async def scenario() -> None:
        gate = threading.Event()
        starting = StartingApp()

        def build():
            gate.wait(30)
            raise ValueError("no such tokenizer")

        loading = asyncio.ensure_future(starting.load(build))
        transport = httpx.ASGITransport(app=starting)
        async with httpx.AsyncClient(transport=transport, base_url="http://gw") as client:
            anthropic = asyncio.ensure_future(client.post("/v1/messages", json={}))
            openai = asyncio.ensure_future(client.post("/v1/chat/completions", json={}))
            await asyncio.sleep(0.2)
            gate.set()
            a, o = await anthropic, await openai
            with pytest.raises(ValueError, match="no such tokenizer"):
                await loading
            assert a.status_code == 503 and a.json()["type"] == "error"
            assert "no such tokenizer" in a.json()["error"]["message"]
            assert o.status_code == 503 and "no such tokenizer" in o.json()["error"]["message"]
            assert (await client.get("/healthz")).status_code == 503   # no longer "starting"

    asyncio.run(scenario())


def test_serve_answers_healthz_before_its_tokenizer_has_loaded(tmp_path: Path):
    from conftest import cli_env

    script = tmp_path / "s.jsonl"
    script.write_text('{"text": "hi"}\n')
    import socket
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    start = time.monotonic()
    proc = subprocess.Popen([sys.executable, "-m", "agent_code", "serve", "--port", str(port), "--engine",
                             f"scripted:{script}"], env=cli_env(), stdout=subprocess.DEVNULL,
                            stderr=subprocess.PIPE, text=True)
    try:
        statuses = []
        while time.monotonic() - start < 120:
            try:
                statuses.append(httpx.get(f"http://127.0.0.1:{port}/healthz", timeout=5).json()["status"])
            except httpx.TransportError:
                time.sleep(0.05)
                continue
            if statuses[-1] == "ok":
                break
            time.sleep(0.05)
        assert statuses and statuses[-1] == "ok", statuses
        # the first answer came while the tokenizer (transformers, torch) was still loading
        assert statuses[0] == "starting", statuses
        reply = httpx.post(f"http://127.0.0.1:{port}/v1/messages", headers={"x-api-key": "k"}, timeout=60,
                           json={"model": "m", "max_tokens": 8, "messages": [{"role": "user", "content": "x"}]})
        assert reply.status_code == 200 and reply.json()["content"][0]["text"] == "hi"
        # replies are not held back by Nagle's algorithm: without TCP_NODELAY each answer on a
        # kept-alive connection waited ~40 ms for the client's delayed ACK
        with httpx.Client(base_url=f"http://127.0.0.1:{port}", timeout=10) as client:
            times = []
            for _ in range(15):
                t0 = time.perf_counter()
                assert client.get("/healthz").status_code == 200
                times.append(time.perf_counter() - t0)
        assert sorted(times)[len(times) // 2] < 0.03, times
    finally:
        proc.terminate()
        proc.wait(timeout=20)


def test_serve_with_an_engine_that_cannot_load_exits_1_with_the_reason(tmp_path: Path):
    from conftest import cli_env

    proc = subprocess.run([sys.executable, "-m", "agent_code", "serve", "--port", "0", "--engine",
                           f"scripted:{tmp_path / 'missing.jsonl'}"], env=cli_env(), capture_output=True,
                          text=True, timeout=120)
    assert proc.returncode == 1, proc.stderr
    assert "agent-code serve: error: cannot read the engine script" in proc.stderr
    assert "Traceback" not in proc.stderr and "listening on" not in proc.stderr


def test_serve_sockets_say_tcp_so_replies_go_out_without_delay():
    """asyncio sets TCP_NODELAY only on sockets whose protocol says TCP (the bug: a socket made
    with proto 0 kept Nagle's algorithm on every connection it accepted)."""
    import socket as sockets

    from agent_code.cli.serve import bind_socket

    async def scenario() -> int:
        listener = bind_socket("127.0.0.1", 0)
        accepted: asyncio.Future = asyncio.get_running_loop().create_future()

        class Keep(asyncio.Protocol):
            def connection_made(self, transport):
                accepted.set_result(transport)

        server = await asyncio.get_running_loop().create_server(Keep, sock=listener)
        _, writer = await asyncio.open_connection(*listener.getsockname()[:2])
        transport = await asyncio.wait_for(accepted, 10)
        nodelay = transport.get_extra_info("socket").getsockopt(sockets.IPPROTO_TCP, sockets.TCP_NODELAY)
        writer.close()
        transport.close()
        server.close()
        return nodelay

    assert asyncio.run(scenario()) != 0


def test_settle_heap_freezes_the_start_up_heap_and_collects_young_objects_less_often():
    import gc

    from agent_code.gateway.server import GC_THRESHOLDS, settle_heap

    before = gc.get_threshold()
    try:
        settle_heap()
        assert gc.get_freeze_count() > 0
        assert gc.get_threshold() == GC_THRESHOLDS
        assert GC_THRESHOLDS[0] > before[0]
    finally:
        gc.unfreeze()
        gc.set_threshold(*before)


def test_serve_choices_list_what_the_gateway_knows():
    """The --history-policy and --reward-policy choices are spelled out in cli/serve.py (for
    the type checker): they must be exactly the policies the gateway knows."""
    from agent_code.cli.serve import HistoryPolicy, RewardPolicy, SessionsMode
    from agent_code.trajectory.history import POLICIES
    from agent_code.trajectory.samples import REWARD_POLICIES

    assert [p.value for p in HistoryPolicy] == list(POLICIES)
    assert [p.value for p in RewardPolicy] == list(REWARD_POLICIES)
    assert [p.value for p in SessionsMode] == ["auto", "explicit"]
