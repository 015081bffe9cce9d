"""The E2B sandbox: a Firecracker micro-VM from E2B's cloud (or a self-hosted E2B), driven by the
official ``e2b`` SDK (``AsyncSandbox``), imported lazily (``pip install 'agent-code[remote]'``).

Connection: ``api_key`` (else ``E2B_API_KEY``), ``domain`` (else ``E2B_DOMAIN``, ``e2b.app``),
``api_url`` (else ``https://api.<domain>``) and ``sandbox_url`` (one URL for every sandbox's
envd, routed by the ``E2b-Sandbox-Id`` header; else ``https://sandbox.<domain>``) are handed to
the SDK as they are. What the SDK sends, and what ``tests/fakes/e2b.py`` answers:

* control plane, ``X-API-KEY`` header: ``POST /v2/sandboxes`` ``{"templateID", "timeout",
  "envVars", "metadata"}`` → ``201 {"sandboxID", "envdVersion", "envdAccessToken", ...}``;
  ``DELETE /sandboxes/{id}`` on exit;
* envd (headers ``E2b-Sandbox-Id``, ``X-Access-Token``): ``POST /process.Process/Start``
  (Connect server stream, ``application/connect+json``: ``{"process": {"cmd": "/bin/bash",
  "args": ["-l", "-c", CMD], "envs", "cwd"}}`` → start/data/end events), ``POST
  /process.Process/SendSignal`` (unary JSON, SIGKILL), ``GET``/``POST /files?path=&username=``.

Users: the protocol's ``root`` is E2B's ``root``, ``agent`` is E2B's unprivileged ``user``
(HTTP Basic ``user:`` on envd). ``home`` is that user's ``$HOME`` as the sandbox reports it on
entry (``/home/user`` on E2B); ``workdir`` defaults to ``<home>/workspace``.

The gateway: an E2B sandbox runs in E2B's cloud, so the orchestrator's loopback gateway
(``http://127.0.0.1:PORT``) cannot be reached from it. :meth:`E2BSandbox.expose_gateway` uses
the public gateway URL the user gives — ``AGENT_CODE_E2B_GATEWAY_URL`` (what ``agent-code
rollout --sandbox e2b`` reads), or the ``gateway_url`` option (``RolloutConfig.sandbox_options``)
— e.g. a ``serve`` on a reachable host or a tunnel to this machine's gateway; the agent's
session key is the only credential it needs there. A loopback or unspecified address (as given,
or as the only URL there is) is refused with a :class:`SandboxError` saying what to set.

``exec`` runs the command under ``timeout -s KILL`` in the VM (its whole process group dies at
the deadline, see :func:`~agent_code.sandbox.docker.killing_timeout`); should the command's
stream outlive that by ``TIMEOUT_GRACE`` the process is killed over envd. ``upload`` of a
directory sends one gzipped tar (``POST /files``) and unpacks it with ``tar`` as the user.
Detached jobs are :class:`~agent_code.sandbox.base.PollingJobs`, and so are
``read_file``/``read_tail``: a command in the VM that reads a regular file only, its tail at most,
under ``timeout`` (envd's ``GET /files`` would read a FIFO or a sparse 100 GB file whole). The VM's own lifetime
(``lifetime`` seconds, E2B's sandbox ``timeout``) bounds everything; leaving the context kills
it. Every SDK failure becomes a :class:`SandboxError` saying what was being done.
"""

from __future__ import annotations

import asyncio
import os
import secrets
import shlex
import time
from collections.abc import AsyncIterator, Mapping
from contextlib import asynccontextmanager
from pathlib import Path
from typing import TYPE_CHECKING, Self

from agent_code.sandbox.base import ExecResult, Job, PollingJobs, SandboxError, as_shell, check_user, resolve
from agent_code.sandbox.docker import (
    TIMEOUT_GRACE,
    ended_by_timeout,
    kill_group_command,
    killing_timeout,
    tar_tree,
)

if TYPE_CHECKING:   # the E2B SDK is imported when a sandbox starts, not with this module
    from e2b import AsyncSandbox

E2B_USERS = {"root": "root", "agent": "user"}
GATEWAY_ENV = "AGENT_CODE_E2B_GATEWAY_URL"


def tunnel_hosts() -> list[str]:
    """The host name of ``AGENT_CODE_E2B_GATEWAY_URL`` when it names one (a tunnel to this machine's
    in-process gateway keeps its public ``Host``): the names that gateway must serve besides its
    own address (``create_app(allowed_hosts=…)``, :mod:`agent_code.gateway.request_guard`)."""
    import ipaddress
    from urllib.parse import urlsplit

    try:
        host = urlsplit(os.environ.get(GATEWAY_ENV, "")).hostname or ""
        ipaddress.ip_address(host)
    except ValueError:
        return [host] if host else []
    return []


def is_local_url(url: str) -> bool:
    """Whether ``url`` names this machine only (loopback, ``localhost``, an unspecified address):
    an address a cloud sandbox cannot reach."""
    import ipaddress
    from urllib.parse import urlsplit

    host = (urlsplit(url).hostname or "").lower()
    if host in ("", "localhost") or host.endswith(".localhost"):
        return True
    try:
        address = ipaddress.ip_address(host)
    except ValueError:
        return False
    return address.is_loopback or address.is_unspecified or address.is_link_local


def e2b_user(user: str) -> str:
    return E2B_USERS[check_user(user)]


class E2BSandbox(PollingJobs):
    name = "e2b"

    def __init__(self, template: str = "base", api_key: str | None = None, api_url: str | None = None,
                 domain: str | None = None, *, sandbox_url: str | None = None, workdir: str | None = None,
                 lifetime: int = 3600, request_timeout: float = 60.0, envs: Mapping[str, str] | None = None,
                 metadata: Mapping[str, str] | None = None, gateway_url: str | None = None) -> None:
        self.template = template
        self.gateway_url = gateway_url or os.environ.get(GATEWAY_ENV) or None
        connection = {"api_key": api_key, "api_url": api_url, "domain": domain, "sandbox_url": sandbox_url}
        self.connection = {k: v for k, v in connection.items() if v is not None}
        self.lifetime = lifetime
        self.request_timeout = request_timeout
        self.envs = dict(envs or {})
        self.metadata = dict(metadata or {})
        self._workdir_option = workdir
        self.workdir = self.home = ""
        self._box: AsyncSandbox | None = None

    @property
    def sandbox_id(self) -> str | None:
        return self._box.sandbox_id if self._box is not None else None

    def _where(self) -> str:
        api = self.connection.get("api_url") or os.environ.get("E2B_API_URL") or \
            f"https://api.{self.connection.get('domain') or os.environ.get('E2B_DOMAIN') or 'e2b.app'}"
        return f"template '{self.template}', API {api}"

    @asynccontextmanager
    async def _sdk(self, doing: str) -> AsyncIterator[None]:
        """Turn the SDK's (and its transports') failures into a SandboxError saying what failed."""
        try:
            yield
        except (SandboxError, FileNotFoundError, asyncio.CancelledError):
            raise
        except Exception as e:
            where = f"sandbox {self.sandbox_id}" if self._box is not None else self._where()
            raise SandboxError(f"E2B ({where}): could not {doing}: {type(e).__name__}: {e}") from e

    # --- lifecycle ----------------------------------------------------------------------

    async def __aenter__(self) -> Self:
        try:
            from e2b import AsyncSandbox
        except ImportError as e:
            raise SandboxError("the e2b sandbox needs the E2B SDK: pip install 'agent-code[remote]'") from e
        async with self._sdk("create a sandbox"):
            self._box = await AsyncSandbox.create(self.template, timeout=self.lifetime, envs=self.envs,
                                                  metadata=self.metadata, request_timeout=self.request_timeout,
                                                  **self.connection)
        try:
            await self._set_up()
        except BaseException:
            try:
                await self._kill()
            except SandboxError:
                pass  # the set-up failure is the one to report
            raise
        return self

    async def _set_up(self) -> None:
        explicit = self._workdir_option
        probe = "printf '\\nHOME=%s' \"$HOME\"" + ("" if explicit else ' && mkdir -p "$HOME/workspace"')
        result = await self.exec(probe, user="agent", timeout=60)
        home = result.stdout.rpartition("\nHOME=")[2]  # after anything a login profile printed
        if not result.ok or not home.startswith("/"):
            raise SandboxError(f"E2B sandbox {self.sandbox_id}: could not find the agent's home: {result.output()}")
        self.home = home
        self.workdir = explicit or f"{self.home}/workspace"
        if explicit:
            quoted = shlex.quote(explicit)
            made = await self.exec(f"mkdir -p {quoted} && chown user: {quoted}", user="root", cwd=self.home,
                                   timeout=60)
            if not made.ok:
                raise SandboxError(f"E2B sandbox {self.sandbox_id}: could not create {explicit}: {made.output()}")

    async def __aexit__(self, *exc: object) -> None:
        try:
            await self._kill()
        except SandboxError:
            if not exc or exc[0] is None:  # don't hide the error that is unwinding the context
                raise

    async def _kill(self) -> None:
        box, self._box = self._box, None
        if box is not None:
            async with self._sdk(f"kill sandbox {box.sandbox_id}"):
                await box.kill()

    def _running(self) -> AsyncSandbox:
        if self._box is None:
            raise SandboxError("the e2b sandbox is not running (use it inside `async with`)")
        return self._box

    # --- commands -----------------------------------------------------------------------

    async def exec(self, cmd: str | list[str], *, user: str = "root", env: Mapping[str, str] | None = None,
                   timeout: float | None = None, cwd: str | None = None) -> ExecResult:
        from e2b import CommandExitException

        box = self._running()
        start = time.monotonic()
        async with self._sdk("run a command"):
            handle = await box.commands.run(
                killing_timeout(as_shell(cmd), timeout), background=True, envs=dict(env or {}),
                user=e2b_user(user), cwd=resolve(cwd, self.workdir) if cwd else self.workdir or None, timeout=0,
                request_timeout=self.request_timeout)
            try:
                done = await asyncio.wait_for(handle.wait(), None if timeout is None else timeout + TIMEOUT_GRACE)
                code, out, err = done.exit_code, done.stdout, done.stderr
            except CommandExitException as e:
                code, out, err = e.exit_code, e.stdout, e.stderr
            except TimeoutError:  # `timeout` did not end it: kill it over envd
                await handle.kill()
                return ExecResult(None, handle.stdout or "", handle.stderr or "", time.monotonic() - start,
                                  timed_out=True)
        elapsed = time.monotonic() - start
        if ended_by_timeout(code, elapsed, timeout):
            return ExecResult(None, out or "", err or "", elapsed, timed_out=True)
        return ExecResult(code, out or "", err or "", elapsed)

    async def kill(self, job: Job) -> None:
        if isinstance(job.handle, int) and job.handle:
            await self.exec(kill_group_command(job.handle), timeout=30)

    async def _must(self, script: str, user: str, what: str) -> None:
        result = await self.exec(script, user=user, cwd=self.home or None, timeout=300)
        if not result.ok:
            raise SandboxError(f"E2B sandbox {self.sandbox_id}: {what}: {result.output()}")

    # --- files --------------------------------------------------------------------------

    async def write_file(self, path: str, data: str | bytes, *, user: str = "root", mode: int = 0o644) -> None:
        path = resolve(path, self.workdir)
        async with self._sdk(f"write {path}"):
            await self._running().files.write(path, data, user=e2b_user(user),
                                              request_timeout=self.request_timeout)
        if mode != 0o644:
            await self._must(f"chmod {mode:o} {shlex.quote(path)}", user, f"could not chmod {path}")

    async def upload(self, local_path: str, dest: str, *, user: str = "root") -> None:
        source, dest = Path(local_path), resolve(dest, self.workdir)
        if not source.exists():
            raise FileNotFoundError(local_path)
        if not source.is_dir():
            await self.write_file(dest, source.read_bytes(), user=user, mode=source.stat().st_mode & 0o7777)
            return
        archive = await asyncio.to_thread(tar_tree, source, compress=True)
        staged = f"{self.home}/.upload-{secrets.token_hex(6)}.tar.gz"
        await self.write_file(staged, archive, user=user)
        await self._must(f"mkdir -p {shlex.quote(dest)} && tar -xzf {shlex.quote(staged)} --no-same-owner "
                         f"-C {shlex.quote(dest)}; status=$?; rm -f {shlex.quote(staged)}; exit $status",
                         user, f"could not unpack {local_path} into {dest}")

    async def give_to_agent(self, path: str) -> None:
        """Make ``path`` (recursively) the agent user's."""
        target = shlex.quote(resolve(path, self.workdir))
        await self._must(f"chown -R user: {target}", "root", f"could not give {path} to the agent")

    async def expose_gateway(self, url: str) -> str:
        """The URL the agent in the E2B VM uses for the gateway this machine reaches at ``url``:
        the public ``gateway_url`` given by the user when there is one, else ``url`` itself if
        it is not local to this machine; a loopback one is a :class:`SandboxError` saying what
        to set (nothing here can carry a cloud VM's traffic to this machine's loopback)."""
        from agent_code.sandbox.relay import gateway_address

        public = self.gateway_url or url
        gateway_address(public)   # http(s)://HOST[:PORT], else a SandboxError
        if is_local_url(public):
            raise SandboxError(
                f"the gateway at {public} is local to this machine and an E2B sandbox runs in E2B's cloud, so it "
                f"cannot reach it: serve the gateway at an address the sandbox can reach (e.g. `agent-code serve` on a "
                f"public host, or a tunnel to this one) and pass it as the sandbox option gateway_url=URL or "
                f"{GATEWAY_ENV}=URL")
        return public
