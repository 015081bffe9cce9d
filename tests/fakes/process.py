"""A fake engine server (:mod:`fakes.sglang_server` or :mod:`fakes.vllm_server`) in a child
process, so a test can kill it with SIGKILL mid-generation, as a crashed or OOM-killed engine
dies, and start it again on the same port.

    with EngineProcess("sglang", token_delay=0.01) as engine:   # engine.url
        ...
        engine.kill()      # SIGKILL: open connections are reset, nothing is answered
        engine.start()     # a fresh server on the same port

Run directly: ``python -m fakes.process sglang|vllm --port P [--token-delay S] [--reply-len N]``
(from ``tests/``); it prints ``ready`` once listening.
"""

from __future__ import annotations

import argparse
import os
import signal
import socket
import subprocess
import sys
import threading
from pathlib import Path
from typing import Any

TESTS = Path(__file__).resolve().parents[1]


class EngineProcess:
    def __init__(self, kind: str, *, token_delay: float = 0.0, reply_len: int = 12, context: int = 65536) -> None:
        if kind not in ("sglang", "vllm"):
            raise ValueError(f"unknown fake engine {kind!r}")
        self.kind, self.token_delay, self.reply_len, self.context = kind, token_delay, reply_len, context
        with socket.socket() as s:
            s.bind(("127.0.0.1", 0))
            self.port = s.getsockname()[1]
        self.url = f"http://127.0.0.1:{self.port}"
        self.proc: subprocess.Popen[str] | None = None

    def start(self) -> None:
        env = {**os.environ, "PYTHONPATH": str(TESTS) + os.pathsep + os.environ.get("PYTHONPATH", "")}
        self.proc = subprocess.Popen(
            [sys.executable, "-m", "fakes.process", self.kind, "--port", str(self.port),
             "--token-delay", str(self.token_delay), "--reply-len", str(self.reply_len), "--context", str(self.context)],
            env=env, stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, text=True)
        line = self.proc.stdout.readline() if self.proc.stdout else ""
        if line.strip() != "ready":
            self.kill()
            raise RuntimeError(f"the fake {self.kind} server did not start (said {line!r})")

    def kill(self) -> None:
        """SIGKILL, and reap: the server is gone when this returns."""
        if self.proc is not None and self.proc.poll() is None:
            self.proc.send_signal(signal.SIGKILL)
            self.proc.wait(timeout=10)

    def __enter__(self) -> "EngineProcess":
        self.start()
        return self

    def __exit__(self, *exc: Any) -> None:
        self.kill()


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("kind", choices=["sglang", "vllm"])
    parser.add_argument("--port", type=int, required=True)
    parser.add_argument("--token-delay", type=float, default=0.0)
    parser.add_argument("--reply-len", type=int, default=12)
    parser.add_argument("--context", type=int, default=65536)
    args = parser.parse_args(argv)
    from fakes.sglang_server import FakeModel, FakeSGLang
    from fakes.vllm_server import FakeVLLM

    model = FakeModel(reply_len=args.reply_len)
    if args.kind == "sglang":
        fake: Any = FakeSGLang(model=model, token_delay=args.token_delay, context_length=args.context, port=args.port)
    else:
        fake = FakeVLLM(model=model, token_delay=args.token_delay, max_model_len=args.context, port=args.port)
    with fake:
        print("ready", flush=True)
        threading.Event().wait()   # until killed


if __name__ == "__main__":
    main()
