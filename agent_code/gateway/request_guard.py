"""What a web page in a developer's browser cannot make the gateway do.

A keyless loopback gateway (``agent-code serve``, ``--local``) is reachable from every page the
developer opens: by **DNS rebinding** (``evil.example`` re-resolved to 127.0.0.1, so the page's
own-origin requests reach the gateway and it may read the answers) and by **cross-site
requests** (a form or a ``no-cors`` fetch: ``text/plain``, form-encoded or multipart bodies need
no CORS preflight). :class:`RequestGuard`, an ASGI middleware around the whole app, refuses
before any route runs:

* a ``Host`` (403) that is not an IP literal (v4 dotted quad, or ``[v6]``), ``localhost`` (any
  case), or a name given in ``allowed_hosts`` (``serve --allowed-host NAME``, the name ``serve
  --host`` binds, ``create_app(allowed_hosts=…)``); the port is not compared. Rebinding needs a
  name the attacker's DNS answers, so an IP literal is never its ``Host``; ``localhost.`` (trailing
  dot) and every other spelling is refused. A request without ``Host`` (HTTP/1.0) is served: a
  browser always sends one. ``/healthz`` is checked like every route (monitors use an address).
* an ``Origin`` (403) other than the request's own (``http(s)://`` + its ``Host``): ``null``,
  another site, another port of this machine;
* a request that has a body or is not a ``GET``/``HEAD``/``OPTIONS``, whose ``Content-Type`` is
  given and is not ``application/json`` (parameters such as ``charset`` allowed), or a body sent
  without one (415).

No route answers with CORS headers, so no other origin can read an answer; an ``OPTIONS``
preflight gets a 403 (another origin) or a 405. Refusals use the route's error format
(:mod:`.wire_errors`). The decisions are pure functions (:func:`refusal`).
"""

from __future__ import annotations

import ipaddress
from typing import Iterable, Mapping
from urllib.parse import urlsplit

from starlette.datastructures import Headers
from starlette.types import ASGIApp, Receive, Scope, Send

from agent_code.gateway.http import HttpError
from agent_code.gateway.wire_errors import send_error

BODYLESS_METHODS = ("GET", "HEAD", "OPTIONS")
DEFAULT_PORTS = {"http": 80, "https": 443}
_HOW = "start the gateway with --allowed-host NAME to serve a name of yours"


def allowed_names(names: Iterable[str]) -> frozenset[str]:
    """``names`` as :func:`host_refusal` compares them (lower case); ValueError for one that is
    not a bare host name (a port, a scheme, a path, spaces)."""
    out = set()
    for name in names:
        clean = name.strip().lower()
        if not clean or any(c in clean for c in ":/@ \t[]"):
            raise ValueError(f"allowed host {name!r} is not a bare host name (no port, scheme or path)")
        out.add(clean)
    return frozenset(out)


def served_names(bound: str, extra: Iterable[str]) -> list[str]:
    """The names a server bound to ``bound`` serves besides localhost and IP literals: ``bound``
    itself when it is a name, and ``extra``."""
    name = bound.strip().strip("[]")
    try:
        ipaddress.ip_address(name)
        own = []
    except ValueError:
        own = [] if name.lower() in ("", "localhost") else [name]
    return [*own, *extra]


def _split_host(host: str) -> tuple[str, str] | None:
    """``Host`` → (host name or literal, port text); None when malformed."""
    if host.startswith("["):
        literal, end, rest = host[1:].partition("]")
        if not end or (rest and not (rest.startswith(":") and rest[1:].isdigit() and rest.isascii())):
            return None
        return f"[{literal}]", rest[1:]
    name, colon, port = host.partition(":")
    if colon and not (port.isdigit() and port.isascii()):
        return None
    return name, port


def _is_ip_literal(name: str) -> bool:
    try:
        if name.startswith("[") and name.endswith("]"):
            ipaddress.IPv6Address(name[1:-1])
        else:
            ipaddress.IPv4Address(name)   # dotted quad only: not 2130706433, 0x7f000001, 127.1
        return True
    except ValueError:
        return False


def host_refusal(host: str | None, allowed: frozenset[str]) -> str | None:
    """Why a request with this ``Host`` is refused, or None (module doc)."""
    if host is None:
        return None
    parts = _split_host(host)
    name = parts[0].lower() if parts is not None else ""
    if name and (name == "localhost" or name in allowed or _is_ip_literal(name)):
        return None
    return (f"this gateway does not serve the host {host[:100]!r}: it answers its own address, localhost "
            f"or an IP literal ({_HOW})")


def origin_refusal(origin: str | None, host: str | None) -> str | None:
    """Why a request with this ``Origin`` (and ``Host``) is refused, or None: an origin must be
    the request's own (same scheme's host and port; a default port may be left out)."""
    if origin is None:
        return None
    mine = _endpoint(origin)
    if mine is not None and mine == _endpoint(f"{urlsplit(origin.strip()).scheme}://{host or ''}"):
        return None
    return f"requests from the origin {origin[:100]!r} are refused: only the gateway's own origin may call it"


def _endpoint(url: str) -> tuple[str, int] | None:
    """(host name, port) of an ``http(s)://HOST[:PORT]`` origin; None for anything else."""
    try:
        parts = urlsplit(url.strip().lower())
        port = parts.port
    except ValueError:   # a port that is not a number, a bracket left open
        return None
    if (parts.scheme not in DEFAULT_PORTS or not parts.hostname or parts.path or parts.query or parts.fragment
            or parts.username is not None):
        return None
    return parts.hostname, port if port is not None else DEFAULT_PORTS[parts.scheme]


def content_type_refusal(method: str, headers: Mapping[str, str]) -> str | None:
    """Why a request's body type is refused, or None (module doc)."""
    content_type = headers.get("content-type")
    has_body = headers.get("content-length", "0").strip() not in ("0", "") or "transfer-encoding" in headers
    if content_type is None:
        return "a request body must be sent as 'content-type: application/json'" if has_body else None
    if method in BODYLESS_METHODS and not has_body:
        return None
    if content_type.split(";", 1)[0].strip().lower() == "application/json":
        return None
    return f"a request body must be application/json, not {content_type[:100]!r}"


def refusal(method: str, headers: Mapping[str, str], allowed: frozenset[str]) -> HttpError | None:
    """The error refusing a request, or None when it may go on."""
    host = headers.get("host")
    why = host_refusal(host, allowed)
    if why is None:
        why = origin_refusal(headers.get("origin"), host)
    if why is not None:
        return HttpError(403, "permission_error", why)
    why = content_type_refusal(method, headers)
    return HttpError(415, "invalid_request_error", why) if why is not None else None


class RequestGuard:
    """ASGI middleware: :func:`refusal` applied to every HTTP request."""

    def __init__(self, app: ASGIApp, allowed_hosts: Iterable[str] = ()) -> None:
        self.app, self.allowed = app, allowed_names(allowed_hosts)

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] == "http":
            denied = refusal(scope.get("method", "GET"), Headers(scope=scope), self.allowed)
            if denied is not None:
                await send_error(scope, receive, send, denied)
                return
        await self.app(scope, receive, send)
