"""The main job: ``agent-code rollout`` on the bundled tasks, offline.

``python -m agent_code.demo.rollout`` (what ``scripts/demo.sh`` runs) rolls agent-code out on
the bundled bug-fix tasks in the local sandbox against an in-process gateway on the embedded
model (llama.cpp, Qwen2.5-Coder-0.5B): no key, no network. It ends with the summary table and
the report's path; outputs go to ``rollouts/demo`` (replaced on each run).

``--scripted`` uses a scripted engine whose replies are the reference fixes (read, edit, run
the tests, answer): instant and deterministic, every task solved. Other arguments go to
``agent-code rollout`` (e.g. ``--samples-per-task 2``, ``--out DIR``).
"""

from __future__ import annotations

import sys
from pathlib import Path

from agent_code.cli import main

ROLLOUT_SCRIPT = Path(__file__).resolve().parent / "rollout_script.jsonl"
# the 0.5B model on two CPU cores: a few steps each, so the whole set ends in minutes
LOCAL_DEFAULTS = ["--max-steps", "6", "--budget", "180"]


def rollout_argv(*extra: str, scripted: bool = False) -> list[str]:
    engine = f"scripted:{ROLLOUT_SCRIPT}" if scripted else "llamacpp"
    argv = ["rollout", "bundled", "--agent", "agent-code", "--engine", engine, "--sandbox", "local"]
    if "--out" not in extra and "-o" not in extra:
        argv += ["--out", "rollouts/demo", "--overwrite"]
    if not scripted:
        argv += [a for i, a in enumerate(LOCAL_DEFAULTS) if LOCAL_DEFAULTS[i - i % 2] not in extra]
    return argv + list(extra)


if __name__ == "__main__":
    args = sys.argv[1:]
    scripted = "--scripted" in args
    main(rollout_argv(*[a for a in args if a != "--scripted"], scripted=scripted))
