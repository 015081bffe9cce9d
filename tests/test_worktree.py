"""Worktrees: ``agent-code --worktree NAME`` and ``agent-code worktree list|remove``, on real git
repositories and the real CLI in subprocesses (scripted provider)."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

from agent_code.policy import PermissionPolicy
from agent_code.tools import default_tools
from agent_code.worktree import EXCLUDE_LINE, WorktreeError, check_name, ensure, list_worktrees, remove
from tests.conftest import cli_env, run_cli

GIT_ID = ["-c", "user.email=test@example.com", "-c", "user.name=test"]


def git(cwd: Path, *args: str) -> str:
    return subprocess.run(["git", "-C", str(cwd), *GIT_ID, *args], check=True, capture_output=True,
                          text=True).stdout


@pytest.fixture
def repo(tmp_path: Path) -> Path:
    root = tmp_path / "repo"
    root.mkdir()
    git(root, "init", "-q", "-b", "main")
    (root / "app.py").write_text("print('main')\n")
    git(root, "add", "app.py")
    git(root, "commit", "-qm", "init")
    return root


@pytest.fixture
def env(tmp_path: Path) -> dict[str, str]:
    home = tmp_path / "home"
    home.mkdir()
    return cli_env(HOME=str(home))


def cli(capsys, *args: str) -> tuple[int, str, str]:
    """``agent-code ARGS`` in this process (the sub-commands are cheap; no interpreter start)."""
    from agent_code.cli import main

    capsys.readouterr()
    try:
        main(list(args))
        code = 0
    except SystemExit as exc:
        code = exc.code if isinstance(exc.code, int) else 1
    out, err = capsys.readouterr()
    return code, out, err


def script(tmp_path: Path, name: str, content: str) -> Path:
    """Read app.py, write it with ``content``, answer."""
    path = tmp_path / f"{name}.jsonl"
    turns = [
        [{"type": "tool_use", "id": "t1", "name": "read_file", "input": {"path": "app.py"}}],
        [{"type": "tool_use", "id": "t2", "name": "write_file", "input": {"path": "app.py", "content": content}}],
        [{"type": "text", "text": f"done {name}"}],
    ]
    path.write_text("".join(json.dumps({"content": t}) + "\n" for t in turns))
    return path


def agent_cmd(repo: Path, name: str, script_path: Path) -> list[str]:
    return [sys.executable, "-m", "agent_code", "--worktree", name, "-C", str(repo), "--provider", "scripted",
            "--script", str(script_path), "--permission-mode", "acceptEdits", "--output-format", "json",
            "-p", "change app.py"]


def test_two_concurrent_headless_runs_in_two_worktrees_edit_the_same_path(repo, env, tmp_path):
    procs = {name: subprocess.Popen(agent_cmd(repo, name, script(tmp_path, name, f"print('{name}')\n")),
                                    stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=env)
             for name in ("a", "b")}
    for name, proc in procs.items():
        out, err = proc.communicate(timeout=60)
        assert proc.returncode == 0, err
        result = json.loads(out)
        assert result["result"] == f"done {name}" and not result["is_error"]
        assert result["cwd"] == str(repo / ".agent" / "worktrees" / name)
    for name in ("a", "b"):
        tree = repo / ".agent" / "worktrees" / name
        assert (tree / "app.py").read_text() == f"print('{name}')\n"
        assert git(tree, "rev-parse", "--abbrev-ref", "HEAD").strip() == f"agent/{name}"
        assert git(tree, "status", "--porcelain", "--untracked-files=no").split() == ["M", "app.py"]
        assert list((tree / ".agent" / "sessions").glob("*.jsonl")), "the session is saved in the worktree"
    # the main checkout is untouched and does not see the worktrees
    assert (repo / "app.py").read_text() == "print('main')\n"
    assert git(repo, "status", "--porcelain") == ""
    assert EXCLUDE_LINE in (repo / ".git" / "info" / "exclude").read_text().splitlines()
    assert {w.name: (w.branch, len(w.changes)) for w in list_worktrees(repo)} == {"a": ("agent/a", 1),
                                                                                 "b": ("agent/b", 1)}

    # a second run reuses the worktree (and its branch)
    again = subprocess.run(agent_cmd(repo, "a", script(tmp_path, "a2", "print('a2')\n"))[:-2] + ["--output-format",
                           "text", "go on"], capture_output=True, text=True, env=env, timeout=60)
    assert again.returncode == 0, again.stderr
    assert "worktree a:" in again.stderr and "(reused)" in again.stderr
    assert (repo / ".agent" / "worktrees" / "a" / "app.py").read_text() == "print('a2')\n"


def test_remove_refuses_a_dirty_worktree_without_force(repo, env, capsys):
    dirty, clean = ensure(repo, "dirty"), ensure(repo, "clean")
    (dirty.path / "app.py").write_text("print('changed')\n")
    (dirty.path / "new.txt").write_text("untracked work\n")
    # a session transcript is agent-code's own state, not a change
    (clean.path / ".agent" / "sessions").mkdir(parents=True)
    (clean.path / ".agent" / "sessions" / "s.jsonl").write_text("{}\n")

    code, out, _ = cli(capsys, "worktree", "list", "-C", str(repo))
    assert code == 0
    lines = {line.split()[0]: line for line in out.splitlines()}
    assert "2 uncommitted changes" in lines["dirty"] and "agent/dirty" in lines["dirty"]
    assert "clean" in lines["clean"].split()[2]

    refused = run_cli("worktree", "remove", "dirty", "-C", str(repo), env=env)
    assert refused.returncode == 1
    assert "uncommitted changes" in refused.stderr and "app.py" in refused.stderr and "new.txt" in refused.stderr
    assert (dirty.path / "new.txt").is_file() and (dirty.path / "app.py").read_text() == "print('changed')\n"
    with pytest.raises(WorktreeError, match="uncommitted"):
        remove(repo, "dirty")

    code, out, err = cli(capsys, "worktree", "remove", "clean", "-C", str(repo))
    assert code == 0, err
    assert not clean.path.exists() and "branch agent/clean kept" in out

    code, out, err = cli(capsys, "worktree", "remove", "dirty", "--force", "-C", str(repo))
    assert code == 0, err
    assert not dirty.path.exists() and "2 uncommitted changes discarded" in out
    assert list_worktrees(repo) == []
    assert "agent/dirty" in git(repo, "branch", "--list", "agent/dirty")  # the branch (the work) stays
    assert cli(capsys, "worktree", "remove", "nope", "-C", str(repo))[0] == 1
    assert "no worktrees" in cli(capsys, "worktree", "-C", str(repo))[1]


def test_ensure_from_inside_a_worktree_reuses_the_branch_and_checks_names(repo, tmp_path):
    first = ensure(repo, "one")
    assert first.created and first.branch == "agent/one"
    # from inside a worktree, the new one goes next to it, under the main checkout
    second = ensure(first.path, "two")
    assert second.path == repo / ".agent" / "worktrees" / "two"
    assert ensure(second.path, "one").created is False
    # the branch outlives its worktree: a new worktree of that name checks it out again
    git(first.path, "commit", "-qam", "x", "--allow-empty")
    head = git(first.path, "rev-parse", "HEAD").strip()
    remove(repo, "one")
    again = ensure(repo, "one")
    assert again.created and git(again.path, "rev-parse", "HEAD").strip() == head
    for bad in ("", "../x", "a/b", ".hidden", "x.lock", "a..b", "-f", "x" * 65):
        with pytest.raises(WorktreeError, match="invalid worktree name"):
            check_name(bad)
    plain = tmp_path / "plain"
    plain.mkdir()
    with pytest.raises(WorktreeError, match="not inside a git repository"):
        ensure(plain, "x")
    empty = tmp_path / "empty"
    empty.mkdir()
    git(empty, "init", "-q")
    with pytest.raises(WorktreeError, match="no commit yet"):
        ensure(empty, "x")


def test_the_policy_treats_the_worktree_as_the_project(repo):
    """Under ``.agent/worktrees/NAME`` every path would hold ``.agent``: the project is the
    worktree, so its own files are ordinary files, while its ``.agent``, its ``.git`` file and
    the repository's shared git directory stay protected."""
    tree = ensure(repo, "p").path
    tools = default_tools()
    policy = PermissionPolicy("acceptEdits", root=tree)
    write, bash = tools.get("write_file"), tools.get("bash")
    assert policy.explain(write, {"path": "app.py", "content": "x"}).behavior == "allow"
    assert policy.explain(write, {"path": str(tree / "src" / "new.py"), "content": "x"}).behavior == "allow"
    for protected in (".git", ".agent/settings.json", str(repo / ".git" / "config"),
                      str(repo / ".git" / "worktrees" / "p" / "HEAD")):
        assert policy.explain(write, {"path": protected, "content": "x"}).stage == "self-protection", protected
    explained = policy.explain(bash, {"command": f"echo x >> {repo}/.git/hooks/pre-commit"})
    assert explained.behavior == "deny" and explained.stage == "self-protection"
    # the main checkout's session may not write into a worktree (it is under its .agent/)
    main_policy = PermissionPolicy("acceptEdits", root=repo)
    assert main_policy.explain(write, {"path": str(tree / "app.py"), "content": "x"}).stage == "self-protection"


def test_a_worktree_inherits_the_trust_of_identical_settings(repo, tmp_path):
    """The worktree's committed .agent/settings.json is the version the user trusts in the
    main checkout: it is used there without asking again; a differing one is not."""
    from agent_code.agent.settings import folder_trusted, inherit_trust, load_trusted_settings, trust_folder

    home = tmp_path / "home"
    home.mkdir()
    settings = {"permissions": {"allow": ["bash(make test)"], "deny": ["bash(git push:*)"]}}
    (repo / ".agent").mkdir()
    (repo / ".agent" / "settings.json").write_text(json.dumps(settings))
    git(repo, "add", ".agent/settings.json")
    git(repo, "commit", "-qm", "settings")
    warnings: list[str] = []
    # a worktree of a folder never trusted is not trusted either
    assert inherit_trust(ensure(repo, "early").path, repo, home) == []
    assert not folder_trusted(repo / ".agent/worktrees/early", home)
    trust_folder(repo, home, how="the user said yes")                # the user trusts the main checkout
    main = load_trusted_settings(repo, home, warn=warnings.append)
    (repo / ".agent" / "sessions").mkdir()
    (repo / ".agent" / "sessions" / "s.jsonl").write_text("{}\n")        # a session ran here
    assert {r.text for r in main.rules.rules} == {"bash(make test)", "bash(git push:*)"} and not warnings

    same = ensure(repo, "same").path
    # without inheriting: an unrecorded file inside a project a session ran in is not used
    # (but for its deny and ask rules, which can only restrict)
    plain = load_trusted_settings(same, home, warn=warnings.append)
    assert {r.text for r in plain.rules.rules} == {"bash(git push:*)"} and plain.unaccepted == [".agent/settings.json"]
    other = ensure(repo, "other").path
    warnings.clear()
    assert inherit_trust(other, repo, home) == [".agent/settings.json", ".agent/settings.local.json"]
    used = load_trusted_settings(other, home, warn=warnings.append)
    assert {r.text for r in used.rules.rules} == {"bash(make test)", "bash(git push:*)"} and not warnings
    # a worktree whose settings differ from the trusted version inherits nothing
    changed = ensure(repo, "changed").path
    (changed / ".agent" / "settings.json").write_text(json.dumps({"permissions": {"defaultMode": "bypassPermissions"}}))
    assert ".agent/settings.json" not in inherit_trust(changed, repo, home)
    # its folder is trusted (a worktree of a trusted one), but the differing file is a change to accept
    assert folder_trusted(changed, home)
    warnings.clear()
    differs = load_trusted_settings(changed, home, warn=warnings.append)
    assert differs.default_mode is None and differs.unaccepted == [".agent/settings.json"]
    assert any("no usable trust record" in w for w in warnings), warnings
