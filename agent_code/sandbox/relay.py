"""The host's end of the gateway relay: a Unix socket that leads to the gateway and nowhere else.

A sandbox's agent runs in a network namespace of its own (local: ``unshare --net``; Docker:
``--network none``) that has only a loopback interface, so it can reach no service of the host.
The gateway is made reachable through two relays:

* this one, on the host, in the orchestrator's event loop: a Unix socket (inside the sandbox's
  directory, bind-mounted into the agent's view) whose every connection is forwarded to the
  gateway's TCP address — that one address, whatever the client sends;
* :mod:`agent_code.confine.relay_inside`, in the namespace: a TCP listener on the namespace's
  own ``127.0.0.1:PORT`` forwarding to that socket.

The agent keeps using the gateway URL it was given (same host, same port), and the relay
carries bytes only: HTTP, SSE and keep-alives pass unchanged. Whatever the client sends (an
HTTP ``CONNECT``, an absolute URL, another ``Host:``), this end connects to the gateway's
address and nowhere else. A socket path too long for a Unix socket address (108 bytes: a deep
``TMPDIR``) is bound, and reached by :func:`relay_inside.serve`, through an ``O_PATH``
descriptor of its directory (``/proc/self/fd/N/NAME``).

**Budgets** (per relay, i.e. per sandbox; constructor options): at most ``max_connections`` open
at once (default 32) — one more is closed as soon as it is accepted, the sandbox's own problem,
so however many the agent opens, the orchestrator holds at most ``2 * max_connections`` fds and
the gateway ``max_connections`` connections for it, and other sandboxes' relays and the gateway
itself go on unaffected; a connection with no byte either way for ``idle_timeout`` seconds
(default 900) is closed (half-open ones do not hold their slots for ever); ``max_bytes`` (default
4 GiB: far past any agent's session, short of what fills a disk or a trajectory) ends a
connection past that many bytes, both ways together.

In the local sandbox (:meth:`LocalSandbox.expose_gateway`) the socket is
``<sandbox>/.relay/gateway.sock`` (owned by the agent's uid, 0600, in a 0700 dir), bind-mounted
at the same path into each agent command's root; the in-namespace end is forked by
:mod:`agent_code.sandbox.local_enter` and serves as the agent's uid.
"""

from __future__ import annotations

import asyncio
import contextlib
import os
import socket
from pathlib import Path
from typing import Callable
from urllib.parse import urlsplit

from agent_code.sandbox.base import SandboxError

INSIDE_SCRIPT = Path(__file__).parent.parent / "confine" / "relay_inside.py"   # stdlib only, run as a file
CHUNK = 65536
CONNECT_TIMEOUT = 10.0
UNIX_PATH_MAX = 100   # sun_path holds 108 bytes
MAX_CONNECTIONS = 32  # open at once through one sandbox's relay
IDLE_TIMEOUT = 900.0  # seconds without a byte either way
MAX_BYTES = 4 << 30   # through one connection, both ways together


def gateway_address(url: str) -> tuple[str, int]:
    """(host, port) of a gateway URL, the default port of its scheme when none is given."""
    parts = urlsplit(url)
    if parts.scheme not in ("http", "https") or not parts.hostname:
        raise SandboxError(f"cannot relay to gateway URL {url!r}: expected http(s)://HOST[:PORT]")
    return parts.hostname, parts.port or (443 if parts.scheme == "https" else 80)


async def _copy(reader: asyncio.StreamReader, writer: asyncio.StreamWriter, moved: Callable[[int], bool]) -> bool:
    """Copy until EOF (passed on as a half-close): True; False when either side failed or
    ``moved`` (told each chunk's size) says the connection has had enough."""
    try:
        while data := await reader.read(CHUNK):
            if not moved(len(data)):
                return False
            writer.write(data)
            await writer.drain()
        if writer.can_write_eof():
            writer.write_eof()
        return True
    except (ConnectionError, OSError):
        return False


class GatewayRelay:
    """A Unix socket at ``socket_path`` forwarding to the gateway at ``target_url``.

    ``owner`` (uid, gid) and ``mode`` set who may connect (the sandbox's agent user);
    ``max_connections``, ``idle_timeout`` and ``max_bytes`` are its budgets (module docstring)."""

    def __init__(self, target_url: str, socket_path: str | os.PathLike, *, owner: tuple[int, int] | None = None,
                 mode: int = 0o600, max_connections: int = MAX_CONNECTIONS, idle_timeout: float = IDLE_TIMEOUT,
                 max_bytes: int | None = MAX_BYTES) -> None:
        self.host, self.port = gateway_address(target_url)
        self.socket_path = Path(socket_path)
        self.owner, self.mode = owner, mode
        self.max_connections, self.idle_timeout, self.max_bytes = max_connections, idle_timeout, max_bytes
        self.refused = 0   # connections closed at once: past max_connections
        self._closing = False
        self._server: asyncio.AbstractServer | None = None
        self._conns: set[asyncio.Task[None]] = set()

    async def start(self) -> "GatewayRelay":
        self.socket_path.parent.mkdir(mode=0o700, parents=True, exist_ok=True)
        with contextlib.suppress(FileNotFoundError):
            self.socket_path.unlink()
        # the socket's mode is set only after it exists: its directory (0700, created here when
        # missing) is what keeps others out in between
        if len(os.fsencode(str(self.socket_path))) < UNIX_PATH_MAX:
            self._server = await asyncio.start_unix_server(self._handle, path=str(self.socket_path))
        else:   # too long for a socket address (a deep TMPDIR): bind through the directory's fd
            fd = os.open(self.socket_path.parent, os.O_PATH | os.O_DIRECTORY)
            sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
            try:
                sock.bind(f"/proc/self/fd/{fd}/{self.socket_path.name}")
            except OSError:
                sock.close()
                raise
            finally:
                os.close(fd)
            self._server = await asyncio.start_unix_server(self._handle, sock=sock)
        if self.owner is not None:
            os.chown(self.socket_path, *self.owner)
        os.chmod(self.socket_path, self.mode)
        return self

    def stop(self) -> None:
        """Stop accepting, synchronously (for a clean-up that cannot await): the socket goes."""
        self._closing = True
        if self._server is not None:
            self._server.close()
        for task in list(self._conns):
            task.cancel()
        with contextlib.suppress(FileNotFoundError):
            self.socket_path.unlink()

    async def _handle(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        if len(self._conns) >= self.max_connections:   # the sandbox's own problem: closed at once
            self.refused += 1
            writer.close()
            return
        task = asyncio.current_task()
        assert task is not None
        self._conns.add(task)
        up_writer: asyncio.StreamWriter | None = None
        try:
            async with asyncio.timeout(self.idle_timeout) as idle:
                try:   # always the gateway's address, whatever the client sends (CONNECT, Host: ...)
                    up_reader, opened = await asyncio.wait_for(asyncio.open_connection(self.host, self.port),
                                                               CONNECT_TIMEOUT)
                except (OSError, asyncio.TimeoutError):
                    return
                up_writer = opened
                await self._pump(reader, writer, up_reader, opened, idle)
        except TimeoutError:   # idle for idle_timeout: the slot is freed
            pass
        except asyncio.CancelledError:
            if not self._closing:
                raise   # (closing: ended quietly; asyncio's stream callback would log the cancellation)
        finally:
            for w in (up_writer, writer):
                if w is not None:
                    w.close()
            self._conns.discard(task)

    async def _pump(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter,
                    up_reader: asyncio.StreamReader, up_writer: asyncio.StreamWriter, idle: asyncio.Timeout) -> None:
        """Both ways to their ends; a failure on either side, or the byte budget spent, ends both.
        Every chunk either way puts the idle deadline off again."""
        loop, total = asyncio.get_running_loop(), [0]

        def moved(size: int) -> bool:
            total[0] += size
            idle.reschedule(loop.time() + self.idle_timeout)
            return self.max_bytes is None or total[0] <= self.max_bytes

        down = asyncio.ensure_future(_copy(up_reader, writer, moved))
        up = asyncio.ensure_future(_copy(reader, up_writer, moved))
        try:
            pending: set[asyncio.Future[bool]] = {up, down}
            while pending:
                finished, pending = await asyncio.wait(pending, return_when=asyncio.FIRST_COMPLETED)
                if not all(f.result() for f in finished):
                    break
        finally:
            for f in (up, down):
                f.cancel()
            await asyncio.gather(up, down, return_exceptions=True)

    async def close(self) -> None:
        self._closing = True
        if self._server is not None:
            self._server.close()
            for task in list(self._conns):
                task.cancel()
            await asyncio.gather(*self._conns, return_exceptions=True)
            with contextlib.suppress(Exception):
                await asyncio.wait_for(self._server.wait_closed(), 2)
            self._server = None
        with contextlib.suppress(FileNotFoundError):
            self.socket_path.unlink()

    async def __aenter__(self) -> "GatewayRelay":
        return await self.start()

    async def __aexit__(self, *exc: object) -> None:
        await self.close()
