"""Start-up time of `agent-code --version` against a bare `python -c pass` baseline.

Run: .venv/bin/python bench/startup.py [runs]
Prints the median wall time of each and their ratio, plus what a full `--help` costs
(typer and rich imported) for comparison.
"""

from __future__ import annotations

import statistics
import subprocess
import sys
import time


def median_time(cmd: list[str], runs: int) -> float:
    times = []
    for _ in range(runs):
        start = time.perf_counter()
        subprocess.run(cmd, check=True, capture_output=True)
        times.append(time.perf_counter() - start)
    return statistics.median(times)


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


if __name__ == "__main__":
    main()
