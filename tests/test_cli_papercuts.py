"""What a new user meets first on the command line (issue 20, part 4): the help lists every
sub-command and every API the gateway serves, the policies are choices, a busy port is a plain
error before anything is announced, the rollout summary names each output once."""

from __future__ import annotations

import socket
import time
from pathlib import Path

from conftest import run_cli

from agent_code.cli import SUBCOMMANDS


def test_help_lists_every_sub_command() -> None:
    proc = run_cli("--help")
    assert proc.returncode == 0, proc.stderr
    listed = proc.stdout.split("Arguments:")[0]
    for name in SUBCOMMANDS:       # serve, inspect, recover, rollout, ... whatever is dispatched
        assert f"\n    {name} " in listed, (name, listed)
    assert set(SUBCOMMANDS) >= {"serve", "inspect", "recover", "rollout"}


def test_serve_help_names_all_three_apis() -> None:
    proc = run_cli("serve", "--help")
    assert proc.returncode == 0, proc.stderr
    text = " ".join(proc.stdout.split())
    for name in ("Anthropic Messages", "OpenAI Chat Completions", "OpenAI Responses",
                 "/v1/messages", "/v1/chat/completions", "/v1/responses"):
        assert name in text, name


def test_policies_are_choices_listed_in_help_and_enforced() -> None:
    text = " ".join(run_cli("serve", "--help").stdout.split())
    assert "--history-policy <tokens|template>" in text
    assert "--reward-policy <full|split>" in text
    assert "--sessions <auto|explicit>" in text
    for option, choices in (("--history-policy", "'tokens', 'template'"), ("--reward-policy", "'full', 'split'")):
        start = time.monotonic()
        proc = run_cli("serve", option, "bogus", "--engine", "scripted:/nonexistent")
        # refused as bad usage, with the choices, before any engine or tokenizer is loaded
        assert proc.returncode == 2, (option, proc.stderr)
        assert "bogus" in proc.stderr and choices in proc.stderr, proc.stderr
        assert time.monotonic() - start < 30


def test_serve_on_a_busy_port_fails_before_announcing(tmp_path: Path) -> None:
    script = tmp_path / "s.jsonl"
    script.write_text('{"text": "hi"}\n')
    with socket.socket() as busy:
        busy.bind(("127.0.0.1", 0))
        busy.listen()
        port = busy.getsockname()[1]
        proc = run_cli("serve", "--port", str(port), "--engine", f"scripted:{script}", timeout=60)
    assert proc.returncode == 1, (proc.returncode, proc.stdout, proc.stderr)
    assert "listening on" not in proc.stdout + proc.stderr
    assert f"127.0.0.1:{port} is already in use" in proc.stderr and "--port" in proc.stderr
    assert "Traceback" not in proc.stderr


def test_rollout_summary_names_the_report_once(tmp_path: Path, capsys) -> None:
    from agent_code.cli.rollout import _print_summary
    from agent_code.rollout.runner import RolloutResult

    paths = {name: tmp_path / name for name in ("samples.jsonl", "samples.parquet", "results.jsonl", "report.html")}
    _print_summary([RolloutResult("t/0", "t", 0, "t.0.x", "agent-code", reward=1.0)], paths, False)
    out = capsys.readouterr().out
    assert out.count(str(tmp_path / "report.html")) == 1, out
    for name, path in paths.items():
        assert f"{name}: {path}" in out


def test_readme_stands_alone() -> None:
    """The README names nothing outside the repository (no ``../`` paths) and no course material."""
    import re

    from conftest import REPO

    text = (REPO / "README.md").read_text(encoding="utf-8")
    outside = re.findall(r"[`(]\.\./\w[^`)\s]*", text)       # `../shared/X`, ](../X): a file outside
    assert not outside, outside
    assert "lesson" not in text.lower()
