"""The task layer: loading tasks, preparing workspaces in a real local sandbox, grading diffs."""

from __future__ import annotations

import asyncio
import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from agent_code.sandbox import create_sandbox
from agent_code.sandbox.local import SYSTEM_PATH
from agent_code.tasks import (Task, TaskError, bundled_tasks_path, collect_diff, grade, load_tasks,
                              parse_test_results, prepare_workspace, snapshot)
from agent_code.tasks.grading import build_test_command, matches_any

# The grader runs `python -m pytest` from PATH: this interpreter's, whose pytest is installed.
# (Plugin autoload off: it only saves each pytest run a third of a second.)
ENV = {"PATH": f"{Path(sys.executable).parent}{os.pathsep}{SYSTEM_PATH}", "PYTEST_DISABLE_PLUGIN_AUTOLOAD": "1"}
PYTEST_IDS = "python -m pytest -q -rA -p no:cacheprovider"
GIT_ENV = {**os.environ, "GIT_AUTHOR_NAME": "t", "GIT_AUTHOR_EMAIL": "t@t", "GIT_COMMITTER_NAME": "t",
           "GIT_COMMITTER_EMAIL": "t@t", "GIT_CONFIG_GLOBAL": "/dev/null", "GIT_CONFIG_NOSYSTEM": "1"}


def make_box():
    """A fresh local sandbox whose agent user can run this interpreter (it may live under /root)."""
    box = create_sandbox("local")
    box.provide(sys.base_prefix)
    box.provide(sys.prefix)
    return box


def run(coro):
    return asyncio.run(coro)


def git(cwd: Path, *args: str) -> str:
    return subprocess.run(["git", *args], cwd=cwd, env=GIT_ENV, check=True, capture_output=True,
                          text=True).stdout.strip()


def write_tree(root: Path, files: dict[str, str]) -> Path:
    for name, text in files.items():
        (root / name).parent.mkdir(parents=True, exist_ok=True)
        (root / name).write_text(text)
    return root


CALC = {
    "calc.py": "def add(a, b):\n    return a - b\n\n\ndef mul(a, b):\n    return a * b\n",
    "tests/test_calc.py": ("from calc import add, mul\n\n\ndef test_add():\n    assert add(2, 3) == 5\n\n\n"
                           "def test_add_zero():\n    assert add(0, 0) == 0\n\n\n"
                           "def test_mul():\n    assert mul(2, 3) == 6\n"),
}
FIX = "def add(a, b):\n    return a + b\n"


def calc_task(tmp_path: Path, **fields) -> Task:
    repo = write_tree(tmp_path / "calc", CALC)
    data = {"id": "calc", "repo": str(repo), "problem_statement": "add(2, 3) returns -1",
            "test_cmd": PYTEST_IDS, "FAIL_TO_PASS": ["tests/test_calc.py::test_add"],
            "PASS_TO_PASS": ["tests/test_calc.py::test_add_zero", "tests/test_calc.py::test_mul"], **fields}
    return Task.from_dict(data)


async def agent_diff(task: Task, edits: dict[str, str | None]) -> str:
    """The diff of an 'agent' that writes (None: deletes) files in a prepared workspace."""
    async with make_box() as box:
        workspace = await prepare_workspace(box, task)
        for path, text in edits.items():
            if text is None:
                await box.exec(["rm", "-f", path], user="agent")
            else:
                await box.write_file(path, text, user="agent")
        return await collect_diff(box, workspace.baseline)


def fixed_calc() -> dict[str, str | None]:
    return {"calc.py": CALC["calc.py"].replace("a - b", "a + b")}


# --- loading ----------------------------------------------------------------------------------

def test_load_tasks_resolves_paths_and_reads_every_field(tmp_path):
    (tmp_path / "repos" / "a").mkdir(parents=True)
    lines = [
        "# a comment, then a blank line", "",
        json.dumps({"id": "a", "repo": "repos/a", "problem_statement": "p", "eval_cmd": "true",
                    "setup": ["echo hi"], "timeout": 30, "metadata": {"k": 1}, "test_files": ["spec/**"]}),
        json.dumps({"id": "b", "repo": "https://example.com/x.git", "base_commit": "abc123",
                    "problem_statement": "p", "test_cmd": "pytest", "FAIL_TO_PASS": '["t::a"]',
                    "PASS_TO_PASS": ["t::b"], "test_patch": "diff --git ..."}),
    ]
    (tmp_path / "tasks.jsonl").write_text("\n".join(lines) + "\n")
    a, b = load_tasks(tmp_path / "tasks.jsonl")
    assert a.repo == str((tmp_path / "repos" / "a").resolve()) and not a.is_remote
    assert (a.setup, a.timeout, a.metadata, a.eval_cmd) == (("echo hi",), 30.0, {"k": 1}, "true")
    assert a.test_files == ("spec/**",)
    assert a.source.endswith("tasks.jsonl:3")
    assert b.is_remote and b.repo == "https://example.com/x.git" and b.base_commit == "abc123"
    assert b.fail_to_pass == ("t::a",) and b.tests == ("t::a", "t::b") and b.test_patch == "diff --git ..."
    assert "**/test_*.py" in a.__class__(id="x", repo="r", problem_statement="p").test_files


@pytest.mark.parametrize("line, message", [
    ("{not json", "invalid JSON"),
    ('{"id": "x", "repo": "r", "eval_cmd": "true"}', "missing required field 'problem_statement'"),
    ('{"repo": "r", "problem_statement": "p", "eval_cmd": "true"}', "missing required field 'id'"),
    ('{"id": "x", "repo": "r", "problem_statement": "p", "eval_cmd": "true", "hints": ""}', "unknown field(s) hints"),
    ('{"id": "x", "repo": "r", "problem_statement": "p"}', "no grader"),
    ('{"id": "x", "repo": "r", "problem_statement": "p", "eval_cmd": "a", "test_cmd": "b", "FAIL_TO_PASS": ["t"]}',
     "not both"),
    ('{"id": "x", "repo": "r", "problem_statement": "p", "test_cmd": "pytest"}', "at least one test id"),
    ('{"id": "x", "repo": "r", "problem_statement": "p", "eval_cmd": "a", "FAIL_TO_PASS": ["t"]}', "need 'test_cmd'"),
    ('{"id": "x", "repo": "nowhere", "problem_statement": "p", "eval_cmd": "true"}', "is not a directory"),
    ('{"id": "x", "repo": "r", "problem_statement": "p", "eval_cmd": "true", "setup": "make"}', "must be a list"),
    ('{"id": "x", "repo": "r", "problem_statement": "p", "eval_cmd": "true", "timeout": -1}', "positive number"),
    ('[1, 2]', "must be a JSON object"),
    ('{"id": "x", "repo": "r", "problem_statement": " ", "eval_cmd": "true"}', "'problem_statement' must be"),
])
def test_load_tasks_errors_name_the_line(tmp_path, line, message):
    (tmp_path / "r").mkdir()
    good = json.dumps({"id": "ok", "repo": "r", "problem_statement": "p", "eval_cmd": "true"})
    (tmp_path / "t.jsonl").write_text(good + "\n" + line + "\n")
    with pytest.raises(TaskError) as info:
        load_tasks(tmp_path / "t.jsonl")
    assert "t.jsonl:2: " in str(info.value) and message in str(info.value)


def test_load_tasks_rejects_duplicate_ids(tmp_path):
    (tmp_path / "r").mkdir()
    line = json.dumps({"id": "same", "repo": "r", "problem_statement": "p", "eval_cmd": "true"})
    (tmp_path / "t.jsonl").write_text(f"{line}\n\n{line}\n")
    with pytest.raises(TaskError, match=r"t\.jsonl:3: duplicate task id 'same' \(first at .*t\.jsonl:1\)"):
        load_tasks(tmp_path / "t.jsonl")


# --- pieces of grading ------------------------------------------------------------------------

def test_test_file_globs():
    globs = ("**/tests/**", "**/test_*.py", "**/conftest.py", "docs/*.md")
    for path in ("tests/a.py", "pkg/tests/sub/b.py", "test_x.py", "pkg/test_y.py", "conftest.py", "docs/a.md"):
        assert matches_any(path, globs), path
    for path in ("src/app.py", "testing.py", "pkg/contest.py", "docs/sub/a.md", "tests_helper.py", "mytest_x.py"):
        assert not matches_any(path, globs), path
    assert matches_any("spec/deep/x.rb", ["spec"])          # a directory matches what is under it


def test_parse_test_results_reads_summary_and_verbose_lines():
    output = "\n".join([
        "tests/t.py::test_v PASSED                     [ 50%]",
        "tests/t.py::test_p[a-1] PASSED",
        "PASSED tests/t.py::test_s",
        "FAILED tests/t.py::test_f - assert 1 == 2",
        "PASSED tests/t.py::test_teardown",
        "ERROR tests/t.py::test_teardown - RuntimeError",
        "XFAIL tests/t.py::test_xf - known",
        "SKIPPED [1] tests/t.py:9: no network",
        "1 failed, 3 passed in 0.1s",
    ])
    results = parse_test_results(output)
    assert results["tests/t.py::test_v"] == {"PASSED"} and results["tests/t.py::test_p[a-1]"] == {"PASSED"}
    assert results["tests/t.py::test_f"] == {"FAILED"} and results["tests/t.py::test_teardown"] == {"PASSED", "ERROR"}
    assert results["tests/t.py::test_xf"] == {"XFAIL"} and len(results) == 6
    assert build_test_command("pytest -rA", ["a::b c", "d"]) == "pytest -rA 'a::b c' d"
    assert build_test_command("pytest {tests} -x", ["t"]) == "pytest t -x"


# --- workspaces -------------------------------------------------------------------------------

def test_workspace_from_plain_directory(tmp_path):
    repo = write_tree(tmp_path / "plain", {**CALC, "pkg/__pycache__/junk.pyc": "x", "data/notes.txt": "n\n"})
    task = Task.from_dict({"id": "t", "repo": str(repo), "problem_statement": "Fix add.\n", "eval_cmd": "true",
                           "setup": ["echo built > build.txt"]})

    async def scenario():
        async with make_box() as box:
            ws = await prepare_workspace(box, task)
            files = (await box.exec("git ls-files", user="agent")).stdout.split()
            log = (await box.exec("git log --format=%s", user="agent")).stdout.split("\n")
            problem = (await box.read_file(ws.problem_path)).decode()
            writable = await box.exec("echo more >> calc.py && touch new.py", user="agent")
            return ws, files, log, problem, writable

    ws, files, log, problem, writable = run(scenario())
    assert sorted(files) == ["build.txt", "calc.py", "data/notes.txt", "tests/test_calc.py"]  # setup folded in
    assert log == ["baseline", ""]
    assert problem == "Fix add.\n" and ws.problem_path.endswith("/PROBLEM.md")
    assert writable.ok, writable.output()

    async def baseline_again():
        async with make_box() as box:
            return (await prepare_workspace(box, task)).baseline
    assert run(baseline_again()) == ws.baseline          # fixed identity and date: reproducible


def test_workspace_from_git_repo_at_an_older_commit(tmp_path):
    repo = write_tree(tmp_path / "gitrepo", CALC)
    git(repo, "init", "-q", "-b", "main")
    git(repo, "add", "-A")
    git(repo, "commit", "-q", "-m", "first")
    base = git(repo, "rev-parse", "HEAD")
    write_tree(repo, {"calc.py": FIX, "SOLUTION.md": "the fix\n"})
    git(repo, "add", "-A")
    git(repo, "commit", "-q", "-m", "the fix")
    fix_sha = git(repo, "rev-parse", "HEAD")
    (repo / "calc.py").write_text("uncommitted edit\n")

    async def look(task: Task):
        async with make_box() as box:
            await prepare_workspace(box, task)
            script = f"cat calc.py; ls; git log --oneline | wc -l; git cat-file -t {fix_sha} 2>&1 || echo absent"
            return (await box.exec(script, user="agent")).stdout

    for source in (str(repo), f"file://{repo}"):        # a local repo, and a git URL (cloned once)
        task = Task.from_dict({"id": "t", "repo": source, "base_commit": base[:10], "problem_statement": "p",
                               "eval_cmd": "true"})
        out = run(look(task))
        assert "return a - b" in out and "SOLUTION.md" not in out and "uncommitted" not in out
        assert "\n1\n" in out and out.rstrip().endswith("absent")
        assert snapshot(task) == snapshot(task)         # cached per process

    missing = Task.from_dict({"id": "t", "repo": str(repo), "base_commit": "0" * 40, "problem_statement": "p",
                              "eval_cmd": "true"})
    with pytest.raises(TaskError, match="not found"):
        snapshot(missing)
    plain = Task.from_dict({"id": "t", "repo": str(write_tree(tmp_path / "p", {"a": "b"})), "base_commit": "abc",
                            "problem_statement": "p", "eval_cmd": "true"})
    with pytest.raises(TaskError, match="not a git repository"):
        snapshot(plain)


def test_failing_setup_names_the_command_and_its_output(tmp_path):
    task = calc_task(tmp_path, setup=["echo ok", "echo 'no such tool' >&2; exit 3"])

    async def scenario():
        async with make_box() as box:
            await prepare_workspace(box, task)

    with pytest.raises(TaskError) as info:
        run(scenario())
    assert "setup command of task 'calc' failed (exit 3)" in str(info.value)
    assert "exit 3" in str(info.value) and "no such tool" in str(info.value)


def test_collect_diff_has_new_deleted_and_binary_files(tmp_path):
    task = calc_task(tmp_path)

    async def scenario():
        async with make_box() as box:
            ws = await prepare_workspace(box, task)
            empty = await collect_diff(box)
            await box.write_file("calc.py", FIX, user="agent")
            await box.write_file("pkg/new_module.py", "X = 1\n", user="agent")
            await box.write_file("logo.bin", bytes(range(256)), user="agent")
            await box.exec("rm tests/test_calc.py && mkdir -p __pycache__ && touch __pycache__/c.pyc", user="agent")
            await box.exec("git commit -qam 'agent commits' || true", user="agent")  # history can't hide changes
            return empty, await collect_diff(box, ws.baseline)

    empty, diff = run(scenario())
    assert empty == ""
    assert "+++ b/pkg/new_module.py" in diff and "+X = 1" in diff
    assert "deleted file mode" in diff and "GIT binary patch" in diff and "+    return a + b" in diff
    assert "__pycache__" not in diff


# --- grading ----------------------------------------------------------------------------------

def test_grading_rewards_the_fix_not_edited_tests(tmp_path):
    task = calc_task(tmp_path)
    cheat_test = CALC["tests/test_calc.py"].replace("== 5", "== -1")
    cheat_conftest = "import calc\ncalc.add = lambda a, b: a + b\n"

    async def scenario():
        fix, edit_tests, add_conftest = await asyncio.gather(
            agent_diff(task, fixed_calc()),
            agent_diff(task, {"tests/test_calc.py": cheat_test}),
            agent_diff(task, {"conftest.py": cheat_conftest}))
        return await asyncio.gather(grade(task, fix, make_box, env=ENV), grade(task, edit_tests, make_box, env=ENV),
                                    grade(task, add_conftest, make_box, env=ENV), grade(task, "", make_box, env=ENV))

    fixed, edited, conftest, empty = run(scenario())
    assert (fixed.reward, fixed.applied_cleanly, fixed.error) == (1.0, True, None), fixed.output
    assert fixed.passed == list(task.tests) and fixed.failed == []
    for cheat in (edited, conftest, empty):
        assert cheat.reward == 0.0 and cheat.applied_cleanly and cheat.failed == ["tests/test_calc.py::test_add"]
    assert "PASSED tests/test_calc.py::test_mul" in empty.output and empty.duration > 0


def test_grading_a_diff_that_does_not_apply_and_partial_rewards(tmp_path):
    task = calc_task(tmp_path)
    stale = ("--- a/calc.py\n+++ b/calc.py\n@@ -1,2 +1,2 @@\n def add(a, b):\n-    return a * b\n"
             "+    return a + b\n")
    breaks_mul = {"calc.py": FIX + "\n\ndef mul(a, b):\n    return 0\n"}   # fixes add, breaks mul

    async def scenario():
        half = await agent_diff(task, breaks_mul)
        return await asyncio.gather(grade(task, stale, make_box, env=ENV),
                                    grade(task, half, make_box, env=ENV, partial=True),
                                    grade(task, half, make_box, env=ENV))

    stale_grade, partial, strict = run(scenario())
    assert not stale_grade.applied_cleanly and stale_grade.reward == 0.0 and "does not apply" in stale_grade.error
    assert "calc.py" in stale_grade.output
    # test_add and test_add_zero pass, test_mul fails: 2 of 3
    assert partial.reward == pytest.approx(2 / 3) and partial.failed == ["tests/test_calc.py::test_mul"]
    assert strict.reward == 0.0 and strict.applied_cleanly


def test_hidden_tests_from_test_patch_are_applied_only_when_grading(tmp_path):
    test_patch = ("diff --git a/tests/test_hidden.py b/tests/test_hidden.py\nnew file mode 100644\n"
                  "--- /dev/null\n+++ b/tests/test_hidden.py\n@@ -0,0 +1,5 @@\n+from calc import add\n+\n+\n"
                  "+def test_negative():\n+    assert add(-2, -3) == -5\n")
    task = calc_task(tmp_path, test_patch=test_patch, FAIL_TO_PASS=["tests/test_hidden.py::test_negative"],
                     PASS_TO_PASS=["tests/test_calc.py::test_mul"])

    async def scenario():
        async with make_box() as box:
            await prepare_workspace(box, task)
            visible = (await box.exec("ls tests", user="agent")).stdout.split()
        fix = await agent_diff(task, fixed_calc())
        return visible, *await asyncio.gather(grade(task, fix, make_box, env=ENV), grade(task, "", make_box, env=ENV))

    visible, fixed, unfixed = run(scenario())
    assert visible == ["test_calc.py"]
    assert fixed.reward == 1.0 and "PASSED tests/test_hidden.py::test_negative" in fixed.output
    assert unfixed.reward == 0.0 and unfixed.failed == ["tests/test_hidden.py::test_negative"]


def test_eval_cmd_grader_and_its_timeout(tmp_path):
    task = calc_task(tmp_path, test_cmd=None, FAIL_TO_PASS=None, PASS_TO_PASS=None,
                     eval_cmd="python -m pytest -q -p no:cacheprovider tests")
    slow = calc_task(tmp_path / "slow", test_cmd=None, FAIL_TO_PASS=None, PASS_TO_PASS=None, eval_cmd="sleep 30")

    async def scenario():
        fix, no_tests = await asyncio.gather(agent_diff(task, fixed_calc()),
                                             agent_diff(task, {"tests/test_calc.py": None}))
        return await asyncio.gather(grade(task, fix, make_box, env=ENV), grade(task, "", make_box, env=ENV),
                                    grade(task, no_tests, make_box, env=ENV),
                                    grade(slow, fix, make_box, env=ENV, timeout=1))

    fixed, unfixed, deleted_tests, timed_out = run(scenario())
    assert deleted_tests.reward == 0.0 and "1 failed" in deleted_tests.output    # the deleted test is back
    assert (fixed.reward, fixed.passed, fixed.error) == (1.0, [], None) and "3 passed" in fixed.output
    assert unfixed.reward == 0.0 and "1 failed" in unfixed.output
    assert timed_out.reward == 0.0 and "timed out" in timed_out.error and timed_out.duration < 15


# --- the bundled tasks ------------------------------------------------------------------------

# The reference fixes live here, not in the package: the agent's sandbox gets the package's repos.
REFERENCE_FIXES = {
    "thermo-fahrenheit": ("thermo.py", "(fahrenheit - FREEZING_F) * 9 / 5", "(fahrenheit - FREEZING_F) * 5 / 9"),
    "pager-last-page": ("pager.py", "return total // per_page", "return -(-total // per_page)"),
    "slugs-lowercase": ("slugs.py", 'return "-".join(words)', 'return "-".join(words).lower()'),
    "wordcount-whitespace": ("wordcount.py", 'return text.split(" ")', "return text.split()"),
}


def test_bundled_tasks_fail_unfixed_and_pass_with_their_reference_fix():
    tasks = load_tasks(bundled_tasks_path())
    assert sorted(t.id for t in tasks) == sorted(REFERENCE_FIXES)
    assert {bool(t.eval_cmd) for t in tasks} == {True, False}          # both kinds of grader
    for task in tasks:
        assert not (Path(task.repo) / ".git").exists() and len(task.problem_statement) > 100

    async def check(task: Task):
        path, old, new = REFERENCE_FIXES[task.id]
        source = (Path(task.repo) / path).read_text()
        assert source.count(old) == 1 and len(source.splitlines()) < 40
        fix = await agent_diff(task, {path: source.replace(old, new)})
        assert fix.count("\n-") - fix.count("\n---") == 1                # a one-line fix
        return await asyncio.gather(grade(task, "", make_box, env=ENV), grade(task, fix, make_box, env=ENV))

    async def all_tasks():
        return await asyncio.gather(*(check(task) for task in tasks))

    for task, (unfixed, fixed) in zip(tasks, run(all_tasks())):
        assert unfixed.reward == 0.0 and unfixed.error is None, (task.id, unfixed.output)
        assert fixed.reward == 1.0 and fixed.applied_cleanly, (task.id, fixed.output)
        if task.test_cmd:
            assert unfixed.failed == list(task.fail_to_pass) and unfixed.passed == list(task.pass_to_pass)
