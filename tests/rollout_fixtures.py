"""Helpers for rollout tests: bundled tasks as a tasks file, scripted tool calls, the process table."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from agent_code.tasks import bundled_tasks_path


def tasks_file(tmp_path: Path, ids: list[str], **overrides: Any) -> Path:
    """A tasks JSONL holding the bundled tasks ``ids`` (repos as absolute paths), with ``overrides``."""
    bundled = bundled_tasks_path()
    rows = {json.loads(line)["id"]: json.loads(line) for line in bundled.read_text().splitlines() if line.strip()}
    out = tmp_path / "tasks" / "tasks.jsonl"
    out.parent.mkdir(parents=True, exist_ok=True)
    lines = []
    for task_id in ids:
        row = dict(rows[task_id], **overrides)
        row["repo"] = str((bundled.parent / row["repo"]).resolve())
        lines.append(json.dumps(row))
    out.write_text("\n".join(lines) + "\n")
    return out


def call(name: str, arguments: dict[str, Any], session: str | None = None) -> dict[str, Any]:
    """A scripted engine line that makes a Hermes-format tool call (Qwen2.5's template)."""
    line: dict[str, Any] = {"text": f"<tool_call>\n{json.dumps({'name': name, 'arguments': arguments})}\n</tool_call>"}
    if session:
        line["session"] = session
    return line


def say(text: str, session: str | None = None, **extra: Any) -> dict[str, Any]:
    return {"text": text, **({"session": session} if session else {}), **extra}


def processes_with_env(entry: str) -> list[int]:
    """Host pids whose environment holds ``entry`` (e.g. ``ANTHROPIC_AUTH_TOKEN=<task>.<k>``), or
    ``entry`` followed by ``.<more>`` (a rollout's key is ``<task>.<k>.<random>``)."""
    needle = entry.encode()
    found = []
    for proc in Path("/proc").iterdir():
        if proc.name.isdigit():
            try:
                if any(e == needle or e.startswith(needle + b".") for e in (proc / "environ").read_bytes().split(b"\0")):
                    found.append(int(proc.name))
            except OSError:
                pass
    return found


THERMO_FIX = {"path": "thermo.py", "old_string": "(fahrenheit - FREEZING_F) * 9 / 5",
              "new_string": "(fahrenheit - FREEZING_F) * 5 / 9"}


def session_of(results: Any, task_id: str, k: int) -> str:
    """The session id sample ``k`` of ``task_id`` ran under, read off its result: rollout session
    ids are ``<task>.<k>.<128 random bits>``, so a test cannot name one in advance."""
    [result] = [r for r in results if r.task_id == task_id and r.sample == k]
    prefix, _, secret = result.session_id.rpartition(".")
    assert prefix == f"{task_id}.{k}" and len(secret) >= 22, result.session_id
    return result.session_id
