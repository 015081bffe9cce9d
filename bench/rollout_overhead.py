"""Fixed per-rollout overhead of the local sandbox, excluding the agent's and the tests' own time.

Phases, each timed on the bundled tasks (the real code paths of ``agent-code rollout``):

    boot       create the sandbox (temp dirs, the agent's uid and identity files)
    prep       the repository snapshot unpacked, the baseline commit, ownership, the problem
    diff       ``git add -A`` + ``git diff`` of a one-line edit, as the agent user
    grade      grading set-up: a fresh sandbox, prep, the diff applied, test files restored
               (the grader's command is ``true``: test time is not overhead)
    teardown   every process killed, the sandbox removed

Baseline, measured in the same run: the least any such design does — copy the repo into a
temp dir, ``git init && git add -A && git commit`` there, ``git diff``, remove the dir —
with plain subprocesses and no isolation. Target: the whole overhead under 1 s per rollout.

Run: .venv/bin/python bench/rollout_overhead.py [--rounds 10]
"""

from __future__ import annotations

import argparse
import asyncio
import dataclasses
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from agent_code.sandbox import create_sandbox  # noqa: E402
from agent_code.tasks import bundled_tasks_path, collect_diff, grade, load_tasks, prepare_workspace  # noqa: E402

GIT_ENV = {"GIT_AUTHOR_NAME": "b", "GIT_AUTHOR_EMAIL": "b@b", "GIT_COMMITTER_NAME": "b",
           "GIT_COMMITTER_EMAIL": "b@b", "PATH": "/usr/bin:/bin"}


async def one_rollout(task) -> dict[str, float]:
    t: dict[str, float] = {}
    start = time.perf_counter()
    box = create_sandbox("local")
    await box.__aenter__()
    t["boot"] = time.perf_counter() - start
    mark = time.perf_counter()
    await prepare_workspace(box, task)
    t["prep"] = time.perf_counter() - mark
    module = next(p for p in Path(task.repo).glob("*.py"))
    await box.exec(f"echo '# touched' >> {module.name}", user="agent")   # stands in for the agent
    mark = time.perf_counter()
    diff = await collect_diff(box)
    t["diff"] = time.perf_counter() - mark
    mark = time.perf_counter()
    await box.__aexit__(None, None, None)
    t["teardown"] = time.perf_counter() - mark
    mark = time.perf_counter()
    no_tests = dataclasses.replace(task, eval_cmd="true", test_cmd=None, fail_to_pass=(), pass_to_pass=())
    verdict = await grade(no_tests, diff, lambda: create_sandbox("local"))
    assert verdict.applied_cleanly and verdict.reward == 1.0, verdict
    t["grade"] = time.perf_counter() - mark
    t["total"] = sum(t.values())
    return t


def baseline_rollout(task) -> float:
    start = time.perf_counter()
    root = Path(tempfile.mkdtemp(prefix="bench-baseline-"))
    work = root / "w"
    shutil.copytree(task.repo, work)
    subprocess.run("git init -q && git add -A && git commit -qm base", shell=True, cwd=work, env=GIT_ENV, check=True)
    module = next(work.glob("*.py"))
    module.write_text(module.read_text() + "# touched\n")
    subprocess.run("git add -A && git diff --cached HEAD", shell=True, cwd=work, env=GIT_ENV, check=True,
                   capture_output=True)
    shutil.rmtree(root)
    return time.perf_counter() - start


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rounds", type=int, default=10)
    args = parser.parse_args()
    tasks = load_tasks(bundled_tasks_path())
    asyncio.run(one_rollout(tasks[0]))   # warm-up (snapshot cache, imports)
    phases: dict[str, list[float]] = {}
    baseline: list[float] = []
    for _ in range(args.rounds):
        for task in tasks:
            for name, value in asyncio.run(one_rollout(task)).items():
                phases.setdefault(name, []).append(value)
            baseline.append(baseline_rollout(task))
    from agent_code.sandbox.local import isolation_available

    print(f"local sandbox overhead per rollout ({args.rounds} rounds × {len(tasks)} bundled tasks, "
          f"isolation {'on' if isolation_available() else 'off'})")
    print(f"{'phase':<10} {'median ms':>10} {'p90 ms':>8}")
    for name in ("boot", "prep", "diff", "teardown", "grade", "total"):
        values = sorted(phases[name])
        p90 = values[min(len(values) - 1, int(0.9 * len(values)))]
        print(f"{name:<10} {statistics.median(values) * 1000:>10.1f} {p90 * 1000:>8.1f}")
    total, base = statistics.median(phases["total"]), statistics.median(baseline)
    print(f"baseline (copy + git init/commit/diff + rm, no isolation): {base * 1000:.1f} ms")
    print(f"ratio overhead / baseline: {total / base:.1f}x · target < 1000 ms: "
          f"{'met' if total < 1.0 else 'NOT met'} ({total * 1000:.0f} ms)")


if __name__ == "__main__":
    main()
