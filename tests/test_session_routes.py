"""The session management routes take any session id — ``/`` included — as one percent-encoded
path segment: a session whose API key holds a slash can be read, finished and deleted."""

from __future__ import annotations

import asyncio
from urllib.parse import quote

import httpx
import pytest

from agent_code.gateway.routes_sessions import split_session_path
from agent_code.rollout.client import GatewayClient
from gateway_fixtures import qwen3_renderer, scripted_gateway

ODD_IDS = ["team/a b", "x/turns", "x/finish", "ü/ñ?#%", "trailing/"]


@pytest.mark.parametrize("path, parts", [
    ("/v1/sessions/a", ("a", ())),
    ("/v1/sessions/a/turns", ("a", ("turns",))),
    ("/v1/sessions/x%2Fturns", ("x/turns", ())),
    ("/v1/sessions/team%2Fa%20b/finish", ("team/a b", ("finish",))),
    ("/v1/sessions/a/", ("a", ("",))),
    ("/v1/sessions/", None),
    ("/v1/models", None),
])
def test_split_session_path(path, parts):
    assert split_session_path(path) == parts


def test_odd_session_ids_through_the_rollout_client(tmp_path):
    lines = [{"text": f"reply {i}"} for i in range(len(ODD_IDS))]
    with scripted_gateway(tmp_path, lines, qwen3_renderer()) as (url, gateway):
        async def go() -> None:
            async with GatewayClient(url) as client:
                for sid in ODD_IDS:
                    await client.open_session(sid)
                    # the model route knows the session by its key; the management routes by the path
                    r = httpx.post(f"{url}/v1/chat/completions", headers={"authorization": f"Bearer {sid}"}
                                   if sid.isascii() else {}, timeout=30,
                                   json={"model": "m", "messages": [{"role": "user", "content": "hi"}],
                                         **({} if sid.isascii() else {"metadata": {"session_id": sid}})})
                    assert r.status_code == 200, r.text
                    assert len(await client.turns(sid)) == 1
                    [sample] = await client.finish(sid, reward=0.5)
                    assert sample.session_id == sid and sample.reward == 0.5
                    await client.delete(sid)
                    assert sid not in gateway.store.sessions

        asyncio.run(go())


def test_wrong_methods_and_shapes(tmp_path):
    with scripted_gateway(tmp_path, [], qwen3_renderer()) as (url, gateway):
        gateway.store.open("a/b")
        c = httpx.Client(base_url=url)
        seg = quote("a/b", safe="")
        assert c.get(f"/v1/sessions/{seg}").json()["session_id"] == "a/b"
        assert c.get("/v1/sessions/a/b").status_code == 404        # not encoded: session "a", then "b"
        for method, path, status in (("POST", f"/v1/sessions/{seg}", 405), ("GET", f"/v1/sessions/{seg}/finish", 405),
                                     ("DELETE", f"/v1/sessions/{seg}/turns", 405), ("GET", f"/v1/sessions/{seg}/x", 404),
                                     ("PUT", f"/v1/sessions/{seg}", 405), ("GET", "/v1/sessions/nobody", 404),
                                     ("GET", "/v1/sessions/%ff", 400)):
            r = c.request(method, path)
            assert r.status_code == status, (method, path, r.text)
            assert r.json()["type"] == "error" and r.json()["error"]["message"]
        assert c.get("/healthz").json()["status"] == "ok"
