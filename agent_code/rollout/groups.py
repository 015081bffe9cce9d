"""The trainer-facing API: tasks in, finished groups of samples out, as they complete.

A *group* is every rollout of one task (``RolloutConfig.samples_per_task`` of them, GRPO-style)
with the token-exact samples their sessions produced. :func:`stream_groups` runs the rollouts
at ``config.concurrency`` and yields each task's group as soon as its last rollout ends, from
inside an asyncio trainer loop::

    async with local_gateway("llamacpp", trajectory_dir="runs/step-7") as gateway:
        async for group in stream_groups(tasks, config, gateway.url, admin_token=gateway.admin_token,
                                         want=64):
            for sample, advantage in zip(group.samples, group.sample_advantages()):
                ...   # sample.tokens, sample.loss_mask, sample.rollout_log_probs, advantage

Dynamic sampling: a group whose rewards are all equal has zero advantage everywhere (no
learning signal), so by default it is dropped; pass more tasks than you need and ``want``:
the stream stops once ``want`` groups were kept and stops the rollouts still running (their
sandboxes are cleaned up, their sessions stay on the gateway as ``interrupted``).

Which rollouts count: a rollout that ended for a reason of the machine, not of the model
(:data:`INFRA_ABORTS`: the sandbox did not boot, the agent could not be launched, the grader
or the gateway failed, the run was interrupted) says nothing about the policy and is left out
of its group (``Group.left_out``); any other rollout counts with its reward, 0.0 when it has
none (say, the budget ran out before anything was graded). A rollout whose changes broke their
own grading (``ungradable``: the diff could not be collected, applied or graded while the
task's baseline grades) is the model's outcome: reward 0, counted like an honest failure, so
breaking the grader never escapes a negative advantage.

:mod:`agent_code.trajectory.batch` turns the samples into padded arrays or slime-shaped dicts.
"""

from __future__ import annotations

import asyncio
import secrets
import statistics
from contextlib import asynccontextmanager
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, AsyncIterator, Callable, Literal, Sequence, Unpack

from agent_code.rollout.client import GatewayClient
from agent_code.rollout.runner import INFRA_ABORTS, RolloutConfig, RolloutResult, rollout_ids, run_rollout
from agent_code.tasks import Task
from agent_code.trajectory.samples import Sample

if TYPE_CHECKING:   # the gateway is imported when one is started
    from agent_code.engines.base import Engine
    from agent_code.gateway.server import GatewayOptions

__all__ = ["Group", "INFRA_ABORTS", "LocalGateway", "local_gateway", "stream_groups"]



@dataclass
class Group:
    """The rollouts of one task that count (see the module doc), and their samples."""

    task_id: str
    results: list[RolloutResult]
    samples: list[Sample]          # every sample of those rollouts, rollout by rollout
    left_out: list[RolloutResult] = field(default_factory=list)   # infrastructure failures

    @property
    def rewards(self) -> list[float]:
        """One reward per counted rollout (0.0 for one that has none)."""
        return [r.reward if r.reward is not None else 0.0 for r in self.results]

    @property
    def spread(self) -> bool:
        """Whether the rewards differ: only then does the group carry a learning signal."""
        return len(set(self.rewards)) > 1

    def advantages(self, scale: Literal["std", "none"] = "std", eps: float = 1e-6) -> list[float]:
        """One advantage per counted rollout: its reward minus the group's mean, divided by
        the group's standard deviation (``scale="std"``, GRPO) or not (``"none"``, as
        Dr. GRPO does). All zeros for a group without spread."""
        rewards = self.rewards
        if not rewards:
            return []
        mean = statistics.fmean(rewards)
        centred = [r - mean for r in rewards]
        if scale == "none" or not self.spread:
            return centred
        std = statistics.pstdev(rewards)
        return [c / (std + eps) for c in centred]

    def sample_advantages(self, scale: Literal["std", "none"] = "std", eps: float = 1e-6) -> list[float]:
        """:meth:`advantages` per sample: each sample gets its rollout's (a rollout with
        sub-agents or a compaction has several samples)."""
        by_rollout = {r.rollout_id: a for r, a in zip(self.results, self.advantages(scale, eps))}
        return [by_rollout[s.rollout_id] for s in self.samples if s.rollout_id in by_rollout]

    @classmethod
    def of(cls, task_id: str, finished: Sequence[tuple[RolloutResult, list[Sample]]]) -> "Group":
        """The group of ``task_id`` from its finished rollouts, in sample order."""
        ordered = sorted(finished, key=lambda pair: pair[0].sample)
        counted = [(r, s) for r, s in ordered if r.abort_reason not in INFRA_ABORTS]
        return cls(task_id, [r for r, _ in counted], [x for _, s in counted for x in s],
                   [r for r, _ in ordered if r.abort_reason in INFRA_ABORTS])


async def stream_groups(tasks: Sequence[Task], config: RolloutConfig, gateway_url: str, *,
                        admin_token: str | None = None, want: int | None = None, keep_flat: bool = False,
                        min_rollouts: int = 2, on_dropped: Callable[[Group], None] | None = None
                        ) -> AsyncIterator[Group]:
    """Run ``config.samples_per_task`` rollouts of every task against the gateway at
    ``gateway_url`` (the runner opens and finishes their sessions with ``admin_token``, as
    ``agent-code rollout`` does) and yield each task's :class:`Group` as soon as its rollouts have all
    ended. Rollouts start in task order, at most ``config.concurrency`` at a time.

    Groups with fewer than ``min_rollouts`` counted rollouts, or (unless ``keep_flat``)
    without a reward spread, are dropped (``on_dropped`` sees each). With ``want``, the stream ends after that many kept
    groups and the rollouts still running are stopped. Leaving the ``async for`` early stops
    them too."""
    n = config.samples_per_task
    if n < 1:
        raise ValueError("samples_per_task must be at least 1")
    gate = asyncio.Semaphore(max(1, config.concurrency))
    finished: dict[str, list[tuple[RolloutResult, list[Sample]]]] = {}
    done: asyncio.Queue[Group | BaseException] = asyncio.Queue()

    async with GatewayClient(gateway_url, admin_token=admin_token) as client:
        async def one(task: Task, k: int) -> None:
            try:
                async with gate:
                    ids = rollout_ids(task.id, k)
                    pair = await run_rollout(task, k, config, client, ids=ids)
            except asyncio.CancelledError:
                raise
            except BaseException as exc:  # noqa: BLE001  (a bug, not a failed rollout: the consumer re-raises it)
                done.put_nowait(exc)
                return
            bucket = finished.setdefault(task.id, [])
            bucket.append(pair)
            if len(bucket) == n:   # handed over: the stream keeps nothing of a yielded group
                done.put_nowait(Group.of(task.id, finished.pop(task.id)))

        jobs = [asyncio.ensure_future(one(task, k)) for task in tasks for k in range(n)]
        kept = 0
        try:
            for _ in range(len(tasks)):
                if want is not None and kept >= want:
                    break
                item = await done.get()
                if isinstance(item, BaseException):
                    raise item
                if len(item.results) < min_rollouts or not (keep_flat or item.spread):
                    if on_dropped is not None:
                        on_dropped(item)
                    continue
                kept += 1
                handed = [item]
                del item           # the trainer holds the group now; this frame keeps nothing of it
                yield handed.pop()
        finally:
            for job in jobs:
                job.cancel()
            await asyncio.gather(*jobs, return_exceptions=True)


@dataclass(frozen=True)
class LocalGateway:
    url: str
    admin_token: str   # what opens, finishes and deletes its sessions (agents never see it)


@asynccontextmanager
async def local_gateway(engine: str | Engine, *, trajectory_dir: str | None = None, admin_token: str | None = None,
                        **options: Unpack[GatewayOptions]) -> AsyncIterator[LocalGateway]:
    """An in-process gateway on ``engine`` (an ``--engine`` spec: ``llamacpp``,
    ``scripted:FILE``, ``sglang:URL`` …, or an engine object the caller owns, which then needs
    ``tokenizer=`` unless it names one: see :func:`agent_code.gateway.server.build_gateway`) on a
    free loopback port, serving only the sessions a rollout opens, with ``admin_token`` (a fresh
    random one by default) guarding its session and weight routes; yields its URL and token.
    ``options`` go to :func:`~agent_code.gateway.server.build_gateway` (``tokenizer``,
    ``max_turns`` …). An engine object's ``generate`` is awaited on the gateway's own event loop
    (its server thread), not the caller's; it is not closed when the gateway stops."""
    from agent_code.gateway.app import create_app
    from agent_code.gateway.server import BackgroundServer, build_gateway

    token = admin_token or secrets.token_urlsafe(24)
    gateway = await asyncio.to_thread(build_gateway, engine=engine, trajectory_dir=trajectory_dir,
                                      open_on_first_use=False, **options)
    server = BackgroundServer(create_app(gateway, admin_token=token))
    server.__enter__()
    try:
        yield LocalGateway(server.url, token)
    finally:
        await asyncio.to_thread(server.__exit__, None, None, None)
