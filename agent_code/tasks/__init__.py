"""The task layer: coding tasks from JSONL, their repositories in a sandbox, and grading.

    tasks = load_tasks(bundled_tasks_path())
    async with create_sandbox("local") as box:
        workspace = await prepare_workspace(box, task)   # repo at base_commit, one baseline commit
        ...                                               # the agent works in box.workdir
        diff = await collect_diff(box, workspace.baseline)
    result = await grade(task, diff, lambda: create_sandbox("local"))   # in a fresh sandbox

See ``task.py`` (the JSONL format), ``workspace.py`` (snapshots, the baseline commit, the diff)
and ``grading.py`` (how a diff is graded).
"""

from __future__ import annotations

from pathlib import Path

from agent_code.tasks.grading import Grade, grade, grade_change, parse_test_results
from agent_code.tasks.task import DEFAULT_TEST_FILES, Task, TaskError, load_tasks
from agent_code.tasks.workspace import (BASELINE_REF, DiffError, Workspace, clear_snapshot_cache, collect_diff,
                                        prepare_workspace, snapshot)

__all__ = ["BASELINE_REF", "DEFAULT_TEST_FILES", "DiffError", "Grade", "Task", "TaskError", "Workspace",
           "bundled_tasks_path", "clear_snapshot_cache", "collect_diff", "grade", "grade_change", "load_tasks", "parse_test_results",
           "prepare_workspace", "snapshot"]


def bundled_tasks_path() -> Path:
    """The JSONL of the small bug-fix tasks shipped with the package (``bundled/``): each a tiny
    plain-directory repo with a one-line bug and pytest tests that catch it."""
    return Path(__file__).resolve().parent / "bundled" / "tasks.jsonl"
