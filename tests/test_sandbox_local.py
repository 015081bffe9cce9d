"""The local sandbox: real subprocesses, real namespaces (as root), the real process table."""

from __future__ import annotations

import asyncio
import os
import sys
from pathlib import Path

import pytest

from agent_code.sandbox import SandboxError, create_sandbox
from agent_code.sandbox.local import MARKER, isolation_available
from rollout_fixtures import processes_with_env

isolated_only = pytest.mark.skipif(not isolation_available(), reason="needs root with unshare/setpriv/prlimit")


def run(coro):
    return asyncio.run(coro)


def marked_processes(sandbox_id: str) -> list[int]:
    """Host pids carrying this sandbox's marker: its processes, wherever they went."""
    return processes_with_env(f"{MARKER}={sandbox_id}")


def test_commands_run_in_the_workspace_with_a_minimal_environment(monkeypatch):
    monkeypatch.setenv("AGENT_CODE_TEST_SECRET", "hunter2")

    async def go():
        async with create_sandbox("local") as box:
            r = await box.exec("pwd; echo $HOME; env", user="agent", env={"EXTRA": "1"})
            return box, r

    box, r = run(go())
    lines = r.stdout.splitlines()
    assert r.exit_code == 0 and lines[0] == box.workdir and lines[1] == box.home
    assert "EXTRA=1" in lines and "hunter2" not in r.stdout  # the caller's env, nothing of the host's
    assert not Path(box.workdir).exists()  # removed on exit


def test_exit_codes_stderr_and_files():
    async def go():
        async with create_sandbox("local") as box:
            await box.write_file("notes/a.txt", "hello\n", user="agent")
            r1 = await box.exec("cat notes/a.txt; echo oops >&2; exit 7", user="agent")
            r2 = await box.exec("echo changed > notes/a.txt", user="agent")
            return r1, r2, await box.read_file("notes/a.txt")

    r1, r2, data = run(go())
    assert (r1.exit_code, r1.stdout, r1.stderr) == (7, "hello\n", "oops\n")
    assert r2.ok and data == b"changed\n"  # the agent owns what was written for it


def test_timeout_kills_the_whole_group():
    async def go():
        async with create_sandbox("local") as box:
            r = await box.exec("sleep 300 & sleep 300 & wait", user="agent", timeout=1)
            left = marked_processes(box.id)
            return r, left

    r, left = run(go())
    assert r.timed_out and r.exit_code is None and 0.9 < r.duration < 5
    assert left == []


def test_detached_job_finishes_or_is_killed_at_its_budget():
    async def go():
        async with create_sandbox("local") as box:
            done = await box.wait(await box.start("echo working; exit 4", user="agent"), budget=10)
            hung = await box.start("echo started; sleep 600", user="agent")
            killed = await box.wait(hung, budget=1)
            return box, done, killed, marked_processes(box.id), Path(hung.marker_path).read_text()

    box, done, killed, left, marker = run(go())
    assert (done.exit_code, done.stdout) == (4, "working\n")
    assert killed.timed_out and killed.exit_code is None and killed.stdout == "started\n"
    assert left == [] and marker.strip() == "killed"


def test_daemons_do_not_outlive_the_sandbox():
    async def go():
        async with create_sandbox("local") as box:
            await box.exec("setsid nohup sleep 600 >/dev/null 2>&1 &", user="agent", timeout=10)
            sandbox_id = box.id
        return sandbox_id

    assert marked_processes(run(go())) == []


def test_unknown_user_and_closed_sandbox_are_clear_errors():
    async def go():
        box = create_sandbox("local")
        with pytest.raises(SandboxError, match="not open"):
            await box.exec("true")
        async with box:
            with pytest.raises(SandboxError, match="unknown sandbox user"):
                await box.exec("true", user="admin")

    run(go())
    with pytest.raises(SandboxError, match="unknown sandbox"):
        create_sandbox("vm")


@isolated_only
def test_the_agent_is_an_unprivileged_user_of_its_own():
    async def go():
        async with create_sandbox("local") as a, create_sandbox("local") as b:
            ra = await a.exec("id -u; id -un; touch /etc/agent-code-test 2>&1; cat /proc/1/environ >/dev/null 2>&1;"
                              " echo $?", user="agent")
            rb = await b.exec("id -u", user="agent")
            root = await a.exec("id -u")
            return a, ra, rb, root

    a, ra, rb, root = run(go())
    uid, name, *rest = ra.stdout.splitlines()
    assert int(uid) == a.uid != 0 and name == "agent"
    assert "Read-only file system" in ra.stdout and not Path("/etc/agent-code-test").exists()
    assert rb.stdout.strip() != uid  # two sandboxes, two users
    assert root.stdout.strip() == "0"


@isolated_only
def test_hidden_paths_are_empty_for_the_agent_and_provided_ones_reachable(tmp_path):
    secret_dir = tmp_path / "hidden"
    secret_dir.mkdir()
    (secret_dir / "answers.txt").write_text("the hidden tests")
    os.chmod(tmp_path, 0o755)

    async def go():
        async with create_sandbox("local", hide=[str(secret_dir)]) as box:
            for path in {sys.prefix, sys.base_prefix}:
                box.provide(path)
            seen = await box.exec(f"ls -A {secret_dir}; cat {secret_dir}/answers.txt", user="agent")
            py = await box.exec(f"{sys.executable} -c 'import json; print(json.dumps([1]))'", user="agent")
            as_root = await box.exec(f"cat {secret_dir}/answers.txt")
            return seen, py, as_root

    seen, py, as_root = run(go())
    assert seen.exit_code != 0 and "the hidden tests" not in seen.stdout
    assert py.ok and py.stdout.strip() == "[1]", py.output()
    assert as_root.stdout == "the hidden tests"


@isolated_only
def test_uploaded_trees_can_be_given_to_the_agent(tmp_path):
    repo = tmp_path / "repo"
    (repo / "pkg").mkdir(parents=True)
    (repo / "pkg" / "mod.py").write_text("x = 1\n")

    async def go():
        async with create_sandbox("local") as box:
            await box.upload(str(repo), box.workdir)
            denied = await box.exec("echo y = 2 >> pkg/mod.py", user="agent")
            await box.give_to_agent(box.workdir)
            allowed = await box.exec("echo y = 2 >> pkg/mod.py && cat pkg/mod.py", user="agent")
            return denied, allowed

    denied, allowed = run(go())
    assert not denied.ok
    assert allowed.ok and allowed.stdout == "x = 1\ny = 2\n"


@isolated_only
def test_a_sandbox_under_a_private_dir_beside_hidden_ones(tmp_path):
    private = tmp_path / "private"              # 0700: the agent user may not pass through
    (private / "secret").mkdir(parents=True)
    (private / "secret" / "key.txt").write_text("k")
    os.chmod(private, 0o700)

    async def go():
        async with create_sandbox("local", base_dir=str(private), hide=[str(private / "secret")]) as box:
            work = await box.exec("echo ok > f.txt && cat f.txt && ls ~", user="agent")
            peek = await box.exec(f"ls {private}; cat {private}/secret/key.txt", user="agent")
            return work, peek

    work, peek = run(go())
    assert work.ok and work.stdout.startswith("ok\n"), work.output()
    assert "secret" not in peek.stdout and "k" != peek.stdout.strip()
