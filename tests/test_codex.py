"""The real Codex CLI (npm @openai/codex), headless, through the gateway's Responses endpoint.

A scripted engine (Qwen2.5's chat template, Hermes tool calls) drives ``codex exec`` with the
config the rollout harness writes: its shell tool lists the directory, then an ``apply_patch``
heredoc (which Codex intercepts and applies itself) fixes a typo. The patch must land on
disk, and every turn must be recorded token-exactly under the session id sent as the key.
With a model catalog entry Codex offers ``apply_patch`` as a freeform custom tool instead;
the gateway must hand the call back as a ``custom_tool_call`` that Codex applies.
"""

from __future__ import annotations

import json
import os
import subprocess
from pathlib import Path

import pytest

from agent_code.harness.base import HarnessError, Launch
from agent_code.harness.codex import KEY_VAR, config_toml, host_codex, model_catalog, native_codex
from gateway_fixtures import check_token_exact, qwen25_renderer, scripted_gateway, typo_project
from rollout_fixtures import call, say

PATCH_BODY = """*** Begin Patch
*** Update File: hello.py
@@
-    return "Helo, " + name
+    return "Hello, " + name
*** End Patch"""
PATCH = f"apply_patch <<'EOF'\n{PATCH_BODY}\nEOF"
FIXED = 'def greet(name):\n    return "Hello, " + name\n'


def codex_binary() -> str:
    found = host_codex()
    if found is None:
        pytest.skip("Codex is not installed (scripts/test.sh installs it into .cache/node)")
    try:
        return str(native_codex(found))
    except HarnessError as exc:
        pytest.skip(f"Codex is installed without its native binary: {exc}")


def run_codex(codex: str, prompt: str, work: Path, url: str, session: str, model: str, catalog: dict | None = None):
    """``codex exec`` with the harness's config.toml in a private CODEX_HOME; the key is the session id."""
    home = work.parent / "home"
    launch = Launch(base_url=url, session_id=session, model=model, prompt=prompt, workdir=str(work), home=str(home))
    (home / ".codex").mkdir(parents=True)
    catalog_path = None
    if catalog is not None:
        catalog_path = home / ".codex/models.json"
        catalog_path.write_text(json.dumps(catalog))
    (home / ".codex/config.toml").write_text(config_toml(launch, str(catalog_path) if catalog_path else None))
    env = {"PATH": os.environ["PATH"], "HOME": str(home), "CODEX_HOME": str(home / ".codex"), KEY_VAR: session}
    return subprocess.run([codex, "exec", "--json", "--skip-git-repo-check", "--color", "never", "-C", str(work),
                           "-m", model, "-"], input=prompt, env=env, capture_output=True, text=True, timeout=120)


def test_codex_applies_a_patch_through_the_gateway(tmp_path):
    codex = codex_binary()
    work, target = typo_project(tmp_path)
    script = [call("exec_command", {"cmd": "ls"}), call("exec_command", {"cmd": PATCH}),
              say("Fixed the typo in hello.py.")]
    with scripted_gateway(tmp_path, script, qwen25_renderer()) as (url, gateway):
        proc = run_codex(codex, "Fix the typo in hello.py", work, url, "codex-session", "served-model")
        turns = gateway.store.get("codex-session").turns
        samples = gateway.finish_session("codex-session", reward=1.0)

    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-2000:]
    events = [json.loads(line) for line in proc.stdout.splitlines() if line.strip()]
    items = [e["item"] for e in events if e["type"] == "item.completed"]
    assert [i["type"] for i in items if i["type"] != "error"] == ["command_execution", "file_change", "agent_message"]
    assert items[-1]["text"] == "Fixed the typo in hello.py."
    assert events[-1]["type"] == "turn.completed"
    assert target.read_text() == FIXED  # the patch landed

    assert len(turns) == 3
    assert '"exec_command"' in json.dumps(turns[0].tools)           # Codex's own tools went through
    assert "hello.py" in json.dumps(turns[1].messages[-1])          # `ls` ran for real
    assert "Success. Updated the following files" in json.dumps(turns[2].messages[-1])
    check_token_exact(samples, turns)


def test_codex_freeform_apply_patch_is_a_custom_tool_call(tmp_path):
    codex = codex_binary()
    work, target = typo_project(tmp_path)
    catalog = model_catalog("served-model", "You are a coding agent. Edit files with apply_patch.")
    script = [call("apply_patch", {"input": PATCH_BODY + "\n"}), say("Patched.")]
    with scripted_gateway(tmp_path, script, qwen25_renderer()) as (url, gateway):
        proc = run_codex(codex, "Fix the typo in hello.py", work, url, "codex-custom", "served-model", catalog)
        turns = gateway.store.get("codex-custom").turns
        samples = gateway.finish_session("codex-custom", reward=1.0)

    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-2000:]
    items = [json.loads(line)["item"] for line in proc.stdout.splitlines() if '"item.completed"' in line]
    assert [i["type"] for i in items] == ["file_change", "agent_message"]  # no metadata warning either
    assert target.read_text() == FIXED
    assert len(turns) == 2
    assert turns[0].messages[0]["content"].startswith("You are a coding agent.")  # the catalog's prompt
    assert '"apply_patch"' in json.dumps(turns[0].tools)
    assert "Success. Updated the following files" in json.dumps(turns[1].messages[-1])
    check_token_exact(samples, turns)
