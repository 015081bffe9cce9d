"""A sandboxed agent is adversarial: it must not find the grader's hidden tests, write on the host,
grade itself through the gateway, or look into another sandbox.

* ``test_a_rollout_agent_cannot_reach_hidden_tests_the_host_or_its_reward``: ``agent-code rollout``
  as it is run (in-process gateway, local sandbox, agent-code on a scripted engine) on a task whose
  ``test_patch`` holds hidden tests marked with a canary. The tasks file sits in a git repository
  in a place any user can read (like ``agent_code/tasks/bundled`` in this checkout). The agent's
  bash call then tries everything: the tasks file, that repository's git objects, a file search,
  every ``/proc`` entry (a host process carries the canary on its command line), finishing its own
  session with reward 1 through the gateway, reading another session, and writing on the host.
* ``test_an_agent_cannot_read_a_grading_sandbox``: while a grading sandbox holds the hidden tests,
  the agent of another sandbox, knowing its exact paths, tries to read them — with sandboxes in
  ``/tmp`` (private to each agent command) and in a directory every user can list.

The probes never spell the canary whole (their command lines and the logs would then hold it):
they join two halves at run time. Isolation needs root; without it these tests are skipped.
"""

from __future__ import annotations

import asyncio
import json
import os
import re
import shutil
import socket
import subprocess
import sys
import tempfile
import uuid
from pathlib import Path

import pytest

from agent_code.sandbox.local import LocalSandbox, isolation_available
from agent_code.tasks.grading import grade
from agent_code.tasks.task import Task
from conftest import cli_env, run_cli
from gateway_fixtures import qwen25_renderer, write_script
from rollout_fixtures import call, say

pytestmark = pytest.mark.skipif(not isolation_available(),
                                reason="sandbox isolation needs root with unshare, setpriv and prlimit")

CANDIDATE_BASES = ("/srv", "/opt", "/var/lib")   # not /tmp: each agent command has a /tmp of its own


def _readable_by_all(path: Path) -> bool:
    return all(os.stat(p).st_mode & 0o005 == 0o005 for p in (path, *path.parents))


@pytest.fixture
def visible_dir():
    """A fresh directory that every user may list and read: what hiding must protect."""
    base = next((Path(b) for b in CANDIDATE_BASES
                 if Path(b).is_dir() and os.access(b, os.W_OK) and _readable_by_all(Path(b))), None)
    if base is None:
        pytest.skip(f"no world-readable directory to write in among {', '.join(CANDIDATE_BASES)}")
    path = Path(tempfile.mkdtemp(prefix="agent-code-security-", dir=base))
    os.chmod(path, 0o755)
    try:
        yield path
    finally:
        shutil.rmtree(path, ignore_errors=True)


def _canary() -> tuple[str, str, str]:
    a, b = f"HIDDEN-{uuid.uuid4().hex[:10]}", f"-TEST-{uuid.uuid4().hex[:10]}"
    return a + b, a, b


def _hidden_test_patch(canary: str) -> str:
    body = [f"# {canary}", "def test_hidden():", "    assert False, 'the hidden test'"]
    return ("diff --git a/tests/test_hidden.py b/tests/test_hidden.py\nnew file mode 100644\n--- /dev/null\n"
            f"+++ b/tests/test_hidden.py\n@@ -0,0 +1,{len(body)} @@\n" + "".join(f"+{line}\n" for line in body))


def _calc_repo(path: Path) -> Path:
    (path / "tests").mkdir(parents=True)
    (path / "calc.py").write_text("def add(a, b):\n    return a + b\n")
    (path / "tests" / "test_calc.py").write_text("from calc import add\n\n\ndef test_add():\n    assert add(1, 2) == 3\n")
    return path


def _git(repo: Path, *args: str) -> None:
    subprocess.run(["git", "-C", str(repo), *args], check=True, capture_output=True,
                   env={**os.environ, "GIT_AUTHOR_NAME": "t", "GIT_AUTHOR_EMAIL": "t@t", "GIT_COMMITTER_NAME": "t",
                        "GIT_COMMITTER_EMAIL": "t@t"})


def _probe_output(log: str) -> str:
    """The probe's output, from agent-code's stream-json run log (the tool result holding it)."""
    def strings(value):
        if isinstance(value, str):
            yield value
        elif isinstance(value, dict):
            for v in value.values():
                yield from strings(v)
        elif isinstance(value, list):
            for v in value:
                yield from strings(v)

    for line in log.splitlines():
        try:
            event = json.loads(line)
        except json.JSONDecodeError:
            continue
        for text in strings(event):
            if "PROBE-DONE" in text and "UID=" in text and "echo PROBE-DONE" not in text:
                return text
    return ""


# --- a whole rollout ----------------------------------------------------------------------------

PROBE = r"""
C1='{c1}'; C2='{c2}'; pat() {{ printf '%s\n' "$C1$C2"; }}
echo "UID=$(id -u) NAME=$(id -un)"
echo "VISIBLE: $(cat {host}/README.visible 2>&1)"
echo "TASKS-FILE: $(cat {tasks} 2>&1 | head -c 200)"
echo "TASKS-DIR: $(ls -A {host}/tasks 2>&1)"
echo "GIT-DIR: $(ls -A {host}/.git 2>&1)"
echo "WORKSPACE-TESTS: $(ls tests 2>&1)"
for d in {host} /tmp /var/tmp /dev/shm "$HOME" "$TMPDIR" .; do
  grep -rl -f <(pat) "$d" 2>/dev/null | sed 's/^/LEAK-FILE /'; done
for p in /proc/[0-9]*; do
  cat "$p/cmdline" "$p/environ" 2>/dev/null | tr '\0' '\n' | grep -q -f <(pat) && echo "LEAK-PROC $p"; done
for p in /proc/[0-9]*; do tr '\0' ' ' < "$p/cmdline" 2>/dev/null; echo; done > "$TMPDIR/cmdlines"
echo "PROCS=$(ls -d /proc/[0-9]* | wc -l) SELF=$(grep -c 'agent_code[ ]-p' "$TMPDIR/cmdlines") ORCHESTRATOR=$(grep -c 'agent_code[ ]rollout' "$TMPDIR/cmdlines")"
python3 - <<'PY'
import json, os, urllib.error, urllib.request, zlib
canary = ('{c1}' + '{c2}').encode()
read = 0
for dirpath, _, names in os.walk('{host}/.git'):
    for name in names:
        try:
            data = open(os.path.join(dirpath, name), 'rb').read()
            read += 1
            data = zlib.decompress(data) if '/objects/' in dirpath else data
        except Exception:
            continue
        if canary in data:
            print('LEAK-GIT', dirpath, name)
print('GIT-FILES-READ', read)
base = os.environ['ANTHROPIC_BASE_URL']
def own_key():   # its own session id, the key it was given: in its agent process's environment
    for pid in os.listdir('/proc'):
        try:
            for entry in open('/proc/' + pid + '/environ', 'rb').read().split(b'\0'):
                if entry.startswith(b'ANTHROPIC_AUTH_TOKEN='):
                    return entry.split(b'=', 1)[1].decode()
        except (OSError, ValueError):
            pass
    return 'none'
sid = os.environ.get('ANTHROPIC_AUTH_TOKEN') or own_key()
print('KEY-FOUND', sid != 'none')
def status(method, path, key=None, body=None):
    headers = {{'content-type': 'application/json'}}
    if key:
        headers['authorization'] = 'Bearer ' + key
    data = None if body is None else json.dumps(body).encode()
    try:
        with urllib.request.urlopen(urllib.request.Request(base + path, data, headers, method=method), timeout=10) as r:
            return r.status
    except urllib.error.HTTPError as e:
        return e.code
print('GW-FINISH-OWN', status('POST', '/v1/sessions/' + sid + '/finish', sid, {{'reward': 1.0}}))
print('GW-FINISH-NOKEY', status('POST', '/v1/sessions/' + sid + '/finish', None, {{'reward': 1.0}}))
print('GW-DELETE-OWN', status('DELETE', '/v1/sessions/' + sid, sid))
print('GW-READ-OTHER', status('GET', '/v1/sessions/other-task.0/turns', sid))
print('GW-OPEN', status('POST', '/v1/sessions', sid, {{'session_id': 'evil'}}))
PY
for t in {targets}; do if (echo x > "$t") 2>/dev/null; then echo "WROTE $t"; else echo "DENIED $t"; fi; done
echo PROBE-DONE
"""


def test_a_rollout_agent_cannot_reach_hidden_tests_the_host_or_its_reward(tmp_path, visible_dir):
    qwen25_renderer()  # skips without the embedded model's tokenizer
    canary, c1, c2 = _canary()
    host = visible_dir / "host"
    tasks_dir = host / "tasks"
    _calc_repo(tasks_dir / "calc")
    (host / "README.visible").write_text("VISIBLE-CONTROL\n")
    row = {"id": "sec-task", "repo": "calc", "problem_statement": "Make add() handle anything.",
           "test_cmd": "python -m pytest -rA -p no:cacheprovider", "FAIL_TO_PASS": ["tests/test_hidden.py::test_hidden"],
           "test_patch": _hidden_test_patch(canary)}
    tasks = tasks_dir / "tasks.jsonl"
    tasks.write_text(json.dumps(row) + "\n")
    _git(host, "init", "-q")
    _git(host, "add", "-A")
    _git(host, "commit", "-q", "-m", "tasks")
    suffix = uuid.uuid4().hex[:12]
    targets = [f"{host}/pwned-{suffix}", f"{tasks_dir}/pwned-{suffix}", f"/tmp/pwned-{suffix}",
               f"/var/tmp/pwned-{suffix}", f"/dev/shm/pwned-{suffix}", f"/etc/pwned-{suffix}", f"/usr/pwned-{suffix}",
               f"/root/pwned-{suffix}", f"$HOME/../pwned-{suffix}"]
    probe = PROBE.format(c1=c1, c2=c2, host=host, tasks=tasks, targets=" ".join(f'"{t}"' for t in targets))
    assert canary not in probe
    # one rollout: its session id is random, so the script's lines are shared ones, taken in order
    script = write_script(tmp_path, [call("bash", {"command": probe, "timeout": 120}),
                                     say("I looked around.")])
    witness = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(300)", canary])  # canary on /proc
    out = tmp_path / "out"
    try:
        proc = run_cli("rollout", str(tasks), "--engine", f"scripted:{script}", "--out", str(out), "--budget", "120",
                       env=cli_env(SECURITY_CANARY=canary), timeout=300)
    finally:
        witness.kill()
        witness.wait()
    assert proc.returncode == 0, proc.stderr[-3000:]
    log = next((out / "rollouts").glob("sec-task*.log")).read_text()
    results = [json.loads(line) for line in (out / "results.jsonl").read_text().splitlines()]

    output = _probe_output(log)
    assert "PROBE-DONE" in output, log[-3000:]
    assert canary not in log and "LEAK-" not in output, output
    assert "UID=0 " not in output and "NAME=agent" in output                 # unprivileged, its own user
    assert "VISIBLE: cat:" in output and "No such file" in output.split("VISIBLE:")[1].split("\n")[0]  # no host dir
    assert "VISIBLE-CONTROL" not in output
    assert "TASKS-FILE: cat:" in output and "TASKS-DIR: ls:" in output        # nor the tasks dir
    assert "GIT-DIR: ls:" in output
    assert "GIT-FILES-READ 0" in output                                       # ...nor its .git
    assert "WORKSPACE-TESTS: test_calc.py\n" in output                       # no hidden test in the workspace
    assert "ORCHESTRATOR=0" in output and "SELF=0" not in output, output      # /proc shows only its own tree
    for probe_line in ("KEY-FOUND True", "GW-FINISH-OWN 403", "GW-FINISH-NOKEY 401", "GW-DELETE-OWN 403", "GW-READ-OTHER 403",
                       "GW-OPEN 403"):
        assert probe_line in output, output
    for target in targets[:2] + targets[5:8]:
        assert f"DENIED {target}" in output, output
    assert re.search(rf"^DENIED \S+/home/\.\./pwned-{suffix}$", output, re.MULTILINE), output  # the sandbox root
    for target in targets[:8]:
        assert not Path(target).exists(), target                              # nothing landed on the host
    assert sorted(p.name for p in tasks_dir.iterdir()) == ["calc", "tasks.jsonl"]
    # the orchestrator, not the agent, finished the session: reward 0 from the failing hidden test
    (result,) = results
    assert result["abort_reason"] is None and result["reward"] == 0.0, result
    assert result["tests_failed"] == ["tests/test_hidden.py::test_hidden"]


# --- a grading sandbox next door ---------------------------------------------------------------------

@pytest.mark.parametrize("where", ["tmp", "listable"])
def test_an_agent_cannot_read_a_grading_sandbox(tmp_path, request, where):
    canary, c1, c2 = _canary()
    repo = _calc_repo(tmp_path / "calc")
    task = Task(id="next-door", repo=str(repo), problem_statement="p",
                eval_cmd='while [ ! -e "$HOME/release" ]; do sleep 0.05; done', test_patch=_hidden_test_patch(canary))
    base = None if where == "tmp" else str(request.getfixturevalue("visible_dir"))
    base_dir = Path(base or tempfile.gettempdir())
    before = set(base_dir.glob("agent-code-sandbox-*"))

    async def go():
        grading = asyncio.create_task(grade(task, "", lambda: LocalSandbox(base_dir=base), timeout=60))
        deadline = asyncio.get_running_loop().time() + 60
        grader_root = None
        while grader_root is None:
            assert asyncio.get_running_loop().time() < deadline and not grading.done()
            for root in set(base_dir.glob("agent-code-sandbox-*")) - before:
                hidden = root / "workspace" / "tests" / "test_hidden.py"
                if hidden.exists() and canary in hidden.read_text():
                    grader_root = root
            await asyncio.sleep(0.05)
        async with LocalSandbox(base_dir=base) as agent:
            (Path(agent.workdir) / "mine.txt").write_text("mine\n")
            q = str(grader_root)
            probe = (f"C1='{c1}'; C2='{c2}'; pat() {{ printf '%s\\n' \"$C1$C2\"; }}\n"
                     f"echo OWN: $(cat mine.txt)\n"
                     f"echo LIST: $(ls {base_dir} 2>&1 | grep -c agent-code-sandbox)\n"
                     f"cat {q}/workspace/tests/test_hidden.py {q}/home/test.patch {q}/workspace/calc.py 2>&1\n"
                     f"ls {q}/workspace {q}/home {q}/tmp {q}/.jobs {q}/.root 2>&1\n"
                     f"grep -rl -f <(pat) {base_dir} 2>/dev/null | sed 's/^/LEAK /'\n"
                     f"echo PROBE-DONE")
            seen = await agent.exec(["bash", "-c", probe], user="agent", timeout=60)
        (grader_root / "home" / "release").write_text("")
        verdict = await grading
        return seen, verdict

    seen, verdict = asyncio.run(go())
    output = seen.stdout + seen.stderr
    assert "PROBE-DONE" in output and "OWN: mine" in output, output
    assert canary not in output and "LEAK" not in output and "def add" not in output, output
    assert output.count("No such file or directory") >= 8, output   # 3 files + 5 directories: not there at all
    assert "LIST: 1" in output                      # in its view, the base dir holds its own sandbox only
    assert verdict.reward == 1.0 and verdict.error is None


# --- a real rollout whose agent tries the network and the host, then fixes the bug -------------------

NET_AND_HOST_PROBE = r"""
A='{a}'; B='{b}'; N='{n1}'; N="$N{n2}.txt"
for url in {urls}; do
  echo "CURL $url $(curl -s --max-time 3 "$url" 2>&1; echo rc=$?)"
done
for d in {dirs}; do cat "$d/$N" 2>/dev/null | grep -q "$A$B" && echo "CANARY-HIT $d"; done
find / \( -path /proc -o -path /sys \) -prune -o -name "$N" -print 2>/dev/null | sed 's/^/CANARY-FOUND /'
python3 - <<'PY'
import os, urllib.request
for url in {urls_py}:
    try:
        with urllib.request.urlopen(url, timeout=3) as r:
            print('URLLIB-OK', url, r.read()[:40])
    except Exception as e:
        print('URLLIB-ERR', url, type(e).__name__)
PY
echo PROBE-DONE
"""


def test_a_real_rollout_reaches_only_its_gateway_and_still_earns_its_reward(tmp_path):
    """``agent-code rollout`` (in-process gateway, scripted engine, agent-code in the local sandbox):
    the agent's bash step tries a loopback HTTP server of the test (127.0.0.1 and ::1, curl and
    urllib) and canary files on the host, then makes the honest fix: reward 1, nothing reached."""
    import http.server
    import threading

    from rollout_fixtures import THERMO_FIX, tasks_file

    qwen25_renderer()
    hits: list[str] = []

    class Handler(http.server.BaseHTTPRequestHandler):
        def do_GET(self):
            hits.append(self.path)
            self.send_response(200)
            self.end_headers()
            self.wfile.write(b"HOST-SERVICE")

        def log_message(self, *args):
            pass

    servers = []
    for host, family in (("127.0.0.1", socket.AF_INET), ("::1", socket.AF_INET6)):
        cls = type("S", (http.server.ThreadingHTTPServer,), {"address_family": family})
        server = cls((host, 0), Handler)
        threading.Thread(target=server.serve_forever, daemon=True).start()
        servers.append(server)
    urls = [f"http://127.0.0.1:{servers[0].server_address[1]}/a", f"http://[::1]:{servers[1].server_address[1]}/b",
            f"http://localhost:{servers[0].server_address[1]}/c"]
    a, b = f"CANARY-{uuid.uuid4().hex[:8]}", f"-{uuid.uuid4().hex[:8]}"
    n1, n2 = f"canary-{uuid.uuid4().hex[:8]}", f"-{uuid.uuid4().hex[:8]}"
    repo = Path(__file__).resolve().parents[1]
    dirs = [Path("/root"), Path("/srv"), Path("/opt"), Path("/var/tmp"), Path("/tmp"), tmp_path, repo]
    placed = []
    tasks = tasks_file(tmp_path, ["thermo-fahrenheit"])
    probe = NET_AND_HOST_PROBE.format(a=a, b=b, n1=n1, n2=n2, urls=" ".join(urls), urls_py=repr(urls),
                                      dirs=" ".join(str(d) for d in dirs))
    script = write_script(tmp_path, [call("bash", {"command": probe, "timeout": 120}),
                                     call("read_file", {"path": "thermo.py"}), call("edit_file", THERMO_FIX),
                                     say("Fixed the factor.")])
    out = tmp_path / "out"
    try:
        for d in dirs:
            target = d / f"{n1}{n2}.txt"
            placed.append(target)
            target.write_text(a + b + "\n")
            os.chmod(target, 0o644)
        proc = run_cli("rollout", str(tasks), "--engine", f"scripted:{script}", "--out", str(out), "--budget", "180",
                       timeout=300)
    finally:
        for p in placed:
            p.unlink(missing_ok=True)
        for server in servers:
            server.shutdown()
            server.server_close()
    assert proc.returncode == 0, proc.stderr[-3000:]
    log = next((out / "rollouts").glob("thermo*.log")).read_text()
    (result,) = [json.loads(line) for line in (out / "results.jsonl").read_text().splitlines()]
    text = next((t for t in _strings_of_log(log) if "PROBE-DONE" in t and "echo PROBE-DONE" not in t), "")
    assert "PROBE-DONE" in text, log[-3000:]
    assert hits == [], hits                                          # no request reached the host's servers
    assert "CANARY-HIT" not in text and "CANARY-FOUND" not in text and a + b not in log, text
    assert "URLLIB-OK" not in text and text.count("URLLIB-ERR") == 3, text
    assert text.count("CURL ") == 3 and "HOST-SERVICE" not in text, text
    assert "rc=0" not in text, text
    assert result["reward"] == 1.0 and result["abort_reason"] is None, json.dumps(result)   # the gateway was reachable


def _strings_of_log(log: str):
    def strings(value):
        if isinstance(value, str):
            yield value
        elif isinstance(value, dict):
            for v in value.values():
                yield from strings(v)
        elif isinstance(value, list):
            for v in value:
                yield from strings(v)

    for line in log.splitlines():
        try:
            yield from strings(json.loads(line))
        except json.JSONDecodeError:
            continue
