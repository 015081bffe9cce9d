"""Rollouts in real Docker containers (``--sandbox docker``), set up the documented way
(scripts/docker-setup.sh, through the ``docker_image`` fixture): the four harnesses — agent-code
(from this checkout's wheel), Claude Code, Codex and Qwen Code (the image's pinned npm CLIs) —
each fix the same bug through the real gateway over a scripted engine, reached from inside the
container's own network namespace through the relay; each is graded in a fresh container and
earns 1. A shadowed test runner (a ``pytest.py`` at the repo root that exits 0) earns 0.

All five rollouts run at once, in one event loop, against one gateway: a container start
copies the image (vfs), so they overlap rather than queue.
"""

from __future__ import annotations

import asyncio
import json
from pathlib import Path

import pytest

from agent_code.rollout.runner import RolloutConfig, run_all
from agent_code.tasks import bundled_tasks_path, load_tasks
from agent_code.trajectory.verify import verify_samples
from gateway_fixtures import qwen25_renderer, scripted_gateway
from rollout_fixtures import THERMO_FIX, call, say

FIX = "sed -i 's|(fahrenheit - FREEZING_F) \\* 9 / 5|(fahrenheit - FREEZING_F) * 5 / 9|' thermo.py"
CHECK = "python -m pytest -q -p no:cacheprovider tests"
SHADOW = "import sys\nprint('1 passed')\nsys.exit(0)\n"   # `python -m pytest` in the repo would run this

# (task id, agent, script lines): one task id per rollout, so each finds its own lines
ROLLOUTS = {
    "thermo-agent-code": ("agent-code", [
        call("read_file", {"path": "thermo.py"}), call("edit_file", THERMO_FIX), call("bash", {"command": CHECK}),
        say("Fixed the factor.")]),
    "thermo-claude-code": ("claude-code", [
        call("Bash", {"command": f"{FIX} && {CHECK}", "description": "Fix the conversion"}),
        say("Fixed the factor.")]),
    "thermo-codex": ("codex", [call("exec_command", {"cmd": f"{FIX} && {CHECK}"}), say("Fixed the factor.")]),
    "thermo-qwen-code": ("qwen-code", [
        call("run_shell_command", {"command": f"{FIX} && {CHECK}", "description": "Fix the factor"}),
        say("Fixed the factor.")]),
    "thermo-shadow-runner": ("agent-code", [
        call("write_file", {"path": "pytest.py", "content": SHADOW}), say("All tests pass now.")]),
}


def thermo_tasks(tmp_path: Path) -> Path:
    bundled = bundled_tasks_path()
    row = next(json.loads(line) for line in bundled.read_text().splitlines()
               if line.strip() and json.loads(line)["id"] == "thermo-fahrenheit")
    row["repo"] = str((bundled.parent / row["repo"]).resolve())
    out = tmp_path / "tasks.jsonl"
    out.write_text("".join(json.dumps(dict(row, id=task_id)) + "\n" for task_id in ROLLOUTS))
    return out


@pytest.fixture(scope="module")
def docker_rollouts(docker_image, tmp_path_factory):
    tmp_path = tmp_path_factory.mktemp("docker-rollouts")
    tasks = {t.id: t for t in load_tasks(thermo_tasks(tmp_path))}
    lines = [dict(line, session=f"{task_id}.0") for task_id, (_, script) in ROLLOUTS.items() for line in script]
    collected: dict[str, list] = {}

    async def all_agents(url: str) -> list:
        runs = []
        for task_id, (agent, _) in ROLLOUTS.items():
            config = RolloutConfig(agent=agent, sandbox="docker", budget=240, model="served-model",
                                   keep_sessions=True, max_steps=10)
            runs.append(run_all([tasks[task_id]], config, url,
                                on_result=lambda r, s: collected.update({r.session_id: s})))
        return [r for group in await asyncio.gather(*runs) for r in group]

    import docker

    engine = docker.from_env()
    ours = {"label": "agent-code.sandbox"}
    before = {c.id for c in engine.containers.list(all=True, filters=ours)}
    with scripted_gateway(tmp_path, lines, qwen25_renderer()) as (url, gateway):
        results = asyncio.run(all_agents(url))
        turns = {sid: list(gateway.store.get(sid).turns) for sid in collected}
    left = [c.name for c in engine.containers.list(all=True, filters=ours) if c.id not in before]
    engine.close()
    return {r.task_id: r for r in results}, collected, turns, left


@pytest.mark.parametrize("task_id", ["thermo-agent-code", "thermo-claude-code", "thermo-codex", "thermo-qwen-code"])
def test_each_harness_solves_the_task_in_a_real_container(docker_rollouts, task_id):
    results, collected, turns, _ = docker_rollouts
    result = results[task_id]
    assert result.abort_reason is None and result.agent_exit_code in (0, 3, 53), \
        (result.error or "") + result.log[-3000:]
    assert result.reward == 1.0 and result.applied_cleanly, (result.error, result.diff, result.log[-3000:])
    assert "+    return (fahrenheit - FREEZING_F) * 5 / 9" in result.diff
    assert result.turns >= 2 and result.timings["boot"] > 0
    # the tests ran inside the container, as the agent, through the CLI's own tool
    tool_results = json.dumps([t.messages[-1] for t in turns[result.session_id][1:]])
    assert "3 passed" in tool_results or "passed" in tool_results, tool_results[-2000:]
    samples = collected[result.session_id]
    assert samples and verify_samples(samples, {result.session_id: turns[result.session_id]}) == []
    assert all(s.reward == 1.0 and s.metadata["agent"] == ROLLOUTS[task_id][0] for s in samples)


def test_no_container_is_left_behind(docker_rollouts):
    results, _, _, left = docker_rollouts
    assert len(results) == len(ROLLOUTS) and left == []     # 10 containers made (agent + grader each)


def test_a_shadowed_test_runner_earns_nothing(docker_rollouts):
    results, _, _, _ = docker_rollouts
    result = results["thermo-shadow-runner"]
    assert result.abort_reason is None, (result.error or "") + result.log[-3000:]
    assert "pytest.py" in result.diff and "thermo.py" not in result.diff
    assert result.reward == 0.0 and result.rejected_paths == ["pytest.py"]


def test_an_image_without_the_cli_gets_this_machines_copy_uploaded(docker_image):
    """A task's image may lack the npm CLIs, and a container cannot download them (no network):
    the harness uploads this machine's install (the test peers in .cache/node); without one, the
    error says what to do."""
    import shlex

    from agent_code.harness.base import HarnessError, ensure_npm_cli
    from agent_code.harness.qwen_code import NPM_SPEC, host_qwen
    from agent_code.sandbox import create_sandbox

    if host_qwen() is None:
        pytest.skip("Qwen Code is not installed here (scripts/test.sh installs it into .cache/node)")

    async def go():
        async with create_sandbox("docker") as box:
            await box.exec("rm -rf /usr/local/bin/qwen /usr/local/lib/node_modules/@qwen-code", cwd="/")
            with pytest.raises(HarnessError, match="has no `qwen`.*no network.*docker-setup.sh"):
                await ensure_npm_cli(box, "qwen", NPM_SPEC, None)
            argv = await ensure_npm_cli(box, "qwen", NPM_SPEC, host_qwen())
            return argv, await box.exec(f"{shlex.join(argv)} --version", user="agent", timeout=120)

    argv, version = asyncio.run(go())
    assert argv[1].startswith("/opt/agent-code/node_modules/@qwen-code/")
    assert version.ok and version.stdout.strip() == NPM_SPEC.rpartition("@")[2], version.output()
