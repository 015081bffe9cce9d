"""Connection limits: no client can tie up the gateway by holding connections open.

uvicorn by itself waits forever for a request's headers and keeps every connection it
accepts, so ~20,000 idle or half-open connections exhaust the file descriptors and nothing
new gets in. :class:`ConnectionLimits` bounds three things:

* ``header_timeout_s`` — a connection must complete a request's headers within this long of
  opening (and of its last reply): one that sends nothing, or trickles its headers, is closed.
  (A body that stalls is refused by the routes themselves with a 408: ``http.read_body``.)
* ``max_connections`` — connections open at once. Past it, the longest-open *idle*
  connections (no request in progress) are closed to make room, so a flood of idle
  connections never keeps out a new request; busy ones are never cut.
* ``max_requests`` — requests being answered at once (a stream counts until it ends); past
  it a request gets ``503`` in its protocol's error format with ``retry-after: 1``
  (:class:`RequestCap`). ``/healthz`` is exempt, so a monitor still sees the gateway.

Within that, one session (one API key) may have at most ``max_session_requests`` requests open at
once (:class:`SessionRequestCap`, applied by ``create_app``; default
:data:`DEFAULT_SESSION_REQUESTS`): an agent that opens thousands of connections through its
sandbox's relay gets ``429`` (its protocol's format, ``retry-after: 1``) for the requests past its
own budget, from the moment their headers arrive (before a body is read), and can hold no more
than that many of the global slots, so its siblings keep theirs. Requests are counted by the key
that ``create_app``'s ``key`` function gives: the API key (``default`` without one); on a gateway
of explicit sessions every key that names no live session shares one budget (random keys do not
multiply an agent's slots); the admin token's requests and ``/healthz`` are not counted.

``serve`` exposes them as ``--header-timeout``, ``--max-connections``, ``--max-requests`` and
``--max-session-requests`` and raises its open-file limit to the hard limit, capping ``max_connections`` below it.
"""

from __future__ import annotations

import asyncio
import heapq
import resource
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Callable, Iterable, Literal, TypedDict, Unpack

from starlette.datastructures import Headers
from starlette.types import ASGIApp, Receive, Scope, Send

if TYPE_CHECKING:   # uvicorn is imported where a server is made
    import uvicorn
    from uvicorn.protocols.http.h11_impl import H11Protocol, RequestResponseCycle

FD_MARGIN = 128    # descriptors kept for files, the engine and the turn log
DEFAULT_SESSION_REQUESTS = 8


@dataclass(frozen=True)
class ConnectionLimits:
    header_timeout_s: float = 10.0
    max_connections: int = 2048
    max_requests: int = 512

    def __post_init__(self) -> None:
        if self.header_timeout_s <= 0 or self.max_connections < 1 or self.max_requests < 1:
            raise ValueError(f"connection limits must be positive: {self}")


def raise_fd_limit(wanted: int) -> int:
    """Raise this process's soft open-file limit towards its hard limit (enough for ``wanted``
    connections plus a margin); returns how many connections fit under it."""
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    need = wanted + FD_MARGIN
    if soft != resource.RLIM_INFINITY and soft < need:
        target = need if hard == resource.RLIM_INFINITY else min(need, hard)
        try:
            resource.setrlimit(resource.RLIMIT_NOFILE, (target, hard))
            soft = target
        except (ValueError, OSError):
            pass
    return wanted if soft == resource.RLIM_INFINITY else max(1, min(wanted, soft - FD_MARGIN))


def protocol_class(limits: ConnectionLimits) -> type:
    """uvicorn's h11 protocol with the header timeout and the idle-connection cap."""
    import h11
    from uvicorn.protocols.http.h11_impl import H11Protocol

    # connections told to close whose connection_lost has not come yet: they are still in
    # uvicorn's set, and counting them made every connection accepted meanwhile close more
    # (a flood closed 900-999 idle connections instead of 900, the newest among them)
    closing: set[H11Protocol] = set()

    class GuardedH11Protocol(H11Protocol):
        # Any: uvicorn narrows asyncio's BaseTransport to Transport here (and silences mypy about
        # it), so neither type makes a valid override without the same silencing
        def connection_made(self, transport: Any) -> None:
            super().connection_made(transport)
            self._guard_timer: asyncio.TimerHandle | None = None
            self._opened = self.loop.time()
            self._arm(None)
            over = len(self.connections) - len(closing) - limits.max_connections
            if over > 0:
                _close_idle(self.connections, over, keep=self)

        def _arm(self, marker: RequestResponseCycle | None) -> None:
            self._guard_timer = self.loop.call_later(limits.header_timeout_s, self._check, marker)

        def _check(self, marker: RequestResponseCycle | None) -> None:
            if self.transport.is_closing():
                return
            cycle = self.cycle
            if cycle is marker and _idle(self):   # no request's headers came in since the timer was set
                _close(self)
            else:
                self._arm(cycle)

        def connection_lost(self, exc: Exception | None) -> None:
            closing.discard(self)
            if self._guard_timer is not None:
                self._guard_timer.cancel()
            super().connection_lost(exc)

    def _close(protocol: H11Protocol) -> None:
        closing.add(protocol)
        try:
            protocol.conn.send(h11.ConnectionClosed())
        except h11.LocalProtocolError:
            pass
        protocol.transport.close()

    def _close_idle(connections: Iterable[object], count: int, keep: GuardedH11Protocol) -> None:
        idle = (c for c in connections if isinstance(c, GuardedH11Protocol) and c is not keep and _idle(c)
                and not c.transport.is_closing())
        for protocol in heapq.nsmallest(count, idle, key=lambda c: c._opened):  # the longest-open first:
            _close(protocol)   # a new client's connection, still sending its headers, goes last

    return GuardedH11Protocol


def _idle(protocol: H11Protocol) -> bool:
    cycle = protocol.cycle
    return cycle is None or cycle.response_complete


class RequestCap:
    """ASGI middleware: at most ``limit`` requests answered at once (module doc)."""

    def __init__(self, app: ASGIApp, limit: int) -> None:
        self.app, self.limit, self.active = app, limit, 0

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http" or scope.get("path") == "/healthz":
            await self.app(scope, receive, send)
            return
        if self.active >= self.limit:
            await _overloaded(scope, receive, send, self.limit)
            return
        self.active += 1
        try:
            await self.app(scope, receive, send)
        finally:
            self.active -= 1


class SessionRequestCap:
    """ASGI middleware: at most ``limit`` requests open at once per budget (module doc);
    ``key`` names a request's budget from its headers (None: not counted)."""

    def __init__(self, app: ASGIApp, limit: int, key: Callable[[Headers], str | None]) -> None:
        if limit < 1:
            raise ValueError(f"max_session_requests must be at least 1, not {limit}")
        self.app, self.limit, self.key = app, limit, key
        self.active: dict[str, int] = {}

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        key = self.key(Headers(scope=scope)) if scope["type"] == "http" and scope.get("path") != "/healthz" else None
        if key is None:
            await self.app(scope, receive, send)
            return
        held = self.active.get(key, 0)
        if held >= self.limit:
            await _refuse(scope, receive, send, 429, "rate_limit_error",
                          f"this session already has {held} requests open, its limit (--max-session-requests); "
                          "wait for a reply before sending more")
            return
        self.active[key] = held + 1
        try:
            await self.app(scope, receive, send)
        finally:
            left = self.active[key] - 1
            if left:
                self.active[key] = left
            else:
                del self.active[key]


async def _overloaded(scope: Scope, receive: Receive, send: Send, limit: int) -> None:
    await _refuse(scope, receive, send, 503, "overloaded_error",
                  f"the gateway is answering {limit} requests at once, its limit (--max-requests); retry in a moment",
                  code="overloaded")


async def _refuse(scope: Scope, receive: Receive, send: Send, status: int, kind: str, message: str,
                  code: str | None = None) -> None:
    """Answer with ``status`` in the request's protocol's error format, ``retry-after: 1``."""
    from agent_code.gateway.http import HttpError
    from agent_code.gateway.wire_errors import send_error

    await send_error(scope, receive, send, HttpError(status, kind, message, code=code), {"retry-after": "1"})


class ServerOptions(TypedDict, total=False):
    """What the gateway's callers set of a ``uvicorn.Config`` (:func:`uvicorn_config`)."""

    host: str
    port: int
    log_level: str
    lifespan: Literal["auto", "on", "off"]
    timeout_graceful_shutdown: int


def uvicorn_config(app: ASGIApp, limits: ConnectionLimits | None = None,
                   **kwargs: Unpack[ServerOptions]) -> uvicorn.Config:
    """A ``uvicorn.Config`` serving ``app`` under ``limits`` (the defaults when None): the
    guarded protocol and the request cap; ``kwargs`` go to the config."""
    import uvicorn

    limits = limits or ConnectionLimits()
    return uvicorn.Config(RequestCap(app, limits.max_requests), http=protocol_class(limits), **kwargs)
