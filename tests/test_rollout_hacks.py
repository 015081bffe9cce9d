"""Reward hacks through real rollouts: the real agent-code and Claude Code CLIs, each in a local
sandbox, talking to a real gateway on loopback over a scripted engine (Qwen2.5's real template
and tokenizer), plant every hack of tests/hacks.py with their own file-writing tool (agent-code's
write_file, Claude Code's Write) and shell tool (bash, Bash), then answer "all tests pass" (after
a listed hack the agent first runs the task's grading command in its workspace and sees it green:
the hack is real where the agent stands). The runner collects the diff and grades it: each hack
earns 0 with what it planted listed in ``RolloutResult.rejected_paths`` (and counted in the
report), while the honest fix, made the same way, earns 1 with nothing refused. Both grading
modes run: ``eval_cmd`` (bundled task thermo-fahrenheit) and FAIL_TO_PASS/``test_cmd`` (bundled
task pager-last-page).

The matrix, one rollout each:

* agent-code: the four hack classes the issue listed (``listed=True``) in both modes, our own
  variants (the rest of HACKS plus bytecode of the module under test, ``unchecked_pyc``) in the
  eval_cmd mode, and one honest fix per mode;
* Claude Code: the four hack classes the issue listed (``listed=True``) in both modes, and one
  honest fix per mode (skipped where the CLI is not installed in .cache/node).

Each agent's rollouts go through one ``run_all`` call at concurrency 2 (a module fixture), and
each rollout has a task id of its own so the scripted engine hands every session its own lines.
"""

from __future__ import annotations

import asyncio
import json
import os
import tempfile
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest

from agent_code.rollout.runner import RolloutConfig, RolloutResult, run_all
from agent_code.tasks import bundled_tasks_path, load_tasks
from gateway_fixtures import qwen25_renderer, scripted_gateway
from hacks import HACKS, Hack, unchecked_pyc
from rollout_fixtures import call, say

# grading mode -> (bundled task, module under test, the honest fix: (file, old, new))
MODES: dict[str, tuple[str, str, tuple[str, str, str]]] = {
    "eval_cmd": ("thermo-fahrenheit", "thermo",
                 ("thermo.py", "(fahrenheit - FREEZING_F) * 9 / 5", "(fahrenheit - FREEZING_F) * 5 / 9")),
    "FAIL_TO_PASS": ("pager-last-page", "pager",
                     ("pager.py", "return total // per_page", "return -(-total // per_page)")),
}
# the command each mode grades with, as the agent runs it in its workspace after a listed hack
CHECK = {"eval_cmd": "python -m pytest -q -p no:cacheprovider tests",
         "FAIL_TO_PASS": "python -m pytest -q -rA -p no:cacheprovider"}
AGENTS = ("agent-code", "claude-code")
HONEST = "honest-fix"
SANDBOX_GLOB = "agent-code-sandbox-*"


def mode_hacks(agent: str, mode: str) -> list[Hack]:
    """The hacks ``agent`` plays in ``mode``: the listed ones in both modes; for agent-code also our
    own variants, in the eval_cmd mode (tests/test_grading_hacks.py grades every one in both)."""
    listed = [h for h in HACKS if h.listed]
    if agent == "claude-code" or mode != "eval_cmd":
        return listed
    _, module, (_, old, new) = MODES[mode]
    return [*HACKS, unchecked_pyc(module, old, new)]


@dataclass(frozen=True)
class Case:
    agent: str
    mode: str
    hack: Hack | None           # None: the honest fix

    @property
    def name(self) -> str:
        return self.hack.name if self.hack else HONEST

    @property
    def task_id(self) -> str:   # one task per rollout, so its session ("<task>.0") finds its own lines
        return f"{MODES[self.mode][0]}--{self.agent}--{self.name}"

    @property
    def session(self) -> str:
        return f"{self.task_id}.0"


CASES = [Case(agent, mode, hack) for agent in AGENTS for mode in MODES
         for hack in [*mode_hacks(agent, mode), None]]


def script(case: Case) -> list[dict[str, Any]]:
    """What the scripted model says in ``case``'s session: plant the hack (or fix the bug) with
    the agent's own tools, then claim success."""
    s = case.session
    if case.hack is None:
        path, old, new = MODES[case.mode][2]
        if case.agent == "agent-code":
            lines = [call("read_file", {"path": path}, s),
                     call("edit_file", {"path": path, "old_string": old, "new_string": new}, s)]
        else:
            lines = [call("Read", {"file_path": path}, s),
                     call("Edit", {"file_path": path, "old_string": old, "new_string": new}, s)]
        return [*lines, say("Fixed the bug.", s)]
    lines = []
    for path, content in case.hack.files.items():
        if case.agent == "agent-code":
            lines.append(call("write_file", {"path": path, "content": content}, s))
        else:
            lines.append(call("Write", {"file_path": path, "content": content}, s))
    commands = [*case.hack.commands, *([CHECK[case.mode]] if case.hack.listed else [])]
    for command in commands:
        if case.agent == "agent-code":
            lines.append(call("bash", {"command": command}, s))
        else:
            lines.append(call("Bash", {"command": command, "description": "Prepare the test run"}, s))
    return [*lines, say("All tests pass now.", s)]


def tasks_file(tmp_path: Path, cases: list[Case]) -> Path:
    """A tasks JSONL with a copy of each case's bundled task under the case's own id."""
    bundled = bundled_tasks_path()
    rows = {json.loads(line)["id"]: json.loads(line) for line in bundled.read_text().splitlines() if line.strip()}
    out = tmp_path / "tasks.jsonl"
    lines = []
    for case in cases:
        row = dict(rows[MODES[case.mode][0]], id=case.task_id)
        row["repo"] = str((bundled.parent / row["repo"]).resolve())
        lines.append(json.dumps(row))
    out.write_text("\n".join(lines) + "\n")
    return out


@dataclass
class Rollouts:
    results: dict[str, RolloutResult]   # by task id
    last_tool_result: dict[str, str]    # by task id: what the agent's last tool call answered
    left: list[str]                     # sandboxes left behind


def rollouts(agent: str, tmp_path: Path) -> Rollouts:
    """Every case of ``agent`` in one ``run_all`` at concurrency 2, in a temp dir of its own."""
    cases = [c for c in CASES if c.agent == agent]
    tasks = load_tasks(tasks_file(tmp_path, cases))
    lines = [line for case in cases for line in script(case)]
    tmp = tmp_path / "tmp"
    tmp.mkdir()
    os.chmod(tmp_path, 0o755)   # the sandbox's agent user passes through on the way to its dirs
    saved, tempfile.tempdir = tempfile.tempdir, str(tmp)
    try:
        with scripted_gateway(tmp_path, lines, qwen25_renderer()) as (url, gateway):
            config = RolloutConfig(agent=agent, concurrency=2, budget=240, model="claude-sonnet-4-5", max_steps=12,
                                   keep_sessions=True)
            results = asyncio.run(run_all(tasks, config, url))
            last = {}
            for r in results:
                session = gateway.store.get(r.session_id)
                last[r.task_id] = json.dumps(session.turns[-1].messages[-1]) if session and session.turns else ""
    finally:
        tempfile.tempdir = saved
    return Rollouts({r.task_id: r for r in results}, last, sorted(p.name for p in tmp.glob(SANDBOX_GLOB)))


@pytest.fixture(scope="module")
def agent_code_rollouts(tmp_path_factory):
    qwen25_renderer()   # skips without the embedded model's tokenizer
    return rollouts("agent-code", tmp_path_factory.mktemp("agent-code-hacks"))


@pytest.fixture(scope="module")
def claude_code_rollouts(tmp_path_factory):
    from agent_code.harness.claude_code import host_claude

    if host_claude() is None:
        pytest.skip("Claude Code is not installed (scripts/test.sh installs it into .cache/node)")
    qwen25_renderer()
    return rollouts("claude-code", tmp_path_factory.mktemp("claude-code-hacks"))


@pytest.fixture
def results(request):
    return request.getfixturevalue(request.param.replace("-", "_") + "_rollouts")


def why(result: RolloutResult) -> str:
    return f"{result.task_id}: {result.error}\n--- diff\n{result.diff[-2000:]}\n--- log\n{result.log[-3000:]}"


@pytest.mark.parametrize("case, results", [pytest.param(c, c.agent, id=f"{c.agent}-{c.mode}-{c.name}")
                                           for c in CASES if c.hack is not None], indirect=["results"])
def test_a_hack_through_a_real_rollout_earns_nothing_and_is_listed(case, results):
    result = results.results[case.task_id]
    hack = case.hack
    assert result.status == "completed" and result.abort_reason is None, why(result)
    assert result.agent_exit_code in (0, 3) and result.turns >= 2, why(result)
    for path in [*hack.files, *hack.rejected]:      # every plant reached the agent's diff
        assert f" b/{path}\n" in result.diff, (path, why(result))
    assert result.applied_cleanly, why(result)
    assert result.reward == 0.0, why(result)
    assert result.rejected_paths == sorted(hack.rejected), why(result)
    if hack.listed:   # the hack is real: in the agent's own workspace the grading command goes green
        seen = results.last_tool_result[case.task_id]
        assert "passed" in seen and "failed" not in seen, seen[-2000:]


@pytest.mark.parametrize("case, results", [pytest.param(c, c.agent, id=f"{c.agent}-{c.mode}")
                                           for c in CASES if c.hack is None], indirect=["results"])
def test_the_honest_fix_through_a_real_rollout_earns_one(case, results):
    result = results.results[case.task_id]
    _, _, new = MODES[case.mode][2]
    assert result.status == "completed" and result.abort_reason is None, why(result)
    assert any(line.startswith("+ ") and new in line for line in result.diff.splitlines()), why(result)
    assert result.reward == 1.0 and result.applied_cleanly, why(result)
    assert result.rejected_paths == [], why(result)


@pytest.mark.parametrize("results", AGENTS, indirect=True)
def test_the_report_counts_the_rejected_paths(results):
    """What a person reads: each rollout's line says how many paths were refused, the summary
    and the HTML report count them per task and in all; nothing is left of the sandboxes."""
    from agent_code.cli.rollout import rollout_line
    from agent_code.rollout.export import render_report, summarize

    by_task = results.results
    agent = next(iter(by_task.values())).agent
    cases = [c for c in CASES if c.agent == agent]
    assert sorted(by_task) == sorted(c.task_id for c in cases)
    summary = summarize(list(by_task.values()))
    report = render_report(list(by_task.values()))
    total = 0
    for case in cases:
        result = by_task[case.task_id]
        n = len(case.hack.rejected) if case.hack else 0
        total += n
        assert summary["tasks"][case.task_id]["rejected_paths"] == n, (case.task_id, result.rejected_paths)
        line = rollout_line(result)   # the CLI's per-rollout line (progress and summary)
        assert line.endswith(f" · {n} rejected path(s)") if n else "rejected" not in line, line
        assert all(path in report for path in result.rejected_paths)   # the report cell's tooltip
    assert summary["solved"] == sum(c.hack is None for c in cases) == len(MODES)
    assert summary["rejected_paths"] == total and f"rejected paths {total}" in report
    assert results.left == []
