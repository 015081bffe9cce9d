"""The E2B sandbox: the real ``e2b`` SDK against a local fake of E2B's wire protocol
(``fakes/e2b.py``): control-plane REST, envd's ``/files`` and its Connect ``process.Process``."""

from __future__ import annotations

import asyncio
import os
import shlex
import sys
import time
from pathlib import Path

import httpx
import pytest
from fakes.e2b import FakeE2B, marked_pids

from agent_code.sandbox import SandboxError, create_sandbox

pytest.importorskip("e2b", reason="the e2b SDK is not installed (pip install 'agent-code[remote]')")


@pytest.fixture(scope="module")
def fake():
    with FakeE2B(api_key="e2b_test_key") as server:
        yield server


def e2b(fake: FakeE2B, **options):
    return create_sandbox("e2b", api_key=fake.api_key, api_url=fake.api_url, sandbox_url=fake.sandbox_url,
                          **options)


def run(coro):
    return asyncio.run(coro)


def alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    try:
        state = Path(f"/proc/{pid}/stat").read_text().rpartition(") ")[2][:1]
    except OSError:
        return False
    return state not in ("Z", "X")  # a zombie is dead, just not reaped yet


def test_exec_exit_codes_output_env_cwd_and_users(fake):
    async def go():
        async with e2b(fake) as box:
            failing = await box.exec("echo out; echo err >&2; exit 3", user="agent")
            env = await box.exec('printf "%s|%s|%s" "$USER" "$GREETING" "$PWD"', user="agent",
                                 env={"GREETING": "hi there"})
            root = await box.exec('printf "%s|%s" "$USER" "$PWD"', user="root", cwd=box.home)
            argv = await box.exec(["printf", "%s\n", "a b", "$HOME", "it's"])
            return box, failing, env, root, argv

    box, failing, env, root, argv = run(go())
    assert (failing.exit_code, failing.stdout, failing.stderr, failing.ok) == (3, "out\n", "err\n", False)
    assert env.ok and env.stdout == f"user|hi there|{box.workdir}"  # E2B's `user` is our agent
    assert box.workdir == f"{box.home}/workspace" and box.home.endswith("/home/user")
    assert root.stdout == f"root|{box.home}"
    assert argv.stdout == "a b\n$HOME\nit's\n"  # an argv list is quoted, not re-split


def test_exec_timeout_kills_the_whole_command(fake):
    async def go():
        async with e2b(fake) as box:
            start = time.monotonic()
            r = await box.exec("sleep 30 & echo $! > bg.pid; echo partial; sleep 30", user="agent", timeout=1)
            took = time.monotonic() - start
            pid = int((await box.read_file("bg.pid")).decode())
            await asyncio.sleep(0.2)
            return r, took, alive(pid)

    r, took, bg_alive = run(go())
    assert r.exit_code is None and r.timed_out and not r.ok
    assert 1 <= took < 5 and 1 <= r.duration < 5
    assert not bg_alive  # the background child went with its group


def test_files_write_read_and_modes(fake):
    async def go():
        async with e2b(fake) as box:
            await box.write_file("notes/deep/a.txt", "héllo\n", user="agent")
            await box.write_file(f"{box.home}/bin/run.sh", b"#!/bin/sh\necho ran\x00\xff\n", user="agent", mode=0o755)
            ran = await box.exec(f"{box.home}/bin/run.sh | head -c 3; cat notes/deep/a.txt", user="agent")
            text = await box.read_file(f"{box.workdir}/notes/deep/a.txt")
            binary = await box.read_file(f"{box.home}/bin/run.sh")
            with pytest.raises(FileNotFoundError):
                await box.read_file("missing.txt")
            mode = os.stat(f"{box.home}/bin/run.sh").st_mode & 0o777
            return ran, text, binary, mode

    ran, text, binary, mode = run(go())
    assert ran.stdout == "ranhéllo\n"
    assert text == "héllo\n".encode() and binary == b"#!/bin/sh\necho ran\x00\xff\n" and mode == 0o755


def test_upload_a_directory_and_a_file(fake, tmp_path):
    repo = tmp_path / "repo"
    (repo / "pkg" / "empty").mkdir(parents=True)
    (repo / "pkg" / "mod.py").write_text("X = 1\n")
    (repo / "run.sh").write_text("#!/bin/sh\necho script ran\n")
    (repo / "run.sh").chmod(0o755)
    (repo / "link").symlink_to("pkg/mod.py")
    (tmp_path / "single.txt").write_text("just one\n")

    async def go():
        async with e2b(fake) as box:
            await box.upload(str(repo), box.workdir, user="agent")
            await box.upload(str(tmp_path / "single.txt"), "docs/single.txt", user="agent")
            listing = await box.exec("find . -mindepth 1 | sort; ./run.sh; cat link docs/single.txt", user="agent")
            leftovers = await box.exec("ls -A ~ | grep upload || true", user="agent")
            return listing, leftovers

    listing, leftovers = run(go())
    assert listing.ok, listing.output()
    assert listing.stdout.splitlines() == [
        "./docs", "./docs/single.txt", "./link", "./pkg", "./pkg/empty", "./pkg/mod.py", "./run.sh",
        "script ran", "X = 1", "just one"]
    assert leftovers.stdout == ""  # the staged archive was removed


def test_detached_jobs_finish_or_are_killed_at_the_budget(fake):
    async def go():
        async with e2b(fake) as box:
            quick = await box.start("echo started; echo to-stderr >&2; exit 5", user="agent")
            done = await box.wait(quick, budget=10)
            slow = await box.start("echo begun; exec sleep 30", user="agent")
            start = time.monotonic()
            killed = await box.wait(slow, budget=1)
            took = time.monotonic() - start
            await asyncio.sleep(0.2)
            return done, killed, took, slow.handle, alive(slow.handle)

    done, killed, took, pid, still_alive = run(go())
    assert (done.exit_code, done.timed_out) == (5, False) and done.stdout == "started\nto-stderr\n"
    assert killed.exit_code is None and killed.timed_out and killed.stdout == "begun\n"
    assert took < 4 and pid > 0 and not still_alive


def test_leaving_the_context_deletes_the_sandbox_and_its_processes(fake):
    async def go():
        async with e2b(fake) as box:
            job = await box.start("sleep 30", user="agent")
            sandbox_id = box.sandbox_id
            assert sandbox_id in fake.sandboxes and marked_pids(sandbox_id)
            root = fake.sandboxes[sandbox_id].root
        return sandbox_id, root, job

    sandbox_id, root, job = run(go())
    assert sandbox_id in fake.deleted and sandbox_id not in fake.sandboxes
    assert ("DELETE", f"/sandboxes/{sandbox_id}") in fake.requests
    assert not root.exists() and not marked_pids(sandbox_id) and not alive(job.handle)


def test_bad_api_key_is_a_clear_error(fake):
    before = set(fake.sandboxes)

    async def go():
        async with create_sandbox("e2b", api_key="e2b_wrong", api_url=fake.api_url, sandbox_url=fake.sandbox_url):
            pass

    with pytest.raises(SandboxError) as caught:
        run(go())
    message = str(caught.value)
    assert "could not create a sandbox" in message and "401" in message and "Invalid API key" in message
    assert fake.api_url in message
    assert set(fake.sandboxes) == before


def test_unknown_template_is_a_clear_error(fake):
    # (An unreachable API is not tried here: pyqwest 0.12, under the SDK, sometimes aborts the
    # interpreter at exit after a refused connection, which would take pytest down with it.)
    async def go():
        async with e2b(fake, template="no-such-template"):
            pass

    with pytest.raises(SandboxError, match="template 'no-such-template'.*404.*not found"):
        run(go())


def test_the_fake_answers_like_e2b(fake):
    """The fake itself, raw: E2B's error shapes for bad keys, unknown sandboxes, bad envd tokens."""
    api = httpx.Client(base_url=fake.api_url)
    envd = httpx.Client(base_url=fake.sandbox_url)
    no_key = api.post("/v2/sandboxes", json={"templateID": "base"})
    bad_key = api.post("/v2/sandboxes", json={"templateID": "base"}, headers={"X-API-KEY": "nope"})
    assert (no_key.status_code, bad_key.status_code) == (401, 401)
    assert bad_key.json()["code"] == 401 and "Invalid API key" in bad_key.json()["message"]
    key = {"X-API-KEY": fake.api_key}
    assert api.delete("/sandboxes/does-not-exist", headers=key).status_code == 404
    created = api.post("/sandboxes", json={"templateID": "base"}, headers=key)
    assert created.status_code == 201
    sandbox = created.json()
    assert {"sandboxID", "envdVersion", "envdAccessToken", "templateID", "clientID"} <= set(sandbox)
    routed = {"E2b-Sandbox-Id": sandbox["sandboxID"], "E2b-Sandbox-Port": "49983"}
    assert envd.get("/health", headers={**routed, "X-Access-Token": "wrong"}).status_code == 401
    assert envd.get("/health", headers={**routed, "X-Access-Token": sandbox["envdAccessToken"]}).status_code == 204
    assert envd.get("/health", headers={"E2b-Sandbox-Id": "unknown"}).status_code == 502
    proto = envd.post("/process.Process/Start", content=b"", headers={
        **routed, "X-Access-Token": sandbox["envdAccessToken"], "Content-Type": "application/connect+proto"})
    assert proto.status_code == 415  # JSON codec only, like the SDK
    assert api.delete(f"/sandboxes/{sandbox['sandboxID']}", headers=key).status_code == 204
    assert api.get(f"/sandboxes/{sandbox['sandboxID']}", headers=key).status_code == 404


# --- the gateway: a cloud VM cannot reach this machine's loopback ---------------------------------

@pytest.mark.parametrize("url", ["http://127.0.0.1:8000", "http://localhost:8000/", "http://[::1]:9000",
                                 "http://0.0.0.0:8000", "http://127.3.4.5:80"])
def test_a_loopback_gateway_is_refused_with_what_to_do(fake, monkeypatch, url):
    monkeypatch.delenv("AGENT_CODE_E2B_GATEWAY_URL", raising=False)

    async def go():
        async with e2b(fake) as box:
            return await box.expose_gateway(url)

    with pytest.raises(SandboxError) as caught:
        run(go())
    message = str(caught.value)
    assert url in message and "E2B's cloud" in message
    assert "AGENT_CODE_E2B_GATEWAY_URL" in message and "gateway_url" in message


def test_the_public_gateway_url_given_is_what_the_agent_uses(fake, monkeypatch):
    """The user's public URL (option, else env var) replaces the loopback one; a gateway that is
    already public is used as it is; a public URL that is loopback after all is refused."""
    monkeypatch.setenv("AGENT_CODE_E2B_GATEWAY_URL", "https://gw.example.org:8443/base")

    async def go():
        async with e2b(fake) as from_env, e2b(fake, gateway_url="http://203.0.113.7:8000") as from_option:
            got = (await from_env.expose_gateway("http://127.0.0.1:8000"),
                   await from_option.expose_gateway("http://127.0.0.1:8000"))
        monkeypatch.delenv("AGENT_CODE_E2B_GATEWAY_URL")
        async with e2b(fake) as plain:
            got += (await plain.expose_gateway("http://gateway.internal:8000"),)
        async with e2b(fake, gateway_url="http://localhost:8000") as wrong:
            with pytest.raises(SandboxError, match="local to this machine"):
                await wrong.expose_gateway("http://127.0.0.1:8000")
        return got

    assert run(go()) == ("https://gw.example.org:8443/base", "http://203.0.113.7:8000", "http://gateway.internal:8000")


def test_the_agent_reaches_the_public_gateway_url_from_the_sandbox(fake, monkeypatch):
    """Through the fake (whose commands run on this machine) the agent's command reaches the URL
    it was given: here a test server standing in for the public gateway."""
    import http.server
    import threading

    class Hello(http.server.BaseHTTPRequestHandler):
        def do_GET(self):  # noqa: N802
            self.send_response(200)
            self.end_headers()
            self.wfile.write(b"gateway here")

        def log_message(self, *args):
            pass

    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Hello)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    # the fake's "cloud" is this machine, so a loopback address stands in for a public one here
    monkeypatch.setattr("agent_code.sandbox.e2b.is_local_url", lambda url: False)
    try:
        async def go():
            async with e2b(fake, gateway_url=f"http://127.0.0.1:{server.server_port}") as box:
                inside = await box.expose_gateway("http://127.0.0.1:1")
                return inside, await box.exec(
                    f"python3 -c \"import urllib.request; print(urllib.request.urlopen('{inside}').read().decode())\"",
                    user="agent", timeout=30)

        inside, reached = run(go())
    finally:
        server.shutdown()
    assert inside == f"http://127.0.0.1:{server.server_port}" and reached.stdout.strip() == "gateway here"


def test_what_the_agent_leaves_in_its_jobs_and_home_is_read_bounded(fake):
    """PollingJobs read through a command in the box: a job log swapped for a FIFO, a job log made
    100 GB through its own stdout, a symlink to /dev/zero and to a FIFO: each read ends at once,
    none of it whole; a regular file (the control) reads as before."""
    grow = ("import os; os.write(1, b'{}\\n'); os.ftruncate(1, 100 << 30); os.lseek(1, 0, os.SEEK_END); "
            "os.write(1, b'\\nEND\\n')")

    async def go():
        async with e2b(fake) as box:
            fifo_job = await box.start('for f in "$HOME"/.jobs/*.log; do rm -f "$f"; mkfifo "$f"; done', user="agent")
            started = time.monotonic()
            fifo_done = await asyncio.wait_for(box.wait(fifo_job, budget=30), 40)
            fifo_took = time.monotonic() - started
            sparse = await box.wait(await box.start(f"{sys.executable} -c {shlex.quote(grow)}", user="agent"), budget=30)
            made = await box.exec("mkfifo pipe && ln -s /dev/zero zero && ln -s pipe to-pipe && echo hi > real",
                                  user="agent", cwd=box.home)
            assert made.ok, made.output()
            refused = {}
            for name in ("pipe", "zero", "to-pipe"):
                started = time.monotonic()
                with pytest.raises(SandboxError, match="not a regular file"):
                    await box.read_file(f"{box.home}/{name}")
                refused[name] = time.monotonic() - started
            with pytest.raises(IsADirectoryError):
                await box.read_file(box.home)
            tail = await box.read_tail(f"{box.home}/real", 2)
            return fifo_done, fifo_took, sparse, refused, await box.read_file(f"{box.home}/real"), tail

    fifo_done, fifo_took, sparse, refused, real, tail = run(go())
    assert fifo_done.exit_code == 0 and fifo_done.stdout == "" and "not read" in fifo_done.stderr and fifo_took < 10
    assert sparse.exit_code == 0 and sparse.stdout == "END\n" and sparse.truncated
    assert max(refused.values()) < 10, refused
    assert real == b"hi\n" and (tail.data, tail.cut) == (b"i\n", 1)
