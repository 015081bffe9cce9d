"""DNS rebinding and cross-site requests against a developer's keyless loopback gateway.

A web page open in the developer's browser can reach ``http://127.0.0.1:PORT`` two ways:

* **DNS rebinding**: ``evil.example`` first resolves to the attacker's server, then to 127.0.0.1;
  the page's own-origin requests then land on the gateway with ``Host: evil.example:PORT`` and
  the browser lets the page read the answers (the default session's turns, the weight status);
* **cross-site requests** (CSRF): a form or a ``no-cors`` fetch posts ``text/plain``,
  ``application/x-www-form-urlencoded`` or ``multipart/form-data`` bodies (which need no CORS
  preflight) with an ``Origin`` of the attacker's page: turns injected into the default session,
  pause/resume with a forged weight version, sessions finished.

The gateway refuses (one ASGI middleware, ``gateway/request_guard.py``): a ``Host`` that is not a
loopback or IP literal, ``localhost``, or an allowed name (403); an ``Origin`` other than the
request's own (403); a body that is not ``application/json`` (415) — each in the route's own
error format. Real clients (the SDKs, the sandbox relay's ``127.0.0.1``/``localhost`` URLs,
``serve``) keep working."""

from __future__ import annotations

import socket

import anthropic
import httpx
import openai
import pytest

from agent_code.engines.instant import InstantEngine
from agent_code.gateway.app import create_app
from agent_code.gateway.pipeline import Gateway
from agent_code.gateway.request_guard import content_type_refusal, host_refusal, origin_refusal
from agent_code.gateway.server import BackgroundServer
from gateway_fixtures import qwen25_renderer

MESSAGE = {"model": "m", "max_tokens": 16, "messages": [{"role": "user", "content": "hi"}]}
CHAT = {"model": "m", "max_tokens": 16, "messages": [{"role": "user", "content": "hi"}]}
RESPONSES = {"model": "m", "input": "hi", "max_output_tokens": 16}

# (name, method, path, JSON body, the route's error format)
ROUTES = [
    ("messages", "POST", "/v1/messages", MESSAGE, "anthropic"),
    ("count_tokens", "POST", "/v1/messages/count_tokens", MESSAGE, "anthropic"),
    ("chat", "POST", "/v1/chat/completions", CHAT, "openai"),
    ("responses", "POST", "/v1/responses", RESPONSES, "openai"),
    ("session_read", "GET", "/v1/sessions/default", None, "anthropic"),
    ("session_turns", "GET", "/v1/sessions/default/turns", None, "anthropic"),
    ("session_finish", "POST", "/v1/sessions/default/finish", {"reward": 1.0}, "anthropic"),
    ("session_delete", "DELETE", "/v1/sessions/default", None, "anthropic"),
    ("pause", "POST", "/v1/admin/pause", {"mode": "reject"}, "anthropic"),
    ("resume", "POST", "/v1/admin/resume", {"weight_version": "forged"}, "anthropic"),
    ("weights", "GET", "/v1/admin/weights", None, "anthropic"),
    ("engines", "GET", "/v1/engines", None, "anthropic"),
]
ROUTE_IDS = [r[0] for r in ROUTES]
POSTS = [r for r in ROUTES if r[1] == "POST"]


@pytest.fixture(scope="module")
def served():
    """A developer's gateway: keyless, loopback, sessions opened on first use; one turn of the
    default session already recorded (what a rebinding page would read)."""
    renderer = qwen25_renderer()
    gateway = Gateway(InstantEngine(renderer, "the secret plan"), renderer, model_name="m")
    with BackgroundServer(create_app(gateway)) as server:
        assert httpx.post(f"{server.url}/v1/messages", json=MESSAGE).status_code == 200
        yield server.url, gateway


def port_of(url: str) -> int:
    return int(url.rsplit(":", 1)[1])


def send(url: str, method: str, path: str, body: object, headers: dict[str, str]) -> httpx.Response:
    return httpx.request(method, url + path, json=body, headers=headers, timeout=10)


def check_refused(r: httpx.Response, status: int, wire: str) -> str:
    """``r`` is a refusal with ``status`` in the ``wire`` protocol's error format, readable by no
    other origin; returns its message."""
    assert r.status_code == status, (r.status_code, r.text)
    assert not any(k.lower().startswith("access-control-") for k in r.headers), r.headers
    body = r.json()
    if wire == "anthropic":
        assert body["type"] == "error" and set(body["error"]) == {"type", "message"}, body
        return body["error"]["message"]
    assert set(body["error"]) == {"message", "type", "param", "code"}, body
    return body["error"]["message"]


def untouched(gateway: Gateway, turns_before: int) -> None:
    """Nothing the refused requests asked for happened."""
    session = gateway.store.sessions["default"]
    assert len(session.turns) == turns_before and not session.closed
    status = gateway.weights.status()
    assert not status["paused"] and status["weight_version"] == "0", status


# --- DNS rebinding: a Host that is not the gateway's ----------------------------------------

REBOUND_HOSTS = ["evil.example:{port}", "evil.example", "127.0.0.1.evil.example:{port}",
                 "localhost.evil.example:{port}", "localhost.:{port}", "localhost:{port}.evil.example",
                 "127.0.0.1:{port}@evil.example", "[::1].evil.example", "0x7f000001:{port}", "2130706433:{port}",
                 "127.1:{port}", "::1:{port}", "", "evil.example:notaport"]


@pytest.mark.parametrize("route", ROUTES, ids=ROUTE_IDS)
@pytest.mark.parametrize("host", REBOUND_HOSTS)
def test_a_rebound_host_reaches_no_route(served, route, host) -> None:
    url, gateway = served
    turns = len(gateway.store.sessions["default"].turns)
    _, method, path, body, wire = route
    r = send(url, method, path, body, {"host": host.format(port=port_of(url))})
    assert "allowed-host" in check_refused(r, 403, wire)
    untouched(gateway, turns)


def test_healthz_answers_only_its_own_host_too(served) -> None:
    url, _ = served
    assert httpx.get(f"{url}/healthz", headers={"host": "evil.example"}).status_code == 403
    assert httpx.get(f"{url}/healthz").json()["status"] == "ok"


@pytest.mark.parametrize("host", ["127.0.0.1:{port}", "localhost:{port}", "LOCALHOST:{port}", "localhost",
                                  "127.0.0.1", "[::1]:{port}", "[::1]", "127.0.0.2:{port}", "10.1.2.3:{port}",
                                  "0.0.0.0:{port}", "[::ffff:127.0.0.1]:{port}"])
def test_the_gateways_own_addresses_are_served(served, host) -> None:
    """Loopback and IP literals (a name is what rebinding needs), ``localhost`` in any case."""
    url, _ = served
    r = httpx.get(f"{url}/v1/admin/weights", headers={"host": host.format(port=port_of(url))})
    assert r.status_code == 200, r.text


def test_a_request_without_a_host_is_served(served) -> None:
    """HTTP/1.0 without ``Host`` (old monitors): a browser always sends one, so this is not the attack."""
    url, _ = served
    with socket.create_connection(("127.0.0.1", port_of(url)), timeout=10) as sock:
        sock.sendall(b"GET /healthz HTTP/1.0\r\n\r\n")
        data = b""
        while chunk := sock.recv(65536):
            data += chunk
    assert data.startswith(b"HTTP/1.1 200"), data[:200]


# --- cross-site requests: Origin and content types -------------------------------------------

@pytest.mark.parametrize("route", ROUTES, ids=ROUTE_IDS)
@pytest.mark.parametrize("origin", ["http://evil.example", "null", "http://127.0.0.1:1", "http://localhost",
                                    "https://evil.example:{port}", "http://127.0.0.1:{port}.evil.example",
                                    "http://127.0.0.1:{port}/path", "file://", "garbage"])
def test_another_origin_reaches_no_route(served, route, origin) -> None:
    url, gateway = served
    turns = len(gateway.store.sessions["default"].turns)
    _, method, path, body, wire = route
    r = send(url, method, path, body, {"origin": origin.format(port=port_of(url))})
    assert "origin" in check_refused(r, 403, wire).lower()
    untouched(gateway, turns)


@pytest.mark.parametrize("route", POSTS, ids=[r[0] for r in POSTS])
@pytest.mark.parametrize("content_type", ["text/plain", "text/plain;charset=UTF-8", "application/x-www-form-urlencoded",
                                          "multipart/form-data; boundary=x", "application/jsonx", "application/json5",
                                          "text/json", "application/x-json", "", None])
def test_a_body_that_is_not_json_reaches_no_route(served, route, content_type) -> None:
    """What a form or a ``no-cors`` fetch can send without a preflight — a JSON text in it — and
    a body with no content type at all."""
    import json

    url, gateway = served
    turns = len(gateway.store.sessions["default"].turns)
    _, method, path, body, wire = route
    headers = {} if content_type is None else {"content-type": content_type}
    r = httpx.request(method, url + path, content=json.dumps(body).encode(), headers=headers, timeout=10)
    assert "application/json" in check_refused(r, 415, wire)
    untouched(gateway, turns)


@pytest.mark.parametrize("origin", ["http://evil.example", "http://127.0.0.1:{port}"])
def test_a_preflight_gets_no_permission(served, origin) -> None:
    url, _ = served
    r = httpx.options(f"{url}/v1/admin/pause", headers={
        "origin": origin.format(port=port_of(url)), "access-control-request-method": "POST",
        "access-control-request-headers": "content-type"})
    assert r.status_code in (403, 405)
    assert not any(k.lower().startswith("access-control-") for k in r.headers), r.headers


def test_the_gateways_own_origin_and_json_with_a_charset_are_served(served) -> None:
    url, _ = served
    port = port_of(url)
    for origin, host in ((f"http://127.0.0.1:{port}", None), (f"http://localhost:{port}", f"localhost:{port}"),
                         (f"HTTP://LOCALHOST:{port}", f"localhost:{port}"), (f"http://[::1]:{port}", f"[::1]:{port}")):
        headers = {"origin": origin, "content-type": "application/json; charset=utf-8"}
        if host:
            headers["host"] = host
        r = httpx.post(f"{url}/v1/messages", content=b'{"model":"m","max_tokens":8,"messages":[{"role":"user",'
                       b'"content":"hi"}]}', headers={**headers, "x-api-key": "own-origin"})
        assert r.status_code == 200, (origin, r.text)
    # a body-less POST needs no content type (an empty pause is "wait")
    assert httpx.get(f"{url}/v1/admin/weights").json()["paused"] is False
    assert httpx.post(f"{url}/v1/admin/resume").status_code == 200


def test_allowed_hosts_are_served_and_others_still_refused() -> None:
    renderer = qwen25_renderer()
    gateway = Gateway(InstantEngine(renderer), renderer, model_name="m")
    with BackgroundServer(create_app(gateway, allowed_hosts=["gw.Example.org"])) as server:
        ok = httpx.get(f"{server.url}/v1/admin/weights", headers={"host": "GW.example.org:443"})
        own = httpx.post(f"{server.url}/v1/messages", json=MESSAGE,
                         headers={"host": "gw.example.org", "origin": "https://gw.example.org"})
        bad = httpx.get(f"{server.url}/v1/admin/weights", headers={"host": "gw.example.org.evil.example"})
    assert ok.status_code == 200 and own.status_code == 200, own.text
    assert bad.status_code == 403
    with pytest.raises(ValueError):
        create_app(gateway, allowed_hosts=["evil.example:80"])


# --- the real clients ---------------------------------------------------------------------------

@pytest.mark.parametrize("hostname", ["127.0.0.1", "localhost"])
def test_the_sdks_are_served_by_the_relays_names(served, hostname) -> None:
    """The official SDKs at the URLs a sandbox's relay gives its agent (same port, 127.0.0.1 or localhost)."""
    url, _ = served
    base = f"http://{hostname}:{port_of(url)}"
    reply = anthropic.Anthropic(base_url=base, api_key="sdk-a", max_retries=0).messages.create(**MESSAGE)
    assert reply.content[0].text == "the secret plan"
    with anthropic.Anthropic(base_url=base, api_key="sdk-a", max_retries=0).messages.stream(**MESSAGE) as stream:
        assert stream.get_final_message().content[0].text == "the secret plan"
    client = openai.OpenAI(base_url=base + "/v1", api_key="sdk-o", max_retries=0)
    chat = client.chat.completions.create(model="m", max_tokens=16, messages=[{"role": "user", "content": "hi"}])
    assert chat.choices[0].message.content == "the secret plan"
    assert client.responses.create(model="m", input="hi", max_output_tokens=16).output_text == "the secret plan"


# --- the decisions, as the pure functions they are ----------------------------------------------

def test_the_pure_decisions() -> None:
    allowed = frozenset({"gw.example"})
    assert host_refusal(None, allowed) is None and host_refusal("gw.example:1", allowed) is None
    assert host_refusal("gw.example.", allowed) is not None and host_refusal("localhost.", allowed) is not None
    assert origin_refusal("http://localhost:5", "localhost:5") is None
    assert origin_refusal("http://localhost:5", "localhost:6") is not None
    assert origin_refusal("http://localhost", "localhost:80") is None
    assert origin_refusal("https://localhost", "localhost:80") is not None
    assert content_type_refusal("POST", {"content-type": "Application/JSON ; charset=utf-8"}) is None
    assert content_type_refusal("POST", {"content-length": "0"}) is None
    assert content_type_refusal("POST", {"transfer-encoding": "chunked"}) is not None
    assert content_type_refusal("GET", {}) is None


def test_serve_serves_its_allowed_hosts_only() -> None:
    """``agent-code serve --allowed-host NAME`` as users run it (a real process)."""
    import subprocess
    import sys

    from conftest import cli_env
    from gateway_fixtures import serve_process

    with serve_process("--engine", "instant", "--allowed-host", "gw.example", "--max-session-requests", "2") as (url, _):
        ok = httpx.post(f"{url}/v1/messages", json=MESSAGE, headers={"host": "gw.example"})
        local = httpx.post(f"{url.replace('127.0.0.1', 'localhost')}/v1/messages", json=MESSAGE)
        evil = httpx.post(f"{url}/v1/messages", json=MESSAGE, headers={"host": "evil.example"})
        form = httpx.post(f"{url}/v1/admin/pause", data={"mode": "reject"})
    assert ok.status_code == 200 and local.status_code == 200, (ok.text, local.text)
    check_refused(evil, 403, "anthropic")
    check_refused(form, 415, "anthropic")
    bad = subprocess.run([sys.executable, "-m", "agent_code", "serve", "--allowed-host", "gw.example:80",
                          "--engine", "instant"], env=cli_env(), capture_output=True, text=True, timeout=60)
    assert bad.returncode == 2 and "--allowed-host" in bad.stderr


def test_an_e2b_tunnels_name_is_served_by_the_rollouts_gateway(monkeypatch) -> None:
    from agent_code.sandbox.e2b import GATEWAY_ENV, tunnel_hosts

    monkeypatch.setenv(GATEWAY_ENV, "https://Abc.trycloudflare.example/")
    assert tunnel_hosts() == ["abc.trycloudflare.example"]
    monkeypatch.setenv(GATEWAY_ENV, "http://203.0.113.5:8765")
    assert tunnel_hosts() == []
    monkeypatch.delenv(GATEWAY_ENV)
    assert tunnel_hosts() == []


@pytest.mark.parametrize("bound, names", [("127.0.0.1", []), ("0.0.0.0", []), ("::", []), ("[::1]", []),
                                          ("localhost", []), ("gpu-node-3", ["gpu-node-3"])])
def test_serve_serves_the_name_it_binds(bound, names) -> None:
    from agent_code.gateway.request_guard import served_names

    assert served_names(bound, ["proxy.example"]) == [*names, "proxy.example"]


def test_an_agent_in_the_sandbox_reaches_the_gateway_through_its_relay(served) -> None:
    """The local sandbox's relay: the agent's URL is ``127.0.0.1:PORT`` (or ``localhost:PORT``) in its
    own network namespace; the gateway serves it, and still refuses a form post from in there."""
    import asyncio

    from agent_code.sandbox.local import LocalSandbox, isolation_available

    if not isolation_available():
        pytest.skip("sandbox isolation needs root with unshare")
    url, _ = served
    post = ["curl", "-s", "-o", "/dev/null", "-w", "%{http_code}", "--max-time", "10", "-H", "x-api-key: relay"]

    async def go() -> list[str]:
        async with LocalSandbox() as box:
            inside = await box.expose_gateway(url)
            codes = []
            for base in (inside, inside.replace("127.0.0.1", "localhost")):
                for extra in (["-H", "content-type: application/json", "--data-binary", '{"model":"m","max_tokens":8,'
                               '"messages":[{"role":"user","content":"hi"}]}'], ["-d", "mode=reject"]):
                    result = await box.exec([*post, *extra, base + "/v1/messages"], user="agent", timeout=60)
                    codes.append(result.stdout.strip())
            return codes

    assert asyncio.run(go()) == ["200", "415", "200", "415"]


@pytest.mark.parametrize("content_type", ["text/plain; application/json", "text/plain;charset=application/json",
                                          "multipart/form-data; boundary=application/json",
                                          "application/x-www-form-urlencoded;application/json",
                                          "application/json\ttext/plain"])
def test_a_simple_request_type_smuggling_json_in_its_parameters_is_refused(content_type) -> None:
    """The next spelling a page would try: a CORS-safelisted type (sent without a preflight) whose
    parameters say application/json. The type's essence decides, so each is refused."""
    assert content_type_refusal("POST", {"content-type": content_type}) is not None


@pytest.mark.parametrize("host, origin", [("127.0.0.1:5@evil.example", None), ("evil.example#@127.0.0.1", None),
                                          ("127.0.0.1:5", "http://x@127.0.0.1:5"),
                                          ("127.0.0.1:5", "http://localhost:3000"),   # another local dev server's page
                                          (None, "http://127.0.0.1:5")])              # no Host: no origin is its own
def test_userinfo_fragments_and_other_local_origins_are_refused(host, origin) -> None:
    refused = host_refusal(host, frozenset()) if origin is None else origin_refusal(origin, host)
    assert refused is not None, (host, origin)
