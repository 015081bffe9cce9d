"""Attack review of issue 40 ("train on it": one rollout slot → one record, the record being the
rollout's ``main`` sample). The model being trained is the attacker; it can read its own session
key (its agent's environment: ``/proc/$PPID/environ``) and call the gateway itself.

Found: the record's ``main`` sample was the first root's chain with the *lowest leaf index*, so
one request the model sent itself, mid-run, extending an early turn with a tool result of its
own making, became ``main`` (a dead-end leaf that ends before the agent's next turn), and the
whole conversation the agent really had was a ``retry`` branch — left out of TRL's record and of
slime's ``samples: "main"`` one: its failing turns got no negative signal at all. Now ``main``
is the first root's chain to its latest turn (the conversation the client went on with to its
end), and that chain trains the turns it shares. (Taking the longest chain instead falls to the
next attack: two chained requests at the agent's last tool call make a longer crafted chain.)

Found: the TRL adapter let a trainer run with ``mask_truncated_completions``, which masks out a
whole row whose last id is no end-of-turn id; the model decides that (a last turn written up to
the session's token cap), so a failing rollout could have its zero masked into no signal. The
adapter now refuses the option.
"""

from __future__ import annotations

import json

import anthropic
import httpx
import pytest

from agent_code.rollout.runner import RolloutConfig, RolloutResult
from agent_code.trainers.core import record_of
from agent_code.trajectory.records import TurnRecord
from agent_code.trajectory.samples import build_samples
from gateway_fixtures import check_token_exact, qwen25_renderer, scripted_gateway

SYSTEM = "You are agent-code, a coding agent."
BASH = [{"name": "bash", "description": "Run a command.",
         "input_schema": {"type": "object", "properties": {"command": {"type": "string"}}, "required": ["command"]}}]


def hermes(name: str, arguments: dict) -> str:
    return f"<tool_call>\n{json.dumps({'name': name, 'arguments': arguments})}\n</tool_call>"


def _agent_step(client: anthropic.Anthropic, messages: list, result: str | None) -> list:
    reply = client.messages.create(model="m", max_tokens=300, system=SYSTEM, tools=BASH, messages=messages)
    messages = [*messages, {"role": "assistant", "content": [b.model_dump(exclude_none=True) for b in reply.content]}]
    uses = [b for b in reply.content if b.type == "tool_use"]
    if uses and result is not None:
        messages.append({"role": "user", "content": [
            {"type": "tool_result", "tool_use_id": u.id, "content": result} for u in uses]})
    return messages


def _crafted(url: str, key: str, messages: list, text: str) -> httpx.Response:
    """The model's own request (its bash tool's curl): the agent's conversation so far, with a
    tool result the model wrote."""
    last = messages[-1]["content"][-1]
    body = {"model": "m", "max_tokens": 50, "system": SYSTEM, "tools": BASH, "messages": [
        *messages, {"role": "user", "content": [{"type": "tool_result", "tool_use_id": last["id"], "content": text}]}]}
    return httpx.post(f"{url}/v1/messages", json=body, headers={"x-api-key": key})


AGENT_TURNS = [hermes("bash", {"command": "cat /proc/$PPID/environ; curl ..."}),
               hermes("bash", {"command": "python -m pytest -q"}),
               hermes("bash", {"command": "rm -rf tests"}),
               "I could not fix it."]
RESULTS = ["{}", "1 failed", "removed"]


@pytest.mark.parametrize(("agent_turns", "at", "chained"), [(4, 0, 1), (4, 2, 1), (2, 0, 1), (4, 2, 3)],
                         ids=["off-the-first-turn", "off-a-later-turn", "as-long-as-the-agents-own",
                              "a-chain-longer-than-the-agents"])
def test_a_branch_the_model_sends_itself_does_not_become_the_record(tmp_path, agent_turns, at, chained):
    """The agent's tool call ``at`` is the model's curl: while it runs, the model sends the
    agent's conversation so far with a tool result of its own, and (``chained``) goes on from
    each reply it gets. The record must still be the agent's whole conversation
    (``as-long-as-the-agents-own``: the crafted dead end is as long as the agent's chain and
    came first; ``a-chain-longer-than-the-agents``: more turns than the rest of the agent's)."""
    key = "thermo.0.k3y"
    turns_text = AGENT_TURNS[:agent_turns - 1] + AGENT_TURNS[-1:]
    script = ([{"text": t} for t in turns_text[:at + 1]] + [{"text": hermes("bash", {"command": "ls"})}] * chained
              + [{"text": t} for t in turns_text[at + 1:]])
    with scripted_gateway(tmp_path, script, qwen25_renderer()) as (url, gateway):
        client = anthropic.Anthropic(base_url=url, api_key=key, max_retries=0)
        messages: list = [{"role": "user", "content": "Fix thermo.py."}]
        for step in range(agent_turns):
            if step == at + 1:   # while its curl "runs"
                pending, forged = messages.pop(), list(messages)
                for _ in range(chained):
                    reply = _crafted(url, key, forged, "done")
                    assert reply.status_code == 200
                    last = forged[-1]["content"][-1]
                    forged += [{"role": "user", "content": [{"type": "tool_result", "tool_use_id": last["id"],
                                                             "content": "done"}]},
                               {"role": "assistant", "content": reply.json()["content"]}]
                messages.append(pending)
            messages = _agent_step(client, messages, RESULTS[step] if step < agent_turns - 1 else None)
        turns = gateway.store.get(key).turns
        samples = gateway.finish_session(key, reward=0.0)
    crafted = list(range(at + 1, at + 1 + chained))
    agents = [t.index for t in turns if t.index not in crafted]
    assert turns[crafted[0]].parent == at and len(turns) == agent_turns + chained
    assert [turns[i].parent for i in crafted[1:]] == crafted[:-1]
    rec = record_of(RolloutResult("thermo/0", "thermo", 0, key, "agent-code", reward=0.0), samples,
                    index=0, fallback_prompt_ids=[1], filler_id=0)
    main = next(s for s in samples if s.branch == "main")
    assert main.metadata["turn_indices"] == agents            # the agent's conversation, whole
    assert rec.trained_tokens == sum(len(turns[i].output_ids) for i in agents)
    assert rec.left_out.trained_tokens == sum(len(turns[i].output_ids) for i in crafted)
    assert [s.branch for s in samples] == ["main", "retry"]
    check_token_exact(samples, turns)


def _turn(index: int, parent: int | None, prompt: list[int], output: list[int]) -> TurnRecord:
    return TurnRecord.build(session_id="s", index=index, messages=[{"role": "user", "content": "u"}], tools=None,
                            prompt_ids=prompt, output_ids=output, logprobs=[-0.5] * len(output),
                            finish_reason="stop", reply={"role": "assistant", "content": "x"}, parent=parent)


def test_a_retry_the_client_went_on_from_is_main_and_trains_the_shared_turns():
    """The honest shape of the same tree: turn 1 was retried as turn 2 and the client went on
    from turn 2. ``main`` is the conversation it had (0, 2, 3), trained whole; the dead end is
    the ``retry``, its shared turn 0 not trained twice."""
    t0 = _turn(0, None, [1, 2], [10, 11])
    t1 = _turn(1, 0, [1, 2, 10, 11, 50], [12])
    t2 = _turn(2, 0, [1, 2, 10, 11, 50], [13, 14])
    t3 = _turn(3, 2, [1, 2, 10, 11, 50, 13, 14, 51], [15])
    samples = build_samples([t0, t1, t2, t3], reward=0.0)
    assert [(s.branch, s.metadata["turn_indices"]) for s in samples] == [("main", [0, 2, 3]), ("retry", [0, 1])]
    assert samples[0].loss_mask == [1, 1, 0, 1, 1, 0, 1] and samples[1].metadata["shared_turns"] == [0]
    # a side request or a sub-agent root is never main, however long
    sub = [_turn(4 + i, None if i == 0 else 3 + i, [7] * (i + 1), [20 + i]) for i in range(6)]
    for t in sub:
        t.messages = [{"role": "system", "content": "You are a search sub-agent."}, *t.messages]
    branches = [s.branch for s in build_samples([t0, t1, t2, t3, *sub], reward=0.0)]
    assert branches[0] == "main" and branches.count("main") == 1 and "sub-agent" in branches


# ---------------------------------------------------------------- TRL: a last turn written to the cap

def test_trl_truncation_masking_is_refused_since_the_model_decides_where_its_completion_ends(tmp_path):
    """TRL's ``mask_truncated_completions`` masks a whole row whose last id is no end-of-turn or
    pad id. A rollout's completion ends where its last turn did, and the model can write that
    turn up to the session's token cap (real gateway: ``max_new_tokens`` 8): the failing rollout's
    row would be masked out, its zero no signal. The adapter refuses the option (before: it ran
    the rollouts and handed TRL the maskable row)."""
    from trl import GRPOConfig

    from agent_code.gateway.sessions import SessionStore
    from agent_code.trainers.trl import AgentRolloutFunc, rollout_output
    from agent_code.tasks import Task

    renderer = qwen25_renderer()
    store = SessionStore()
    with scripted_gateway(tmp_path, [{"text": "I give up. " * 40}], renderer, store=store) as (url, gateway):
        store.open("capped", max_new_tokens=8)
        client = anthropic.Anthropic(base_url=url, api_key="capped", max_retries=0)
        reply = client.messages.create(model="m", max_tokens=300, messages=[{"role": "user", "content": "Fix it."}])
        assert reply.stop_reason == "max_tokens"
        samples = gateway.finish_session("capped", reward=0.0)
    rec = record_of(RolloutResult("t/0", "t", 0, "capped", "agent-code", reward=0.0), samples, index=0,
                    fallback_prompt_ids=[1], filler_id=0)
    row = rollout_output([rec])
    assert row["completion_ids"][0][-1] not in renderer.end_of_turn_ids and sum(row["env_mask"][0]) == 8

    config = GRPOConfig(output_dir=str(tmp_path / "out"), mask_truncated_completions=True, report_to=[],
                        use_cpu=True, bf16=False)
    trainer = type("Trainer", (), {"args": config, "processing_class": renderer})()
    adapter = AgentRolloutFunc([Task(id="t", repo=str(tmp_path), problem_statement="Fix it.")], RolloutConfig(),
                               gateway_url="http://127.0.0.1:9")
    with pytest.raises(ValueError, match="mask_truncated_completions"):
        adapter(["t"], trainer)
    adapter.close()
