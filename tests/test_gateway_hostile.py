"""Acceptance: hundreds of malformed or hostile requests, every answer a 4xx in
Anthropic's error format, and the server still healthy afterwards."""

from __future__ import annotations

import json
import socket

import httpx

from gateway_fixtures import qwen3_renderer, scripted_gateway
from malformed import WRONG, generic_bodies

GOOD = {"model": "m", "max_tokens": 16, "messages": [{"role": "user", "content": "hi"}]}
LIMIT = 64 * 1024


def raw_post(url: str, path: str, body: bytes, headers: dict[str, str]) -> tuple[int, bytes]:
    """POST over a plain socket, so headers can lie (e.g. a content-length httpx would refuse)."""
    host, port = url.removeprefix("http://").split(":")
    head = {"host": host, "content-length": str(len(body)), "connection": "close", **headers}
    request = f"POST {path} HTTP/1.1\r\n" + "".join(f"{k}: {v}\r\n" for k, v in head.items()) + "\r\n"
    with socket.create_connection((host, int(port)), timeout=30) as s:
        chunks = []
        try:  # the server may answer (413) and close before it has read an oversized body
            s.sendall(request.encode() + body)
            while data := s.recv(65536):
                chunks.append(data)
        except (BrokenPipeError, ConnectionResetError):
            while not chunks and (data := s.recv(65536)):
                chunks.append(data)
    response = b"".join(chunks)
    status = int(response.split(b" ", 2)[1])
    return status, response.split(b"\r\n\r\n", 1)[1]


def _variants() -> list[tuple[str, bytes, dict[str, str]]]:
    bodies = generic_bodies(GOOD)
    add = bodies.add
    add("deep-in-content", {**GOOD, "messages": [{"role": "user", "content": json.loads("[" * 200 + "]" * 200)}]})
    # oversized
    add("huge-string", {**GOOD, "messages": [{"role": "user", "content": "x" * (LIMIT + 10)}]})
    # each required top-level field missing, or any field of every wrong type (a missing model is
    # served: a gateway serves one model; test_gateway_anthropic's seed example)
    for field in ("max_tokens", "messages"):
        body = dict(GOOD)
        body.pop(field)
        add(f"missing-{field}", body)
    expect = {"model": str, "max_tokens": int, "messages": list, "system": (str, list), "tools": list,
              "stream": bool, "temperature": (int, float), "top_p": (int, float), "top_k": int,
              "stop_sequences": list}
    for field, ok in expect.items():
        for j, value in enumerate(WRONG):
            if isinstance(value, ok) and not (isinstance(value, bool) and ok in (int, (int, float))):
                continue
            if value is None and field not in ("model", "max_tokens", "messages"):
                continue  # null for an optional field means "not given"
            add(f"type-{field}-{j}", {**GOOD, field: value})
    add("max-tokens-zero", {**GOOD, "max_tokens": 0})
    add("max-tokens-huge-float", {**GOOD, "max_tokens": 1e308})
    add("max-tokens-string-number", {**GOOD, "max_tokens": "16"})
    add("model-empty-and-list", {**GOOD, "model": ["m"]})
    add("top-k-float", {**GOOD, "top_k": 2.5})
    add("max-tokens-negative", {**GOOD, "max_tokens": -1})
    add("empty-messages", {**GOOD, "messages": []})
    # messages: wrong shapes
    bad_messages = [
        [None], [1], ["hi"], [[]], [{}], [{"role": "user"}], [{"content": "hi"}],
        [{"role": "robot", "content": "hi"}], [{"role": 1, "content": "hi"}], [{"role": None, "content": "x"}],
        [{"role": "user", "content": 5}], [{"role": "user", "content": None}], [{"role": "user", "content": {}}],
        [{"role": "user", "content": [None]}], [{"role": "user", "content": [1]}], [{"role": "user", "content": ["x"]}],
        [{"role": "user", "content": [{}]}], [{"role": "user", "content": [{"type": 5}]}],
        [{"role": "user", "content": [{"type": "text"}]}], [{"role": "user", "content": [{"type": "text", "text": 1}]}],
        [{"role": "user", "content": [{"type": "tool_result"}]}],
        [{"role": "user", "content": [{"type": "tool_result", "tool_use_id": 7}]}],
        [{"role": "assistant", "content": [{"type": "tool_use"}]}],
        [{"role": "assistant", "content": [{"type": "tool_use", "id": "a", "name": "x", "input": "str"}]}],
        [{"role": "assistant", "content": [{"type": "tool_use", "id": "a", "name": 3, "input": {}}]}],
        [{"role": "assistant", "content": [{"type": "tool_use", "id": None, "name": "x", "input": {}}]}],
    ]
    for role in ("user", "assistant"):
        for j, content in enumerate([5, None, {}, True, [None], [7], ["x"], [{}], [{"type": None}],
                                     [{"type": "text", "text": None}], [{"type": "text", "text": ["a"]}],
                                     [{"type": "thinking", "thinking": 5}]]):
            bad_messages.append([{"role": "user", "content": "hi"}, {"role": role, "content": content}]
                                if role == "assistant" else [{"role": role, "content": content}])
    for j, messages in enumerate(bad_messages):
        add(f"messages-{j}", {**GOOD, "messages": messages})
    # system and tools of the wrong shape
    for j, system in enumerate([[1], [None], [{"type": "text"}], [{"type": "text", "text": 1}], [{}], ["x"]]):
        add(f"system-{j}", {**GOOD, "system": system})
    bad_tools = [[None], [1], ["t"], [{}], [{"name": 1}], [{"name": "t", "input_schema": "x"}],
                 [{"name": "t", "input_schema": []}], [{"name": None, "input_schema": {}}]]
    for j, tools in enumerate(bad_tools):
        add(f"tools-{j}", {**GOOD, "tools": tools})
    # assistant turns whose tool_use blocks are malformed in every field
    for j, block in enumerate([{"type": "tool_use", "id": i, "name": n, "input": v}
                               for i in ("a", 1) for n in ("x", None) for v in ({}, "s", [1])
                               if (i, n, v) != ("a", "x", {})]):
        add(f"tool-use-{j}", {**GOOD, "messages": [{"role": "user", "content": "hi"},
                                                    {"role": "assistant", "content": [block]}]})
    # hostile headers around an invalid body
    for j, headers in enumerate([{"content-type": "text/plain"}, {"content-type": "application/xml"},
                                 {"authorization": "Bearer"}, {"authorization": "Basic Zm9vOmJhcg=="},
                                 {"x-api-key": "x" * 4000}, {"content-encoding": "gzip"},
                                 {"anthropic-version": "1999-01-01"}]):
        add(f"headers-{j}", b"{not json", headers)
    return bodies.cases


def test_hostile_requests_get_4xx_in_anthropic_format(tmp_path):
    cases = _variants()
    assert len(cases) >= 200, len(cases)
    with scripted_gateway(tmp_path, [{"text": "fine"}], qwen3_renderer(), max_body_bytes=LIMIT) as (url, gateway):
        statuses: dict[int, int] = {}
        with httpx.Client(base_url=url, timeout=30) as client:
            for name, raw, headers in cases:
                status, payload = raw_post(url, "/v1/messages", raw, {"content-type": "application/json", **headers})
                statuses[status] = statuses.get(status, 0) + 1
                assert 400 <= status < 500, (name, status, payload[:200])
                body = json.loads(payload)
                assert body["type"] == "error", name
                assert isinstance(body["error"]["type"], str) and body["error"]["message"], name
                # count_tokens sees the same bodies (some are fine there: max_tokens is not needed)
                status, _ = raw_post(url, "/v1/messages/count_tokens", raw, headers)
                assert 400 <= status < 500 or status == 200, (name, status)
            # a truncated upload: the client promises more than it sends, then hangs up
            host, port = url.removeprefix("http://").split(":")
            with socket.create_connection((host, int(port))) as s:
                s.sendall(f"POST /v1/messages HTTP/1.1\r\nhost: {host}:{port}\r\ncontent-type: application/json\r\n"
                          "content-length: 1000\r\n\r\n{\"model\"".encode())
            assert client.get("/healthz").json()["status"] == "ok"
            # and the server still answers a good request
            r = client.post("/v1/messages", json=GOOD)
            assert r.status_code == 200 and r.json()["content"][0]["text"] == "fine"
            # only the good request made a turn (recorded before its reply was written)
            assert len(gateway.store.get("default").turns) == 1
        assert set(statuses) <= {400, 413, 415}     # 415: a body that says it is not JSON (text/plain, XML)
