"""``agent-code ARGS`` on a real pty (stdin, stdout and stderr): read what it shows, type —
for the tests of what agent-code asks only on a terminal (settings and folder trust)."""

from __future__ import annotations

import fcntl
import os
import pty
import select
import struct
import subprocess
import sys
import termios
import time
from pathlib import Path


class Terminal:
    def __init__(self, args: tuple[str, ...], env: dict[str, str], cwd: Path, columns: int = 160):
        master, slave = pty.openpty()
        fcntl.ioctl(slave, termios.TIOCSWINSZ, struct.pack("HHHH", 40, columns, 0, 0))
        env = {**env, "TERM": "xterm", "PROMPT_TOOLKIT_NO_CPR": "1"}
        self.proc = subprocess.Popen([sys.executable, "-m", "agent_code", *args], stdin=slave, stdout=slave,
                                     stderr=slave, env=env, cwd=str(cwd), start_new_session=True)
        os.close(slave)
        self.master = master
        self.seen = ""

    def expect(self, needle: str, timeout: float = 30) -> str:
        deadline = time.monotonic() + timeout
        while needle not in self.seen:
            left = deadline - time.monotonic()
            if left <= 0:
                raise AssertionError(f"{needle!r} did not appear; the terminal shows:\n{self.seen}")
            ready, _, _ = select.select([self.master], [], [], min(left, 0.5))
            if ready:
                try:
                    chunk = os.read(self.master, 65536)
                except OSError:
                    chunk = b""
                if not chunk and self.proc.poll() is not None:
                    raise AssertionError(f"{needle!r} did not appear before the exit; it showed:\n{self.seen}")
                self.seen += chunk.decode("utf-8", "replace")
        return self.seen

    def type(self, text: str) -> None:
        os.write(self.master, text.encode())

    def close(self, timeout: float = 30) -> int:
        try:
            code = self.proc.wait(timeout=timeout)
            while select.select([self.master], [], [], 0.2)[0]:  # what it showed before leaving
                try:
                    chunk = os.read(self.master, 65536)
                except OSError:
                    break
                if not chunk:
                    break
                self.seen += chunk.decode("utf-8", "replace")
            return code
        finally:
            if self.proc.poll() is None:
                self.proc.kill()
                self.proc.wait()
            os.close(self.master)
