"""The policy on top of the wall: in default mode the agent's bash commands run unasked only
when they really run inside the OS sandbox (the loop judges each call with the wall of the
context it runs in), and what runs is still walled. Real agent loop, scripted model, bwrap."""

from __future__ import annotations

import json
import shutil
import subprocess
from pathlib import Path

import pytest

from agent_code.agent import Agent
from agent_code.confine import Wall, open_wall
from agent_code.policy import PermissionPolicy
from agent_code.providers.scripted import ScriptedProvider
from agent_code.tools import ToolContext, default_tools

pytestmark = pytest.mark.skipif(shutil.which("bwrap") is None, reason="bubblewrap (bwrap) is not installed")


def script(tmp_path: Path, *commands: str) -> Path:
    turns = [[{"type": "tool_use", "id": f"toolu_{i}", "name": "bash", "input": {"command": c}}]
             for i, c in enumerate(commands)]
    path = tmp_path / "script.jsonl"
    path.write_text("".join(json.dumps(t) + "\n" for t in [*turns, [{"type": "text", "text": "done"}]]))
    return path


@pytest.fixture
def project(tmp_path):
    root = tmp_path / "project"
    root.mkdir()
    subprocess.run(["git", "init", "-q"], cwd=root, check=True)
    return root


@pytest.fixture
def wall(project):
    opened = open_wall(project)
    assert isinstance(opened, Wall), getattr(opened, "reason", "")
    yield opened
    opened.close()


def results(tmp_path: Path, ctx: ToolContext, policy: PermissionPolicy, *commands: str) -> list[dict]:
    events: list[dict] = []
    Agent(ScriptedProvider(script(tmp_path, *commands)), default_tools(), ctx, permissions=policy,
          on_event=events.append).run("go")
    return [e for e in events if e["type"] == "tool_result"]


def test_default_mode_runs_walled_commands_unasked_and_they_stay_walled(tmp_path, project, wall):
    outside = tmp_path / "outside.txt"
    home_file = Path.home() / f".agent-code-wall-test-{tmp_path.name}"
    ctx = ToolContext(project)
    ctx.wall = wall
    out = results(tmp_path, ctx, PermissionPolicy("default", root=project),   # headless: nobody to ask
                  "echo made > inside.txt && cat inside.txt", f"echo x > {outside}", f"echo x > {home_file}")
    assert not out[0]["is_error"] and "made" in out[0]["content"], out
    assert (project / "inside.txt").read_text() == "made\n"
    assert not outside.exists(), out   # inside, /tmp is the session's own: the host's is untouched
    try:
        assert "Read-only file system" in out[2]["content"] and not home_file.exists(), out
    finally:
        home_file.unlink(missing_ok=True)


def test_a_policy_given_a_wall_still_asks_when_the_command_would_run_unwalled(tmp_path, project, wall):
    """The policy's wall is the context's: a policy built with a wall does not wave through a
    command the tools would run unconfined (ctx.wall None)."""
    marker = project / "ran.txt"
    out = results(tmp_path, ToolContext(project), PermissionPolicy("default", root=project, wall=wall),
                  f"touch {marker}")
    assert out[0]["is_error"] and "Permission denied" in out[0]["content"] and not marker.exists(), out


def test_the_deny_list_and_ask_rules_still_stand_inside(tmp_path, project, wall):
    from agent_code.policy import RuleSet

    ctx = ToolContext(project)
    ctx.wall = wall
    policy = PermissionPolicy("default", root=project, rules=RuleSet.from_lists(ask=["bash(git push:*)"]))
    out = results(tmp_path, ctx, policy, "rm -rf /", "git push origin main")
    assert out[0]["is_error"] and "built-in deny list" in out[0]["content"], out
    assert out[1]["is_error"] and "ask rule bash(git push:*)" in out[1]["content"], out
