"""TRL's ``GRPOTrainer`` on agent-code rollouts: a ``rollout_func`` and the reward function it feeds.

    from agent_code.trainers.trl import agent_rollout_func, reward_from_rollouts, task_dataset
    rollouts = agent_rollout_func(tasks, RolloutConfig(...), engine="vllm:http://...")
    trainer = GRPOTrainer(model, reward_funcs=reward_from_rollouts, train_dataset=task_dataset(tasks),
                          rollout_func=rollouts, args=GRPOConfig(num_generations=G, ...))
    trainer.train(); rollouts.close()

What TRL 1.16 does with a ``rollout_func`` (read in its ``grpo_trainer.py``) and how this adapter
meets it:

* TRL's sampler repeats each dataset prompt ``num_generations`` (G) times in a row and calls
  ``rollout_func(prompts, trainer)`` (synchronously) with that list; it wants exactly one
  completion per entry, in order, and groups the rewards with ``view(-1, G)``. Every entry here
  is one rollout slot (:func:`~agent_code.trainers.core.run_slots`: every slot yields a record,
  so a group is always G rows); slot ``k`` is the entry's place among the batch's entries of the
  same task.
* **The task of a prompt**: the prompt (a string, or a chat whose last user message is one) is a
  task id, or a task's problem statement, exactly (surrounding whitespace aside). A prompt that
  names no task, or a statement two tasks share, is an error, never a guess.
  :func:`task_dataset` builds the dataset (prompt = the task id).
* ``prompt_ids`` and ``completion_ids`` are the record's own ids: TRL trains on exactly these
  (it left-pads the prompts, right-pads the completions, and does not cut a ``rollout_func``'s
  completions to ``max_completion_length``; neither does this adapter unless asked:
  ``max_completion_length=`` cuts a longer completion — ids, mask, logprobs alike — and trains
  the part it keeps).
* **``mask_truncated_completions`` is refused** (a ``ValueError`` on the first call): TRL masks
  out a whole row whose last id is no end-of-turn or pad id, and a rollout's completion ends
  wherever its last recorded turn ended — a model that writes its last turn up to the session's
  token cap would have its failure masked, its zero turned into no signal. Our ``env_mask``
  already leaves out every token that was not sampled.
* ``env_mask`` is our loss mask. TRL multiplies it into its completion mask (pads: 0), and pads
  the ``env_mask`` itself with **1**: a mask shorter than its completion would train the tail, so
  a record whose ids, mask and logprobs differ in length is refused.
* ``logprobs`` are the engine's (0.0 on tokens not sampled); TRL uses them for its vLLM
  importance-sampling correction and off-policy masking only.
* The reward goes as the extra key :data:`REWARD_KEY`, which TRL hands to the reward functions;
  :func:`reward_from_rollouts` reads it. An infrastructure failure's placeholder row (zero mask)
  gets ``None`` there: TRL makes it NaN, leaves it out of its group's mean and std, and gives it
  advantage 0 (its own rule for unscorable completions) — its group keeps its G rows.
"""

from __future__ import annotations

import itertools
import logging
from contextlib import AbstractAsyncContextManager
from dataclasses import dataclass
from typing import Any, Iterable, Sequence

from agent_code.rollout.runner import RolloutConfig
from agent_code.tasks import Task
from agent_code.trainers.core import LoopThread, SlotRecord, group_summary, run_slots

log = logging.getLogger("agent_code.trainers.trl")

__all__ = ["REWARD_KEY", "VERSIONS_KEY", "AgentRolloutFunc", "TaskIndex", "agent_rollout_func", "reward_from_rollouts",
           "rollout_output", "task_dataset"]

REWARD_KEY = "agent_code_reward"          # the rollout's reward (None: an infrastructure failure's placeholder)
TASK_KEY = "agent_code_task_id"
ABORT_KEY = "agent_code_abort_reason"
VERSIONS_KEY = "agent_code_weight_versions"   # per completion token: the weights that sampled it (None: not trained)


class TaskIndex:
    """Which task a TRL prompt names: its id or its problem statement, exactly."""

    def __init__(self, tasks: Iterable[Task]) -> None:
        self.by_key: dict[str, Task] = {}
        for task in tasks:
            for key in {task.id, task.problem_statement.strip()}:
                other = self.by_key.get(key)
                if other is not None and other is not task:
                    raise ValueError(f"tasks {other.id!r} and {task.id!r} share the prompt {key[:80]!r}: "
                                     "a prompt must name one task")
                self.by_key[key] = task

    def task_of(self, prompt: Any) -> Task:
        text = prompt_text(prompt)
        task = self.by_key.get(text.strip()) if text is not None else None
        if task is None:
            raise ValueError(f"the prompt {str(prompt)[:120]!r} names no task: a prompt must be a task id or a "
                             "task's problem statement (agent_code.trainers.trl.task_dataset builds the dataset)")
        return task


def prompt_text(prompt: Any) -> str | None:
    """A prompt's text: the string itself, or a chat's last user message (its text blocks joined)."""
    if isinstance(prompt, str):
        return prompt
    if isinstance(prompt, list):
        users = [m for m in prompt if isinstance(m, dict) and m.get("role") == "user"]
        content = users[-1].get("content") if users else None
        if isinstance(content, str):
            return content
        if isinstance(content, list):
            return "".join(b.get("text", "") for b in content if isinstance(b, dict) and b.get("type") == "text")
    return None


def task_dataset(tasks: Iterable[Task]) -> Any:
    """A ``datasets.Dataset`` with one row per task: ``prompt`` (the task id) and ``task_id``."""
    from datasets import Dataset
    return Dataset.from_list([{"prompt": t.id, "task_id": t.id} for t in tasks])


def slots_of(prompts: Sequence[Any], index: TaskIndex) -> list[tuple[Task, int]]:
    """One ``(task, k)`` slot per prompt: ``k`` counts the earlier prompts of the same task."""
    seen: dict[str, int] = {}
    slots = []
    for prompt in prompts:
        task = index.task_of(prompt)
        slots.append((task, seen.get(task.id, 0)))
        seen[task.id] = seen.get(task.id, 0) + 1
    return slots


def rollout_output(records: Sequence[SlotRecord], *, max_completion_length: int | None = None,
                   vocab_size: int | None = None) -> dict[str, list[Any]]:
    """The dict a ``rollout_func`` returns, one row per record, in order (a pure function). Refuses
    a record whose response ids, loss mask and logprobs differ in length (TRL pads ``env_mask``
    with 1s) or that holds an id outside the trainer's vocabulary (``vocab_size``)."""
    out: dict[str, list[Any]] = {"prompt_ids": [], "completion_ids": [], "logprobs": [], "env_mask": [],
                                 REWARD_KEY: [], TASK_KEY: [], ABORT_KEY: [], VERSIONS_KEY: []}
    cut = 0
    for rec in records:
        response, mask, logprobs = list(rec.response_ids), [int(m) for m in rec.loss_mask], list(rec.logprobs)
        if not len(response) == len(mask) == len(logprobs) or not response or not rec.prompt_ids:
            raise ValueError(f"record {rec.index} ({rec.task_id}/{rec.slot}): {len(response)} response ids, "
                             f"{len(mask)} mask entries, {len(logprobs)} logprobs, {len(rec.prompt_ids)} prompt ids; "
                             "they must be equal and non-empty")
        if any(m not in (0, 1) for m in mask):
            raise ValueError(f"record {rec.index} ({rec.task_id}/{rec.slot}): its loss mask is not 0/1")
        if vocab_size is not None:
            bad = [t for t in itertools.chain(rec.prompt_ids, response) if not 0 <= t < vocab_size]
            if bad:
                raise ValueError(f"record {rec.index} ({rec.task_id}/{rec.slot}) holds token id {bad[0]}, outside the "
                                 f"trainer's vocabulary of {vocab_size}: the gateway's tokenizer is not the model's")
        versions = rec.token_versions
        if max_completion_length is not None and len(response) > max_completion_length:
            cut += 1
            n = max_completion_length
            response, mask, logprobs, versions = response[:n], mask[:n], logprobs[:n], versions[:n]
        out["prompt_ids"].append(list(rec.prompt_ids))
        out["completion_ids"].append(response)
        out["logprobs"].append(logprobs)
        out["env_mask"].append(mask)
        out[REWARD_KEY].append(None if rec.placeholder else float(rec.reward))
        out[TASK_KEY].append(rec.task_id)
        out[ABORT_KEY].append(rec.abort_reason)
        out[VERSIONS_KEY].append(versions)
    if cut:
        log.warning("%d of %d completions cut to max_completion_length=%d", cut, len(records), max_completion_length)
    return out


def reward_from_rollouts(prompts: Sequence[Any], completions: Sequence[Any], **kwargs: Any) -> list[float | None]:
    """A TRL reward function: each row's rollout reward, as the rollout_func handed it over
    (None for an infrastructure failure: TRL leaves the row out of its group's statistics)."""
    rewards = kwargs.get(REWARD_KEY)
    if rewards is None or len(rewards) != len(completions):
        raise ValueError(f"reward_from_rollouts needs the {REWARD_KEY!r} of every row, which "
                         "agent_code.trainers.trl.agent_rollout_func returns: is it the trainer's rollout_func?")
    return [None if r is None else float(r) for r in rewards]


@dataclass
class _Gateway:
    url: str
    admin_token: str | None
    context: AbstractAsyncContextManager[Any] | None = None   # a local gateway this adapter started


class AgentRolloutFunc:
    """A ``rollout_func`` for TRL's ``GRPOTrainer`` (see the module doc). ``engine`` is what
    :func:`~agent_code.rollout.groups.local_gateway` takes (an ``--engine`` spec, or an engine
    object where it takes one): an in-process gateway on it is started on first use, on a loop
    thread of its own, and stopped by :meth:`close`; or ``gateway_url`` (+ ``admin_token``) names
    a running gateway. One instance per training process (each runs its own slots)."""

    def __init__(self, tasks: Iterable[Task], config: RolloutConfig, *, engine: Any = None,
                 gateway_url: str | None = None, admin_token: str | None = None,
                 max_completion_length: int | None = None, trajectory_dir: str | None = None,
                 **gateway_options: Any) -> None:
        if (engine is None) == (gateway_url is None):
            raise ValueError("give an engine (an in-process gateway is started on it) or a gateway_url, not both")
        self.index = TaskIndex(tasks)
        self.config = config
        self.engine, self.gateway_options, self.trajectory_dir = engine, gateway_options, trajectory_dir
        self.max_completion_length = max_completion_length
        self.records: list[SlotRecord] = []          # the last call's records
        self._next_index = 0
        self._loop: LoopThread | None = None
        self._gateway = _Gateway(gateway_url, admin_token) if gateway_url else None

    def __call__(self, prompts: list[Any], trainer: Any) -> dict[str, list[Any]]:
        refuse_truncation_masking(trainer)
        slots = slots_of(prompts, self.index)
        tokenizer = _tokenizer_of(trainer)
        filler = tokenizer.pad_token_id if tokenizer.pad_token_id is not None else tokenizer.eos_token_id
        gateway = self._start()
        assert self._loop is not None
        records = self._loop.call(run_slots(
            slots, self.config, gateway.url, admin_token=gateway.admin_token, filler_id=filler,
            fallback_prompt=lambda task: tokenizer.encode(task.problem_statement, add_special_tokens=False) or [filler],
            first_index=self._next_index))
        self._next_index += len(records)
        self.records = records
        log.info("rollout_func: %d rows: %s", len(records), group_summary(records))
        limit = getattr(getattr(trainer, "args", None), "max_completion_length", None)
        longest = max((len(r.response_ids) for r in records), default=0)
        if self.max_completion_length is None and limit is not None and longest > limit:
            log.warning("a completion of %d tokens is over the trainer's max_completion_length=%d; TRL trains on "
                        "it whole (pass max_completion_length= to agent_rollout_func to cut)", longest, limit)
        return rollout_output(records, max_completion_length=self.max_completion_length, vocab_size=len(tokenizer))

    def _start(self) -> _Gateway:
        if self._loop is None:
            self._loop = LoopThread("agent-code-trl-rollouts")
        if self._gateway is None:
            from agent_code.rollout.groups import local_gateway
            assert self.engine is not None
            context = local_gateway(self.engine, trajectory_dir=self.trajectory_dir, **self.gateway_options)
            started = self._loop.call(context.__aenter__())
            self._gateway = _Gateway(started.url, started.admin_token, context)
        return self._gateway

    def close(self) -> None:
        """Stop the in-process gateway (if this adapter started one) and the loop thread."""
        gateway, loop = self._gateway, self._loop
        if loop is None:
            return
        try:
            if gateway is not None and gateway.context is not None:
                self._gateway = None
                loop.call(gateway.context.__aexit__(None, None, None))
        finally:
            self._loop = None
            loop.close()

    def __enter__(self) -> "AgentRolloutFunc":
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


def agent_rollout_func(tasks: Iterable[Task], config: RolloutConfig, **options: Any) -> AgentRolloutFunc:
    """A TRL ``rollout_func`` running agent-code rollouts of ``tasks`` (options: see
    :class:`AgentRolloutFunc`: ``engine=`` an ``--engine`` spec or ``gateway_url=`` + ``admin_token=``,
    ``max_completion_length=``, ``trajectory_dir=``, and the gateway's options such as ``tokenizer=``)."""
    return AgentRolloutFunc(tasks, config, **options)


def refuse_truncation_masking(trainer: Any) -> None:
    """Refuse a trainer that masks "truncated" completions (see the module doc): whether a
    rollout's completion ends in an end-of-turn id is the model's to decide."""
    if getattr(getattr(trainer, "args", None), "mask_truncated_completions", False):
        raise ValueError("agent-code rollouts cannot be trained with mask_truncated_completions=True: TRL would mask "
                         "out every rollout whose last turn the model wrote up to its token cap, turning its reward "
                         "into no signal (the env_mask already leaves out every token not sampled)")


def _tokenizer_of(trainer: Any) -> Any:
    processing = getattr(trainer, "processing_class", None)
    tokenizer = getattr(processing, "tokenizer", processing)
    if tokenizer is None or not hasattr(tokenizer, "encode"):
        raise ValueError("the trainer has no tokenizer (processing_class) to encode placeholder prompts with")
    return tokenizer
