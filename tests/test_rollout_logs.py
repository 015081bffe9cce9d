"""A rollout's ``rollouts/<id>.log`` is the CLI's stdout only — pure stream-json, every line
JSON — and its plain-text stderr (agent-code's "stopped after N steps", say) goes to
``rollouts/<id>.stderr`` instead of trailing the log (issue 20, part 4)."""

from __future__ import annotations

import json

from conftest import cli_env, run_cli
from gateway_fixtures import qwen25_renderer, write_script
from rollout_fixtures import call, tasks_file
from test_rollout import private_tmp


def test_run_log_is_pure_stream_json_and_stderr_is_kept_apart(tmp_path):
    qwen25_renderer()  # skips without the embedded model's tokenizer
    tasks = tasks_file(tmp_path, ["thermo-fahrenheit"])
    # one step, then agent-code stops at --max-steps 1: exit 3 and a plain-text line on stderr
    script = write_script(tmp_path, [call("read_file", {"path": "thermo.py"}, "thermo-fahrenheit.0")])
    out = tmp_path / "out"
    proc = run_cli("rollout", str(tasks), "--engine", f"scripted:{script}", "--out", str(out), "--budget", "120",
                   "--max-steps", "1", env=cli_env(TMPDIR=str(private_tmp(tmp_path))), timeout=300)
    assert proc.returncode == 0, proc.stderr[-3000:]
    (row,) = [json.loads(line) for line in (out / "results.jsonl").read_text().splitlines()]
    assert row["agent_exit_code"] == 3 and row["abort_reason"] is None, row
    (log,) = (out / "rollouts").glob("thermo*.log")
    lines = log.read_text().splitlines()
    events = [json.loads(line) for line in lines]            # every line is JSON: nothing else in the log
    assert events[0]["type"] == "system" and events[-1]["type"] == "result"
    assert any(e["type"] == "tool_use" and e["name"] == "read_file" for e in events)
    stderr = log.with_suffix(".stderr").read_text()
    assert stderr.startswith("agent-code: ") and "1" in stderr, stderr   # the max-steps message, kept
    report = (out / "report.html").read_text()
    assert f"href='rollouts/{log.with_suffix('.stderr').name}'" in report
    assert "stderr" not in row and "log" not in row                     # saved beside the row, not in it
