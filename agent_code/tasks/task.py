"""Coding tasks, one JSON object per line of a ``.jsonl`` file.

A line looks like::

    {"id": "calc-1", "repo": "calc", "problem_statement": "average() of [] crashes ...",
     "test_cmd": "python -m pytest -rA -p no:cacheprovider",
     "FAIL_TO_PASS": ["tests/test_calc.py::test_empty"], "PASS_TO_PASS": ["tests/test_calc.py::test_mean"]}

Fields (unknown ones are an error, so a typo never silently drops a grader):

``id``                required, unique in the file.
``repo``              required: a local directory (relative to the JSONL file's directory; a git
                      repository or a plain directory) or a git URL (``https://``, ``ssh://``,
                      ``file://``, ``git@host:path``).
``base_commit``       optional: the commit to check the repository out at (needs git).
``setup``             optional list of shell commands, run as root in the workspace before the agent.
``problem_statement`` required: what the agent is told.
grader                exactly one of ``eval_cmd`` (exit status 0 = solved) or ``test_cmd`` with
                      ``FAIL_TO_PASS`` / ``PASS_TO_PASS`` (test ids; SWE-bench's JSON-encoded
                      string form of these lists is accepted too). See ``grading.py``.
``test_files``        optional globs of the files that are tests (restored before grading).
``test_patch``        optional unified diff adding hidden tests, applied only when grading.
``patch``             optional unified diff: the task's reference fix (SWE-bench's gold patch). It
                      is never applied; the files it touches are code the fix may change, so
                      the grader's inferred rules (a module only the tests load, a file the
                      runner's settings collect) never refuse them. The hard rules (runner
                      config, the task's test files, packaging ...) still do.
``timeout``           optional agent budget in seconds.
``image``             optional container image the task runs in (SWE-bench style: its repo, its
                      interpreter and dependencies); used by the ``docker`` sandbox (which needs
                      ``python3`` in it), ignored by ``local``.
``metadata``          optional free-form object.

The loader checks everything it can without running anything (types, the grader, that a local
repo exists) and names ``file:line`` in every error, so a bad task fails at load time, not an
hour into a rollout.
"""

from __future__ import annotations

import json
import re
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Callable

from agent_code.jsonl import read_jsonl

# Which files count as tests: restored to their baseline content before grading, so an agent
# cannot "solve" a task by editing the tests. ``**/`` also matches the top level.
# pytest's own patterns, unittest discovery's ``test*.py`` and the directories of test helpers.
DEFAULT_TEST_FILES: tuple[str, ...] = ("**/tests/**", "**/test/**", "**/testing/**", "**/_testing/**",
                                       "**/test_*.py", "**/*_test.py", "**/test*.py", "**/conftest.py")

_URL = re.compile(r"^(?:[a-z][a-z0-9+.-]*://|[\w.-]+@[\w.-]+:)", re.IGNORECASE)


class TaskError(Exception):
    """A task is malformed, or its repository / set-up cannot be prepared."""


def is_git_url(repo: str) -> bool:
    """``scheme://...`` or scp-like ``user@host:path`` (anything else is a local path)."""
    return bool(_URL.match(repo))


@dataclass(frozen=True)
class Task:
    id: str
    repo: str                                   # an absolute local path, or a git URL
    problem_statement: str
    base_commit: str | None = None
    setup: tuple[str, ...] = ()
    eval_cmd: str | None = None
    test_cmd: str | None = None
    fail_to_pass: tuple[str, ...] = ()
    pass_to_pass: tuple[str, ...] = ()
    test_files: tuple[str, ...] = DEFAULT_TEST_FILES
    test_patch: str | None = None
    patch: str | None = None                    # the reference fix (never applied; its files stay editable)
    timeout: float | None = None
    image: str | None = None                    # the docker sandbox's image for this task
    metadata: dict[str, Any] = field(default_factory=dict, compare=False, hash=False)
    source: str = field(default="", compare=False)   # "file:line", for error messages

    @property
    def is_remote(self) -> bool:
        return is_git_url(self.repo)

    @property
    def tests(self) -> tuple[str, ...]:
        """Every test id the grader decides on, FAIL_TO_PASS first."""
        return self.fail_to_pass + self.pass_to_pass

    @classmethod
    def from_dict(cls, data: dict[str, Any], *, base_dir: Path | str = ".", source: str = "") -> "Task":
        """A validated task; relative local ``repo`` paths resolve against ``base_dir``."""
        where = f"{source}: " if source else ""

        def fail(message: str) -> TaskError:
            return TaskError(where + message)

        if not isinstance(data, dict):
            raise fail(f"a task must be a JSON object, not {type(data).__name__}")
        unknown = sorted(set(data) - _FIELDS)
        if unknown:
            raise fail(f"unknown field(s) {', '.join(unknown)} (known: {', '.join(sorted(_FIELDS))})")
        for name in ("id", "repo", "problem_statement"):
            if name not in data:
                raise fail(f"missing required field '{name}'")

        def text(name: str, *, required: bool = False) -> str | None:
            value = data.get(name)
            if value is None and not required:
                return None
            if not isinstance(value, str) or (required and not value.strip()):
                raise fail(f"'{name}' must be a non-empty string")
            return value

        def strings(name: str, *, json_string_ok: bool = False) -> tuple[str, ...] | None:
            value = data.get(name)
            if value is None:
                return None
            if json_string_ok and isinstance(value, str):     # SWE-bench stores '["a", "b"]'
                try:
                    value = json.loads(value)
                except json.JSONDecodeError:
                    raise fail(f"'{name}' must be a list of strings (or that list JSON-encoded)") from None
            if not isinstance(value, list) or not all(isinstance(v, str) and v for v in value):
                raise fail(f"'{name}' must be a list of non-empty strings")
            return tuple(value)

        task_id = text("id", required=True)
        repo = text("repo", required=True)
        assert task_id is not None and repo is not None
        if not is_git_url(repo):
            path = (Path(base_dir) / repo).expanduser().resolve()
            if not path.is_dir():
                raise fail(f"repo '{repo}' is not a directory (resolved to {path})")
            repo = str(path)

        eval_cmd, test_cmd = text("eval_cmd"), text("test_cmd")
        f2p = strings("FAIL_TO_PASS", json_string_ok=True) or ()
        p2p = strings("PASS_TO_PASS", json_string_ok=True) or ()
        if eval_cmd and test_cmd:
            raise fail("give one grader: 'eval_cmd' or 'test_cmd' (+ FAIL_TO_PASS/PASS_TO_PASS), not both")
        if not eval_cmd and not test_cmd:
            raise fail("no grader: give 'eval_cmd', or 'test_cmd' with FAIL_TO_PASS/PASS_TO_PASS")
        if eval_cmd and (f2p or p2p):
            raise fail("FAIL_TO_PASS/PASS_TO_PASS need 'test_cmd', not 'eval_cmd'")
        if test_cmd and not (f2p or p2p):
            raise fail("'test_cmd' needs at least one test id in FAIL_TO_PASS or PASS_TO_PASS")
        overlap = sorted(set(f2p) & set(p2p))
        if overlap:
            raise fail(f"test ids in both FAIL_TO_PASS and PASS_TO_PASS: {', '.join(overlap)}")

        timeout = data.get("timeout")
        if timeout is not None and (isinstance(timeout, bool) or not isinstance(timeout, (int, float))
                                    or timeout <= 0):
            raise fail("'timeout' must be a positive number of seconds")
        metadata = data.get("metadata", {})
        if not isinstance(metadata, dict):
            raise fail("'metadata' must be an object")
        test_files = strings("test_files")
        problem = text("problem_statement", required=True)
        return cls(id=task_id, repo=repo, problem_statement=problem or "",
                   base_commit=text("base_commit"), setup=strings("setup") or (),
                   eval_cmd=eval_cmd, test_cmd=test_cmd, fail_to_pass=f2p, pass_to_pass=p2p,
                   test_files=DEFAULT_TEST_FILES if test_files is None else test_files,
                   test_patch=text("test_patch"), patch=reference_patch(data.get("patch"), fail),
                   timeout=None if timeout is None else float(timeout),
                   image=text("image", required="image" in data), metadata=metadata, source=source)


_FIELDS = frozenset({"id", "repo", "base_commit", "setup", "problem_statement", "eval_cmd", "test_cmd",
                     "FAIL_TO_PASS", "PASS_TO_PASS", "test_files", "test_patch", "patch", "timeout", "image", "metadata"})


def reference_patch(value: Any, fail: Callable[[str], TaskError]) -> str | None:
    """A task's ``patch``: None, or a unified diff that names a file (``--- a/path``, ``+++ b/path``)."""
    if value is None:
        return None
    if not isinstance(value, str) or not re.search(r"^(?:\+\+\+ b|--- a)/\S", value, re.MULTILINE):
        raise fail("'patch' must be a unified diff (with '--- a/<path>' / '+++ b/<path>' lines): the task's reference fix")
    return value


def load_tasks(path: str | Path) -> list[Task]:
    """Every task in a JSONL file, in file order. Blank lines and lines starting with ``#`` are
    skipped. Raises :class:`TaskError` naming ``file:line`` for the first bad line."""
    path = Path(path)
    tasks: list[Task] = []
    seen: dict[str, str] = {}
    for _, source, data in read_jsonl(path, TaskError, "tasks file"):
        task = Task.from_dict(data, base_dir=path.parent, source=source)
        if task.id in seen:
            raise TaskError(f"{source}: duplicate task id '{task.id}' (first at {seen[task.id]})")
        seen[task.id] = source
        tasks.append(task)
    return tasks
