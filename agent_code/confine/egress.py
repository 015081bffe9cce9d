"""The wall's network allow-list: an HTTP proxy on a Unix socket that connects only where a rule says.

A sandboxed command runs in a network namespace with only its own loopback interface
(bubblewrap ``--unshare-net``): it can reach nothing, and it resolves no names (no DNS server is
reachable). :mod:`agent_code.confine.enter` relays ``127.0.0.1:PROXY_PORT`` inside it to this
proxy's Unix socket, and :func:`proxy_env` points the usual variables at it (pip, npm, git,
curl, Python's urllib, Go and cargo read them), so the one way out is a proxy that asks for the
destination by name::

    proxy = EgressProxy(["registry.example", "*.files.example", "git.example:443"])
    socket_path = proxy.start()      # a Unix socket in a private 0700 directory
    argv = ["bwrap", ..., "--unshare-net", "--bind", str(socket_path.parent), str(socket_path.parent),
            "--", *relay_prefix(ENTER_SCRIPT, PROXY_PORT, socket_path), "bash", "-c", command]
    env = {**env, **proxy_env(PROXY_PORT)}
    ...
    proxy.decisions                  # [Decision(host, port, allowed, why), ...] (the latest 256)
    proxy.close()

**What it speaks**: ``CONNECT host:port`` (a tunnel: bytes both ways, TLS included — what
HTTPS clients use) and absolute-form plain HTTP (``GET http://host/path HTTP/1.1``: one
request per client connection, forwarded in origin form with ``Connection: close``). Anything
else is answered with an error status and a one-line reason the command sees in the body.

**Rules** (``allowed``): ``pypi.org`` (that name), ``*.github.com`` (names under it, not
``github.com`` itself), ``*`` (any name — still only public addresses), each with an optional
``:port`` (without one, any port); an IP address (``10.0.0.5``, ``[::1]:8080``) allows that
address when a request names it literally. Names are compared case-insensitively, without a
trailing dot, IDNA-encoded (``bücher.example`` is ``xn--bcher-kva.example``). A malformed
rule raises :class:`ValueError` at construction.

**What it refuses** (403, or 400 for a malformed request; :class:`Decision` records why):

- a name no rule allows — *before* any DNS lookup, so a refused name never leaves the machine
  (no exfiltration through lookups of ``<secret>.attacker.example``);
- a name that resolves to any loopback, private, link-local, site-local, multicast, reserved,
  shared or unspecified address, IPv4-mapped/compatible, 6to4, Teredo and NAT64 forms of those
  included: every address is checked, once, and the connection goes to a checked address (never
  a second lookup: DNS rebinding gets nothing). An address listed literally by a rule (port
  included) is the exception: the user named it;
- ``localhost`` unless a rule names ``localhost`` (then 127.0.0.1 or ::1, no lookup), and every
  name under ``.localhost``;
- an IP address no rule lists literally, and IPv4 in any other spelling than the dotted quad
  (``2130706433``, ``0177.0.0.1``, ``0x7f000001``, ``127.1``) or a name whose last label is a
  number — they are refused outright, whatever the rules;
- userinfo in the authority (``allowed.example@evil.example``), a ``Host`` header that differs
  from the request line's authority, duplicated ``Host``/``Content-Length`` headers, both
  ``Content-Length`` and ``Transfer-Encoding``, a transfer coding other than ``chunked``,
  folded header lines, ``https://`` or other schemes in absolute form;
- anything after a plain HTTP request's body on the same connection (it is not forwarded: one
  request, one destination per client connection — no smuggling a second request elsewhere);
- a request head over 32 KiB or 100 lines (431), one not complete within ``header_timeout``
  seconds (408: slow-loris), more than ``max_connections`` client connections at once (503);
  a tunnel with no byte either way for ``idle_timeout`` seconds is closed.

What it cannot see: the bytes inside a tunnel. A CONNECT to an allowed name carries whatever
the client sends there (TLS to a shared front end may name another site inside), as with the
other agents' proxies; allow names, not front ends you do not trust.

It runs on an event loop of its own in a daemon thread of the agent's process (one proxy per
session): :meth:`EgressProxy.start` returns once the socket listens (a few milliseconds),
:meth:`EgressProxy.close` ends every connection and removes the socket's directory.
"""

from __future__ import annotations

import asyncio
import collections
import concurrent.futures
import contextlib
import ipaddress
import os
import re
import shutil
import socket
import sys
import tempfile
import threading
from pathlib import Path
from typing import Callable, NamedTuple, Sequence, Union

PROXY_PORT = 3128          # where the proxy appears inside the sandbox (127.0.0.1)
ENTER_SCRIPT = Path(__file__).with_name("enter.py")
MAX_HEAD = 32 * 1024       # a request's line and headers together
MAX_HEADER_LINES = 100
MAX_CHUNK_LINE = 1024      # a chunk-size line of a chunked body
HEADER_TIMEOUT = 10.0      # seconds for a whole request head to arrive
CONNECT_TIMEOUT = 10.0     # seconds to resolve a name, or to connect to its addresses
IDLE_TIMEOUT = 900.0       # seconds without a byte either way through a connection
MAX_CONNECTIONS = 64       # client connections at once
MAX_DECISIONS = 256        # kept in ``decisions`` (the latest)
CHUNK = 65536
UNIX_PATH_MAX = 100        # sun_path holds 108 bytes; a longer path is bound through its directory

IPAddress = Union[ipaddress.IPv4Address, ipaddress.IPv6Address]

_TOKEN = re.compile(r"[!#$%&'*+\-.^_`|~0-9A-Za-z]+")
_LABEL = re.compile(r"[a-z0-9_](?:[a-z0-9_-]{0,61}[a-z0-9_])?")
_NUMERIC_LABEL = re.compile(r"(?:0x[0-9a-f]*|[0-9]+)")
_HOP_BY_HOP = {"connection", "proxy-connection", "keep-alive", "proxy-authorization", "proxy-authenticate",
               "te", "trailer", "transfer-encoding", "upgrade", "content-length", "host"}
_NAT64 = ipaddress.IPv6Network("64:ff9b::/96")
_NAT64_LOCAL = ipaddress.IPv6Network("64:ff9b:1::/48")
_REASONS = {400: "Bad Request", 403: "Forbidden", 408: "Request Timeout", 431: "Request Header Fields Too Large",
            501: "Not Implemented", 502: "Bad Gateway", 503: "Service Unavailable", 504: "Gateway Timeout"}


class Decision(NamedTuple):
    """One destination asked for: where, whether it was let through, and why."""

    host: str
    port: int
    allowed: bool
    why: str


class Refused(Exception):
    """A request the proxy answers with ``status`` and the one-line ``why``."""

    def __init__(self, status: int, why: str, *, recorded: bool = False) -> None:
        super().__init__(why)
        self.status = status
        self.why = why
        self.recorded = recorded   # in ``decisions`` already


def _printable(text: str, limit: int = 120) -> str:
    """``text`` safe for a one-line reason: no control characters, bounded."""
    text = "".join(c if " " <= c < "\x7f" else "?" for c in text)
    return text if len(text) <= limit else text[:limit] + "..."


# ---- names, addresses, rules --------------------------------------------------------------

def _ip(text: str) -> IPAddress | None:
    """``text`` as an IP address when it is one in canonical-enough form (a dotted quad, or IPv6
    without a zone); None otherwise."""
    if "%" in text:
        return None
    try:
        return ipaddress.ip_address(text)
    except ValueError:
        return None


def normalise_host(text: str) -> tuple[str, IPAddress | None]:
    """(canonical host, its address when it is an IP literal) of a host as a client or a rule
    wrote it (IPv6 in brackets or bare); :class:`Refused` (400) when it is not a host name or
    an address, or spells an IPv4 address any other way than the dotted quad."""
    raw = text
    if text.startswith("[") and text.endswith("]"):
        ip = _ip(text[1:-1])
        if not isinstance(ip, ipaddress.IPv6Address):
            raise Refused(400, f"{_printable(raw)!r} is not an IPv6 address")
        return str(ip), ip
    if ":" in text:
        ip = _ip(text)
        if not isinstance(ip, ipaddress.IPv6Address):
            raise Refused(400, f"{_printable(raw)!r} is not a host name")
        return str(ip), ip
    if not text.isascii():
        try:
            text = text.encode("idna").decode("ascii")
        except UnicodeError:
            raise Refused(400, f"{_printable(raw)!r} is not a valid international domain name") from None
    text = text.lower()
    if text.endswith("."):
        text = text[:-1]
    labels = text.split(".")
    if not text or len(text) > 253 or not all(_LABEL.fullmatch(label) for label in labels):
        raise Refused(400, f"{_printable(raw)!r} is not a host name")
    if _NUMERIC_LABEL.fullmatch(labels[-1]):
        # an IPv4 address in some spelling (inet_aton reads 2130706433, 0177.0.0.1, 0x7f.1) or a
        # name a resolver or URL parser may take for one: only the dotted quad is an address
        ip = _ip(text)
        if isinstance(ip, ipaddress.IPv4Address) and str(ip) == text:
            return text, ip
        raise Refused(400, f"{_printable(raw)!r} spells an IP address in a form other than the dotted quad "
                           f"(or ends in a number); write the address as a.b.c.d")
    return text, None


def parse_authority(text: str, default_port: int | None) -> tuple[str, int]:
    """(host as written, port) of ``host[:port]``/``[v6][:port]``; :class:`Refused` (400) for
    userinfo, a missing port where there is no default, or anything else malformed."""
    if "@" in text:
        raise Refused(400, f"userinfo in the authority {_printable(text)!r} is not allowed")
    if not text or any(c in text for c in " \t\\/?#"):
        raise Refused(400, f"malformed authority {_printable(text)!r}")
    if text.startswith("["):
        end = text.find("]")
        if end < 0:
            raise Refused(400, f"malformed authority {_printable(text)!r}")
        host, rest = text[:end + 1], text[end + 1:]
        if rest and not rest.startswith(":"):
            raise Refused(400, f"malformed authority {_printable(text)!r}")
        port_text = rest[1:] if rest else None
    else:
        host, colon, port_text_ = text.rpartition(":")
        if not colon:
            host, port_text = text, None
        else:
            port_text = port_text_
        if ":" in host:
            raise Refused(400, f"an IPv6 address in an authority goes in brackets: {_printable(text)!r}")
    if port_text is None:
        if default_port is None:
            raise Refused(400, f"no port in {_printable(text)!r}")
        return host, default_port
    if not port_text.isascii() or not port_text.isdigit() or len(port_text) > 5 or not 0 < int(port_text) < 65536:
        raise Refused(400, f"bad port in {_printable(text)!r}")
    return host, int(port_text)


class Rule(NamedTuple):
    """One allow rule: a name (``wildcard``: the names under it; ``host`` ``*``: any name), or
    an address (``ip``); ``port`` None for any port."""

    host: str
    wildcard: bool
    port: int | None
    ip: IPAddress | None

    @classmethod
    def parse(cls, text: str) -> Rule:
        """A rule from ``pypi.org``, ``*.github.com:443``, ``*``, ``127.0.0.1``, ``[::1]:8080``, ``::1``."""
        original = text
        text = text.strip()
        try:
            if "/" in text or "@" in text or not text:
                raise Refused(400, "a rule is a host name or an address, with an optional :port")
            if text == "*" or text.startswith("*:"):
                return cls("*", True, parse_authority("x" + text[1:], 0)[1] or None, None)
            wildcard = text.startswith("*.")
            if wildcard:
                text = text[2:]
            if "*" in text:
                raise Refused(400, "'*' may only stand alone or begin a rule as '*.'")
            if text.count(":") > 1 and not text.startswith("["):
                host_text, port = text, None    # a bare IPv6 address
            else:
                host_text, port_ = parse_authority(text, 0)
                port = port_ or None
            host, ip = normalise_host(host_text)
            if wildcard and ip is not None:
                raise Refused(400, "an address cannot take a '*.' wildcard")
            return cls(host, wildcard, port, ip)
        except Refused as exc:
            raise ValueError(f"network allow rule {original!r}: {exc.why}") from None

    def names(self, host: str, port: int) -> bool:
        """Whether this rule allows the (normalised) name or address ``host`` on ``port``."""
        if self.port is not None and port != self.port:
            return False
        if self.ip is not None:
            return host == self.host
        if self.host == "*":
            return _ip(host) is None and host != "localhost" and not host.endswith(".localhost")
        if self.wildcard:
            return host.endswith("." + self.host)
        return host == self.host

    def __str__(self) -> str:
        host = f"[{self.host}]" if isinstance(self.ip, ipaddress.IPv6Address) else self.host
        host = ("*." + host) if self.wildcard and self.host != "*" else host
        return host if self.port is None else f"{host}:{self.port}"


def address_problem(ip: IPAddress) -> str | None:
    """None when ``ip`` is a public unicast address; otherwise what it is (loopback, private...),
    looking through the IPv6 forms that carry an IPv4 address (mapped, compatible, 6to4, Teredo,
    NAT64)."""
    if isinstance(ip, ipaddress.IPv6Address):
        packed = int(ip)
        carried = ip.ipv4_mapped                          # ::ffff:a.b.c.d: the IPv4 address itself
        if ip in _NAT64 or (packed >> 32 == 0 and packed > 1):   # 64:ff9b::a.b.c.d, ::a.b.c.d
            carried = ipaddress.IPv4Address(packed & 0xFFFFFFFF)
        if carried is not None:
            problem = address_problem(carried)
            return f"{problem} (inside {ip})" if problem else None
        if ip in _NAT64_LOCAL:
            return "local-use NAT64"
        for inner in (ip.sixtofour, *(ip.teredo or ())):
            if inner is not None and (problem := address_problem(inner)):
                return f"{problem} (inside {ip})"
        if ip.is_site_local:
            return "site-local"
    for attribute, name in (("is_unspecified", "unspecified"), ("is_loopback", "loopback"),
                            ("is_link_local", "link-local"), ("is_multicast", "multicast"),
                            ("is_private", "private"), ("is_reserved", "reserved")):
        if getattr(ip, attribute):
            return name
    if not ip.is_global:
        return "not a public address"
    return None


def _resolve(host: str, port: int) -> list[str]:
    """The addresses of ``host`` (the system's resolver: /etc/hosts, then DNS), as text."""
    infos = socket.getaddrinfo(host, port, type=socket.SOCK_STREAM, proto=socket.IPPROTO_TCP)
    return [str(info[4][0]) for info in infos]


# ---- the request head -------------------------------------------------------------------

class Request(NamedTuple):
    method: str
    target: str
    version: str
    headers: list[tuple[str, str]]   # (name as sent, value), in order

    def all(self, name: str) -> list[str]:
        return [value for key, value in self.headers if key.lower() == name]


def parse_head(head: bytes) -> Request:
    """The request line and headers of ``head`` (ending in an empty line); :class:`Refused`
    (400/431) when malformed or too big."""
    if len(head) > MAX_HEAD:
        raise Refused(431, f"request head over {MAX_HEAD} bytes")
    lines = head.decode("latin-1").split("\r\n")
    if lines[-2:] != ["", ""]:
        raise Refused(400, "request head does not end in an empty line")
    lines = lines[:-2]
    if len(lines) > MAX_HEADER_LINES + 1:
        raise Refused(431, f"over {MAX_HEADER_LINES} header lines")
    parts = lines[0].split(" ")
    if len(parts) != 3 or not _TOKEN.fullmatch(parts[0]) or parts[2] not in ("HTTP/1.1", "HTTP/1.0") \
            or not parts[1] or any(c < "!" or c > "~" for c in parts[1]):
        raise Refused(400, f"malformed request line {_printable(lines[0])!r}")
    headers: list[tuple[str, str]] = []
    for line in lines[1:]:
        name, colon, value = line.partition(":")
        if not colon or not _TOKEN.fullmatch(name):
            raise Refused(400, f"malformed header line {_printable(line)!r} (folded, or a space before the colon)")
        value = value.strip(" \t")
        if any((c < " " and c != "\t") or c == "\x7f" for c in value):
            raise Refused(400, f"control character in header {_printable(name)!r}")
        headers.append((name, value))
    return Request(parts[0], parts[1], parts[2], headers)


def _body_framing(request: Request) -> int | None:
    """The body's length (0 for none), or None for chunked; :class:`Refused` for anything a
    server could read differently from this proxy."""
    codings = request.all("transfer-encoding")
    lengths = request.all("content-length")
    if codings:
        if lengths:
            raise Refused(400, "both Content-Length and Transfer-Encoding")
        if request.version != "HTTP/1.1":
            raise Refused(400, "Transfer-Encoding in an HTTP/1.0 request")
        if len(codings) != 1 or codings[0].lower() != "chunked":
            raise Refused(501, "a transfer coding other than a single 'chunked'")
        return None
    if not lengths:
        return 0
    if len(lengths) != 1 or not lengths[0].isascii() or not lengths[0].isdigit() or len(lengths[0]) > 18:
        raise Refused(400, "malformed or repeated Content-Length")
    return int(lengths[0])


# ---- the proxy -----------------------------------------------------------------------------

class EgressProxy:
    """An HTTP proxy on a Unix socket that lets connections through to what ``allowed`` names
    (see the module's docstring). ``on_decision`` is called (in the proxy's thread) with each
    :class:`Decision` as it is made."""

    def __init__(self, allowed: Sequence[str], *, socket_dir: Path | None = None,
                 max_connections: int = MAX_CONNECTIONS, header_timeout: float = HEADER_TIMEOUT,
                 connect_timeout: float = CONNECT_TIMEOUT, idle_timeout: float = IDLE_TIMEOUT,
                 on_decision: Callable[[Decision], None] | None = None,
                 resolve: Callable[[str, int], Sequence[str]] | None = None) -> None:
        if isinstance(allowed, str):
            raise TypeError("allowed is a sequence of rules, not one string")
        self.rules = [Rule.parse(text) for text in allowed]
        self.socket_dir = socket_dir
        self.max_connections = max_connections
        self.header_timeout = header_timeout
        self.connect_timeout = connect_timeout
        self.idle_timeout = idle_timeout
        self.on_decision = on_decision
        self.resolve = resolve or _resolve
        self.refused_connections = 0     # turned away at the max_connections cap
        self._decisions: collections.deque[Decision] = collections.deque(maxlen=MAX_DECISIONS)
        self._decisions_lock = threading.Lock()   # appended in the proxy's thread, read in others
        self._dir: Path | None = None
        self._path: Path | None = None
        self._loop: asyncio.AbstractEventLoop | None = None
        self._thread: threading.Thread | None = None
        self._stop: asyncio.Event | None = None
        self._executor: concurrent.futures.ThreadPoolExecutor | None = None
        self._tasks: set[asyncio.Task] = set()

    # -- the public face

    @property
    def decisions(self) -> list[Decision]:
        """The latest destinations asked for (at most 256), oldest first."""
        with self._decisions_lock:
            return list(self._decisions)

    @property
    def socket_path(self) -> Path | None:
        return self._path

    @property
    def connections(self) -> int:
        """Client connections open now (the ones counted against ``max_connections``)."""
        return len(self._tasks)

    def rule_for(self, host: str, port: int) -> Rule | None:
        """The first rule allowing ``host`` (as a client wrote it) on ``port``, before any
        lookup; None when none does (or the host is malformed)."""
        try:
            name, _ = normalise_host(host)
        except Refused:
            return None
        return self._rule_for(name, port)

    def start(self) -> Path:
        """Listen; returns the Unix socket's path (in a new 0700 directory)."""
        if self._thread is not None:
            raise RuntimeError("the egress proxy is already started")
        self._dir = Path(tempfile.mkdtemp(prefix="agent-code-egress-", dir=self.socket_dir))
        self._path = self._dir / "proxy.sock"
        listener = self._bind(self._path)
        ready: concurrent.futures.Future[None] = concurrent.futures.Future()
        self._thread = threading.Thread(target=self._run, args=(listener, ready), name="agent-code-egress",
                                        daemon=True)
        self._thread.start()
        try:
            ready.result(timeout=10)
        except BaseException:
            self.close()
            raise
        return self._path

    def close(self) -> None:
        """End every connection, stop listening, remove the socket's directory (idempotent)."""
        loop, thread, self._thread = self._loop, self._thread, None
        if loop is not None and thread is not None and self._stop is not None:
            with contextlib.suppress(RuntimeError):   # the loop is closed already
                loop.call_soon_threadsafe(self._stop.set)
            thread.join(timeout=10)
        if self._dir is not None:
            shutil.rmtree(self._dir, ignore_errors=True)
            self._dir = None

    def __enter__(self) -> EgressProxy:
        self.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    # -- the loop's thread

    @staticmethod
    def _bind(path: Path) -> socket.socket:
        listener = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        try:
            if len(os.fsencode(str(path))) < UNIX_PATH_MAX:
                listener.bind(str(path))
            else:   # too long for an address: bind through a descriptor of its directory
                fd = os.open(path.parent, os.O_PATH | os.O_DIRECTORY)
                try:
                    listener.bind(f"/proc/self/fd/{fd}/{path.name}")
                finally:
                    os.close(fd)
            os.chmod(path, 0o600)
            listener.listen(128)
            listener.setblocking(False)
        except BaseException:
            listener.close()
            raise
        return listener

    def _run(self, listener: socket.socket, ready: concurrent.futures.Future[None]) -> None:
        loop = asyncio.new_event_loop()
        self._executor = concurrent.futures.ThreadPoolExecutor(max_workers=4, thread_name_prefix="agent-code-egress-dns")
        loop.set_default_executor(self._executor)
        self._loop = loop
        try:
            loop.run_until_complete(self._main(listener, ready))
        except BaseException as exc:   # noqa: BLE001 - reported to start(), or the proxy is closing
            if not ready.done():
                ready.set_exception(exc)
        finally:
            listener.close()
            self._executor.shutdown(wait=False, cancel_futures=True)
            loop.close()

    async def _main(self, listener: socket.socket, ready: concurrent.futures.Future[None]) -> None:
        self._stop = asyncio.Event()
        server = await asyncio.start_unix_server(self._accept, sock=listener, limit=MAX_HEAD)
        ready.set_result(None)
        try:
            await self._stop.wait()
        finally:
            server.close()
            for task in list(self._tasks):
                task.cancel()
            if self._tasks:
                await asyncio.wait(list(self._tasks), timeout=5)

    async def _accept(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        task = asyncio.current_task()
        assert task is not None
        if len(self._tasks) >= self.max_connections:
            self.refused_connections += 1
            await self._answer(writer, 503, f"more than {self.max_connections} connections through the proxy at once")
            writer.close()
            return
        self._tasks.add(task)
        try:
            await self._serve(reader, writer)
        except (ConnectionError, OSError, asyncio.IncompleteReadError):
            pass
        except asyncio.CancelledError:   # close(): the task ends here, quietly
            pass
        finally:
            self._tasks.discard(task)
            writer.transport.abort()

    def _decide(self, decision: Decision) -> None:
        with self._decisions_lock:
            self._decisions.append(decision)
        if self.on_decision is not None:
            with contextlib.suppress(Exception):
                self.on_decision(decision)

    async def _answer(self, writer: asyncio.StreamWriter, status: int, why: str) -> None:
        body = f"agent-code sandbox: {_printable(why, 400)}\n".encode()
        head = (f"HTTP/1.1 {status} {_REASONS.get(status, 'Error')}\r\nContent-Type: text/plain; charset=utf-8\r\n"
                f"Content-Length: {len(body)}\r\nConnection: close\r\n\r\n").encode()
        with contextlib.suppress(ConnectionError, OSError):
            writer.write(head + body)
            await asyncio.wait_for(writer.drain(), 5)

    async def _serve(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        destination: tuple[str, int] | None = None
        try:
            try:
                head = await asyncio.wait_for(reader.readuntil(b"\r\n\r\n"), self.header_timeout)
            except asyncio.TimeoutError:
                raise Refused(408, f"the request head did not arrive within {self.header_timeout:g} s") from None
            except asyncio.LimitOverrunError:
                raise Refused(431, f"request head over {MAX_HEAD} bytes") from None
            request = parse_head(head)
            if request.method == "CONNECT":
                host_text, port = parse_authority(request.target, None)
                destination = (_printable(host_text), port)
                host, ip = normalise_host(host_text)
                destination = (host, port)
                upstream_reader, upstream_writer = await self._open(host, ip, port)
                writer.write(b"HTTP/1.1 200 Connection established\r\n\r\n")
                await self._pump(reader, writer, upstream_reader, upstream_writer)
                return
            if not request.target.lower().startswith("http://"):
                if request.target.lower().startswith("https://"):
                    raise Refused(400, "an https:// URL goes through CONNECT, not a plain proxy request")
                raise Refused(400, f"not a proxy request: {_printable(request.target)!r} (expected http://HOST/PATH)")
            rest = request.target[len("http://"):]
            cut = min((i for i in (rest.find(c) for c in "/?#") if i >= 0), default=len(rest))
            authority, path = rest[:cut], rest[cut:]
            if "#" in path:
                raise Refused(400, "a fragment in the request target")
            path = path if path.startswith("/") else "/" + path
            host_text, port = parse_authority(authority, 80)
            destination = (_printable(host_text), port)
            host, ip = normalise_host(host_text)
            destination = (host, port)
            hosts = request.all("host")
            if len(hosts) > 1:
                raise Refused(400, "more than one Host header")
            if hosts:
                try:
                    header_host, header_port = parse_authority(hosts[0], 80)
                    same = (normalise_host(header_host)[0], header_port) == (host, port)
                except Refused:
                    same = False
                if not same:
                    raise Refused(400, f"the Host header {_printable(hosts[0])!r} differs from the request "
                                       f"line's {_printable(authority)!r}")
            framing = _body_framing(request)
            upstream_reader, upstream_writer = await self._open(host, ip, port)
            await self._forward(request, authority, path, framing, reader, writer, upstream_reader, upstream_writer)
        except Refused as refused:
            if destination is not None and not refused.recorded:
                self._decide(Decision(destination[0], destination[1], False, refused.why))
            await self._answer(writer, refused.status, refused.why)

    # -- where a request may go

    def _rule_for(self, host: str, port: int) -> Rule | None:
        return next((rule for rule in self.rules if rule.names(host, port)), None)

    def _address_listed(self, ip: IPAddress, port: int) -> bool:
        return any(rule.ip == ip and rule.port in (None, port) for rule in self.rules)

    async def _open(self, host: str, ip: IPAddress | None, port: int
                    ) -> tuple[asyncio.StreamReader, asyncio.StreamWriter]:
        """A connection to ``host:port`` when a rule allows it (every decision recorded);
        :class:`Refused` otherwise."""
        shown = f"[{host}]:{port}" if isinstance(ip, ipaddress.IPv6Address) else f"{host}:{port}"

        def refuse(status: int, why: str) -> Refused:
            self._decide(Decision(host, port, False, why))
            return Refused(status, f"network access to {shown} refused: {why}", recorded=True)

        if host == "localhost" or host.endswith(".localhost"):
            if host != "localhost" or not any(r.ip is None and not r.wildcard and r.host == "localhost"
                                              for r in self.rules):
                raise refuse(403, f"{host} is this machine; only a rule naming 'localhost' (or the "
                                  f"address) allows it")
        rule = self._rule_for(host, port)
        if rule is None:
            ports = sorted({r.port for r in self.rules if r.port is not None and r.names(host, r.port)})
            on = f" on port {port} (only {', '.join(map(str, ports))})" if ports else ""
            if ip is not None:
                raise refuse(403, f"no rule lists this address{on} (an address is allowed only when listed literally)")
            raise refuse(403, f"no network allow rule names {host}{on}")
        loop = asyncio.get_running_loop()
        if ip is not None:
            addresses: list[IPAddress] = [ip]
        elif host == "localhost":
            addresses = [ipaddress.IPv4Address("127.0.0.1"), ipaddress.IPv6Address("::1")]
        else:
            try:
                answers = await asyncio.wait_for(loop.run_in_executor(None, self.resolve, host, port),
                                                 self.connect_timeout)
            except (OSError, asyncio.TimeoutError) as exc:
                raise refuse(502, f"cannot resolve {host}: {exc or 'timed out'}") from None
            addresses = []
            for answer in answers:
                address = _ip(answer.partition("%")[0])
                if address is None:
                    raise refuse(502, f"{host} resolved to {_printable(answer)!r}, not an address")
                if address not in addresses:
                    addresses.append(address)
            if not addresses:
                raise refuse(502, f"{host} has no address")
            for address in addresses:     # every one, before connecting to any
                problem = address_problem(address)
                if problem and not self._address_listed(address, port):
                    raise refuse(403, f"{host} resolves to {address}, a {problem} address; only a rule "
                                      f"naming that address allows it")
        errors = []
        for address in addresses:
            try:
                opened = await asyncio.wait_for(asyncio.open_connection(str(address), port, limit=CHUNK),
                                                self.connect_timeout)
            except (OSError, asyncio.TimeoutError) as exc:
                errors.append(f"{address}: {exc or 'timed out'}")
                continue
            self._decide(Decision(host, port, True, f"rule {rule} ({address})"))
            return opened
        raise refuse(502, f"cannot connect: {'; '.join(errors)}")

    # -- moving bytes

    async def _copy(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter, activity: list[float]) -> None:
        """Copy until EOF (passed on as a half-close) or ``idle_timeout`` with no byte either
        way (``activity`` holds the last time a byte moved, shared by both directions)."""
        loop = asyncio.get_running_loop()
        while True:
            try:
                data = await asyncio.wait_for(reader.read(CHUNK), self.idle_timeout)
            except asyncio.TimeoutError:
                if loop.time() - activity[0] < self.idle_timeout:
                    continue
                raise ConnectionError("idle") from None
            if not data:
                if writer.can_write_eof():
                    writer.write_eof()
                return
            activity[0] = loop.time()
            writer.write(data)
            await asyncio.wait_for(writer.drain(), self.idle_timeout)

    async def _pump(self, client_reader: asyncio.StreamReader, client_writer: asyncio.StreamWriter,
                    upstream_reader: asyncio.StreamReader, upstream_writer: asyncio.StreamWriter) -> None:
        activity = [asyncio.get_running_loop().time()]
        try:
            ups = asyncio.ensure_future(self._copy(client_reader, upstream_writer, activity))
            downs = asyncio.ensure_future(self._copy(upstream_reader, client_writer, activity))
            try:
                done, _ = await asyncio.wait([ups, downs], return_when=asyncio.FIRST_EXCEPTION)
                for task in done:
                    task.result()   # an error ends both directions
                await asyncio.gather(ups, downs)
            finally:
                ups.cancel()
                downs.cancel()
        except (ConnectionError, OSError, asyncio.TimeoutError):
            pass
        finally:
            upstream_writer.transport.abort()

    async def _forward(self, request: Request, authority: str, path: str, framing: int | None,
                       reader: asyncio.StreamReader, writer: asyncio.StreamWriter,
                       upstream_reader: asyncio.StreamReader, upstream_writer: asyncio.StreamWriter) -> None:
        """The one request, in origin form with ``Connection: close`` and its body framed as
        parsed; then the response, until the server closes. Nothing more from the client."""
        try:
            named = {token.strip().lower() for value in request.all("connection") for token in value.split(",")}
            lines = [f"{request.method} {path} {request.version}", f"Host: {authority}"]
            lines += [f"{name}: {value}" for name, value in request.headers
                      if name.lower() not in _HOP_BY_HOP and name.lower() not in named]
            if framing is None:
                lines.append("Transfer-Encoding: chunked")
            elif framing or request.all("content-length"):
                lines.append(f"Content-Length: {framing}")
            lines.append("Connection: close")
            upstream_writer.write(("\r\n".join(lines) + "\r\n\r\n").encode("latin-1"))
            if framing is None:
                await self._copy_chunked(reader, upstream_writer)
            else:
                left = framing
                while left:
                    data = await asyncio.wait_for(reader.read(min(left, CHUNK)), self.idle_timeout)
                    if not data:
                        return
                    upstream_writer.write(data)
                    await asyncio.wait_for(upstream_writer.drain(), self.idle_timeout)
                    left -= len(data)
            await upstream_writer.drain()
            await self._copy(upstream_reader, writer, [asyncio.get_running_loop().time()])
        except (ConnectionError, OSError, asyncio.TimeoutError, asyncio.IncompleteReadError):
            pass
        finally:
            upstream_writer.transport.abort()

    async def _copy_chunked(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        """A chunked body, re-framed canonically (no extensions, no trailers): what the server
        reads as the body is what this proxy read as the body."""
        async def line() -> str:
            raw = await asyncio.wait_for(reader.readuntil(b"\r\n"), self.idle_timeout)
            if len(raw) > MAX_CHUNK_LINE:
                raise ConnectionError("chunk line too long")
            return raw[:-2].decode("latin-1")

        while True:
            size_text = (await line()).partition(";")[0].strip(" \t")
            if not size_text or len(size_text) > 15 or any(c not in "0123456789abcdefABCDEF" for c in size_text):
                raise ConnectionError("malformed chunk size")
            size = int(size_text, 16)
            if size == 0:
                while await line():   # trailers: read, not forwarded
                    pass
                writer.write(b"0\r\n\r\n")
                return
            data = await asyncio.wait_for(reader.readexactly(size), self.idle_timeout)
            if await line() != "":
                raise ConnectionError("chunk not followed by CRLF")
            writer.write(b"%x\r\n%s\r\n" % (size, data))
            await asyncio.wait_for(writer.drain(), self.idle_timeout)


# ---- what the wall puts around a command ----------------------------------------------------

def relay_prefix(enter_py: Path, port: int, socket_path: Path, *, python: str | None = None) -> list[str]:
    """The argv prefix (followed by the program and its arguments) that, inside the network
    namespace, relays ``127.0.0.1:port`` to the proxy at ``socket_path`` and then runs the
    program: ``python3 -I -S enter.py --relay PORT SOCKET --``. ``python`` defaults to this
    interpreter (it must be visible inside the sandbox)."""
    return [python or sys.executable, "-I", "-S", str(enter_py), "--relay", str(port), str(socket_path), "--"]


def proxy_env(port: int = PROXY_PORT) -> dict[str, str]:
    """The environment that sends a command's HTTP(S) through the relay at ``127.0.0.1:port``:
    the variables curl (and git through it), pip, Python's urllib and requests, npm, Go and
    cargo read; the sandbox's own loopback stays direct."""
    url = f"http://127.0.0.1:{port}"
    env = {name: url for name in ("HTTP_PROXY", "HTTPS_PROXY", "ALL_PROXY", "http_proxy", "https_proxy",
                                  "all_proxy", "npm_config_proxy", "npm_config_https_proxy")}
    env["NO_PROXY"] = env["no_proxy"] = "localhost,127.0.0.1,::1"
    return env
