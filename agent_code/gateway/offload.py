"""Work that must not run on the event loop: one worker pool for the gateway's heavy steps.

Parsing a large JSON body, translating it, rendering and tokenizing a prompt, committing a
turn (its log line is fsynced), counting tokens and writing a finished session's samples all
run in this pool, so a 10 MB request never holds up ``/healthz`` or another session's turn.
Python's GIL still lets one thread run Python at a time, but it switches every few
milliseconds, and the long native steps let go of it (hashing, file writes, and tokenizing:
:meth:`Renderer.encode` uses the tokenizer's batch call, which releases it). A session's own
steps keep their order through its lock (:class:`~agent_code.gateway.sessions.Session`).

The pool is sized to the machine: ``min(8, cpu_count + 2)`` threads, at least 2.

:class:`Batcher` is the other way off the loop, for a step that is short but frequent and lets
go of the GIL (tokenizing a turn's new suffix): one thread of its own takes every item waiting
and runs them as one batch, so the handoffs between the loop and the thread (a worker waiting
for the GIL, then the loop waiting for it back) are paid once per batch, not once per item.
"""

from __future__ import annotations

import asyncio
import functools
import os
import threading
from concurrent.futures import ThreadPoolExecutor
from typing import Any, Callable, Generic, ParamSpec, TypeVar

T = TypeVar("T")
P = ParamSpec("P")
R = TypeVar("R")

LARGE_BODY_BYTES = 1024 * 1024  # bodies at least this large are parsed and translated off the loop (orjson: ~0.5 ms a MB)

_pool: ThreadPoolExecutor | None = None
_pool_lock = threading.Lock()


def workers() -> int:
    return max(2, min(8, (os.cpu_count() or 2) + 2))


def pool() -> ThreadPoolExecutor:
    global _pool
    with _pool_lock:
        if _pool is None:
            _pool = ThreadPoolExecutor(max_workers=workers(), thread_name_prefix="gateway-work")
        return _pool


async def run(fn: Callable[P, T], *args: P.args, **kwargs: P.kwargs) -> T:
    """``fn(*args, **kwargs)`` in the worker pool; its exception is raised here."""
    return await asyncio.get_running_loop().run_in_executor(pool(), functools.partial(fn, *args, **kwargs))


async def run_if(large: bool, fn: Callable[P, T], *args: P.args, **kwargs: P.kwargs) -> T:
    """:func:`run` when ``large``, else at once on the loop (a thread hop costs more than a
    small step)."""
    return await run(fn, *args, **kwargs) if large else fn(*args, **kwargs)


class Batcher(Generic[T, R]):
    """``await batcher(item)`` is ``run_many([item])[0]``, run in this batcher's own thread
    together with every other item waiting when that thread comes round (in their order).
    ``run_many`` gets a list and returns one result per item; if it raises, each item of the
    batch is run alone, so an item's exception reaches its own caller only. The thread starts
    with the first item and is a daemon."""

    def __init__(self, run_many: Callable[[list[T]], list[R]], name: str = "gateway-batch") -> None:
        self.run_many, self.name = run_many, name
        self._waiting: list[tuple[T, asyncio.Future[R], asyncio.AbstractEventLoop]] = []
        self._lock = threading.Lock()
        self._wake = threading.Event()
        self._thread: threading.Thread | None = None
        self.batches = self.items = 0

    async def __call__(self, item: T) -> R:
        loop = asyncio.get_running_loop()
        future: asyncio.Future[R] = loop.create_future()
        with self._lock:
            self._waiting.append((item, future, loop))
            if self._thread is None:
                self._thread = threading.Thread(target=self._serve, name=self.name, daemon=True)
                self._thread.start()
        self._wake.set()
        return await future

    def _serve(self) -> None:
        while True:
            self._wake.wait()
            with self._lock:
                batch, self._waiting = self._waiting, []
                self._wake.clear()
            if not batch:
                continue
            self.batches += 1
            self.items += len(batch)
            outcomes: list[tuple[bool, Any]]
            try:
                results = self.run_many([item for item, _, _ in batch])
                if len(results) != len(batch):
                    raise RuntimeError(f"{self.run_many!r} returned {len(results)} results for {len(batch)} items")
                outcomes = [(True, result) for result in results]
            except BaseException:  # noqa: BLE001  (each item alone: its own exception to its own caller)
                outcomes = []
                for item, _, _ in batch:
                    try:
                        outcomes.append((True, self.run_many([item])[0]))
                    except BaseException as exc:  # noqa: BLE001
                        outcomes.append((False, exc))
            by_loop: dict[asyncio.AbstractEventLoop, list[tuple[asyncio.Future[Any], bool, Any]]] = {}
            for (_, future, loop), (ok, value) in zip(batch, outcomes):
                by_loop.setdefault(loop, []).append((future, ok, value))
            for loop, settled in by_loop.items():
                try:
                    loop.call_soon_threadsafe(_settle, settled)
                except RuntimeError:
                    pass  # that loop is closed: nobody waits for these any more


def _settle(settled: list[tuple[asyncio.Future[Any], bool, Any]]) -> None:
    for future, ok, value in settled:
        if future.done():   # its caller was cancelled
            continue
        if ok:
            future.set_result(value)
        else:
            future.set_exception(value)
