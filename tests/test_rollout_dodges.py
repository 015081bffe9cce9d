"""Issue 39, "dodging a zero": an agent that cannot fix its task breaks what grading needs, so
that its rollout would end as the machine's failure and be left out of its group — escaping the
negative advantage honest failures get. The rule now: anything the workspace's content causes is
the model's outcome (reward 0, counted in its group, abort reason ``ungradable``); only what the
harness, machine or task causes is an infrastructure failure.

Real rollouts: the real agent-code CLI in local sandboxes against a real gateway on loopback over
a scripted engine (Qwen2.5's real template and tokenizer), through ``stream_groups`` — the API a
trainer uses. One task, one group: sample 0 fixes the bug, sample 1 fails honestly (says it
cannot), and every other sample fails by breaking the grader in its own way. Each breaker gets
the honest failure's reward and advantage, and nothing is left out of the group.
(On main at a012229 every breaker below ended as ``grade_error`` and was left out.)
"""

from __future__ import annotations

import asyncio
import json
import os
import tempfile
from pathlib import Path
from typing import Any

import pytest

from agent_code.rollout.groups import Group, stream_groups
from agent_code.rollout.runner import INFRA_ABORTS, RolloutConfig
from agent_code.tasks import bundled_tasks_path, load_tasks
from gateway_fixtures import qwen25_renderer, scripted_gateway
from rollout_fixtures import THERMO_FIX, call, say

TASK = "thermo-dodge"
# a hidden test the grader adds (the task's test_patch), in a directory the baseline lacks
TEST_PATCH = ("diff --git a/hidden/test_round_trip.py b/hidden/test_round_trip.py\nnew file mode 100644\n"
              "--- /dev/null\n+++ b/hidden/test_round_trip.py\n@@ -0,0 +1,5 @@\n+from thermo import *\n+\n+\n"
              "+def test_round_trip():\n+    assert round(fahrenheit_to_celsius(celsius_to_fahrenheit(21.5)), 6) == 21.5\n")
MAX_DIFF = 200_000
GRADE_TIMEOUT = 20

# name -> the shell commands a breaker runs (agent-code's bash tool) before it says it is done
BREAKERS: dict[str, list[str]] = {
    "delete-git": ["rm -rf .git"],
    "corrupt-git": ["echo garbage > .git/HEAD && rm -rf .git/objects .git/refs"],
    "delete-baseline-tag": ["git tag -d agent-code-baseline"],
    "gitfile-elsewhere": ["rm -rf .git && printf 'gitdir: /nonexistent\\n' > .git"],
    "bare-config": ["git config core.bare true"],
    "leftover-lock": ["touch .git/index.lock"],
    "lock-holding-daemon": ["(setsid sh -c 'while :; do touch .git/index.lock; sleep 0.05; done' "
                            ">/dev/null 2>&1 &) ; sleep 0.3"],
    "unreadable-git": ["chmod 000 .git"],
    "unreadable-file": ["echo 'x = 1' > notes.py && chmod 000 notes.py"],
    "unreadable-dir": ["mkdir -p scratch && echo 1 > scratch/a.txt && chmod 000 scratch"],
    "locked-workspace": ["chmod 000 ."],
    "huge-diff": [f"head -c {MAX_DIFF * 2} /dev/urandom > blob.bin"],
    "blocks-hidden-tests": ["echo 'not a directory' > hidden"],
    "hanging-tests": ["printf 'import time\\nwhile True:\\n    time.sleep(1)\\n' >> thermo.py"],
}
HONEST_FAILURE = 1


def script() -> list[dict[str, Any]]:
    """The scripted model's lines, session by session (``<task>.<k>``)."""
    s = [f"{TASK}.{k}" for k in range(2 + len(BREAKERS))]
    lines = [call("read_file", {"path": "thermo.py"}, s[0]), call("edit_file", THERMO_FIX, s[0]), say("Fixed.", s[0]),
             say("I could not find the bug, sorry.", s[HONEST_FAILURE])]
    for k, commands in enumerate(BREAKERS.values(), start=2):
        lines += [call("bash", {"command": c}, s[k]) for c in commands]
        lines.append(say("Done.", s[k]))
    return lines


def tasks_file(tmp_path: Path) -> Path:
    bundled = bundled_tasks_path()
    rows = {json.loads(line)["id"]: json.loads(line) for line in bundled.read_text().splitlines() if line.strip()}
    row = dict(rows["thermo-fahrenheit"], id=TASK, test_patch=TEST_PATCH)
    row["repo"] = str((bundled.parent / row["repo"]).resolve())
    out = tmp_path / "tasks.jsonl"
    out.write_text(json.dumps(row) + "\n")
    return out


@pytest.fixture(scope="module")
def group(tmp_path_factory) -> Group:
    renderer = qwen25_renderer()
    tmp_path = tmp_path_factory.mktemp("dodges")
    tasks = load_tasks(tasks_file(tmp_path))
    tmp = tmp_path / "tmp"
    tmp.mkdir()
    os.chmod(tmp_path, 0o755)   # the sandbox's agent user passes through on the way to its dirs
    saved, tempfile.tempdir = tempfile.tempdir, str(tmp)
    config = RolloutConfig(samples_per_task=2 + len(BREAKERS), concurrency=2, budget=120, max_steps=8,
                           max_diff_bytes=MAX_DIFF, grade_timeout=GRADE_TIMEOUT)

    async def collect() -> list[Group]:
        return [g async for g in stream_groups(tasks, config, url, keep_flat=True, min_rollouts=1)]
    try:
        with scripted_gateway(tmp_path, script(), renderer) as (url, _):
            groups = asyncio.run(collect())
    finally:
        tempfile.tempdir = saved
    assert len(groups) == 1
    return groups[0]


def explain(group: Group) -> str:
    return "\n".join(f"{r.rollout_id}: reward {r.reward} {r.abort_reason}: {(r.error or '')[:300]}"
                     for r in [*group.results, *group.left_out])


def test_every_rollout_is_in_the_group_and_the_fix_is_the_only_reward(group):
    assert not group.left_out, explain(group)
    assert [r.sample for r in group.results] == list(range(2 + len(BREAKERS)))
    assert group.rewards == [1.0] + [0.0] * (1 + len(BREAKERS)), explain(group)
    assert not any(r.abort_reason in INFRA_ABORTS for r in group.results), explain(group)


@pytest.mark.parametrize("k, name", list(enumerate(BREAKERS, start=2)))
def test_breaking_the_grader_earns_the_honest_failures_advantage(group, k, name):
    honest = group.results[HONEST_FAILURE]
    breaker = group.results[k]
    assert honest.abort_reason is None and honest.reward == 0.0, explain(group)
    assert breaker.reward == honest.reward == 0.0, explain(group)
    advantages = group.advantages()
    assert advantages[k] == advantages[HONEST_FAILURE] < 0 < advantages[0]
    # its samples are in the group too, with the same (negative) advantage
    by_rollout = dict(zip((s.rollout_id for s in group.samples), group.sample_advantages()))
    assert by_rollout[breaker.rollout_id] == by_rollout[honest.rollout_id]


@pytest.mark.parametrize("name", ["delete-git", "corrupt-git", "delete-baseline-tag", "gitfile-elsewhere",
                                  "bare-config", "leftover-lock", "lock-holding-daemon", "unreadable-git",
                                  "unreadable-file", "unreadable-dir", "locked-workspace"])
def test_what_the_agent_did_to_git_does_not_change_what_is_collected(group, name):
    """The harness reads the diff through its own pristine .git: breaking the workspace's git
    metadata or permissions leaves the diff readable (and graded: the bug is still there)."""
    result = group.results[2 + list(BREAKERS).index(name)]
    assert result.abort_reason is None, explain(group)
    assert result.reward == 0.0 and result.applied_cleanly, explain(group)


@pytest.mark.parametrize("name, why", [("huge-diff", "over the limit"),
                                       ("blocks-hidden-tests", "baseline grades"),
                                       ("hanging-tests", "timed out")])
def test_a_change_that_cannot_be_graded_is_the_models_zero_with_its_reason(group, name, why):
    result = group.results[2 + list(BREAKERS).index(name)]
    assert result.abort_reason == "ungradable", explain(group)
    assert why in (result.error or ""), explain(group)


def tool_results(log: str) -> list[dict[str, Any]]:
    """The ``tool_result`` events of agent-code's stream-json log."""
    events = []
    for line in log.splitlines():
        try:
            events.append(json.loads(line))
        except ValueError:
            continue
    return [e for e in events if isinstance(e, dict) and e.get("type") == "tool_result"]


@pytest.mark.parametrize("k, name", list(enumerate(BREAKERS, start=2)))
def test_each_breaker_really_ran_its_commands(group, k, name):
    """The attack happened where the agent stands (not refused by the agent's own policy)."""
    results = tool_results(group.results[k].log)
    assert len(results) == len(BREAKERS[name]), group.results[k].log[-3000:]
    assert all(r["name"] == "bash" and r["is_error"] is False and "[exit code: 0]" in r["content"]
               for r in results), results


def test_filling_the_disk_is_the_models_zero_and_stops_nothing(tmp_path):
    """The agent fills the filesystem its sandbox lives on (a 48 MiB tmpfs here, mounted for the
    test): its rollout must end as its own zero, counted, and nothing about it may raise out of
    the runner (a write of the harness's own failing with ENOSPC included)."""
    import subprocess

    from agent_code.rollout.runner import run_all

    renderer = qwen25_renderer()
    tasks = load_tasks(tasks_file(tmp_path))
    disk = tmp_path / "disk"
    disk.mkdir()
    mounted = subprocess.run(["mount", "-t", "tmpfs", "-o", "size=48m,mode=0755", "tmpfs", str(disk)],
                             capture_output=True, text=True)
    if mounted.returncode != 0:
        pytest.skip(f"cannot mount a tmpfs here: {mounted.stderr.strip()}")
    os.chmod(tmp_path, 0o755)
    s = f"{TASK}.0"
    lines = [call("bash", {"command": "head -c 100M /dev/zero > fill.bin; df -k . | tail -1"}, s), say("Done.", s)]
    saved, tempfile.tempdir = tempfile.tempdir, str(disk)
    try:
        with scripted_gateway(tmp_path, lines, renderer) as (url, _):
            config = RolloutConfig(budget=120, max_steps=4, grade_timeout=GRADE_TIMEOUT)
            results = asyncio.run(run_all(tasks, config, url))
    finally:
        tempfile.tempdir = saved
        subprocess.run(["umount", "-l", str(disk)], capture_output=True)
    [result] = results
    print(f"\nfull disk: {result.abort_reason}: {result.error}")
    assert "fill.bin" in result.log or "No space" in result.log, result.log[-2000:]
    assert result.abort_reason not in INFRA_ABORTS, (result.abort_reason, result.error)
    assert result.reward == 0.0, (result.abort_reason, result.error)
    group = Group.of(TASK, [(result, [])])
    assert group.results == [result] and not group.left_out
