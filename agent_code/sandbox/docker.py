"""The Docker sandbox: one throw-away container per sandbox, driven through the Docker SDK.

The default image is the project's own, ``agent-code-sandbox:latest`` (``AGENT_CODE_DOCKER_IMAGE``
overrides it), built by ``scripts/docker-setup.sh``: Debian bookworm with python3 3.11, pytest,
git, node 20 and the Claude Code, Codex and Qwen Code CLIs; a task may name its own ``image``
(SWE-bench style). The project's image is never pulled (there is no registry to pull it from):
a missing one is a :class:`SandboxError` saying to run the set-up script.

What a container is, and what that guarantees:

* **its own network namespace with loopback only** (``network_mode="none"``): no host service,
  no other container, no internet. The gateway is reached through a relay
  (:meth:`DockerSandbox.expose_gateway`): the host end (:class:`~agent_code.sandbox.relay.
  GatewayRelay`) listens on a Unix socket in a per-sandbox host directory (0700, root's) — the
  container's only bind mount, read-only, at ``/run/agent-code`` — and connects to the gateway
  and nowhere else; the container end (``confine/relay_inside.py``, stdlib only, copied in) runs as
  root and listens on the container's own ``127.0.0.1:PORT``. The agent uses
  ``http://127.0.0.1:PORT``: its gateway, and nothing else of this machine.
* **its own root filesystem** (the image's, copied): no host file is visible, and everything
  the agent writes dies with the container; grading runs in a fresh container of its own, so
  hidden tests are never where the agent is.
* **an unprivileged agent**: ``agent`` (added with ``useradd`` unless the image has one) owns
  ``/workspace`` and ``/home/agent``; every capability is dropped except the few root's set-up
  needs (``chown``, ``dac_override``, ``fowner``, ``setuid``, ``setgid``, ``kill``), none of
  which an unprivileged exec holds, ``no-new-privileges`` stops set-uid programs from regaining
  any, and a pids limit (``pids_limit``) bounds fork bombs; ``mem_limit`` / ``nano_cpus`` are
  options.

The container only sleeps (``sleep infinity`` as its entrypoint, ``docker-init`` as PID 1 to
reap orphans). Everything else goes through the engine's API:

* ``exec`` is a Docker *exec* (``exec_run``) with ``user=``, ``environment=`` and ``workdir=``;
  its timeout is enforced inside the container by ``timeout -s KILL``, which kills the
  command's whole process group (see :func:`killing_timeout`).
* ``write_file``/``upload`` send a tar archive built in memory (``put_archive``), its members
  owned by the writing user; ``read_file``/``read_tail`` are :class:`~agent_code.sandbox.base.
  PollingJobs`'s: a command in the container that reads a regular file only, its tail at most,
  with the reader's rights, under ``timeout`` (a FIFO or a sparse 100 GB file the agent left
  costs the orchestrator a bounded exec, never a hang or the file's size in memory).
* detached jobs are :class:`~agent_code.sandbox.base.PollingJobs` (``setsid`` + marker file),
  killed with a ``kill`` that dash accepts too (:func:`kill_group_command`).
* ``__aexit__`` removes the container with ``force=True``, which kills whatever still runs,
  stops the relay and removes the per-sandbox host directory.

The ``docker`` package is imported lazily, so importing this module never needs it, and every
blocking SDK call runs in a thread (``asyncio.to_thread``). An engine that cannot be reached is a
:class:`SandboxError` naming where it was looked for (``DOCKER_HOST`` or the default socket). The
engine must run on this machine (the relay's socket directory is a bind mount).

The pure helpers at the top (timeouts, tar archives) are shared with the E2B backend.

Not capped yet: a command's own output (``exec_run`` collects it whole in the Docker SDK); the
reads above are bounded by their command.
"""

from __future__ import annotations

import asyncio
import io
import math
import os
import secrets
import shlex
import shutil
import sys
import tarfile
import tempfile
import time
from collections.abc import Mapping
from pathlib import Path
from typing import TYPE_CHECKING, Any, Self

from agent_code.sandbox.base import ExecResult, Job, PollingJobs, SandboxError, as_shell, check_user, resolve

if TYPE_CHECKING:   # the Docker SDK is imported when a sandbox starts, not with this module
    from docker import DockerClient
    from docker.models.containers import Container

    from agent_code.sandbox.relay import GatewayRelay

DEFAULT_HOST = "unix:///var/run/docker.sock"
PROJECT_IMAGE = "agent-code-sandbox"          # built by scripts/docker-setup.sh
API_TIMEOUT = 600                             # seconds a Docker API call may take
DEFAULT_IMAGE = f"{PROJECT_IMAGE}:latest"
SETUP_COMMAND = "bash scripts/docker-setup.sh"
RELAY_DIR = "/run/agent-code"                 # the per-sandbox host directory, inside (read-only)
RELAY_SOCKET = f"{RELAY_DIR}/gateway.sock"
RELAY_SCRIPT = "/usr/local/lib/agent-code/relay_inside.py"
# what root's set-up needs inside the container (chown the workspace, useradd, kill a job's group,
# read and write files whatever their modes); an unprivileged exec holds none of them
NETWORK_MODES = ("none", "host")
ROOT_CAPS = ("CHOWN", "DAC_OVERRIDE", "FOWNER", "SETUID", "SETGID", "KILL")


def default_image() -> str:
    return os.environ.get("AGENT_CODE_DOCKER_IMAGE") or DEFAULT_IMAGE


def is_project_image(image: str) -> bool:
    return image.partition(":")[0] == PROJECT_IMAGE
TIMEOUT_GRACE = 30.0   # how long past a command's own timeout the caller waits for its exec to end


# --- pure helpers (also used by the E2B backend) -------------------------------------------

def killing_timeout(cmd: str, timeout: float | None) -> str:
    """``cmd`` under coreutils/busybox ``timeout -s KILL``: at the deadline the command's whole
    process group is killed (``timeout`` puts itself and the command in a group of their own)."""
    if timeout is None:
        return cmd
    return f"timeout -s KILL {max(1, math.ceil(timeout))} sh -c {shlex.quote(cmd)}"


def ended_by_timeout(exit_code: int | None, elapsed: float, timeout: float | None) -> bool:
    """Whether a command run under :func:`killing_timeout` was killed at its deadline: it died
    of SIGKILL (137 from a shell, a negative code from a process supervisor) or ``timeout``'s
    own 124, no earlier than the deadline."""
    if timeout is None or exit_code is None:
        return False
    return elapsed >= timeout and (exit_code in (124, 137) or exit_code < 0)


def kill_group_command(pgid: int) -> str:
    """SIGKILL a process group in a way every ``sh`` takes (dash's ``kill`` rejects ``-KILL --``)."""
    return f"kill -s KILL -- -{int(pgid)} 2>/dev/null; true"


def _owned(info: tarfile.TarInfo, uid: int, gid: int) -> tarfile.TarInfo:
    info.uid, info.gid, info.uname, info.gname = uid, gid, "", ""
    return info


def tar_file(name: str, data: bytes, *, mode: int = 0o644, uid: int = 0, gid: int = 0,
             compress: bool = False) -> bytes:
    """A tar archive (gzipped if ``compress``) holding one regular file ``name``."""
    buffer = io.BytesIO()
    with tarfile.open(fileobj=buffer, mode="w:gz" if compress else "w") as tar:
        info = _owned(tarfile.TarInfo(name), uid, gid)
        info.size, info.mode, info.mtime = len(data), mode, int(time.time())
        tar.addfile(info, io.BytesIO(data))
    return buffer.getvalue()


def tar_tree(source: str | Path, *, uid: int = 0, gid: int = 0, compress: bool = False) -> bytes:
    """A tar archive of a local file or directory. A directory's *contents* sit at the archive's
    top level (extracted into a destination directory, they become its contents); a file sits
    there under its own name. Modes and symlinks are kept, owners set to ``uid``/``gid``."""
    source = Path(source)
    buffer = io.BytesIO()
    with tarfile.open(fileobj=buffer, mode="w:gz" if compress else "w") as tar:
        members = sorted(source.iterdir()) if source.is_dir() else [source]
        for member in members:
            tar.add(member, arcname=member.name, filter=lambda info: _owned(info, uid, gid))
    return buffer.getvalue()


# --- the backend ---------------------------------------------------------------------------

class DockerSandbox(PollingJobs):
    name = "docker"
    read_cwd = "/"   # reads work whatever the agent did to its workspace

    def __init__(self, image: str | None = None, *, workdir: str = "/workspace",
                 home: str = "/home/agent", agent_user: str = "agent", base_url: str | None = None,
                 pull: bool = True, network_mode: str = "none", mem_limit: str | None = None,
                 nano_cpus: int | None = None, pids_limit: int | None = 4096, env: Mapping[str, str] | None = None,
                 run_options: Mapping[str, Any] | None = None) -> None:
        if network_mode not in NETWORK_MODES:
            raise SandboxError(f"docker sandbox network_mode {network_mode!r}: choose 'none' (its own loopback, the "
                               "gateway relayed in) or 'host' (this machine's network, every loopback service "
                               "included); a bridge on a private address range is not offered")
        self.image = image or default_image()
        self.workdir, self.home = workdir, home
        self.agent_user = agent_user
        self.base_url = base_url
        self.pull = pull and not is_project_image(self.image)   # the project's image is built, not pulled
        self.env = dict(env or {})
        limits = {"network_mode": network_mode, "mem_limit": mem_limit, "nano_cpus": nano_cpus,
                  "pids_limit": pids_limit}
        self.run_options: dict[str, Any] = {k: v for k, v in limits.items() if v is not None}
        self.run_options.update(cap_drop=["ALL"], cap_add=list(ROOT_CAPS), security_opt=["no-new-privileges=true"])
        self.run_options.update(run_options or {})
        self.id = secrets.token_hex(6)
        self.agent_uid = self.agent_gid = 0
        self._client: DockerClient | None = None
        self._container: Container | None = None
        self._relay_dir: str | None = None   # on this machine: the relay's socket lives here
        self._relay: GatewayRelay | None = None
        self._gateway_url: tuple[str, str] | None = None

    @property
    def host(self) -> str:
        return self.base_url or os.environ.get("DOCKER_HOST") or DEFAULT_HOST

    # --- lifecycle ----------------------------------------------------------------------

    async def __aenter__(self) -> Self:
        client = self._client = await asyncio.to_thread(self._connect)
        try:
            await asyncio.to_thread(self._ensure_image, client)
            # 0700, root's (this process's): only root here and root in the container get in
            self._relay_dir = tempfile.mkdtemp(prefix=f"agent-code-docker-{self.id}-")
            # created in a thread that a cancellation cannot stop: wait for it then, so that the
            # container it makes is known, and removed below, instead of left behind
            creating = asyncio.ensure_future(asyncio.to_thread(self._create_container, client))
            try:
                self._container = await asyncio.shield(creating)
            except asyncio.CancelledError:
                try:
                    self._container = await creating
                except Exception:
                    pass
                raise
            await self._set_up_users()
        except BaseException:
            await self.__aexit__(*sys.exc_info())
            raise
        return self

    async def __aexit__(self, *exc: object) -> None:
        container, client = self._container, self._client
        self._container = self._client = None
        relay, self._relay, self._gateway_url = self._relay, None, None
        if relay is not None:
            await relay.close()
        if container is not None:
            try:
                await asyncio.to_thread(container.remove, force=True, v=True)
            except Exception as e:  # already gone: fine; anything else is worth saying, unless
                gone = "No such container" in str(e) or "already in progress" in str(e)
                if not gone and not (exc and exc[0] is not None):  # it would hide another error
                    raise SandboxError(f"could not remove container {container.short_id}: {e}") from e
        if client is not None:
            await asyncio.to_thread(client.close)
        relay_dir, self._relay_dir = self._relay_dir, None
        if relay_dir is not None:
            shutil.rmtree(relay_dir, ignore_errors=True)

    def _connect(self) -> DockerClient:
        try:
            import docker
        except ImportError as e:
            raise SandboxError("the docker sandbox needs the Docker SDK: pip install 'agent-code[remote]'") from e
        try:
            # creating a container copies the whole image under the vfs storage driver (what
            # scripts/docker-setup.sh starts): on a loaded machine that takes minutes, not the
            # SDK's default 60 s read timeout
            client = docker.DockerClient(base_url=self.base_url, timeout=API_TIMEOUT) if self.base_url \
                else docker.from_env(timeout=API_TIMEOUT)
            client.ping()
        except Exception as e:
            raise SandboxError(f"no Docker engine at {self.host} ({type(e).__name__}: {e})") from e
        return client

    def _ensure_image(self, client: DockerClient) -> None:
        import docker

        try:
            client.images.get(self.image)
        except docker.errors.ImageNotFound:
            if is_project_image(self.image):
                raise SandboxError(f"image {self.image} is not on the Docker engine at {self.host}: "
                                   f"build it with `{SETUP_COMMAND}` (in agent-code's checkout)") from None
            if not self.pull:
                raise SandboxError(f"image {self.image} is not on the Docker engine at {self.host} "
                                   "(and pull=False)") from None
            try:
                client.images.pull(self.image)
            except docker.errors.APIError as e:
                raise SandboxError(f"could not pull image {self.image}: {e}") from e

    def _create_container(self, client: DockerClient) -> Container:
        try:
            return client.containers.run(
                self.image, entrypoint=["sleep", "infinity"], detach=True, init=True,
                working_dir="/", name=f"agent-code-{self.id}", labels={"agent-code.sandbox": self.id},
                environment=self.env, hostname="sandbox",
                volumes={self._relay_dir: {"bind": RELAY_DIR, "mode": "ro"}}, **self.run_options)
        except Exception as e:   # an API error, or the engine too slow to answer (a read timeout)
            try:   # created but not started (run = create + start), or created after we gave up
                client.containers.get(f"agent-code-{self.id}").remove(force=True, v=True)
            except Exception:
                pass
            raise SandboxError(f"could not start a container from {self.image}: {type(e).__name__}: {e}") from e

    async def _set_up_users(self) -> None:
        agent, home = shlex.quote(self.agent_user), shlex.quote(self.home)
        script = (f"id -u {agent} >/dev/null 2>&1 || useradd -m -d {home} -s /bin/sh {agent} "
                  f"|| adduser -D -h {home} -s /bin/sh {agent}; "
                  f"mkdir -p {shlex.quote(self.workdir)} {home} && "
                  f"chown {agent}: {shlex.quote(self.workdir)} {home} && id -u {agent} && id -g {agent}")
        result = await self.exec(script, user="root", cwd="/", timeout=120)
        ids = result.stdout.split()
        if not result.ok or len(ids) < 2 or not all(i.isdigit() for i in ids[-2:]):
            raise SandboxError(f"could not set up user '{self.agent_user}' in {self.image}: {result.output()}")
        self.agent_uid, self.agent_gid = int(ids[-2]), int(ids[-1])

    # --- commands -----------------------------------------------------------------------

    def _docker_user(self, user: str) -> str:
        return self.agent_user if check_user(user) == "agent" else "root"

    def _ids(self, user: str) -> tuple[int, int]:
        return (self.agent_uid, self.agent_gid) if check_user(user) == "agent" else (0, 0)

    def _container_or_fail(self) -> Container:
        if self._container is None:
            raise SandboxError("the docker sandbox is not running (use it inside `async with`)")
        return self._container

    async def exec(self, cmd: str | list[str], *, user: str = "root", env: Mapping[str, str] | None = None,
                   timeout: float | None = None, cwd: str | None = None) -> ExecResult:
        import docker

        container = self._container_or_fail()
        argv = ["sh", "-c", killing_timeout(as_shell(cmd), timeout)]
        start = time.monotonic()
        call = asyncio.to_thread(container.exec_run, argv, user=self._docker_user(user),
                                 environment=dict(env or {}), workdir=resolve(cwd or self.workdir, self.workdir),
                                 demux=True)
        try:
            done = await asyncio.wait_for(call, None if timeout is None else timeout + TIMEOUT_GRACE)
        except TimeoutError:  # `timeout` itself did not end it: give up on the exec
            return ExecResult(None, "", "", time.monotonic() - start, timed_out=True)
        except docker.errors.APIError as e:
            raise SandboxError(f"docker exec failed in {container.short_id}: {e}") from e
        elapsed = time.monotonic() - start
        stdout, stderr = done.output or (None, None)
        out = (stdout or b"").decode(errors="replace")
        err = (stderr or b"").decode(errors="replace")
        if ended_by_timeout(done.exit_code, elapsed, timeout):
            return ExecResult(None, out, err, elapsed, timed_out=True)
        return ExecResult(done.exit_code, out, err, elapsed)

    async def kill(self, job: Job) -> None:
        if isinstance(job.handle, int) and job.handle:
            await self.exec(kill_group_command(job.handle), cwd="/", timeout=30)

    async def _must(self, script: str, user: str, what: str) -> None:
        result = await self.exec(script, user=user, cwd="/", timeout=120)
        if not result.ok:
            raise SandboxError(f"{what}: {result.output()}")

    # --- files --------------------------------------------------------------------------

    async def _put(self, directory: str, archive: bytes, user: str) -> None:
        import docker

        container = self._container_or_fail()
        await self._must(f"mkdir -p {shlex.quote(directory)}", user, f"could not create {directory}")
        try:
            ok = await asyncio.to_thread(container.put_archive, directory, archive)
        except docker.errors.APIError as e:
            raise SandboxError(f"could not copy into {directory}: {e}") from e
        if not ok:
            raise SandboxError(f"could not copy into {directory}")

    async def write_file(self, path: str, data: str | bytes, *, user: str = "root", mode: int = 0o644) -> None:
        path = resolve(path, self.workdir)
        uid, gid = self._ids(user)
        payload = data.encode() if isinstance(data, str) else data
        parent, name = os.path.split(path)
        await self._put(parent or "/", tar_file(name, payload, mode=mode, uid=uid, gid=gid), user)

    async def upload(self, local_path: str, dest: str, *, user: str = "root") -> None:
        source, dest = Path(local_path), resolve(dest, self.workdir)
        if not source.exists():
            raise FileNotFoundError(local_path)
        uid, gid = self._ids(user)
        if source.is_dir():
            await self._put(dest, await asyncio.to_thread(tar_tree, source, uid=uid, gid=gid), user)
        else:
            await self.write_file(dest, source.read_bytes(), user=user, mode=source.stat().st_mode & 0o7777)

    async def give_to_agent(self, path: str) -> None:
        """Make ``path`` (recursively) the agent user's."""
        await self._must(f"chown -R {shlex.quote(self.agent_user)}: {shlex.quote(resolve(path, self.workdir))}",
                         "root", f"could not give {path} to {self.agent_user}")

    async def expose_gateway(self, url: str) -> str:
        """The gateway at ``url`` (as this machine reaches it), relayed into the container: a
        Unix socket in the sandbox's host directory forwards to ``url``'s address only, and
        ``relay_inside.py`` (root, in the container) listens on the container's own loopback at
        the same port. Returns ``url`` with its host set to ``127.0.0.1``. Idempotent for one URL."""
        from urllib.parse import urlsplit, urlunsplit

        from agent_code.sandbox.relay import INSIDE_SCRIPT, GatewayRelay, gateway_address

        self._container_or_fail()
        if self.run_options.get("network_mode") == "host":   # this machine's network: nothing to relay
            return url
        if self._gateway_url is not None:
            if self._gateway_url[0] != url:
                raise SandboxError(f"this sandbox already relays {self._gateway_url[0]}, not {url}")
            return self._gateway_url[1]
        _host, port = gateway_address(url)
        assert self._relay_dir is not None
        relay = GatewayRelay(url, os.path.join(self._relay_dir, "gateway.sock"), owner=(0, 0))
        await relay.start()
        self._relay = relay
        try:
            await self.write_file(RELAY_SCRIPT, INSIDE_SCRIPT.read_bytes(), mode=0o644)
            started = await self.exec(["python3", RELAY_SCRIPT, "--listen", f"127.0.0.1:{port}",
                                       "--socket", RELAY_SOCKET], user="root", cwd="/", timeout=60)
            if not started.ok:
                raise SandboxError(f"the gateway relay did not start in {self.image}: {started.output()}")
        except BaseException:
            self._relay = None
            await relay.close()
            raise
        parts = urlsplit(url)
        netloc = f"127.0.0.1:{port}"
        if parts.username or parts.password:   # keep credentials in the URL as they were
            netloc = parts.netloc.rpartition("@")[0] + "@" + netloc
        inside = urlunsplit((parts.scheme, netloc, parts.path, parts.query, parts.fragment))
        self._gateway_url = (url, inside)
        return inside
