"""Solve rate: tasks × samples × agent × model, with wall time and pass@k, in one run.

Each combination is a real ``agent-code rollout`` (subprocess: the in-process gateway on the
engine, the local sandbox, grading by the tasks' tests) on the same tasks with the same
number of samples per task; the table gives, per combination, the rollouts, pass@1 and
pass@k (the unbiased estimate, averaged over tasks), the tasks solved at least once, the
groups whose rewards differ (a learning signal), the turns, the engine's prefix-cache reuse
and the wall time. The first combination is the baseline the others are compared with
(``vs first``: the ratio of pass@1).

    .venv/bin/python bench/solve_rate.py                      # agent-code on the demo's 1.5B model, k=2
    .venv/bin/python bench/solve_rate.py --agents agent-code,claude-code --engines llamacpp:qwen2.5-coder-1.5b,llamacpp
    .venv/bin/python bench/solve_rate.py -k 4 --tasks bundled --max-steps 8 --budget 300

Options the demo uses are the defaults here (its model, ``--max-steps 8``, ``--max-tokens 1024``,
Qwen2.5-Coder's sampling: temperature 0.7, top-p 0.8, top-k 20). Claude Code needs its npm package (``scripts/test.sh``
installs it as a test peer) and sends a 16-19k-token prompt: on two CPU cores its first
prefill takes minutes, so give it a larger ``--budget``.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from agent_code.rollout.export import summarize  # noqa: E402
from agent_code.rollout.runner import RolloutResult  # noqa: E402


def run_one(agent: str, engine: str, args: argparse.Namespace, out: Path) -> dict:
    argv = [sys.executable, "-m", "agent_code", "rollout", args.tasks, "--agent", agent, "--engine", engine,
            "--sandbox", "local", "-k", str(args.k), "--max-steps", str(args.max_steps), "--budget", str(args.budget),
            "--temperature", str(args.temperature), "--top-p", str(args.top_p), "--top-k", str(args.top_k),
            "--max-tokens", str(args.max_tokens), "--out", str(out), "--overwrite"]
    started = time.perf_counter()
    proc = subprocess.run(argv, cwd=ROOT, capture_output=True, text=True)
    wall = time.perf_counter() - started
    rows = [json.loads(line) for line in (out / "results.jsonl").read_text().splitlines() if line.strip()] \
        if (out / "results.jsonl").is_file() else []
    s = summarize([RolloutResult(**row) for row in rows])   # the run's own summary, from its results
    nan = float("nan")
    cache = s["cached_prompt_tokens"]
    return {"agent": agent, "engine": engine, "rollouts": s["rollouts"], "exit": proc.returncode,
            "pass1": s["pass_at"].get(1, nan), "passk": s["pass_at"].get(args.k, nan),
            "solved_tasks": s["groups_solved"], "tasks": s["groups"], "spread": s["groups_with_spread"],
            "turns": s["turns"], "aborted": sum(s["aborted"].values()),
            "cache": cache / s["engine_prompt_tokens"] if cache is not None and s["engine_prompt_tokens"] else None,
            "wall": wall,
            "error": proc.stderr.strip().splitlines()[-1] if proc.returncode not in (0,) and proc.stderr.strip() else ""}


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--agents", default="agent-code", help="comma-separated: agent-code, claude-code, codex, qwen-code")
    ap.add_argument("--engines", default="llamacpp:qwen2.5-coder-1.5b",
                    help="comma-separated engine specs (llamacpp: the 0.5B model, llamacpp:qwen2.5-coder-1.5b, "
                         "llamacpp:PATH.gguf)")
    ap.add_argument("--tasks", default="bundled")
    ap.add_argument("-k", type=int, default=2, help="samples per task (a group)")
    ap.add_argument("--max-steps", type=int, default=8)
    ap.add_argument("--budget", type=float, default=300.0, help="seconds per rollout")
    ap.add_argument("--temperature", type=float, default=0.7)
    ap.add_argument("--top-p", type=float, default=0.8)
    ap.add_argument("--top-k", type=int, default=20)
    ap.add_argument("--max-tokens", type=int, default=1024, help="tokens a model turn may sample")
    ap.add_argument("--out", type=Path, default=None, help="keep each run's outputs here (default: a temp dir)")
    args = ap.parse_args()

    base = args.out or Path(tempfile.mkdtemp(prefix="solve-rate-"))
    results = []
    for engine in args.engines.split(","):
        for agent in args.agents.split(","):
            model = Path(engine.split(":", 1)[-1]).name.removesuffix(".gguf") if ":" in engine else engine
            out = base / f"{agent}-{model}"
            print(f"running {agent} on {engine}, k={args.k} → {out}", file=sys.stderr, flush=True)
            results.append(run_one(agent, engine, args, out))
    print(f"tasks {args.tasks} · k={args.k} · max steps {args.max_steps} · max tokens {args.max_tokens} · "
          f"budget {args.budget:g} s · "
          f"temperature {args.temperature} top-p {args.top_p} top-k {args.top_k} · {os.cpu_count()} cpus, "
          f"load {os.getloadavg()[0]:.1f}")
    header = (f"{'agent':12} {'engine':28} {'rollouts':>8} {'pass@1':>7} {'pass@' + str(args.k):>7} {'solved':>7} "
              f"{'spread':>7} {'turns':>6} {'aborted':>7} {'cache':>6} {'wall s':>7} {'vs first':>8}")
    print(header)
    first = results[0]["pass1"] if results else float("nan")
    for r in results:
        ratio = r["pass1"] / first if first and first == first else float("nan")
        cache = f"{r['cache']:.0%}" if r["cache"] is not None else "-"
        print(f"{r['agent']:12} {r['engine'][-28:]:28} {r['rollouts']:8d} {r['pass1']:7.0%} {r['passk']:7.0%} "
              f"{r['solved_tasks']:>3}/{r['tasks']:<3} {r['spread']:>3}/{r['tasks']:<3} {r['turns']:6d} "
              f"{r['aborted']:7d} {cache:>6} {r['wall']:7.0f} {ratio:8.2f}")
        if r["error"]:
            print(f"  {r['agent']} on {r['engine']}: exit {r['exit']}: {r['error'][:200]}")
    return 0 if all(r["rollouts"] for r in results) else 1


if __name__ == "__main__":
    sys.exit(main())
