"""Grading an agent's diff in a fresh sandbox.

Steps, each in a sandbox that never saw the agent run:

1. prepare the workspace again (same snapshot, same ``setup``, same baseline commit);
2. ``git apply`` the agent's diff — if it does not apply, ``applied_cleanly`` is False and the
   reward 0; an empty diff is graded as it is;
3. restore every file matching the task's ``test_files`` globs to its baseline content, and delete
   test files the agent added — what is graded is the agent's change to the code, against the
   task's own tests;
4. apply the task's ``test_patch`` (hidden tests the agent never saw), if any;
5. run the grader as the agent user (it runs the agent's code, which must never run as root):

   * ``eval_cmd``: reward 1 when it exits 0, else 0;
   * ``test_cmd``: the FAIL_TO_PASS and PASS_TO_PASS ids are appended to it, shell-quoted (or
     substituted for ``{tests}`` when the command contains that), and each id is decided from the
     output, read as pytest reports results: the ``-rA`` short summary (``PASSED <id>``,
     ``FAILED <id> - ...``) or ``-v`` lines (``<id> PASSED [ 50%]``). An id passes when it is
     reported PASSED, XFAIL or XPASS and never FAILED or ERROR; one not reported at all (not
     collected, skipped, the run crashed) fails. So a ``test_cmd`` must make pytest print those
     lines: ``python -m pytest -rA``. The reward is 1 when every id passes (0 otherwise), or with
     ``partial=True`` the fraction that pass.

What the diff can cause (it does not apply, the tests time out, a hidden test patch no longer
applies over it) comes back as a :class:`Grade` with reward 0 and ``error`` set. What it cannot
(the sandbox fails, the task's own setup fails before the diff is applied) is raised —
:class:`TaskError` or ``SandboxError`` — so a broken task or machine is never recorded as a
zero-reward sample.
"""

from __future__ import annotations

import re
import shlex
import time
from dataclasses import dataclass, field
from typing import Callable, Iterable, Mapping, Sequence

from agent_code.globs import glob_regex
from agent_code.sandbox.base import Sandbox
from agent_code.tasks.task import Task, TaskError
from agent_code.tasks.workspace import GIT_ENV, run_step, prepare_workspace

OUTPUT_LIMIT = 4000
PASSING = frozenset({"PASSED", "XFAIL", "XPASS"})
FAILING = frozenset({"FAILED", "ERROR"})
_STATUS = "PASSED|FAILED|ERROR|XFAIL|XPASS|SKIPPED"
_SUMMARY_LINE = re.compile(rf"^({_STATUS}) (.+?)(?: - .*)?$")             # -rA
_VERBOSE_LINE = re.compile(rf"^(\S+::.+?) ({_STATUS})(?:\s+\[\s*\d+%\])?$")  # -v
_XDIST_PREFIX = re.compile(r"^\[gw\d+\]\s+\[\s*\d+%\]\s+")


@dataclass
class Grade:
    reward: float
    applied_cleanly: bool
    passed: list[str] = field(default_factory=list)   # test ids (empty for an eval_cmd grader)
    failed: list[str] = field(default_factory=list)
    output: str = ""                                   # the tail of the grader's (or failing step's) output
    duration: float = 0.0
    error: str | None = None


# --- test files -------------------------------------------------------------------------------

def glob_to_regex(pattern: str) -> re.Pattern[str]:
    """A path glob (``agent_code/globs.py``): ``*`` and ``?`` stay inside one path component,
    ``**/`` crosses them and also matches nothing (so ``**/test_*.py`` matches ``test_a.py``)."""
    return re.compile(glob_regex(pattern) + r"\Z")


def matches_any(path: str, globs: Iterable[str]) -> bool:
    """Whether ``path`` (relative, ``/``-separated) or one of its parent directories matches a glob."""
    regexes = [glob_to_regex(g.lstrip("/").removeprefix("./").rstrip("/")) for g in globs]
    parts = path.split("/")
    candidates = ["/".join(parts[:n]) for n in range(len(parts), 0, -1)]
    return any(rx.match(c) for rx in regexes for c in candidates)


async def _restore_test_files(box: Sandbox, baseline: str, globs: Sequence[str]) -> list[str]:
    """Put test files back as they were at the baseline; returns the paths it touched."""
    listing = await run_step(box, f"git add -A && git diff --cached --name-status --no-renames -z {baseline} --",
                             "listing the agent's changes", user="agent")
    fields = listing.stdout.split("\0")
    changes = list(zip(fields[0::2], fields[1::2]))
    added = [p for status, p in changes if status == "A" and matches_any(p, globs)]
    changed = [p for status, p in changes if status != "A" and matches_any(p, globs)]
    for paths, git_cmd in ((added, "rm -q -f"), (changed, f"checkout -q {baseline}")):
        if not paths:
            continue
        listfile = f"{box.home}/.agent-code-paths"
        await box.write_file(listfile, "\0".join(paths) + "\0", user="agent")
        await run_step(box, f"git --literal-pathspecs {git_cmd} --pathspec-from-file={shlex.quote(listfile)}"
                       f" --pathspec-file-nul && rm -f {shlex.quote(listfile)}",
                       "restoring the test files", user="agent")
    return added + changed


# --- reading test results ---------------------------------------------------------------------

def parse_test_results(output: str) -> dict[str, set[str]]:
    """Every test id pytest reported in ``output``, with the statuses it got."""
    results: dict[str, set[str]] = {}
    for raw in output.splitlines():
        line = _XDIST_PREFIX.sub("", raw.strip())
        match = _SUMMARY_LINE.match(line)
        if match and "::" in match.group(2):
            results.setdefault(match.group(2), set()).add(match.group(1))
            continue
        match = _VERBOSE_LINE.match(line)
        if match:
            results.setdefault(match.group(1), set()).add(match.group(2))
    return results


def decide(ids: Sequence[str], results: Mapping[str, set[str]]) -> tuple[list[str], list[str]]:
    passed = [t for t in ids if results.get(t, set()) & PASSING and not results[t] & FAILING]
    return passed, [t for t in ids if t not in passed]


def build_test_command(test_cmd: str, ids: Sequence[str]) -> str:
    quoted = shlex.join(ids)
    return test_cmd.replace("{tests}", quoted) if "{tests}" in test_cmd else f"{test_cmd} {quoted}"


# --- grading ----------------------------------------------------------------------------------

async def grade(task: Task, diff: str, make_sandbox: Callable[[], Sandbox], *, partial: bool = False,
                env: Mapping[str, str] | None = None, timeout: float = 600,
                setup_timeout: float = 600) -> Grade:
    """Grade ``diff`` (from :func:`collect_diff`) for ``task`` in a fresh sandbox from
    ``make_sandbox()`` (not yet entered). ``env`` (e.g. a ``PATH`` with the interpreter the
    tests need) is given to the setup and the grader; ``timeout`` bounds the grader's run."""
    start = time.monotonic()

    def done(reward: float, *, applied: bool = True, passed: list[str] | None = None,
             failed: list[str] | None = None, output: str = "", error: str | None = None) -> Grade:
        return Grade(reward, applied, passed or [], failed or [], output, time.monotonic() - start, error)

    async with make_sandbox() as box:
        workspace = await prepare_workspace(box, task, env=env, setup_timeout=setup_timeout, write_problem=False)
        if diff.strip():
            patch = f"{box.home}/agent.diff"
            await box.write_file(patch, diff if diff.endswith("\n") else diff + "\n", user="agent")
            applied = await box.exec(f"git apply --whitespace=nowarn {shlex.quote(patch)}", user="agent",
                                     env=GIT_ENV, timeout=120, cwd=box.workdir)
            if not applied.ok:
                return done(0.0, applied=False, failed=list(task.tests), output=applied.output(OUTPUT_LIMIT),
                            error="the diff does not apply to the task's repository")
        try:
            await _restore_test_files(box, workspace.baseline, task.test_files)
            if task.test_patch:
                hidden = f"{box.home}/test.patch"
                await box.write_file(hidden, task.test_patch, user="agent")
                await run_step(box, f"git apply --whitespace=nowarn {shlex.quote(hidden)}",
                               "applying the task's test_patch", user="agent")
        except TaskError as exc:
            return done(0.0, failed=list(task.tests), output=str(exc)[-OUTPUT_LIMIT:], error=str(exc).split("\n")[0])

        command = task.eval_cmd or build_test_command(task.test_cmd or "", task.tests)
        result = await box.exec(command, user="agent", env=env, timeout=timeout, cwd=box.workdir)
        output = result.output(OUTPUT_LIMIT)
        if result.timed_out:
            return done(0.0, failed=list(task.tests), output=output, error=f"grading timed out after {timeout:g}s")
        if task.eval_cmd:
            return done(1.0 if result.ok else 0.0, output=output)
        passed, failed = decide(task.tests, parse_test_results(result.stdout + "\n" + result.stderr))
        if partial:
            reward = len(passed) / len(task.tests)
        else:
            reward = 0.0 if failed else 1.0
        return done(reward, passed=passed, failed=failed, output=output)
