"""The local sandbox: a temp dir on this machine, the agent run as a throw-away unprivileged user.

Layout of one sandbox (all under one ``mkdtemp`` dir, removed on exit)::

    <root>/workspace   the task's repository (``workdir``), owned by the agent user
    <root>/home        the agent user's ``HOME`` (CLI settings, problem statement, job logs)
    <root>/tmp         its ``TMPDIR``
    <root>/.root       ``HOME`` for commands run as ``root`` (set-up, grading)

**Isolation** (``isolate="auto"``: on when running as root with util-linux's ``unshare``).
Each command of the ``agent`` user runs in fresh PID, mount and network namespaces, entered
through :mod:`agent_code.sandbox.local_enter`, which in one process:

* builds a **root of its own** on a tmpfs and makes it the namespace's root (``pivot_root``,
  the host's tree detached): read-only ``/usr`` (and the merged-usr links), a minimal read-only ``/etc``
  (:data:`ETC_ENTRIES` from the host, and the sandbox's own ``passwd``, ``group`` and ``hosts``),
  a minimal ``/dev``, the namespace's own ``/proc``, empty private ``/tmp``, ``/var/tmp``,
  ``/dev/shm`` and ``/run``, whatever :meth:`provide` was given (read-only: an interpreter under
  ``/root``, a CLI agent's package), and the sandbox's ``workspace``, ``home`` and ``tmp``
  (read-write) — everything at its host path. Nothing else of the host exists there. A path
  in ``hide=[...]`` (e.g. the tasks file with hidden tests) that lies inside a provided one is
  covered by an empty read-only directory; a provided path inside a hidden one comes back.
* gives it a **network namespace with loopback only**: after :meth:`expose_gateway`, a relay
  listens on the gateway's port on that loopback and leads, through a Unix socket, to the
  gateway and nowhere else (:mod:`agent_code.sandbox.relay`, :mod:`agent_code.confine.relay_inside`).
* drops to a **uid of its own** (unique per sandbox, named ``agent`` in its ``passwd``): no
  capabilities, no groups, ``no_new_privs``, ``RLIMIT_NPROC``, and a seccomp filter that refuses
  new user namespaces.

What the agent can write is the sandbox's workspace, home and TMPDIR (removed with the sandbox)
and the per-command tmpfs dirs (gone with the command): nothing the host or another sandbox
reads. The PID namespace makes clean-up certain: when a command's first process ends or is
killed, the kernel kills everything else in the namespace, daemons included. Commands of
``root`` (set-up, grading preparation) run on the host as they are, unconfined.

Without isolation (not root, or ``isolate=False``) commands run as the current user, each in
its own process group, killed as a group at its timeout; on exit every process still carrying
this sandbox's ``AGENT_CODE_SANDBOX_ID`` marker in its environment is killed too. **Nothing of the
above holds then**: the agent reads and writes whatever the current user may, and reaches every
service of this machine's network; :meth:`expose_gateway` returns the URL unchanged.

Every command gets a minimal environment: ``PATH`` (the directory of the interpreter running
agent-code — so a task's ``python -m pytest`` finds this environment's packages — then the
system dirs, after what the caller adds),
``HOME``, ``TMPDIR``, ``LANG``, the marker, and the caller's ``env`` — nothing from the host.
"""

from __future__ import annotations

import asyncio
import hashlib
import ipaddress
import itertools
import json
import marshal
import os
import secrets
import shutil
import signal
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import IO, Any, Awaitable, Mapping, Sequence, TypeVar
from urllib.parse import urlsplit, urlunsplit

from agent_code.sandbox.base import ExecResult, Job, SandboxError, as_shell, check_user, with_job_log
from agent_code.sandbox.relay import GatewayRelay, gateway_address
from agent_code.sandbox.untrusted import (
    LOG_LIMIT,
    OUTPUT_LIMIT,
    Capped,
    HeadTail,
    read_capped,
    read_whole,
    shown,
)

T = TypeVar("T")

SYSTEM_PATH = "/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin"
MARKER = "AGENT_CODE_SANDBOX_ID"   # (not AGENT_CODE_SANDBOX: that switches the OS sandbox of agent-code itself)
PRIVATE_TMP_SIZE = "1g"
DRAIN_SECONDS = 10.0   # a killed command's pipes must reach their ends within this
ENTER_SCRIPT = Path(__file__).with_name("local_enter.py")
# the toolchain every agent root holds, read-only (symlinks stay symlinks)
SYSTEM_DIRS = ("/usr", "/bin", "/sbin", "/lib", "/lib32", "/lib64", "/libx32")
# what programs read from /etc: the dynamic linker, name service, time zone, certificates,
# alternatives (awk, editor, ...), MIME and magic data — no credentials, no host configuration
ETC_ENTRIES = ("ld.so.cache", "ld.so.conf", "ld.so.conf.d", "nsswitch.conf", "host.conf", "gai.conf", "localtime",
               "timezone", "alternatives", "ssl/certs", "ssl/openssl.cnf", "ca-certificates.conf", "mime.types",
               "magic", "magic.mime", "protocols", "services", "ethertypes", "rpc", "os-release", "debian_version",
               "lsb-release", "issue", "inputrc", "bash.bashrc", "profile", "shells", "locale.alias", "locale.conf",
               "mtab", "terminfo", "environment")
_uids = itertools.count()


def _pick_uid() -> int:
    """A uid no other sandbox of any process is likely to hold: pid-, counter- and random-based."""
    return 200_000 + (os.getpid() * 97 + next(_uids) * 7919 + secrets.randbelow(10_000)) % 1_000_000


def isolation_available() -> bool:
    return os.geteuid() == 0 and shutil.which("unshare") is not None and sys.platform == "linux"


def _outermost(paths: Sequence[Path]) -> list[Path]:
    """``paths`` without those inside another of them, shallowest first."""
    ordered = sorted(set(paths), key=lambda p: len(p.parts))
    return [p for i, p in enumerate(ordered) if not any(h in p.parents for h in ordered[:i])]


def _is_ipv4_loopback(host: str) -> bool:
    try:
        return ipaddress.ip_address(host).version == 4 and ipaddress.ip_address(host).is_loopback
    except ValueError:
        return False


def kill_marked(sandbox_id: str) -> int:
    """SIGKILL every process whose environment carries ``AGENT_CODE_SANDBOX_ID=sandbox_id``."""
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
                 private_tmp: bool = True, output_limit: int = OUTPUT_LIMIT, log_limit: int = LOG_LIMIT,
                 relay_options: Mapping[str, Any] | None = None) -> None:
        if isolate == "auto":
            isolate = isolation_available()
        elif isolate and not isolation_available():
            raise SandboxError("isolation needs root, Linux and util-linux's `unshare`")
        self.isolated = bool(isolate)
        self.hide = _outermost([Path(p).resolve() for p in hide])
        self.private_tmp = private_tmp  # kept for callers; isolated commands always get private tmp dirs
        self.max_procs = max_procs
        # the interpreter running agent-code comes first on PATH: tasks' `python -m pytest`
        # set-up and grading commands use this environment (pass tool_paths=[] for none)
        self.tool_paths = [str(Path(sys.executable).parent)] if tool_paths is None else [str(p) for p in tool_paths]
        self.base_dir = base_dir
        self.keep = keep
        self.output_limit, self.log_limit = output_limit, log_limit   # bytes kept of a stream / a job's log
        self.relay_options = dict(relay_options or {})   # GatewayRelay's caps (max_connections, idle_timeout, ...)
        self.id = secrets.token_hex(6)
        self.uid = self.gid = _pick_uid() if self.isolated else os.getuid()
        self.exposed: list[Path] = []
        self.root = Path()
        self.workdir = self.home = ""
        self._procs: set[asyncio.subprocess.Process] = set()
        self._relay: GatewayRelay | None = None
        self._gateway: dict[str, Any] | None = None   # the in-namespace end: host, port, socket
        self._specs: dict[str, str] = {}

    # --- lifecycle ----------------------------------------------------------------------

    async def __aenter__(self) -> "LocalSandbox":
        # symlinks resolved: the agent's root rebuilds this path, and the orchestrator checks
        # that the paths it touches stay under it
        self.root = Path(os.path.realpath(tempfile.mkdtemp(prefix="agent-code-sandbox-", dir=self.base_dir)))
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
            if self.tool_paths:  # the interpreter on PATH must be usable by the agent user too
                for path in {sys.prefix, sys.base_prefix, *self.tool_paths}:
                    self.provide(path)
        return self

    async def __aexit__(self, *exc: object) -> None:
        await self.close()

    async def close(self) -> None:
        relay, self._relay = self._relay, None
        if relay is not None:
            relay.stop()
        self._kill_all()   # everything that matters starts before the first await: a second
        # cancellation (Ctrl-C twice) cannot leave a mess behind; the removal runs in a thread (a
        # million files take seconds), which goes on even if this coroutine is cancelled
        removal = asyncio.get_running_loop().run_in_executor(None, self._remove)
        for proc in list(self._procs):
            try:
                await asyncio.wait_for(proc.wait(), 5)
            except (asyncio.TimeoutError, ProcessLookupError):
                pass
        self._procs.clear()
        self._kill_all()
        await removal
        if not self.keep and self.root != Path() and self.root.exists():   # written to while it went
            await asyncio.to_thread(self._remove)

    def terminate(self) -> None:
        """Kill every process of the sandbox and remove its directory, synchronously."""
        self._kill_all()
        self._remove()

    def _kill_all(self) -> None:
        if self._relay is not None:
            self._relay.stop()
            self._relay = None
        for proc in list(self._procs):
            self._kill_group(proc)
        kill_marked(self.id)

    def _remove(self) -> None:
        """Remove the sandbox's directory, whatever the agent left in it: ``rm -rf`` walks a tree
        of any depth (``shutil.rmtree`` recurses once a level: 1,200 nested directories raise
        ``RecursionError``); never raises."""
        if self.keep or self.root == Path() or not self.root.exists():
            return
        try:
            subprocess.run(["rm", "-rf", "--one-file-system", "--", str(self.root)], stdin=subprocess.DEVNULL,
                           stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, timeout=600, check=False)
        except (OSError, subprocess.SubprocessError):
            pass
        if self.root.exists():
            try:
                shutil.rmtree(self.root, ignore_errors=True)
            except RecursionError:
                pass

    def _write_identity(self) -> None:
        """The agent's ``/etc/passwd``, ``group`` and ``hosts``: its own uid named ``agent``, root
        and nobody, and ``localhost`` as 127.0.0.1 only (where the gateway relay listens)."""
        home = self.root / "home"
        files = {"passwd": ("root:x:0:0:root:/root:/bin/sh\n"
                            "nobody:x:65534:65534:nobody:/nonexistent:/usr/sbin/nologin\n"
                            f"agent:x:{self.uid}:{self.gid}:agent:{home}:/bin/sh\n"),
                 "group": f"root:x:0:\nnogroup:x:65534:\nagent:x:{self.gid}:\n",
                 "hosts": "127.0.0.1\tlocalhost\n"}
        for name, text in files.items():
            (self.root / ".mnt" / name).write_text(text)
            os.chmod(self.root / ".mnt" / name, 0o644)

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
        """Make a host file or directory visible, read-only, in the agent's root (at its host path,
        symlinks resolved); returns that path. Paths in ``hide`` inside it stay hidden. Never
        ``/``; an ancestor of a sandbox dir shows the other sandboxes' dir names (not their
        contents: those are 0700 to other uids)."""
        path = Path(host_path).resolve()
        if path == Path("/"):
            raise SandboxError("cannot provide / to the sandbox: that is the whole host")
        if self.isolated and path not in self.exposed:
            self.exposed.append(path)
        return str(path)

    def _spec(self) -> dict[str, Any]:
        """What :mod:`agent_code.sandbox.local_enter` builds for an agent command."""
        mnt = self.root / ".mnt"
        own = [str(self.root / name) for name in ("workspace", "home", "tmp")]
        return {"mountpoint": str(mnt / "root"), "uid": self.uid, "gid": self.gid, "nproc": int(self.max_procs),
                "system": list(SYSTEM_DIRS), "etc": list(ETC_ENTRIES),
                "etc_files": {name: str(mnt / name) for name in ("passwd", "group", "hosts")},
                "ro": [str(p) for p in self.exposed if str(p) not in own], "rw": own,
                "hide": [str(h) for h in self.hide], "tmpfs_size": PRIVATE_TMP_SIZE, "relay": self._gateway,
                "seccomp": True}

    def _spec_file(self) -> str:
        """The spec as a root-only file named by its content (written once per change)."""
        spec = self._spec()
        text = json.dumps(spec, sort_keys=True)
        path = self._specs.get(text)
        if path is None:
            mnt = self.root / ".mnt"
            (mnt / "root").mkdir(exist_ok=True)
            target = mnt / f"spec-{hashlib.sha256(text.encode()).hexdigest()[:16]}"
            tmp = target.with_suffix(".tmp")
            tmp.write_bytes(marshal.dumps(spec))
            tmp.replace(target)
            path = self._specs[text] = str(target)
        return path

    def _argv(self, command: str, user: str, cwd: str | None = None) -> list[str]:
        if user == "root" or not self.isolated:
            return ["/bin/sh", "-c", command]
        return ["unshare", "--pid", "--fork", "--kill-child", "--mount", "--propagation", "private", "--net", "--",
                sys.executable, "-I", "-S", str(ENTER_SCRIPT), self._spec_file(), cwd or self.workdir, "--",
                "/bin/sh", "-c", command]

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
                     stdout: int | IO[bytes], stderr: int) -> asyncio.subprocess.Process:
        check_user(user)
        if self.root == Path():
            raise SandboxError("the sandbox is not open (use `async with`)")
        try:
            confined = user == "agent" and self.isolated   # enters its own root, then its cwd
            proc = await asyncio.create_subprocess_exec(
                *self._argv(as_shell(cmd), user, cwd), cwd=str(self.root) if confined else cwd or self.workdir,
                env=self.environment(user, env),
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

    async def _finish(self, proc: asyncio.subprocess.Process, waiter: Awaitable[T],
                      timeout: float | None) -> tuple[T | None, bool]:
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

    async def _collect(self, proc: asyncio.subprocess.Process, kept: tuple[HeadTail, HeadTail]) -> None:
        """Read both pipes to their ends into ``kept`` (what lies past the caps is dropped as it comes),
        then wait for the process."""
        async def drain(stream: asyncio.StreamReader | None, into: HeadTail) -> None:
            while stream is not None and (data := await stream.read(65536)):
                into.feed(data)

        await asyncio.gather(drain(proc.stdout, kept[0]), drain(proc.stderr, kept[1]))
        await proc.wait()

    async def exec(self, cmd: str | list[str], *, user: str = "root", env: Mapping[str, str] | None = None,
                   timeout: float | None = None, cwd: str | None = None) -> ExecResult:
        """``cmd`` to its end (or its ``timeout``); of each of its stdout and stderr at most
        ``output_limit`` bytes are kept, half from the start and half from the end, with a marker
        where the cut is (``truncated`` says so)."""
        start = time.monotonic()
        proc = await self._spawn(cmd, user, env, cwd, asyncio.subprocess.PIPE, asyncio.subprocess.PIPE)
        head = self.output_limit // 2
        kept = (HeadTail(head, self.output_limit - head), HeadTail(head, self.output_limit - head))
        collect = asyncio.ensure_future(self._collect(proc, kept))
        timed_out = False
        try:
            done, _ = await asyncio.wait({collect}, timeout=timeout)
            if done:
                collect.result()
            else:   # killed at its timeout: the pipes are drained to their ends (a paused, full pipe
                timed_out = True    # never shows its end, and the process's wait would wait for ever)
                self._kill_group(proc)
                try:
                    await asyncio.wait_for(asyncio.shield(collect), DRAIN_SECONDS)
                except asyncio.TimeoutError:   # something outside the group holds the pipes open
                    collect.cancel()
                    transport = getattr(proc, "_transport", None)
                    if transport is not None:
                        transport.close()
        except asyncio.CancelledError:
            collect.cancel()
            self._kill_group(proc)
            raise
        finally:
            self._kill_group(proc)  # what the command left running in its group goes with it
            self._procs.discard(proc)
        out, err = (k.result() for k in kept)
        return ExecResult(None if timed_out else proc.returncode, shown(out, head=head).decode(errors="replace"),
                          shown(err, head=head).decode(errors="replace"), time.monotonic() - start, timed_out,
                          truncated=out.truncated or err.truncated)

    async def start(self, cmd: str, *, user: str = "root", env: Mapping[str, str] | None = None,
                    cwd: str | None = None) -> Job:
        job_id = secrets.token_hex(6)
        jobs = self.root / ".jobs"
        job = Job(job_id, cmd, str(jobs / f"{job_id}.log"), str(jobs / f"{job_id}.exit"), user=user)
        with open(job.log_path, "wb") as log:
            job.handle = await self._spawn(cmd, user, env, cwd, log, asyncio.subprocess.STDOUT)
        return job

    async def wait(self, job: Job, budget: float | None = None) -> ExecResult:
        proc = job.handle
        assert isinstance(proc, asyncio.subprocess.Process), "a job this sandbox started"
        remaining = None if budget is None else max(0.0, job.started + budget - time.monotonic())
        _, timed_out = await self._finish(proc, proc.wait(), remaining)
        code = None if timed_out else proc.returncode
        try:   # for readers of the marker; the agent may have filled the disk it lives on
            Path(job.marker_path).write_text("killed\n" if code is None else f"{code}\n")
        except OSError:
            pass
        return await with_job_log(self, job, ExecResult(code, "", "", time.monotonic() - job.started, timed_out),
                                  self.log_limit)

    async def kill(self, job: Job) -> None:
        proc = job.handle
        assert isinstance(proc, asyncio.subprocess.Process), "a job this sandbox started"
        self._kill_group(proc)
        await proc.wait()
        self._procs.discard(proc)

    # --- files ---------------------------------------------------------------------------

    def _inside(self, path: str) -> Path:
        """The host path of sandbox path ``path``. A path in the sandbox's own dirs must stay
        there once symlinks are followed: the orchestrator is root on the host, and the agent
        may have left a link in its workspace or home that leads elsewhere."""
        target = Path(path) if os.path.isabs(path) else Path(self.workdir) / path
        if self.isolated and self.root != Path() and (target == self.root or self.root in target.parents):
            real = Path(os.path.realpath(target))
            if real != self.root and self.root not in real.parents:
                raise SandboxError(f"{path} leads out of the sandbox (to {real})")
        return target

    async def write_file(self, path: str, data: str | bytes, *, user: str = "root", mode: int = 0o644) -> None:
        target = self._inside(path)
        target.parent.mkdir(parents=True, exist_ok=True)
        target.write_bytes(data.encode() if isinstance(data, str) else data)
        os.chmod(target, mode)
        if check_user(user) == "agent":
            self._own(target)

    async def give_to_agent(self, path: str) -> None:
        await asyncio.to_thread(self._own_tree, self._inside(path))

    async def read_file(self, path: str, *, user: str = "root") -> bytes:
        """The regular file at ``path`` whole (see :meth:`Sandbox.read_file`): below the sandbox's
        root no symlink is followed, a FIFO or a device is never opened for reading."""
        return await asyncio.to_thread(read_whole, self._inside(path), base=self._base())

    async def read_tail(self, path: str, limit: int, *, user: str = "root") -> Capped:
        """The tail of the regular file at ``path`` (see :meth:`Sandbox.read_tail`), read in
        O(``limit``) whatever the file's size, off the event loop."""
        return await asyncio.to_thread(read_capped, self._inside(path), head=0, tail=limit, base=self._base())

    def _base(self) -> Path | None:
        return None if self.root == Path() else self.root

    async def upload(self, local_path: str, dest: str, *, user: str = "root") -> None:
        source, target = Path(local_path), self._inside(dest)
        if source.is_dir():
            await asyncio.to_thread(shutil.copytree, source, target, symlinks=True, dirs_exist_ok=True)
        else:
            target.parent.mkdir(parents=True, exist_ok=True)
            await asyncio.to_thread(shutil.copy2, source, target)
        if check_user(user) == "agent":
            await asyncio.to_thread(self._own_tree, target)

    async def expose_gateway(self, url: str) -> str:
        """Relay the gateway at ``url`` into the agent's network namespace; returns the URL the
        agent uses there: the same one when its host is ``localhost`` or an IPv4 loopback
        address, else ``http(s)://127.0.0.1:PORT/...`` (the agent's namespace has nothing but
        loopback). Later agent commands find the relay listening on that address; it connects
        to ``url``'s host and port only. Without isolation, ``url`` as it is."""
        host, port = gateway_address(url)
        if not self.isolated:
            return url
        if self.root == Path():
            raise SandboxError("the sandbox is not open (use `async with`)")
        if self._relay is not None:
            self._relay.stop()
        relay_dir = self.root / ".relay"
        relay_dir.mkdir(mode=0o700, exist_ok=True)
        self._own(relay_dir)
        socket_path = relay_dir / "gateway.sock"
        try:
            self._relay = await GatewayRelay(url, socket_path, owner=(self.uid, self.gid), **self.relay_options).start()
        except OSError as exc:
            raise SandboxError(f"cannot start the gateway relay: {exc}") from exc
        inside_host = host if _is_ipv4_loopback(host) else "127.0.0.1"
        self._gateway = {"host": inside_host, "port": port, "socket": str(socket_path)}
        if host == "localhost" or inside_host == host:
            return url
        parts = urlsplit(url)
        netloc = f"127.0.0.1:{port}" if parts.port else "127.0.0.1"
        if parts.username or parts.password:
            netloc = parts.netloc.rpartition("@")[0] + "@" + netloc
        return urlunsplit(parts._replace(netloc=netloc))
