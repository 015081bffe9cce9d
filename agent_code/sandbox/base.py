"""The sandbox protocol: a place to copy a repository into, run commands in, and throw away.

Every backend (``local``, ``docker``, ``e2b``) is an async context manager::

    async with create_sandbox("local") as box:
        await box.upload("/path/to/repo", box.workdir)
        result = await box.exec("pytest -q", user="agent", timeout=60)
        job = await box.start("long command", user="agent")   # detached
        result = await box.wait(job, budget=600)                # killed at the budget

``user`` is ``"root"`` (the sandbox's privileged user: set-up, grading) or ``"agent"`` (the
unprivileged user the CLI agent runs as). Paths are paths *inside* the sandbox; ``workdir``
is where the task's repository lives, ``home`` the agent's home directory.

Detached commands write their output to a log file and, when they end, their exit code to a
marker file beside it; :meth:`Sandbox.wait` polls the marker, so a long agent run survives a
dropped connection to a remote sandbox. At the budget the whole process group is killed.
Leaving the context kills everything still running in the sandbox and removes it.

Everything read back out of a sandbox (:meth:`Sandbox.read_file`, :meth:`Sandbox.read_tail`, a
job's log, a command's output) is the agent's to shape, so it is read as untrusted input: a regular
file only (never a FIFO, a device, a symlink, a directory), in bounded time and bounded bytes, off
the event loop (:mod:`agent_code.sandbox.untrusted`). What a cap left out is said:
``ExecResult.truncated``, :attr:`Capped.cut <agent_code.sandbox.untrusted.Capped.cut>`.
"""

from __future__ import annotations

import asyncio
import shlex
import time
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Mapping, Protocol, runtime_checkable

if TYPE_CHECKING:   # untrusted.py raises this module's SandboxError: imported where used, below
    from agent_code.sandbox.untrusted import Capped

USERS = ("root", "agent")


class SandboxError(Exception):
    """The sandbox could not be created, reached, or used (not a command's own failure)."""


@dataclass
class ExecResult:
    exit_code: int | None          # None: killed at its timeout / budget
    stdout: str = ""
    stderr: str = ""
    duration: float = 0.0
    timed_out: bool = False
    truncated: bool = False        # stdout or stderr (a job's log) was cut to its cap: bytes left out

    @property
    def ok(self) -> bool:
        return self.exit_code == 0

    def output(self, limit: int = 4000) -> str:
        """stdout and stderr together, the tail kept when long (for error messages)."""
        text = (self.stdout + ("\n" if self.stdout and self.stderr else "") + self.stderr).strip()
        return text if len(text) <= limit else "…" + text[-limit:]


@dataclass
class Job:
    """A detached command: its log and exit-code marker live inside the sandbox."""
    id: str
    command: str
    log_path: str
    marker_path: str
    started: float = field(default_factory=time.monotonic)
    handle: asyncio.subprocess.Process | int | None = None   # backend-specific (a local process, a remote pid)
    user: str = "root"             # who runs it: its log and marker are read with that user's rights


@runtime_checkable
class Sandbox(Protocol):
    name: str
    workdir: str
    home: str

    async def __aenter__(self) -> "Sandbox": ...

    async def __aexit__(self, *exc: object) -> None: ...

    async def exec(self, cmd: str | list[str], *, user: str = "root", env: Mapping[str, str] | None = None,
                   timeout: float | None = None, cwd: str | None = None) -> ExecResult: ...

    async def write_file(self, path: str, data: str | bytes, *, user: str = "root", mode: int = 0o644) -> None: ...

    async def read_file(self, path: str, *, user: str = "root") -> bytes:
        """The regular file at ``path``, whole: :class:`FileNotFoundError` when there is none,
        :class:`IsADirectoryError` for a directory, :class:`SandboxError` for anything else (a FIFO, a device, a symlink, a directory) or a file
        larger than :data:`~agent_code.sandbox.untrusted.READ_LIMIT`. Remote backends read it with
        ``user``'s rights."""
        ...

    async def read_tail(self, path: str, limit: int, *, user: str = "root") -> "Capped":
        """The last ``limit`` bytes at most of the regular file at ``path``, and how many bytes
        before them were left out; errors as :meth:`read_file`."""
        ...

    async def upload(self, local_path: str, dest: str, *, user: str = "root") -> None: ...

    async def give_to_agent(self, path: str) -> None:
        """Make ``path`` (recursively) owned by the agent user, e.g. after root's set-up."""
        ...

    async def start(self, cmd: str, *, user: str = "root", env: Mapping[str, str] | None = None,
                    cwd: str | None = None) -> Job: ...

    async def wait(self, job: Job, budget: float | None = None) -> ExecResult: ...

    async def kill(self, job: Job) -> None: ...

    async def expose_gateway(self, url: str) -> str:
        """Make the gateway at ``url`` (as this machine reaches it) reachable from inside the
        sandbox, and nothing else of this machine's network; returns the URL the agent uses
        there. Raises :class:`SandboxError` when it cannot be done."""
        ...


def check_user(user: str) -> str:
    if user not in USERS:
        raise SandboxError(f"unknown sandbox user '{user}' (choose from {', '.join(USERS)})")
    return user


def resolve(path: str, workdir: str) -> str:
    """A sandbox path: absolute as it is, relative to ``workdir``."""
    return path if path.startswith("/") else f"{workdir.rstrip('/')}/{path}"


def as_shell(cmd: str | list[str]) -> str:
    """A command line for ``sh -c``: a string as it is, an argv list quoted."""
    return cmd if isinstance(cmd, str) else shlex.join(cmd)


def marker_wrapped(cmd: str, log_path: str, marker_path: str) -> str:
    """``cmd`` with its output sent to ``log_path`` and its exit code written to ``marker_path``
    (atomically, via a rename) when it ends."""
    log, marker = shlex.quote(log_path), shlex.quote(marker_path)
    return (f"( {cmd} ) >{log} 2>&1 </dev/null; echo $? >{marker}.tmp && mv {marker}.tmp {marker}")


async def with_job_log(box: "Sandbox", job: Job, result: ExecResult, limit: int) -> ExecResult:
    """``result`` with ``job``'s log as its stdout: its tail (at most ``limit`` bytes, from a
    whole line on), read as untrusted — the agent held the log as its stdout and may have made it
    anything (lseek, ftruncate: 100 GB, sparse; a FIFO in its place)."""
    from agent_code.sandbox.untrusted import whole_lines

    try:
        log = whole_lines(await box.read_tail(job.log_path, limit, user=job.user))
    except FileNotFoundError:
        return result
    except SandboxError as exc:
        result.stderr = f"[agent-code: the job's log was not read: {exc}]\n"
        return result
    result.stdout, result.truncated = log.data.decode(errors="replace"), log.truncated
    return result


class PollingJobs:
    """``start``/``wait``/``kill`` for backends that only have ``exec``: the job runs under
    ``setsid`` in the background, ``wait`` polls its marker file. Files are read by a command in
    the sandbox (:func:`~agent_code.sandbox.untrusted.read_command`): a regular file only, its
    tail only, with the reader's rights, ended at a time cap."""

    poll_interval = 0.2
    read_cwd: str | None = None   # where the reading command runs (None: the backend's default)

    async def start(self, cmd: str, *, user: str = "root", env: Mapping[str, str] | None = None,
                    cwd: str | None = None) -> Job:
        import uuid

        job_id = uuid.uuid4().hex[:12]
        base = f"{self.home}/.jobs/{job_id}"  # type: ignore[attr-defined]
        job = Job(job_id, cmd, f"{base}.log", f"{base}.exit", user=user)
        inner = marker_wrapped(cmd, job.log_path, job.marker_path)
        launch = (f"mkdir -p {shlex.quote(self.home)}/.jobs && "  # type: ignore[attr-defined]
                  f"setsid sh -c {shlex.quote(inner)} >/dev/null 2>&1 & echo $!")
        result = await self.exec(launch, user=user, env=env, cwd=cwd, timeout=30)  # type: ignore[attr-defined]
        if not result.ok or not result.stdout.strip().isdigit():
            raise SandboxError(f"could not start a detached command: {result.output()}")
        job.handle = int(result.stdout.strip())
        return job

    async def read_tail(self, path: str, limit: int, *, user: str = "root") -> Capped:
        from agent_code.sandbox import untrusted

        path = resolve(path, self.workdir)  # type: ignore[attr-defined]
        result = await self.exec(untrusted.read_command(path, limit), user=user,  # type: ignore[attr-defined]
                                 cwd=self.read_cwd, timeout=untrusted.READ_SECONDS)
        return untrusted.parse_read(result, path)

    async def read_file(self, path: str, *, user: str = "root") -> bytes:
        from agent_code.sandbox.untrusted import READ_LIMIT

        path = resolve(path, self.workdir)  # type: ignore[attr-defined]
        capped = await self.read_tail(path, READ_LIMIT, user=user)
        if capped.truncated:
            raise SandboxError(f"{path} is larger than {READ_LIMIT} bytes: not read")
        return capped.data

    async def _exit_code(self, job: Job) -> int | None:
        try:   # a few bytes: an agent's 100 GB marker costs nothing, and is no exit code
            text = (await self.read_tail(job.marker_path, 64, user=job.user)).data.decode(errors="replace").strip()
        except (FileNotFoundError, SandboxError):
            return None
        return int(text) if text.lstrip("-").isdigit() else None

    async def _log(self, job: Job, result: ExecResult) -> ExecResult:
        from agent_code.sandbox.untrusted import LOG_LIMIT

        return await with_job_log(self, job, result, LOG_LIMIT)  # type: ignore[arg-type]

    async def wait(self, job: Job, budget: float | None = None) -> ExecResult:
        deadline = None if budget is None else job.started + budget
        while True:
            code = await self._exit_code(job)
            if code is not None:
                return await self._log(job, ExecResult(code, duration=time.monotonic() - job.started))
            if deadline is not None and time.monotonic() >= deadline:
                await self.kill(job)
                return await self._log(job, ExecResult(None, duration=time.monotonic() - job.started, timed_out=True))
            await asyncio.sleep(self.poll_interval)

    async def kill(self, job: Job) -> None:
        if isinstance(job.handle, int) and job.handle:
            await self.exec(f"kill -s KILL -- -{int(job.handle)} 2>/dev/null; true", timeout=30)  # type: ignore[attr-defined]
