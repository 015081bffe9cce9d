"""What the orchestrator reads out of a sandbox is the agent's to shape: one rollout must never stall,
starve or bloat the run (the harness process, its event loop, the sibling rollouts).

The attacks (each shown to earn its effect on the code before the caps):

* a FIFO (or a symlink to one) where the harness reads the agent's stderr blocked the event loop
  forever (``open`` waits for a writer): here a watchdog thread plays the writer after a few seconds,
  so the unfixed code shows a multi-second stall instead of hanging the test;
* a huge sparse file (no disk used) at the stderr path, or made of the job's own log through its
  stdout (``lseek``/``ftruncate`` on fd 1), was read whole into memory: here the test runs under an
  address-space ceiling, so the unfixed code fails with ``MemoryError`` instead of taking the machine;
* a command's output was collected whole (``communicate``);
* thousands of connections to the gateway relay's socket each held two of the orchestrator's fds
  and a gateway connection.

Real parts throughout: the real LocalSandbox (isolated: we run as root), the real harness code path
(:meth:`CliHarness.run`), a real loopback HTTP server behind the real relay, real subprocesses.
"""

from __future__ import annotations

import asyncio
import contextlib
import os
import re
import resource
import shlex
import stat
import subprocess
import sys
import threading
import time
from pathlib import Path
from typing import Any, Awaitable, Iterator, TypeVar

import pytest

from agent_code.harness.base import CliHarness, Launch
from agent_code.sandbox.local import LocalSandbox, isolation_available

T = TypeVar("T")
isolated_only = pytest.mark.skipif(not isolation_available(), reason="needs root with unshare")
GIB = 1 << 30


def run(coro: Awaitable[T]) -> T:
    return asyncio.run(coro)  # type: ignore[arg-type]


class ShellHarness(CliHarness):
    """A 'CLI agent' that is a shell script: the attacker's moves, through the harness's own path."""

    name = "shell"

    def __init__(self, script: str) -> None:
        self.script = script

    async def install(self, box: Any) -> None:
        pass

    def command(self, launch: Launch) -> str:
        return self.script.replace("STDERR", shlex.quote(launch.stderr_path))

    def env(self, launch: Launch) -> dict[str, str]:
        return {}


def launch_for(box: LocalSandbox) -> Launch:
    return Launch(base_url="http://127.0.0.1:9", session_id="s", model="m", prompt="do it", workdir=box.workdir,
                  home=box.home)


async def responsive(work: Awaitable[T]) -> tuple[T, float]:
    """``work``'s result and the longest the event loop went without running a 50 ms ticker."""
    gaps = [0.0]
    done = asyncio.Event()

    async def tick() -> None:
        last = time.monotonic()
        while not done.is_set():
            await asyncio.sleep(0.05)
            now = time.monotonic()
            gaps[0] = max(gaps[0], now - last)
            last = now

    ticker = asyncio.create_task(tick())
    try:
        result = await work
    finally:
        done.set()
        await ticker
    return result, gaps[0]


@contextlib.contextmanager
def fifo_unblocker(pattern: str, after: float = 4.0) -> Iterator[list[str]]:
    """After ``after`` s, open for writing (then close) every FIFO whose path matches the glob
    ``pattern``: a reader stuck opening one (the unfixed code) gets EOF, so the test fails on the
    stall it measured instead of hanging. Yields the FIFOs it had to unblock."""
    unblocked: list[str] = []
    stop = threading.Event()

    def loop() -> None:
        if stop.wait(after):
            return
        while not stop.is_set():
            for path in map(str, Path("/").glob(pattern.lstrip("/"))):
                with contextlib.suppress(OSError):
                    if stat.S_ISFIFO(os.lstat(path).st_mode):
                        os.close(os.open(path, os.O_WRONLY | os.O_NONBLOCK))   # ENXIO while no reader
                        unblocked.append(path)
            stop.wait(0.05)

    thread = threading.Thread(target=loop, daemon=True)
    thread.start()
    try:
        yield unblocked
    finally:
        stop.set()
        thread.join(5)


def run_watched(harness: CliHarness, pattern: str) -> tuple[Any, float, list[str]]:
    """``harness`` run in a fresh sandbox while the event loop is timed and any FIFO matching
    ``pattern`` (under the agent's home) that a reader waits on is unblocked: (the run, the
    longest stall, the FIFOs that had to be unblocked)."""
    async def go():
        async with LocalSandbox() as box:
            with fifo_unblocker(f"{box.home}/{pattern}") as unblocked:
                agent_run, gap = await responsive(harness.run(box, launch_for(box), budget=30))
            return agent_run, gap, unblocked

    return run(go())


@contextlib.contextmanager
def memory_ceiling(extra: int = GIB) -> Iterator[None]:
    """This process may map only ``extra`` bytes more than it has now (RLIMIT_AS): code that reads a
    100 GB file whole fails with MemoryError instead of taking the machine with it."""
    soft, hard = resource.getrlimit(resource.RLIMIT_AS)
    match = re.search(r"VmSize:\s+(\d+) kB", Path("/proc/self/status").read_text())
    assert match
    resource.setrlimit(resource.RLIMIT_AS, (int(match[1]) * 1024 + extra, hard))
    try:
        yield
    finally:
        resource.setrlimit(resource.RLIMIT_AS, (soft, hard))


# --- the attacks, through the harness ----------------------------------------------------------------

@isolated_only
def test_a_fifo_at_the_stderr_path_does_not_stall_the_orchestrator():
    """The agent swaps its stderr file for a FIFO and exits: reading it must not wait for a writer."""
    harness = ShellHarness("rm -f STDERR && mkfifo STDERR && echo '{\"type\":\"result\"}'")
    agent_run, gap, unblocked = run_watched(harness, ".agent-stderr.log")
    assert unblocked == [] and gap < 1.0, f"the event loop stalled {gap:.1f} s on the FIFO"
    assert agent_run.exit_code == 0 and agent_run.log == '{"type":"result"}\n'


@isolated_only
def test_a_sparse_100_gb_stderr_file_is_read_in_o_cap():
    harness = ShellHarness("echo '{\"type\":\"result\"}'; echo first >&2; truncate -s 100G STDERR; "
                           "echo LAST-LINE >> STDERR")

    async def go():
        async with LocalSandbox() as box:
            with memory_ceiling():
                started = time.monotonic()
                agent_run = await harness.run(box, launch_for(box), budget=30)
            return agent_run, time.monotonic() - started

    agent_run, took = run(go())
    assert agent_run.stderr.endswith("LAST-LINE\n"), agent_run.stderr[-200:]   # the tail is what matters
    assert len(agent_run.stderr.encode()) <= 2 << 20 and took < 15
    assert agent_run.log == '{"type":"result"}\n'


@isolated_only
def test_a_sparse_100_gb_job_log_made_through_stdout_is_read_in_o_cap():
    """The job log is root's (the agent cannot replace it), but the agent holds it open as its
    stdout: ``ftruncate`` and ``lseek`` make it 100 GB without a byte of disk."""
    py = ("import os; os.write(1, b'{\"type\":\"system\"}\\n'); os.ftruncate(1, 100 << 30); "
          "os.lseek(1, 0, os.SEEK_END); os.write(1, b'\\n{\"type\":\"result\"}\\n')")
    harness = ShellHarness(f"{shlex.quote(sys.executable)} -c {shlex.quote(py)}")

    async def go():
        async with LocalSandbox() as box:
            with memory_ceiling():
                started = time.monotonic()
                agent_run = await harness.run(box, launch_for(box), budget=30)
            return agent_run, time.monotonic() - started

    agent_run, took = run(go())
    assert agent_run.exit_code == 0, agent_run
    # the log's tail, from its first whole line: what the agent wrote last, and nothing of the hole
    assert agent_run.log == '{"type":"result"}\n' and agent_run.log_truncated
    assert took < 15


@isolated_only
def test_a_command_flooding_its_output_is_kept_to_a_head_and_a_tail():
    async def go():
        async with LocalSandbox() as box:
            return await box.exec("echo FIRST; head -c 40000000 /dev/zero | tr '\\0' x; echo; echo LAST",
                                  user="agent", timeout=60)

    result = run(go())
    assert result.ok and result.stdout.startswith("FIRST\n") and result.stdout.endswith("\nLAST\n")
    assert len(result.stdout) <= 17 << 20, f"{len(result.stdout)} bytes of stdout kept"
    assert getattr(result, "truncated", False)


# --- the relay -----------------------------------------------------------------------------------------

class _Gateway:
    """A loopback HTTP server in this process's event loop (as the in-process gateway is): answers
    every request ``200 ok``, counts the connections it holds."""

    def __init__(self) -> None:
        self.open = 0
        self.server: asyncio.AbstractServer | None = None

    async def _handle(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        self.open += 1
        try:
            while (line := await reader.readline()) not in (b"", b"\r\n", b"\n"):
                pass
            if line:
                writer.write(b"HTTP/1.1 200 OK\r\ncontent-length: 2\r\nconnection: close\r\n\r\nok")
                await writer.drain()
        except (ConnectionError, OSError):
            pass
        finally:
            writer.close()
            self.open -= 1

    async def __aenter__(self) -> "_Gateway":
        self.server = await asyncio.start_server(self._handle, "127.0.0.1", 0)
        return self

    async def __aexit__(self, *exc: object) -> None:
        assert self.server is not None
        self.server.close()

    @property
    def url(self) -> str:
        assert self.server is not None
        return f"http://127.0.0.1:{self.server.sockets[0].getsockname()[1]}"


async def _get(sock_path: Path) -> bytes:
    reader, writer = await asyncio.open_unix_connection(str(sock_path))
    writer.write(b"GET /v1/models HTTP/1.1\r\nHost: x\r\n\r\n")
    try:
        return await asyncio.wait_for(reader.read(), 10)
    finally:
        writer.close()


FLOOD = """
import socket, sys, time
held = []
for _ in range(int(sys.argv[2])):
    s = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    try:
        s.connect(sys.argv[1])
    except OSError:
        s.close()
        continue
    held.append(s)
print(len(held), flush=True)
sys.stdin.read()
"""


def _fds() -> int:
    return len(os.listdir("/proc/self/fd"))


def test_a_flood_of_connections_to_the_relay_keeps_the_orchestrators_fds_bounded(tmp_path):
    """2000 connections held open through one sandbox's relay socket (the agent may connect to it
    directly): the orchestrator's fds and the gateway's connections stay bounded, a sibling
    sandbox's relay answers meanwhile, and the flooded relay answers again once the flood ends."""
    from agent_code.sandbox.relay import GatewayRelay

    async def go():
        async with _Gateway() as gateway:
            async with GatewayRelay(gateway.url, tmp_path / "a.sock") as flooded, \
                    GatewayRelay(gateway.url, tmp_path / "b.sock"):
                before = _fds()
                flood = await asyncio.create_subprocess_exec(
                    sys.executable, "-c", FLOOD, str(tmp_path / "a.sock"), "2000",
                    stdin=subprocess.PIPE, stdout=subprocess.PIPE)
                assert flood.stdout is not None and flood.stdin is not None
                await asyncio.wait_for(flood.stdout.readline(), 60)
                await asyncio.sleep(1.0)   # the relay accepts and connects what it will
                grown, held_by_gateway = _fds() - before, gateway.open
                sibling = await _get(tmp_path / "b.sock")
                flood.stdin.close()
                await flood.wait()
                await asyncio.sleep(0.5)
                again = await _get(tmp_path / "a.sock")
                return grown, held_by_gateway, sibling, again, flooded

    grown, held_by_gateway, sibling, again, flooded = run(go())
    assert grown <= 3 * 64 + 16, f"the orchestrator holds {grown} more fds during the flood"
    assert held_by_gateway <= 64, f"the gateway holds {held_by_gateway} connections of one sandbox"
    assert sibling.endswith(b"\r\n\r\nok") and again.endswith(b"\r\n\r\nok")


# --- variants: whatever the agent leaves where the orchestrator reads --------------------------------

NOT_READ = "[agent-code: the agent's stderr file was not read"


@isolated_only
@pytest.mark.parametrize("move", [
    "rm -f STDERR && mkfifo $HOME/pipe && ln -s $HOME/pipe STDERR",      # a symlink to a FIFO
    "rm -f STDERR && ln -s /dev/zero STDERR",
    "rm -f STDERR && ln -s /dev/urandom STDERR",
    "rm -f STDERR && ln -s /proc/self/fd/0 STDERR",
    "rm -f STDERR && mkdir STDERR",
    "rm -f STDERR && python -c 'import socket,sys; socket.socket(socket.AF_UNIX).bind(sys.argv[1])' STDERR",
    "rm -f STDERR && mkdir $HOME/d && mkfifo $HOME/d/x && ln -s $HOME/d $HOME/dirlink && "
    "ln -s $HOME/dirlink/x STDERR",                                      # through a symlinked directory
], ids=["symlink-to-fifo", "dev-zero", "dev-urandom", "proc-fd", "directory", "socket", "symlinked-dir"])
def test_whatever_the_agent_puts_at_the_stderr_path_is_not_read_and_stalls_nothing(move):
    harness = ShellHarness(f"{move}; echo '{{\"type\":\"result\"}}'")
    agent_run, gap, unblocked = run_watched(harness, "**/*")
    assert unblocked == [] and gap < 1.0, f"the event loop stalled {gap:.1f} s"
    assert agent_run.exit_code == 0 and agent_run.log == '{"type":"result"}\n', agent_run
    assert agent_run.stderr.startswith(NOT_READ), agent_run.stderr[:300]


@isolated_only
def test_the_sandboxs_own_reads_refuse_every_kind_of_file_but_a_regular_one(tmp_path):
    """read_file / read_tail straight on a sandbox: each kind the agent can make (and a device
    node, which only root can), refused at once; a regular file through a symlinked directory too."""
    from agent_code.sandbox.base import SandboxError

    async def go():
        async with LocalSandbox() as box:
            home = Path(box.home)
            made = await box.exec("mkfifo fifo && ln -s /dev/zero zero && ln -s fifo to-fifo && mkdir dir && "
                                  "echo secret > real && ln -s real to-real && ln -s /etc etc && "
                                  "truncate -s 100G sparse", user="agent", cwd=box.home)
            assert made.ok, made.output()
            os.mknod(home / "device", stat.S_IFCHR | 0o666, os.makedev(1, 5))   # /dev/zero's twin
            outcomes: dict[str, str] = {}
            with fifo_unblocker(f"{box.home}/*") as unblocked:
                for name in ("fifo", "zero", "to-fifo", "device", "dir", "to-real", "etc/passwd", "sparse", "gone"):
                    for how, read in (("file", box.read_file(f"{home}/{name}")),
                                      ("tail", box.read_tail(f"{home}/{name}", 1024))):
                        started = time.monotonic()
                        try:
                            got = await read
                            outcomes[f"{how}:{name}"] = f"read {len(getattr(got, 'data', got))}"
                        except (SandboxError, OSError) as exc:
                            outcomes[f"{how}:{name}"] = type(exc).__name__
                        assert time.monotonic() - started < 2, (how, name)
            tail = await box.read_tail(f"{home}/sparse", 1024)
            return outcomes, unblocked, tail, await box.read_file(f"{home}/real")

    outcomes, unblocked, tail, real = run(go())
    assert unblocked == []
    for name in ("fifo", "zero", "to-fifo", "device", "to-real", "etc/passwd"):
        assert outcomes[f"file:{name}"] == outcomes[f"tail:{name}"] == "SandboxError", (name, outcomes)
    assert outcomes["file:dir"] == outcomes["tail:dir"] == "IsADirectoryError"
    assert outcomes["file:gone"] == outcomes["tail:gone"] == "FileNotFoundError"
    assert outcomes["file:sparse"] == "SandboxError"      # too large to read whole: said, not read
    assert tail.data == b"\0" * 1024 and tail.cut == (100 << 30) - 1024
    assert real == b"secret\n"                            # the control: a regular file reads as before


def test_a_file_still_growing_while_read_is_read_up_to_the_size_it_had(tmp_path):
    """``yes > file`` still running: the tail is read in bounded time and bytes, never chased."""
    from agent_code.sandbox.untrusted import read_capped

    grow = tmp_path / "grow.log"
    writer = subprocess.Popen(["sh", "-c", f"exec yes > {grow}"])
    try:
        while not grow.exists() or grow.stat().st_size < (64 << 20):
            time.sleep(0.05)
        started = time.monotonic()
        capped = read_capped(grow, head=1 << 20, tail=1 << 20, base=tmp_path)
        took = time.monotonic() - started
    finally:
        writer.kill()
        writer.wait()
    assert took < 2 and len(capped.data) == 2 << 20 and capped.cut >= 60 << 20
    assert set(capped.data) == {ord("y"), ord("\n")}


@isolated_only
def test_a_flooding_command_past_its_timeout_is_drained_not_held():
    """Output that never ends (``yes``, on both streams): the timeout ends it; what was kept is the
    cap, head and tail, with the cut said."""
    async def go():
        async with LocalSandbox(output_limit=1 << 20) as box:
            return await box.exec("yes out & yes err >&2", user="agent", timeout=2)

    result = run(go())
    assert result.timed_out and result.truncated and result.duration < 6
    for stream, word in ((result.stdout, "out"), (result.stderr, "err")):
        assert stream.startswith(f"{word}\n") and "bytes cut by agent-code's sandbox" in stream
        assert len(stream) <= (1 << 20) + 200


@isolated_only
def test_an_ordinary_command_and_log_are_whole_and_not_marked():
    """The control: nothing is cut, nothing is marked, below the caps."""
    async def go():
        async with LocalSandbox() as box:
            result = await box.exec("seq 1 100000; echo done >&2", user="agent")
            job = await box.wait(await box.start("seq 1 100000", user="agent"), budget=30)
            return result, job

    result, job = run(go())
    expected = "".join(f"{i}\n" for i in range(1, 100001))
    assert (result.stdout, result.stderr, result.truncated) == (expected, "done\n", False)
    assert (job.stdout, job.truncated) == (expected, False)


# --- relay variants ----------------------------------------------------------------------------------

def test_an_idle_half_open_connection_frees_its_slot(tmp_path):
    from agent_code.sandbox.relay import GatewayRelay

    async def go():
        async with _Gateway() as gateway, \
                GatewayRelay(gateway.url, tmp_path / "r.sock", max_connections=2, idle_timeout=0.5) as relay:
            held = [await asyncio.open_unix_connection(str(tmp_path / "r.sock")) for _ in range(2)]
            await asyncio.sleep(0.1)
            refused = await asyncio.open_unix_connection(str(tmp_path / "r.sock"))   # the third: closed at once
            third = await asyncio.wait_for(refused[0].read(), 5)
            ended = [await asyncio.wait_for(r.read(), 5) for r, _ in held]   # idle: closed by the relay
            await asyncio.sleep(0.1)
            answer = await _get(tmp_path / "r.sock")                          # the slots are free again
            for _, w in (*held, refused):
                w.close()
            return third, ended, answer, relay.refused

    third, ended, answer, refused = run(go())
    assert third == b"" and ended == [b"", b""] and refused == 1
    assert answer.endswith(b"\r\n\r\nok")


def test_a_connection_past_its_byte_budget_is_ended(tmp_path):
    from agent_code.sandbox.relay import GatewayRelay

    async def go():
        async with _Gateway() as gateway, GatewayRelay(gateway.url, tmp_path / "r.sock", max_bytes=4096):
            reader, writer = await asyncio.open_unix_connection(str(tmp_path / "r.sock"))
            writer.write(b"GET / HTTP/1.1\r\n" + b"x-pad: " + b"a" * 100_000 + b"\r\n\r\n")
            got = await asyncio.wait_for(reader.read(), 10)
            writer.close()
            return got, await _get(tmp_path / "r.sock")

    got, small = run(go())
    assert got == b"" and small.endswith(b"\r\n\r\nok")   # the big one ended unanswered; a small one passes


@isolated_only
def test_a_flood_from_inside_the_sandbox_keeps_the_orchestrators_fds_bounded():
    """2000 TCP connections held open by the agent through the in-namespace relay: the host holds
    a bounded number of fds, and once the flood ends the agent's own request goes through."""
    flood = ("import socket, time\nheld = []\nfor _ in range(2000):\n    s = socket.socket()\n"
             "    try:\n        s.connect(('127.0.0.1', PORT))\n    except OSError:\n        s.close(); continue\n"
             "    held.append(s)\nprint(len(held), flush=True)\ntime.sleep(60)\n")

    async def go():
        async with _Gateway() as gateway, LocalSandbox() as box:
            inside = await box.expose_gateway(gateway.url)
            port = inside.rsplit(":", 1)[1]
            before = _fds()
            job = await box.start(f"python -c {shlex.quote(flood.replace('PORT', port))}", user="agent")
            deadline = time.monotonic() + 60
            while not Path(job.log_path).read_text().strip() and time.monotonic() < deadline:
                await asyncio.sleep(0.2)
            await asyncio.sleep(1.0)
            grown, at_gateway = _fds() - before, gateway.open
            await box.kill(job)
            await asyncio.sleep(0.5)
            after = await box.exec(["curl", "-s", "--max-time", "5", inside + "/v1/x"], user="agent", timeout=30)
            return grown, at_gateway, after

    grown, at_gateway, after = run(go())
    assert grown <= 3 * 64 + 16 and at_gateway <= 64, (grown, at_gateway)
    assert after.stdout == "ok", after.output()
