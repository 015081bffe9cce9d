"""``kill -USR1 PID``: a long-running command (``rollout``, ``serve``) writes where it is to
stderr and goes on: every thread's Python stack, then every asyncio task's (a hang in an
event loop shows only ``select`` in the thread stacks; the tasks show what each waits on)."""

from __future__ import annotations

import asyncio
import faulthandler
import signal
import sys
from types import FrameType


def _dump(signum: int, frame: FrameType | None) -> None:
    err = sys.stderr
    err.write(f"\n--- agent-code: stacks on signal {signum} (threads, then asyncio tasks) ---\n")
    err.flush()
    faulthandler.dump_traceback(file=err, all_threads=True)
    try:
        loop = asyncio.get_running_loop()  # (the handler runs in the main thread, inside the loop when one runs)
    except RuntimeError:
        loop = None
    if loop is not None:
        for task in asyncio.all_tasks(loop):
            err.write(f"task {task.get_name()}: {task!r}"[:2000] + "\n")
            task.print_stack(limit=20, file=err)
    err.write("--- end of stacks ---\n")
    err.flush()


def dump_stacks_on_sigusr1() -> bool:
    """Install the handler (the main thread only, where signals are handled; False elsewhere
    or where SIGUSR1 does not exist)."""
    usr1 = getattr(signal, "SIGUSR1", None)
    if usr1 is None:
        return False
    try:
        signal.signal(usr1, _dump)
    except ValueError:  # not the main thread
        return False
    return True
