"""The real Claude Code CLI (npm @anthropic-ai/claude-code), headless, through the gateway.

A scripted engine (Qwen2.5's chat template, Hermes tool calls) drives it through Bash,
Read and Edit; the edit must land on disk and every turn must be recorded.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
from pathlib import Path

import pytest

from gateway_fixtures import check_token_exact, qwen25_renderer, scripted_gateway, typo_project

REPO = Path(__file__).resolve().parents[1]


def claude_binary() -> str:
    for candidate in (os.environ.get("AGENT_CODE_CLAUDE"), REPO / ".cache/node/node_modules/.bin/claude",
                      shutil.which("claude")):
        if candidate and Path(candidate).exists():
            return str(candidate)
    pytest.skip("Claude Code is not installed (scripts/test.sh installs it into .cache/node)")


def call(name: str, arguments: dict) -> dict:
    return {"text": f"<tool_call>\n{json.dumps({'name': name, 'arguments': arguments})}\n</tool_call>"}


def run_claude(claude: str, prompt: str, work: Path, url: str, session: str, model: str, *,
               essential_only: bool = True):
    """Claude Code headless against the gateway, with a private HOME and the session id as key.
    ``essential_only=False`` lets it make its side requests (the session title) as a user's would."""
    home = work.parent / "home"
    home.mkdir(exist_ok=True)
    env = {"PATH": os.environ["PATH"], "HOME": str(home), "ANTHROPIC_BASE_URL": url,
           "ANTHROPIC_AUTH_TOKEN": session, "DISABLE_AUTOUPDATER": "1",
           "IS_SANDBOX": "1"}  # IS_SANDBOX: bypass mode is allowed as root
    if essential_only:
        env["CLAUDE_CODE_DISABLE_NONESSENTIAL_TRAFFIC"] = "1"
    return subprocess.run([claude, "-p", prompt, "--permission-mode", "bypassPermissions",
                           "--output-format", "stream-json", "--verbose", "--model", model],
                          cwd=work, env=env, capture_output=True, text=True, timeout=300)


def test_claude_code_edits_a_file_through_the_gateway(tmp_path):
    claude = claude_binary()
    work, target = typo_project(tmp_path)
    script = [
        call("Bash", {"command": "ls", "description": "List files"}),
        call("Read", {"file_path": str(target)}),
        call("Edit", {"file_path": str(target), "old_string": "Helo", "new_string": "Hello"}),
        {"text": "Fixed the typo in hello.py."},
    ]
    with scripted_gateway(tmp_path, script, qwen25_renderer()) as (url, gateway):
        proc = run_claude(claude, "Fix the typo in hello.py", work, url, "cc-session", "served-model")
        turns = gateway.store.get("cc-session").turns

    assert proc.returncode == 0, proc.stderr[-2000:]
    events = [json.loads(line) for line in proc.stdout.splitlines() if line.strip()]
    assert events[-1]["type"] == "result" and events[-1]["result"] == "Fixed the typo in hello.py."
    used = [b["name"] for e in events if e["type"] == "assistant" for b in e["message"]["content"]
            if b["type"] == "tool_use"]
    assert used == ["Bash", "Read", "Edit"]
    assert target.read_text() == 'def greet(name):\n    return "Hello, " + name\n'  # the edit landed

    assert len(turns) == 4
    assert len(turns[0].tools) > 10  # Claude Code's own tool set went through the template
    assert turns[1].messages[-1] == {"role": "tool", "content": "hello.py"}  # Bash ran `ls` for real
    assert "Helo" in turns[2].messages[-1]["content"]  # Read's result came back
    assert turns[3].reply == {"role": "assistant", "content": "Fixed the typo in hello.py."}
    # the billing header Claude Code adds to its system prompt never reaches the template
    assert "x-anthropic-billing-header" not in turns[0].messages[0]["content"]


def test_claude_code_sub_agent_yields_a_second_branch(tmp_path):
    """Claude Code's Agent tool runs a sub-agent with its own system prompt in the same
    session: the gateway sees a second root, and the samples say so."""
    from agent_code.trajectory.samples import build_samples

    claude = claude_binary()
    work, target = typo_project(tmp_path)
    script = [
        call("Agent", {"description": "Find the typo", "prompt": "Read hello.py and report the typo.",
                       "subagent_type": "general-purpose"}),
        call("Read", {"file_path": str(target)}),           # the sub-agent's first turn
        {"text": "The typo is Helo."},                      # the sub-agent's answer
        {"text": "The sub-agent found the typo: Helo."},    # the main agent's final answer
    ]
    with scripted_gateway(tmp_path, script, qwen25_renderer()) as (url, gateway):
        proc = run_claude(claude, "Use a sub-agent to find the typo", work, url, "cc-sub", "m")
        turns = gateway.store.get("cc-sub").turns
        samples = gateway.finish_session("cc-sub", reward=1.0)

    assert proc.returncode == 0, proc.stderr[-2000:]
    assert json.loads(proc.stdout.splitlines()[-1])["result"] == "The sub-agent found the typo: Helo."
    assert len(turns) == 4
    assert [t.parent for t in turns] == [None, None, 1, 0]  # main resumed on its held tokens
    assert {s.branch for s in samples} == {"main", "sub-agent"} and len(samples) == 2
    check_token_exact(samples, turns)  # each sampled token trained exactly once, in one of the two
    assert build_samples(turns, reward=1.0)[0].branch == "main"
