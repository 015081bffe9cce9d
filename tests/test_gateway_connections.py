"""Connection limits (gateway/connections.py), attacked over real sockets: a flood of idle
connections past the cap does not keep a new request out, a connection that sends nothing or
trickles its headers is closed at the header timeout, and requests past --max-requests get a
503 in their protocol's format while /healthz still answers."""

from __future__ import annotations

import socket
import threading
import time

import httpx
import pytest

from agent_code.engines.scripted import ScriptedEngine
from agent_code.gateway.app import create_app
from agent_code.gateway.connections import ConnectionLimits
from agent_code.gateway.pipeline import Gateway
from agent_code.gateway.server import BackgroundServer
from gateway_fixtures import qwen3_renderer, write_script

ASK = {"model": "m", "max_tokens": 8, "messages": [{"role": "user", "content": "hi"}]}


def gateway_server(tmp_path, limits: ConnectionLimits, lines=None) -> BackgroundServer:
    renderer = qwen3_renderer()
    engine = ScriptedEngine(write_script(tmp_path, lines or [{"text": "ok"}] * 20), renderer)
    return BackgroundServer(create_app(Gateway(engine, renderer, model_name="m")), limits=limits)


def connect(url: str) -> socket.socket:
    host, port = url.removeprefix("http://").split(":")
    return socket.create_connection((host, int(port)), timeout=10)


def closed_by_server(sock: socket.socket, wait: float) -> bool:
    sock.settimeout(wait)
    try:
        return sock.recv(1) == b""
    except socket.timeout:
        return False
    except OSError:
        return True


def test_a_flood_of_idle_connections_past_the_cap_does_not_keep_a_request_out(tmp_path):
    limits = ConnectionLimits(header_timeout_s=120, max_connections=100, max_requests=512)
    with gateway_server(tmp_path, limits) as server:
        flood = [connect(server.url) for _ in range(1000)]    # idle: nothing sent, ever
        try:
            started = time.perf_counter()
            reply = httpx.post(f"{server.url}/v1/messages", json=ASK, headers={"x-api-key": "a"}, timeout=30)
            assert reply.status_code == 200 and reply.json()["content"][0]["text"] == "ok"
            assert time.perf_counter() - started < 10
            # the oldest idle ones are closed (connections still in the listen backlog, not yet
            # accepted on a busy machine, count as open until the server gets to them)
            deadline, open_now = time.monotonic() + 20, len(flood)
            while open_now > limits.max_connections and time.monotonic() < deadline:
                open_now = sum(not closed_by_server(s, 0.01) for s in flood)
            assert open_now <= limits.max_connections, open_now
            assert not closed_by_server(flood[-1], 0.01)          # ... the newest kept
            # and no more were closed than the cap needed: the newest ones, all of them (less the
            # slot the request took while it ran). A connection told to close but not yet gone
            # once counted as open, and each connection accepted meanwhile closed more.
            kept = [i for i, s in enumerate(flood) if not closed_by_server(s, 0.01)]
            assert kept == list(range(len(flood) - len(kept), len(flood))), kept[:5]
            assert len(kept) >= limits.max_connections - 1, len(kept)
        finally:
            for s in flood:
                s.close()


@pytest.mark.parametrize("sent", [b"", b"POST /v1/messages HTTP/1.1\r\nHost: x\r\n", b"GET /heal"])
def test_a_connection_that_does_not_finish_its_headers_is_closed_at_the_timeout(tmp_path, sent):
    limits = ConnectionLimits(header_timeout_s=1.0, max_connections=100, max_requests=512)
    with gateway_server(tmp_path, limits) as server:
        sock = connect(server.url)
        try:
            if sent:
                sock.sendall(sent)
            for _ in range(3):        # trickling more of the same request does not buy time
                time.sleep(0.3)
                try:
                    sock.sendall(b"X-Pad: 1\r\n" if sent.startswith(b"POST") else b"")
                except OSError:
                    break
            assert closed_by_server(sock, 3.0)
        finally:
            sock.close()
        # a request that completes its headers in time is served on a kept-alive connection
        with httpx.Client(base_url=server.url, timeout=30) as client:
            assert client.get("/healthz").status_code == 200
            time.sleep(0.2)
            assert client.post("/v1/messages", json=ASK, headers={"x-api-key": "b"}).status_code == 200


def test_requests_past_the_cap_get_a_503_in_their_protocol_format(tmp_path):
    limits = ConnectionLimits(header_timeout_s=30, max_connections=100, max_requests=2)
    lines = [{"text": "slow", "delay": 3.0}] * 2 + [{"text": "ok"}] * 4
    with gateway_server(tmp_path, limits, lines) as server:
        results: list[int] = []

        def slow(key: str) -> None:
            results.append(httpx.post(f"{server.url}/v1/messages", json=ASK, headers={"x-api-key": key},
                                      timeout=60).status_code)

        threads = [threading.Thread(target=slow, args=(f"s{k}",)) for k in range(2)]
        for t in threads:
            t.start()
        time.sleep(1.0)
        over = httpx.post(f"{server.url}/v1/messages", json=ASK, headers={"x-api-key": "c"}, timeout=30)
        assert over.status_code == 503 and over.headers["retry-after"] == "1"
        assert over.json()["type"] == "error" and over.json()["error"]["type"] == "overloaded_error"
        assert "--max-requests" in over.json()["error"]["message"]
        chat = httpx.post(f"{server.url}/v1/chat/completions", headers={"authorization": "Bearer c"}, timeout=30,
                          json={"model": "m", "messages": [{"role": "user", "content": "hi"}]})
        assert chat.status_code == 503 and chat.json()["error"]["code"] == "overloaded"
        assert httpx.get(f"{server.url}/healthz", timeout=5).status_code == 200   # exempt
        for t in threads:
            t.join(60)
        assert results == [200, 200]
        after = httpx.post(f"{server.url}/v1/messages", json=ASK, headers={"x-api-key": "d"}, timeout=30)
        assert after.status_code == 200      # the slots came back


def test_serve_offers_the_limits_as_options():
    from typer.testing import CliRunner

    from agent_code.cli.serve import app

    out = CliRunner().invoke(app, ["--help"], terminal_width=200).output
    for option in ("--header-timeout", "--max-connections", "--max-requests"):
        assert option in out


def test_a_flood_that_trickles_partial_headers_is_evicted_the_same_way(tmp_path):
    """The next variant: half the flood sends the start of a request and never finishes its
    headers (no request is in progress, so they are idle too). The cap still closes only as many
    as it must, oldest first, whatever each one sent; the request gets through."""
    limits = ConnectionLimits(header_timeout_s=120, max_connections=100, max_requests=512)
    with gateway_server(tmp_path, limits) as server:
        flood = []
        for i in range(600):
            sock = connect(server.url)
            if i % 2:
                sock.sendall(b"POST /v1/messages HTTP/1.1\r\nHost: x\r\n")
            flood.append(sock)
        try:
            reply = httpx.post(f"{server.url}/v1/messages", json=ASK, headers={"x-api-key": "a"}, timeout=30)
            assert reply.status_code == 200
            deadline = time.monotonic() + 20
            kept = flood
            while time.monotonic() < deadline:
                kept = [i for i, s in enumerate(flood) if not closed_by_server(s, 0.01)]
                if len(kept) <= limits.max_connections:
                    break
            assert kept == list(range(len(flood) - len(kept), len(flood))), kept[:5]
            assert limits.max_connections - 1 <= len(kept) <= limits.max_connections, len(kept)
        finally:
            for s in flood:
                s.close()
