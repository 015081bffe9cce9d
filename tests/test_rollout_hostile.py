"""Issue 39, one rollout against the run: eight rollouts run at once, seven honest and one hostile,
and the hostile one cannot stall, bloat or starve the run or its siblings.

Real parts: the real agent-code CLI in local sandboxes (isolated: their own root, network and uid),
a real gateway on loopback over the scripted engine (Qwen2.5's real template and tokenizer), the
orchestrator's ``run_all`` in this process. The hostile agent, with its own bash tool:

* floods the gateway through its sandbox's relay: 2,000 connections, each holding a request open
  with the session's own key (read out of its agent's ``/proc/PID/environ``) and a body that never
  comes, held for as long as its siblings run;
* leaves, where the harness reads the agent's stderr after the run, either a FIFO (a reader that
  opens it waits forever) or a sparse 100 GB file (no disk used; a reader that reads it whole
  holds 100 GB).

The seven honest siblings each fix the bug and must get reward 1 with no abort, the run must end
(in a thread, with a deadline: a blocked event loop would never come back), and this process's
peak memory must stay far below what reading the sparse file would take. On main at a012229 the
FIFO stopped the whole run (no result after 75 s) and the sparse file cost 1.3-1.9 GB.
"""

from __future__ import annotations

import asyncio
import json
import os
import re
import resource
import tempfile
import threading
from pathlib import Path
from typing import Any

import pytest

from agent_code.rollout.runner import RolloutConfig, RolloutResult, run_all
from agent_code.tasks import bundled_tasks_path, load_tasks
from gateway_fixtures import qwen25_renderer, scripted_gateway
from rollout_fixtures import THERMO_FIX, call, say

HONEST = 7
DEADLINE = 420
FLOOD = r'''
import os, socket, sys, time
url = os.environ["ANTHROPIC_BASE_URL"].split("//", 1)[1].split("/", 1)[0]
host, port = url.rsplit(":", 1)
key = ""
for pid in os.listdir("/proc"):
    if pid.isdigit():
        try:
            for entry in open("/proc/%s/environ" % pid, "rb").read().split(b"\0"):
                if entry.startswith(b"ANTHROPIC_AUTH_TOKEN="):
                    key = entry.split(b"=", 1)[1].decode()
        except OSError:
            pass
head = ("POST /v1/messages HTTP/1.1\r\nHost: %s:%s\r\nx-api-key: %s\r\ncontent-type: application/json\r\n"
        "anthropic-version: 2023-06-01\r\ncontent-length: 1000000\r\n\r\n{" % (host, port, key)).encode()
held, tried, start = [], 0, time.monotonic()
while tried < 2000 and time.monotonic() - start < 12:
    tried += 1
    try:
        s = socket.create_connection((host, int(port)), timeout=0.2)
        s.sendall(head)
        held.append(s)
    except OSError:
        pass
open(os.path.expanduser("~/flood.out"), "w").write("flood: %d tried, %d open, key %s\n" % (tried, len(held), bool(key)))
time.sleep(float(sys.argv[1]))
'''
LEFT_BEHIND = {
    "fifo": "rm -f ~/.agent-stderr.log && mkfifo ~/.agent-stderr.log",
    "sparse": "truncate -s 100G ~/.agent-stderr.log",
}


def hostile_task(k: int) -> str:
    return f"thermo-{k}"


def script(kind: str) -> list[dict[str, Any]]:
    lines: list[dict[str, Any]] = []
    for k in range(HONEST):
        s = f"{hostile_task(k)}.0"
        lines += [call("read_file", {"path": "thermo.py"}, s), call("edit_file", THERMO_FIX, s), say("Fixed.", s)]
    s = "hostile.0"
    lines += [call("write_file", {"path": "flood.py", "content": FLOOD}, s),
              call("bash", {"command": "(setsid python3 flood.py 40 >/dev/null 2>&1 &); sleep 25; "
                                       "cat ~/flood.out"}, s),
              call("bash", {"command": LEFT_BEHIND[kind]}, s),
              say("Done.", s)]
    return lines


def tasks_file(tmp_path: Path) -> Path:
    bundled = bundled_tasks_path()
    rows = {json.loads(line)["id"]: json.loads(line) for line in bundled.read_text().splitlines() if line.strip()}
    out = tmp_path / "tasks.jsonl"
    lines = []
    for task_id in ["hostile", *(hostile_task(k) for k in range(HONEST))]:
        row = dict(rows["thermo-fahrenheit"], id=task_id)
        row["repo"] = str((bundled.parent / row["repo"]).resolve())
        lines.append(json.dumps(row))
    out.write_text("\n".join(lines) + "\n")
    return out


def run(kind: str, tmp_path: Path) -> tuple[list[RolloutResult] | None, int]:
    """The eight rollouts in a thread with a deadline: (results or None when the run never
    ended, this process's peak RSS growth in MiB)."""
    renderer = qwen25_renderer()
    tasks = load_tasks(tasks_file(tmp_path))
    tmp = tmp_path / "tmp"
    tmp.mkdir()
    os.chmod(tmp_path, 0o755)
    config = RolloutConfig(concurrency=8, budget=180, max_steps=8, grade_timeout=60)
    out: dict[str, Any] = {}
    before = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss

    def target() -> None:
        try:
            out["results"] = asyncio.run(run_all(tasks, config, url))
        except BaseException as exc:  # noqa: BLE001  (reported by the test)
            out["error"] = exc

    saved, tempfile.tempdir = tempfile.tempdir, str(tmp)
    try:
        with scripted_gateway(tmp_path, script(kind), renderer) as (url, _):
            thread = threading.Thread(target=target, daemon=True)
            thread.start()
            thread.join(DEADLINE)
    finally:
        tempfile.tempdir = saved
    if "error" in out:
        raise out["error"]
    grown = (resource.getrusage(resource.RUSAGE_SELF).ru_maxrss - before) // 1024
    return out.get("results"), grown


@pytest.mark.parametrize("kind", sorted(LEFT_BEHIND))
def test_one_hostile_rollout_leaves_its_seven_siblings_and_the_run_unaffected(kind, tmp_path):
    results, grown_mib = run(kind, tmp_path)
    assert results is not None, f"the run did not end within {DEADLINE} s"
    by_task = {r.task_id: r for r in results}
    assert len(by_task) == HONEST + 1
    hostile = by_task.pop("hostile")
    flood = re.search(r"flood: (\d+) tried, (\d+) open, key True", hostile.log)
    assert flood, hostile.log[-2000:]                                # it ran, with the session's key
    print(f"\n{kind}: {flood.group(0)}; hostile: {hostile.abort_reason} {hostile.error}; "
          f"peak memory +{grown_mib} MiB")
    for r in by_task.values():
        assert (r.abort_reason, r.reward) == (None, 1.0), (r.task_id, r.abort_reason, r.error)
    assert grown_mib < 400, f"peak memory grew by {grown_mib} MiB"
    assert hostile.abort_reason in (None, "ungradable", "budget", "agent_crash"), (hostile.abort_reason, hostile.error)
