"""Plan mode's read-only git runs none of the programs a repository's config names.

The repository here is an attacker's: its ``.git/config`` (and a file it includes, and a
submodule's config) names an fsmonitor hook, textconv drivers, an external diff (global and
per driver), clean/smudge/process filters, pagers, an alias, hooks, gpg, ssh and a credential
helper: each a script that leaves a marker file. Every command goes through the real path: a
scripted agent in plan mode (``PermissionPolicy`` + the real bash tool + real git). A command
is either run with that config neutralised or refused; a marker never appears. The same
repository in bypassPermissions runs the programs (the traps are armed, and the user's own
git keeps working there).
"""

from __future__ import annotations

import json
import os
import subprocess
from pathlib import Path

import pytest

from agent_code.agent import Agent
from agent_code.policy.permissions import read_only_command_problem
from agent_code.providers.scripted import ScriptedProvider
from agent_code.tools import ToolContext, default_tools
from agent_code.tools.readonly_git import STATIC_OVERRIDES, neutralise
from agent_code.tools.shell import read_only_env

GIT = ["git", "-c", "user.email=t@example.com", "-c", "user.name=t", "-c", "protocol.file.allow=always"]


def git(cwd: Path, *args: str) -> str:
    return subprocess.run([*GIT, *args], cwd=cwd, check=True, capture_output=True, text=True).stdout


def trap(bin_dir: Path, markers: Path, name: str, body: str) -> str:
    """A script that leaves ``markers/name`` and then does ``body``; its path."""
    path = bin_dir / name
    path.write_text(f"#!/bin/sh\ntouch '{markers}/{name}'\n{body}\n")
    path.chmod(0o755)
    return str(path)


def arm(repo: Path, bin_dir: Path, markers: Path, tag: str) -> None:
    """Point every program-naming config key of ``repo`` at a trap named ``tag-…``."""
    t = lambda name, body="": trap(bin_dir, markers, f"{tag}-{name}", body)  # noqa: E731
    upper = 'tr a-z A-Z < "$1"'
    settings = {
        "user.email": "t@example.com", "user.name": "t",
        "core.fsmonitor": t("fsmonitor", "exit 1"),
        "diff.tc.textconv": t("textconv", upper),
        "diff.tc.cachetextconv": "true",
        "filter.fl.clean": t("clean", "cat"),
        "filter.fl.smudge": t("smudge", "cat"),
        "filter.pr.process": t("process", "exit 1"),
        "diff.dc.command": t("diffdriver", "echo DRIVER"),
        "diff.external": t("extdiff", "echo EXTERNAL"),
        "core.pager": t("pager", "cat"),
        "pager.log": t("pagerlog", "cat"),
        "alias.st": "!" + t("alias"),
        "alias.status": "!" + t("alias-shadow"),
        "gpg.program": t("gpg", "exit 1"),
        "gpg.ssh.program": t("gpgssh", "exit 1"),
        "log.showSignature": "true",
        "core.sshCommand": t("ssh", "exit 1"),
        "credential.helper": "!" + t("credential"),
        "core.askPass": t("askpass"),
        "core.editor": t("editor"),
        "remote.origin.url": "ssh://example.invalid/x.git",
        "remote.origin.uploadpack": t("uploadpack"),
        "include.path": str(repo.parent / f"{tag}-included.gitconfig"),
    }
    (repo.parent / f"{tag}-included.gitconfig").write_text(
        f"[diff \"inc\"]\n\ttextconv = {t('included-textconv', upper)}\n")
    for key, value in settings.items():
        git(repo, "config", key, value)
    hooks = repo / ".git" / "hooks"
    for hook in ("post-index-change", "reference-transaction", "post-checkout", "pre-auto-gc"):
        t(f"hook-{hook}")
        (hooks / hook).write_text(f"#!/bin/sh\ntouch '{markers}/{tag}-hook-{hook}'\n")
        (hooks / hook).chmod(0o755)


def make_repo(path: Path, bin_dir: Path, markers: Path, tag: str) -> Path:
    path.mkdir()
    git(path, "init", "-q")
    (path / ".gitattributes").write_text("*.txt diff=tc filter=fl\n*.bin diff=dc\n*.md diff=inc\n*.p filter=pr\n")
    (path / "a.txt").write_text("alpha\n")
    (path / "b.bin").write_text("bravo\n")
    (path / "c.md").write_text("charlie\n")
    (path / "d.p").write_text("delta\n")
    git(path, "add", ".")
    git(path, "commit", "-qm", "init")
    # a commit that looks signed: showing its signature runs gpg.program
    signed = (f"tree {git(path, 'rev-parse', 'HEAD^{tree}').strip()}\nparent {git(path, 'rev-parse', 'HEAD').strip()}\n"
              "author t <t@example.com> 1700000000 +0000\ncommitter t <t@example.com> 1700000000 +0000\n"
              "gpgsig -----BEGIN PGP SIGNATURE-----\n \n iQEzBAABCAAdFiEE\n -----END PGP SIGNATURE-----\n\nsigned\n")
    sha = subprocess.run(["git", "hash-object", "-t", "commit", "-w", "--stdin"], cwd=path, input=signed,
                         check=True, capture_output=True, text=True).stdout.strip()
    git(path, "update-ref", "HEAD", sha)
    git(path, "tag", "v1")
    arm(path, bin_dir, markers, tag)
    for name, text in (("a.txt", "alpha\nalpha2\n"), ("b.bin", "bravo\nbravo2\n"), ("c.md", "charlie\ncharlie2\n"),
                       ("d.p", "delta\ndelta2\n")):
        (path / name).write_text(text)
    # same size, same mtime second as the index: git status must re-hash (through the filters)
    return path


def build_world(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> dict:
    """An armed repository ``project`` (with an armed submodule ``sub``) and a second armed
    repository ``other`` beside it; ``markers`` collects what the traps leave."""
    home = tmp_path / "home"
    home.mkdir()
    monkeypatch.setenv("HOME", str(home))
    monkeypatch.setenv("GIT_CONFIG_NOSYSTEM", "1")
    for var in ("GIT_CONFIG_PARAMETERS", "GIT_CONFIG_COUNT", "GIT_DIR", "GIT_WORK_TREE", "GIT_EXEC_PATH"):
        monkeypatch.delenv(var, raising=False)
    markers, bin_dir = tmp_path / "markers", tmp_path / "bin"
    markers.mkdir()
    bin_dir.mkdir()
    sub_src = tmp_path / "subsrc"
    sub_src.mkdir()
    git(sub_src, "init", "-q")
    (sub_src / ".gitattributes").write_text("*.txt diff=stc filter=sfl\n")
    (sub_src / "s.txt").write_text("sierra\n")
    git(sub_src, "add", ".")
    git(sub_src, "commit", "-qm", "sub")
    project = make_repo(tmp_path / "project", bin_dir, markers, "project")
    git(project, "submodule", "add", "-q", str(sub_src), "sub")
    git(project, "commit", "-qm", "add sub")
    sub = project / "sub"
    for key, name, body in (("core.fsmonitor", "fsmonitor", "exit 1"), ("diff.stc.textconv", "textconv", "cat \"$1\""),
                            ("filter.sfl.clean", "clean", "cat"), ("diff.external", "extdiff", "echo EXT")):
        git(sub, "config", key, trap(bin_dir, markers, f"sub-{name}", body))
    (sub / "s.txt").write_text("sierra\nsierra2\n")
    other = make_repo(tmp_path / "other", bin_dir, markers, "other")
    cli_trap = trap(bin_dir, markers, "cli-trap", "exit 1")  # for the spellings that name a program
    for repo in (project, other):
        git(repo, "config", "help.autocorrect", "immediate")  # a typo runs what it corrects to
        git(repo, "config", "alias.stauts", "!" + cli_trap)
    for left in markers.iterdir():  # what setting up ran (git commit, submodule add) does not count
        left.unlink()
    return {"project": project, "other": other, "markers": markers, "tmp": tmp_path, "trap": cli_trap}


@pytest.fixture
def world(tmp_path, monkeypatch):
    """A world of its own, for a test that changes it."""
    return build_world(tmp_path, monkeypatch)


@pytest.fixture(scope="module")
def _shared_world(tmp_path_factory):
    with pytest.MonkeyPatch.context() as mp:
        yield build_world(tmp_path_factory.mktemp("shared"), mp)


@pytest.fixture
def shared(_shared_world):
    """One world for the tests that only read it (plan mode changes nothing), markers cleared."""
    for left in _shared_world["markers"].iterdir():
        left.unlink()
    return _shared_world


def run_agent(world, commands: list[str], mode: str) -> dict[str, dict]:
    """Run each command as a bash call of a scripted agent in ``mode``; the tool results by
    command."""
    turns = [[{"type": "tool_use", "id": f"c{i}", "name": "bash", "input": {"command": c}}]
             for i, c in enumerate(commands)]
    turns.append([{"type": "text", "text": "done"}])
    script = world["tmp"] / f"script-{mode}.jsonl"
    script.write_text("\n".join(json.dumps(t) for t in turns) + "\n")
    events: list[dict] = []
    result = Agent(ScriptedProvider(script), default_tools(), ToolContext(world["project"]), on_event=events.append,
                   permissions=mode).run("look")
    assert result.status == "success"
    out = {e["tool_use_id"]: e for e in events if e["type"] == "tool_result"}
    return {c: out[f"c{i}"] for i, c in enumerate(commands)}


def markers(world) -> list[str]:
    return sorted(p.name for p in world["markers"].iterdir())


def ran(result: dict) -> bool:
    return not result["is_error"] and not result["content"].startswith("Permission denied")


# commands plan mode lets run: each runs, neutralised
RUN_NEUTRALISED = [
    "git status", "git status --short", "git status -v", "git status --ignore-submodules=none",
    "git diff", "git diff a.txt", "git diff --textconv", "git diff HEAD", "git diff --stat", "git diff --cached",
    "git diff --submodule=diff", "git log -p", "git log -p -1 --textconv", "git log --show-signature",
    "git log --format='%G? %GS'", "git log --oneline | head -3", "git show", "git show --textconv HEAD:a.txt",
    "git show v1", "git blame a.txt", "git blame c.md", "git grep alpha", "git grep --textconv alpha",
    "git grep --recurse-submodules sierra", "git cat-file --textconv HEAD:a.txt",
    "git cat-file --filters HEAD:a.txt", "git cat-file --filters HEAD:d.p", "git ls-files -m",
    "git describe --tags", "git shortlog -s HEAD", "git branch -a", "git tag -l", "git remote -v",
    "git config --list", "git config --get core.fsmonitor", "git stash list", "git reflog",
    "git -C sub status", "git -C sub diff", "cd sub && git diff", "git -C ../other status",
    "git -C ../other diff", "git -C ../other log -p", "cd ../other && git status && git diff | cat",
    "git --no-pager log -p -1", "git", "git remote show -n origin",
]
# commands plan mode refuses before anything runs
REFUSED = [
    "git diff --ext-diff", "git show --ext-diff", "git log -p --ext-diff", "git -c core.fsmonitor=true status",
    "git -c diff.tc.textconv=cat diff", "git --exec-path=/tmp status", "git --git-dir=../other/.git status",
    "git st", "git remote show origin", "git ls-remote origin", "git fetch", "git status --help",
    "git log -p --output=out.patch", "git grep -O alpha", "git grep --open-files-in-pager=sh alpha",
    "git describe --dirty", "git tag -v v1", "git stash", "git stash -- a.txt", "git config --edit",
    "git difftool", "git submodule foreach true",
]


def test_the_traps_are_armed_and_bypass_runs_the_users_git_as_usual(world):
    """bypassPermissions: git behaves as the user's (and here the attacker's) config says."""
    got = run_agent(world, ["git diff a.txt", "git status", "git diff --no-ext-diff a.txt", "git log -p -1 -- c.md"],
                    "bypassPermissions")
    assert all(ran(r) for r in got.values())
    assert "EXTERNAL" in got["git diff a.txt"]["content"]  # diff.external ran
    assert "+ALPHA2" in got["git diff --no-ext-diff a.txt"]["content"]  # the textconv ran
    left = markers(world)
    for name in ("project-textconv", "project-clean", "project-fsmonitor", "project-extdiff"):
        assert name in left, left


def test_default_mode_with_an_allow_rule_is_not_neutralised(world, tmp_path):
    """A command the user allowed as a command (a rule) is the user's git, not plan mode's."""
    from agent_code.policy import PermissionPolicy, RuleSet
    turns = [[{"type": "tool_use", "id": "d", "name": "bash", "input": {"command": "git diff --no-ext-diff a.txt"}}],
             [{"type": "text", "text": "done"}]]
    script = tmp_path / "allow.jsonl"
    script.write_text("\n".join(json.dumps(t) for t in turns) + "\n")
    events: list[dict] = []
    rules = RuleSet.from_lists(allow=["bash(git diff:*)"])
    policy = PermissionPolicy("default", rules=rules)
    Agent(ScriptedProvider(script), default_tools(), ToolContext(world["project"]), on_event=events.append,
          permissions=policy).run("look")
    out = next(e for e in events if e["type"] == "tool_result")
    assert not out["is_error"] and "+ALPHA2" in out["content"]
    assert "project-textconv" in markers(world)


@pytest.mark.parametrize("command", RUN_NEUTRALISED)
def test_plan_mode_git_runs_no_program_the_repository_names(shared, command):
    assert read_only_command_problem(command) is None, command
    result = run_agent(shared, [command], "plan")[command]
    assert markers(shared) == [], result["content"]
    assert ran(result), result["content"]


@pytest.mark.parametrize("command", REFUSED)
def test_plan_mode_refuses_git_that_writes_reaches_out_or_changes_what_git_runs(shared, command):
    result = run_agent(shared, [command], "plan")[command]
    assert result["is_error"] and result["content"].startswith("Permission denied"), result["content"]
    assert markers(shared) == []


def test_plan_mode_output_is_the_plain_content(shared):
    world = shared
    got = run_agent(world, ["git diff a.txt", "git diff b.bin", "git blame a.txt", "git -C ../other diff c.md"], "plan")
    assert "+alpha2" in got["git diff a.txt"]["content"] and "ALPHA" not in got["git diff a.txt"]["content"]
    assert "+bravo2" in got["git diff b.bin"]["content"] and "DRIVER" not in got["git diff b.bin"]["content"]
    assert "alpha2" in got["git blame a.txt"]["content"]
    assert "+charlie2" in got["git -C ../other diff c.md"]["content"]
    assert markers(world) == []
    # nothing was written either: no textconv cache, no index refresh, no hook
    assert subprocess.run(["git", "notes", "--ref=textconv/tc", "list"], cwd=world["project"],
                          capture_output=True, text=True).stdout == ""


def test_plan_mode_ignores_git_config_from_the_environment(world, monkeypatch):
    """``git -c`` reaches git as GIT_CONFIG_PARAMETERS, which outranks GIT_CONFIG_COUNT; an
    external diff can come from GIT_EXTERNAL_DIFF. Neither survives into a plan-mode command."""
    bin_dir = world["tmp"] / "bin"
    fsmonitor = trap(bin_dir, world["markers"], "env-fsmonitor", "exit 1")
    textconv = trap(bin_dir, world["markers"], "env-textconv", 'cat "$1"')
    monkeypatch.setenv("GIT_CONFIG_PARAMETERS", f"'core.fsmonitor={fsmonitor}' 'diff.tc.textconv={textconv}'")
    monkeypatch.setenv("GIT_CONFIG_COUNT", "1")
    monkeypatch.setenv("GIT_CONFIG_KEY_0", "diff.dc.command")
    monkeypatch.setenv("GIT_CONFIG_VALUE_0", trap(bin_dir, world["markers"], "env-driver", "echo X"))
    monkeypatch.setenv("GIT_EXTERNAL_DIFF", trap(bin_dir, world["markers"], "env-extdiff", "echo X"))
    got = run_agent(world, ["git status", "git diff"], "plan")
    assert all(ran(r) for r in got.values())
    assert markers(world) == []


# refused by the policy; run anyway, straight in the read-only environment, the shim still
# runs none of the repository's programs (a second wall, for a gap in the first)
SECOND_WALL = [
    "git diff --ext-diff", "git log -p --ext-diff -1", "git -c core.fsmonitor={trap} status",
    "git -c diff.tc.textconv={trap} diff", "git --config-env=core.pager=TRAP_PAGER log", "git --exec-path=/tmp status",
    "git st", "git remote show origin", "git ls-remote origin", "git fetch origin", "git tag -v v1",
    "git config --edit", "git grep -O alpha", "git status --help", "git help log", "git -C ../other st",
    "GIT_CONFIG_PARAMETERS=\"'core.fsmonitor={trap}'\" git status", "git stauts",
]


@pytest.mark.parametrize("command", SECOND_WALL)
def test_the_shim_alone_runs_no_program_the_config_names(shared, command, monkeypatch):
    from agent_code.tools.shell import run_command
    monkeypatch.setenv("TRAP_PAGER", shared["trap"])
    output, status = run_command(command.format(trap=shared["trap"]), shared["project"], 60, read_only_env(os.environ))
    assert markers(shared) == [], output


def test_exported_functions_and_shell_options_from_the_environment_do_not_stand_in(world, monkeypatch):
    """An exported bash function named git would bypass the shim; xtrace with a PS4 holding a
    command substitution runs it before every command."""
    marker = world["markers"]
    monkeypatch.setenv("BASH_FUNC_git%%", f"() {{ touch '{marker}/function-git'; }}")
    monkeypatch.setenv("SHELLOPTS", "xtrace")
    monkeypatch.setenv("PS4", f"$(touch '{marker}/ps4')+ ")
    got = run_agent(world, ["git status --short", "ls"], "plan")
    assert all(ran(r) for r in got.values()) and "a.txt" in got["git status --short"]["content"]
    assert markers(world) == []


@pytest.mark.parametrize("entry", [".", "", "bin", "{project}/bin", "{project}/sub/../bin"])
def test_no_path_entry_brings_a_program_from_the_project(world, monkeypatch, entry):
    """`tree` and `git` on PATH from the project (a relative or empty entry, or a bin/ in the
    project that direnv or a venv put on PATH) would be the project's own programs."""
    for where in (world["project"], world["project"] / "bin"):
        where.mkdir(exist_ok=True)
        for name in ("tree", "git"):
            (where / name).write_text(f"#!/bin/sh\ntouch '{world['markers']}/project-{name}'\n")
            (where / name).chmod(0o755)
    entry = entry.format(project=world["project"])
    monkeypatch.setenv("PATH", entry + os.pathsep + os.environ["PATH"] + os.pathsep + entry)
    got = run_agent(world, ["tree", "git status --short"], "plan")
    assert markers(world) == [], got
    assert "a.txt" in got["git status --short"]["content"]


def test_a_git_that_ignores_the_overrides_is_refused(shared, tmp_path):
    """A git older than 2.31 ignores GIT_CONFIG_COUNT: the shim sees it and runs nothing."""
    import shutil
    from agent_code.tools.shell import run_command
    old_git = tmp_path / "old-git"
    old_git.write_text(f"#!/bin/sh\nunset GIT_CONFIG_COUNT\nexec {shutil.which('git')} \"$@\"\n")
    old_git.chmod(0o755)
    env = read_only_env({**os.environ, "AGENT_CODE_REAL_GIT": str(old_git)}, shared["project"])
    output, status = run_command("git status", shared["project"], 60, env)
    assert status == 128 and "too old" in output
    assert markers(shared) == []


def test_a_config_key_that_may_name_an_unknown_program_is_refused(world):
    git(world["project"], "config", "hook.evil.command", str(world["tmp"] / "bin" / "project-textconv"))
    got = run_agent(world, ["git status"], "plan")["git status"]
    assert "hook.evil.command may name a program" in got["content"] and "[exit code: 128]" in got["content"]
    assert markers(world) == []


def test_neutralise_covers_every_program_key_and_refuses_unknown_ones():
    overrides, refusal = neutralise([
        "diff.My.Driver.textconv", "diff.x.command", "diff.external", "filter.f.clean", "filter.f.smudge",
        "filter.f.process", "filter.f.required", "pager.log", "credential.https://h.helper", "gpg.x509.program",
        "protocol.ext.allow", "core.fsmonitor", "credential.helper", "alias.st", "difftool.x.cmd", "remote.o.uploadpack", "user.name",
        "core.filemode", "color.diff.commit", "gpg.program"])
    got = dict(overrides)
    assert refusal is None
    assert got["diff.My.Driver.textconv"] == "cat" and got["diff.x.command"] == "false"
    assert got["diff.external"] == "false" and got["filter.f.clean"] == "" and got["filter.f.process"] == ""
    assert got["filter.f.required"] == "false" and got["pager.log"] == "false" and got["protocol.ext.allow"] == "never"
    assert got["credential.https://h.helper"] == "" and got["gpg.x509.program"] == "false"
    assert got["gpg.program"] == "false"
    assert got["alias.st"] == "" and "user.name" not in got
    assert dict(STATIC_OVERRIDES).items() <= got.items()
    for key in ("hook.pre-commit.command", "foo.bar.cmd", "core.newprogram", "x.y.helper"):
        assert neutralise([key])[1] is not None and key in neutralise([key])[1]


def test_read_only_env_drops_what_names_programs_and_puts_the_shim_first():
    env = read_only_env({"PATH": os.environ["PATH"], "GIT_EXTERNAL_DIFF": "x", "GIT_CONFIG_PARAMETERS": "'a.b=c'",
                         "GIT_CONFIG_KEY_0": "a.b", "RIPGREP_CONFIG_PATH": "/x", "BASH_ENV": "/x", "GIT_SSH_COMMAND": "x"})
    for gone in ("GIT_EXTERNAL_DIFF", "GIT_CONFIG_PARAMETERS", "GIT_CONFIG_KEY_0", "RIPGREP_CONFIG_PATH", "BASH_ENV",
                 "GIT_SSH_COMMAND"):
        assert gone not in env
    shim = env["GIT_EXEC_PATH"]
    assert env["PATH"].split(os.pathsep)[0] == shim and (Path(shim) / "git").is_file()
    assert os.listdir(shim) == ["git"]  # no other git program is reachable from a git git starts
    assert env["GIT_OPTIONAL_LOCKS"] == "0" and env["GIT_ALLOW_PROTOCOL"] == "none"
