"""``agent-code rollout --ray``: the same rollouts as Ray tasks on a local Ray instance, a gateway
per node, give the same rewards as the local runner."""

from __future__ import annotations

import asyncio
import json

import pytest

from agent_code.engines.scripted import ScriptedEngine
from agent_code.gateway.app import create_app
from agent_code.gateway.pipeline import Gateway
from agent_code.gateway.server import BackgroundServer
from agent_code.rollout.runner import RolloutConfig, run_all
from agent_code.tasks import load_tasks
from agent_code.trajectory.store import TurnLog, read_samples
from agent_code.trajectory.verify import verify_samples
from conftest import run_cli
from gateway_fixtures import qwen25_renderer, write_script
from rollout_fixtures import THERMO_FIX, call, say, tasks_file

pytest.importorskip("ray")


def test_ray_rollouts_give_the_same_rewards(tmp_path):
    renderer = qwen25_renderer()
    tasks_path = tasks_file(tmp_path, ["thermo-fahrenheit", "slugs-lowercase", "wordcount-whitespace"])
    script = write_script(tmp_path, [
        call("read_file", {"path": "thermo.py"}, "thermo-fahrenheit.0"),
        call("edit_file", THERMO_FIX, "thermo-fahrenheit.0"),
        say("Fixed.", "thermo-fahrenheit.0"),
        call("read_file", {"path": "slugs.py"}, "slugs-lowercase.0"),
        say("No change needed.", "slugs-lowercase.0"),
        call("write_file", {"path": "wordcount.py", "content": "def word_count(text):\n    return 0\n"},
             "wordcount-whitespace.0"),
        say("Rewrote it.", "wordcount-whitespace.0"),
    ])

    # the local runner, in process
    gateway = Gateway(ScriptedEngine(script, renderer), renderer, model_name="m")
    with BackgroundServer(create_app(gateway)) as server:
        local = asyncio.run(run_all(load_tasks(tasks_path), RolloutConfig(budget=120, model="m"), server.url))
    local_rewards = {r.task_id: r.reward for r in local}
    assert local_rewards == {"thermo-fahrenheit": 1.0, "slugs-lowercase": 0.0, "wordcount-whitespace": 0.0}

    # the same through Ray
    out = tmp_path / "ray-out"
    proc = run_cli("rollout", str(tasks_path), "--ray", "--engine", f"scripted:{script}", "--model", "m",
                   "--concurrency", "2", "--budget", "120", "--out", str(out), timeout=600)
    assert proc.returncode == 0, proc.stderr[-3000:]
    rows = [json.loads(line) for line in (out / "results.jsonl").read_text().splitlines()]
    assert {r["task_id"]: r["reward"] for r in rows} == local_rewards
    assert all(r["abort_reason"] is None and r["turns"] >= 2 for r in rows)
    samples = read_samples(out / "samples.parquet")
    assert len(samples) == 3 and verify_samples(samples, TurnLog(out / "trajectories").sessions()) == []
    assert "invariants: OK (3 samples" in proc.stderr


def test_node_gateways_guard_their_session_routes(tmp_path):
    """A node's gateway (the Ray actor's body, built here without Ray) answers a session's key on
    the model routes, but finishing, reading or opening sessions needs the run's admin token —
    which only the rollout tasks hold, so an agent on the node cannot grade its own session."""
    import httpx

    from agent_code.rollout.client import ADMIN_HEADER
    from agent_code.rollout.ray_runner import NodeGateway

    script = write_script(tmp_path, [say("hello", "s")])
    node = NodeGateway({"engine_spec": f"scripted:{script}", "model_name": "m"}, "run-token")
    try:
        with httpx.Client(base_url=node.url(), timeout=30) as c:
            # explicit sessions: an unknown key is refused, not opened; the admin opens "s"
            r = c.post("/v1/messages", headers={"x-api-key": "s"},
                       json={"model": "m", "max_tokens": 8, "messages": [{"role": "user", "content": "hi"}]})
            assert r.status_code == 401 and "s" not in node.gateway.store.sessions, r.text
            assert c.post("/v1/sessions", headers={ADMIN_HEADER: "run-token"}, json={"session_id": "s"}).status_code == 201
            r = c.post("/v1/messages", headers={"x-api-key": "s"},
                       json={"model": "m", "max_tokens": 8, "messages": [{"role": "user", "content": "hi"}]})
            assert r.status_code == 200, r.text
            assert c.post("/v1/sessions/s/finish", headers={"x-api-key": "s"}, json={"reward": 1}).status_code == 403
            assert c.post("/v1/sessions/s/finish", json={"reward": 1}).status_code == 401
            assert c.post("/v1/sessions", json={"session_id": "t"}).status_code == 401
            assert not node.gateway.store.get("s").closed
            r = c.post("/v1/sessions/s/finish", headers={ADMIN_HEADER: "run-token"}, json={"reward": 1})
            assert r.status_code == 200 and r.json()["samples"][0]["reward"] == 1
    finally:
        node.close()
