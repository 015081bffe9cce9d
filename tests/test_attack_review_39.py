"""Attack review of issue 39 ("no reward dodged, no rollout stalls the run"): the holes an
attacker found in its first fixes, each now closed (each test failed on the code it reviewed):
``chmod 000`` on the workspace directory itself made the agent's failure the machine's; a
directory 1,200 levels deep in the agent's home raised ``RecursionError`` out of the sandbox's
teardown and ended the whole stream; tearing down a sandbox of 100,000 files held the event
loop (and every sibling's relay) for seconds; and ``stream_groups`` kept every yielded group's
rollouts (diffs, logs, samples) until the stream ended.

Rollout-level attacks run real rollouts through ``stream_groups`` (real local sandboxes, a real
gateway on loopback over a scripted engine, real grading) with one stand-in: the agent is a
shell command (:class:`ShellHarness`) instead of the agent-code CLI, which cannot import
``agent_code`` from a worktree inside the sandbox. What the "agent" does is what the CLI's bash
tool would do; it makes no model call, so an honest rollout ends ``empty_trajectory`` (counted,
reward from grading).
"""

from __future__ import annotations

import asyncio
import os
import subprocess
import tempfile
import time
from pathlib import Path

import pytest

from agent_code.harness import HARNESSES
from agent_code.harness.base import CliHarness, Launch
from agent_code.rollout.groups import Group, stream_groups
from agent_code.rollout.runner import INFRA_ABORTS, RolloutConfig
from agent_code.sandbox import Sandbox
from agent_code.tasks import DiffError, collect_diff, prepare_workspace
from gateway_fixtures import qwen25_renderer, scripted_gateway
from test_tasks import calc_task, make_box


class ShellHarness(CliHarness):
    """An 'agent' that runs ``COMMANDS[k]`` (sample ``k``) in its workspace, as the agent user."""

    name = "atk-shell"
    COMMANDS: dict[int, str] = {}

    async def install(self, box: Sandbox) -> None:
        return None

    def command(self, launch: Launch) -> str:
        k = int(launch.session_id.split(".")[1])
        return self.COMMANDS.get(k, "true")

    def env(self, launch: Launch) -> dict[str, str]:
        return {}


def shell_config(tmp_path: Path, monkeypatch: pytest.MonkeyPatch, commands: dict[int, str],
                 samples: int) -> RolloutConfig:
    monkeypatch.setitem(HARNESSES, ShellHarness.name, ShellHarness)
    monkeypatch.setattr(ShellHarness, "COMMANDS", commands)
    tmp = tmp_path / "tmp"
    tmp.mkdir()
    os.chmod(tmp_path, 0o755)   # the sandbox's agent user passes through on the way to its dirs
    monkeypatch.setattr(tempfile, "tempdir", str(tmp))
    return RolloutConfig(agent=ShellHarness.name, samples_per_task=samples, concurrency=samples, budget=60,
                         grade_timeout=30)


def run_group(tmp_path: Path, monkeypatch: pytest.MonkeyPatch, commands: dict[int, str], samples: int) -> Group:
    """One task (tests/test_tasks.py's calc), ``samples`` rollouts of it through stream_groups."""
    cfg = shell_config(tmp_path, monkeypatch, commands, samples)
    task = calc_task(tmp_path)

    async def collect() -> list[Group]:
        return [g async for g in stream_groups([task], cfg, url, keep_flat=True, min_rollouts=1)]

    with scripted_gateway(tmp_path, [], qwen25_renderer()) as (url, _):
        groups = asyncio.run(collect())
    assert len(groups) == 1
    return groups[0]


def explain(group: Group) -> str:
    return "\n".join(f"{r.rollout_id}: reward {r.reward} {r.abort_reason}: {(r.error or '')[:300]}"
                     for r in [*group.results, *group.left_out])


# --- 1. an agent's own workspace permissions end its rollout as the machine's failure ----------

def test_an_agent_that_locks_its_workspace_directory_is_counted(tmp_path, monkeypatch):
    group = run_group(tmp_path, monkeypatch, {1: "chmod 000 ."}, samples=2)
    assert not group.left_out and not any(r.abort_reason in INFRA_ABORTS for r in group.results), explain(group)
    assert [r.reward for r in group.results] == [0.0, 0.0], explain(group)


def test_collect_diff_after_chmod_000_on_the_workspace_is_the_agents_outcome(tmp_path):
    async def go() -> BaseException | None:
        async with make_box() as box:
            ws = await prepare_workspace(box, calc_task(tmp_path))
            await box.exec(f"chmod 000 {box.workdir}", user="agent", cwd=box.home)
            try:
                await collect_diff(box, ws.baseline)
            except Exception as exc:   # noqa: BLE001  (its class decides the blame)
                return exc
            return None
    exc = asyncio.run(go())
    assert exc is None or isinstance(exc, DiffError), f"{type(exc).__name__}: {exc}"


# --- 2. the sandbox's teardown raises: one rollout ends the whole stream ----------------------

DEEP_TREE = "cd $HOME && i=0; while [ $i -lt 1200 ]; do mkdir d && cd d || exit 1; i=$((i+1)); done"


def test_a_deep_directory_in_the_agents_home_does_not_end_the_stream(tmp_path, monkeypatch):
    try:
        group = run_group(tmp_path, monkeypatch, {1: DEEP_TREE}, samples=2)
    finally:   # the sandbox's dir stays behind with its deep tree, which pytest's own tmp clean-up cannot remove
        subprocess.run(["rm", "-rf", str(tmp_path / "tmp")], check=False)
    assert [r.reward for r in group.results] == [0.0, 0.0], explain(group)


# --- 3. the teardown blocks the event loop: every sibling's relay stalls ------------------------

def test_tearing_down_a_sandbox_full_of_files_does_not_block_the_event_loop():
    async def go() -> float:
        box = make_box()
        await box.__aenter__()
        made = await box.exec("mkdir many && cd many && seq 30000 | xargs touch", user="agent", cwd=box.home,
                              timeout=120)
        assert made.ok, made.output(500)
        gaps: list[float] = []

        async def tick() -> None:
            last = time.monotonic()
            while True:
                await asyncio.sleep(0.005)
                now = time.monotonic()
                gaps.append(now - last)
                last = now
        ticker = asyncio.ensure_future(tick())
        await asyncio.sleep(0.05)
        await box.__aexit__(None, None, None)
        await asyncio.sleep(0.05)
        ticker.cancel()
        return max(gaps)
    longest = asyncio.run(go())
    assert longest < 0.2, f"the event loop was held for {longest:.2f} s"


# --- 4. stream_groups keeps every finished rollout for the stream's whole life -----------------

def test_a_yielded_groups_rollouts_are_not_kept_by_the_stream(tmp_path, monkeypatch):
    import gc
    import weakref

    cfg = shell_config(tmp_path, monkeypatch, {}, samples=1)
    cfg.concurrency = 1
    tasks = [calc_task(tmp_path, id="calc-a"), calc_task(tmp_path, id="calc-b")]

    async def first_group_kept() -> bool:
        stream = stream_groups(tasks, cfg, url, keep_flat=True, min_rollouts=1)
        group = await stream.__anext__()
        ref = weakref.ref(group.results[0])
        del group
        gc.collect()
        alive = ref() is not None
        await stream.aclose()
        return alive

    with scripted_gateway(tmp_path, [], qwen25_renderer()) as (url, _):
        alive = asyncio.run(first_group_kept())
    assert not alive, "the stream still holds the first group's rollout (its diff, log and samples)"
