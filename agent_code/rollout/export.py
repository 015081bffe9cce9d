"""Writing a rollout run's outputs as it goes, so an interrupted run keeps what finished.

    OUT/results.jsonl         one row per rollout (appended, flushed, as each ends)
    OUT/samples.jsonl         every sample (appended likewise)
    OUT/samples.parquet       all samples, written at the end (also after Ctrl-C)
    OUT/report.html           solve rate, per-task and per-rollout tables, links below
    OUT/inspect/<id>.html     each rollout's samples token by token (``agent-code inspect``'s view)
    OUT/rollouts/<id>.diff    the agent's diff;  OUT/rollouts/<id>.log  its run log: the CLI's stdout
                              only, stream-json (JSONL for Codex), every line machine-readable
    OUT/rollouts/<id>.stderr  the CLI's stderr (its plain-text messages), when it wrote any
"""

from __future__ import annotations

import html
import json
import math
import os
from collections import defaultdict
from pathlib import Path
from typing import TYPE_CHECKING, Any, Iterable, TypedDict

from agent_code.rollout.runner import INFRA_ABORTS, RolloutResult
from agent_code.trajectory.samples import Sample
from agent_code.trajectory.store import safe_name, write_parquet

if TYPE_CHECKING:
    from agent_code.render.template import Renderer

RESULTS, SAMPLES_JSONL, SAMPLES_PARQUET, REPORT = "results.jsonl", "samples.jsonl", "samples.parquet", "report.html"


def _append(path: Path, rows: Iterable[dict[str, Any]]) -> None:
    with open(path, "a", encoding="utf-8") as f:
        for row in rows:
            f.write(json.dumps(row, ensure_ascii=False, separators=(",", ":")) + "\n")
        f.flush()
        os.fsync(f.fileno())


class RunWriter:
    def __init__(self, out_dir: str | os.PathLike, *, renderer: Renderer | None = None, title: str = "agent-code rollout") -> None:
        self.out = Path(out_dir)
        self.renderer, self.title = renderer, title
        self.results: list[RolloutResult] = []
        self.samples: list[Sample] = []
        for name in ("rollouts", "inspect"):
            (self.out / name).mkdir(parents=True, exist_ok=True)
        for name in (RESULTS, SAMPLES_JSONL):      # a fresh run: no rows left from an earlier one
            (self.out / name).write_text("")

    def add(self, result: RolloutResult, samples: list[Sample]) -> None:
        stem = safe_name(result.session_id)
        rollouts = self.out / "rollouts"
        (rollouts / f"{stem}.diff").write_text(result.diff, encoding="utf-8")
        (rollouts / f"{stem}.log").write_text(result.log, encoding="utf-8")
        if getattr(result, "stderr", ""):
            (rollouts / f"{stem}.stderr").write_text(result.stderr, encoding="utf-8")
        if samples:
            from agent_code.rollout.inspect_html import render_html

            page = render_html(samples, self.renderer, title=f"rollout {result.rollout_id}")
            (self.out / "inspect" / f"{stem}.html").write_text(page, encoding="utf-8")
        _append(self.out / SAMPLES_JSONL, (s.to_dict(copy_data=False) for s in samples))
        _append(self.out / RESULTS, [result.to_dict()])
        self.results.append(result)
        self.samples.extend(samples)

    def close(self) -> dict[str, Path]:
        """Write the parquet file and the report; returns the four output paths."""
        parquet = write_parquet(self.samples, self.out / SAMPLES_PARQUET)
        report = self.out / REPORT
        report.write_text(render_report(self.results, self.title), encoding="utf-8")
        return {"samples.jsonl": self.out / SAMPLES_JSONL, "samples.parquet": parquet,
                "results.jsonl": self.out / RESULTS, "report.html": report}


def reward_text(result: RolloutResult) -> str:
    """A rollout's reward as the line, the summary and report.html all show it: the number
    (2 decimals), or ``n/a (REASON)`` when it was never computed."""
    if result.reward is None:
        return f"n/a ({result.abort_reason})" if result.abort_reason else "n/a"
    return f"{result.reward:.2f}"


def mean_text(summary: dict[str, Any]) -> str:
    """A summary's (or a task's) mean reward: over the rollouts that have one; ``n/a`` if none has."""
    mean = summary.get("mean_reward")
    return "n/a" if mean is None else f"{mean:.2f}"


def _mean(results: list[RolloutResult]) -> float | None:
    rewards = [r.reward for r in results if r.reward is not None]
    return sum(rewards) / len(rewards) if rewards else None


def pass_at_k(n: int, c: int, k: int) -> float:
    """The unbiased estimate of pass@k from ``n`` samples of which ``c`` passed: the chance
    that at least one of ``k`` samples drawn without replacement passes (Chen et al. 2021)."""
    if not 0 < k <= n:
        raise ValueError(f"pass@{k} needs 1 <= k <= n (n = {n})")
    if n - c < k:
        return 1.0
    return 1.0 - math.comb(n - c, k) / math.comb(n, k)


class TaskSummary(TypedDict):
    """One task's line in :func:`summarize`."""

    rollouts: int
    solved: int
    mean_reward: float | None
    rejected_paths: int
    spread: bool       # its rewards differ (a learning signal)


def summarize(results: list[RolloutResult]) -> dict[str, Any]:
    """Solve rate and counts over rollouts, and per task. ``mean_reward`` is over the rollouts
    that have a reward (None when none has: the run never graded anything); ``rejected_paths``
    counts the paths the grader refused to apply.

    A task's rollouts are one group (GRPO-style): ``groups_solved`` counts the tasks solved at
    least once, ``groups_with_spread`` those whose rewards differ (a group whose rewards are all
    equal has zero advantage everywhere: no learning signal), and ``pass_at[k]`` is pass@k
    averaged over the tasks, for every k up to the smallest group's size."""
    per_task: dict[str, list[RolloutResult]] = defaultdict(list)
    for r in results:
        per_task[r.task_id].append(r)
    aborted: dict[str, int] = defaultdict(int)
    for r in results:
        if r.abort_reason:
            aborted[r.abort_reason] += 1
    solved = sum(r.solved for r in results)
    tasks: dict[str, TaskSummary] = {t: {"rollouts": len(rs), "solved": sum(r.solved for r in rs), "mean_reward": _mean(rs),
                 "rejected_paths": sum(len(r.rejected_paths or ()) for r in rs),
                 "spread": len({r.reward for r in rs if r.reward is not None}) > 1}
             for t, rs in per_task.items()}
    smallest = min((t["rollouts"] for t in tasks.values()), default=0)
    pass_at = {k: sum(pass_at_k(t["rollouts"], t["solved"], k) for t in tasks.values()) / len(tasks)
               for k in range(1, smallest + 1)}
    engine_prompt = sum(r.tokens.get("engine_prompt", 0) for r in results)
    return {
        "rollouts": len(results), "solved": solved, "solve_rate": solved / len(results) if results else 0.0,
        "mean_reward": _mean(results), "rewarded": sum(r.reward is not None for r in results),
        "aborted": dict(aborted), "infrastructure": sum(n for k, n in aborted.items() if k in INFRA_ABORTS),
        "samples": sum(r.samples for r in results),
        "turns": sum(r.turns for r in results),
        "rejected_paths": sum(len(r.rejected_paths or ()) for r in results),
        "groups": len(tasks), "groups_solved": sum(t["solved"] > 0 for t in tasks.values()),
        "groups_with_spread": sum(t["spread"] for t in tasks.values()), "pass_at": pass_at,
        "engine_prompt_tokens": engine_prompt,
        # None: the engine reports no cache use (only turns it reported on count)
        "cached_prompt_tokens": (sum(r.tokens.get("cached", 0) for r in results)
                                 if any("cached" in r.tokens for r in results) else None),
        "tasks": tasks,
    }


def groups_text(summary: dict[str, Any]) -> str:
    """The groups line of the summary and the report: tasks solved at least once, pass@k, and
    how many groups carry a learning signal (rewards that differ)."""
    pass_at = summary["pass_at"]
    if not pass_at:
        return "groups: none"
    shown = sorted({1, max(pass_at)})
    return (f"groups: {summary['groups_solved']}/{summary['groups']} tasks solved at least once · "
            + " · ".join(f"pass@{k} {pass_at[k]:.0%}" for k in shown)
            + f" · {summary['groups_with_spread']}/{summary['groups']} groups with a reward spread")


def cache_text(summary: dict[str, Any]) -> str | None:
    """How much of the prompts the engine served from its prefix cache (None when the engine
    reports nothing)."""
    total, cached = summary["engine_prompt_tokens"], summary["cached_prompt_tokens"]
    if not total or cached is None:
        return None
    return f"engine prefix cache: {cached:,} of {total:,} prompt tokens reused ({cached / total:.0%})"


_CSS = """body{font-family:system-ui,sans-serif;margin:2em;color:#222}table{border-collapse:collapse;margin:1em 0}
td,th{border:1px solid #ccc;padding:4px 8px;text-align:left}th{background:#f3f3f3}.ok{color:#0a7a2f;font-weight:600}
.bad{color:#b00020}.big{font-size:2em;font-weight:700}"""


def _cell(value: object) -> str:
    return html.escape("-" if value is None else str(value))


def render_report(results: list[RolloutResult], title: str = "agent-code rollout") -> str:
    s = summarize(results)
    e = html.escape
    out = ["<!DOCTYPE html><html><head><meta charset='utf-8'>", f"<title>{e(title)}</title>",
           f"<style>{_CSS}</style></head><body>", f"<h1>{e(title)}</h1>",
           f"<p class='big'>solve rate {s['solve_rate']:.0%} ({s['solved']}/{s['rollouts']})</p>",
           f"<p>mean reward {e(mean_text(s))} · {s['samples']} samples · {s['turns']} turns"
           f" · rejected paths {s['rejected_paths']}"
           + (" · aborted: " + ", ".join(f"{e(k)} {v}" for k, v in sorted(s["aborted"].items()))
              if s["aborted"] else "") + "</p>",
           f"<p>{e(groups_text(s))}</p>",
           "<h2>tasks</h2><table><tr><th>task</th><th>rollouts</th><th>solved</th><th>mean reward</th>"
           "<th>rejected paths</th></tr>"]
    for task, t in s["tasks"].items():
        out.append(f"<tr><td>{e(task)}</td><td>{t['rollouts']}</td><td>{t['solved']}</td>"
                   f"<td>{e(mean_text(t))}</td><td>{t['rejected_paths']}</td></tr>")
    out.append("</table><h2>rollouts</h2><table><tr><th>rollout</th><th>reward</th><th>rejected paths</th>"
               "<th>applied</th><th>exit</th>"
               "<th>status</th><th>turns</th><th>trained tokens</th><th>agent s</th><th>total s</th>"
               "<th>trajectory</th><th>diff</th><th>log</th></tr>")
    for r in sorted(results, key=lambda r: (r.task_id, r.sample)):
        stem = e(safe_name(r.session_id), quote=True)
        status = r.status if not r.abort_reason else f"{r.status}: {r.abort_reason}"
        cls = "ok" if r.solved else "bad" if r.abort_reason else ""
        link = f"<a href='inspect/{stem}.html'>inspect</a>" if r.samples else "-"
        rejected = list(r.rejected_paths or ())
        rej = (f"<td title='{e(chr(10).join(rejected), quote=True)}'>{len(rejected)}</td>" if rejected
               else "<td>0</td>")
        out.append(f"<tr><td>{e(r.rollout_id)}</td><td class='{cls}'>{e(reward_text(r))}</td>{rej}"
                   f"<td>{_cell(r.applied_cleanly)}</td><td>{_cell(r.agent_exit_code)}</td>"
                   f"<td title='{e(r.error or '', quote=True)}'>{e(status)}</td><td>{r.turns}</td>"
                   f"<td>{r.tokens.get('trained', 0)}</td><td>{r.timings.get('agent', 0):.1f}</td>"
                   f"<td>{r.timings.get('total', 0):.1f}</td><td>{link}</td>"
                   f"<td><a href='rollouts/{stem}.diff'>diff</a></td><td><a href='rollouts/{stem}.log'>log</a>"
                   + (f" · <a href='rollouts/{stem}.stderr'>stderr</a>" if getattr(r, "stderr", "") else "")
                   + "</td></tr>")
    out.append("</table></body></html>")
    return "\n".join(out)
