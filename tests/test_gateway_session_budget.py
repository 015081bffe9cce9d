"""One session cannot take every request slot of the gateway.

The attack: an agent opens thousands of connections through its sandbox's gateway relay, each a
request that stays open (a slow generation, a stream, a body trickled in). Every one of them
held one of the gateway's global request slots (``--max-requests``), so an honest sibling's
request got a 503 and its rollout was recorded as ``agent_crash``. Now one session (API key) has
at most ``max_session_requests`` open at once, counted from its headers: the requests past that
get 429 in their protocol's format, and other sessions keep their slots. Real server, real
sockets; the engine holds the greedy session's generations until released."""

from __future__ import annotations

import asyncio
import socket
import threading
import time

import httpx
import pytest

from agent_code.engines.instant import InstantEngine
from agent_code.gateway.app import create_app
from agent_code.gateway.connections import ConnectionLimits
from agent_code.gateway.pipeline import Gateway
from agent_code.gateway.server import BackgroundServer
from agent_code.gateway.sessions import SessionStore
from gateway_fixtures import qwen25_renderer

TOKEN = "adm-token"
MESSAGE = {"model": "m", "max_tokens": 16, "messages": [{"role": "user", "content": "hi"}]}
CHAT = {"model": "m", "max_tokens": 16, "messages": [{"role": "user", "content": "hi"}]}


class Holding(InstantEngine):
    """Answers at once, except the ``greedy`` session's requests, held until ``release`` is set."""

    def __init__(self, renderer) -> None:
        super().__init__(renderer)
        self.release = threading.Event()
        self.held = 0

    async def generate(self, prompt_ids, sampling, *, session_id=None):
        if session_id == "greedy":
            self.held += 1
            while not self.release.is_set():
                await asyncio.sleep(0.01)
        return await super().generate(prompt_ids, sampling, session_id=session_id)


def serve(*, explicit: bool = False, **app_kw):
    renderer = qwen25_renderer()
    engine = Holding(renderer)
    store = SessionStore(open_on_first_use=not explicit)
    gateway = Gateway(engine, renderer, model_name="m", store=store)
    if explicit:
        for sid in ("greedy", "honest"):
            store.open(sid)
    server = BackgroundServer(create_app(gateway, admin_token=TOKEN if explicit else None, **app_kw),
                              limits=ConnectionLimits(max_requests=32))
    return server, engine


async def flood(url: str, n: int, path: str, body: dict, key: str) -> list[httpx.Response]:
    async with httpx.AsyncClient(timeout=30, limits=httpx.Limits(max_connections=n + 5)) as client:
        return await asyncio.gather(*(client.post(url + path, json=body, headers={"x-api-key": key,
                                                                                "authorization": f"Bearer {key}"})
                                      for _ in range(n)))


def wait_for(check, timeout: float = 10.0) -> None:
    deadline = time.monotonic() + timeout
    while not check():
        assert time.monotonic() < deadline, "timed out"
        time.sleep(0.01)


@pytest.mark.parametrize("path, body, wire", [("/v1/messages", MESSAGE, "anthropic"),
                                              ("/v1/chat/completions", CHAT, "openai")])
def test_a_greedy_session_keeps_no_sibling_out(path, body, wire) -> None:
    server, engine = serve(max_session_requests=8)
    with server:
        results: list[list[httpx.Response]] = []
        greedy = threading.Thread(target=lambda: results.append(asyncio.run(flood(server.url, 40, path, body,
                                                                                  "greedy"))))
        greedy.start()
        wait_for(lambda: engine.held >= 8)
        time.sleep(0.3)                              # the other 32 have arrived by now (refused or waiting)
        honest = httpx.post(server.url + path, json=body, headers={"authorization": "Bearer honest"}, timeout=10)
        held_then = engine.held
        engine.release.set()
        greedy.join(30)
    assert honest.status_code == 200, honest.text       # before the cap: 503 (every global slot taken)
    assert held_then == 8                                # never more than its budget generating
    codes = sorted(r.status_code for r in results[0])
    assert codes == [200] * 8 + [429] * 32, codes
    refused = next(r for r in results[0] if r.status_code == 429)
    assert refused.headers["retry-after"] == "1"
    error = refused.json()
    if wire == "anthropic":
        assert error["type"] == "error" and error["error"]["type"] == "rate_limit_error"
    else:
        assert error["error"]["type"] == "rate_limit_error" and error["error"]["code"] == "rate_limit_exceeded"


def open_trickling(port: int, key: str, n: int) -> list[socket.socket]:
    """``n`` requests whose headers arrived and whose body never will (it stalls for 30 s)."""
    socks = []
    for _ in range(n):
        sock = socket.create_connection(("127.0.0.1", port), timeout=10)
        sock.sendall(f"POST /v1/messages HTTP/1.1\r\nhost: 127.0.0.1:{port}\r\ncontent-type: application/json\r\n"
                     f"x-api-key: {key}\r\ncontent-length: 100000\r\n\r\n{{\"model\"".encode())
        socks.append(sock)
    return socks


def test_trickled_bodies_and_random_keys_count_too() -> None:
    """Bodies that never finish hold slots from their headers on; on a gateway of explicit sessions
    keys that name no session share one budget, so random keys do not multiply an agent's slots;
    the admin's requests are not counted."""
    server, _ = serve(explicit=True, max_session_requests=4)
    with server:
        port = int(server.url.rsplit(":", 1)[1])
        socks = open_trickling(port, "greedy", 4) + [s for i in range(4) for s in open_trickling(port, f"r{i}", 1)]
        try:
            time.sleep(0.3)
            again = httpx.post(f"{server.url}/v1/messages", json=MESSAGE, headers={"x-api-key": "greedy"})
            random = httpx.post(f"{server.url}/v1/messages", json=MESSAGE, headers={"x-api-key": "r-new"})
            honest = httpx.post(f"{server.url}/v1/messages", json=MESSAGE, headers={"x-api-key": "honest"})
            admin = [httpx.get(f"{server.url}/v1/sessions/honest", headers={"x-agent-code-admin": TOKEN})
                     for _ in range(6)]
        finally:
            for sock in socks:
                sock.close()
    assert again.status_code == 429 and again.json()["error"]["type"] == "rate_limit_error"
    assert random.status_code == 429
    assert honest.status_code == 200, honest.text
    assert all(r.status_code == 200 for r in admin)


def test_the_budget_is_given_back_when_requests_end() -> None:
    server, engine = serve(max_session_requests=2)
    engine.release.set()
    with server:
        for _ in range(3):                           # one after another: never over the budget
            for r in asyncio.run(flood(server.url, 2, "/v1/messages", MESSAGE, "greedy")):
                assert r.status_code == 200, r.text
    with pytest.raises(ValueError):
        serve(max_session_requests=0)
