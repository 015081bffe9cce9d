"""The local sandbox: a temp dir on this machine, the agent run as a throw-away unprivileged user.

Layout of one sandbox (all under one ``mkdtemp`` dir, removed on exit)::

    <root>/workspace   the task's repository (``workdir``), owned by the agent user
    <root>/home        the agent user's ``HOME`` (CLI settings, problem statement, job logs)
    <root>/tmp         its ``TMPDIR``
    <root>/.root       ``HOME`` for commands run as ``root`` (set-up, grading)

**Isolation** (``isolate="auto"``: on when running as root with ``unshare`` and ``setpriv``).
Each command of the ``agent`` user runs in fresh PID and mount namespaces as a uid of its own
(unique per sandbox, with a private ``/etc/passwd`` entry), with ``prlimit --nproc`` capping its
processes. The PID namespace is what makes clean-up certain: when a command's first process
ends or is killed, the kernel kills everything else in the namespace, daemons included.
The mount namespace hides what the agent must not see (``hide=[...]``, e.g. the tasks file
with hidden tests) behind an empty tmpfs, and makes host paths the agent needs reachable
(``provide(path)``: an interpreter under ``/root``, say), without touching the host's
permissions. ``/tmp``, ``/var/tmp`` and ``/dev/shm`` are private to each command (an empty
world-writable tmpfs, gone when the command ends; the sandbox itself stays in place), so the
agent writes nothing on the host outside its workspace, home and ``TMPDIR``, and sees nothing
another sandbox left there. A sandbox's directories are closed to other users (``workspace``,
``home`` and ``tmp`` belong to its agent uid, mode 0700), so an agent cannot read another
sandbox's workspace — a grading one holding hidden tests included — even where it can reach it.
The network is shared: the agent reaches the gateway on loopback.

Without isolation (not root, or ``isolate=False``) commands run as the current user, each in
its own process group, killed as a group at its timeout; on exit every process still carrying
this sandbox's ``AGENT_CODE_SANDBOX`` marker in its environment is killed too.

Every command gets a minimal environment: ``PATH`` (the directory of the interpreter running
agent-code — so a task's ``python -m pytest`` finds this environment's packages — then the
system dirs, after what the caller adds),
``HOME``, ``TMPDIR``, ``LANG``, the marker, and the caller's ``env`` — nothing from the host.
"""

from __future__ import annotations

import asyncio
import itertools
import os
import secrets
import shlex
import shutil
import signal
import stat
import sys
import tempfile
import time
from pathlib import Path
from typing import Any, Mapping, Sequence

from agent_code.sandbox.base import ExecResult, Job, SandboxError, as_shell, check_user

SYSTEM_PATH = "/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin"
MARKER = "AGENT_CODE_SANDBOX"
PRIVATE_TMP_DIRS = ("/tmp", "/var/tmp", "/dev/shm")  # world-writable host dirs: a tmpfs of its own per command
PRIVATE_TMP_SIZE = "1g"
_uids = itertools.count()


def _pick_uid() -> int:
    """A uid no other sandbox of any process is likely to hold: pid-, counter- and random-based."""
    return 200_000 + (os.getpid() * 97 + next(_uids) * 7919 + secrets.randbelow(10_000)) % 1_000_000


def isolation_available() -> bool:
    return os.geteuid() == 0 and all(shutil.which(tool) for tool in ("unshare", "setpriv", "prlimit"))


def _traversable_by_others(path: Path) -> bool:
    try:
        return bool(os.stat(path).st_mode & stat.S_IXOTH)
    except OSError:
        return False


def _hidden_ancestor(path: Path) -> Path | None:
    """The topmost ancestor of ``path`` that another user cannot traverse (None: all can)."""
    for parent in reversed(path.parents):
        if parent != Path("/") and not _traversable_by_others(parent):
            return parent
    return None


def _outermost(paths: Sequence[Path]) -> list[Path]:
    """``paths`` without those inside another of them, shallowest first."""
    ordered = sorted(set(paths), key=lambda p: len(p.parts))
    return [p for i, p in enumerate(ordered) if not any(h in p.parents for h in ordered[:i])]


def kill_marked(sandbox_id: str) -> int:
    """SIGKILL every process whose environment carries ``AGENT_CODE_SANDBOX=sandbox_id``."""
    needle = f"{MARKER}={sandbox_id}".encode()
    killed = 0
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit() or int(entry.name) == os.getpid():
            continue
        try:
            if needle in (entry / "environ").read_bytes().split(b"\0"):
                os.kill(int(entry.name), signal.SIGKILL)
                killed += 1
        except (OSError, ValueError):
            continue
    return killed


class LocalSandbox:
    name = "local"

    def __init__(self, *, isolate: bool | str = "auto", hide: Sequence[str] = (), max_procs: int = 1024,
                 tool_paths: Sequence[str] | None = None, base_dir: str | None = None, keep: bool = False,
                 private_tmp: bool = True) -> None:
        if isolate == "auto":
            isolate = isolation_available()
        elif isolate and not isolation_available():
            raise SandboxError("isolation needs root and util-linux's `unshare`, `setpriv` and `prlimit`")
        self.isolated = bool(isolate)
        self.hide = _outermost([Path(p).resolve() for p in hide])
        self.private_tmp = _outermost([Path(p).resolve() for p in PRIVATE_TMP_DIRS if Path(p).is_dir()]
                                      if private_tmp and self.isolated else [])
        self.max_procs = max_procs
        # the interpreter running agent-code comes first on PATH: tasks' `python -m pytest`
        # set-up and grading commands use this environment (pass tool_paths=[] for none)
        self.tool_paths = [str(Path(sys.executable).parent)] if tool_paths is None else [str(p) for p in tool_paths]
        self.base_dir = base_dir
        self.keep = keep
        self.id = secrets.token_hex(6)
        self.uid = self.gid = _pick_uid() if self.isolated else os.getuid()
        self.exposed: list[Path] = []
        self.root = Path()
        self.workdir = self.home = ""
        self._procs: set[asyncio.subprocess.Process] = set()

    # --- lifecycle ----------------------------------------------------------------------

    async def __aenter__(self) -> "LocalSandbox":
        self.root = Path(tempfile.mkdtemp(prefix="agent-code-sandbox-", dir=self.base_dir))
        os.chmod(self.root, 0o711)  # the agent may pass through, not list
        for name in ("workspace", "home", "tmp", ".root", ".mnt", ".jobs"):
            (self.root / name).mkdir()
        for name in ("workspace", "home", "tmp"):
            self._own(self.root / name)
        for name in ("workspace", "home", "tmp", ".root", ".mnt", ".jobs"):
            os.chmod(self.root / name, 0o700)  # no other user (another sandbox's agent) may look in
        self.workdir, self.home = str(self.root / "workspace"), str(self.root / "home")
        if self.isolated:
            self._write_identity()
            if _hidden_ancestor(self.root) is not None:  # e.g. TMPDIR under a 0700 dir: mount it in
                self.provide(self.root)
            if self.tool_paths:  # the interpreter on PATH must be usable by the agent user too
                for path in {sys.prefix, sys.base_prefix, *self.tool_paths}:
                    self.provide(path)
        return self

    async def __aexit__(self, *exc: Any) -> None:
        await self.close()

    async def close(self) -> None:
        self.terminate()  # everything that matters happens before the first await: a second
        for proc in list(self._procs):  # cancellation (Ctrl-C twice) cannot leave a mess behind
            try:
                await asyncio.wait_for(proc.wait(), 5)
            except (asyncio.TimeoutError, ProcessLookupError):
                pass
        self._procs.clear()
        self.terminate()

    def terminate(self) -> None:
        """Kill every process of the sandbox and remove its directory, synchronously."""
        for proc in list(self._procs):
            self._kill_group(proc)
        kill_marked(self.id)
        if not self.keep and self.root != Path() and self.root.exists():
            shutil.rmtree(self.root, ignore_errors=True)

    def _write_identity(self) -> None:
        """A passwd/group pair naming the sandbox uid ``agent``, bind-mounted in its namespace."""
        for name, line in (("passwd", f"agent:x:{self.uid}:{self.gid}:agent:{self.root / 'home'}:/bin/sh\n"),
                           ("group", f"agent:x:{self.gid}:\n")):
            host = Path("/etc") / name
            text = host.read_text() if host.exists() else ""
            (self.root / ".mnt" / name).write_text(text + ("" if text.endswith("\n") or not text else "\n") + line)

    def _own(self, path: Path) -> None:
        if self.isolated:
            os.chown(path, self.uid, self.gid)

    def _own_tree(self, path: Path) -> None:
        if not self.isolated:
            return
        if path.is_dir() and not path.is_symlink():
            for dirpath, dirnames, filenames in os.walk(path):
                for name in dirnames + filenames:
                    os.lchown(os.path.join(dirpath, name), self.uid, self.gid)
        os.lchown(path, self.uid, self.gid)

    # --- what the agent sees -------------------------------------------------------------

    def provide(self, host_path: str | os.PathLike) -> str:
        """Make a host file or directory reachable (read-only in practice) by the agent user;
        returns its path inside the sandbox (the same path, locally)."""
        path = Path(host_path).resolve()
        if self.isolated and path not in self.exposed:
            self.exposed.append(path)
        return str(path)

    def _mount_script(self) -> str:
        """Shell run as root inside the new mount namespace, before dropping to the agent uid.

        Every path to keep is first bind-mounted aside (into a scratch tmpfs on ``/mnt``), then
        the hidden directories get an empty tmpfs each, then the kept paths are moved back into
        place — so the agent sees them and nothing else of what is hidden."""
        q = shlex.quote
        identity = self.root / ".mnt"
        lines = ["set -e", f"mount --bind {q(str(identity / 'passwd'))} /etc/passwd",
                 f"mount --bind {q(str(identity / 'group'))} /etc/group"]
        covered = [*self.hide, *self.private_tmp]  # what gets an empty tmpfs (kept paths go back in)
        overlays: dict[Path, list[Path]] = {h: [] for h in covered}
        for path in self.exposed:
            holder = next((h for h in covered if h == path or h in path.parents), None) or _hidden_ancestor(path)
            if holder is not None:
                overlays.setdefault(holder, []).append(path)
        hidden_dirs, files, moves = [], [], []
        for hidden in sorted(overlays, key=lambda p: len(p.parts)):
            if not hidden.exists() or hidden == self.root:
                continue
            keep = overlays[hidden]
            if hidden in self.root.parents and self.root not in keep:
                keep.append(self.root)  # hiding around the sandbox: the sandbox itself stays
            if not hidden.is_dir():
                files.append(hidden)
                continue
            hidden_dirs.append(hidden)
            moves += [path for path in keep if path.exists() and path not in moves]
        if moves:
            lines.append("mount -t tmpfs -o mode=0700,size=1m agent-code-scratch /mnt")
        for k, path in enumerate(moves):
            lines += [f"{'mkdir -p' if path.is_dir() else 'touch'} /mnt/{k}", f"mount --rbind {q(str(path))} /mnt/{k}"]
        lines += [f"mount --bind /dev/null {q(str(f))}" for f in files]
        # outermost hidden dirs first; one inside another is already hidden, unless it lies in a
        # kept path — then it is hidden again once that path is back in place
        top = [h for h in hidden_dirs if not any(o in h.parents for o in hidden_dirs)]
        inner = [h for h in hidden_dirs if h not in top and any(k == h or k in h.parents for k in moves)]

        def empty(h: Path) -> str:
            if h in self.private_tmp:
                return f"mount -t tmpfs -o mode=1777,size={PRIVATE_TMP_SIZE} agent-code-tmp {q(str(h))}"
            return f"mount -t tmpfs -o mode=0755,size=1m agent-code-hidden {q(str(h))}"

        lines += [empty(h) for h in top]
        for k, path in enumerate(moves):
            if path.is_dir():
                lines.append(f"mkdir -p {q(str(path))}")
            else:
                lines += [f"mkdir -p {q(str(path.parent))}", f"touch {q(str(path))}"]
            lines.append(f"mount --move /mnt/{k} {q(str(path))}")
        lines += [empty(h) for h in inner]
        return "\n".join(lines)

    def _argv(self, command: str, user: str) -> list[str]:
        if user == "root" or not self.isolated:
            return ["/bin/sh", "-c", command]
        drop = shlex.join(["prlimit", f"--nproc={int(self.max_procs)}", "--", "setpriv", f"--reuid={self.uid}",
                           f"--regid={self.gid}", "--clear-groups", "--no-new-privs", "--", "/bin/sh", "-c", command])
        return ["unshare", "--pid", "--fork", "--kill-child", "--mount", "--propagation", "private",
                "--mount-proc", "--", "/bin/sh", "-c", self._mount_script() + "\nexec " + drop]

    def environment(self, user: str, env: Mapping[str, str] | None) -> dict[str, str]:
        home = self.home if user == "agent" else str(self.root / ".root")
        base = {"PATH": os.pathsep.join([*self.tool_paths, SYSTEM_PATH]), "HOME": home, "TMPDIR": str(self.root / "tmp"), "LANG": "C.UTF-8",
                "LC_ALL": "C.UTF-8", "USER": user, "LOGNAME": user, MARKER: self.id}
        base.update(env or {})
        if env and "PATH" in env and self.tool_paths:  # the caller's PATH extends ours
            base["PATH"] = os.pathsep.join([env["PATH"], *self.tool_paths, SYSTEM_PATH])
        base[MARKER] = self.id
        return base

    # --- commands ------------------------------------------------------------------------

    async def _spawn(self, cmd: str | list[str], user: str, env: Mapping[str, str] | None, cwd: str | None,
                     stdout: Any, stderr: Any) -> asyncio.subprocess.Process:
        check_user(user)
        if self.root == Path():
            raise SandboxError("the sandbox is not open (use `async with`)")
        try:
            proc = await asyncio.create_subprocess_exec(
                *self._argv(as_shell(cmd), user), cwd=cwd or self.workdir, env=self.environment(user, env),
                stdin=asyncio.subprocess.DEVNULL, stdout=stdout, stderr=stderr, start_new_session=True)
        except OSError as exc:
            raise SandboxError(f"cannot start a command in the sandbox: {exc}") from exc
        self._procs.add(proc)
        return proc

    def _kill_group(self, proc: asyncio.subprocess.Process) -> None:
        try:
            os.killpg(proc.pid, signal.SIGKILL)  # the group; in a PID namespace its init takes the rest
        except (ProcessLookupError, PermissionError):
            pass

    async def _finish(self, proc: asyncio.subprocess.Process, waiter: Any, timeout: float | None) -> tuple[Any, bool]:
        try:
            return await asyncio.wait_for(waiter, timeout), False
        except asyncio.TimeoutError:
            self._kill_group(proc)
            await proc.wait()
            return None, True
        except asyncio.CancelledError:
            self._kill_group(proc)
            raise
        finally:
            self._kill_group(proc)  # what the command left running in its group goes with it
            self._procs.discard(proc)

    async def exec(self, cmd: str | list[str], *, user: str = "root", env: Mapping[str, str] | None = None,
                   timeout: float | None = None, cwd: str | None = None) -> ExecResult:
        start = time.monotonic()
        proc = await self._spawn(cmd, user, env, cwd, asyncio.subprocess.PIPE, asyncio.subprocess.PIPE)
        out, timed_out = await self._finish(proc, proc.communicate(), timeout)
        stdout, stderr = out if out else (b"", b"")
        return ExecResult(None if timed_out else proc.returncode, stdout.decode(errors="replace"),
                          stderr.decode(errors="replace"), time.monotonic() - start, timed_out)

    async def start(self, cmd: str, *, user: str = "root", env: Mapping[str, str] | None = None,
                    cwd: str | None = None) -> Job:
        job_id = secrets.token_hex(6)
        jobs = self.root / ".jobs"
        job = Job(job_id, cmd, str(jobs / f"{job_id}.log"), str(jobs / f"{job_id}.exit"))
        with open(job.log_path, "wb") as log:
            job.handle = await self._spawn(cmd, user, env, cwd, log, asyncio.subprocess.STDOUT)
        return job

    async def wait(self, job: Job, budget: float | None = None) -> ExecResult:
        proc: asyncio.subprocess.Process = job.handle
        remaining = None if budget is None else max(0.0, job.started + budget - time.monotonic())
        _, timed_out = await self._finish(proc, proc.wait(), remaining)
        code = None if timed_out else proc.returncode
        Path(job.marker_path).write_text("killed\n" if code is None else f"{code}\n")
        log = Path(job.log_path).read_bytes().decode(errors="replace") if Path(job.log_path).exists() else ""
        return ExecResult(code, log, "", time.monotonic() - job.started, timed_out)

    async def kill(self, job: Job) -> None:
        proc: asyncio.subprocess.Process = job.handle
        self._kill_group(proc)
        await proc.wait()
        self._procs.discard(proc)

    # --- files ---------------------------------------------------------------------------

    def _inside(self, path: str) -> Path:
        return Path(path) if os.path.isabs(path) else Path(self.workdir) / path

    async def write_file(self, path: str, data: str | bytes, *, user: str = "root", mode: int = 0o644) -> None:
        target = self._inside(path)
        target.parent.mkdir(parents=True, exist_ok=True)
        target.write_bytes(data.encode() if isinstance(data, str) else data)
        os.chmod(target, mode)
        if check_user(user) == "agent":
            self._own(target)

    async def give_to_agent(self, path: str) -> None:
        await asyncio.to_thread(self._own_tree, self._inside(path))

    async def read_file(self, path: str) -> bytes:
        return self._inside(path).read_bytes()

    async def upload(self, local_path: str, dest: str, *, user: str = "root") -> None:
        source, target = Path(local_path), self._inside(dest)
        if source.is_dir():
            await asyncio.to_thread(shutil.copytree, source, target, symlinks=True, dirs_exist_ok=True)
        else:
            target.parent.mkdir(parents=True, exist_ok=True)
            await asyncio.to_thread(shutil.copy2, source, target)
        if check_user(user) == "agent":
            await asyncio.to_thread(self._own_tree, target)

    async def expose_gateway(self, url: str) -> str:  # TODO(issue 12): relay into the sandbox's own network
        return url
