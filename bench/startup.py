"""Start-up time of `agent-code --version` against a bare `python -c pass` baseline.

Run: .venv/bin/python bench/startup.py [runs]
Prints the median wall time of each and their ratio, plus what a full `--help` costs
(typer and rich imported) for comparison, and for `agent-code serve --engine scripted:…`
the time to its first `/healthz` answer (target: within 1.5 s; the gateway loads behind it)
and to `/healthz` saying `ok` (tokenizer and engine loaded).
"""

from __future__ import annotations

import socket
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import httpx


def median_time(cmd: list[str], runs: int) -> float:
    times = []
    for _ in range(runs):
        start = time.perf_counter()
        subprocess.run(cmd, check=True, capture_output=True)
        times.append(time.perf_counter() - start)
    return statistics.median(times)


def serve_times(runs: int) -> tuple[float, float]:
    """Median seconds from starting `agent-code serve` to its first /healthz answer, and to
    /healthz status ok."""
    first, ready = [], []
    with tempfile.TemporaryDirectory() as tmp:
        script = Path(tmp) / "s.jsonl"
        script.write_text('{"text": "hi"}\n')
        for _ in range(runs):
            with socket.socket() as s:
                s.bind(("127.0.0.1", 0))
                port = s.getsockname()[1]
            start = time.perf_counter()
            proc = subprocess.Popen([sys.executable, "-m", "agent_code", "serve", "--port", str(port),
                                     "--engine", f"scripted:{script}"],
                                    stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
            answered = None
            try:
                while time.perf_counter() - start < 120:
                    try:
                        status = httpx.get(f"http://127.0.0.1:{port}/healthz", timeout=5).json()["status"]
                    except httpx.TransportError:
                        time.sleep(0.01)
                        continue
                    answered = answered or time.perf_counter() - start
                    if status == "ok":
                        ready.append(time.perf_counter() - start)
                        break
                    time.sleep(0.01)
            finally:
                proc.terminate()
                proc.wait()
            first.append(answered if answered is not None else float("inf"))
    return statistics.median(first), statistics.median(ready) if ready else float("inf")


def main() -> None:
    runs = int(sys.argv[1]) if len(sys.argv) > 1 else 10
    py = sys.executable
    base = median_time([py, "-c", "pass"], runs)
    version = median_time([py, "-m", "agent_code", "--version"], runs)
    help_ = median_time([py, "-m", "agent_code", "--help"], runs)
    print(f"runs per command: {runs}")
    print(f"python -c pass          {base * 1000:7.1f} ms  (baseline)")
    print(f"agent-code --version    {version * 1000:7.1f} ms  ({version / base:.2f}x baseline)")
    print(f"agent-code --help       {help_ * 1000:7.1f} ms  ({help_ / base:.2f}x baseline)")
    first, ready = serve_times(max(1, runs // 2))
    print(f"serve: first /healthz   {first * 1000:7.1f} ms  ({first / base:.2f}x baseline; target < 1500 ms: "
          f"{'met' if first < 1.5 else 'NOT met'})")
    print(f"serve: /healthz ok      {ready * 1000:7.1f} ms  (tokenizer and scripted engine loaded)")


if __name__ == "__main__":
    main()
