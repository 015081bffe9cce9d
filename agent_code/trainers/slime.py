"""slime's custom generate function over agent-code rollouts (slime: GitHub THUDM/slime).

    --custom-generate-function-path agent_code.trainers.slime.generate
    --custom-reward-post-process-path agent_code.trainers.slime.post_process_rewards
    --input-key prompt --label-key label

slime calls ``generate(args, sample, sampling_params, evaluation=False)`` once per sample it
schedules (``n_samples_per_prompt`` per prompt, each on slime's own event loop). Each call is one
agent-code rollout (:func:`agent_code.trainers.core.run_slots`, one slot) of the task whose id is
the sample's ``label``, looked up in the tasks file of the configuration; the row's ``prompt`` is
not read (slime filters and logs it: give it the task's problem statement, as :func:`slime_rows`
does). The agent runs in its sandbox against an in-process gateway, started once per process on
the first call, in front of SGLang at slime's router (``args.sglang_router_ip/port``; SGLang's
``meta_info["weight_version"]`` labels each turn).

What comes back, in slime's own fields (``tokens``, ``response_length``, ``loss_mask`` and
``rollout_log_probs`` over the response, ``reward``, ``status``, ``weight_versions`` (one per
trained turn), ``metadata``; ids as ints):

* ``samples: "all"`` (the default): a list, the rollout's ``main`` sample first, then each other
  sample with trained tokens (a sub-agent, a compaction segment, a retry), all with the same int
  ``rollout_id`` (slime's rule: the sample's ``rollout_id``, else its ``index``) and the rollout's
  reward, so slime's loss averages per rollout. slime's default reward normalisation assumes
  ``n_samples_per_prompt`` samples per prompt: use :func:`post_process_rewards`, which
  normalises one reward per rollout within each prompt's group.
* ``samples: "main"``: the rollout's record alone (:mod:`agent_code.trainers.core`: its ``main``
  sample; the trained tokens it leaves out are logged), as a bare ``Sample``: slime's one-sample
  shape, which every slime path takes as it is (its default reward normalisation, partial
  rollouts, the fully-async rollout's re-queueing of ``ABORTED`` groups — none of which look
  inside a list).
* evaluation: the record alone, in the mode's shape (one reward per rollout in slime's eval means).

Statuses: an infrastructure failure (``core``'s placeholder: zero loss mask, reward 0.0,
``remove_sample``) and a rollout stopped by slime's ``abort()`` are ``ABORTED`` (the fully-async
rollout gives them back to the data buffer); a rollout that ended as the model's outcome — over
budget, crashed, ungradable — is ``COMPLETED`` (``TRUNCATED`` where its sample was cut by the
length budget) and counts with its reward, so a policy can never have its zero re-queued away.

The reward is the grader's: slime's reward model is never called (the reward is set), and
``--group-rm``, which would overwrite it with a group reward model's, is refused. The list shape
is not for ``--partial-rollout`` or the fully-async rollout (they read a group's samples, not
lists of them): use ``samples: "main"`` there.

Abort: slime's ``abort()`` sets ``GenerateState.aborted``; while it is set a rollout in flight is
cancelled (its sandbox torn down, its session ended) and comes back as an ``ABORTED``
placeholder (``abort_reason: "interrupted"``), and no new one starts.

Configuration: ``AGENT_CODE_SLIME_CONFIG``, a JSON object or the path of a JSON file:
``tasks`` (required: the tasks JSONL), ``engine`` (an ``--engine`` spec; default
``sglang:http://<router>``), ``tokenizer`` (default ``args.hf_checkpoint``), ``samples``
(``all`` | ``main``), ``rollout`` (:class:`~agent_code.rollout.runner.RolloutConfig` fields:
``sandbox``, ``budget``, ``max_steps`` …) and ``gateway`` (``build_gateway`` options:
``trajectory_dir``, ``max_turns`` …). slime's ``sampling_params`` set each session's sampling
(``temperature``, ``top_p``, ``top_k``, ``sampling_seed``) and its turn cap (``max_new_tokens``:
``--rollout-max-response-len``); ``--rollout-max-context-len`` is the session's context budget.
"""

from __future__ import annotations

import asyncio
import contextlib
import dataclasses
import itertools
import json
import logging
import os
import statistics
import sys
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from agent_code.rollout.runner import RolloutConfig, RolloutResult
from agent_code.tasks import Task, load_tasks
from agent_code.trainers.core import SlotRecord, main_sample, record_of, run_slots
from agent_code.trajectory.batch import as_slime
from agent_code.trajectory.samples import Sample

log = logging.getLogger("agent_code.trainers.slime")

__all__ = ["CONFIG_ENV", "SlimeRollouts", "generate", "post_process_rewards", "rollout_advantages", "slime_aborted",
           "slime_rows", "slime_status", "to_slime"]

CONFIG_ENV = "AGENT_CODE_SLIME_CONFIG"
FILLER_ID = 0            # the masked token of a placeholder without tokens (slime's own abort results use 0)
SAMPLE_MODES = ("all", "main")
# slime's advantage estimators whose rewards its default post-process normalises per group
_GROUP_NORMALISED = ("grpo", "gspo", "cispo", "reinforce_plus_plus_baseline")
_STD_SCALED = ("grpo", "gspo", "cispo")


def slime_aborted() -> bool:
    """Whether slime's ``abort()`` is under way: ``GenerateState.aborted`` of the rollout module
    that called us (not imported here: where it is not loaded, nothing can abort)."""
    module = sys.modules.get("slime.rollout.sglang_rollout")
    state_cls = getattr(module, "GenerateState", None)
    state = getattr(state_cls, "_instances", {}).get(state_cls) if state_cls is not None else None
    return bool(getattr(state, "aborted", False))


def slime_status(record: SlotRecord, sample: Sample) -> str:
    """slime's ``Status`` value of ``sample`` of ``record``: ``aborted`` only for a placeholder
    (an infrastructure failure or slime's own abort); a model's outcome is ``completed``, or
    ``truncated`` where the sample was cut by the length budget."""
    if record.placeholder:
        return "aborted"
    return "truncated" if sample.status == "truncated" else "completed"


def _record_sample(record: SlotRecord) -> Sample:
    """The record as an agent-code sample (the main one, or the placeholder)."""
    main = main_sample(record.samples)
    meta = dict(main.metadata) if main is not None else {}
    meta.pop("weight_versions", None)
    if record.versions:
        meta["weight_versions"] = list(record.versions)
    result = record.result
    return Sample(session_id=result.session_id if result else "", index=main.index if main else 0, branch="main",
                  tokens=list(record.prompt_ids) + list(record.response_ids), response_length=len(record.response_ids),
                  loss_mask=list(record.loss_mask), rollout_log_probs=list(record.logprobs), reward=record.reward,
                  status=record.status, response=main.response if main is not None and record.counted else "",
                  rollout_id=result.rollout_id if result else None, metadata=meta)


def to_slime(record: SlotRecord, base: Any, *, rollout_id: int, every_sample: bool) -> list[Any]:
    """``record`` as slime ``Sample`` s made from ``base`` (the sample slime handed in: its
    prompt, label, index, group and fields we do not know stay): the record's main sample first,
    then (``every_sample``) each other sample with trained tokens, all with ``rollout_id`` and the
    rollout's reward."""
    from slime.utils.types import Sample as SlimeSample

    ours = [_record_sample(record)]
    if every_sample and record.counted:
        main = main_sample(record.samples)
        ours += [s for s in record.samples if s is not main and s.trained_tokens]
    report = {"task_id": record.task_id, "abort_reason": record.abort_reason, "placeholder": record.placeholder,
              "agent_code_samples": len(ours)}
    out = []
    for sample in ours:
        fields = as_slime(sample, rollout_id=rollout_id)
        out.append(dataclasses.replace(
            base, rollout_id=int(rollout_id), tokens=[int(t) for t in fields["tokens"]],
            response=fields["response"], response_length=int(fields["response_length"]),
            loss_mask=[int(m) for m in fields["loss_mask"]],
            rollout_log_probs=[float(x) for x in fields["rollout_log_probs"]], reward=float(record.reward),
            status=SlimeSample.Status(slime_status(record, sample)), weight_versions=fields["weight_versions"],
            remove_sample=record.placeholder, metadata={**(base.metadata or {}), **fields["metadata"], **report}))
    return out


def _sampling(params: Mapping[str, Any]) -> dict[str, Any]:
    """The session sampling of slime's ``sampling_params`` (unset and disabled values left out)."""
    out = {key: params[key] for key in ("temperature", "top_p") if params.get(key) is not None}
    if params.get("top_k") is not None and int(params["top_k"]) > 0:
        out["top_k"] = int(params["top_k"])
    if params.get("sampling_seed") is not None:
        out["seed"] = int(params["sampling_seed"])
    return out


def rollout_config(base: RolloutConfig, args: Any, sampling_params: Mapping[str, Any]) -> RolloutConfig:
    """``base`` with slime's sampling, its per-turn cap (``max_new_tokens``) and its context budget
    (``args.rollout_max_context_len``) where slime sets them; one rollout per call."""
    max_new = sampling_params.get("max_new_tokens")
    max_context = getattr(args, "rollout_max_context_len", None)
    return dataclasses.replace(base, sampling={**base.sampling, **_sampling(sampling_params)}, samples_per_task=1,
                               concurrency=1, max_new_tokens=int(max_new) if max_new else base.max_new_tokens,
                               max_context_tokens=int(max_context) if max_context else base.max_context_tokens)


@dataclass
class SlimeRollouts:
    """The rollouts of one slime process: its tasks, its gateway (started on first use) and how
    it answers slime (see the module doc). ``aborted`` is polled every ``poll`` seconds."""

    tasks: Mapping[str, Task]
    engine: str
    config: RolloutConfig = field(default_factory=RolloutConfig)
    tokenizer: str | None = None
    samples: str = "all"
    gateway_options: dict[str, Any] = field(default_factory=dict)
    aborted: Callable[[], bool] = slime_aborted
    poll: float = 0.2
    _stack: contextlib.AsyncExitStack | None = field(default=None, init=False, repr=False)
    _gateway: Any = field(default=None, init=False, repr=False)
    _lock: asyncio.Lock | None = field(default=None, init=False, repr=False)
    _ids: Any = field(default_factory=lambda: itertools.count(1 << 40), init=False, repr=False)

    def __post_init__(self) -> None:
        if self.samples not in SAMPLE_MODES:
            raise ValueError(f"samples must be one of {', '.join(SAMPLE_MODES)}, not {self.samples!r}")

    @classmethod
    def from_args(cls, args: Any, config: Mapping[str, Any] | None = None) -> "SlimeRollouts":
        """From slime's ``args`` and the configuration (default: ``AGENT_CODE_SLIME_CONFIG``)."""
        conf = dict(read_config() if config is None else config)
        if not conf.get("tasks"):
            raise ValueError(f"{CONFIG_ENV} must name the tasks file: {{\"tasks\": \"path/to/tasks.jsonl\"}}")
        engine = conf.get("engine") or f"sglang:http://{args.sglang_router_ip}:{args.sglang_router_port}"
        return cls(tasks={t.id: t for t in load_tasks(conf["tasks"])}, engine=engine,
                   config=RolloutConfig(**conf.get("rollout", {})),
                   tokenizer=conf.get("tokenizer", getattr(args, "hf_checkpoint", None)),
                   samples=conf.get("samples", "all"), gateway_options=dict(conf.get("gateway", {})))

    def task_of(self, sample: Any) -> Task:
        task = self.tasks.get(str(sample.label))
        if task is None:
            raise KeyError(f"slime sample {sample.index}: its label {sample.label!r} is no task id of the tasks file "
                           f"({len(self.tasks)} tasks); the label of each row must be its task's id")
        return task

    async def gateway(self) -> Any:
        """The process's gateway, started on first use."""
        from agent_code.rollout.groups import local_gateway

        if self._lock is None:
            self._lock = asyncio.Lock()
        async with self._lock:
            if self._gateway is None:
                stack = contextlib.AsyncExitStack()
                self._gateway = await stack.enter_async_context(
                    local_gateway(self.engine, tokenizer=self.tokenizer, **self.gateway_options))
                self._stack = stack
        return self._gateway

    async def close(self) -> None:
        if self._stack is not None:
            await self._stack.aclose()
        self._stack = self._gateway = None

    async def generate(self, args: Any, sample: Any, sampling_params: dict[str, Any],
                       evaluation: bool = False) -> Any:
        """slime's generate function: the slime ``Sample`` s of one rollout, a list (``samples:
        "all"``) or one ``Sample`` (``"main"``): see the module doc."""
        record = await self.record(args, sample, sampling_params)
        out = to_slime(record, sample, rollout_id=record.index, every_sample=self.samples == "all" and not evaluation)
        return out if self.samples == "all" else out[0]

    async def record(self, args: Any, sample: Any, sampling_params: Mapping[str, Any]) -> SlotRecord:
        """The record of the rollout of ``sample`` (a slime ``Sample``: its ``label``, ``index``,
        ``rollout_id`` and ``tokens`` are read); its ``index`` is slime's int rollout id."""
        if getattr(args, "group_rm", False):
            raise ValueError("--group-rm would replace the grader's rewards of agent-code rollouts with a group "
                             "reward model's: leave it off")
        task = self.task_of(sample)
        rid = sample.rollout_id if sample.rollout_id is not None else sample.index
        rid = next(self._ids) if rid is None else int(rid)
        n = int(getattr(args, "n_samples_per_prompt", 0) or 0)
        k = int(sample.index) % n if n and sample.index is not None else 0
        fallback = [int(t) for t in sample.tokens] or [FILLER_ID]
        return await self._record(task, k, rollout_config(self.config, args, sampling_params), rid, fallback)

    async def _record(self, task: Task, k: int, config: RolloutConfig, rid: int, fallback: list[int]) -> SlotRecord:
        """One rollout's record; a placeholder ``interrupted`` one where slime aborts."""
        if not self.aborted():
            gateway = await self.gateway()
            job = asyncio.ensure_future(run_slots(
                [(task, k)], config, gateway.url, admin_token=gateway.admin_token,
                fallback_prompt=lambda _task: fallback, filler_id=FILLER_ID, first_index=rid))
            try:
                while not job.done() and not self.aborted():
                    await asyncio.wait({job}, timeout=self.poll)
                if job.done():
                    return job.result()[0]
            finally:
                job.cancel()
                await asyncio.gather(job, return_exceptions=True)   # the rollout cleans up
        stopped = RolloutResult(f"{task.id}/{k}", task.id, k, "", config.agent)
        stopped.abort("interrupted", "slime aborted the rollout (its batch is full or its weights are updated)")
        return record_of(stopped, [], index=rid, fallback_prompt_ids=fallback, filler_id=FILLER_ID)


def read_config() -> dict[str, Any]:
    """``AGENT_CODE_SLIME_CONFIG``: a JSON object, or the path of a file holding one."""
    text = os.environ.get(CONFIG_ENV, "").strip()
    if not text:
        raise ValueError(f"set {CONFIG_ENV} to a JSON object (or a JSON file) naming at least the tasks file: "
                         '{"tasks": "path/to/tasks.jsonl"}')
    return json.loads(text if text.startswith("{") else Path(text).read_text())


_ROLLOUTS: SlimeRollouts | None = None


async def generate(args: Any, sample: Any, sampling_params: dict[str, Any], evaluation: bool = False) -> Any:
    """slime's ``--custom-generate-function-path``: one agent-code rollout of the sample's task
    (see the module doc); the configuration is read on the first call."""
    global _ROLLOUTS
    if _ROLLOUTS is None:
        _ROLLOUTS = SlimeRollouts.from_args(args)
    return await _ROLLOUTS.generate(args, sample, sampling_params, evaluation=evaluation)


def rollout_advantages(groups: Sequence[Any], rollouts: Sequence[Any], rewards: Sequence[float],
                       counted: Sequence[bool], *, std: bool, eps: float = 1e-6) -> list[float]:
    """Per sample: its rollout's reward minus the mean over the rollouts of its group (divided by
    their standard deviation with ``std``, as slime's default does: unbiased, ``+ eps``). Each
    rollout counts once however many samples it has; samples not ``counted`` (placeholders)
    neither count nor get an advantage (0.0). A rollout's reward is that of its first sample."""
    per_group: dict[Any, dict[Any, float]] = {}
    for g, r, reward, c in zip(groups, rollouts, rewards, counted, strict=True):
        if c:
            per_group.setdefault(g, {}).setdefault(r, float(reward))
    advantage: dict[tuple[Any, Any], float] = {}
    for g, by_rollout in per_group.items():
        values = list(by_rollout.values())
        mean = statistics.fmean(values)
        scale = (statistics.stdev(values) if len(values) > 1 else 0.0) + eps if std else 1.0
        advantage.update({(g, r): (v - mean) / scale for r, v in by_rollout.items()})
    return [advantage[(g, r)] if c else 0.0 for g, r, c in zip(groups, rollouts, counted, strict=True)]


def post_process_rewards(args: Any, samples: Sequence[Any]) -> tuple[list[float], list[float]]:
    """slime's ``--custom-reward-post-process-path``: ``(raw rewards, rewards)``, normalised like
    slime's default (same estimators, same flags) but per rollout within each ``group_index``
    (:func:`rollout_advantages`), whatever the number of samples per rollout or prompt; removed
    samples (placeholders) are left out of their group's statistics."""
    raw = [float(s.get_reward_value(args)) for s in samples]
    estimator = getattr(args, "advantage_estimator", "grpo")
    if estimator not in _GROUP_NORMALISED or not getattr(args, "rewards_normalization", True):
        return raw, list(raw)
    std = estimator in _STD_SCALED and getattr(args, "grpo_std_normalization", True)
    rollouts = [s.rollout_id if s.rollout_id is not None else s.index for s in samples]
    return raw, rollout_advantages([s.group_index for s in samples], rollouts, raw,
                                   [not s.remove_sample for s in samples], std=std)


def slime_rows(tasks: Sequence[Task]) -> list[dict[str, Any]]:
    """slime's prompt data for ``tasks`` (``--input-key prompt --label-key label``): the problem
    statement as the prompt, the task id as the label."""
    return [{"prompt": t.problem_statement, "label": t.id} for t in tasks]


def main(argv: Sequence[str] | None = None) -> int:
    """``python -m agent_code.trainers.slime TASKS.jsonl OUT.jsonl``: slime's prompt data for a tasks file."""
    argv = list(sys.argv[1:] if argv is None else argv)
    if len(argv) != 2:
        print("usage: python -m agent_code.trainers.slime TASKS.jsonl OUT.jsonl", file=sys.stderr)
        return 2
    rows = slime_rows(load_tasks(argv[0]))
    Path(argv[1]).write_text("".join(json.dumps(row) + "\n" for row in rows))
    print(f"{len(rows)} rows written to {argv[1]}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
