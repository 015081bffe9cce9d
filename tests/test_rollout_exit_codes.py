"""``agent-code rollout`` exit codes through the real CLI: no rollout reached the agent → 3 with
the reason on stderr; an agent that ran and failed → 0; the per-rollout line, the table and
report.html show a missing reward the same way; ``--gateway`` without a token is refused."""

from __future__ import annotations

import json

from conftest import cli_env, run_cli
from gateway_fixtures import write_script
from rollout_fixtures import tasks_file

from agent_code.rollout.export import render_report, summarize
from agent_code.rollout.runner import RolloutResult


def test_every_rollout_failing_to_boot_exits_3_with_the_reason(tmp_path):
    tasks = tasks_file(tmp_path, ["pager-last-page", "thermo-fahrenheit"], setup=["echo cannot install >&2; exit 3"])
    script = write_script(tmp_path, [{"text": "never used"}])
    out = tmp_path / "out"
    proc = run_cli("rollout", str(tasks), "--engine", f"scripted:{script}", "--out", str(out), "--budget", "60",
                   env=cli_env(), timeout=300)
    assert proc.returncode == 3, proc.stderr[-2000:]
    assert "no rollout reached the agent" in proc.stderr and "boot 2" in proc.stderr
    assert "cannot install" in proc.stderr or "exit" in proc.stderr
    # the line, the table and the report agree: n/a (boot), never 0.00
    assert "reward n/a (boot)" in proc.stderr and "reward n/a (boot)" in proc.stdout
    assert "0.00" not in proc.stdout and "mean reward n/a" in proc.stdout
    report = (out / "report.html").read_text()
    assert "n/a (boot)" in report and "mean reward n/a" in report
    rows = [json.loads(x) for x in (out / "results.jsonl").read_text().splitlines()]
    assert [r["abort_reason"] for r in rows] == ["boot", "boot"] and all(r["reward"] is None for r in rows)


def test_an_agent_that_ran_and_failed_is_a_normal_run(tmp_path):
    tasks = tasks_file(tmp_path, ["pager-last-page"])
    script = write_script(tmp_path, [{"text": "I looked but changed nothing."}])
    out = tmp_path / "out"
    proc = run_cli("rollout", str(tasks), "--engine", f"scripted:{script}", "--out", str(out), "--budget", "120",
                   env=cli_env(), timeout=300)
    assert proc.returncode == 0, proc.stderr[-2000:]
    assert "no rollout reached the agent" not in proc.stderr
    row = json.loads((out / "results.jsonl").read_text().splitlines()[0])
    assert row["reward"] == 0.0
    assert "reward 0.00" in proc.stdout and "reward 0.00" in proc.stderr


def test_gateway_url_without_an_admin_token_is_refused(tmp_path):
    tasks = tasks_file(tmp_path, ["pager-last-page"])
    env = cli_env()
    env.pop("AGENT_CODE_ADMIN_TOKEN", None)
    proc = run_cli("rollout", str(tasks), "--gateway", "http://127.0.0.1:9", "--out", str(tmp_path / "o"),
                   env=env, timeout=120)
    assert proc.returncode == 2 and "needs --admin-token" in proc.stderr


def test_rejected_paths_and_missing_rewards_in_the_report():
    a = RolloutResult("t/0", "t", 0, "t.0.x", "agent-code", reward=0.0, rejected_paths=["conftest.py", "setup.cfg"])
    b = RolloutResult("t/1", "t", 1, "t.1.y", "agent-code")
    b.abort("launch", "no")
    s = summarize([a, b])
    assert s["rejected_paths"] == 2 and s["mean_reward"] == 0.0 and s["tasks"]["t"]["rejected_paths"] == 2
    page = render_report([a, b])
    assert "n/a (launch)" in page and "conftest.py" in page and "rejected paths 2" in page
    from agent_code.cli.rollout import no_rollout_ran, rollout_line

    assert rollout_line(a) == "t/0: reward 0.00 · 2 rejected path(s)"
    assert rollout_line(b) == "t/1: reward n/a (launch)"
    assert no_rollout_ran([b]) and no_rollout_ran([a, b]) is None and no_rollout_ran([]) is None
