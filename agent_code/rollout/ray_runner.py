"""Scale-out: the same rollouts as Ray tasks across a cluster, a gateway per node.

One :class:`NodeGateway` actor is pinned to every alive node and serves the engine there on
loopback (sandboxes on that node reach it at ``127.0.0.1``). Each rollout is a Ray task that
looks up its own node's gateway and runs :func:`~agent_code.rollout.runner.run_rollout` —
the very function the local runner uses — then returns the result and samples to the driver,
which writes them as they arrive. Engine specs and task repositories must be reachable at the
same paths on every node (a shared filesystem, or files baked into the image).

Every node's gateway requires an admin token for its session routes (the run's
``--admin-token``, else one minted for the run), which only the rollout tasks hold: an agent on
the node reaches the gateway's model routes, but cannot finish (grade), read or delete sessions.

``--ray`` alone starts (or joins) a local Ray instance; ``--ray ADDRESS`` joins a cluster.
"""

from __future__ import annotations

import asyncio
import secrets
from typing import TYPE_CHECKING, Any, Callable, Sequence

from agent_code.rollout.runner import RolloutConfig, RolloutResult, rollout_ids
from agent_code.trajectory.samples import Sample

if TYPE_CHECKING:
    from agent_code.tasks import Task


class NodeGateway:
    """A gateway on this node (a Ray actor): built from ``build_gateway`` options, served on
    loopback, its session routes behind ``admin_token``."""

    def __init__(self, options: dict[str, Any], admin_token: str | None = None) -> None:
        from agent_code.gateway.app import create_app
        from agent_code.gateway.server import BackgroundServer, build_gateway

        self.gateway = build_gateway(**{**options, "open_on_first_use": False})   # only sessions rollouts open
        self.server = BackgroundServer(create_app(self.gateway, admin_token=admin_token))
        self.server.__enter__()

    def url(self) -> str:
        return self.server.url

    def close(self) -> None:
        self.server.__exit__(None, None, None)


def _rollout_on_node(task: Task, k: int, config: RolloutConfig, urls: dict[str, str],
                     admin_token: str | None = None, ids: tuple[str, str] | None = None
                     ) -> tuple[dict, list[dict]]:
    """A Ray task: one rollout against the gateway of the node it landed on."""
    import ray

    from agent_code.rollout.client import GatewayClient
    from agent_code.rollout.runner import run_rollout

    url = urls[ray.get_runtime_context().get_node_id()]

    async def go() -> tuple[RolloutResult, list[Sample]]:
        async with GatewayClient(url, admin_token=admin_token) as client:
            return await run_rollout(task, k, config, client, ids=ids)

    result, samples = asyncio.run(go())
    row = result.to_dict()
    row["diff"], row["log"], row["stderr"] = result.diff, result.log, result.stderr
    return row, [s.to_dict() for s in samples]


def _result_from_row(row: dict[str, Any]) -> RolloutResult:
    return RolloutResult(**row)


async def run_all_ray(tasks: Sequence[Task], config: RolloutConfig, gateway_options: dict[str, Any], *,
                      address: str = "local", on_result: Callable[[RolloutResult, list[Sample]], None] | None = None,
                      cpus_per_rollout: float = 1.0, admin_token: str | None = None) -> list[RolloutResult]:
    """Every (task, sample) as a Ray task, at most ``config.concurrency`` at a time, against a
    gateway per node built from ``gateway_options``; ``admin_token`` (default: minted here)
    guards the gateways' session routes."""
    import ray
    from ray.util.scheduling_strategies import NodeAffinitySchedulingStrategy

    token = admin_token or secrets.token_urlsafe(24)
    started_here = not ray.is_initialized()
    if started_here:
        ray.init(address=None if address in ("local", "") else address, include_dashboard=False,
                 log_to_driver=False, configure_logging=False)
    actors: list[Any] = []
    results: list[RolloutResult] = []
    pending: dict[Any, tuple[Any, int, tuple[str, str]]] = {}
    try:
        nodes = [n["NodeID"] for n in ray.nodes() if n.get("Alive")]
        actor_cls = ray.remote(num_cpus=0)(NodeGateway)
        actors = [actor_cls.options(scheduling_strategy=NodeAffinitySchedulingStrategy(node, soft=False)).remote(
            gateway_options, token) for node in nodes]
        urls = dict(zip(nodes, await asyncio.gather(*(a.url.remote() for a in actors))))
        remote = ray.remote(num_cpus=cpus_per_rollout, max_retries=0)(_rollout_on_node)
        queue = [(task, k) for task in tasks for k in range(config.samples_per_task)]
        limit = max(1, config.concurrency)
        while queue or pending:
            while queue and len(pending) < limit:
                task, k = queue.pop(0)
                ids = rollout_ids(task.id, k)   # minted here: a task that dies still names its session
                ref = remote.remote(task, k, config, urls, token, ids)
                pending[asyncio.wrap_future(ref.future())] = (task, k, ids)
            done, _ = await asyncio.wait(list(pending), return_when=asyncio.FIRST_COMPLETED)
            for fut in done:
                task, k, (rid, sid) = pending.pop(fut)
                try:
                    row, sample_rows = fut.result()
                    result, samples = _result_from_row(row), [Sample.from_dict(s) for s in sample_rows]
                except Exception as exc:  # the Ray task itself died (node lost, worker killed)
                    result, samples = RolloutResult(rid, task.id, k, sid, config.agent), []
                    result.abort("boot", f"the Ray task failed: {type(exc).__name__}: {exc}")
                results.append(result)
                if on_result is not None:
                    on_result(result, samples)
    finally:
        for fut in pending:
            fut.cancel()
        for actor in actors:
            try:
                await asyncio.wait_for(asyncio.wrap_future(actor.close.remote().future()), 15)
            except Exception:
                pass
        if started_here:
            ray.shutdown()
    return results
