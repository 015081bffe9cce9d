"""The real Qwen Code CLI (npm @qwen-code/qwen-code), headless, through the gateway's Chat
Completions endpoint.

A scripted engine (Qwen2.5's chat template, Hermes tool calls) drives it through its shell,
read and edit tools with the settings and environment the rollout harness uses: the edit
must land on disk, and every turn must be filed under the session id sent as the API key
(Qwen Code sends no other identity) — token-exactly, with no side requests of its own.
Then a rollout with ``--agent qwen-code`` runs it in the local sandbox and grades the fix.
"""

from __future__ import annotations

import asyncio
import json
import os
import subprocess
from pathlib import Path

import pytest

from agent_code.harness.base import Launch
from agent_code.harness.qwen_code import SETTINGS, QwenCodeHarness, host_qwen
from agent_code.rollout.runner import RolloutConfig, run_all
from agent_code.tasks import load_tasks
from agent_code.trajectory.verify import verify_samples
from gateway_fixtures import check_token_exact, qwen25_renderer, scripted_gateway
from rollout_fixtures import call, say, session_of, tasks_file


def qwen_binary() -> str:
    found = host_qwen()
    if found is None:
        pytest.skip("Qwen Code is not installed (scripts/test.sh installs it into .cache/node)")
    return found


def run_qwen(qwen: str, prompt: str, work: Path, url: str, session: str, model: str):
    """Qwen Code headless with the harness's settings and environment, in a private HOME."""
    home = work.parent / "home"
    (home / ".qwen").mkdir(parents=True)
    (home / ".qwen/settings.json").write_text(json.dumps(SETTINGS))
    launch = Launch(base_url=url, session_id=session, model=model, prompt=prompt, workdir=str(work), home=str(home))
    env = {"PATH": os.environ["PATH"], "HOME": str(home), **QwenCodeHarness().env(launch)}
    return subprocess.run([qwen, "--yolo", "--output-format", "stream-json", "--max-session-turns", "10", "-m", model],
                          input=prompt, cwd=work, env=env, capture_output=True, text=True, timeout=120)


def test_qwen_code_edits_a_file_through_the_gateway(tmp_path):
    qwen = qwen_binary()
    work = tmp_path / "work"
    work.mkdir()
    target = work / "hello.py"
    target.write_text('def greet(name):\n    return "Helo, " + name\n')
    script = [
        call("run_shell_command", {"command": "ls", "description": "List files"}),
        call("read_file", {"file_path": str(target)}),
        call("edit", {"file_path": str(target), "old_string": "Helo", "new_string": "Hello"}),
        say("Fixed the typo in hello.py."),
    ]
    with scripted_gateway(tmp_path, script, qwen25_renderer()) as (url, gateway):
        proc = run_qwen(qwen, "Fix the typo in hello.py", work, url, "qwen-session", "served-model")
        sessions = set(gateway.store.sessions)
        turns = gateway.store.get("qwen-session").turns
        samples = gateway.finish_session("qwen-session", reward=1.0)

    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-2000:]
    events = [json.loads(line) for line in proc.stdout.splitlines() if line.startswith("{")]
    assert events[-1]["type"] == "result" and events[-1]["result"] == "Fixed the typo in hello.py."
    used = [b["name"] for e in events if e["type"] == "assistant" for b in e["message"]["content"]
            if b["type"] == "tool_use"]
    assert used == ["run_shell_command", "read_file", "edit"]
    assert target.read_text() == 'def greet(name):\n    return "Hello, " + name\n'  # the edit landed

    assert sessions == {"qwen-session"}   # the API key named the session; no side requests, no anon-*
    assert len(turns) == 4
    assert '"run_shell_command"' in json.dumps(turns[0].tools)
    assert "hello.py" in json.dumps(turns[1].messages[-1])      # the shell ran `ls` for real
    assert "Helo" in json.dumps(turns[2].messages[-1])          # read_file's result came back
    assert turns[3].reply["content"] == "Fixed the typo in hello.py."
    check_token_exact(samples, turns)


def test_qwen_code_rollout_is_graded(tmp_path):
    qwen_binary()
    tasks = load_tasks(tasks_file(tmp_path, ["thermo-fahrenheit"]))
    fix = ("sed -i 's|(fahrenheit - FREEZING_F) \\* 9 / 5|(fahrenheit - FREEZING_F) * 5 / 9|' thermo.py"
           " && python -m pytest -q -p no:cacheprovider tests")
    lines = [call("run_shell_command", {"command": fix, "description": "Fix the factor"}, "thermo-fahrenheit.0"),
             say("Fixed the Fahrenheit to Celsius factor.", "thermo-fahrenheit.0")]
    collected: dict[str, list] = {}
    with scripted_gateway(tmp_path, lines, qwen25_renderer()) as (url, gateway):
        config = RolloutConfig(agent="qwen-code", samples_per_task=1, budget=120, model="served-model",
                               keep_sessions=True)
        [result] = asyncio.run(run_all(tasks, config, url, on_result=lambda r, s: collected.update({r.session_id: s})))
        turns = {sid: list(gateway.store.get(sid).turns) for sid in collected}

    assert result.agent_exit_code == 0 and result.abort_reason is None, result.error or result.log[-3000:]
    assert result.reward == 1.0 and result.turns == 2
    assert "+    return (fahrenheit - FREEZING_F) * 5 / 9" in result.diff
    sid = session_of([result], "thermo-fahrenheit", 0)
    assert " passed" in json.dumps(turns[sid][1].messages[-1])  # the task's python, in the sandbox
    samples = collected[sid]
    assert samples and verify_samples(samples, turns) == []
    assert all(s.metadata["agent"] == "qwen-code" for s in samples)
