"""How many questions a realistic session asks, with the OS sandbox and without.

Run: .venv/bin/python bench/sandbox_prompts.py

For each bundled task (``agent_code/tasks/bundled``) a scripted model fixes the bug the way a
coding agent does: look around (``git status``, ``ls``), run the tests, read the module, edit
it (the fix the scripted rollout demo uses, ``agent_code/demo/rollout_script.jsonl``), run the
tests again, look at ``git diff``. The real agent loop runs it on a git copy of the task in
``default`` and ``acceptEdits``, once with the wall (:func:`agent_code.confine.open_wall`) and
once without, and counts every question the policy put to the user (all answered yes). It
prints the counts, the share of questions the sandbox saves (target: at least 80% fewer in
``default``), and checks that each run really fixed the task (its tests pass), so a wall that
broke the commands cannot look like a saving. Exits 1 when the machine cannot sandbox.
"""

from __future__ import annotations

import json
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

from agent_code.agent.loop import Agent
from agent_code.confine import Wall, open_wall
from agent_code.demo.rollout import ROLLOUT_SCRIPT
from agent_code.policy import PermissionPolicy
from agent_code.providers.scripted import ScriptedProvider
from agent_code.tasks import bundled_tasks_path
from agent_code.tools import ToolContext, default_tools

TEST_COMMAND = "python -m pytest -q -p no:cacheprovider tests"


def fixes() -> dict[str, tuple[str, dict[str, Any]]]:
    """task id → (the module the fix edits, the edit_file arguments), from the demo's script."""
    out: dict[str, tuple[str, dict[str, Any]]] = {}
    for line in ROLLOUT_SCRIPT.read_text().splitlines():
        row = json.loads(line)
        text = row["text"]
        if "<tool_call>" not in text:
            continue
        call = json.loads(text.split("<tool_call>")[1].split("</tool_call>")[0])
        if call["name"] == "edit_file":
            out[row["session"].rsplit(".", 1)[0]] = (call["arguments"]["path"], call["arguments"])
    return out


def session_script(path: Path, module: str, edit: dict[str, Any]) -> Path:
    steps: list[tuple[str, dict[str, Any]]] = [
        ("bash", {"command": "git status --short"}),
        ("bash", {"command": "ls"}),
        ("bash", {"command": TEST_COMMAND}),
        ("read_file", {"path": module}),
        ("edit_file", edit),
        ("bash", {"command": TEST_COMMAND}),
        ("bash", {"command": "git diff"}),
    ]
    turns = [[{"type": "tool_use", "id": f"toolu_{i:02d}", "name": name, "input": args}]
             for i, (name, args) in enumerate(steps)]
    turns.append([{"type": "text", "text": "Fixed."}])
    path.write_text("".join(json.dumps(t) + "\n" for t in turns))
    return path


def workspace(task_repo: Path, into: Path) -> Path:
    shutil.copytree(task_repo, into)
    git = ["git", "-C", str(into), "-c", "user.name=bench", "-c", "user.email=bench@localhost"]
    subprocess.run(git[:3] + ["init", "-q"], check=True)
    subprocess.run(git + ["add", "-A"], check=True)
    subprocess.run(git + ["commit", "-qm", "task"], check=True)
    return into


def run_session(root: Path, script: Path, mode: str, wall: Wall | None) -> tuple[int, bool, float]:
    """(questions asked, the task's tests pass afterwards, seconds)."""
    asked: list[str] = []

    def ask(tool: Any, arguments: Any) -> bool:
        asked.append(tool.name)
        return True

    ctx = ToolContext(root)
    ctx.wall = wall
    policy = PermissionPolicy(mode, ask=ask, root=root, wall=wall)
    start = time.perf_counter()
    Agent(ScriptedProvider(script), default_tools(), ctx, permissions=policy, max_steps=20).run("fix the bug")
    seconds = time.perf_counter() - start
    fixed = subprocess.run(TEST_COMMAND.split(), cwd=root, capture_output=True).returncode == 0
    return len(asked), fixed, seconds


def main() -> int:
    tasks_file = bundled_tasks_path()
    tasks = [json.loads(line) for line in tasks_file.read_text().splitlines() if line.strip()]
    edits = fixes()
    totals: dict[tuple[str, bool], int] = {}
    broken = 0
    print(f"{'task':24} {'mode':12} {'no sandbox':>10} {'sandbox':>8}   seconds (no sandbox / sandbox)")
    with tempfile.TemporaryDirectory() as tmp:
        for task in tasks:
            module, edit = edits[task["id"]]
            for mode in ("default", "acceptEdits"):
                counts, times = [], []
                for walled in (False, True):
                    root = workspace(tasks_file.parent / task["repo"], Path(tmp) / f"{task['id']}-{mode}-{walled}")
                    script = session_script(Path(tmp) / f"{task['id']}-{mode}-{walled}.jsonl", module, edit)
                    wall = open_wall(root) if walled else None
                    if walled and not isinstance(wall, Wall):
                        print(f"no sandbox on this machine: {wall.reason}")  # type: ignore[union-attr]
                        return 1
                    try:
                        asked, fixed, seconds = run_session(root, script, mode, wall if isinstance(wall, Wall) else None)
                    finally:
                        if isinstance(wall, Wall):
                            wall.close()
                    broken += not fixed
                    counts.append(asked)
                    times.append(seconds)
                    totals[(mode, walled)] = totals.get((mode, walled), 0) + asked
                print(f"{task['id']:24} {mode:12} {counts[0]:>10} {counts[1]:>8}   {times[0]:.2f} / {times[1]:.2f}")
    for mode in ("default", "acceptEdits"):
        without, with_wall = totals[(mode, False)], totals[(mode, True)]
        saved = 1 - with_wall / without if without else 0.0
        target = "  (target: >= 80%)" if mode == "default" else ""
        print(f"{mode}: {without} questions without the sandbox, {with_wall} with it: {saved:.0%} fewer{target}")
    if broken:
        print(f"{broken} session(s) did not fix their task: the counts above are not a fair comparison")
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
