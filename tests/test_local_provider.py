"""`agent-code --local`: the agent on its own in-process gateway (here over a scripted
engine with the embedded model's real tokenizer and template, so it runs in seconds)."""

from __future__ import annotations

import json

import pytest

from agent_code.render import models
from conftest import run_cli


def hermes(name: str, arguments: dict) -> dict:
    return {"text": f"<tool_call>\n{json.dumps({'name': name, 'arguments': arguments})}\n</tool_call>"}


@pytest.mark.skipif(not models.default_gguf_available(), reason="the default model's GGUF parts are not installed")
def test_local_runs_the_agent_through_the_in_process_gateway(tmp_path):
    project = tmp_path / "project"
    project.mkdir()
    (project / "notes.txt").write_text("alpha\nbeta\n")
    script = tmp_path / "engine.jsonl"
    script.write_text("\n".join(json.dumps(line) for line in [
        hermes("grep", {"pattern": "beta"}),
        hermes("read_file", {"path": "notes.txt"}),
        {"text": "beta is on line 2 of notes.txt."},
    ]) + "\n")
    proc = run_cli("--local", "--engine", f"scripted:{script}", "--output-format", "stream-json",
                   "-C", str(project), "Where is beta?", timeout=120)
    assert proc.returncode == 0, proc.stderr[-2000:]
    events = [json.loads(line) for line in proc.stdout.splitlines()]
    assert events[0]["provider"] == "local" and "in process" in events[0]["base_url"]
    results = [e for e in events if e["type"] == "tool_result"]
    assert [r["name"] for r in results] == ["grep", "read_file"]
    assert results[0]["content"] == "notes.txt:2:beta" and not results[0]["is_error"]
    assert results[1]["content"].endswith("2\tbeta")
    assert events[-1]["result"] == "beta is on line 2 of notes.txt."
