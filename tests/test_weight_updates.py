"""Weight updates: pause admission, resume with a new weight version, and samples that say which
weights sampled which tokens. A real gateway on loopback, the official Anthropic SDK as the
agent, the admin routes over HTTP."""

from __future__ import annotations

import threading
import time

import anthropic
import httpx
import pytest

from agent_code.trajectory.store import read_turn_log
from gateway_fixtures import qwen25_renderer, scripted_gateway

TOKEN = "admin-secret"
ADMIN = {"x-agent-code-admin": TOKEN}
TOOLS = [{"name": "read_file", "description": "Read a file.",
          "input_schema": {"type": "object", "properties": {"path": {"type": "string"}}, "required": ["path"]}}]
SCRIPT = [{"text": '<tool_call>\n{"name": "read_file", "arguments": {"path": "a.py"}}\n</tool_call>'},
          {"text": "The file defines x."}]


def client(url: str, key: str) -> anthropic.Anthropic:
    return anthropic.Anthropic(base_url=url, api_key=key, max_retries=0)


def first_turn(agent: anthropic.Anthropic) -> list[dict]:
    messages: list[dict] = [{"role": "user", "content": "What is in a.py?"}]
    reply = agent.messages.create(model="m", max_tokens=64, messages=messages, tools=TOOLS)
    call = next(b for b in reply.content if b.type == "tool_use")
    messages += [{"role": "assistant", "content": [b.model_dump(exclude_none=True) for b in reply.content]},
                 {"role": "user", "content": [{"type": "tool_result", "tool_use_id": call.id, "content": "x = 1"}]}]
    return messages


def weights(url: str) -> dict:
    r = httpx.get(f"{url}/v1/admin/weights", headers=ADMIN)
    assert r.status_code == 200, r.text
    return r.json()


def test_a_session_across_a_weight_update_is_one_sample_with_both_versions(tmp_path):
    with scripted_gateway(tmp_path, SCRIPT, qwen25_renderer(), admin_token=TOKEN) as (url, gateway):
        gateway.weights.version = "v1"
        agent = client(url, "sess")
        messages = first_turn(agent)
        r = httpx.post(f"{url}/v1/admin/pause", headers=ADMIN, json={"mode": "wait"})
        assert r.status_code == 200 and r.json()["paused"] and r.json()["drained"], r.text

        done: dict = {}
        second = threading.Thread(target=lambda: done.setdefault("reply", agent.messages.create(
            model="m", max_tokens=64, messages=messages, tools=TOOLS)))
        second.start()
        deadline = time.monotonic() + 10
        while weights(url)["waiting"] != 1:    # the new turn is held back, not generated
            assert time.monotonic() < deadline, "the paused turn never reached the gate"
            time.sleep(0.02)
        time.sleep(0.2)
        assert second.is_alive() and len(gateway.store.get("sess").turns) == 1

        r = httpx.post(f"{url}/v1/admin/resume", headers=ADMIN, json={"weight_version": "v2"})
        assert r.status_code == 200 and r.json()["weight_version"] == "v2" and not r.json()["paused"], r.text
        second.join(10)
        assert done["reply"].content[0].text == "The file defines x."
        turns = list(gateway.store.get("sess").turns)
        assert [t.weight_version for t in turns] == ["v1", "v2"]
        [sample] = httpx.post(f"{url}/v1/sessions/sess/finish", headers=ADMIN, json={"reward": 1.0}).json()["samples"]

    spans = sample["metadata"]["weight_versions"]
    assert [(s["turn"], s["version"]) for s in spans] == [(0, "v1"), (1, "v2")]
    # each span is exactly a trained stretch of the response, and holds that turn's sampled ids
    mask, tokens = sample["loss_mask"], sample["tokens"]
    prompt = len(tokens) - sample["response_length"]
    assert sum(s["end"] - s["start"] for s in spans) == sum(mask)
    for s in spans:
        assert all(mask[s["start"]:s["end"]])
    for s, turn in zip(spans, turns):
        assert tokens[prompt + s["start"]:prompt + s["end"]] == list(turn.output_ids)


def test_reject_mode_answers_503_in_each_protocols_format(tmp_path):
    with scripted_gateway(tmp_path, SCRIPT, qwen25_renderer(), admin_token=TOKEN) as (url, gateway):
        assert httpx.post(f"{url}/v1/admin/pause", headers=ADMIN, json={"mode": "reject"}).status_code == 200
        with pytest.raises(anthropic.InternalServerError) as caught:
            client(url, "a").messages.create(model="m", max_tokens=8, messages=[{"role": "user", "content": "hi"}])
        assert caught.value.status_code == 503
        assert caught.value.body["error"]["type"] == "overloaded_error"
        assert "paused for a weight update" in caught.value.body["error"]["message"]
        r = httpx.post(f"{url}/v1/chat/completions", headers={"authorization": "Bearer b"},
                       json={"model": "m", "messages": [{"role": "user", "content": "hi"}]})
        assert r.status_code == 503 and "paused for a weight update" in r.json()["error"]["message"], r.text
        assert gateway.store.get("a").turns == [] and weights(url)["generating"] == 0
        # resumed without a version: the old one stays, and turns run again
        assert httpx.post(f"{url}/v1/admin/resume", headers=ADMIN).json()["weight_version"] == "0"
        reply = client(url, "a").messages.create(model="m", max_tokens=64,
                                                 messages=[{"role": "user", "content": "hi"}], tools=TOOLS)
        assert reply.stop_reason == "tool_use" and gateway.store.get("a").turns[0].weight_version == "0"


def test_the_weight_routes_need_the_admin_token(tmp_path):
    with scripted_gateway(tmp_path, SCRIPT, qwen25_renderer(), admin_token=TOKEN) as (url, gateway):
        for method, path in (("POST", "pause"), ("POST", "resume"), ("GET", "weights")):
            anon = httpx.request(method, f"{url}/v1/admin/{path}")
            agent = httpx.request(method, f"{url}/v1/admin/{path}", headers={"x-api-key": "sess"})
            wrong = httpx.request(method, f"{url}/v1/admin/{path}", headers={"x-agent-code-admin": "guess"})
            assert (anon.status_code, agent.status_code, wrong.status_code) == (401, 403, 403), path
            assert agent.json()["error"]["type"] == "permission_error"
        assert gateway.weights.paused is None and gateway.weights.version == "0"


@pytest.mark.parametrize("path, body, says", [
    ("pause", {"mode": "later"}, "'mode' must be"),
    ("pause", {"mode": "wait", "drain": True}, "unknown field(s): drain"),
    ("pause", ["wait"], "expected a JSON object"),
    ("resume", {"weight_version": ""}, "'weight_version' must be"),
    ("resume", {"weight_version": 7}, "'weight_version' must be"),
    ("resume", {"weight_version": "x" * 300}, "'weight_version' must be"),
])
def test_bad_weight_requests_are_refused_and_change_nothing(tmp_path, path, body, says):
    with scripted_gateway(tmp_path, SCRIPT, qwen25_renderer(), admin_token=TOKEN) as (url, gateway):
        gateway.weights.pause("wait") if path == "resume" else None
        r = httpx.post(f"{url}/v1/admin/{path}", headers=ADMIN, json=body)
        assert r.status_code == 400 and says in r.json()["error"]["message"], r.text
        assert gateway.weights.version == "0"
        assert (gateway.weights.paused == "wait") == (path == "resume")


def test_the_version_is_in_the_turn_log_and_an_engines_own_version_wins(tmp_path):
    from agent_code.engines.scripted import ScriptedEngine
    from agent_code.gateway.app import create_app
    from agent_code.gateway.pipeline import Gateway
    from agent_code.gateway.server import BackgroundServer
    from agent_code.trajectory.store import TurnLog
    from gateway_fixtures import write_script

    class Reporting(ScriptedEngine):   # an engine that says which weights it ran (SGLang can)
        async def generate(self, prompt_ids, sampling, **kw):
            out = await super().generate(prompt_ids, sampling, **kw)
            out.meta["weight_version"] = "engine-7"
            return out

    renderer = qwen25_renderer()
    for engine_cls, expected in ((ScriptedEngine, "v3"), (Reporting, "engine-7")):
        log_dir = tmp_path / engine_cls.__name__
        gateway = Gateway(engine_cls(write_script(tmp_path, SCRIPT), renderer), renderer, turn_log=TurnLog(log_dir),
                          weight_version="v3")
        with BackgroundServer(create_app(gateway)) as server:
            first_turn(client(server.url, "s"))
        [record] = read_turn_log(next((log_dir / "sessions").glob("*.turns.jsonl")))
        assert record.weight_version == expected


def test_the_weight_routes_refuse_a_session_key_however_it_is_sent(tmp_path):
    """The next spellings an agent would try: its key as a Bearer token, as the admin header, and
    the token-less Responses route while paused (reject)."""
    with scripted_gateway(tmp_path, SCRIPT, qwen25_renderer(), admin_token=TOKEN) as (url, gateway):
        client(url, "sess").messages.create(model="m", max_tokens=64,
                                            messages=[{"role": "user", "content": "hi"}], tools=TOOLS)
        for headers in ({"authorization": "Bearer sess"}, {"x-agent-code-admin": "sess"},
                        {"x-api-key": "sess", "x-agent-code-admin": ""}):
            r = httpx.post(f"{url}/v1/admin/resume", headers=headers, json={"weight_version": "evil"})
            assert r.status_code in (401, 403), (headers, r.text)
        assert gateway.weights.version == "0"
        # the admin token is accepted as a Bearer token too (decide's rule for every admin route)
        r = httpx.post(f"{url}/v1/admin/pause", headers={"authorization": f"Bearer {TOKEN}"}, json={"mode": "reject"})
        assert r.status_code == 200 and gateway.weights.paused == "reject"
        r = httpx.post(f"{url}/v1/responses", headers={"authorization": "Bearer sess"},
                       json={"model": "m", "input": "hi"})
        assert r.status_code == 503 and "paused for a weight update" in r.json()["error"]["message"], r.text
