"""Identical retries (gateway/replay.py): a request the gateway already answered gets the recorded
reply again — the SDKs' own retry after a dropped connection records ONE turn, not two — unless
the client asks for a fresh sample; the replay goes through the session's auth and caps. Real
gateway on 127.0.0.1, official SDKs, a real TCP proxy that drops the client's connection."""

from __future__ import annotations

import contextlib
import json
import socket
import threading
from typing import Any, Iterator

import anthropic
import httpx
import openai
import pytest

from agent_code.gateway.replay import FRESH_HEADER, REPLAYED_HEADER
from agent_code.gateway.sessions import SessionStore
from gateway_fixtures import qwen25_renderer, scripted_gateway

TOOLS = [{"name": "echo", "description": "Echo text.",
          "input_schema": {"type": "object", "properties": {"text": {"type": "string"}}, "required": ["text"]}}]


def hermes(name: str, arguments: dict) -> str:
    return f"<tool_call>\n{json.dumps({'name': name, 'arguments': arguments})}\n</tool_call>"


SCRIPT = [{"text": "First reply.\n" + hermes("echo", {"text": "one"})},
          {"text": "Second reply.\n" + hermes("echo", {"text": "two"})},
          {"text": "Third reply."}]


def _response_complete(data: bytes) -> bool:
    """Whether ``data`` holds one whole HTTP/1.1 response (a content length, or chunked)."""
    head, sep, body = data.partition(b"\r\n\r\n")
    if not sep:
        return False
    headers = head.lower()
    if b"transfer-encoding: chunked" in headers:
        return body.endswith(b"0\r\n\r\n")
    for line in headers.split(b"\r\n"):
        if line.startswith(b"content-length:"):
            return len(body) >= int(line.split(b":", 1)[1])
    return False


class DroppingProxy:
    """A loopback TCP proxy to ``upstream``: the first ``drops`` connections have their request
    forwarded and the gateway's whole response read, then the client's connection is closed
    without a byte of it (a middlebox that died, a connection reset); later ones are piped."""

    def __init__(self, upstream: str, drops: int = 1) -> None:
        host, port = upstream.removeprefix("http://").split(":")
        self.upstream = (host, int(port))
        self.drops = drops
        self.connections = 0
        self.dropped: list[bytes] = []     # the responses the client never got
        self.listener = socket.create_server(("127.0.0.1", 0))
        self.url = f"http://127.0.0.1:{self.listener.getsockname()[1]}"
        threading.Thread(target=self._accept, daemon=True).start()

    def _accept(self) -> None:
        while True:
            try:
                client, _ = self.listener.accept()
            except OSError:
                return
            self.connections += 1
            drop = self.connections <= self.drops
            threading.Thread(target=self._serve, args=(client, drop), daemon=True).start()

    def _serve(self, client: socket.socket, drop: bool) -> None:
        upstream = socket.create_connection(self.upstream)
        if drop:
            with client, upstream:
                request = _read_until(client, _request_complete)
                if not _request_complete(request):
                    return
                upstream.sendall(request)
                self.dropped.append(_read_until(upstream, _response_complete))
                client.shutdown(socket.SHUT_RDWR)
            return
        threading.Thread(target=_pipe, args=(upstream, client), daemon=True).start()
        _pipe(client, upstream)

    def close(self) -> None:
        self.listener.close()


def _read_until(sock: socket.socket, complete) -> bytes:
    """What ``sock`` sends until ``complete(data)`` holds or it closes."""
    data = b""
    while not complete(data):
        chunk = sock.recv(65536)
        if not chunk:
            break
        data += chunk
    return data


def _request_complete(data: bytes) -> bool:
    head, sep, body = data.partition(b"\r\n\r\n")
    if not sep:
        return False
    for line in head.lower().split(b"\r\n"):
        if line.startswith(b"content-length:"):
            return len(body) >= int(line.split(b":", 1)[1])
    return True


def _pipe(src: socket.socket, dst: socket.socket) -> None:
    with contextlib.suppress(OSError):
        while chunk := src.recv(65536):
            dst.sendall(chunk)
    with contextlib.suppress(OSError):
        dst.shutdown(socket.SHUT_WR)


@contextlib.contextmanager
def proxied(url: str, drops: int = 1) -> Iterator[DroppingProxy]:
    proxy = DroppingProxy(url, drops)
    try:
        yield proxy
    finally:
        proxy.close()


def ask(client: anthropic.Anthropic, stream: bool, **extra: Any) -> anthropic.types.Message:
    kwargs: dict[str, Any] = dict(model="served", max_tokens=256, tools=TOOLS,
                                  messages=[{"role": "user", "content": "Echo one."}], **extra)
    if stream:
        with client.messages.stream(**kwargs) as s:
            return s.get_final_message()
    return client.messages.create(**kwargs)


@pytest.mark.parametrize("stream", [False, True], ids=["json", "sse"])
def test_the_sdk_retry_of_an_answered_request_records_one_turn(tmp_path, stream):
    renderer = qwen25_renderer()
    with scripted_gateway(tmp_path, SCRIPT, renderer) as (url, gateway), proxied(url) as proxy:
        client = anthropic.Anthropic(base_url=proxy.url, api_key="retried", max_retries=2)
        reply = ask(client, stream)
        turns = gateway.store.get("retried").turns
        assert proxy.connections == 2 and len(proxy.dropped) == 1    # the SDK did retry, once
        assert len(turns) == 1                                        # ONE turn, not a retry branch
        assert [b.type for b in reply.content] == ["text", "tool_use"]
        assert reply.content[0].text == "First reply." and reply.content[1].input == {"text": "one"}
        # the reply the client got is the one the gateway answered first: the same ids
        first = proxy.dropped[0].decode()
        assert reply.id in first and reply.content[1].id in first
        # and the session goes on from it as one conversation
        follow = client.messages.create(model="served", max_tokens=256, tools=TOOLS, messages=[
            {"role": "user", "content": "Echo one."},
            {"role": "assistant", "content": [b.model_dump(exclude_none=True) for b in reply.content]},
            {"role": "user", "content": [{"type": "tool_result", "tool_use_id": reply.content[1].id,
                                          "content": "one"}]}])
        assert follow.content[0].text == "Second reply."
        assert [t.parent for t in turns] == [None, 0]


def post(url: str, path: str, body: dict[str, Any], key: str, **headers: str) -> httpx.Response:
    return httpx.post(f"{url}{path}", json=body, headers={"authorization": f"Bearer {key}", **headers}, timeout=30)


MESSAGES = {"model": "served", "max_tokens": 256, "tools": TOOLS, "messages": [{"role": "user", "content": "Echo."}]}
CHAT = {"model": "served", "max_tokens": 256, "messages": [{"role": "user", "content": "Echo."}]}
RESPONSES = {"model": "served", "max_output_tokens": 256, "input": "Echo."}
ROUTES = {"anthropic": ("/v1/messages", MESSAGES), "openai-chat": ("/v1/chat/completions", CHAT),
          "openai-responses": ("/v1/responses", RESPONSES)}


@pytest.mark.parametrize("stream", [False, True], ids=["json", "sse"])
@pytest.mark.parametrize("protocol", sorted(ROUTES))
def test_a_replay_is_byte_identical_and_records_nothing(tmp_path, protocol, stream):
    path, body = ROUTES[protocol]
    body = {**body, "stream": stream}
    with scripted_gateway(tmp_path, SCRIPT, qwen25_renderer()) as (url, gateway):
        first, again = post(url, path, body, "same"), post(url, path, body, "same")
        assert first.status_code == again.status_code == 200
        assert again.content == first.content and again.headers.get(REPLAYED_HEADER) == "1"
        assert REPLAYED_HEADER not in first.headers
        assert len(gateway.store.get("same").turns) == 1 and len(first.content) > 200


def test_a_fresh_sample_is_asked_by_header_or_by_another_seed(tmp_path):
    with scripted_gateway(tmp_path, SCRIPT, qwen25_renderer()) as (url, gateway):
        first = post(url, "/v1/chat/completions", CHAT, "fresh")
        fresh = post(url, "/v1/chat/completions", CHAT, "fresh", **{FRESH_HEADER: "1"})
        assert "Second reply." in fresh.text and fresh.content != first.content
        assert REPLAYED_HEADER not in fresh.headers
        # the fresh reply is now the one remembered
        assert post(url, "/v1/chat/completions", CHAT, "fresh").content == fresh.content
        seeded = post(url, "/v1/chat/completions", {**CHAT, "seed": 7}, "fresh")
        assert "Third reply." in seeded.text and REPLAYED_HEADER not in seeded.headers
        turns = gateway.store.get("fresh").turns
        assert len(turns) == 3 and turns[1].branch_hint == "retry"


def test_only_the_last_answer_is_remembered(tmp_path):
    other = {**MESSAGES, "messages": [{"role": "user", "content": "Something else."}]}
    with scripted_gateway(tmp_path, SCRIPT, qwen25_renderer()) as (url, gateway):
        post(url, "/v1/messages", MESSAGES, "moved")
        post(url, "/v1/messages", other, "moved")
        again = post(url, "/v1/messages", MESSAGES, "moved")
        assert "Third reply." in again.text and REPLAYED_HEADER not in again.headers
        assert len(gateway.store.get("moved").turns) == 3


def test_a_replay_is_only_for_the_session_that_was_answered(tmp_path):
    with scripted_gateway(tmp_path, SCRIPT, qwen25_renderer()) as (url, gateway):
        mine = post(url, "/v1/messages", MESSAGES, "mine")
        theirs = post(url, "/v1/messages", MESSAGES, "theirs")
        assert "Second reply." in theirs.text and theirs.content != mine.content
        assert REPLAYED_HEADER not in theirs.headers
        # another path with the same body is another request too
        chat = post(url, "/v1/chat/completions", MESSAGES, "mine")
        assert REPLAYED_HEADER not in chat.headers


def test_a_replay_does_not_pass_the_session_caps(tmp_path):
    store = SessionStore(default_max_turns=1)
    with scripted_gateway(tmp_path, SCRIPT, qwen25_renderer(), store=store) as (url, gateway):
        assert post(url, "/v1/messages", MESSAGES, "capped").status_code == 200
        assert post(url, "/v1/messages", MESSAGES, "capped").status_code == 429   # at its turn cap
        assert post(url, "/v1/messages", MESSAGES, "done").status_code == 200
        assert httpx.post(f"{url}/v1/sessions/done/finish", json={"reward": 0.0}).status_code == 200
        ended = post(url, "/v1/messages", MESSAGES, "done")
        assert ended.status_code in (409, 503) and REPLAYED_HEADER not in ended.headers


def test_an_explicit_gateway_replays_only_to_the_sessions_own_key(tmp_path):
    store = SessionStore(open_on_first_use=False)
    admin = {"authorization": "Bearer admin-secret"}
    with scripted_gateway(tmp_path, SCRIPT, qwen25_renderer(), store=store, admin_token="admin-secret") as (url, _):
        assert httpx.post(f"{url}/v1/sessions", json={"session_id": "owned"}, headers=admin).status_code in (200, 201)
        assert post(url, "/v1/messages", MESSAGES, "owned").status_code == 200
        stranger = post(url, "/v1/messages", MESSAGES, "not-a-session")
        assert stranger.status_code == 401 and REPLAYED_HEADER not in stranger.headers


def test_the_openai_sdk_retry_of_an_answered_request_records_one_turn(tmp_path):
    with scripted_gateway(tmp_path, SCRIPT, qwen25_renderer()) as (url, gateway), proxied(url) as proxy:
        client = openai.OpenAI(base_url=f"{proxy.url}/v1", api_key="chat-retried", max_retries=2)
        completion = client.chat.completions.create(model="served", messages=[{"role": "user", "content": "Echo."}])
        assert proxy.connections == 2 and completion.choices[0].message.content.startswith("First reply.")
        assert completion.id in proxy.dropped[0].decode()
        assert len(gateway.store.get("chat-retried").turns) == 1
