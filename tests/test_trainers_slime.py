"""The slime adapter (agent_code/trainers/slime.py): slime ``Sample`` s from real agent-code rollouts
(scripted engine, bundled tasks, local sandboxes), checked by slime's own code and trained for one
step through slime's loss functions on a tiny random Qwen2 over the real Qwen tokenizer.

slime is not on PyPI: the tests that need it find it as an installed package or in the checkout
named by ``AGENT_CODE_SLIME_SRC`` (the directory holding its ``slime/`` package), and skip with a
warning saying how to get it otherwise. The pure rules (statuses, rollout ids, reward
normalisation) and abort run without it."""

from __future__ import annotations

import asyncio
import importlib
import json
import os
import sys
import time
import types
import warnings
from argparse import Namespace
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import pytest

from agent_code.demo.rollout import ROLLOUT_SCRIPT
from agent_code.rollout.client import GatewayClient, GatewayClientError
from agent_code.rollout.runner import RolloutConfig, RolloutResult
from agent_code.tasks import load_tasks
from agent_code.trainers import slime as adapter
from agent_code.trainers.core import record_of
from agent_code.trajectory.samples import Sample
from tests.rollout_fixtures import processes_with_env, say, tasks_file

TASK = "thermo-fahrenheit"
HOW_TO_GET_SLIME = ("slime is not importable: these tests need it. It is not on PyPI: `git clone` THUDM/slime and "
                    "set AGENT_CODE_SLIME_SRC=<that checkout> (its `slime/` package needs only torch, numpy, httpx "
                    "here), or `pip install -e <checkout> --no-deps`")


def import_slime() -> types.ModuleType | None:
    """slime's ``utils.types`` module, from an install or ``AGENT_CODE_SLIME_SRC``; None (with a
    loud warning) when neither has it."""
    src = os.environ.get("AGENT_CODE_SLIME_SRC")
    if src and src not in sys.path:
        sys.path.append(src)
    try:
        return importlib.import_module("slime.utils.types")
    except ImportError as exc:
        warnings.warn(f"{HOW_TO_GET_SLIME} ({exc})", stacklevel=2)
        return None


SLIME = import_slime()
needs_slime = pytest.mark.skipif(SLIME is None, reason=HOW_TO_GET_SLIME)


def args(**extra: Any) -> Namespace:
    return Namespace(**{"n_samples_per_prompt": 2, "rollout_max_context_len": None, "advantage_estimator": "grpo",
                        "rewards_normalization": True, "grpo_std_normalization": True, "reward_key": None, **extra})


def ours(branch: str, prompt: list[int], response: list[int], mask: list[int], index: int = 0,
         versions: list[dict[str, Any]] | None = None, status: str = "completed") -> Sample:
    return Sample(f"{TASK}.0.x", index, branch, prompt + response, len(response), mask,
                  [-(i + 1) / 8 for i in range(len(response))], reward=1.0, status=status, rollout_id=f"{TASK}/0",
                  metadata={"weight_versions": versions} if versions else {})


def result(reward: float | None, abort: str | None = None) -> RolloutResult:
    r = RolloutResult(f"{TASK}/0", TASK, 0, f"{TASK}.0.x", "agent-code", reward=reward)
    if abort:
        r.abort(abort)
    return r


# ----------------------------------------------------------------------------------- pure rules

def test_a_rollouts_fan_out_does_not_move_any_advantage():
    """Attack: slime's fan-out normaliser (group_index only) counts every sample, so a rollout that
    splits into many samples (sub-agents) weighs that many times in its group's baseline. Ours
    counts each rollout once: fanning out changes nobody's advantage."""
    one_each = adapter.rollout_advantages([0, 0, 0], [10, 11, 12], [1.0, 0.0, 0.0], [True] * 3, std=True)
    fanned = adapter.rollout_advantages([0] * 6, [10, 11, 11, 11, 11, 12], [1.0] + [0.0] * 5, [True] * 6, std=True)
    assert fanned == [one_each[0], *[one_each[1]] * 4, one_each[2]]
    assert one_each[0] > 0 > one_each[1] == one_each[2]
    if SLIME is not None:   # slime's own helper, for the record: its baseline moves with the fan-out
        from slime.rollout._fanout_test_helpers import grpo_normalize_by_group_index
        samples = [SLIME.Sample(group_index=0, index=i, rollout_id=r, reward=w)
                   for i, (r, w) in enumerate(zip([10, 11, 11, 11, 11, 12], [1.0] + [0.0] * 5))]
        _, theirs = grpo_normalize_by_group_index(args(), samples)
        assert abs(theirs[0] - fanned[0]) > 0.1
        _, same = grpo_normalize_by_group_index(args(), [samples[0], samples[1], samples[5]])
        assert same == pytest.approx(one_each)        # one sample per rollout: slime's numbers exactly


def test_placeholders_neither_count_nor_get_an_advantage_and_groups_stay_apart():
    adv = adapter.rollout_advantages([0, 0, 0, 1, 1], [1, 2, 3, 4, 5], [1.0, 0.0, 0.0, 1.0, 0.0],
                                     [True, True, False, True, False], std=False)
    assert adv == [0.5, -0.5, 0.0, 0.0, 0.0]          # group 1: one counted rollout, no baseline but itself


def test_the_post_process_follows_slimes_flags():
    s = [SimpleNamespace(group_index=0, index=i, rollout_id=None, remove_sample=False, reward=r,
                         get_reward_value=lambda a, r=r: r) for i, r in enumerate([1.0, 0.0])]
    raw, norm = adapter.post_process_rewards(args(), s)
    assert raw == [1.0, 0.0] and norm[0] == pytest.approx(0.7071, abs=1e-3) and norm[1] == pytest.approx(-norm[0])
    assert adapter.post_process_rewards(args(grpo_std_normalization=False), s)[1] == [0.5, -0.5]
    assert adapter.post_process_rewards(args(advantage_estimator="ppo"), s)[1] == [1.0, 0.0]
    assert adapter.post_process_rewards(args(rewards_normalization=False), s)[1] == [1.0, 0.0]


@pytest.mark.parametrize("reason", ["budget", "agent_crash", "ungradable", "empty_trajectory"])
def test_a_models_own_failure_is_never_aborted_so_it_cannot_be_requeued(reason):
    """Attack: slime's fully-async rollout gives ABORTED groups back to the data buffer. Were a
    rollout that ran over budget or crashed ABORTED, a slow policy would have its zero re-queued
    away instead of trained on. Only infrastructure failures (and slime's abort) are ABORTED."""
    rec = record_of(result(None, reason), [ours("main", [1], [2], [1])], index=0, fallback_prompt_ids=[9],
                    filler_id=0)
    assert rec.status == "aborted" and rec.counted                       # the core's record says aborted
    assert adapter.slime_status(rec, ours("main", [1], [2], [1])) == "completed"
    assert adapter.slime_status(rec, ours("main", [1], [2], [1], status="truncated")) == "truncated"
    boot = record_of(result(None, "boot"), [], index=0, fallback_prompt_ids=[9], filler_id=0)
    assert adapter.slime_status(boot, ours("main", [1], [2], [1])) == "aborted"


def test_slime_sampling_and_limits_reach_the_rollout_config():
    conf = adapter.rollout_config(RolloutConfig(sampling={"temperature": 0.5}, samples_per_task=8), args(),
                                  {"temperature": 1.0, "top_p": 0.9, "top_k": -1, "sampling_seed": 7,
                                   "max_new_tokens": 64, "stop": None})
    assert conf.sampling == {"temperature": 1.0, "top_p": 0.9, "seed": 7}   # top_k -1: SGLang's "off"
    assert conf.samples_per_task == 1 and conf.max_new_tokens == 64 and conf.max_context_tokens is None
    conf = adapter.rollout_config(RolloutConfig(max_new_tokens=32), args(rollout_max_context_len=4096), {})
    assert (conf.max_new_tokens, conf.max_context_tokens) == (32, 4096)


# ------------------------------------------------------------------------ slime Samples, by hand

@needs_slime
def test_every_sample_of_a_rollout_shares_one_int_rollout_id_and_its_reward():
    from slime.observability.rollout_data_utils import validate_rollout_id_annotated

    main = ours("main", [1, 5], [6, 7, 8], [1, 0, 1], index=1,
                versions=[{"turn": 0, "version": "v1", "start": 0, "end": 1},
                          {"turn": 2, "version": "v2", "start": 2, "end": 3}])
    sub = ours("sub-agent", [1, 9], [10, 11], [1, 1], index=2, versions=[{"turn": 3, "version": "v2",
                                                                          "start": 0, "end": 2}])
    empty = ours("compaction", [1, 9], [12], [0], index=3)             # nothing trained: not sent
    rec = record_of(result(1.0), [main, sub, empty], index=41, fallback_prompt_ids=[9], filler_id=0)
    base = SLIME.Sample(group_index=3, index=41, prompt="fix it", label=TASK, metadata={"row": 7},
                        session_id="slime-uuid")
    out = adapter.to_slime(rec, base, rollout_id=41, every_sample=True)
    assert [s.metadata["branch"] for s in out] == ["main", "sub-agent"]
    assert all(type(s.rollout_id) is int and s.rollout_id == 41 for s in out)
    assert all(all(type(t) is int for t in s.tokens) for s in out)
    assert [s.reward for s in out] == [1.0, 1.0] and all(s.status == SLIME.Sample.Status.COMPLETED for s in out)
    assert out[0].weight_versions == ["v1", "v2"] and out[1].weight_versions == ["v2"]
    assert (out[0].tokens, out[0].response_length, out[0].loss_mask) == ([1, 5, 6, 7, 8], 3, [1, 0, 1])
    assert all((s.prompt, s.label, s.group_index, s.index, s.session_id) == ("fix it", TASK, 3, 41, "slime-uuid")
               for s in out)
    assert out[0].metadata["row"] == 7 and out[0].metadata["rollout"] == f"{TASK}/0"
    validate_rollout_id_annotated([[out, out[:1]]])                     # prompt × rollout × samples
    with pytest.raises(AssertionError, match="must share rollout_id"):
        broken = adapter.to_slime(rec, base, rollout_id=41, every_sample=True)
        broken[1].rollout_id = 42
        validate_rollout_id_annotated([[broken]])
    only = adapter.to_slime(rec, base, rollout_id=41, every_sample=False)
    assert len(only) == 1 and only[0].loss_mask == [1, 0, 1]
    assert base.tokens == [] and base.status == SLIME.Sample.Status.PENDING   # slime's sample untouched


@needs_slime
@pytest.mark.parametrize("reason", ["boot", "interrupted"])
def test_a_placeholder_is_a_removed_aborted_sample_slime_can_still_train_over(reason):
    main = ours("main", [1, 5], [6, 7], [1, 1], versions=[{"turn": 0, "version": "v1", "start": 0, "end": 2}])
    rec = record_of(result(1.0, reason), [main], index=5, fallback_prompt_ids=[9], filler_id=0)
    [s] = adapter.to_slime(rec, SLIME.Sample(index=5, label=TASK), rollout_id=5, every_sample=True)
    assert s.status == SLIME.Sample.Status.ABORTED and s.remove_sample and s.reward == 0.0
    assert s.loss_mask == [0, 0] and s.weight_versions == [] and s.metadata["abort_reason"] == reason
    assert len(s.loss_mask) == s.response_length == len(s.rollout_log_probs)


# ---------------------------------------------------------------------------- real rollouts

def script_file(tmp_path: Path, extra: list[dict[str, Any]] | None = None) -> Path:
    """The demo's fix as sample 0 of the thermo task; sample 1 gives up."""
    lines = [json.loads(x) for x in ROLLOUT_SCRIPT.read_text().splitlines() if x.strip()]
    script = [x for x in lines if x["session"] == f"{TASK}.0"] + [say("I could not find the bug.", f"{TASK}.1")]
    path = tmp_path / "script.jsonl"
    path.write_text("".join(json.dumps(x) + "\n" for x in script + (extra or [])))
    return path


def rollouts(tmp_path: Path, script: Path, **kw: Any) -> adapter.SlimeRollouts:
    tasks = {t.id: t for t in load_tasks(tasks_file(tmp_path, [TASK]))}
    return adapter.SlimeRollouts(tasks=tasks, engine=f"scripted:{script}", tokenizer=None,
                                 config=RolloutConfig(budget=120.0, max_steps=8), **kw)


def slime_sample(index: int, **kw: Any) -> Any:
    if SLIME is None:
        return SimpleNamespace(group_index=0, index=index, rollout_id=None, label=TASK, tokens=[], **kw)
    return SLIME.Sample(group_index=0, index=index, prompt="the thermo bug", label=TASK, **kw)


@needs_slime
def test_slime_trains_one_step_on_agent_code_rollouts(tmp_path):
    """Acceptance: two rollouts of a bundled task through ``generate`` as slime calls it, checked
    by slime's own rollout-data code, then one optimizer step through slime's loss functions."""
    import torch
    from slime.observability.rollout_data_utils import (load_debug_rollout_data, save_debug_rollout_data,
                                                        tensorize_rollout_data_for_training,
                                                        validate_rollout_id_annotated)
    from slime.utils import ppo_utils

    runner = rollouts(tmp_path, script_file(tmp_path))
    sampling = {"temperature": 1.0, "top_p": 1.0, "top_k": -1, "max_new_tokens": 512}

    async def run() -> list[Any]:
        try:
            gateway = await runner.gateway()                              # the trainer's weights are "v7" now
            async with GatewayClient(gateway.url, admin_token=gateway.admin_token) as client:
                await client.resume(weight_version="v7")
            return list(await asyncio.gather(*(runner.generate(args(), slime_sample(i), dict(sampling))
                                               for i in range(2))))
        finally:
            await runner.close()

    group = asyncio.run(run())
    validate_rollout_id_annotated([group])
    assert [[s.rollout_id for s in rollout] for rollout in group] == [[0], [1]]
    samples = [s for rollout in group for s in rollout]
    assert [s.reward for s in samples] == [1.0, 0.0]                   # graded by the task's tests
    assert all(s.status == SLIME.Sample.Status.COMPLETED and not s.remove_sample for s in samples)
    for s in samples:
        assert len(s.loss_mask) == s.response_length == len(s.rollout_log_probs) and sum(s.loss_mask) > 0
        assert len(s.weight_versions) >= 1 and set(s.weight_versions) == {"v7"}
        assert all(type(t) is int for t in s.tokens) and s.metadata["branch"] == "main"
    assert len(samples[0].weight_versions) == 4                        # the fix took four trained turns

    # slime's debug dump round trip (Sample.to_dict / from_dict through torch.save)
    template = str(tmp_path / "dump" / "rollout_{rollout_id}.pt")
    save_debug_rollout_data(template, samples, rollout_id=0, evaluation=False)
    back = load_debug_rollout_data(template, rollout_id=0)
    assert [(b.tokens, b.loss_mask, b.status, b.rollout_id, b.weight_versions) for b in back] == \
        [(s.tokens, s.loss_mask, s.status, s.rollout_id, s.weight_versions) for s in samples]

    # the train data as slime's RolloutManager._convert_samples_to_train_data lays it out
    raw, rewards = adapter.post_process_rewards(args(), samples)
    assert raw == [1.0, 0.0] and rewards[0] > 0 > rewards[1]
    masks = [s.loss_mask for s in samples]
    data: dict[str, Any] = {"tokens": [s.tokens for s in samples], "response_lengths": [s.response_length for s in samples],
                            "rewards": rewards, "raw_reward": raw, "loss_masks": masks,
                            "rollout_ids": [s.rollout_id for s in samples],
                            "rollout_log_probs": [s.rollout_log_probs for s in samples]}
    totals: dict[int, int] = {}
    for rid, m in zip(data["rollout_ids"], masks):
        totals[rid] = totals.get(rid, 0) + sum(m)
    data["rollout_mask_sums"] = [totals[rid] for rid in data["rollout_ids"]]
    tensorize_rollout_data_for_training(data)
    assert data["tokens"][0].dtype == torch.long and data["loss_masks"][0].dtype == torch.int

    model, optimizer = tiny_qwen2(torch)
    before = [p.detach().clone() for p in model.parameters()]

    def response_log_probs(tokens: Any, n: int) -> Any:
        total = tokens.numel()
        hidden = model.model(tokens.unsqueeze(0)).last_hidden_state[0]
        logits = model.lm_head(hidden[total - n - 1: total - 1])          # the response's logits only
        log_prob, _ = ppo_utils.calculate_log_probs_and_entropy(logits, tokens[total - n:], tp_group=None)
        return log_prob.squeeze(-1)

    with torch._dynamo.config.patch(disable=True):    # slime's functions eagerly: no compile on CPU
        with torch.no_grad():
            old = [response_log_probs(t, n) for t, n in zip(data["tokens"], data["response_lengths"])]
        new = [response_log_probs(t, n) for t, n in zip(data["tokens"], data["response_lengths"])]
        advantages = ppo_utils.get_grpo_returns(torch.tensor(data["rewards"]), [torch.zeros_like(x) for x in new])
        loss = torch.zeros(())
        for lp, old_lp, adv, mask, denom in zip(new, old, advantages, data["loss_masks"], data["rollout_mask_sums"]):
            pg, _ = ppo_utils.compute_policy_loss(old_lp - lp, adv, 0.2, 0.28)
            loss = loss + (pg * mask).sum() / denom                     # a token mean per rollout
        loss = loss / len(totals)
    loss.backward()
    optimizer.step()
    assert any(not torch.equal(b, p) for b, p in zip(before, model.parameters()))


def tiny_qwen2(torch: Any) -> tuple[Any, Any]:
    """A random 1-layer Qwen2 over the real Qwen tokenizer's vocabulary (no download)."""
    from transformers import Qwen2Config, Qwen2ForCausalLM

    from agent_code.render.template import load_renderer

    torch.manual_seed(0)
    vocab = len(load_renderer(None).tokenizer)
    model = Qwen2ForCausalLM(Qwen2Config(vocab_size=vocab, hidden_size=32, intermediate_size=64, num_hidden_layers=1,
                                         num_attention_heads=2, num_key_value_heads=1, max_position_embeddings=8192))
    return model, torch.optim.SGD(model.parameters(), lr=1.0)


def test_slimes_abort_stops_the_rollout_in_flight_and_no_new_one_starts(tmp_path):
    """slime's abort() sets GenerateState.aborted: the rollout waiting on a slow turn is
    cancelled (its agent killed), it comes back an ``interrupted`` placeholder, and while the flag
    stays set the next call returns one at once without starting a rollout."""
    slow = say("thinking...", f"{TASK}.0", delay=60)
    runner = rollouts(tmp_path, _slow_script(tmp_path, slow), poll=0.05)
    state = install_generate_state()
    agents = f"ANTHROPIC_AUTH_TOKEN={TASK}.0"
    mine: set[int] = set()

    async def run() -> tuple[Any, float, Any, float]:
        try:
            job = asyncio.ensure_future(runner.record(args(), slime_sample(0), {}))
            gateway = await runner.gateway()
            async with GatewayClient(gateway.url, admin_token=gateway.admin_token) as client:
                for _ in range(600):                                     # until the slow turn is generating
                    if (await client.weights()).get("generating"):
                        break
                    assert not job.done(), job
                    await asyncio.sleep(0.1)
                mine.update(await own_agents(client, agents))              # not another run's of the task
            assert mine                                                  # the agent is running
            started = time.monotonic()
            state.aborted = True
            first = await job
            took = time.monotonic() - started
            started = time.monotonic()
            second = await runner.record(args(), slime_sample(1), {})
            took2 = time.monotonic() - started
            if SLIME is not None:     # what generate hands slime meanwhile, in each mode's shape
                [listed] = await runner.generate(args(), slime_sample(2), {})
                runner.samples = "main"
                bare = await runner.generate(args(), slime_sample(3), {})
                assert listed.status == bare.status == SLIME.Sample.Status.ABORTED
                assert listed.remove_sample and bare.remove_sample and (listed.rollout_id, bare.rollout_id) == (2, 3)
            return first, took, second, took2
        finally:
            await runner.close()

    try:
        first, took, second, took2 = asyncio.run(run())
    finally:
        type(state)._instances.pop(type(state), None)
    assert first.placeholder and first.abort_reason == "interrupted" and first.trained_tokens == 0
    assert first.index == 0 and took < 30
    assert second.placeholder and second.abort_reason == "interrupted" and second.result is not None
    assert second.result.session_id == "" and took2 < 1                  # never started
    assert not mine & set(processes_with_env(agents))                   # and now it is not


async def own_agents(client: GatewayClient, entry: str) -> set[int]:
    """The pids with ``entry`` in their environment whose session (their API key) is open on the
    gateway behind ``client``: this test's agent, not another run's of the same task."""
    own = set()
    for pid in processes_with_env(entry):
        try:
            environ = Path(f"/proc/{pid}/environ").read_bytes().split(b"\0")
            key = next(e for e in environ if e.startswith(b"ANTHROPIC_AUTH_TOKEN=")).split(b"=", 1)[1].decode()
            await client.turns(key)
        except (OSError, StopIteration, GatewayClientError):
            continue
        own.add(pid)
    return own


def _slow_script(tmp_path: Path, line: dict[str, Any]) -> Path:
    path = tmp_path / "slow.jsonl"
    path.write_text(json.dumps(line) + "\n")
    return path


def install_generate_state() -> Any:
    """slime's GenerateState singleton where ``slime.rollout.sglang_rollout`` keeps it: the real
    module where it imports (it needs SGLang's client side and Pillow), else a stand-in module of
    that name whose class keeps its instance the same way (SingletonMeta's ``_instances``)."""
    name = "slime.rollout.sglang_rollout"
    try:
        cls = importlib.import_module(name).GenerateState
    except ImportError:
        module = sys.modules.setdefault(name, types.ModuleType(name))
        if not hasattr(module, "GenerateState"):
            setattr(module, "GenerateState", type("GenerateState", (), {"_instances": {}}))
        cls = getattr(module, "GenerateState")
    state = cls.__new__(cls)
    state.aborted = False
    cls._instances[cls] = state
    return state


def test_the_configuration_and_the_prompt_data(tmp_path, monkeypatch):
    tasks = tasks_file(tmp_path, [TASK, "pager-last-page"])
    slime_args = Namespace(sglang_router_ip="10.0.0.7", sglang_router_port=30000, hf_checkpoint="/ckpt/qwen")
    monkeypatch.setenv(adapter.CONFIG_ENV, json.dumps({"tasks": str(tasks), "samples": "main",
                                                      "rollout": {"max_steps": 5, "sandbox": "local"}}))
    runner = adapter.SlimeRollouts.from_args(slime_args)
    assert runner.engine == "sglang:http://10.0.0.7:30000" and runner.tokenizer == "/ckpt/qwen"
    assert sorted(runner.tasks) == ["pager-last-page", TASK] and runner.samples == "main"
    assert runner.config.max_steps == 5
    config_file = tmp_path / "slime.json"
    config_file.write_text(json.dumps({"tasks": str(tasks), "engine": "scripted:x.jsonl", "tokenizer": None}))
    monkeypatch.setenv(adapter.CONFIG_ENV, str(config_file))
    runner = adapter.SlimeRollouts.from_args(slime_args)
    assert runner.engine == "scripted:x.jsonl" and runner.tokenizer is None and runner.samples == "all"
    with pytest.raises(KeyError, match="label 'nope' is no task id"):
        runner.task_of(SimpleNamespace(index=3, label="nope"))
    with pytest.raises(ValueError, match="--group-rm would replace the grader's rewards"):
        asyncio.run(runner.record(Namespace(group_rm=True), SimpleNamespace(index=0, label=TASK), {}))
    with pytest.raises(ValueError, match="must name the tasks file"):
        adapter.SlimeRollouts.from_args(slime_args, {"engine": "scripted:x"})
    with pytest.raises(ValueError, match="samples must be one of"):
        adapter.SlimeRollouts.from_args(slime_args, {"tasks": str(tasks), "samples": "some"})
    monkeypatch.delenv(adapter.CONFIG_ENV)
    with pytest.raises(ValueError, match=adapter.CONFIG_ENV):
        adapter.read_config()
    out = tmp_path / "prompts.jsonl"
    assert adapter.main([str(tasks), str(out)]) == 0
    rows = [json.loads(line) for line in out.read_text().splitlines()]
    assert [r["label"] for r in rows] == [TASK, "pager-last-page"] and "Fahrenheit" in rows[0]["prompt"]
