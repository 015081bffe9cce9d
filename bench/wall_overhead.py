"""What the OS sandbox costs a command: ``bash -c true`` plain, through the wall, and through the
wall with a network allow-list (the egress relay starts with every command then).

Run: .venv/bin/python bench/wall_overhead.py [runs]
Prints the median wall time of each and the ratio to the plain run measured in the same run
(target: under 50 ms added per command without an allow-list — the bash tool's commands take
a model call of seconds to come).
"""

from __future__ import annotations

import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from agent_code.confine import Wall, WallSettings, open_wall


def median_ms(argv: list[str], env: dict[str, str], cwd: Path, runs: int) -> float:
    times = []
    for _ in range(runs):
        start = time.perf_counter()
        subprocess.run(argv, env=env, cwd=cwd, check=True, stdin=subprocess.DEVNULL)
        times.append(time.perf_counter() - start)
    return statistics.median(times) * 1000


def main() -> int:
    runs = int(sys.argv[1]) if len(sys.argv) > 1 else 30
    env = {"PATH": os.environ.get("PATH", "/usr/bin:/bin"), "HOME": os.environ.get("HOME", "/root"), "LANG": "C.UTF-8"}
    with tempfile.TemporaryDirectory() as tmp:
        root = Path(tmp)
        plain = median_ms(["bash", "-c", "true"], env, root, runs)
        print(f"plain bash -c true:            {plain:7.1f} ms")
        for label, settings in (("through the wall:", WallSettings()),
                                ("wall + allow-list (relay):", WallSettings(allowed_domains=("example.org",)))):
            wall = open_wall(root, settings)
            if not isinstance(wall, Wall):
                print(f"no sandbox on this machine: {wall.reason}")
                return 1
            try:
                argv, wrapped = wall.wrap(["bash", "-c", "true"], env)
                walled = median_ms(argv, wrapped, root, runs)
            finally:
                wall.close()
            print(f"{label:30} {walled:7.1f} ms  (+{walled - plain:.1f} ms, {walled / plain:.1f}x plain)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
