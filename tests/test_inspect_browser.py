"""`agent-code inspect --html` opened in real headless Chromium (skipped where it is absent)."""

from __future__ import annotations

import shutil
import subprocess

import anthropic
import pytest

from conftest import cli_env, run_cli
from gateway_fixtures import qwen3_renderer, scripted_gateway
from agent_code.render.template import qwen3_tokenizer_dir
from agent_code.trajectory.store import write_samples

CHROMIUM = shutil.which("chromium") or shutil.which("chromium-browser") or shutil.which("google-chrome")
FLAGS = ["--headless", "--no-sandbox", "--disable-gpu", "--disable-quic", "--no-first-run",
         "--disable-background-networking", "--disable-component-update", "--disable-sync"]


@pytest.mark.skipif(CHROMIUM is None, reason="Chromium is not installed (apt-get install chromium)")
def test_inspect_html_renders_in_chromium(tmp_path):
    renderer = qwen3_renderer()
    call = '<tool_call>\n{"name": "echo", "arguments": {"text": "hi"}}\n</tool_call>'
    with scripted_gateway(tmp_path, [{"text": call}, {"text": "Done."}], renderer) as (url, gateway):
        client = anthropic.Anthropic(base_url=url, api_key="view", max_retries=0)
        tools = [{"name": "echo", "description": "Echo.", "input_schema": {"type": "object",
                  "properties": {"text": {"type": "string"}}, "required": ["text"]}}]
        first = client.messages.create(model="m", max_tokens=64, tools=tools,
                                       messages=[{"role": "user", "content": "say hi"}])
        use = first.content[-1]
        client.messages.create(model="m", max_tokens=64, tools=tools, messages=[
            {"role": "user", "content": "say hi"},
            {"role": "assistant", "content": [b.model_dump(exclude_none=True) for b in first.content]},
            {"role": "user", "content": [{"type": "tool_result", "tool_use_id": use.id, "content": "hi"}]}])
        samples = gateway.finish_session("view", reward=1.0)
    out = tmp_path / "out"
    write_samples(samples, out)
    page = tmp_path / "samples.html"
    proc = run_cli("inspect", str(out / "samples.jsonl"), "--html", str(page),
                   "--tokenizer", str(qwen3_tokenizer_dir()))
    assert proc.returncode == 0, proc.stderr
    assert "view" in proc.stdout  # the session is listed in the table

    profile = tmp_path / "profile"
    dom = subprocess.run([CHROMIUM, *FLAGS, f"--user-data-dir={profile}", "--dump-dom", page.as_uri()],
                         capture_output=True, text=True, timeout=120, env=cli_env())
    assert dom.returncode == 0, dom.stderr[-2000:]
    trained = sum(samples[0].loss_mask)
    # every trained token is its own highlighted span in the rendered DOM, with its logprob
    assert dom.stdout.count('class="t" title="logprob') == trained > 0
    # the system prompt and the tool block fold away (closed <details>, nested)
    assert "<summary>system prompt · " in dom.stdout and "<summary>tools · " in dom.stdout
    shot = tmp_path / "shot.png"
    subprocess.run([CHROMIUM, *FLAGS, f"--user-data-dir={profile}", f"--screenshot={shot}",
                    "--window-size=1200,900", page.as_uri()], capture_output=True, timeout=120, env=cli_env())
    assert shot.exists() and shot.stat().st_size > 10_000
