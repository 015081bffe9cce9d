"""The local sandbox holds: an agent command sees its workspace and toolchain only, writes nothing
the host or a later sandbox sees, and reaches its gateway and nothing else of the network.

Every probe has a control that the same probe, pointed at something the agent *may* see, finds:
so a probe that silently cannot work (a typo, a missing tool) fails the test instead of passing
it. The canaries are never spelled whole in a probe (two halves, joined at run time). Isolation
needs root; without it these tests are skipped.
"""

from __future__ import annotations

import asyncio
import contextlib
import http.server
import json
import os
import re
import shlex
import shutil
import socket
import sys
import threading
import uuid
from pathlib import Path
from typing import Iterator

import pytest

from agent_code.sandbox.local import ENTER_SCRIPT, LocalSandbox, isolation_available
from agent_code.sandbox.base import SandboxError
from agent_code.sandbox.relay import GatewayRelay

pytestmark = pytest.mark.skipif(not isolation_available(), reason="sandbox isolation needs root with unshare")

REPO = Path(__file__).resolve().parents[1]


def run(coro):
    return asyncio.run(coro)


def _halves() -> tuple[str, str]:
    return f"CANARY-{uuid.uuid4().hex[:10]}", f"-{uuid.uuid4().hex[:10]}"


# --- servers standing in for the host's services ----------------------------------------------

class _Server:
    """A threaded HTTP server on ``host``: answers ``<name> <path>`` and records request lines."""

    def __init__(self, host: str, name: str, port: int = 0) -> None:
        self.name, self.requests = name, []
        outer = self

        class Handler(http.server.BaseHTTPRequestHandler):
            def _answer(self) -> None:
                outer.requests.append(self.requestline)
                body = f"{outer.name} {self.path}".encode()
                self.send_response(200)
                self.send_header("content-length", str(len(body)))
                self.end_headers()
                self.wfile.write(body)

            do_GET = do_POST = do_CONNECT = _answer

            def log_message(self, *args) -> None:
                pass

        family = socket.AF_INET6 if ":" in host else socket.AF_INET
        server_cls = type("S", (http.server.ThreadingHTTPServer,), {"address_family": family})
        self.httpd = server_cls((host, port), Handler)
        self.host, self.port = host, self.httpd.server_address[1]
        self.thread = threading.Thread(target=self.httpd.serve_forever, daemon=True)

    @property
    def url(self) -> str:
        return f"http://{'[' + self.host + ']' if ':' in self.host else self.host}:{self.port}"

    def __enter__(self) -> "_Server":
        self.thread.start()
        return self

    def __exit__(self, *exc) -> None:
        self.httpd.shutdown()
        self.httpd.server_close()


@contextlib.contextmanager
def _abstract_listener(name: str) -> Iterator[list[int]]:
    """An abstract Unix socket of the host's network namespace; yields the accepted count."""
    sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    sock.bind("\0" + name)
    sock.listen(8)
    sock.settimeout(0.2)
    accepted, stop = [0], threading.Event()

    def loop() -> None:
        while not stop.is_set():
            try:
                conn, _ = sock.accept()
                accepted[0] += 1
                conn.close()
            except OSError:
                continue

    thread = threading.Thread(target=loop, daemon=True)
    thread.start()
    try:
        yield accepted
    finally:
        stop.set()
        thread.join(2)
        sock.close()


# --- reading -------------------------------------------------------------------------------------

READ_PROBE = r"""
A='{a}'; B='{b}'; N1='{n1}'; N2='{n2}'
pat() {{ printf '%s\n' "$A$B"; }}
for d in {dirs}; do
  f="$d/$N1$N2.txt"
  for via in "$f" "/proc/1/root$f" "/proc/self/root$f" "/proc/self/cwd/../../../../../../..$f"; do
    cat "$via" 2>/dev/null | grep -q -f <(pat) && echo "READ-CAT $via"
  done
  ls -la "$(dirname "$f")" 2>/dev/null | grep -q "$N1$N2" && echo "READ-LS $f"
  ln -sf "$f" "$TMPDIR/link" 2>/dev/null && cat "$TMPDIR/link" 2>/dev/null | grep -q -f <(pat) && echo "READ-LINK $f"
done
find / \( -path /proc -o -path /sys \) -prune -o -name "$N1$N2*" -print 2>/dev/null | sed 's/^/READ-FIND /'
for p in /proc/[0-9]*; do
  for e in root cwd; do find "$p/$e/" -maxdepth 4 -name "$N1$N2*" 2>/dev/null | sed 's/^/READ-PROC-FIND /'; done
  cat "$p/environ" "$p/cmdline" 2>/dev/null | tr '\0' '\n' | grep -q -f <(pat) && echo "READ-PROC-ENV $p"
done
grep -rl -f <(pat) /etc /tmp /var /run /dev/shm /home /srv /opt /mnt /root /work /proc/self/mountinfo \
  --exclude-dir=.venv --exclude-dir=.pyenv 2>/dev/null | sed 's/^/READ-GREP /'
{py} - <<'PY'
import os
canary = ('{a}' + '{b}').encode()
for d in {pylist}:
    f = d + '/' + '{n1}' + '{n2}' + '.txt'
    for via in (f, '/proc/1/root' + f):
        try:
            if canary in open(via, 'rb').read():
                print('READ-PY', via)
        except OSError:
            pass
PY
echo PROBE-DONE
"""


def _place_canaries(paths: list[Path], name: str, content: str) -> list[Path]:
    placed = []
    for directory in paths:
        try:
            directory.mkdir(parents=True, exist_ok=True)
            target = directory / f"{name}.txt"
            target.write_text(content + "\n")
            os.chmod(target, 0o644)
            placed.append(target)
        except OSError:
            continue
    return placed


def test_an_agent_reads_nothing_of_the_host_outside_its_workspace(tmp_path, monkeypatch):
    a, b = _halves()
    n1, n2 = _halves()
    canary, name = a + b, n1 + n2
    monkeypatch.setenv("AGENT_CODE_TEST_CANARY", canary)    # in the orchestrator's environment too
    os.chmod(tmp_path, 0o755)
    base = tmp_path / "boxes"
    base.mkdir(mode=0o755)
    home_dir = Path("/home") / f"canary-{uuid.uuid4().hex[:6]}"
    host_dirs = [Path("/root"), Path("/etc"), Path("/opt"), Path("/srv"), home_dir, Path("/var/tmp"), Path("/tmp"),
                 Path("/dev/shm"), Path("/run"), Path("/mnt"), REPO, REPO / "agent_code", tmp_path, base]

    async def go():
        async with LocalSandbox(base_dir=str(base)) as other, LocalSandbox(base_dir=str(base)) as box:
            root = box.root
            dirs = host_dirs + [root, root / ".root", root / ".mnt", root / ".jobs",      # its own sandbox's
                                Path(other.workdir), Path(other.home), Path(other.root) / "tmp"]  # another's
            placed: list[Path] = []
            try:
                placed += _place_canaries(dirs, name, canary)
                control = _place_canaries([Path(box.workdir)], name, canary)   # the one it must find
                await box.give_to_agent(box.workdir)
                dirs = [str(p.parent) for p in (*placed, *control)]
                probe = READ_PROBE.format(a=a, b=b, n1=n1, n2=n2, dirs=" ".join(f"'{d}'" for d in dirs),
                                          pylist=repr(dirs), py=sys.executable)
                assert canary not in probe and name not in probe
                seen = await box.exec(["bash", "-c", probe], user="agent", timeout=240)
            finally:
                for p in placed:
                    p.unlink(missing_ok=True)
                shutil.rmtree(home_dir, ignore_errors=True)
            return seen, placed, control[0]

    seen, placed, control = run(go())
    out = seen.stdout
    assert "PROBE-DONE" in out, seen.output()
    assert len(placed) >= 18, placed
    own = re.compile(rf"^READ-PROC-FIND /proc/\d+/cwd/{re.escape(control.name)}$")   # cwd: its workspace
    leaks = [line for line in out.splitlines() if line.startswith("READ-") and str(control) not in line
             and not own.match(line)]
    assert leaks == [], "\n".join(leaks)
    # the control: every method found the canary the agent may read
    for method in ("READ-CAT", "READ-LS", "READ-LINK", "READ-FIND", "READ-GREP", "READ-PY"):
        assert f"{method} " in out and str(control) in out, (method, out)
    assert f"READ-CAT /proc/1/root{control}" in out
    assert canary not in out


# --- writing -------------------------------------------------------------------------------------

WRITE_PROBE = r"""
M='{m1}'; M="$M{m2}"
find / \( -path /proc -o -path /sys \) -prune -o -type d -writable -print 2>/dev/null > "$TMPDIR/dirs"
while read -r d; do
  if (echo x > "$d/$M") 2>/dev/null; then echo "WROTE $d"; fi
done < "$TMPDIR/dirs"
for f in $(find / \( -path /proc -o -path /sys \) -prune -o -type f -writable -print 2>/dev/null); do
  echo "WRITABLE-FILE $f"; done
echo PROBE-DONE
"""


def test_an_agent_writes_nothing_the_host_or_another_sandbox_sees(tmp_path):
    m1, m2 = _halves()
    marker = m1 + m2
    os.chmod(tmp_path, 0o755)
    search = [Path(p) for p in ("/tmp", "/var/tmp", "/dev/shm", "/run", "/etc", "/root", "/srv", "/opt", "/home",
                                "/mnt", "/usr/local", "/var/lib")] + [REPO, tmp_path]

    def on_host() -> list[str]:
        found = []
        for top in search:
            for dirpath, dirnames, filenames in os.walk(top):
                dirnames[:] = [d for d in dirnames if d not in (".git", ".venv", "node_modules", ".cache")]
                if marker in filenames:
                    found.append(dirpath)
        return found

    async def go():
        async with LocalSandbox(base_dir=str(tmp_path)) as box:
            wrote = await box.exec(["bash", "-c", WRITE_PROBE.format(m1=m1, m2=m2)], user="agent", timeout=240)
            during = on_host()
            roots = (box.workdir, box.home, str(box.root / "tmp"))
        async with LocalSandbox(base_dir=str(tmp_path)) as later:
            seen = await later.exec(f"find / \\( -path /proc -o -path /sys \\) -prune -o -name '{m1}'\"{m2}\" -print",
                                    user="agent", timeout=240)
        return wrote, during, roots, seen

    wrote, during, roots, seen = run(go())
    assert "PROBE-DONE" in wrote.stdout, wrote.output()
    dirs = [line[len("WROTE "):] for line in wrote.stdout.splitlines() if line.startswith("WROTE ")]
    private = ("/tmp", "/var/tmp", "/dev/shm")   # per-command tmpfs, gone with the command

    def allowed(d: str) -> bool:
        return any(d == r or d.startswith(r + "/") for r in (*roots, *private))

    assert dirs and all(allowed(d) for d in dirs), [d for d in dirs if not allowed(d)]
    assert any(d == roots[0] for d in dirs)                              # control: it writes its workspace
    files = [line.split(" ", 1)[1] for line in wrote.stdout.splitlines() if line.startswith("WRITABLE-FILE ")]
    assert all(allowed(f) or f.startswith("/dev/") for f in files), files
    # on the host, the marker is only in the sandbox's own dirs while it lives, and nowhere after
    assert all(any(d == r or d.startswith(r + "/") for r in roots) for d in during), during
    assert on_host() == []
    assert marker not in seen.stdout


# --- the network ---------------------------------------------------------------------------------

NET_PROBE = r"""
import json, os, socket, sys, urllib.request
out = {{}}
def get(url):
    try:
        with urllib.request.urlopen(url, timeout=3) as r:
            return r.read().decode()
    except Exception as e:
        return 'ERR ' + type(e).__name__
for key, url in {urls}.items():
    out[key] = get(url)
def connect(family, address):
    s = socket.socket(family, socket.SOCK_STREAM)
    s.settimeout(3)
    try:
        s.connect(address)
        return 'CONNECTED'
    except Exception as e:
        return 'ERR ' + type(e).__name__
    finally:
        s.close()
out['abstract'] = connect(socket.AF_UNIX, '\0' + {abstract!r})
out['tcp4'] = open('/proc/net/tcp').read()
out['tcp6'] = open('/proc/net/tcp6').read() if os.path.exists('/proc/net/tcp6') else ''
out['unix'] = open('/proc/net/unix').read()
out['ifaces'] = sorted(n for _, n in socket.if_nameindex())
addrs = set()
for host in ('0.0.0.0', '::'):
    try:
        s = socket.socket(socket.AF_INET6 if ':' in host else socket.AF_INET, socket.SOCK_DGRAM)
        s.connect(('192.0.2.1' if host == '0.0.0.0' else '2001:db8::1', 9))
        addrs.add(s.getsockname()[0])
    except OSError as e:
        addrs.add('ERR ' + type(e).__name__)
out['route'] = sorted(addrs)
for key, (host, port, raw) in {raw}.items():
    try:
        s = socket.create_connection((host, port), timeout=3)
        s.sendall(raw.encode())
        data = b''
        while chunk := s.recv(65536):
            data += chunk
        out[key] = data.decode(errors='replace')
    except Exception as e:
        out[key] = 'ERR ' + type(e).__name__
print('NET-JSON ' + json.dumps(out))
"""


def _net_probe(box: LocalSandbox, urls: dict[str, str], abstract: str, raw: dict[str, tuple[str, int, str]]):
    script = NET_PROBE.format(urls=repr(urls), abstract=abstract, raw=repr(raw))
    return box.exec([sys.executable, "-c", script], user="agent", timeout=120)


def _parse(result) -> dict:
    line = next((x for x in result.stdout.splitlines() if x.startswith("NET-JSON ")), None)
    assert line is not None, result.output()
    return json.loads(line[len("NET-JSON "):])


def _host_address() -> str | None:
    """A non-loopback IPv4 address of this machine, if it has one."""
    try:
        with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as s:
            s.connect(("192.0.2.1", 9))
            address = s.getsockname()[0]
    except OSError:
        return None
    return None if address.startswith("127.") else address


def test_an_agent_reaches_its_gateway_and_nothing_else_of_the_network():
    name = f"agent-code-test-{uuid.uuid4().hex[:8]}"
    host_ip = _host_address()
    with contextlib.ExitStack() as stack:
        gateway = stack.enter_context(_Server("127.0.0.1", "GATEWAY"))
        other4 = stack.enter_context(_Server("127.0.0.1", "OTHER4"))
        other2 = stack.enter_context(_Server("127.0.0.2", "OTHER2"))
        other6 = stack.enter_context(_Server("::1", "OTHER6"))
        others = [other4, other2, other6]
        if host_ip:
            others.append(stack.enter_context(_Server(host_ip, "OTHERIP")))
        abstract = stack.enter_context(_abstract_listener(name))
        urls = {s.name: s.url + "/x" for s in others}
        urls["gateway"] = gateway.url + "/v1/messages"
        urls["gateway-localhost"] = f"http://localhost:{gateway.port}/v1/models"
        target = f"127.0.0.1:{other4.port}"
        raw = {"connect": ("127.0.0.1", gateway.port, f"CONNECT {target} HTTP/1.1\r\nHost: {target}\r\n\r\n"),
               "host-header": ("127.0.0.1", gateway.port,
                               f"GET http://{target}/steal HTTP/1.1\r\nHost: {target}\r\nConnection: close\r\n\r\n")}

        async def go():
            async with LocalSandbox() as box:
                before = _parse(await _net_probe(box, urls, name, raw))
                inside = await box.expose_gateway(gateway.url)
                after = _parse(await _net_probe(box, urls, name, raw))
                sock = box.root / ".relay" / "gateway.sock"
                relay_sock = (await box.exec(
                    [sys.executable, "-c", "import socket,sys; s=socket.socket(socket.AF_UNIX); s.connect(sys.argv[1]);"
                     f" s.sendall(b'GET http://{target}/via-socket HTTP/1.0\\r\\nHost: {target}\\r\\n\\r\\n');"
                     " f=s.makefile('rb'); print(f.read().decode().split(chr(10))[-1])", str(sock)],
                    user="agent", timeout=60)).stdout
                await box.close()
                return before, inside, after, relay_sock, sock.exists()

        before, inside, after, relay_sock, sock_left = run(go())
        served_others = {s.name: list(s.requests) for s in others}
        gateway_requests = list(gateway.requests)
        accepted = abstract[0]

    for state in (before, after):
        for server in urls:
            if server.startswith("OTHER"):
                assert state[server].startswith("ERR"), (server, state)
        assert state["abstract"].startswith("ERR"), state
        assert state["ifaces"] == ["lo"], state
        assert all(a.startswith("ERR") for a in state["route"]), state   # no route out: no address beyond lo
        for port in [s.port for s in others]:
            assert f":{port:04X} " not in state["tcp4"] + state["tcp6"]
        assert name not in state["unix"]
    assert all(not requests for requests in served_others.values()), served_others
    assert accepted == 0
    # before expose_gateway: not even the gateway; after: the gateway, under the same URL
    assert before["gateway"].startswith("ERR") and before["gateway-localhost"].startswith("ERR")
    assert inside == gateway.url
    assert after["gateway"] == "GATEWAY /v1/messages" and after["gateway-localhost"] == "GATEWAY /v1/models"
    # asking the relay for another host lands at the gateway, whatever the request says
    assert after["connect"].endswith(f"GATEWAY {target}") and after["host-header"].endswith(f"GATEWAY http://{target}/steal")
    assert relay_sock.strip() == f"GATEWAY http://{target}/via-socket"
    assert f"CONNECT {target} HTTP/1.1" in gateway_requests
    assert not sock_left                                              # close() stopped the relay


@pytest.mark.parametrize("kind", ["hostname", "address", "ipv6-loopback", "localhost"])
def test_a_gateway_off_loopback_or_by_name_is_rewritten_to_the_relay(kind):
    if kind == "ipv6-loopback":
        host, bind_host = "[::1]", "::1"
    elif kind == "localhost":
        host, bind_host = "localhost", "127.0.0.1"
    elif kind == "address":
        host = _host_address()
        if host is None:
            pytest.skip("this machine has no non-loopback IPv4 address")
        bind_host = host
    else:
        host = socket.gethostname()
        try:
            bind_host = socket.gethostbyname(host)
        except OSError:
            pytest.skip(f"the host name {host!r} does not resolve")
        if host == "localhost":
            pytest.skip("the host name is localhost")
    with _Server(bind_host, "GATEWAY") as gateway:
        url = f"http://{host}:{gateway.port}/prefix"

        async def go():
            async with LocalSandbox() as box:
                inside = await box.expose_gateway(url)
                seen = await box.exec(["curl", "-s", "--max-time", "5", inside + "/v1/messages"], user="agent",
                                      timeout=60)
                direct = await box.exec(["curl", "-s", "--max-time", "3", url + "/v1/messages"], user="agent",
                                        timeout=60)
                return inside, seen, direct

        inside, seen, direct = run(go())
    assert seen.stdout == "GATEWAY /prefix/v1/messages", seen.output()
    if kind == "localhost":   # localhost is 127.0.0.1 in the sandbox's /etc/hosts: the URL stays
        assert inside == url and direct.stdout == seen.stdout
        return
    assert inside == f"http://127.0.0.1:{gateway.port}/prefix"
    assert direct.stdout == "" and not direct.ok        # the host's name or address leads nowhere


def test_the_orchestrator_does_not_follow_the_agents_links_out_of_the_sandbox(tmp_path):
    outside = tmp_path / "host-file"
    outside.write_text("host data\n")

    async def go():
        async with LocalSandbox() as box:
            await box.exec(f"ln -s {outside} leak && ln -s {tmp_path} dir", user="agent")
            with pytest.raises(SandboxError, match="leads out of the sandbox"):
                await box.read_file("leak")
            with pytest.raises(SandboxError, match="leads out of the sandbox"):
                await box.write_file("leak", "overwritten\n")
            with pytest.raises(SandboxError, match="leads out of the sandbox"):
                await box.write_file("dir/new.txt", "x")
            await box.write_file("ok.txt", "fine\n", user="agent")
            return await box.read_file("ok.txt")

    assert run(go()) == b"fine\n"
    assert outside.read_text() == "host data\n" and not (tmp_path / "new.txt").exists()


def test_the_whole_host_cannot_be_provided():
    async def go():
        async with LocalSandbox() as box:
            with pytest.raises(SandboxError, match="whole host"):
                box.provide("/")

    run(go())


def test_without_isolation_the_gateway_url_is_given_back_as_it_is():
    async def go():
        async with LocalSandbox(isolate=False) as box:
            return await box.expose_gateway("http://gateway.example:8000/v1")

    assert run(go()) == "http://gateway.example:8000/v1"


# --- what a clever agent tries next ----------------------------------------------------------------

ESCAPE_PROBE = r"""
echo "MOUNT: $(mount -t tmpfs none "$TMPDIR" 2>&1; echo rc=$?)"
echo "UNSHARE-U: $(unshare -Ur id 2>&1; echo rc=$?)"
echo "UNSHARE-UM: $(unshare -Urm sh -c 'cd / && ls /old* 2>&1' 2>&1; echo rc=$?)"
echo "UNSHARE-N: $(unshare -n true 2>&1; echo rc=$?)"
{py} - <<'PY'
import ctypes, os
libc = ctypes.CDLL(None, use_errno=True)
CLONE_NEWUSER, CLONE_NEWNS = 0x10000000, 0x20000
r = libc.unshare(CLONE_NEWUSER)
print('UNSHARE-SYSCALL', r, ctypes.get_errno())
r = libc.syscall(435, None, 0)  # clone3
print('CLONE3', r, ctypes.get_errno())
print('CHROOT', libc.chroot(b'/tmp'), ctypes.get_errno())
me = os.getpid()
results = {{}}
for pid in sorted(int(p) for p in os.listdir('/proc') if p.isdigit()):
    if pid == me:
        continue
    try:
        cmd = open(f'/proc/{{pid}}/cmdline', 'rb').read().replace(b'\0', b' ').decode()
    except OSError:
        continue
    if cmd.split(' ')[2:4] == ['-S', {enter!r}]:   # the relay, forked off the launcher
        ok = libc.ptrace(16, pid, None, None)  # PTRACE_ATTACH the relay
        results[pid] = ('relay', ok, ctypes.get_errno())
        if ok == 0:
            libc.ptrace(17, pid, None, None)
        for what in ('root', 'cwd', 'exe', 'environ', 'mem'):
            try:
                os.listdir(f'/proc/{{pid}}/{{what}}') if what in ('root', 'cwd') else open(f'/proc/{{pid}}/{{what}}', 'rb').read(1)
                print('RELAY-PROC-OPEN', what)
            except OSError as e:
                print('RELAY-PROC-DENIED', what, e.errno)
print('PTRACE', results)
print('CAPS', [l for l in open('/proc/self/status') if l.startswith(('CapEff', 'CapBnd', 'NoNewPrivs', 'Seccomp:'))])
PY
echo "USR-MOUNT: $(awk '$5 == "/usr" {{print $6}}' /proc/self/mountinfo)"
echo "SU: $(su -c id root </dev/null 2>&1 | head -1; echo rc=$?)"
echo "JOBS: $(ls {jobs} 2>&1 | head -1)"
echo 0 > {jobs}/fake.exit 2>&1 || echo "JOBS-WRITE-DENIED"
echo "RELAY-DIR: $(ls -A {relay_dir} 2>&1)"
echo PROBE-DONE
exit 3
"""


def test_the_attacks_an_agent_would_try_next():
    with _Server("127.0.0.1", "GATEWAY") as gateway:

        async def go():
            async with LocalSandbox() as box:
                await box.expose_gateway(gateway.url)
                probe = ESCAPE_PROBE.format(py=sys.executable, jobs=box.root / ".jobs", relay_dir=box.root / ".relay",
                                            enter=str(ENTER_SCRIPT))
                job = await box.start(f"bash -c {shlex.quote(probe)}", user="agent")
                result = await box.wait(job, budget=120)
                marker = Path(job.marker_path).read_text()
                return result, marker

        result, marker = run(go())
    out = result.stdout
    assert "PROBE-DONE" in out, out
    assert "MOUNT: " in out and "rc=0" not in out.split("MOUNT: ")[1].split("\n")[0], out
    for line in ("UNSHARE-U", "UNSHARE-UM", "UNSHARE-N"):
        text = out.split(f"{line}: ")[1].split("\n")[0]
        assert "rc=0" not in text and ("Operation not permitted" in text or "rc=1" in text), (line, out)
    assert "UNSHARE-SYSCALL -1 1\n" in out                  # EPERM: no user namespace
    assert "CLONE3 -1 38\n" in out                          # ENOSYS: libc falls back to clone
    assert "CHROOT -1 1\n" in out                           # EPERM: no capability
    assert out.count("'relay', -1, 1)") == 1 and "'relay', 0" not in out, out   # the relay cannot be traced...
    assert "RELAY-PROC-OPEN" not in out and "RELAY-PROC-DENIED root" in out, out   # ...nor looked into
    caps = out.split("CAPS ")[1].split("\n")[0]
    assert "CapEff:\\t0000000000000000" in caps and "CapBnd:\\t0000000000000000" in caps, caps
    assert "NoNewPrivs:\\t1" in caps and "Seccomp:\\t2" in caps, caps
    usr = out.split("USR-MOUNT: ")[1].split("\n")[0]
    assert "ro" in usr.split(",") and "nosuid" in usr.split(","), usr   # setuid binaries are inert there
    assert "uid=0" not in out
    assert "No such file or directory" in out.split("JOBS: ")[1].split("\n")[0]
    assert "JOBS-WRITE-DENIED" in out
    assert "RELAY-DIR: gateway.sock" in out
    assert result.exit_code == 3 and marker.strip() == "3"   # its real exit code, nothing it wrote


# --- hide and provide ---------------------------------------------------------------------------------

def test_hidden_inside_provided_stays_hidden_and_provided_inside_hidden_comes_back(tmp_path):
    tree = tmp_path / "tree"
    (tree / "hidden" / "back").mkdir(parents=True)
    (tree / "visible.txt").write_text("visible\n")
    (tree / "hidden" / "answers.txt").write_text("answers\n")
    (tree / "hidden" / "back" / "ok.txt").write_text("ok\n")
    (tree / "secret.key").write_text("key\n")
    for p in (tmp_path, tree, tree / "hidden", tree / "hidden" / "back"):
        os.chmod(p, 0o755)

    async def go():
        async with LocalSandbox(hide=[str(tree / "hidden"), str(tree / "secret.key")]) as box:
            box.provide(tree)
            box.provide(tree / "hidden" / "back")
            return await box.exec(f"cd {tree}; cat visible.txt hidden/answers.txt hidden/back/ok.txt secret.key;"
                                  f" ls -A hidden; touch visible.txt hidden/x", user="agent")

    seen = run(go())
    assert "visible\n" in seen.stdout and "ok\n" in seen.stdout
    assert "answers" not in seen.stdout and "key" not in seen.stdout
    assert "back" in seen.stdout                                  # the only thing left in the hidden dir
    assert "Read-only file system" in seen.stderr                 # provided paths are read-only
    assert (tree / "hidden" / "answers.txt").read_text() == "answers\n"


def test_a_sandbox_tmp_dir_and_base_dir_anywhere(tmp_path):
    """The sandbox's own dirs are mounted at their host paths, wherever the host keeps them."""
    private = tmp_path / "private"
    private.mkdir(mode=0o700)

    async def go():
        async with LocalSandbox(base_dir=str(private)) as box:
            return box, await box.exec('echo hi > f && cat f && echo t > "$TMPDIR/t" && cat "$TMPDIR/t" && '
                                       'echo h > ~/h && cat ~/h && pwd', user="agent")

    box, seen = run(go())
    assert seen.ok and seen.stdout.split() == ["hi", "t", "h", box.workdir], seen.output()


def test_a_root_that_cannot_be_built_is_never_entered(tmp_path):
    async def go():
        async with LocalSandbox() as box:
            return await box.exec("echo ran", user="agent", cwd=str(tmp_path / "not-there"))

    seen = run(go())
    assert seen.exit_code == 125 and "ran" not in seen.stdout and "agent-code sandbox:" in seen.stderr


# --- the relay's ends on their own ------------------------------------------------------------------

def test_the_host_relay_forwards_to_its_gateway_only_and_passes_half_closes(tmp_path):
    with _Server("127.0.0.1", "GATEWAY") as gateway, _Server("127.0.0.1", "OTHER") as other:
        sock = tmp_path / "r" / "gw.sock"

        async def go():
            async with GatewayRelay(gateway.url, sock, owner=(1234, 1234)) as relay:
                mode, owner = oct(sock.stat().st_mode & 0o777), (sock.stat().st_uid, sock.stat().st_gid)
                reader, writer = await asyncio.open_unix_connection(str(sock))
                writer.write(f"GET http://127.0.0.1:{other.port}/x HTTP/1.0\r\nHost: 127.0.0.1:{other.port}\r\n\r\n"
                             .encode())
                writer.write_eof()   # the half-close reaches the gateway, the answer still comes back
                answer = await asyncio.wait_for(reader.read(), 10)
                writer.close()
                dead = GatewayRelay("http://127.0.0.1:9", tmp_path / "dead.sock")
                await dead.start()
                r2, w2 = await asyncio.open_unix_connection(str(tmp_path / "dead.sock"))
                closed = await asyncio.wait_for(r2.read(), 15)   # no gateway there: closed, not hung
                await dead.close()
            return mode, owner, answer, closed, relay

        mode, owner, answer, closed, relay = run(go())
    assert mode == "0o600" and owner == (1234, 1234)
    assert answer.decode().endswith(f"GATEWAY http://127.0.0.1:{other.port}/x") and other.requests == []
    assert closed == b"" and not sock.exists()


def test_relay_inside_cli_listens_and_forwards(tmp_path):
    """relay_inside.py as the Docker sandbox runs it: a daemon in a fresh network namespace."""
    import subprocess

    with _Server("127.0.0.1", "GATEWAY") as gateway:
        sock = tmp_path / "gw.sock"

        async def go():
            async with GatewayRelay(gateway.url, sock):
                script = Path(__file__).resolve().parents[1] / "agent_code" / "confine" / "relay_inside.py"
                cmd = (f"{sys.executable} -I -S {script} --listen 127.0.0.1:8123 --socket {sock} --lo-up && "
                       f"curl -s --max-time 5 http://127.0.0.1:8123/v1/x; echo; "
                       f"{sys.executable} -I -S {script} --listen 127.0.0.1:99999 --socket {sock}; echo rc=$?")
                proc = await asyncio.create_subprocess_exec(
                    "unshare", "--net", "--pid", "--fork", "--kill-child", "sh", "-c", cmd,
                    stdout=subprocess.PIPE, stderr=subprocess.STDOUT)
                out, _ = await asyncio.wait_for(proc.communicate(), 60)
                return out.decode()

        out = run(go())
    assert "GATEWAY /v1/x" in out and "cannot listen on 127.0.0.1:99999" in out and "rc=1" in out, out


def test_the_gateway_relay_works_from_a_sandbox_deep_in_the_tree(tmp_path):
    """A TMPDIR so deep that the relay's socket path is longer than a Unix socket address."""
    deep = tmp_path / ("d" * 60) / ("e" * 60)
    deep.mkdir(parents=True)
    with _Server("127.0.0.1", "GATEWAY") as gateway:

        async def go():
            async with LocalSandbox(base_dir=str(deep)) as box:
                inside = await box.expose_gateway(gateway.url)
                sock = box.root / ".relay" / "gateway.sock"
                seen = await box.exec(["curl", "-s", "--max-time", "5", inside + "/v1/deep"], user="agent", timeout=60)
                return sock, seen

        sock, seen = run(go())
    assert len(str(sock)) > 108
    assert seen.stdout == "GATEWAY /v1/deep", seen.output()


def test_an_agent_cannot_signal_the_orchestrator_or_another_host_process():
    """``kill -USR1`` makes a rollout run dump its stacks, ``-INT`` stops it: an agent must not
    reach the run (this process stands for it) nor any other host process (a witness) with any
    signal, by number or by name, through kill, /bin/kill or Python. The control: the same kill
    stops a process of its own."""
    import subprocess
    import time

    witness = subprocess.Popen(["sleep", "300"])
    targets = f"{os.getpid()} {witness.pid}"
    probe = (f"sleep 300 & own=$!; kill -TERM $own && wait $own; echo OWN-KILLED $?\n"
             f"for pid in {targets}; do for sig in USR1 INT TERM KILL 0; do\n"
             f"  kill -s $sig $pid 2>/dev/null && echo SENT-BUILTIN $sig $pid\n"
             f"  /bin/kill -s $sig $pid 2>/dev/null && echo SENT-BIN $sig $pid\n"
             f"done; {sys.executable} -c 'import os,sys,signal\n"
             f"for s in (signal.SIGUSR1, signal.SIGINT, signal.SIGKILL, 0):\n"
             f"  try: os.kill(int(sys.argv[1]), s); print(\"SENT-PY\", s)\n"
             f"  except OSError as e: pass' $pid; done; echo PROBE-DONE")

    async def go():
        async with LocalSandbox() as box:
            job = await box.start(f"bash -c {shlex.quote(probe)}", user="agent")
            return await box.wait(job, budget=60)

    try:
        result = run(go())
        time.sleep(0.2)
        alive = witness.poll() is None
    finally:
        witness.kill()
        witness.wait()
    out = result.stdout
    assert "PROBE-DONE" in out and "OWN-KILLED 143" in out, out + result.stderr   # kill works on its own
    assert "SENT-" not in out, out                                                # and reaches nothing outside
    assert alive
