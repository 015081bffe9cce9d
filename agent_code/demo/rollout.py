"""The main job: ``agent-code rollout`` on the bundled tasks, offline.

``python -m agent_code.demo.rollout`` (what ``scripts/demo.sh`` runs) rolls agent-code out on
the bundled bug-fix tasks in the local sandbox against an in-process gateway on an embedded
model (llama.cpp, :data:`DEMO_ENGINE`: Qwen2.5-Coder-1.5B, which ``scripts/demo.sh`` installs;
the 0.5B model of ``--local`` solves none of them, measured): no key, no network. It ends with
the summary table and the report's path; outputs go to ``rollouts/demo`` (replaced on each run).

``--scripted`` uses a scripted engine whose replies are the reference fixes (read, edit, run
the tests, answer): instant and deterministic, every task solved. Other arguments go to
``agent-code rollout`` (e.g. ``--samples-per-task 2``, ``--out DIR``).

On the model, rollouts are bounded by turns (``--max-steps``). Before they start, a short
calibration (:mod:`agent_code.demo.calibrate`) measures the engine on this machine as it is
now: the wall-clock budget follows from it (unless ``--budget`` is given), and so does the
group size: two rollouts per task (a GRPO-style group) when they fit in :data:`TARGET_SECONDS`,
else one (unless ``--samples-per-task`` is given). A slow machine is said before and after.
"""

from __future__ import annotations

import sys
from pathlib import Path
from typing import TYPE_CHECKING

from agent_code.cli import main

if TYPE_CHECKING:
    from agent_code.demo.calibrate import Calibration

ROLLOUT_SCRIPT = Path(__file__).resolve().parent / "rollout_script.jsonl"
DEMO_ENGINE = "llamacpp:qwen2.5-coder-1.5b"
# the model on two CPU cores: a few turns each, so the whole set ends in minutes
# sampling: Qwen2.5-Coder's recommended settings (its generation_config.json), for every turn;
# a turn samples at most 1,024 tokens (a small model that rambles on to the agent's 8,192 would
# take minutes a turn on a busy machine; a whole bundled file is ~300 tokens)
LOCAL_DEFAULTS = ["--max-steps", "8", "--budget", "180", "--temperature", "0.7", "--top-p", "0.8", "--top-k", "20",
                  "--max-tokens", "1024"]
TARGET_SECONDS = 480.0          # what the demo's rollouts may take together, when choosing groups
EXPECTED_TURNS = 3              # turns a rollout takes on average (the fix, its test run read, the answer)


def rollout_argv(*extra: str, scripted: bool = False) -> list[str]:
    engine = f"scripted:{ROLLOUT_SCRIPT}" if scripted else DEMO_ENGINE
    argv = ["rollout", "bundled", "--agent", "agent-code", "--sandbox", "local"]
    if "--engine" not in extra and not any(a.startswith("--engine=") for a in extra):
        argv += ["--engine", engine]
    if "--out" not in extra and "-o" not in extra:
        argv += ["--out", "rollouts/demo", "--overwrite"]
    if not scripted:
        argv += [a for i, a in enumerate(LOCAL_DEFAULTS) if LOCAL_DEFAULTS[i - i % 2] not in extra]
    return argv + list(extra)


def _option(args: list[str], name: str) -> str | None:
    """The last value of ``--name VALUE`` or ``--name=VALUE`` in ``args``."""
    found = None
    for i, a in enumerate(args):
        if a == name and i + 1 < len(args):
            found = args[i + 1]
        elif a.startswith(name + "="):
            found = a.split("=", 1)[1]
    return found


def calibrated_args(args: list[str], tasks: int) -> tuple[list[str], Calibration | None]:
    """``args`` with the budget and group size the calibration gives (where not given), and
    the calibration (None when it could not run: the rollout then says what is wrong)."""
    from agent_code.demo.calibrate import calibrate

    engine = _option(args, "--engine") or DEMO_ENGINE
    if not engine.startswith("llamacpp") or ("--budget" in args and "--samples-per-task" in args):
        return args, None
    steps = int(_option(args, "--max-steps") or LOCAL_DEFAULTS[1])
    print("demo: measuring the model on this machine…", file=sys.stderr, flush=True)
    try:
        found = calibrate(engine)
    except Exception as exc:  # no model, no xllamacpp: the rollout reports it properly
        print(f"demo: calibration skipped: {exc}", file=sys.stderr)
        return args, None
    print(f"demo: {found.describe(steps)}", file=sys.stderr, flush=True)
    extra: list[str] = []
    if "--budget" not in args and not any(a.startswith("--budget=") for a in args):
        extra += ["--budget", f"{found.budget(steps):.0f}"]
    if "--samples-per-task" not in args and "-k" not in args:
        group = 2 if 2 * tasks * EXPECTED_TURNS * found.turn_seconds() <= TARGET_SECONDS else 1
        print(f"demo: {group} rollout(s) per task (~{tasks * group * EXPECTED_TURNS * found.turn_seconds() / 60:.0f} "
              f"min expected)", file=sys.stderr, flush=True)
        extra += ["--samples-per-task", str(group)]
    return extra + args, found


def demo(args: list[str]) -> None:
    scripted = "--scripted" in args
    args = [a for a in args if a != "--scripted"]
    found = None
    if not scripted:
        from agent_code.tasks import bundled_tasks_path, load_tasks

        args, found = calibrated_args(args, len(load_tasks(bundled_tasks_path())))
    try:
        main(rollout_argv(*args, scripted=scripted))
    finally:
        if found is not None and getattr(found, "slow", False):
            print(f"demo: note: the machine was slow during this run (other processes kept {found.busy:.1f} CPUs "
                  f"busy at the start); the budgets were scaled to its speed", file=sys.stderr)


if __name__ == "__main__":
    demo(sys.argv[1:])
