"""The Docker sandbox. Three layers:

* its pure helpers (the killing timeout, tar archives), run here for real;
* the backend driven through a stand-in for the Docker SDK (``LocalDocker`` below: the container
  is this machine, exec a subprocess, put/get_archive real tar files), so its logic runs
  everywhere — including a dead engine socket giving a clear ``SandboxError``;
* the backend against a real engine and the project's image, set up the documented way
  (scripts/docker-setup.sh, through the ``docker_image`` fixture: skipped, loudly, only where no
  engine can be started), including what the sandbox must hold: no host file visible, nothing
  written that outlives the container, no host service reachable but the gateway, an agent
  without privileges.
"""

from __future__ import annotations

import asyncio
import io
import os
import pwd
import shlex
import subprocess
import tarfile
import time
from pathlib import Path
from typing import Any

import pytest

from agent_code.sandbox import SandboxError, create_sandbox
from agent_code.sandbox.docker import (
    DockerSandbox,
    ended_by_timeout,
    killing_timeout,
    tar_file,
    tar_tree,
)


def run(coro):
    return asyncio.run(coro)


needs_engine = pytest.mark.usefixtures("docker_image")


# --- pure helpers ----------------------------------------------------------------------------

def test_killing_timeout_kills_the_group_and_is_recognised(tmp_path):
    pidfile = tmp_path / "bg.pid"
    start = time.monotonic()
    proc = subprocess.run(["sh", "-c", killing_timeout(f"sleep 30 & echo $! > {pidfile}; sleep 30", 1)], check=False)
    elapsed = time.monotonic() - start
    assert 1 <= elapsed < 5 and ended_by_timeout(proc.returncode, elapsed, 1)
    time.sleep(0.1)
    state = Path(f"/proc/{pidfile.read_text().strip()}/stat")
    assert not state.exists() or state.read_text().rpartition(") ")[2][:1] == "Z"

    quick = subprocess.run(["sh", "-c", killing_timeout("echo 'it''s' fine; exit 3", 5)], check=False,
                           capture_output=True, text=True)
    assert (quick.returncode, quick.stdout) == (3, "its fine\n") and not ended_by_timeout(3, 0.1, 5)
    assert killing_timeout("echo hi", None) == "echo hi"
    assert not ended_by_timeout(137, 0.2, 5)      # died of SIGKILL, but before its deadline
    assert ended_by_timeout(-1, 5.1, 5)           # a supervisor's "killed by a signal"
    assert not ended_by_timeout(1, 9.0, 5) and not ended_by_timeout(137, 9.0, None)


def test_tar_helpers_round_trip(tmp_path):
    tree = tmp_path / "tree"
    (tree / "sub" / "empty").mkdir(parents=True)
    (tree / "sub" / "data.bin").write_bytes(b"\x00\xffbinary")
    (tree / "run.sh").write_text("#!/bin/sh\n")
    (tree / "run.sh").chmod(0o755)
    (tree / "link").symlink_to("run.sh")

    with tarfile.open(fileobj=io.BytesIO(tar_tree(tree, uid=1234, gid=99, compress=True))) as tar:
        members = {m.name: m for m in tar.getmembers()}
    assert sorted(members) == ["link", "run.sh", "sub", "sub/data.bin", "sub/empty"]  # contents, not "tree/"
    assert {(m.uid, m.gid) for m in members.values()} == {(1234, 99)}
    assert members["run.sh"].mode & 0o777 == 0o755 and members["link"].issym()

    single = tar_file("notes.txt", b"hello", mode=0o600, uid=7, gid=8)
    with tarfile.open(fileobj=io.BytesIO(single)) as tar:
        (info,) = tar.getmembers()
        content = tar.extractfile(info)
        assert content is not None and content.read() == b"hello"
    assert (info.name, info.mode, info.uid, info.gid) == ("notes.txt", 0o600, 7, 8)


# --- the backend through a local stand-in for the Docker SDK -----------------------------------

class LocalContainer:
    """The slice of ``docker.models.containers.Container`` the backend uses, on this machine."""

    short_id = "local123"

    def __init__(self) -> None:
        self.removed: dict[str, Any] | None = None
        self.execs: list[dict[str, Any]] = []

    def exec_run(self, cmd, *, user="", environment=None, workdir=None, demux=False):
        from docker.models.containers import ExecResult

        self.execs.append({"cmd": cmd, "user": user, "workdir": workdir})
        done = subprocess.run(cmd, check=False, cwd=workdir, env={**os.environ, **(environment or {})},
                              capture_output=True)
        return ExecResult(done.returncode, (done.stdout or None, done.stderr or None))

    def put_archive(self, path, data):
        with tarfile.open(fileobj=io.BytesIO(data)) as tar:
            # (the "tar" filter refuses links out of the folder; Pythons before 3.11.4 have none)
            tar.extractall(path, **({"filter": "tar"} if hasattr(tarfile, "tar_filter") else {}))
        return True

    def get_archive(self, path):
        import docker

        if not os.path.lexists(path):
            raise docker.errors.NotFound(f"Could not find the file {path} in container")
        buffer = io.BytesIO()
        with tarfile.open(fileobj=buffer, mode="w") as tar:
            tar.add(path, arcname=os.path.basename(path))
        return iter([buffer.getvalue()]), {"name": os.path.basename(path)}

    def remove(self, **options):
        self.removed = options


class LocalDocker:
    def __init__(self) -> None:
        self.container = LocalContainer()
        self.run_args: dict[str, Any] = {}
        self.closed = False
        outer = self

        class Images:
            def get(self, name):
                return name

        class Containers:
            def run(self, image, **options):
                outer.run_args = {"image": image, **options}
                return outer.container

        self.images, self.containers = Images(), Containers()

    def ping(self):
        return True

    def close(self):
        self.closed = True


@pytest.fixture
def local_docker(monkeypatch, tmp_path):
    docker = pytest.importorskip("docker")
    client = LocalDocker()
    monkeypatch.setattr(docker, "from_env", lambda **kwargs: client)
    me = pwd.getpwuid(os.getuid()).pw_name  # "useradd" is skipped: the user exists already
    box = DockerSandbox("some/image:tag", workdir=str(tmp_path / "workspace"), home=str(tmp_path / "home"),
                        agent_user=me)
    return client, box


def test_backend_logic_through_a_local_stand_in(local_docker, tmp_path):
    client, box = local_docker
    source = tmp_path / "src"
    (source / "pkg").mkdir(parents=True)
    (source / "pkg" / "m.py").write_text("X = 1\n")
    (source / "tool").write_text("#!/bin/sh\necho tool\n")
    (source / "tool").chmod(0o700)

    async def go():
        async with box:
            r = await box.exec("echo out; echo err >&2; exit 4", user="agent", env={"A": "1"})
            here = await box.exec(["sh", "-c", 'printf "%s %s" "$PWD" "$A"'], env={"A": "x y"})
            slow = await box.exec("sleep 30", timeout=1)
            await box.write_file("notes/a.txt", "hi\n", user="agent", mode=0o640)
            read = await box.read_file(f"{box.workdir}/notes/a.txt")
            with pytest.raises(FileNotFoundError):
                await box.read_file("nope.txt")
            await box.upload(str(source), "repo", user="agent")
            tool = await box.exec("./tool && cat pkg/m.py", cwd="repo")
            await box.give_to_agent("repo")
            job = await box.start("echo working; exit 2", user="agent")
            done = await box.wait(job, budget=10)
            stuck = await box.start("sleep 30")
            killed = await box.wait(stuck, budget=1)
            return r, here, slow, read, tool, done, killed

    r, here, slow, read, tool, done, killed = run(go())
    assert (r.exit_code, r.stdout, r.stderr) == (4, "out\n", "err\n")
    assert here.stdout == f"{box.workdir} x y"
    assert slow.exit_code is None and slow.timed_out and slow.duration < 5
    assert read == b"hi\n" and (tmp_path / "workspace/notes/a.txt").stat().st_mode & 0o777 == 0o640
    assert tool.stdout == "tool\nX = 1\n"
    assert (done.exit_code, done.stdout) == (2, "working\n")
    assert killed.timed_out and killed.exit_code is None
    run_args = client.run_args
    assert run_args["image"] == "some/image:tag" and run_args["entrypoint"] == ["sleep", "infinity"]
    assert run_args["detach"] and run_args["labels"] == {"agent-code.sandbox": box.id}
    assert {e["user"] for e in client.container.execs} == {box.agent_user, "root"}
    assert any(f"chown -R {box.agent_user}: {box.workdir}/repo" in e["cmd"][-1] for e in client.container.execs)
    assert client.container.removed == {"force": True, "v": True} and client.closed


def test_no_engine_is_a_clear_error(monkeypatch, tmp_path):
    pytest.importorskip("docker")
    dead = tmp_path / "dead.sock"
    monkeypatch.setenv("DOCKER_HOST", f"unix://{dead}")

    async def go():
        async with create_sandbox("docker"):
            pass

    with pytest.raises(SandboxError, match=f"no Docker engine at unix://{dead}"):
        run(go())


# --- against a real engine ---------------------------------------------------------------------

@needs_engine
def test_engine_exec_users_and_timeout():
    async def go():
        async with create_sandbox("docker") as box:
            who = await box.exec('printf "%s %s %s" "$(id -un)" "$HOME" "$PWD"', user="agent")
            root = await box.exec("id -un", user="root")
            failing = await box.exec("echo out; echo err >&2; exit 3", env={"X": "1"})
            env = await box.exec("printf %s \"$X\"", env={"X": "a b"}, cwd="/tmp")
            start = time.monotonic()
            slow = await box.exec("sleep 30 & echo $! > /tmp/bg; sleep 30", timeout=1)
            took = time.monotonic() - start
            bg = await box.exec("kill -0 $(cat /tmp/bg) 2>/dev/null && echo alive || echo gone")
            return who, root, failing, env, slow, took, bg

    who, root, failing, env, slow, took, bg = run(go())
    assert who.stdout == "agent /home/agent /workspace" and root.stdout.strip() == "root"
    assert (failing.exit_code, failing.stdout, failing.stderr) == (3, "out\n", "err\n")
    assert env.stdout == "a b"
    assert slow.timed_out and slow.exit_code is None and took < 10
    assert bg.stdout.strip() == "gone"


@needs_engine
def test_engine_files_upload_and_ownership(tmp_path):
    (tmp_path / "repo" / "pkg").mkdir(parents=True)
    (tmp_path / "repo" / "pkg" / "m.py").write_text("X = 1\n")
    (tmp_path / "repo" / "run.sh").write_text("#!/bin/sh\necho ran\n")
    (tmp_path / "repo" / "run.sh").chmod(0o755)

    async def go():
        async with create_sandbox("docker") as box:
            await box.upload(str(tmp_path / "repo"), box.workdir, user="agent")
            await box.write_file("notes/n.txt", b"\x00bytes", user="agent", mode=0o600)
            listing = await box.exec("./run.sh; stat -c '%U %a %n' run.sh pkg/m.py notes/n.txt", user="agent")
            data = await box.read_file("notes/n.txt")
            with pytest.raises(FileNotFoundError):
                await box.read_file("/nope")
            with pytest.raises(IsADirectoryError):
                await box.read_file(box.workdir)
            return listing, data

    listing, data = run(go())
    assert listing.stdout.splitlines() == ["ran", "agent 755 run.sh", "agent 644 pkg/m.py", "agent 600 notes/n.txt"]
    assert data == b"\x00bytes"


@needs_engine
def test_engine_jobs_and_removal():
    import docker

    async def go():
        async with create_sandbox("docker") as box:
            done = await box.wait(await box.start("echo hi; exit 6", user="agent"), budget=30)
            killed = await box.wait(await box.start("echo begun; sleep 60", user="agent"), budget=2)
            left = await box.exec("ps -eo args | grep -c '[s]leep 60' || true")
            return box, done, killed, left

    box, done, killed, left = run(go())
    assert (done.exit_code, done.stdout) == (6, "hi\n")
    assert killed.timed_out and killed.stdout == "begun\n" and left.stdout.strip() == "0"
    with pytest.raises(docker.errors.NotFound):
        docker.from_env().containers.get(f"agent-code-{box.id}")


# --- what the sandbox holds (issue 12): a real container, a real relay, real host services --------

class _Answer:
    """A loopback HTTP server on this machine that answers every GET with ``text``."""

    def __init__(self, text: str) -> None:
        import http.server
        import threading

        body = text.encode()

        class Handler(http.server.BaseHTTPRequestHandler):
            def do_GET(self):  # noqa: N802
                self.send_response(200)
                self.send_header("Content-Length", str(len(body)))
                self.end_headers()
                self.wfile.write(body)

            def log_message(self, *args):
                pass

        self.server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.port = self.server.server_port
        self.url = f"http://127.0.0.1:{self.port}"
        threading.Thread(target=self.server.serve_forever, daemon=True).start()

    def close(self) -> None:
        self.server.shutdown()
        self.server.server_close()


FETCH = ("python3 -c \"import sys, urllib.request\n"
         "try:\n    print(urllib.request.urlopen(sys.argv[1], timeout=5).read().decode())\n"
         "except Exception as e:\n    print('unreachable', type(e).__name__)\" ")


RAW_GET = ("python3 -c \"import socket; s = socket.create_connection(('127.0.0.1', %d)); "
           "s.sendall(b'GET http://127.0.0.1:%d/ HTTP/1.0\\\\r\\\\n\\\\r\\\\n'); "
           "print(b''.join(iter(lambda: s.recv(4096), b'')).decode(errors='replace'))\"")


@needs_engine
def test_the_container_holds_files_network_and_privileges(tmp_path):
    """One agent in a real container: it reaches its gateway (relayed to its own loopback) and no
    other service of this machine, sees no host file, runs without privileges; what it writes
    dies with the container (a second sandbox and this machine see none of it)."""
    import secrets

    canary = secrets.token_hex(16)
    host_canary = tmp_path / "canary.txt"               # outside any workspace, world-readable
    host_canary.write_text(canary)
    host_canary.chmod(0o644)
    repo = tmp_path / "repo"
    repo.mkdir()
    (repo / "app.py").write_text("print('in the workspace')\n")
    gateway, other = _Answer("the gateway"), _Answer(f"secret {canary}")
    mark = f"written-by-{canary}"

    async def go():
        async with create_sandbox("docker") as box:
            await box.upload(str(repo), box.workdir, user="agent")
            inside = await box.expose_gateway(gateway.url)
            agent = lambda cmd: box.exec(cmd, user="agent", timeout=60)   # noqa: E731
            seen = {
                "workspace": await agent("python3 app.py"),
                "gateway": await agent(FETCH + shlex.quote(inside)),
                "gateway-keepalive": await agent(FETCH + shlex.quote(inside + "/v1/models")),
                "other-at-its-port": await agent(FETCH + shlex.quote(other.url)),
                "other-via-relay-host": await agent(RAW_GET % (gateway.port, other.port)),   # Host: the other one
                "canary": await agent(f"cat {shlex.quote(str(host_canary))} 2>&1; "
                                      f"grep -rl {canary} / --exclude-dir=proc --exclude-dir=sys --exclude-dir=usr 2>/dev/null; true"),
                "interfaces": await agent("cat /proc/net/dev"),
                "relay-socket": await agent("ls /run/agent-code 2>&1; python3 -c \"import socket; "
                                            "socket.socket(socket.AF_UNIX).connect('/run/agent-code/gateway.sock')\" "
                                            "2>&1 | tail -1"),
                "whoami": await agent("id -u; grep -E '^(CapEff|CapPrm|NoNewPrivs)' /proc/self/status"),
                "root-caps": await box.exec("grep -E '^CapBnd' /proc/self/status"),
                "mounts": await agent("cat /proc/mounts"),
                "writes": await agent(f"echo {mark} > /tmp/{mark}; echo {mark} > {box.home}/{mark}; "
                                      f"echo {mark} > {box.workdir}/{mark}; echo {mark} > /dev/shm/{mark}; "
                                      f"echo {mark} > /run/agent-code/{mark} 2>&1; ls /tmp"),
            }
        async with create_sandbox("docker") as later:
            seen["later"] = await later.exec(f"grep -rl {mark} / --exclude-dir=proc --exclude-dir=sys "
                                             "--exclude-dir=usr 2>/dev/null; true", timeout=120)
        return seen

    try:
        seen = run(go())
    finally:
        gateway.close()
        other.close()
    out = {k: v.stdout for k, v in seen.items()}
    assert out["workspace"] == "in the workspace\n"
    assert out["gateway"].strip() == out["gateway-keepalive"].strip() == "the gateway"
    assert out["other-at-its-port"].startswith("unreachable") and canary not in out["other-at-its-port"]
    assert "the gateway" in out["other-via-relay-host"] and canary not in out["other-via-relay-host"]
    assert canary not in out["canary"] and "No such file" in out["canary"]
    assert [line.split(":")[0].strip() for line in out["interfaces"].splitlines()[2:]] == ["lo"]
    assert "Permission denied" in out["relay-socket"]
    whoami = out["whoami"].split()
    assert whoami[0] != "0" and "CapEff:\t0000000000000000" in out["whoami"] and "NoNewPrivs:\t1" in out["whoami"]
    caps = {"CHOWN": 0, "DAC_OVERRIDE": 1, "FOWNER": 3, "KILL": 5, "SETGID": 6, "SETUID": 7}
    assert int(out["root-caps"].split()[-1], 16) == sum(1 << bit for bit in caps.values())   # root: only these
    host_paths = [line.split()[1] for line in out["mounts"].splitlines() if line.split()[2] in ("ext4", "xfs", "btrfs")]
    # the container's own root (vfs: a private copy of the image), docker's init and per-container
    # /etc files, and the relay's directory: nothing else of this machine's disks
    assert set(host_paths) <= {"/", "/usr/sbin/docker-init", "/run/agent-code", "/etc/resolv.conf", "/etc/hostname",
                               "/etc/hosts"}, host_paths
    assert mark in out["writes"] and seen["writes"].exit_code == 0
    assert out["later"].strip() == ""                                   # a later sandbox sees nothing
    assert not Path(f"/tmp/{mark}").exists() and not list(tmp_path.rglob(f"*{mark}*"))
    import subprocess as sp

    # a write that reached this machine is a file created or changed since the canary was written:
    # only those are read (the whole of /tmp and /root holds gigabytes of checkouts and caches)
    found = sp.run(["find", "/tmp", "/home", "/root", "/var/tmp", "/dev/shm", "/run", "-xdev", "-type", "f",
                    "-newer", str(host_canary), "-size", "-64k", "-exec", "grep", "-l", mark, "{}", "+"],
                   capture_output=True)
    assert found.stdout == b""                                          # nor this machine


@needs_engine
def test_a_missing_project_image_says_how_to_build_it(monkeypatch):
    monkeypatch.setenv("AGENT_CODE_DOCKER_IMAGE", "agent-code-sandbox:not-built")

    async def go():
        async with create_sandbox("docker"):
            pass

    with pytest.raises(SandboxError, match=r"agent-code-sandbox:not-built is not on the Docker engine.*"
                                           r"bash scripts/docker-setup\.sh"):
        run(go())


def test_the_defaults_isolate_the_container(tmp_path):
    """What every container is created with, read off the SDK call (the stand-in records it)."""
    box = DockerSandbox()
    assert box.image == "agent-code-sandbox:latest" and not box.pull     # built, never pulled
    options = box.run_options
    assert options["network_mode"] == "none" and options["cap_drop"] == ["ALL"]
    assert sorted(options["cap_add"]) == ["CHOWN", "DAC_OVERRIDE", "FOWNER", "KILL", "SETGID", "SETUID"]
    assert options["security_opt"] == ["no-new-privileges=true"] and options["pids_limit"] > 0
    assert "mem_limit" not in options and DockerSandbox(mem_limit="2g").run_options["mem_limit"] == "2g"
    assert DockerSandbox("python:3.11").pull
    assert DockerSandbox(network_mode="host").run_options["network_mode"] == "host"
    with pytest.raises(SandboxError, match="bridge on a private address range is not offered"):
        DockerSandbox(network_mode="bridge")


def test_the_runner_gives_the_task_image_to_the_agent_and_the_grader_sandboxes(tmp_path, monkeypatch):
    """A task's own ``image`` (SWE-bench style) is the docker sandbox's image (the grader's sandbox
    is made from the same options); an explicit ``docker:IMAGE`` and other sandboxes are left alone."""
    import dataclasses

    from agent_code.rollout import runner
    from agent_code.tasks import Task

    made: list[tuple[str, dict]] = []

    class Refused(Exception):
        pass

    def fake_create(spec, **options):
        made.append((spec, options))
        raise Refused("recorded")

    class Client:
        base_url = "http://127.0.0.1:1"

        async def open_session(self, *a, **k):
            return None

        async def finish(self, *a, **k):
            return []

    monkeypatch.setattr(runner, "create_sandbox", fake_create)
    repo = tmp_path / "repo"
    repo.mkdir()
    task = Task.from_dict({"id": "t", "repo": str(repo), "problem_statement": "p", "eval_cmd": "true",
                           "image": "swebench/sweb.eval.x86_64.astropy:latest"})
    assert task.image == "swebench/sweb.eval.x86_64.astropy:latest"
    for spec in ("docker", "docker:mine", "local"):   # (an error of the sandbox's making ends its rollout alone)
        result, _ = run(runner.run_rollout(task, 0, runner.RolloutConfig(sandbox=spec,
                                                                         sandbox_options={"pids_limit": 99}), Client()))
        assert result.abort_reason == "boot" and "Refused: recorded" in (result.error or ""), result
    assert made == [("docker", {"pids_limit": 99, "image": "swebench/sweb.eval.x86_64.astropy:latest"}),
                    ("docker:mine", {"pids_limit": 99}), ("local", {"pids_limit": 99})]
    assert dataclasses.replace(task, image=None).image is None


def test_the_image_and_the_harness_pin_the_same_client_dependencies():
    """The agent-code client's dependencies: baked into the image by the set-up script, installed
    from PyPI by the harness where a sandbox can download; the two lists must not drift."""
    import re

    from agent_code.harness.agent_code import CLIENT_DEPS

    script = (Path(__file__).resolve().parents[1] / "scripts" / "docker-setup.sh").read_text()
    pins = re.search(r'^PIP_PKGS="([^"]+)"', script, re.MULTILINE)
    assert pins and tuple(pins.group(1).split()) == CLIENT_DEPS


@needs_engine
def test_engine_reads_what_the_agent_leaves_bounded():
    """In a real container: a job log swapped for a FIFO, a job log made 100 GB through its own
    stdout, a symlink to /dev/zero and to a FIFO: each read ends at once, none of it whole."""
    grow = ("import os; os.write(1, b'{}\\n'); os.ftruncate(1, 100 << 30); os.lseek(1, 0, os.SEEK_END); "
            "os.write(1, b'\\nEND\\n')")

    async def go():
        async with create_sandbox("docker") as box:
            fifo_job = await box.start('for f in "$HOME"/.jobs/*.log; do rm -f "$f"; mkfifo "$f"; done', user="agent")
            started = time.monotonic()
            fifo_done = await asyncio.wait_for(box.wait(fifo_job, budget=30), 60)
            fifo_took = time.monotonic() - started
            sparse = await box.wait(await box.start(f"python3 -c {shlex.quote(grow)}", user="agent"), budget=30)
            made = await box.exec("mkfifo pipe && ln -s /dev/zero zero && ln -s pipe to-pipe", user="agent",
                                  cwd=box.home)
            assert made.ok, made.output()
            for name in ("pipe", "zero", "to-pipe"):
                with pytest.raises(SandboxError, match="not a regular file"):
                    await box.read_file(f"{box.home}/{name}")
            return fifo_done, fifo_took, sparse

    fifo_done, fifo_took, sparse = run(go())
    assert fifo_done.exit_code == 0 and fifo_done.stdout == "" and "not read" in fifo_done.stderr and fifo_took < 20
    assert sparse.exit_code == 0 and sparse.stdout == "END\n" and sparse.truncated
