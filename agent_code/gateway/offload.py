"""Work that must not run on the event loop: one worker pool for the gateway's heavy steps.

Parsing a large JSON body, translating it, rendering and tokenizing a prompt, committing a
turn (its log line is fsynced), counting tokens and writing a finished session's samples all
run in this pool, so a 10 MB request never holds up ``/healthz`` or another session's turn.
Python's GIL still lets one thread run Python at a time, but it switches every few
milliseconds, and the long native steps let go of it (hashing, file writes, and tokenizing:
:meth:`Renderer.encode` uses the tokenizer's batch call, which releases it). A session's own
steps keep their order through its lock (:class:`~agent_code.gateway.sessions.Session`).

The pool is sized to the machine: ``min(8, cpu_count + 2)`` threads, at least 2.
"""

from __future__ import annotations

import asyncio
import functools
import os
import threading
from concurrent.futures import ThreadPoolExecutor
from typing import Any, Callable, TypeVar

T = TypeVar("T")

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


async def run(fn: Callable[..., T], *args: Any, **kwargs: Any) -> T:
    """``fn(*args, **kwargs)`` in the worker pool; its exception is raised here."""
    return await asyncio.get_running_loop().run_in_executor(pool(), functools.partial(fn, *args, **kwargs))


async def run_if(large: bool, fn: Callable[..., T], *args: Any, **kwargs: Any) -> T:
    """:func:`run` when ``large``, else at once on the loop (a thread hop costs more than a
    small step)."""
    return await run(fn, *args, **kwargs) if large else fn(*args, **kwargs)
