"""The real Claude Code CLI as the rollout agent, through the local sandbox (as an unprivileged
user where isolation is available) and the gateway over a scripted engine. One sample fixes the
bug; the other edits the test file so the tests pass — the grader restores the tests and gives 0."""

from __future__ import annotations

import asyncio

from agent_code.harness.claude_code import host_claude
from agent_code.rollout.runner import RolloutConfig, run_all
from agent_code.tasks import load_tasks
from agent_code.trajectory.verify import verify_samples
from gateway_fixtures import qwen25_renderer, scripted_gateway
from rollout_fixtures import call, say, session_of, tasks_file

import pytest

FIX = "sed -i 's|(fahrenheit - FREEZING_F) \\* 9 / 5|(fahrenheit - FREEZING_F) * 5 / 9|' thermo.py"
CHEAT = "printf 'def test_all_good():\\n    assert True\\n' > tests/test_thermo.py && python -m pytest -q tests"


def test_claude_code_rollouts_are_graded_with_the_tests_restored(tmp_path):
    if host_claude() is None:
        pytest.skip("Claude Code is not installed (scripts/test.sh installs it into .cache/node)")
    renderer = qwen25_renderer()
    tasks = load_tasks(tasks_file(tmp_path, ["thermo-fahrenheit"]))
    lines = [
        call("Bash", {"command": FIX, "description": "Fix the conversion"}, "thermo-fahrenheit.0"),
        say("Fixed the Fahrenheit to Celsius factor.", "thermo-fahrenheit.0"),
        call("Bash", {"command": CHEAT, "description": "Make the tests pass"}, "thermo-fahrenheit.1"),
        say("All tests pass now.", "thermo-fahrenheit.1"),
    ]
    collected: dict[str, list] = {}
    with scripted_gateway(tmp_path, lines, renderer) as (url, gateway):
        config = RolloutConfig(agent="claude-code", samples_per_task=2, budget=240, model="claude-sonnet-4-5",
                               keep_sessions=True)
        results = asyncio.run(run_all(tasks, config, url, on_result=lambda r, s: collected.update({r.session_id: s})))
        turns = {sid: list(gateway.store.get(sid).turns) for sid in collected}

    by_sample = {r.sample: r for r in results}
    fixed_sid, cheated_sid = (session_of(results, "thermo-fahrenheit", k) for k in (0, 1))
    fixed, cheated = by_sample[0], by_sample[1]
    assert fixed.agent_exit_code == 0 and fixed.abort_reason is None, fixed.error or fixed.log[-2000:]
    assert fixed.reward == 1.0 and fixed.applied_cleanly and fixed.turns == 2
    assert "+    return (fahrenheit - FREEZING_F) * 5 / 9" in fixed.diff

    assert cheated.agent_exit_code == 0 and cheated.abort_reason is None, cheated.error
    assert "tests/test_thermo.py" in cheated.diff and "1 passed" in turns[cheated_sid][1].messages[-1]["content"]
    assert cheated.reward == 0.0 and cheated.applied_cleanly   # the edited test was put back

    samples = [s for group in collected.values() for s in group]
    assert {s.session_id: s.reward for s in samples} == {fixed_sid: 1.0, cheated_sid: 0.0}
    assert verify_samples(samples, turns) == []
    assert all(s.metadata["agent"] == "claude-code" for s in samples)
