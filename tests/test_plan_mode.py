"""Plan mode: read tools and read-only commands run, writes are refused, and exit_plan_mode
hands the plan over (headless: it is the answer; interactive: on_plan approves or not)."""

from __future__ import annotations

import json
import subprocess
from pathlib import Path

import pytest
from conftest import run_cli

from agent_code.agent import Agent
from agent_code.agent.agent_tools import install_agent_tools
from agent_code.agent.prompt import system_prompt
from agent_code.policy.permissions import (
    PermissionPolicy,
    effective_kind,
    is_read_only_command,
    read_only_command_problem,
)
from agent_code.providers.scripted import ScriptedProvider
from agent_code.tools import ToolContext, default_tools

READ_ONLY = [
    "ls", "ls -la src", "cat a.py", "head -n 5 a.py", "tail -3 a.py", "wc -l a.py", "pwd",
    "git diff", "git diff --stat HEAD -- a.py", "git status --short", "git log --oneline -5",
    "git show HEAD:a.py", "git branch", "git branch -a", "git -C sub status", "git stash list",
    "grep -rn 'def f' .", "grep -rn foo . | sort | uniq -c", "git log --oneline | head -5",
    "find . -name '*.py'", "cd sub && ls", "ls 2>/dev/null", "git diff 2>&1 | head", "cat < a.py",
    "rg -n 'a;b' src",  # a quoted operator is an argument, not an operator
    "git branch --list 'feat*'", "git branch -vv", "git tag", "git tag -l 'v1*'", "git tag -n5 -l",
    "git stash show -p stash@{0}", "git remote", "git remote -v", "git remote get-url origin",
    "git remote show -n origin", "git reflog", "git reflog show HEAD", "git reflog -n5 expire",
    "git reflog exists HEAD", "git config --get user.name", "git config -l", "git config --global --list",
    "git config --get-regexp '^alias'", "git log --oneline --no-ext-diff", "git diff --no-ext-diff",
    "git show --textconv HEAD:a.py", "git grep -n foo", "git -C sub --no-pager log -1", "date -u",
    "sort -n a.txt", "sort --numeric-sort a.txt", "git diff -- --output=x",  # after --: a path
]
WRITES = [
    ("rm -rf /", "'rm' is not a read-only command"),
    ("touch x", "'touch'"),
    ("ls > out", "operator '>'"),
    ("ls >> out", "operator '>>'"),
    ("cat a.py | tee b.py", "'tee'"),
    ("ls | xargs rm", "'xargs'"),
    ("ls; rm x", "'rm'"),
    ("ls && touch x", "'touch'"),
    ("ls || mv a b", "'mv'"),
    ("ls a#; rm x", "'rm'"),          # '#' inside a word is no comment to bash
    ("ls &", "operator '&'"),
    ("(rm x)", "operator '('"),
    ("echo $(rm x)", "substitution"),
    ("echo `rm x`", "substitution"),
    ("ls\nrm x", "multi-line"),
    ("X=1 ls", "variable assignment"),
    ("find . -name '*.pyc' -delete", "find -delete"),
    ("find . -exec rm {} ;", "find -exec"),
    ("sort -o out a.txt", "sort -o"),
    ("sort -rno out a.txt", "sort -rno"),
    ("git commit -am x", "git commit"),
    ("git checkout -- .", "git checkout"),
    ("git push", "git push"),
    ("git branch new-branch", "creates or changes"),
    ("git branch -D old", "git branch -D"),
    ("git stash", "git stash (push)"),
    ("git -c core.pager=rm log", "git option -c"),
    ("git diff --output=x.patch", "--output=x.patch"),
    ("git config user.name x", "git config"),
    ("sed -i s/a/b/ a.py", "'sed'"),
    ("python -c 'open(\"x\",\"w\")'", "'python'"),
    ("bash -c 'ls'", "'bash'"),
    ("tree -o out", "tree -o"),
    ("rg --pre ./evil x", "rg --pre"),
    ("cat 'unterminated", "cannot parse"),
    # git: writing, editing, gpg or remote-reaching spellings of allow-listed subcommands
    ("git branch -d old", "git branch -d"),
    ("git branch --delete old", "git branch --delete"),
    ("git branch --del old", "git branch --del"),          # parse-options abbreviation
    ("git branch --list -D old", "git branch -D"),
    ("git branch -vD old", "git branch -vD"),              # bundled
    ("git branch -m a b", "git branch -m"),
    ("git branch --set-upstream-to=origin/x", "--set-upstream-to"),
    ("git branch --unset-up", "--unset-up"),
    ("git branch --edit-description", "--edit-description"),
    ("git branch -t x origin/x", "git branch -t"),
    ("git tag v1", "creates or changes"),
    ("git tag -d v1", "git tag -d"),
    ("git tag -l -d v1", "git tag -d"),
    ("git tag --delete v1", "git tag --delete"),
    ("git tag -a -m x v2", "git tag -a"),
    ("git tag -v v1", "git tag -v"),                       # runs gpg
    ("git tag --verify v1", "git tag --verify"),
    ("git stash push", "only git stash list/show"),
    ("git stash pop", "only git stash list/show"),
    ("git stash drop", "only git stash list/show"),
    ("git stash clear", "only git stash list/show"),
    ("git stash -- list", "only git stash list/show"),     # a push of the path 'list'
    ("git stash -m msg show", "only git stash list/show"),  # a push too
    ("git stash -q list", "only git stash list/show"),
    ("git stash", "git stash (push)"),
    ("git config --add x.y z", "git config --add"),
    ("git config --get x.y --add", "git config --add"),
    ("git config --unset x.y", "git config --unset"),
    ("git config --unset-all x.y", "git config --unset"),
    ("git config --replace-all x.y z", "git config --replace-all"),
    ("git config --global x.y z", "only git config --get/--list"),
    ("git config x.y z", "only git config --get/--list"),
    ("git config --rename-section a b", "--rename-section"),
    ("git config --remove-section a", "--remove-section"),
    ("git config -e", "git config -e"),
    ("git config --list --edit", "git config --edit"),
    ("git config --ad x.y z", "git config --ad"),          # abbreviation of --add
    ("git remote add evil https://x", "only git remote"),
    ("git remote remove origin", "only git remote"),
    ("git remote rm origin", "only git remote"),
    ("git remote update", "only git remote"),
    ("git remote prune origin", "only git remote"),
    ("git remote set-url origin x", "only git remote"),
    ("git remote -v add evil x", "only git remote"),
    ("git remote show origin", "contacts the remote"),
    ("git remote -v show origin", "contacts the remote"),
    ("git reflog expire --all", "only git reflog"),
    ("git reflog delete HEAD@{1}", "only git reflog"),
    ("git describe --dirty", "git describe --dirty"),
    ("git status --help", "--help"),
    ("git log --he", "--he"),                              # abbreviation of --help
    ("git diff --ext-diff", "--ext-diff"),
    ("git diff --ext-d", "--ext-d"),
    ("git log -p --output=/tmp/x", "--output"),
    ("git log -p --outp=/tmp/x", "--outp"),
    ("git log -p --output /tmp/x", "--output"),
    ("git grep -O foo", "git -O"),
    ("git grep -Ovim foo", "git -Ovim"),
    ("git grep -nO/tmp/evil foo", "git -nO/tmp/evil"),
    ("git grep --open-files-in-pager=x foo", "--open-files-in-pager"),
    ("git grep --open-files foo", "--open-files"),
    ("git -c core.fsmonitor=./evil status", "git option -c"),
    ("git --exec-path=/tmp status", "git option --exec-path"),
    ("git --git-dir=/tmp/evil/.git status", "git option --git-dir"),
    ("git --work-tree=/tmp status", "git option --work-tree"),
    ("git --config-env=core.pager=X log", "git option --config-env"),
    ("git -C sub -c core.pager=x log", "git option -c"),
    ("git -p log", "git option -p"),
    ("git st", "git st can change"),                       # an alias: never run
    ("git difftool", "git difftool can change"),
    ("git ls-remote origin", "git ls-remote can change"),
    ("git fetch", "git fetch can change"),
    ("git submodule status", "git submodule can change"),
    ("git help log", "git help can change"),
    ("sort --out=x a.txt", "sort --out=x"),                # GNU getopt abbreviation
    ("sort --compress-prog=sh a.txt", "--compress-prog"),
    ("date --set=2020-01-01", "date --set"),
    ("date --se 2020-01-01", "date --se"),
    ("file --comp magic", "file --comp"),
    ("rg --pre=./evil x", "rg --pre"),
    ("rg --hostname-bin=./evil x", "rg --hostname-bin"),
    ("cat < /dev/tcp/example.com/80", "network connection"),
    ("git status < /dev/udp/example.com/53", "network connection"),
    ("", "empty"),
]


@pytest.mark.parametrize("command", READ_ONLY)
def test_read_only_commands_are_recognized(command):
    assert read_only_command_problem(command) is None
    assert is_read_only_command(command)


@pytest.mark.parametrize("command, why", WRITES)
def test_commands_that_write_or_run_programs_are_not(command, why):
    problem = read_only_command_problem(command)
    assert problem is not None and why in problem, problem
    assert not is_read_only_command(command)


def test_only_plan_mode_treats_read_only_commands_as_reads():
    bash = default_tools().get("bash")
    assert effective_kind("plan", bash, {"command": "ls"}) == "read"
    assert effective_kind("plan", bash, {"command": "rm x"}) == "execute"
    assert effective_kind("default", bash, {"command": "ls"}) == "execute"
    assert effective_kind("plan", default_tools().get("write_file"), {"command": "ls"}) == "edit"
    policy = PermissionPolicy.of("plan")
    assert policy.check(bash, {"command": "git diff"}).allowed
    refused = policy.check(bash, {"command": "ls > listing.txt"})
    assert not refused.allowed
    assert "plan mode is read-only" in refused.message and "operator '>'" in refused.message


# --- the loop in plan mode --------------------------------------------------------------

def use(id_, name, **input_):
    return {"type": "tool_use", "id": id_, "name": name, "input": input_}


def text(t):
    return {"type": "text", "text": t}


def script(tmp_path: Path, *turns) -> ScriptedProvider:
    path = tmp_path / "script.jsonl"
    path.write_text("\n".join(json.dumps(t) for t in turns) + "\n")
    return ScriptedProvider(path)


@pytest.fixture
def repo(tmp_path):
    project = tmp_path / "project"
    project.mkdir()
    (project / "a.py").write_text("x = 1\n")
    git = ["git", "-c", "user.email=t@example.com", "-c", "user.name=t"]
    subprocess.run(git + ["init", "-q"], cwd=project, check=True)
    subprocess.run(git + ["add", "a.py"], cwd=project, check=True)
    subprocess.run(git + ["commit", "-qm", "init"], cwd=project, check=True)
    (project / "a.py").write_text("x = 2\n")  # an uncommitted change for git diff to show
    return project


def test_plan_mode_allows_ls_cat_git_diff_and_refuses_writes(tmp_path, repo):
    provider = script(tmp_path,
                      [use("l", "bash", command="ls"), use("c", "bash", command="cat a.py"),
                       use("d", "bash", command="git diff")],
                      [use("t", "bash", command="touch made.txt"), use("r", "bash", command="ls > listing.txt"),
                       use("w", "write_file", path="new.py", content="y = 1\n")],
                      [use("ra", "read_file", path="a.py")],
                      [use("e", "edit_file", path="a.py", old_string="x = 2", new_string="x = 3")],
                      [text("Plan: change x.")])
    events: list[dict] = []
    result = Agent(provider, default_tools(), ToolContext(repo), on_event=events.append,
                   permissions="plan").run("look around")
    out = {e["tool_use_id"]: e for e in events if e["type"] == "tool_result"}
    assert result.status == "success"
    assert not out["l"]["is_error"] and "a.py" in out["l"]["content"]
    assert not out["c"]["is_error"] and out["c"]["content"].startswith("x = 2")
    assert not out["d"]["is_error"] and "-x = 1" in out["d"]["content"] and "+x = 2" in out["d"]["content"]
    for refused in ("t", "r", "w", "e"):
        assert out[refused]["is_error"] and out[refused]["content"].startswith("Permission denied"), refused
    assert "'touch' is not a read-only command" in out["t"]["content"]
    assert not (repo / "made.txt").exists() and not (repo / "listing.txt").exists()
    assert not (repo / "new.py").exists() and (repo / "a.py").read_text() == "x = 2\n"
    assert [d["tool_use_id"] for d in result.permission_denials] == ["t", "r", "w", "e"]


def plan_agent(tmp_path, provider, mode="plan", on_plan=None):
    events: list[dict] = []
    agent = Agent(provider, default_tools(), ToolContext(tmp_path), on_event=events.append, permissions=mode,
                  on_plan=on_plan)
    install_agent_tools(agent)
    return agent, events


PLAN = "1. Change x = 1 to x = 2 in a.py.\n2. Run the tests."


def test_headless_exit_plan_mode_ends_the_run_with_the_plan(tmp_path):
    provider = script(tmp_path, [use("p", "exit_plan_mode", plan=PLAN)], [text("never requested")])
    agent, events = plan_agent(tmp_path, provider)
    result = agent.run("plan it")
    assert result.status == "success" and result.final == PLAN and result.steps == 1
    assert provider.position == 1  # the run ended at the plan
    assert {"type": "plan", "plan": PLAN} in events
    assert events[-1]["type"] == "result" and events[-1]["result"] == PLAN
    # the history stays valid: the exit_plan_mode call has its result
    assert agent.messages[-1]["content"][0]["tool_use_id"] == "p"


def test_approved_plan_switches_mode_and_the_work_continues(tmp_path):
    (tmp_path / "a.py").write_text("x = 1\n")
    provider = script(tmp_path,
                      [use("r", "read_file", path="a.py")],
                      [use("p", "exit_plan_mode", plan=PLAN)],
                      [use("e", "edit_file", path="a.py", old_string="x = 1", new_string="x = 2")],
                      [text("done")])
    seen = []

    def approve(plan):
        seen.append(plan)
        agent.set_permission_mode("acceptEdits")
        return True

    agent, events = plan_agent(tmp_path, provider, on_plan=approve)
    agent.system_for_mode = lambda mode: system_prompt(tmp_path, mode)
    result = agent.run("fix x")
    out = {e["tool_use_id"]: e for e in events if e["type"] == "tool_result"}
    assert seen == [PLAN] and result.final == "done"
    assert "approved" in out["p"]["content"] and "acceptEdits" in out["p"]["content"]
    assert not out["e"]["is_error"] and (tmp_path / "a.py").read_text() == "x = 2\n"
    assert "Permission mode: acceptEdits." in agent.system


def test_rejected_plan_with_feedback_goes_back_to_the_model(tmp_path):
    provider = script(tmp_path, [use("p1", "exit_plan_mode", plan=PLAN)],
                      [use("p2", "exit_plan_mode", plan=PLAN + "\n3. Also update the docs.")],
                      [text("unreachable")])
    verdicts = iter(["also update the docs", False])
    agent, events = plan_agent(tmp_path, provider, on_plan=lambda plan: next(verdicts))
    result = agent.run("plan it")
    out = {e["tool_use_id"]: e for e in events if e["type"] == "tool_result"}
    assert "also update the docs" in out["p1"]["content"] and "Stay in plan mode" in out["p1"]["content"]
    assert result.final == "The plan was not approved." and provider.position == 2
    assert agent.permissions.mode.value == "plan"


def test_exit_plan_mode_outside_plan_mode_is_an_error_and_does_not_end_the_run(tmp_path):
    provider = script(tmp_path, [use("p", "exit_plan_mode", plan=PLAN)], [text("carried on")])
    agent, events = plan_agent(tmp_path, provider, mode="acceptEdits")
    result = agent.run("go")
    out = next(e for e in events if e["type"] == "tool_result")
    assert out["is_error"] and "not in plan mode" in out["content"]
    assert result.final == "carried on"


def test_cli_plan_mode_headless_prints_the_plan(tmp_path):
    project = tmp_path / "project"
    project.mkdir()
    (project / "a.py").write_text("x = 1\n")
    turns = [[use("l", "bash", command="ls")], [use("w", "bash", command="rm a.py")],
             [use("p", "exit_plan_mode", plan=PLAN)], [text("never")]]
    (tmp_path / "s.jsonl").write_text("\n".join(json.dumps(t) for t in turns) + "\n")
    proc = run_cli("--provider", "scripted", "--script", str(tmp_path / "s.jsonl"), "-C", str(project),
                   "--permission-mode", "plan", "--output-format", "stream-json", "--no-session-persistence",
                   "make a plan")
    assert proc.returncode == 0, proc.stderr
    events = [json.loads(line) for line in proc.stdout.splitlines()]
    assert {"task", "todo_write", "exit_plan_mode"} <= set(events[0]["tools"])
    results = [e for e in events if e["type"] == "tool_result"]
    assert not results[0]["is_error"] and "a.py" in results[0]["content"]
    assert results[1]["is_error"] and (project / "a.py").exists()
    assert events[-1]["type"] == "result" and events[-1]["result"] == PLAN
