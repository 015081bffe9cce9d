"""verl (0.9): agent-code rollouts as verl agent loops, generating through verl's own servers.

verl runs one agent loop per dataset row (``AgentLoopBase.run(sampling_params, **row) ->
AgentLoopOutput``), ``rollout.n`` rows per prompt sharing a ``uid`` (its GRPO group), and pads
every output to fixed lengths. :class:`AgentCodeAgentLoop` (registered by
``agent_code/trainers/verl_agent_loop.yaml`` through ``actor_rollout_ref.rollout.agent.
agent_loop_config_path``, chosen per row by the ``agent_name`` column) runs ONE agent-code rollout
for its row — the task named by the row's ``task_id`` (or ``extra_info.task_id``), looked up in
the tasks file of the YAML — and returns the record of :mod:`agent_code.trainers.core` (the main
sample; a zero-mask placeholder for an infrastructure failure) as verl's output: prompt and
response ids, ``response_mask`` = our loss mask, ``response_logprobs`` = the sampled logprobs,
``reward_score`` = the graded reward (verl then skips its own reward function for the row).

Generation goes through verl's server manager, so verl's weight syncs and load balancing apply:
the process runs one agent-code gateway (:func:`~agent_code.rollout.groups.local_gateway`) on
:class:`VerlEngine`, whose ``generate`` hands each turn to ``server_manager.generate`` on verl's
event loop (:func:`on_loop`: the gateway and the rollouts run on threads of their own, verl's loop
is only borrowed per call). Each turn's weight version is verl's ``extra_fields["global_steps"]``
(per token: ``SlotRecord.token_versions``; per row: ``extra_fields["min_global_steps"]`` /
``["max_global_steps"]``, verl's own staleness fields). Sampling is verl's: the row's
``sampling_params`` (temperature, top_p, top_k; greedy in validation) become the session's, and
win over what the agent asks for.

Fixed lengths, without losing a sampled token's context: the gateway's ``max_context_tokens`` is
``prompt_length + response_length``, so no turn generates past that (the agent sees a reply cut at
``max_tokens``); a prompt longer than ``prompt_length`` (Claude Code's system prompt alone is
16-19k tokens) keeps its head in verl's prompt and its tail moves to the front of the response with
mask 0 (verl's own loops would cut it off the left, and train on a context the model never saw);
whatever still exceeds ``response_length`` (nothing, with the gateway's clamp) is cut off the end and
reported (:func:`fit_lengths`).
"""

from __future__ import annotations

import asyncio
import itertools
import logging
import threading
import time
import uuid
from collections import OrderedDict
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any, Awaitable, Coroutine, Iterable, Sequence, TypeVar

from agent_code.engines.base import EngineError, Generation
from agent_code.protocols.canonical import SamplingParams
from agent_code.rollout.runner import RolloutConfig
from agent_code.tasks import Task, bundled_tasks_path, load_tasks
from agent_code.trainers.core import LoopThread, SlotRecord, run_slots

log = logging.getLogger("agent_code.trainers.verl")

# and AgentCodeAgentLoop, built on first access (module __getattr__ below)
__all__ = ["AGENT_NAME", "VERL_VERSION", "YAML_PATH", "Fitted", "VerlEngine", "dataset_rows", "fit_lengths",
           "generation_of", "on_loop", "output_fields", "verl_sampling", "write_dataset"]

VERL_VERSION = "0.9.1"                     # the release this adapter is written and tested against
AGENT_NAME = "agent_code"                  # the YAML's name: a row's ``agent_name``
YAML_PATH = Path(__file__).with_name("verl_agent_loop.yaml")

T = TypeVar("T")


async def on_loop(coro: Coroutine[Any, Any, T], loop: asyncio.AbstractEventLoop) -> T:
    """Run ``coro`` on ``loop`` (another thread's) and await it from the running loop: the loop
    bridge (:meth:`LoopThread.call` is its synchronous sibling). Cancelling the caller cancels it
    there too."""
    if loop is asyncio.get_running_loop():
        return await coro
    future = asyncio.run_coroutine_threadsafe(coro, loop)
    try:
        return await asyncio.wrap_future(future)
    except asyncio.CancelledError:
        future.cancel()
        raise


def verl_sampling(sampling: SamplingParams, *, backend: str, max_tokens: int) -> dict[str, Any]:
    """The ``sampling_params`` verl's server manager takes for one of our turns: ours (the session's,
    which are verl's row's) in the keys its vLLM and SGLang servers read; log probs always."""
    params: dict[str, Any] = {**sampling.plain(top_k_off=-1), "max_tokens": int(max_tokens), "logprobs": True}
    if sampling.stop:
        params["stop"] = list(sampling.stop)
    if sampling.seed is not None:
        params["sampling_seed" if backend == "sglang" else "seed"] = int(sampling.seed)
    return params


def generation_of(output: Any, *, max_tokens: int, end_ids: Iterable[int]) -> Generation:
    """Our :class:`Generation` of verl's ``TokenOutput`` (``token_ids``, ``log_probs``,
    ``stop_reason``, ``extra_fields["global_steps"]`` → ``meta["weight_version"]``)."""
    ids = [int(i) for i in output.token_ids]
    logprobs = output.log_probs
    if getattr(output, "stop_reason", None) == "aborted":
        raise EngineError(f"verl's server aborted the request after {len(ids)} tokens (a weight update?)")
    if logprobs is None or len(logprobs) != len(ids):
        raise EngineError(f"verl's server returned {len(ids)} token ids with "
                          f"{'no' if logprobs is None else len(logprobs)} log probs")
    finish = "length" if len(ids) >= max_tokens and not (ids and ids[-1] in set(end_ids)) else "stop"
    steps = (getattr(output, "extra_fields", None) or {}).get("global_steps")
    meta = {"weight_version": str(steps)} if steps is not None else {}
    return Generation(ids, [float(x) for x in logprobs], finish, meta=meta)


class VerlEngine:
    """agent-code's :class:`~agent_code.engines.base.Engine` over verl's server manager
    (``generate(request_id, prompt_ids=, sampling_params=) -> TokenOutput``), which lives on verl's
    event loop ``loop``; ``generate`` is awaited on the gateway's. A session's turns share one
    request id (verl's sticky routing: its prefix cache)."""

    name = "verl"

    def __init__(self, server_manager: Any, loop: asyncio.AbstractEventLoop, *, end_ids: Sequence[int],
                 backend: str = "vllm") -> None:
        self.server_manager, self.loop = server_manager, loop
        self.end_ids, self.backend = list(end_ids), backend

    async def generate(self, prompt_ids: Sequence[int], sampling: SamplingParams, *,
                       session_id: str | None = None) -> Generation:
        max_tokens = max(1, int(sampling.max_new_tokens))
        call = self.server_manager.generate(
            request_id=session_id or uuid.uuid4().hex, prompt_ids=[int(i) for i in prompt_ids],
            sampling_params=verl_sampling(sampling, backend=self.backend, max_tokens=max_tokens))
        output = await on_loop(call, self.loop)
        generation = generation_of(output, max_tokens=max_tokens, end_ids=self.end_ids)
        generation.prompt_tokens = len(prompt_ids)
        return generation

    async def close(self) -> None:
        """verl owns its servers: nothing to close."""


@dataclass
class Fitted:
    """A record laid out for verl's fixed lengths (see the module doc)."""

    prompt_ids: list[int]
    response_ids: list[int]
    response_mask: list[int]
    response_logprobs: list[float]
    shifted: int        # prompt tokens moved to the front of the response (mask 0)
    cut: int            # response tokens cut off the end (past response_length)
    cut_trained: int    # of which trained


def fit_lengths(record: SlotRecord, prompt_length: int, response_length: int) -> Fitted:
    """``record`` within ``prompt_length`` / ``response_length`` (a pure function): the prompt's
    overflow moves, masked, to the front of the response (the sequence stays token-exact); the
    response's overflow is cut off its end."""
    prompt, response = list(record.prompt_ids), list(record.response_ids)
    mask, logprobs = list(record.loss_mask), list(record.logprobs)
    shifted = max(0, len(prompt) - prompt_length)
    if shifted:
        response, prompt = prompt[-shifted:] + response, prompt[:-shifted]
        mask, logprobs = [0] * shifted + mask, [0.0] * shifted + logprobs
    cut = max(0, len(response) - response_length)
    cut_trained = sum(mask[response_length:])
    if cut:
        response, mask, logprobs = response[:response_length], mask[:response_length], logprobs[:response_length]
    return Fitted(prompt, response, mask, logprobs, shifted, cut, cut_trained)


def output_fields(record: SlotRecord, fitted: Fitted, *, elapsed: float = 0.0) -> dict[str, Any]:
    """The keyword arguments of verl's ``AgentLoopOutput`` for ``record`` (a pure function;
    ``metrics`` as a plain dict). ``extra_fields`` has the same keys for every row (verl stacks
    them into the batch)."""
    steps = [int(s["version"]) for s in record.versions if str(s["version"]).lstrip("-").isdigit()]
    status = "truncated" if fitted.cut_trained and record.status == "completed" else record.status
    extra = {
        "turn_scores": [], "tool_rewards": [],
        "min_global_steps": min(steps) if steps else None, "max_global_steps": max(steps) if steps else None,
        "agent_code_rollout_id": record.result.rollout_id if record.result else f"{record.task_id}/{record.slot}",
        "agent_code_status": status,
        "agent_code_abort_reason": record.abort_reason,
        "agent_code_counted": record.counted,
        "agent_code_weight_versions": [dict(s) for s in record.versions],
        "agent_code_left_out_tokens": record.left_out.trained_tokens,
        "agent_code_shifted_tokens": fitted.shifted,
        "agent_code_cut_tokens": fitted.cut,
    }
    turns = record.result.turns if record.result else 0
    return {"prompt_ids": fitted.prompt_ids, "response_ids": fitted.response_ids,
            "response_mask": fitted.response_mask, "response_logprobs": fitted.response_logprobs,
            "reward_score": float(record.reward), "num_turns": 2 * turns + 1,
            "metrics": {"generate_sequences": float(elapsed), "tool_calls": 0.0, "num_preempted": -1},
            "extra_fields": extra}


def dataset_rows(tasks: Sequence[Task], *, agent_name: str = AGENT_NAME,
                 data_source: str = "agent-code") -> list[dict[str, Any]]:
    """verl dataset rows (RLHFDataset's columns, one per task; verl repeats each ``rollout.n``
    times) that run ``tasks`` through this agent loop (:func:`write_dataset` writes them)."""
    return [{"data_source": data_source, "agent_name": agent_name, "task_id": task.id,
             "prompt": [{"role": "user", "content": task.problem_statement}],
             "reward_model": {"style": "agent-code", "ground_truth": ""},
             "extra_info": {"index": i, "task_id": task.id}} for i, task in enumerate(tasks)]


def write_dataset(tasks: Sequence[Task], path: str | Path, *, agent_name: str = AGENT_NAME) -> int:
    """Write :func:`dataset_rows` of ``tasks`` as a parquet file verl's ``data.train_files`` reads;
    returns the number of rows."""
    import pyarrow as pa
    import pyarrow.parquet as pq

    rows = dataset_rows(tasks, agent_name=agent_name)
    pq.write_table(pa.Table.from_pylist(rows), str(path))
    return len(rows)


def task_id_of(row: dict[str, Any]) -> str:
    """The row's task: its ``task_id`` column, else ``extra_info["task_id"]``."""
    task_id = row.get("task_id")
    if task_id is None and isinstance(row.get("extra_info"), dict):
        task_id = row["extra_info"].get("task_id")
    if not isinstance(task_id, str) or not task_id:
        raise ValueError("an agent_code row needs a 'task_id' column (or extra_info.task_id) naming its task")
    return task_id


class _Slots:
    """A row's place in its group (``k``, the rollout id's sample): rows of one ``uid`` this
    process ran, counted (bounded memory: the oldest groups are forgotten)."""

    def __init__(self, keep: int = 100_000) -> None:
        self._counts: OrderedDict[str, itertools.count] = OrderedDict()
        self._keep, self._lock = keep, threading.Lock()

    def next(self, uid: str) -> int:
        with self._lock:
            counter = self._counts.setdefault(uid, itertools.count())
            self._counts.move_to_end(uid)
            while len(self._counts) > self._keep:
                self._counts.popitem(last=False)
            return next(counter)


class _Runtime:
    """The process's gateway on :class:`VerlEngine`, the thread its rollouts run on, and the gate
    that lets ``concurrency`` of them run at once (verl starts every row of its batch at once)."""

    def __init__(self, engine: VerlEngine, tokenizer: str, max_context_tokens: int,
                 trajectory_dir: str | None, concurrency: int) -> None:
        from agent_code.rollout.groups import local_gateway

        self.engine = engine
        self.gate = asyncio.Semaphore(max(1, concurrency))
        self.thread = LoopThread("agent-code-verl")
        self._gateway = local_gateway(engine, tokenizer=tokenizer, max_context_tokens=max_context_tokens,
                                      trajectory_dir=trajectory_dir)
        self.gateway = self.thread.call(self._gateway.__aenter__())

    async def gated(self, awaitable: Awaitable[T]) -> T:
        async with self.gate:
            return await awaitable

    def close(self) -> None:
        try:
            self.thread.call(self._gateway.__aexit__(None, None, None), timeout=30)
        finally:
            self.thread.close()


_runtime: _Runtime | None = None
_runtime_lock = threading.Lock()
_tasks: dict[str, dict[str, Task]] = {}


def runtime(server_manager: Any, loop: asyncio.AbstractEventLoop, *, tokenizer: str, max_context_tokens: int,
            backend: str, trajectory_dir: str | None, concurrency: int) -> _Runtime:
    """The process's runtime, started on first use (verl makes one agent loop object per row)."""
    global _runtime
    with _runtime_lock:
        if _runtime is None:
            from agent_code.render.template import load_renderer

            engine = VerlEngine(server_manager, loop, end_ids=load_renderer(tokenizer).end_of_turn_ids,
                                backend=backend)
            _runtime = _Runtime(engine, tokenizer, max_context_tokens, trajectory_dir, concurrency)
        else:   # a worker has one server manager and one loop; follow them if they change
            _runtime.engine.server_manager, _runtime.engine.loop = server_manager, loop
        return _runtime


def shutdown() -> None:
    """Stop the process's gateway and rollout thread (tests; a worker's exit does it anyway)."""
    global _runtime
    with _runtime_lock:
        if _runtime is not None:
            _runtime.close()
            _runtime = None


def tasks_in(path: str | None) -> dict[str, Task]:
    key = str(path or bundled_tasks_path())
    if key not in _tasks:
        _tasks[key] = {t.id: t for t in load_tasks(Path(key))}
    return _tasks[key]


_slots = _Slots()


def _agent_loop_class() -> type:
    from verl.experimental.agent_loop.agent_loop import AgentLoopBase, AgentLoopMetrics, AgentLoopOutput

    class AgentCodeAgentLoop(AgentLoopBase):
        """One agent-code rollout per verl row (see :mod:`agent_code.trainers.verl`). Configured by
        its YAML entry: ``tasks`` (a tasks JSONL; null: the bundled tasks), ``rollout`` (the
        :class:`~agent_code.rollout.runner.RolloutConfig` fields: agent, sandbox, max_steps,
        tool_profile, budget …; ``concurrency``: rollouts at once in this worker process),
        ``gateway_tokenizer`` (the gateway's chat template and tokenizer; null: the actor model's
        path) and
        ``trajectory_dir``."""

        def __init__(self, *args: Any, tasks: str | None = None, rollout: dict[str, Any] | None = None,
                     gateway_tokenizer: str | None = None, trajectory_dir: str | None = None, **kwargs: Any) -> None:
            super().__init__(*args, **kwargs)
            self.tasks_path = tasks
            self.rollout = RolloutConfig(**plain(rollout or {}))
            self.tokenizer_source = gateway_tokenizer or str(self.config.actor_rollout_ref.model.path)
            self.trajectory_dir = trajectory_dir

        async def run(self, sampling_params: dict[str, Any], **row: Any) -> Any:
            t0 = time.monotonic()
            task_id = task_id_of(row)
            task = tasks_in(self.tasks_path).get(task_id)
            if task is None:
                raise ValueError(f"no task {task_id!r} in {self.tasks_path or 'the bundled tasks'}")
            k = _slots.next(str(row.get("uid", task.id)))
            lengths = int(self.rollout_config.prompt_length), int(self.rollout_config.response_length)
            budget = sum(lengths)   # no turn samples past it: the gateway's and the session's context budget
            rt = await asyncio.to_thread(   # the first row starts it (seconds): not on verl's loop
                runtime, self.server_manager, asyncio.get_running_loop(), tokenizer=self.tokenizer_source,
                max_context_tokens=budget, backend=str(self.rollout_config.get("name", "vllm")),
                trajectory_dir=self.trajectory_dir, concurrency=self.rollout.concurrency)
            config = replace(self.rollout, samples_per_task=1, concurrency=1,
                             max_context_tokens=min(self.rollout.max_context_tokens or budget, budget),
                             sampling={**self.rollout.sampling, **session_sampling(sampling_params)})
            pad = self.tokenizer.pad_token_id
            filler = int(pad if pad is not None else self.tokenizer.eos_token_id or 0)
            records = await on_loop(rt.gated(run_slots(
                [(task, k)], config, rt.gateway.url, admin_token=rt.gateway.admin_token, filler_id=filler,
                fallback_prompt=lambda t: self.tokenizer.encode(t.problem_statement)[:lengths[0]])), rt.thread.loop)
            fitted = fit_lengths(records[0], *lengths)
            if fitted.cut:
                log.warning("rollout %s: %d response tokens (%d trained) cut at response_length=%d",
                            records[0].task_id, fitted.cut, fitted.cut_trained, lengths[1])
            fields = output_fields(records[0], fitted, elapsed=time.monotonic() - t0)
            return AgentLoopOutput(**{**fields, "metrics": AgentLoopMetrics(**fields["metrics"])})

    AgentCodeAgentLoop.__module__ = __name__
    AgentCodeAgentLoop.__qualname__ = "AgentCodeAgentLoop"
    return AgentCodeAgentLoop


def plain(value: Any) -> Any:
    """``value`` (a YAML entry's, as hydra hands it: an OmegaConf container) as plain Python."""
    from omegaconf import DictConfig, ListConfig, OmegaConf   # verl's dependency

    return OmegaConf.to_container(value, resolve=True) if isinstance(value, (DictConfig, ListConfig)) else value


def session_sampling(sampling_params: dict[str, Any]) -> dict[str, Any]:
    """The session sampling of verl's row ``sampling_params`` (the trainer's: they win)."""
    keys = ("temperature", "top_p", "top_k")
    return {k: sampling_params[k] for k in keys if sampling_params.get(k) is not None}


_classes: dict[str, type] = {}


def __getattr__(name: str) -> Any:
    """``AgentCodeAgentLoop`` is built on first access (verl is imported then, not before: agent-code
    imports without verl)."""
    if name == "AgentCodeAgentLoop":
        if name not in _classes:
            _classes[name] = _agent_loop_class()
        return _classes[name]
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
