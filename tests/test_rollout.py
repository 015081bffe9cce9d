"""Rollouts end to end: real sandboxes, the real agent-code CLI as the agent, a real gateway on
loopback over a scripted engine (Qwen2.5's real template and tokenizer), real git and pytest."""

from __future__ import annotations

import asyncio
import json
import os
from pathlib import Path


from agent_code.rollout.runner import RolloutConfig, RolloutResult, run_all
from agent_code.tasks import load_tasks
from agent_code.trajectory.store import TurnLog, read_samples
from agent_code.trajectory.verify import verify_samples
from conftest import cli_env, run_cli
from gateway_fixtures import qwen25_renderer, scripted_gateway, write_script
from rollout_fixtures import THERMO_FIX, call, processes_with_env, say, session_of, tasks_file

SANDBOX_GLOB = "agent-code-sandbox-*"


def private_tmp(tmp_path: Path) -> Path:
    """A TMPDIR of the test's own: sandboxes made under it are this test's, whatever else runs."""
    path = tmp_path / "tmp"
    path.mkdir(exist_ok=True)
    os.chmod(tmp_path, 0o755)  # the sandbox's agent user passes through on the way to its dirs
    return path


def sandboxes_in(tmp: Path) -> list[str]:
    return sorted(p.name for p in tmp.glob(SANDBOX_GLOB))


def test_rollout_command_writes_graded_samples_and_a_report(tmp_path):
    qwen25_renderer()  # skips without the embedded model's tokenizer
    tasks = tasks_file(tmp_path, ["thermo-fahrenheit", "pager-last-page"])
    script = write_script(tmp_path, [
        call("read_file", {"path": "thermo.py"}, "thermo-fahrenheit.0"),
        call("edit_file", THERMO_FIX, "thermo-fahrenheit.0"),
        call("bash", {"command": "python -m pytest -q tests"}, "thermo-fahrenheit.0"),
        say("Fixed: the factor was inverted.", "thermo-fahrenheit.0"),
        say("I looked but changed nothing.", "pager-last-page.0"),
    ])
    out = tmp_path / "out"
    tmp = private_tmp(tmp_path)
    proc = run_cli("rollout", str(tasks), "--engine", f"scripted:{script}", "--out", str(out), "--budget", "120",
                   env=cli_env(TMPDIR=str(tmp)), timeout=300)
    assert proc.returncode == 0, proc.stderr[-3000:]
    assert "invariants: OK (2 samples" in proc.stderr
    assert f"report.html: {out / 'report.html'}" in proc.stdout and "solve rate 50% (1/2)" in proc.stdout

    results = {r["task_id"]: r for r in map(json.loads, (out / "results.jsonl").read_text().splitlines())}
    fixed, untouched = results["thermo-fahrenheit"], results["pager-last-page"]
    assert (fixed["reward"], fixed["applied_cleanly"], fixed["agent_exit_code"], fixed["turns"]) == (1.0, True, 0, 4)
    assert fixed["status"] == "completed" and fixed["abort_reason"] is None
    assert {"boot", "prep", "agent", "diff", "grade", "teardown", "total"} <= set(fixed["timings"])
    assert untouched["reward"] == 0.0 and untouched["diff_bytes"] == 0 and untouched["turns"] == 1
    assert set(untouched["tests_failed"]) == {"tests/test_pager.py::test_partial_last_page_is_counted",
                                              "tests/test_pager.py::test_last_page_holds_the_rest"}

    samples = read_samples(out / "samples.jsonl")
    assert [s.to_dict() for s in read_samples(out / "samples.parquet")] == [s.to_dict() for s in samples]
    # session ids are "<task>.<k>.<128 random bits>" (unguessable keys)
    assert {s.session_id.rsplit(".", 1)[0]: s.reward for s in samples} == {"thermo-fahrenheit.0": 1.0,
                                                                           "pager-last-page.0": 0.0}
    assert all(len(s.session_id.rsplit(".", 1)[1]) >= 22 for s in samples)
    assert samples[0].metadata["task_id"] in results and samples[0].rollout_id.endswith("/0")
    turns = TurnLog(out / "trajectories").sessions()
    assert verify_samples(samples, turns) == []
    turns = {sid.rsplit(".", 1)[0]: recs for sid, recs in turns.items()}
    assert "tests passed" in turns["thermo-fahrenheit.0"][3].messages[-1]["content"] or \
        "passed" in turns["thermo-fahrenheit.0"][3].messages[-1]["content"]   # bash really ran pytest

    report = (out / "report.html").read_text()
    assert "solve rate 50% (1/2)" in report
    for href in ("inspect/", "rollouts/"):
        for link in [part.split("'")[0] for part in report.split(f"href='{href}")[1:]]:
            assert (out / href / link).is_file(), link
    log = next((out / "rollouts").glob("thermo*.log")).read_text().splitlines()
    assert json.loads(log[-1])["type"] == "result"   # agent-code's stream-json run log
    assert "-    return (fahrenheit - FREEZING_F) * 9 / 5" in next((out / "rollouts").glob("thermo*.diff")).read_text()
    assert sandboxes_in(tmp) == []   # every sandbox removed


def test_a_hanging_agent_is_killed_at_its_budget_and_recorded(tmp_path, monkeypatch):
    import tempfile

    renderer = qwen25_renderer()
    tmp = private_tmp(tmp_path)
    monkeypatch.setattr(tempfile, "tempdir", str(tmp))
    tasks = load_tasks(tasks_file(tmp_path, ["thermo-fahrenheit"]))
    lines = [call("read_file", {"path": "thermo.py"}, "thermo-fahrenheit.0"),
             say("never delivered", "thermo-fahrenheit.0", delay=600)]   # the model "hangs"
    with scripted_gateway(tmp_path, lines, renderer) as (url, gateway):
        config = RolloutConfig(budget=10, model="test-model")
        [result] = asyncio.run(run_all(tasks, config, url))
        left = processes_with_env(f"ANTHROPIC_AUTH_TOKEN={session_of([result], 'thermo-fahrenheit', 0)}")
    assert result.status == "aborted" and result.abort_reason == "budget"
    assert result.agent_exit_code is None and 10 <= result.timings["agent"] < 25
    assert result.reward == 0.0 and result.turns == 1   # graded anyway; the answered turn is kept
    assert left == []                                    # nothing of the agent still runs
    assert sandboxes_in(tmp) == []


def test_failed_rollouts_are_recorded_and_the_run_goes_on(tmp_path):
    renderer = qwen25_renderer()
    broken = load_tasks(tasks_file(tmp_path / "a", ["pager-last-page"], setup=["echo cannot install >&2; exit 3"]))
    fine = load_tasks(tasks_file(tmp_path / "b", ["slugs-lowercase"]))
    seen: list[RolloutResult] = []
    with scripted_gateway(tmp_path, [say("Nothing to do.", "slugs-lowercase.0")], renderer) as (url, gateway):
        config = RolloutConfig(budget=60, model="test-model", concurrency=2)
        results = asyncio.run(run_all(broken + fine, config, url, on_result=lambda r, s: seen.append(r)))
    by_task = {r.task_id: r for r in results}
    assert len(seen) == 2
    boot = by_task["pager-last-page"]
    assert boot.abort_reason == "boot" and "cannot install" in boot.error and boot.reward is None
    assert by_task["slugs-lowercase"].status == "completed" and by_task["slugs-lowercase"].reward == 0.0, by_task["slugs-lowercase"].error


def test_finished_sessions_leave_the_gateway_unless_kept(tmp_path):
    """A finished rollout's session is deleted on the gateway once its samples are back (memory
    stays flat over a long run); ``keep_sessions`` keeps it, closed, for inspection."""
    renderer = qwen25_renderer()
    tasks = load_tasks(tasks_file(tmp_path, ["slugs-lowercase"]))
    lines = [say("Nothing to do.", "slugs-lowercase.0"), say("Still nothing.", "slugs-lowercase.0")]
    got: list[list] = []
    with scripted_gateway(tmp_path, lines, renderer) as (url, gateway):
        [first] = asyncio.run(run_all(tasks, RolloutConfig(budget=60, model="m"), url,
                                      on_result=lambda r, s: got.append(s)))
        assert first.status == "completed" and first.samples == 1 and len(got[0]) == 1
        assert not gateway.store.sessions and gateway.store.open_count == 0
        [second] = asyncio.run(run_all(tasks, RolloutConfig(budget=60, model="m", keep_sessions=True), url))
        assert second.status == "completed" and second.samples == 1
        kept = gateway.store.get(second.session_id)
        assert kept.closed and len(kept.turns) == 1 and gateway.store.open_count == 0


def test_an_agent_that_never_calls_the_model_is_an_empty_trajectory(tmp_path):
    renderer = qwen25_renderer()
    tasks = load_tasks(tasks_file(tmp_path, ["thermo-fahrenheit"]))
    with scripted_gateway(tmp_path, [], renderer) as (url, gateway):
        config = RolloutConfig(budget=60, model="test-model")
        [result] = asyncio.run(run_all(tasks, config, url))   # the engine has no reply: the agent errors
    assert result.status == "aborted" and result.abort_reason in ("agent_crash", "empty_trajectory")
    assert result.samples == 0 and result.turns == 0


def test_rollout_command_refuses_bad_input(tmp_path):
    bad = tmp_path / "tasks.jsonl"
    bad.write_text('{"id": "x"}\n')
    proc = run_cli("rollout", str(bad), "--out", str(tmp_path / "o"))
    assert proc.returncode == 1 and "tasks.jsonl:1" in proc.stderr
    proc = run_cli("rollout", "bundled", "--agent", "nobody", "--out", str(tmp_path / "o"))
    assert proc.returncode == 2 and "unknown agent 'nobody'" in proc.stderr
    (tmp_path / "full").mkdir()
    (tmp_path / "full" / "keep.txt").write_text("x")
    proc = run_cli("rollout", "bundled", "--out", str(tmp_path / "full"))
    assert proc.returncode == 2 and "--overwrite" in proc.stderr and (tmp_path / "full" / "keep.txt").exists()


def test_ray_flag_takes_an_optional_address():
    from agent_code.cli.rollout import _ray_flag

    assert _ray_flag(["t.jsonl", "--ray"]) == ["t.jsonl", "--ray=local"]
    assert _ray_flag(["--ray", "t.jsonl"]) == ["--ray=local", "t.jsonl"]
    assert _ray_flag(["--ray", "10.0.0.1:6379", "t.jsonl"]) == ["--ray=10.0.0.1:6379", "t.jsonl"]
    assert _ray_flag(["--ray", "auto"]) == ["--ray=auto"]


def test_verify_samples_catches_a_tampered_sample(tmp_path):
    renderer = qwen25_renderer()
    import httpx

    with scripted_gateway(tmp_path, [say("one"), say("two")], renderer) as (url, gateway):
        for text in ("hi", "again"):
            httpx.post(f"{url}/v1/messages", headers={"x-api-key": "s"}, timeout=30,
                       json={"model": "m", "max_tokens": 50, "messages": [{"role": "user", "content": text}]})
        turns = {"s": list(gateway.store.get("s").turns)}
        samples = gateway.finish_session("s", reward=1.0)
    assert verify_samples(samples, turns) == []
    samples[0].tokens[-1] += 1
    assert any("trains id" in p for p in verify_samples(samples, turns))
    samples[0].loss_mask = samples[0].loss_mask[:-1]
    assert any("lengths disagree" in p for p in verify_samples(samples, turns))
    assert verify_samples(samples, {}) == ["session s: no recorded turns to check its samples against"]


def test_main_job_scripted_solves_every_bundled_task(tmp_path):
    """``scripts/demo.sh --scripted``: the main job's command line on the reference-fix script."""
    from agent_code.demo.rollout import rollout_argv
    from agent_code.tasks import bundled_tasks_path

    qwen25_renderer()
    out = tmp_path / "demo"
    proc = run_cli(*rollout_argv("--out", str(out), scripted=True), timeout=300)
    assert proc.returncode == 0, proc.stderr[-3000:]
    n = len(load_tasks(bundled_tasks_path()))
    assert f"solve rate 100% ({n}/{n})" in proc.stdout and f"report.html: {out / 'report.html'}" in proc.stdout
    assert f"invariants: OK ({n} samples" in proc.stderr
    for name in ("samples.jsonl", "samples.parquet", "results.jsonl", "report.html"):
        assert (out / name).stat().st_size > 0


def _communicate_or_dump(proc, timeout: float) -> tuple[str, str]:
    """``proc.communicate(timeout)``; past it, the run's stacks (``kill -USR1``: its threads
    and asyncio tasks, agent_code/cli/stacks.py) go into the failure, then it is killed."""
    import signal
    import subprocess
    import time

    try:
        return proc.communicate(timeout=timeout)
    except subprocess.TimeoutExpired:
        proc.send_signal(signal.SIGUSR1)
        time.sleep(3)
        proc.kill()
        stdout, stderr = proc.communicate()
        raise AssertionError(f"the run did not stop within {timeout:g} s; its stacks:\n{stderr[-12000:]}") from None


def _rollout_waiting_on_the_model(tmp_path):
    """A rollout run of two tasks whose first rollout has finished and whose second one's
    agent waits on a model reply that never comes: the process, its --out and its TMPDIR.
    It starts with SIGINT's default action, as under a terminal: a test run started in the
    background of a non-interactive shell ignores SIGINT, and its children inherit that, so
    Python would install no Ctrl-C handler in the run and the signal would do nothing."""
    import signal
    import subprocess
    import sys
    import time

    qwen25_renderer()
    tasks = tasks_file(tmp_path, ["thermo-fahrenheit", "pager-last-page"])
    script = write_script(tmp_path, [say("Done quickly.", "thermo-fahrenheit.0"),
                                     say("never delivered", "pager-last-page.0", delay=600)])
    out = tmp_path / "out"
    tmp = private_tmp(tmp_path)
    proc = subprocess.Popen([sys.executable, "-m", "agent_code", "rollout", str(tasks), "--engine", f"scripted:{script}",
                             "--out", str(out)], env=cli_env(TMPDIR=str(tmp)), stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                            preexec_fn=lambda: signal.signal(signal.SIGINT, signal.SIG_DFL))
    deadline = time.monotonic() + 120
    while not (out / "results.jsonl").is_file() or not (out / "results.jsonl").read_text().strip():
        assert time.monotonic() < deadline and proc.poll() is None, proc.stderr.read() if proc.poll() else "slow"
        time.sleep(0.2)
    time.sleep(2)                       # the second rollout's agent is now waiting on the model
    return proc, out, tmp


def test_ctrl_c_stops_cleanly_and_keeps_what_finished(tmp_path):
    import signal

    proc, out, tmp = _rollout_waiting_on_the_model(tmp_path)
    proc.send_signal(signal.SIGINT)
    stdout, stderr = _communicate_or_dump(proc, 60)
    assert proc.returncode == 130, stderr[-2000:]
    rows = {r["task_id"]: r for r in map(json.loads, (out / "results.jsonl").read_text().splitlines())}
    assert rows["thermo-fahrenheit"]["status"] == "completed"
    assert rows["pager-last-page"]["abort_reason"] == "interrupted"
    assert "rollout summary (interrupted)" in stdout and (out / "report.html").is_file()
    assert len(read_samples(out / "samples.parquet")) == 1
    assert processes_with_env("ANTHROPIC_AUTH_TOKEN=pager-last-page.0") == []
    assert sandboxes_in(tmp) == []


def test_a_stopped_rollout_names_the_session_it_opened(monkeypatch):
    """Ctrl-C mid-rollout: the ``interrupted`` result names the session the rollout really
    opened (session ids are random, so minting the ids again would name a session that never was)."""
    from types import SimpleNamespace

    from agent_code.rollout import runner

    opened: list[tuple[str, str]] = []

    async def hangs(task, k, config, client, *, ids=None, **_):
        opened.append(ids or runner.rollout_ids(task.id, k))   # the ids the session is opened under
        await asyncio.Event().wait()

    monkeypatch.setattr(runner, "run_rollout", hangs)
    recorded: list[RolloutResult] = []

    async def main() -> None:
        job = asyncio.ensure_future(run_all([SimpleNamespace(id="thermo-fahrenheit")], RolloutConfig(),
                                            "http://127.0.0.1:9", on_result=lambda r, s: recorded.append(r)))
        while not opened:
            await asyncio.sleep(0.01)
        job.cancel()
        await asyncio.gather(job, return_exceptions=True)

    asyncio.run(main())
    [stopped] = recorded
    assert stopped.abort_reason == "interrupted"
    assert (stopped.rollout_id, stopped.session_id) == opened[0]
    assert session_of(recorded, "thermo-fahrenheit", 0) == opened[0][1]


def test_kill_usr1_prints_where_a_run_is_and_the_run_goes_on(tmp_path):
    """``kill -USR1``: a rollout run writes its threads' and asyncio tasks' stacks to stderr
    (the second rollout's task waits in run_rollout) and carries on; Ctrl-C then stops it."""
    import signal
    import time

    proc, _, _ = _rollout_waiting_on_the_model(tmp_path)
    proc.send_signal(signal.SIGUSR1)
    time.sleep(1)
    assert proc.poll() is None               # it goes on
    proc.send_signal(signal.SIGINT)
    stdout, stderr = _communicate_or_dump(proc, 60)
    assert proc.returncode == 130, stderr[-2000:]
    dump = stderr[stderr.index("stacks on signal"):stderr.index("--- end of stacks ---")]
    assert "Current thread" in dump or "Thread 0x" in dump      # faulthandler's thread stacks
    assert "run_rollout" in dump and "task " in dump             # the asyncio task of the waiting rollout
