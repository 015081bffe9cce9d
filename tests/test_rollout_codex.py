"""The real Codex CLI as the rollout agent (``--agent codex``), through the local sandbox (as an
unprivileged user where isolation is available) and the gateway's Responses endpoint over a
scripted engine. Two bundled tasks run side by side: one is fixed with an ``apply_patch``
heredoc, the other with ``sed`` through Codex's shell tool; both are graded and their samples
must pass the trajectory invariants."""

from __future__ import annotations

import asyncio

from agent_code.rollout.runner import RolloutConfig, run_all
from agent_code.tasks import load_tasks
from agent_code.trajectory.verify import verify_samples
from gateway_fixtures import qwen25_renderer, scripted_gateway
from rollout_fixtures import call, say, session_of, tasks_file

THERMO_PATCH = """apply_patch <<'EOF'
*** Begin Patch
*** Update File: thermo.py
@@ def fahrenheit_to_celsius(fahrenheit: float) -> float:
-    return (fahrenheit - FREEZING_F) * 9 / 5
+    return (fahrenheit - FREEZING_F) * 5 / 9
*** End Patch
EOF"""
PAGER_FIX = "sed -i 's|return total // per_page|return -(-total // per_page)|' pager.py && python -m pytest -q tests"


def test_codex_rollouts_pass_the_trajectory_invariants(tmp_path):
    from test_codex import codex_binary

    codex_binary()  # skips when Codex (or its native binary) is not installed
    tasks = load_tasks(tasks_file(tmp_path, ["thermo-fahrenheit", "pager-last-page"]))
    lines = [
        call("exec_command", {"cmd": "cat thermo.py"}, "thermo-fahrenheit.0"),
        call("exec_command", {"cmd": THERMO_PATCH}, "thermo-fahrenheit.0"),
        say("Fixed the Fahrenheit to Celsius factor.", "thermo-fahrenheit.0"),
        call("exec_command", {"cmd": PAGER_FIX}, "pager-last-page.0"),
        say("page_count now rounds up.", "pager-last-page.0"),
    ]
    collected: dict[str, list] = {}
    with scripted_gateway(tmp_path, lines, qwen25_renderer()) as (url, gateway):
        config = RolloutConfig(agent="codex", samples_per_task=1, concurrency=2, budget=120, model="served-model",
                               keep_sessions=True)
        results = asyncio.run(run_all(tasks, config, url, on_result=lambda r, s: collected.update({r.session_id: s})))
        turns = {sid: list(gateway.store.get(sid).turns) for sid in collected}

    by_task = {r.task_id: r for r in results}
    thermo_sid, pager_sid = session_of(results, "thermo-fahrenheit", 0), session_of(results, "pager-last-page", 0)
    for result in results:
        assert result.agent_exit_code == 0 and result.abort_reason is None, result.error or result.log[-3000:]
        assert result.reward == 1.0 and result.applied_cleanly
    thermo, pager = by_task["thermo-fahrenheit"], by_task["pager-last-page"]
    assert thermo.turns == 3 and "+    return (fahrenheit - FREEZING_F) * 5 / 9" in thermo.diff
    assert '"type":"file_change"' in thermo.log                    # Codex applied the patch itself
    assert "def fahrenheit_to_celsius" in str(turns[thermo_sid][1].messages[-1])  # `cat` ran
    assert pager.turns == 2 and "+    return -(-total // per_page)" in pager.diff
    assert "5 passed" in str(turns[pager_sid][1].messages[-1])   # the tests ran in the sandbox

    samples = [s for group in collected.values() for s in group]
    assert {s.session_id for s in samples} == {thermo_sid, pager_sid}
    assert verify_samples(samples, turns) == []
    assert all(s.metadata["agent"] == "codex" and s.reward == 1.0 for s in samples)
