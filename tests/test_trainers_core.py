"""The shared core of the trainer adapters: one rollout slot → one record (agent_code/trainers/core.py)."""

from __future__ import annotations

import asyncio
import logging

import pytest

from agent_code.rollout.runner import INFRA_ABORTS, RolloutResult
from agent_code.trainers.core import LoopThread, main_sample, record_of
from agent_code.trajectory.samples import Sample


def result(reward: float | None = 1.0, abort: str | None = None) -> RolloutResult:
    r = RolloutResult("t/0", "t", 0, "t.0.x", "agent-code", reward=reward)
    if abort:
        r.abort(abort)
    return r


def sample(branch: str, prompt: list[int], response: list[int], mask: list[int], index: int = 0,
           versions: list | None = None) -> Sample:
    meta = {"weight_versions": versions} if versions else {}
    return Sample("t.0.x", index, branch, prompt + response, len(response), mask,
                  [-(i + 1) / 8 for i in range(len(response))], reward=1.0, rollout_id="t/0", metadata=meta)


def test_the_record_is_the_main_sample_and_reports_what_it_leaves_out(caplog):
    side = sample("side", [1, 2], [3], [1])
    main = sample("main", [1, 5], [6, 7, 8], [1, 0, 1], index=1,
                  versions=[{"turn": 0, "version": "v1", "start": 0, "end": 1},
                            {"turn": 2, "version": "v2", "start": 2, "end": 3}])
    sub = sample("sub-agent", [1, 9], [10, 11], [1, 1], index=2)
    with caplog.at_level(logging.WARNING, "agent_code.trainers"):
        rec = record_of(result(1.0), [side, main, sub], index=7, fallback_prompt_ids=[99], filler_id=0)
    assert main_sample([side, main, sub]) is main
    assert (rec.prompt_ids, rec.response_ids, rec.loss_mask) == ([1, 5], [6, 7, 8], [1, 0, 1])
    assert rec.logprobs == main.rollout_log_probs and rec.reward == 1.0 and rec.index == 7
    assert rec.counted and not rec.placeholder and rec.trained_tokens == 2
    assert rec.left_out.samples == 2 and rec.left_out.trained_tokens == 3
    assert rec.left_out.by_branch == {"side": 1, "sub-agent": 2}
    assert "leaves out 3 trained tokens of 2 other samples" in caplog.text
    assert rec.token_versions == ["v1", None, "v2"]


@pytest.mark.parametrize("reason", sorted(INFRA_ABORTS))
def test_an_infrastructure_failure_is_a_zero_mask_placeholder_with_its_reason(reason):
    main = sample("main", [1, 5], [6, 7], [1, 1], versions=[{"turn": 0, "version": "v1", "start": 0, "end": 2}])
    rec = record_of(result(1.0, reason), [main], index=0, fallback_prompt_ids=[99], filler_id=0)
    assert rec.placeholder and not rec.counted and rec.abort_reason == reason
    assert rec.loss_mask == [0, 0] and rec.trained_tokens == 0 and rec.reward == 0.0
    assert rec.token_versions == [None, None] and rec.status == "aborted"
    empty = record_of(result(None, reason), [], index=0, fallback_prompt_ids=[99, 98], filler_id=4)
    assert (empty.prompt_ids, empty.response_ids, empty.loss_mask, empty.logprobs) == ([99, 98], [4], [0], [0.0])


@pytest.mark.parametrize("reason", ["budget", "agent_crash", "ungradable", "empty_trajectory"])
def test_the_models_own_failures_count_with_their_tokens(reason):
    main = sample("main", [1], [6, 7], [1, 1])
    rec = record_of(result(None, reason), [main], index=0, fallback_prompt_ids=[99], filler_id=0)
    assert rec.counted and rec.reward == 0.0 and rec.loss_mask == [1, 1] and rec.status == "aborted"
    none = record_of(result(0.0, "empty_trajectory"), [], index=0, fallback_prompt_ids=[99], filler_id=3)
    assert none.counted and none.response_ids == [3] and none.loss_mask == [0]


def test_a_truncated_main_sample_keeps_its_status():
    main = sample("main", [1], [6], [1])
    main.status = "truncated"
    assert record_of(result(0.0), [main], index=0, fallback_prompt_ids=[1], filler_id=0).status == "truncated"


def test_the_loop_thread_runs_coroutines_and_cancels_on_interrupt():
    started = []

    async def slow():
        started.append(1)
        await asyncio.sleep(30)

    with LoopThread() as loop:
        assert loop.call(asyncio.sleep(0, result=5)) == 5
        with pytest.raises(ZeroDivisionError):
            loop.call(_boom())
        with pytest.raises(TimeoutError):
            loop.call(slow(), timeout=0.2)
        assert started == [1]
        tasks = loop.call(_pending_tasks())
        assert tasks == 0    # the timed-out coroutine was cancelled, not left running
    assert loop.loop.is_closed()


async def _boom():
    return 1 / 0


async def _pending_tasks() -> int:
    await asyncio.sleep(0.05)
    current = asyncio.current_task()
    return sum(1 for t in asyncio.all_tasks() if t is not current and not t.done())
