"""Several replicas of one engine behind one: each session pinned to a replica, failover on errors.

An engine keeps the KV cache of the prompts it has seen; a coding agent's next turn repeats
its whole history, so sending every turn of a session to the replica that served the last one
turns most of each prompt into a cache hit (sent to any replica, most turns start cold). So:

* a session (the gateway's ``session_id``, the agent's key) is pinned to the replica its first
  turn went to; a sub-agent or a compaction of that session has the same key and follows it;
* a new session (a new root) goes to the healthy replica with the fewest outstanding tokens
  (prompt plus the most it may generate, of the requests it is answering now), among those
  below ``max_sessions`` pinned sessions (None: no cap); past every cap it still gets the
  least loaded one rather than no answer;
* a replica whose generation fails (:class:`EngineError`: unreachable, a 5xx, a timeout, a
  malformed reply) is drained: its sessions are unpinned, the request is sent again to another
  replica — the same prompt ids, which the gateway always sends whole, so the turn continues
  token-exactly — and new sessions avoid it until it is healthy again;
* a refusal of the request itself (:class:`EngineRequestError`: a 400/413/422, a prompt over the
  context) is that request's error, passed on as it is: the replica stays healthy and nothing is
  retried (every replica would refuse it too), so no request can drain the pool;
* a drained replica is healthy again when its health route answers (engines with ``healthy()``:
  SGLang's and vLLM's ``GET /health``, probed every ``probe_s`` by a task that runs while any
  replica is drained: no traffic is needed), or, for engines without one, once ``recheck_s`` has
  passed (then one request may try it again) and it answers;
* a request without a session id goes to the least loaded replica and pins nothing.

Specs (:func:`agent_code.engines.create_engine`): ``sglang:URL1,URL2`` / ``vllm:URL1,URL2`` (one
engine kind, several servers), or ``KIND*N`` for N in-process replicas (``instant*3``,
``llamacpp*2``). Each generation's ``meta["replica"]`` names the replica that produced it;
:meth:`PoolEngine.status` is what ``GET /v1/engines`` shows.
"""

from __future__ import annotations

import asyncio
import contextlib
import time
from dataclasses import dataclass, field
from typing import Any, AsyncIterator, Collection, Sequence

from agent_code.engines.base import Engine, EngineError, EngineRequestError, Generation, Piece, stream_generation
from agent_code.protocols.canonical import SamplingParams

__all__ = ["PoolEngine", "Replica"]


@dataclass
class Replica:
    name: str
    engine: Engine
    healthy: bool = True
    outstanding: int = 0                 # tokens of the requests it is answering now
    requests: int = 0
    failures: int = 0
    failed_at: float = 0.0
    last_error: str = ""
    sessions: set[str] = field(default_factory=set)


class PoolEngine:
    def __init__(self, engines: Sequence[Engine], *, max_sessions: int | None = None,
                 recheck_s: float = 30.0, probe_s: float = 5.0, names: Sequence[str] | None = None) -> None:
        if not engines:
            raise ValueError("an engine pool needs at least one replica")
        names = list(names) if names is not None else [f"{e.name}#{i}" for i, e in enumerate(engines)]
        self.replicas = [Replica(n, e) for n, e in zip(names, engines)]
        self.name = f"pool of {len(self.replicas)} × {engines[0].name}"
        self.max_sessions, self.recheck_s, self.probe_s = max_sessions, recheck_s, probe_s
        self._prober: asyncio.Task[None] | None = None
        self.pins: dict[str, Replica] = {}
        self.supports_grammar = all(getattr(e, "supports_grammar", False) for e in engines)

    # -- routing ----------------------------------------------------------------------

    def _usable(self, replica: Replica) -> bool:
        return replica.healthy or time.monotonic() - replica.failed_at >= self.recheck_s

    def pick(self, session_id: str | None, avoid: Collection[str] = ()) -> Replica:
        """The replica for a request of ``session_id`` (pinning a new session); ``avoid``:
        names of replicas that already failed this request."""
        pinned = self.pins.get(session_id) if session_id is not None else None
        if pinned is not None and pinned.healthy and pinned.name not in avoid:
            return pinned
        usable = [r for r in self.replicas if r.name not in avoid and self._usable(r)]
        if not usable:
            raise EngineError(f"no healthy replica left in the pool ({self._errors()})")
        roomy = [r for r in usable if self.max_sessions is None or len(r.sessions) < self.max_sessions]
        chosen = min(roomy or usable, key=lambda r: (r.outstanding, len(r.sessions), self.replicas.index(r)))
        if session_id is not None:
            self._unpin(session_id)
            self.pins[session_id] = chosen
            chosen.sessions.add(session_id)
        return chosen

    def _unpin(self, session_id: str) -> None:
        old = self.pins.pop(session_id, None)
        if old is not None:
            old.sessions.discard(session_id)

    def _failed(self, replica: Replica, exc: Exception) -> None:
        """Drain ``replica``: its sessions go elsewhere on their next turn."""
        replica.healthy, replica.failed_at = False, time.monotonic()
        replica.failures += 1
        replica.last_error = str(exc)[:300]
        for sid in list(replica.sessions):
            self._unpin(sid)
        if self._prober is None or self._prober.done():
            self._prober = asyncio.get_running_loop().create_task(self._probe_drained())

    async def _probe_drained(self) -> None:
        """While a replica is drained: every ``probe_s``, ask each drained one that can tell
        (``healthy()``) whether it is up again, and take it back if so."""
        while True:
            drained = [r for r in self.replicas if not r.healthy and hasattr(r.engine, "healthy")]
            if not drained:
                return
            await asyncio.sleep(self.probe_s)
            for replica, up in zip(drained, await asyncio.gather(*(_probe(r.engine) for r in drained))):
                if up:
                    replica.healthy = True

    def _errors(self) -> str:
        return "; ".join(f"{r.name}: {r.last_error or 'unhealthy'}" for r in self.replicas if not r.healthy) \
            or "every replica was tried"

    def _take(self, session_id: str | None, tried: set[str], cost: int) -> Replica:
        """:meth:`pick`, with the request counted on the replica (the caller takes ``cost`` off)."""
        replica = self.pick(session_id, tried)
        replica.outstanding += cost
        replica.requests += 1
        return replica

    # -- the engine protocol ----------------------------------------------------------

    async def generate(self, prompt_ids: Sequence[int], sampling: SamplingParams, *,
                       session_id: str | None = None) -> Generation:
        tried: set[str] = set()
        cost = _cost(prompt_ids, sampling)
        while True:
            replica = self._take(session_id, tried, cost)
            try:
                generation = await replica.engine.generate(prompt_ids, sampling, session_id=session_id)
            except EngineRequestError:
                raise                                 # this request's own error: the replica is fine
            except EngineError as exc:
                self._failed(replica, exc)
                tried.add(replica.name)
                continue
            finally:
                replica.outstanding -= cost
            replica.healthy = True
            generation.meta["replica"] = replica.name
            return generation

    async def stream(self, prompt_ids: Sequence[int], sampling: SamplingParams, *,
                     session_id: str | None = None) -> AsyncIterator[Piece | Generation]:
        """The replica's stream; a replica that fails before its first piece is replaced like
        in :meth:`generate`, one that fails after it ends the stream with the error (what the
        client has seen cannot be taken back)."""
        tried: set[str] = set()
        cost = _cost(prompt_ids, sampling)
        while True:
            replica = self._take(session_id, tried, cost)
            started = False
            try:
                async for item in stream_generation(replica.engine, prompt_ids, sampling, session_id=session_id):
                    if isinstance(item, Generation):
                        item.meta["replica"] = replica.name
                        replica.healthy = True
                    started = True
                    yield item
                return
            except EngineRequestError:
                raise                                 # this request's own error: the replica is fine
            except EngineError as exc:
                self._failed(replica, exc)
                if started:
                    raise
                tried.add(replica.name)
            finally:
                replica.outstanding -= cost

    def forget(self, session_id: str) -> None:
        """The session ended (the gateway calls this): its pin goes, so pins do not pile up
        over thousands of rollouts."""
        self._unpin(session_id)

    async def close(self) -> None:
        if self._prober is not None:
            self._prober.cancel()
            with contextlib.suppress(BaseException):
                await self._prober
        for replica in self.replicas:
            await replica.engine.close()

    def status(self) -> dict[str, Any]:
        """Replicas, their health and load, and which sessions each holds."""
        return {"engine": self.name, "max_sessions": self.max_sessions, "replicas": [
            {"name": r.name, "healthy": r.healthy, "outstanding_tokens": r.outstanding, "requests": r.requests,
             "failures": r.failures, "last_error": r.last_error or None, "sessions": sorted(r.sessions)}
            for r in self.replicas]}


async def _probe(engine: Engine) -> bool:
    """The engine's ``healthy()``; False when it raises."""
    try:
        return await getattr(engine, "healthy")() is True
    except Exception:  # noqa: BLE001  (a probe that fails says the replica is not back)
        return False


def _cost(prompt_ids: Sequence[int], sampling: SamplingParams) -> int:
    """What a request adds to a replica's outstanding tokens: its prompt and the most it may generate."""
    return len(prompt_ids) + max(0, sampling.max_new_tokens or 0)
