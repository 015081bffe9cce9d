"""Token-exact trajectories through the real gateway: samples, masks, drift, recovery."""

from __future__ import annotations

import json

import anthropic
import httpx

from agent_code.trajectory.samples import Sample
from agent_code.trajectory.store import recover
from gateway_fixtures import check_token_exact, qwen3_renderer, scripted_gateway, serve_process, trained_counts

TOOLS = [{"name": "echo", "description": "Echo text.",
          "input_schema": {"type": "object", "properties": {"text": {"type": "string"}}, "required": ["text"]}}]


def call(text: str, think: str | None = None) -> dict:
    body = f"<tool_call>\n{json.dumps({'name': 'echo', 'arguments': {'text': text}})}\n</tool_call>"
    return {"text": (f"<think>\n{think}\n</think>\n\n" if think else "") + body}


def run_session(client: anthropic.Anthropic, turns: int, *, system_reminder_at: int | None = None,
                new_user_every: int | None = None, thinking: bool = False) -> None:
    """A client loop like an agent CLI's: echo every tool_use's input back as its result."""
    messages: list = [{"role": "user", "content": "Start."}]
    for i in range(turns):
        extra = {"thinking": {"type": "enabled", "budget_tokens": 4096}} if thinking else {}
        reply = client.messages.create(model="m", max_tokens=256, tools=TOOLS, messages=messages, **extra)
        messages.append({"role": "assistant", "content": [b.model_dump(exclude_none=True) for b in reply.content]})
        uses = [b for b in reply.content if b.type == "tool_use"]
        if not uses:
            return
        content: list = [{"type": "tool_result", "tool_use_id": u.id, "content": u.input["text"]} for u in uses]
        if new_user_every and (i + 1) % new_user_every == 0:
            content.append({"type": "text", "text": f"Now step {i + 1}."})
        messages.append({"role": "user", "content": content})
        if system_reminder_at == i:
            messages.append({"role": "system", "content": "Reminder: stay brief."})


def test_samples_are_token_exact(tmp_path):
    renderer = qwen3_renderer()
    script = [call("one", think="I should echo one."), call("two"), call("three", think="Last echo."),
              {"text": "<think>\nDone.\n</think>\n\nAll echoed."}]
    with scripted_gateway(tmp_path, script, renderer) as (url, gateway):
        client = anthropic.Anthropic(base_url=url, api_key="traj", max_retries=0)
        run_session(client, 5, system_reminder_at=1, thinking=True)
        r = httpx.post(f"{url}/v1/sessions/traj/finish", json={"reward": 1.0, "metadata": {"task": "t1"}})
        assert r.status_code == 200, r.text
        samples = [Sample.from_dict(s) for s in r.json()["samples"]]
        turns = gateway.store.get("traj").turns
        # a finished session takes no more turns
        assert client.messages.with_raw_response.create  # (SDK present)
        again = httpx.post(f"{url}/v1/messages", headers={"x-api-key": "traj"},
                           json={"model": "m", "max_tokens": 5, "messages": [{"role": "user", "content": "x"}]})
        assert again.status_code == 503
    assert len(turns) == 4 and [t.parent for t in turns] == [None, 0, 1, 2]
    assert all(t.drift == [] for t in turns)
    assert turns[0].reply["reasoning_content"] == "I should echo one."
    assert "<system-reminder>" in turns[2].messages[-1]["content"]
    assert len(samples) == 1
    sample = samples[0]
    assert sample.branch == "main" and sample.status == "completed" and sample.reward == 1.0
    assert sample.tokens == turns[-1].prompt_ids.tolist() + turns[-1].output_ids.tolist()
    assert sample.metadata["task"] == "t1" and sample.metadata["use_tool"] is True
    check_token_exact(samples, turns)
    # tool results reached the prompt as template text, not as trained tokens
    assert renderer.decode(sample.tokens).count("<tool_response>") == 3


def test_thirty_turns_token_policy_has_no_drift(tmp_path):
    renderer = qwen3_renderer()
    script = [call(f"step {i}", think=f"Thinking about {i}." if i % 3 == 0 else None) for i in range(30)]
    with scripted_gateway(tmp_path, script + [{"text": "end"}], renderer) as (url, gateway):
        client = anthropic.Anthropic(base_url=url, api_key="long", max_retries=0)
        run_session(client, 30, new_user_every=7, thinking=True)
        samples = gateway.finish_session("long", reward=0.5)
        turns = gateway.store.get("long").turns
    assert len(turns) == 30
    assert [t.parent for t in turns] == [None, *range(29)]
    assert sum(len(t.drift) for t in turns) == 0 and samples[0].metadata["drift"] == []
    assert len(samples) == 1
    check_token_exact(samples, turns)


def test_template_policy_logs_drift_when_the_template_strips_reasoning(tmp_path):
    """Qwen3's template drops the reasoning of assistant turns before the latest user query:
    re-rendering the history then differs from what was sampled."""
    renderer = qwen3_renderer()
    script = [call(f"step {i}", think=f"Reasoning {i}.") for i in range(6)]
    with scripted_gateway(tmp_path, script + [{"text": "end"}], renderer) as (url, gateway):
        gateway.history_policy = "template"
        client = anthropic.Anthropic(base_url=url, api_key="tpl", max_retries=0)
        run_session(client, 6, new_user_every=2, thinking=True)
        samples = gateway.finish_session("tpl", reward=1.0)
        turns = gateway.store.get("tpl").turns
    events = [e for t in turns for e in t.drift] + [e for s in samples for e in s.metadata["drift"]]
    assert events, "re-rendering must have drifted"
    assert {e["kind"] for e in events} & {"realigned", "fork"}
    # whatever drifted, no trained token differs from a sampled one, and each is trained once
    counts = trained_counts(samples, turns)
    assert set(counts.values()) == {1}
    trained = sum(sum(s.loss_mask) for s in samples)
    assert trained == len(counts)
    assert trained <= sum(len(t.output_ids) for t in turns)


def test_kill_9_loses_no_finished_turn(tmp_path):
    renderer = qwen3_renderer()
    from agent_code.render.template import qwen3_tokenizer_dir

    script = tmp_path / "replies.jsonl"
    script.write_text("".join(json.dumps(call(f"t{i}")) + "\n" for i in range(10)))
    traj = tmp_path / "traj"
    with serve_process("--engine", f"scripted:{script}", "--tokenizer", str(qwen3_tokenizer_dir()),
                       "--trajectory-dir", str(traj), kill=True) as (url, proc):
        client = anthropic.Anthropic(base_url=url, api_key="crash", max_retries=0)
        run_session(client, 3)
    # the server got SIGKILL: nothing was flushed at exit
    assert proc.returncode == -9
    samples = recover(traj)
    assert len(samples) == 1 and samples[0].metadata["turns"] == 3
    # the converter command writes them out like a finished session
    from conftest import run_cli

    proc = run_cli("recover", str(traj), "--out", str(tmp_path / "recovered"))
    assert proc.returncode == 0 and "recovered 1 samples from 1 sessions" in proc.stdout
    assert (tmp_path / "recovered" / "samples.jsonl").read_text().count("\n") == 1
    assert samples[0].status == "aborted" and samples[0].metadata.get("recovered") is True
    expected_outputs = [renderer.encode(call(f"t{i}")["text"]) + renderer.end_of_turn_ids[:1] for i in range(3)]
    trained = [t for t, m in zip(samples[0].tokens[-samples[0].response_length:], samples[0].loss_mask) if m]
    assert trained == [t for out in expected_outputs for t in out]
