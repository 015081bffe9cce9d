"""One rollout (task × sample), top to bottom, and many of them at a bounded concurrency.

    open a gateway session (id = ``<task>.<k>``)
    sandbox   create → copy the repo at its commit, run set-up → write the problem
    harness   launch the CLI agent headless against the gateway, wait with a time budget
    tasks     git diff → grade in a fresh sandbox with the test files restored
    gateway   finish the session with the reward → samples
    sandbox   destroy (every process killed, the temp dir gone)

Nothing here is fatal to a run: a rollout that fails at any step is returned as a
:class:`RolloutResult` with ``status`` ``"aborted"`` and its ``abort_reason`` (``boot``,
``launch``, ``budget``, ``agent_crash``, ``empty_trajectory``, ``ungradable``, ``grade_error``,
``gateway``, ``interrupted``), and whatever samples it produced.

Who caused a failure decides whether it counts (:data:`INFRA_ABORTS`): anything
the workspace's content causes is the model's outcome — ``ungradable`` (its changes could not be
collected, applied or graded, while the task's baseline grades: ``grading.grade_change``) gets
reward 0 and counts in its group like an honest failure; only what the harness, machine, task
or gateway causes (``boot``, ``launch``, ``grade_error``, ``gateway``, ``interrupted``) is an
infrastructure failure, left out of its group and counted apart. Cancelling :func:`run_all`
(Ctrl-C) stops the rollouts in flight, records them as ``interrupted``, and keeps the rest.
"""

from __future__ import annotations

import asyncio
import logging
import secrets
import time
from dataclasses import asdict, dataclass, field
from typing import TYPE_CHECKING, Any, Awaitable, Callable, Sequence

from agent_code.harness import get_harness
from agent_code.harness.base import AgentRun, Launch
from agent_code.rollout.client import GatewayClient, GatewayClientError
from agent_code.sandbox import create_sandbox
from agent_code.trajectory.samples import Sample

if TYPE_CHECKING:   # tasks is imported where a rollout runs
    from agent_code.tasks import Task

log = logging.getLogger("agent_code.rollout")

ABORT_REASONS = ("boot", "launch", "budget", "agent_crash", "empty_trajectory", "ungradable", "grade_error",
                 "gateway", "interrupted")
# the failures of the harness, machine, task or gateway, not of the model: such a rollout says nothing
# about the policy and is left out of its group (every other one counts, 0.0 when it has no reward)
INFRA_ABORTS = frozenset({"boot", "launch", "grade_error", "gateway", "interrupted"})
# exit codes that end a run normally; agent-code exits 3 at --max-steps and Qwen Code 53 at
# --max-session-turns: an answer, not a crash
OK_EXIT_CODES = {"agent-code": (0, 3), "qwen-code": (0, 53)}


@dataclass
class RolloutConfig:
    agent: str = "agent-code"
    sandbox: str = "local"
    samples_per_task: int = 1
    concurrency: int = 1
    budget: float = 600.0             # seconds for the agent (a task's own ``timeout`` wins)
    grade_timeout: float = 300.0      # the grader's test run; past it the change is ungradable (reward 0)
    max_diff_bytes: int = 16 * 1024 * 1024   # a larger diff is ungradable (reward 0), never read whole
    partial: bool = False             # reward = fraction of listed tests passing
    model: str = "agent-code-local"
    max_steps: int = 30               # for agents with a step cap (agent-code)
    tool_profile: str = "full"        # agent-code's tool profile: full or small (small models)
    # the session's sampling (temperature, top_p, top_k, seed): it wins over what the agent asks for
    sampling: dict[str, Any] = field(default_factory=dict)
    max_turns: int | None = None      # the gateway refuses turns beyond this (429)
    # the session's context budget: prompt + new tokens of a turn (its reply is cut to fit, finishing
    # "length"; a prompt that already fills it gets an empty reply)
    max_context_tokens: int | None = None
    max_new_tokens: int | None = None   # the most tokens a turn may sample, whatever the agent asks for
    # a finished session is deleted on the gateway once its samples are back, so memory stays
    # flat over thousands of rollouts (the turns stay in the trajectory dir); True keeps them
    keep_sessions: bool = False
    sandbox_options: dict[str, Any] = field(default_factory=dict)


@dataclass
class RolloutResult:
    rollout_id: str
    task_id: str
    sample: int
    session_id: str
    agent: str
    status: str = "completed"         # completed | aborted
    abort_reason: str | None = None
    error: str | None = None
    agent_exit_code: int | None = None
    reward: float | None = None
    applied_cleanly: bool | None = None
    tests_passed: list[str] = field(default_factory=list)
    tests_failed: list[str] = field(default_factory=list)
    rejected_paths: list[str] = field(default_factory=list)   # changes the grader refused to apply
    diff_bytes: int = 0
    turns: int = 0
    samples: int = 0
    tokens: dict[str, int] = field(default_factory=lambda: {"prompt": 0, "response": 0, "trained": 0})
    timings: dict[str, float] = field(default_factory=dict)
    diff: str = ""
    log: str = ""                     # the agent CLI's stdout: its stream-json (Codex: JSONL) run log
    stderr: str = ""                  # the agent CLI's stderr, kept out of the log (plain text)

    @property
    def solved(self) -> bool:
        return (self.reward or 0.0) >= 1.0

    def abort(self, reason: str, error: str | None = None) -> None:
        if self.abort_reason is None:       # the first cause is the one that counts
            self.status, self.abort_reason = "aborted", reason
            self.error = error
        elif error and not self.error:
            self.error = error

    def to_dict(self) -> dict[str, Any]:
        """The ``results.jsonl`` row: everything but the diff, the log and stderr (saved beside it)."""
        row = asdict(self)
        row.pop("diff")
        row.pop("log")
        row.pop("stderr")
        return row


def rollout_ids(task_id: str, k: int) -> tuple[str, str]:
    """(rollout id, session id) of sample ``k`` of a task. The session id is the CLI's API key,
    so it is unguessable: the task and sample (for people reading a trajectory dir) and 128
    random bits, new for every rollout — no agent can name a sibling's session."""
    return f"{task_id}/{k}", f"{task_id}.{k}.{secrets.token_urlsafe(16)}"


class _Clock:
    def __init__(self, timings: dict[str, float]) -> None:
        self.timings, self.t = timings, time.monotonic()

    def lap(self, name: str) -> None:
        now = time.monotonic()
        self.timings[name] = round(self.timings.get(name, 0.0) + now - self.t, 4)
        self.t = now


async def run_rollout(task: Task, k: int, config: RolloutConfig, client: GatewayClient, *,
                      gateway_url: str | None = None, ids: tuple[str, str] | None = None
                      ) -> tuple[RolloutResult, list[Sample]]:
    """Run sample ``k`` of ``task`` against the gateway behind ``client``; never raises for a
    failed rollout (only for cancellation, after cleaning up). ``ids`` (rollout id, session id)
    are minted here unless the caller did, so that it can name the session if the rollout dies.

    Not even for a bug of ours: an unexpected exception is logged and ends this rollout alone —
    after the agent ran, as ``ungradable`` (reward 0, counted: content the agent made may have
    caused it, and a run must never let that dodge a zero), before, as ``boot``."""
    rollout_id, session_id = ids or rollout_ids(task.id, k)
    result = RolloutResult(rollout_id, task.id, k, session_id, config.agent)
    started = time.monotonic()
    try:
        return result, await _run_rollout(task, k, config, client, result, gateway_url, started)
    except asyncio.CancelledError:
        raise
    except Exception as exc:   # noqa: BLE001  (one rollout's failure, never the run's)
        log.exception("rollout %s: unexpected error", rollout_id)
        failure = f"internal error: {type(exc).__name__}: {exc}"
        if "agent" in result.timings:
            if result.reward is None:
                result.reward = 0.0
            result.abort("ungradable", failure)
        else:
            result.abort("boot", failure)
        samples = await _finish(client, result) or []
        result.timings["total"] = round(time.monotonic() - started, 4)
        return result, samples


async def _run_rollout(task: Task, k: int, config: RolloutConfig, client: GatewayClient, result: RolloutResult,
                       gateway_url: str | None, started: float) -> list[Sample]:
    """:func:`run_rollout`'s steps, filling ``result``; returns the samples."""
    from agent_code.tasks import DiffError, collect_diff, grade_change, prepare_workspace

    session_id, rollout_id = result.session_id, result.rollout_id
    clock = _Clock(result.timings)
    samples: list[Sample] = []
    try:
        await client.open_session(session_id, max_turns=config.max_turns, sampling=config.sampling or None,
                                  max_context_tokens=config.max_context_tokens, max_new_tokens=config.max_new_tokens)
    except GatewayClientError as exc:
        result.abort("gateway", str(exc))
        result.timings["total"] = round(time.monotonic() - started, 4)
        return samples
    clock.lap("open")
    run: AgentRun | None = None
    inside_url: str | None = None
    sandbox_options = dict(config.sandbox_options)
    if getattr(task, "image", None) and config.sandbox == "docker":   # the task's own image (SWE-bench style)
        sandbox_options.setdefault("image", task.image)
    box = create_sandbox(config.sandbox, **sandbox_options)
    try:
        try:
            await box.__aenter__()
            clock.lap("boot")
            await prepare_workspace(box, task)
            clock.lap("prep")
        except Exception as exc:
            result.abort("boot", f"{type(exc).__name__}: {exc}")
        if result.abort_reason is None:
            harness = get_harness(config.agent)
            try:   # the gateway as the agent reaches it from inside its sandbox (and nothing else)
                inside_url = await box.expose_gateway(gateway_url or client.base_url)
            except Exception as exc:
                result.abort("launch", f"the gateway cannot be reached from the sandbox: {type(exc).__name__}: {exc}")
        if result.abort_reason is None and inside_url is not None:
            launch = Launch(base_url=inside_url, session_id=session_id, model=config.model,
                            prompt=task.problem_statement, workdir=box.workdir, home=box.home,
                            max_steps=config.max_steps, tool_profile=config.tool_profile)
            try:
                run = await harness.run(box, launch, budget=float(getattr(task, "timeout", None) or config.budget))
            except Exception as exc:   # reading the run back failed (a full disk): whose fault is it?
                failure = f"the agent's run could not be read back: {type(exc).__name__}: {exc}"
                if not await _sandbox_works(box):
                    result.abort("launch", failure)
                else:                  # the sandbox works: what the agent did there caused it
                    result.abort("agent_crash", failure)
                    run = AgentRun(None, False, time.monotonic() - started, "")
        if run is not None:
            clock.lap("agent")
            result.agent_exit_code, result.log, result.stderr = run.exit_code, run.log, run.stderr
            if run.error:             # (abort() keeps the first cause: a failed read-back above stays)
                result.abort("launch", run.error)
            elif run.timed_out:
                result.abort("budget", f"the agent ran past its budget of {config.budget:g} s and was killed")
            elif run.exit_code not in OK_EXIT_CODES.get(config.agent, (0,)):
                result.abort("agent_crash", f"the agent exited with code {run.exit_code}: "
                                              f"{(run.stderr.strip() or run.log)[-500:]}")
            try:
                result.diff = await collect_diff(box, max_bytes=config.max_diff_bytes)
            except DiffError as exc:   # what the agent left cannot be read as a diff: its own outcome
                result.reward, result.applied_cleanly = 0.0, False
                result.abort("ungradable", f"the agent's changes could not be collected: {exc}")
            except Exception as exc:   # the sandbox's own failure, unless it still works
                failure = f"collecting the diff failed: {type(exc).__name__}: {exc}"
                if await _sandbox_works(box):
                    result.reward, result.applied_cleanly = 0.0, False
                    result.abort("ungradable", failure)
                else:
                    result.abort("grade_error", failure)
            result.diff_bytes = len(result.diff.encode())
            clock.lap("diff")
    finally:
        try:
            await box.__aexit__(None, None, None)
        except asyncio.CancelledError:  # cancelled again while cleaning up: it has done what it could
            pass
        except Exception as exc:        # noqa: BLE001  (a teardown that failed loses nothing of the rollout)
            log.warning("rollout %s: tearing its sandbox down failed: %s: %s", rollout_id, type(exc).__name__, exc)
        clock.lap("teardown")

    collected = result.abort_reason not in ("boot", "launch", "grade_error") and result.reward is None
    if collected and run is not None:
        try:
            verdict = await grade_change(task, result.diff, lambda: create_sandbox(config.sandbox, **sandbox_options),
                                         partial=config.partial, timeout=config.grade_timeout)
            result.reward, result.applied_cleanly = verdict.reward, verdict.applied_cleanly
            result.tests_passed, result.tests_failed = list(verdict.passed), list(verdict.failed)
            result.rejected_paths = list(verdict.rejected_paths)
            if verdict.ungradable:    # the change's outcome: reward 0, counted
                result.abort("ungradable", verdict.error)
        except Exception as exc:      # the task's or the machine's (grade_change's control failed too)
            result.abort("grade_error", f"{type(exc).__name__}: {exc}")
        clock.lap("grade")

    finished = await _finish(client, result)
    if finished is None:   # not finished: the session stays on the gateway, open, for a retry or recovery
        samples = []
    else:
        samples = finished
        if not config.keep_sessions:
            try:
                await client.delete(session_id)
            except GatewayClientError as exc:   # the samples are back already: worth a warning, not a failure
                log.warning("rollout %s: could not delete its gateway session: %s", rollout_id, exc)
    clock.lap("finish")
    result.timings["total"] = round(time.monotonic() - started, 4)
    return samples


async def _sandbox_works(box: Any) -> bool:
    """Whether the sandbox still runs a command: after a failure that followed the agent's run,
    this tells the machine's failure (it does not) from one the agent's doing caused (it does)."""
    try:
        return (await box.exec("true", timeout=30)).ok
    except Exception:   # noqa: BLE001
        return False


async def _finish(client: GatewayClient, result: RolloutResult) -> list[Sample] | None:
    """Close the gateway session with the reward; the samples' token counts go in the result.
    None: the gateway could not finish it (the reason is in the result)."""
    metadata = {"task_id": result.task_id, "sample": result.sample, "agent": result.agent,
                "applied_cleanly": result.applied_cleanly, "abort_reason": result.abort_reason}
    status = "aborted" if result.abort_reason in ("budget", "agent_crash", "interrupted") else None
    try:
        samples = await client.finish(result.session_id, reward=result.reward, metadata=metadata,
                                      rollout_id=result.rollout_id, status=status)
    except GatewayClientError as exc:
        result.abort("gateway", f"finishing the session failed: {exc}")
        return None
    turns: set[int] = set()
    cache: dict[int, tuple[int, int]] = {}   # turn → (prompt tokens, cached): each turn once
    for s in samples:
        turns.update(s.metadata.get("turn_indices", ()))
        for turn, prompt, cached in s.metadata.get("engine_cache", ()):
            cache[turn] = (prompt, cached)
        result.tokens["prompt"] += s.prompt_length
        result.tokens["response"] += s.response_length
        result.tokens["trained"] += s.trained_tokens
    result.samples = len(samples)
    result.turns = len(turns)
    if cache:  # what the engine prefilled, and how much of it came from its prefix cache
        result.tokens["engine_prompt"] = sum(p for p, _ in cache.values())
        result.tokens["cached"] = sum(c for _, c in cache.values())
    if not samples and result.abort_reason is None:
        result.abort("empty_trajectory", "the agent made no model call through the gateway")
    return samples


OnResult = Callable[[RolloutResult, list[Sample]], Awaitable[None] | None]


async def run_all(tasks: Sequence[Task], config: RolloutConfig, gateway_url: str, *,
                  on_result: OnResult | None = None, on_start: Callable[[str], None] | None = None
                  ) -> list[RolloutResult]:
    """Every (task, sample) pair, at most ``config.concurrency`` at a time; ``on_result`` sees
    each as it ends. Cancelled (Ctrl-C): rollouts in flight are recorded as ``interrupted``."""
    gate = asyncio.Semaphore(max(1, config.concurrency))
    results: list[RolloutResult] = []

    async def deliver(result: RolloutResult, samples: list[Sample]) -> None:
        results.append(result)
        if on_result is not None:
            maybe = on_result(result, samples)
            if asyncio.iscoroutine(maybe):
                await maybe

    async with GatewayClient(gateway_url) as client:
        async def one(task: Task, k: int) -> None:
            async with gate:
                rid, sid = rollout_ids(task.id, k)   # minted once: a stopped rollout names its real session
                if on_start is not None:
                    on_start(rid)
                try:
                    result, samples = await run_rollout(task, k, config, client, ids=(rid, sid))
                except asyncio.CancelledError:
                    stopped = RolloutResult(rid, task.id, k, sid, config.agent)
                    stopped.abort("interrupted", "stopped by the user")
                    await deliver(stopped, [])
                    raise
                await deliver(result, samples)

        jobs = [asyncio.ensure_future(one(task, k)) for task in tasks for k in range(config.samples_per_task)]
        try:
            await asyncio.gather(*jobs)
        except asyncio.CancelledError:  # gather cancelled every rollout: let them clean up
            await asyncio.gather(*jobs, return_exceptions=True)
            raise
    return results
