"""One rollout slot → one trainable record: what every trainer adapter is built on.

A trainer schedules a fixed number of slots (TRL and verl: one completion per prompt row, G rows
per prompt; slime: ``n_samples_per_prompt`` per group) and wants exactly one trainable sequence
back from each. An agent-code rollout gives a list of :class:`~agent_code.trajectory.samples.Sample`
(one per root-to-leaf chain of its session). The rule that turns one into the other:

**The sample of a rollout is its ``main`` sample**: the chain of the conversation the agent had
(its first root's chain to its latest turn: never a client's side request, a sub-agent, a
compaction segment, a retry branch, nor a dead end the model sent itself with its key). Every
other sample's trained tokens are *left out* of the record and reported in
:attr:`SlotRecord.left_out` (counts per branch, logged once per slot): a trainer that can take
several sequences per rollout (slime) takes :attr:`SlotRecord.samples` instead.

**Every slot yields a record**, so a group is always the size the trainer scheduled:

* a rollout that ended as the model's outcome (solved, failed, over budget, ungradable …) is its
  ``main`` sample with the rollout's reward (0.0 where it has none);
* an infrastructure failure (:data:`~agent_code.rollout.runner.INFRA_ABORTS`: the sandbox did
  not boot, the gateway failed …) says nothing about the policy: its record is a *placeholder*,
  every loss-mask entry 0 and reward 0.0, with ``abort_reason`` saying why. Its tokens add no
  loss; a trainer that normalises rewards per group sees a 0.0 there, and may filter the group
  (each adapter says how), as trainers filter flat groups themselves.

Weight versions come per response token (:attr:`SlotRecord.token_versions`, None where a token is
not trained) and per turn span (:attr:`SlotRecord.versions`), read from the sample's
``metadata["weight_versions"]``; adapters give them in their trainer's own form.

:class:`LoopThread` is the bridge for synchronous trainers (TRL's ``rollout_func``) and for
trainers that own the event loop (verl): the gateway and the rollouts run on a loop of their own
thread, and the trainer's thread waits for what it asked for.
"""

from __future__ import annotations

import asyncio
import logging
import threading
from collections import Counter
from dataclasses import dataclass, field
from typing import Any, Awaitable, Callable, Coroutine, Sequence, TypeVar

from agent_code.rollout.client import GatewayClient
from agent_code.rollout.runner import INFRA_ABORTS, RolloutConfig, RolloutResult, rollout_ids, run_rollout
from agent_code.tasks import Task
from agent_code.trajectory.samples import Sample

log = logging.getLogger("agent_code.trainers")

__all__ = ["LeftOut", "LoopThread", "SlotRecord", "record_of", "run_slots"]

T = TypeVar("T")


@dataclass
class LeftOut:
    """The trained tokens of a rollout that its record does not carry (samples other than main)."""

    samples: int = 0
    trained_tokens: int = 0
    by_branch: dict[str, int] = field(default_factory=dict)   # branch → trained tokens left out

    def __bool__(self) -> bool:
        return self.samples > 0


@dataclass
class SlotRecord:
    """One slot's trainable sequence: ``prompt_ids`` + ``response_ids``, ``loss_mask`` and
    ``logprobs`` over the response, the reward, and where it came from."""

    task_id: str
    slot: int                          # k: the slot's place in its group
    index: int                         # an int unique in the batch (slime's rollout_id, a row id)
    prompt_ids: list[int]
    response_ids: list[int]
    loss_mask: list[int]
    logprobs: list[float]
    reward: float
    status: str                        # completed | truncated | aborted
    abort_reason: str | None = None
    placeholder: bool = False          # an infrastructure failure: nothing here is trained
    versions: list[dict[str, Any]] = field(default_factory=list)   # {"turn","version","start","end"}
    left_out: LeftOut = field(default_factory=LeftOut)
    result: RolloutResult | None = None
    samples: list[Sample] = field(default_factory=list)           # every sample of the rollout

    @property
    def counted(self) -> bool:
        """Whether this slot says something about the policy (not an infrastructure failure)."""
        return not self.placeholder

    @property
    def trained_tokens(self) -> int:
        return sum(self.loss_mask)

    @property
    def token_versions(self) -> list[str | None]:
        """The weight version that sampled each response token (None where it is not trained)."""
        out: list[str | None] = [None] * len(self.response_ids)
        for span in self.versions:
            for i in range(max(0, int(span["start"])), min(len(out), int(span["end"]))):
                if self.loss_mask[i]:
                    out[i] = str(span["version"])
        return out


def main_sample(samples: Sequence[Sample]) -> Sample | None:
    """The sample of a rollout (see the module doc): its ``main`` sample, if it has one."""
    return next((s for s in samples if s.branch == "main"), None)


def record_of(result: RolloutResult, samples: Sequence[Sample], *, index: int,
              fallback_prompt_ids: Sequence[int], filler_id: int) -> SlotRecord:
    """The record of one finished rollout (a pure function). ``fallback_prompt_ids`` is the
    prompt of a placeholder whose rollout recorded no turn; ``filler_id`` (a pad or end-of-text
    id) is the one masked response token of a record that has no response (trainers reject an
    empty completion)."""
    main = main_sample(samples)
    placeholder = result.abort_reason in INFRA_ABORTS
    left = LeftOut()
    for s in samples:
        if s is not main and s.trained_tokens:
            left.samples += 1
            left.trained_tokens += s.trained_tokens
            left.by_branch[s.branch] = left.by_branch.get(s.branch, 0) + s.trained_tokens
    if left:
        log.warning("rollout %s: its record leaves out %d trained tokens of %d other samples (%s)",
                    result.rollout_id, left.trained_tokens, left.samples,
                    ", ".join(f"{b} {n}" for b, n in sorted(left.by_branch.items())))
    if main is not None:
        prompt = list(main.tokens[:main.prompt_length])
        response = list(main.tokens[main.prompt_length:])
        mask, logprobs = list(main.loss_mask), list(main.rollout_log_probs)
        versions = list(main.metadata.get("weight_versions") or ())
        status = main.status
    else:
        prompt, response, mask, logprobs, versions, status = list(fallback_prompt_ids), [], [], [], [], "aborted"
    if result.abort_reason is not None:
        status = "aborted" if status == "completed" else status
    if placeholder:
        mask = [0] * len(response)
        versions = []
    if not response:
        response, mask, logprobs = [filler_id], [0], [0.0]
    reward = 0.0 if placeholder or result.reward is None else float(result.reward)
    return SlotRecord(task_id=result.task_id, slot=result.sample, index=index, prompt_ids=prompt,
                      response_ids=response, loss_mask=mask, logprobs=logprobs, reward=reward, status=status,
                      abort_reason=result.abort_reason, placeholder=placeholder, versions=versions,
                      left_out=left, result=result, samples=list(samples))


async def run_slots(slots: Sequence[tuple[Task, int]], config: RolloutConfig, gateway_url: str, *,
                    admin_token: str | None = None, fallback_prompt: Callable[[Task], Sequence[int]],
                    filler_id: int, first_index: int = 0,
                    on_record: Callable[[SlotRecord], None] | None = None) -> list[SlotRecord]:
    """Run one rollout per ``(task, k)`` slot, at most ``config.concurrency`` at a time, and
    return one record per slot in the order given (every slot yields one: see the module doc).
    Record ``i`` gets index ``first_index + i``. Cancelling stops the rollouts in flight (they
    end as ``interrupted``) and re-raises."""
    gate = asyncio.Semaphore(max(1, config.concurrency))

    async with GatewayClient(gateway_url, admin_token=admin_token) as client:
        async def one(i: int, task: Task, k: int) -> SlotRecord:
            async with gate:
                result, samples = await run_rollout(task, k, config, client, ids=rollout_ids(task.id, k))
            record = record_of(result, samples, index=first_index + i, fallback_prompt_ids=fallback_prompt(task),
                               filler_id=filler_id)
            if on_record is not None:
                on_record(record)
            return record

        jobs = [asyncio.ensure_future(one(i, task, k)) for i, (task, k) in enumerate(slots)]
        try:
            return list(await asyncio.gather(*jobs))
        finally:
            for job in jobs:
                job.cancel()
            await asyncio.gather(*jobs, return_exceptions=True)


def group_summary(records: Sequence[SlotRecord]) -> str:
    """One line about a batch of records: counted, placeholders by reason, tokens left out."""
    reasons = Counter(r.abort_reason for r in records if r.placeholder)
    left = sum(r.left_out.trained_tokens for r in records)
    parts = [f"{sum(r.counted for r in records)}/{len(records)} counted"]
    if reasons:
        parts.append("placeholders: " + ", ".join(f"{k} {n}" for k, n in sorted(reasons.items())))
    if left:
        parts.append(f"{left} trained tokens left out (other samples)")
    return "; ".join(parts)


class LoopThread:
    """An event loop on a thread of its own, for trainers whose code is synchronous (or runs a
    loop agent-code must not block): ``call(coro)`` runs a coroutine there and waits for it."""

    def __init__(self, name: str = "agent-code-rollouts") -> None:
        self.loop = asyncio.new_event_loop()
        self._thread = threading.Thread(target=self.loop.run_forever, name=name, daemon=True)
        self._thread.start()

    def call(self, coro: Coroutine[Any, Any, T] | Awaitable[T], timeout: float | None = None) -> T:
        """Run ``coro`` on the loop and wait for its result (its exception is raised here);
        a KeyboardInterrupt while waiting cancels it."""
        future = asyncio.run_coroutine_threadsafe(_awaited(coro), self.loop)
        try:
            return future.result(timeout)
        except BaseException:
            future.cancel()
            raise

    def close(self) -> None:
        if self.loop.is_closed():
            return
        self.loop.call_soon_threadsafe(self.loop.stop)
        self._thread.join(timeout=30)
        if not self._thread.is_alive():
            self.loop.close()

    def __enter__(self) -> "LoopThread":
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


async def _awaited(awaitable: Awaitable[T]) -> T:
    return await awaitable
