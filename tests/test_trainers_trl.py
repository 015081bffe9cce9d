"""TRL's GRPOTrainer on agent-code rollouts (agent_code/trainers/trl.py).

The unit tests build the rollout_func's dict from records; the acceptance test runs TRL's own
``GRPOTrainer.train()`` for one optimizer step on real rollouts of bundled tasks (scripted engine,
local sandboxes, graded by the tasks' tests) with a tiny random-weight Qwen2 over the real Qwen
tokenizer, and checks what TRL computed inside against our records."""

from __future__ import annotations

import importlib.util
import logging
from pathlib import Path

import pytest

from agent_code.rollout.runner import RolloutConfig, RolloutResult
from agent_code.tasks import Task, bundled_tasks_path, load_tasks
from agent_code.trainers.core import SlotRecord, record_of
from agent_code.trainers.trl import (ABORT_KEY, REWARD_KEY, TASK_KEY, AgentRolloutFunc, TaskIndex,
                                     reward_from_rollouts, rollout_output, slots_of, VERSIONS_KEY)
from agent_code.trajectory.samples import Sample

EXAMPLE = Path(__file__).resolve().parents[1] / "examples" / "train_trl.py"


def task(task_id: str, statement: str) -> Task:
    return Task(id=task_id, repo="/nonexistent", problem_statement=statement)


def record(index: int, prompt: list[int], response: list[int], mask: list[int], reward: float | None = 1.0,
           abort: str | None = None, task_id: str = "t") -> SlotRecord:
    result = RolloutResult(f"{task_id}/0", task_id, 0, f"{task_id}.0.x", "agent-code", reward=reward)
    if abort:
        result.abort(abort)
    main = Sample(f"{task_id}.0.x", 0, "main", prompt + response, len(response), mask,
                  [-(i + 1) / 8 for i in range(len(response))], reward=reward, rollout_id=f"{task_id}/0")
    return record_of(result, [main], index=index, fallback_prompt_ids=[7, 7], filler_id=0)


# ---------------------------------------------------------------- the dict built from records

def test_the_output_is_the_records_ids_mask_logprobs_and_reward_row_for_row():
    recs = [record(0, [1, 2], [3, 4, 5], [1, 0, 1], 1.0, task_id="a"),
            record(1, [1, 2], [6], [1], 0.0, task_id="a"),
            record(2, [1, 9], [8, 8], [1, 1], None, abort="budget", task_id="b"),       # the model's own failure
            record(3, [1, 9], [8], [1], 1.0, abort="boot", task_id="b")]                # infrastructure
    out = rollout_output(recs)
    assert out["prompt_ids"] == [[1, 2], [1, 2], [1, 9], [1, 9]]
    assert out["completion_ids"] == [[3, 4, 5], [6], [8, 8], [8]]
    assert out["env_mask"] == [[1, 0, 1], [1], [1, 1], [0]]          # the placeholder trains nothing
    assert out["logprobs"][0] == [-0.125, -0.25, -0.375]
    assert out[REWARD_KEY] == [1.0, 0.0, 0.0, None]                  # the placeholder is unscorable to TRL
    assert out[TASK_KEY] == ["a", "a", "b", "b"] and out[ABORT_KEY] == [None, None, "budget", "boot"]
    assert reward_from_rollouts(["a"] * 4, ["c"] * 4, **out) == [1.0, 0.0, 0.0, None]


def test_a_mask_shorter_than_its_completion_is_refused_since_trl_pads_env_mask_with_ones():
    """The attack on the glue: TRL pads ``env_mask`` with 1s and multiplies it into a completion
    mask that is 1 over the whole completion, so a short mask trains the completion's tail
    (tool output, say). Shown on TRL's own padding; the adapter refuses such a record."""
    torch = pytest.importorskip("torch")
    from trl.trainer.utils import pad
    short, full = [0], [0, 0, 0]                 # mask of 1 entry for a 3-token completion of tool output
    env = pad([torch.tensor(short), torch.tensor(full)], padding_value=1, padding_side="right")
    completion_mask = torch.ones(2, 3, dtype=torch.long)
    assert (completion_mask * env)[0].tolist() == [0, 1, 1]     # TRL would train 2 tokens nobody sampled
    bad = record(0, [1], [3, 4, 5], [0, 0, 0])
    bad.loss_mask = short
    with pytest.raises(ValueError, match="3 response ids, 1 mask entries, 3 logprobs"):
        rollout_output([bad])
    bad.loss_mask = [0, 0, 0, 1]                 # a longer one: TRL's widths would disagree, or shift
    with pytest.raises(ValueError, match="4 mask entries"):
        rollout_output([bad])
    bad.loss_mask, bad.logprobs = [0, 0, 0], [0.0]
    with pytest.raises(ValueError, match="must be equal"):
        rollout_output([bad])
    bad.logprobs, bad.loss_mask = [0.0] * 3, [0, 2, 0]
    with pytest.raises(ValueError, match="not 0/1"):
        rollout_output([bad])


def test_ids_outside_the_trainers_vocabulary_are_refused():
    with pytest.raises(ValueError, match="token id 500, outside the trainer's vocabulary of 500"):
        rollout_output([record(0, [1], [500], [1])], vocab_size=500)
    with pytest.raises(ValueError, match="token id 900"):
        rollout_output([record(0, [900], [5], [1])], vocab_size=500)
    assert rollout_output([record(0, [1], [499], [1])], vocab_size=500)["completion_ids"] == [[499]]


def test_a_completion_is_cut_only_when_asked_and_then_ids_mask_and_logprobs_alike(caplog):
    recs = [record(0, [1], [3, 4, 5, 6], [1, 0, 1, 1]), record(1, [1], [7], [1])]
    assert rollout_output(recs)["completion_ids"] == [[3, 4, 5, 6], [7]]
    with caplog.at_level(logging.WARNING, "agent_code.trainers.trl"):
        out = rollout_output(recs, max_completion_length=2)
    assert out["completion_ids"] == [[3, 4], [7]] and out["env_mask"] == [[1, 0], [1]]
    assert out["logprobs"] == [[-0.125, -0.25], [-0.125]]
    assert "1 of 2 completions cut to max_completion_length=2" in caplog.text


def test_each_completion_token_carries_the_weight_version_that_sampled_it():
    rec = record(0, [1], [3, 4, 5], [1, 0, 1])
    rec.versions = [{"turn": 0, "version": "v1", "start": 0, "end": 1}, {"turn": 2, "version": "v2", "start": 2, "end": 3}]
    placeholder = record(1, [1], [3], [1], abort="gateway")
    out = rollout_output([rec, placeholder])
    assert out[VERSIONS_KEY] == [["v1", None, "v2"], [None]]
    assert rollout_output([rec], max_completion_length=2)[VERSIONS_KEY] == [["v1", None]]


def test_the_reward_function_refuses_rows_without_their_rollouts_reward():
    with pytest.raises(ValueError, match="needs the 'agent_code_reward' of every row"):
        reward_from_rollouts(["p"], ["c"])
    with pytest.raises(ValueError, match="of every row"):
        reward_from_rollouts(["p", "p"], ["c", "c"], **{REWARD_KEY: [1.0]})


# ---------------------------------------------------------------- which task a prompt names

def test_a_prompt_names_a_task_by_id_or_statement_and_slots_count_per_task():
    a, b = task("a", "Fix the thermometer."), task("b", "Fix the pager.")
    index = TaskIndex([a, b])
    assert index.task_of("a") is a and index.task_of("  Fix the pager.\n") is b
    assert index.task_of([{"role": "system", "content": "x"}, {"role": "user", "content": "b"}]) is b
    assert index.task_of([{"role": "user", "content": [{"type": "text", "text": "Fix the thermometer."}]}]) is a
    assert [(t.id, k) for t, k in slots_of(["a", "a", "b", "b", "a"], index)] == [
        ("a", 0), ("a", 1), ("b", 0), ("b", 1), ("a", 2)]


@pytest.mark.parametrize("prompt", ["c", "Fix the thermometer", "", [{"role": "assistant", "content": "a"}], 7])
def test_a_prompt_that_names_no_task_is_an_error_not_a_guess(prompt):
    with pytest.raises(ValueError, match="names no task"):
        TaskIndex([task("a", "Fix the thermometer."), task("b", "Fix the pager.")]).task_of(prompt)


def test_tasks_sharing_a_prompt_are_refused():
    with pytest.raises(ValueError, match="share the prompt"):
        TaskIndex([task("a", "Fix it."), task("b", "Fix it.")])
    with pytest.raises(ValueError, match="share the prompt"):
        TaskIndex([task("a", "b"), task("b", "Fix it.")])      # a's statement is b's id


def test_the_adapter_takes_an_engine_or_a_gateway():
    with pytest.raises(ValueError, match="an engine .* or a gateway_url"):
        AgentRolloutFunc([], RolloutConfig())
    with pytest.raises(ValueError, match="not both"):
        AgentRolloutFunc([], RolloutConfig(), engine="scripted:x", gateway_url="http://127.0.0.1:1")


# ---------------------------------------------------------------- TRL's own trainer, one real step

def example():
    """examples/train_trl.py as a module: its scripted groups and its tiny model."""
    spec = importlib.util.spec_from_file_location("train_trl_example", EXAMPLE)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


@pytest.mark.slow
def test_grpo_trainer_takes_a_real_step_on_agent_code_rollouts(tmp_path, monkeypatch):
    torch = pytest.importorskip("torch")
    pytest.importorskip("trl")
    from trl import GRPOConfig, GRPOTrainer

    from agent_code.render.template import load_renderer
    from agent_code.trainers.trl import agent_rollout_func, task_dataset

    monkeypatch.setenv("TRL_EXPERIMENTAL_SILENCE", "1")
    tokenizer = load_renderer(None).tokenizer
    ids = ["thermo-fahrenheit", "pager-last-page"]
    tasks = [t for t in load_tasks(bundled_tasks_path()) if t.id in ids]
    ex = example()
    import trl.trainer.utils   # the example's cpu_fast_lm_head (see there), undone after the test
    monkeypatch.setattr(trl.trainer.utils, "_use_triton", lambda device: True)
    model = ex.tiny_qwen(len(tokenizer))
    before = {n: p.detach().clone() for n, p in model.named_parameters()}
    seen: list[dict] = []

    class Watched(GRPOTrainer):
        def _generate_and_score_completions(self, inputs):   # the batch TRL builds, in the rollout_func's order
            out = super()._generate_and_score_completions(inputs)
            seen.append({k: v.detach().clone() for k, v in out.items() if isinstance(v, torch.Tensor)})
            return out

        def _compute_loss(self, model, inputs):   # what the loss gets: the same rows, shuffled by TRL
            seen.append({k: v.detach().clone() for k, v in inputs.items() if isinstance(v, torch.Tensor)})
            return super()._compute_loss(model, inputs)

    def rewards_seen(prompts, completions, completion_ids, **kwargs):
        seen.append({"completion_ids": completion_ids, "rewards": list(kwargs[REWARD_KEY])})
        return reward_from_rollouts(prompts, completions, **kwargs)

    # 4 rollouts at once on a gateway that takes 3 sessions: one slot's session cannot open (an
    # infrastructure failure, "gateway"); its row must be a zero-mask placeholder in a full group
    config = RolloutConfig(samples_per_task=2, concurrency=4, max_steps=8, budget=120)
    args = GRPOConfig(output_dir=str(tmp_path / "out"), use_cpu=True, bf16=False, per_device_train_batch_size=4,
                      num_generations=2, max_steps=1, learning_rate=1e-2, beta=0.0, report_to=[],
                      save_strategy="no", logging_steps=1, max_completion_length=4096, seed=0,
                      dataloader_num_workers=0)
    with agent_rollout_func(tasks, config, engine=f"scripted:{ex.groups_script(tmp_path, ids)}",
                            trajectory_dir=str(tmp_path / "trajectories"), max_sessions=3) as rollouts:
        trainer = Watched(model=model, reward_funcs=rewards_seen, args=args, train_dataset=task_dataset(tasks),
                          processing_class=tokenizer, rollout_func=rollouts)
        trainer.train()
        records = rollouts.records

    assert trainer.state.global_step == 1
    changed = [n for n, p in model.named_parameters() if not torch.equal(p.detach(), before[n])]
    assert changed, "the optimizer step changed no parameter"

    # G rows per prompt, in TRL's order: the sampler's prompts, two of each task in a row
    assert len(records) == 4 and records[0].task_id == records[1].task_id != records[2].task_id == records[3].task_id
    assert sorted(r.slot for r in records) == [0, 0, 1, 1]
    placeholders = [r for r in records if r.placeholder]
    assert len(placeholders) == 1 and placeholders[0].abort_reason == "gateway", [r.abort_reason for r in records]
    assert placeholders[0].trained_tokens == 0 and placeholders[0].response_ids == [tokenizer.pad_token_id]
    assert rollouts._loop is None and rollouts._gateway is None          # closed: gateway and loop thread
    for r in records:
        if not r.placeholder:     # sample 0 fixed its task (graded by its tests), sample 1 did not
            assert r.reward == (1.0 if r.slot == 0 else 0.0) and r.trained_tokens > 0, (r.task_id, r.slot, r.reward)

    rewarded, inputs, loss_inputs = seen
    assert rewarded["completion_ids"] == [r.response_ids for r in records]
    assert rewarded["rewards"] == [None if r.placeholder else r.reward for r in records]
    # the mask TRL's loss uses, row for row, is our loss mask (then padding)
    trl_mask = inputs["completion_mask"] * inputs["tool_mask"]
    width = trl_mask.shape[1]
    for row, r in enumerate(records):
        assert trl_mask[row].tolist() == r.loss_mask + [0] * (width - len(r.loss_mask)), (r.task_id, r.slot)
        tokens = inputs["completion_ids"][row, :len(r.response_ids)].tolist()
        assert tokens == r.response_ids
        prompt = inputs["prompt_ids"][row][inputs["prompt_mask"][row].bool()].tolist()
        assert prompt == r.prompt_ids                                     # TRL's prompt ids are ours
    def rows(batch: dict) -> list[tuple]:
        mask = batch["completion_mask"] * batch["tool_mask"]
        return sorted((tuple(batch["completion_ids"][i].tolist()), tuple(mask[i].tolist()),
                       float(batch["advantages"][i])) for i in range(mask.shape[0]))
    assert rows(loss_inputs) == rows(inputs)                              # the loss trains exactly these rows
    advantages = inputs["advantages"].tolist()
    assert advantages[records.index(placeholders[0])] == 0.0
    assert any(abs(a) > 0.5 for a in advantages)                           # a group with a reward spread
