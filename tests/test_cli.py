"""The real entry point in subprocesses: formats, exit codes, REPL, demo, start-up."""

from __future__ import annotations

import json
import re
import subprocess
import sys
import time

from agent_code import __version__
from agent_code.demo import SAMPLE_PROJECT, demo_argv
from conftest import cli_env, run_cli


def test_version():
    proc = run_cli("--version")
    assert proc.returncode == 0 and proc.stdout.strip() == f"agent-code {__version__}"


def test_version_starts_fast():
    best = min(_timed([sys.executable, "-m", "agent_code", "--version"]) for _ in range(3))
    # well under a second: no SDK, no rich, no typer on this path
    assert best < 0.5, f"--version took {best:.2f}s"
    proc = subprocess.run([sys.executable, "-X", "importtime", "-m", "agent_code", "--version"],
                          capture_output=True, text=True, env=cli_env())
    imported = {line.split("|")[-1].strip() for line in proc.stderr.splitlines()}
    assert not {"anthropic", "rich", "typer", "httpx"} & imported


def _timed(cmd):
    start = time.perf_counter()
    subprocess.run(cmd, capture_output=True, env=cli_env(), check=True)
    return time.perf_counter() - start


def test_demo_shows_multi_step_trace_and_final_answer():
    proc = run_cli(*demo_argv())
    assert proc.returncode == 0, proc.stderr
    out = proc.stdout
    assert f"cwd: {SAMPLE_PROJECT}" in out and "provider: scripted" in out
    for name in ("system_date", "project_tree", "grep", "read_file"):
        assert f"tool_call: {name}" in out
    assert "inventory/stock.py:11:def total_value" in out  # grep really ran on the project
    assert re.search(r"\b13\s+return sum\(item.price for item in items\)", out)  # and read_file too
    assert "final: Found it." in out


def test_stream_json_emits_only_json_lines():
    proc = run_cli("--output-format", "stream-json", *demo_argv())
    assert proc.returncode == 0, proc.stderr
    events = [json.loads(line) for line in proc.stdout.splitlines()]  # every line parses
    assert events[0]["type"] == "system" and events[0]["subtype"] == "init"
    assert events[-1]["type"] == "result" and events[-1]["subtype"] == "success"
    kinds = [e["type"] for e in events]
    assert kinds.count("assistant") == 5 and kinds.count("tool_use") == kinds.count("tool_result") == 5
    uses = {e["id"]: e["name"] for e in events if e["type"] == "tool_use"}
    assert all(uses[e["tool_use_id"]] == e["name"] for e in events if e["type"] == "tool_result")
    assert events[1]["message"]["content"][0]["signature"] == "demo-signature-1"


def test_stream_json_errors_are_json_too(tmp_path):
    proc = run_cli("--output-format", "stream-json", "--provider", "anthropic", "-C", str(tmp_path), "hi")
    assert proc.returncode == 1
    lines = proc.stdout.splitlines()
    assert len(lines) == 1 and json.loads(lines[0])["is_error"] is True
    assert "no API key" in proc.stderr


def test_json_output_is_one_object():
    proc = run_cli("--output-format", "json", *demo_argv())
    assert proc.returncode == 0
    data = json.loads(proc.stdout)
    assert data["subtype"] == "success" and data["num_steps"] == 5 and data["result"].startswith("Found it.")
    assert data["provider"] == "scripted"


def test_print_mode_prints_only_the_answer(tmp_path):
    proc = run_cli("-p", "--provider", "mock", "-C", str(tmp_path), "hi there")
    assert proc.returncode == 0
    assert proc.stdout == "echo returned: hi there\n"


def test_print_mode_reads_the_prompt_from_stdin(tmp_path):
    proc = run_cli("-p", "--provider", "mock", "-C", str(tmp_path), input="from stdin\n")
    assert proc.stdout == "echo returned: from stdin\n"


def test_max_steps_exit_code(tmp_path):
    script = tmp_path / "loop.jsonl"
    script.write_text("\n".join(json.dumps([{"type": "tool_use", "id": f"t{i}", "name": "echo",
                                             "input": {"text": "again"}}]) for i in range(4)))
    proc = run_cli("--provider", "scripted", "--script", str(script), "--max-steps", "2", "-C", str(tmp_path), "x")
    assert proc.returncode == 3
    assert "reached max_steps=2" in proc.stderr


def test_mock_provider_uses_echo(tmp_path):
    proc = run_cli("--provider", "mock", "-C", str(tmp_path), "say hi")
    assert proc.returncode == 0
    assert "tool_call: echo {\"text\": \"say hi\"}" in proc.stdout
    assert "observation: say hi" in proc.stdout and "final: echo returned: say hi" in proc.stdout


def test_repl_keeps_one_conversation(tmp_path):
    proc = run_cli("--provider", "mock", "-C", str(tmp_path), input="/help\nfirst\n/bogus\nsecond\n/exit\n")
    assert proc.returncode == 0, proc.stderr
    assert "/exit" in proc.stdout and "unknown command /bogus" in proc.stdout
    assert "final: echo returned: first" in proc.stdout and "final: echo returned: second" in proc.stdout


def test_bad_cwd_and_unknown_provider(tmp_path):
    proc = run_cli("-C", str(tmp_path / "missing"), "--provider", "mock", "x")
    assert proc.returncode == 1 and "is not a directory" in proc.stderr
    proc = run_cli("--provider", "nope", "x")
    assert proc.returncode == 2 and "nope" in proc.stderr


def test_sub_commands_refuse_a_cwd_that_is_not_a_directory(tmp_path):
    missing = tmp_path / "missing"
    for args in (("settings", "status", "-C", str(missing)), ("-C", str(missing)), ("mcp", "list", "-C", str(missing)),
                 ("worktree", "-C", str(missing))):
        if args[0] == "-C":
            args = ("settings", *args)   # -C before the sub-command's own command
        proc = run_cli(*args)
        assert proc.returncode == 1, (args, proc.stdout, proc.stderr)
        assert f"agent-code {args[0]}: error: --cwd {missing} is not a directory" in proc.stderr, proc.stderr
