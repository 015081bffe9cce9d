"""The trainer-facing API: groups of rollouts, their advantages, samples as padded arrays.

The example (examples/trainer_groups.py) runs for real: an in-process gateway on the scripted
engine, the bundled tasks in local sandboxes, graded by their tests."""

from __future__ import annotations

import math
import re
import subprocess
import sys
from pathlib import Path

import pytest

from agent_code.rollout.groups import INFRA_ABORTS, Group
from agent_code.rollout.runner import RolloutResult
from agent_code.trajectory.batch import as_slime, pad_batch
from agent_code.trajectory.samples import Sample

REPO = Path(__file__).resolve().parents[1]
EXAMPLE = REPO / "examples" / "trainer_groups.py"


def result(k: int, reward: float | None, abort: str | None = None) -> RolloutResult:
    r = RolloutResult(f"t/{k}", "t", k, f"t.{k}.x", "agent-code", reward=reward)
    if abort:
        r.abort(abort)
    return r


def sample(k: int, prompt: list[int], response: list[int], mask: list[int], reward: float | None = 1.0,
           index: int = 0) -> Sample:
    return Sample(f"t.{k}.x", index, "main", prompt + response, len(response), mask,
                  [-(i + 1) / 8 for i in range(len(response))], reward=reward, rollout_id=f"t/{k}")


def test_group_advantages_are_group_normalised():
    finished = [(result(1, 0.0), [sample(1, [1], [2], [1], 0.0)]),
                (result(0, 1.0), [sample(0, [1], [3], [1], 1.0)]),
                (result(2, None, "budget"), [sample(2, [1], [4], [1], None)]),
                (result(3, 1.0), [sample(3, [1], [5], [1]), sample(3, [1], [6, 7], [1, 1], index=1)])]
    group = Group.of("t", finished)
    assert [r.sample for r in group.results] == [0, 1, 2, 3]            # in sample order
    assert group.rewards == [1.0, 0.0, 0.0, 1.0]                         # the budget abort counts as 0
    assert group.spread
    adv = group.advantages()
    assert [round(a, 4) for a in adv] == [1.0, -1.0, -1.0, 1.0]         # (r - 0.5) / 0.5
    assert group.advantages("none") == [0.5, -0.5, -0.5, 0.5]
    # every sample gets its rollout's advantage (rollout 3 has two samples)
    assert [s.rollout_id for s in group.samples] == ["t/0", "t/1", "t/2", "t/3", "t/3"]
    assert [round(a, 4) for a in group.sample_advantages()] == [1.0, -1.0, -1.0, 1.0, 1.0]
    assert math.isclose(sum(adv), 0.0, abs_tol=1e-9)


@pytest.mark.parametrize("reason", sorted(INFRA_ABORTS))
def test_infrastructure_failures_are_left_out_of_the_group(reason):
    finished = [(result(0, 1.0), [sample(0, [1], [2], [1])]),
                (result(1, 0.0, reason), [sample(1, [1], [3], [1], 0.0)]),
                (result(2, 1.0), [sample(2, [1], [4], [1])])]
    group = Group.of("t", finished)
    assert [r.sample for r in group.results] == [0, 2]
    assert [r.sample for r in group.left_out] == [1]
    assert [s.rollout_id for s in group.samples] == ["t/0", "t/2"]      # its samples go too
    assert not group.spread and group.advantages() == [0.0, 0.0]


def test_pad_batch_aligns_masks_and_logprobs_on_the_tokens():
    samples = [sample(0, [10, 11], [12, 13, 14], [1, 0, 1]), sample(1, [10], [15], [1], reward=None)]
    batch = pad_batch(samples, pad_id=-1, advantages=[0.5, -2.0], tensors=False)
    assert batch["input_ids"] == [[10, 11, 12, 13, 14], [10, 15, -1, -1, -1]]
    assert batch["attention_mask"] == [[1, 1, 1, 1, 1], [1, 1, 0, 0, 0]]
    assert batch["loss_mask"] == [[0, 0, 1, 0, 1], [0, 1, 0, 0, 0]]
    assert batch["logprobs"] == [[0.0, 0.0, -0.125, -0.25, -0.375], [0.0, -0.125, 0.0, 0.0, 0.0]]
    assert batch["advantages"] == [[0.0, 0.0, 0.5, 0.0, 0.5], [0.0, -2.0, 0.0, 0.0, 0.0]]
    assert batch["rewards"] == [1.0, 0.0]
    assert batch["prompt_lengths"] == [2, 1] and batch["response_lengths"] == [3, 1]
    torch = pytest.importorskip("torch")
    tensors = pad_batch(samples, max_length=6)
    assert tensors["input_ids"].shape == (2, 6) and tensors["input_ids"].dtype == torch.long
    assert tensors["logprobs"].dtype == torch.float32


def test_pad_batch_refuses_what_it_would_have_to_cut_or_guess():
    long = sample(0, [1, 2], [3, 4], [1, 1])
    with pytest.raises(ValueError, match="over max_length=3"):
        pad_batch([long], max_length=3, tensors=False)
    bad = sample(0, [1], [2, 3], [1, 1])
    bad.loss_mask = [1]
    with pytest.raises(ValueError, match="must cover its 2 response tokens"):
        pad_batch([bad], tensors=False)
    with pytest.raises(ValueError, match="1 advantages for 2 samples"):
        pad_batch([long, long], advantages=[1.0], tensors=False)


def test_as_slime_has_slimes_sample_fields():
    s = sample(0, [1, 2], [3], [1])
    d = as_slime(s, group_index=4, index=9)
    assert {"group_index", "index", "prompt", "tokens", "response", "response_length", "label", "reward",
            "loss_mask", "rollout_log_probs", "status", "metadata"} <= set(d)
    assert d["tokens"] == [1, 2, 3] and d["response_length"] == 1 and d["loss_mask"] == [1]
    assert d["group_index"] == 4 and d["index"] == 9 and d["metadata"]["rollout"] == "t/0"
    assert d["rollout_id"] is None and as_slime(s, rollout_id=3)["rollout_id"] == 3
    s.metadata["weight_versions"] = [{"turn": 0, "version": "v1", "start": 0, "end": 1},
                                     {"turn": 2, "version": 7, "start": 1, "end": 1}]
    assert as_slime(s)["weight_versions"] == ["v1", "7"]                  # slime's per-turn list of str
    d["tokens"].append(99)
    assert s.tokens == [1, 2, 3]                                           # a copy


def run_example(*args: str) -> str:
    done = subprocess.run([sys.executable, str(EXAMPLE), *args], capture_output=True, text=True, timeout=600,
                          cwd=REPO)
    assert done.returncode == 0, done.stdout + done.stderr
    return done.stdout


def test_the_example_streams_groups_and_drops_the_flat_one():
    out = run_example()
    kept = re.findall(r"^group (\S+): rewards \[(.*?)\] -> advantages \[(.*?)\]", out, re.M)
    assert sorted(t for t, _, _ in kept) == ["pager-last-page", "slugs-lowercase", "thermo-fahrenheit"], out
    for _, rewards, advantages in kept:   # sample 0 fixed it (graded by the tests), sample 1 did not
        assert rewards == "1.0, 0.0" and advantages == "1.0, -1.0"
    assert re.search(r"^dropped wordcount-whitespace: rewards \[1\.0, 1\.0\]", out, re.M), out
    assert re.search(r"^batch: 6 samples; input_ids \[6, \d+\]", out, re.M), out


def test_the_stream_stops_at_want_and_stops_the_rest():
    out = run_example("--want", "1")
    assert len(re.findall(r"^group ", out, re.M)) == 1, out
    assert re.search(r"^batch: 2 samples;", out, re.M), out
