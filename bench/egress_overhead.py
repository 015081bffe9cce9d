"""What the wall's network allow-list costs: the egress proxy's start, and each request through it.

Measured here, on loopback (a local HTTP server stands for a site):

- ``start()`` of :class:`~agent_code.confine.egress.EgressProxy` (to listening) and ``close()``;
- one HTTP request on a fresh connection (connect, GET, read the reply), direct to the server
  (the floor) and through a CONNECT tunnel of the proxy's Unix socket (the host-side cost);
- the same from inside real bubblewrap (``--unshare-net``), through ``enter.py``'s relay on
  ``127.0.0.1:3128`` — the path a sandboxed command's requests take — against the same client
  on the host going direct;
- what ``enter.py`` adds to a command's start in bubblewrap (``true`` with and without it).

Run: .venv/bin/python bench/egress_overhead.py [--requests 200]
"""

from __future__ import annotations

import argparse
import http.server
import shutil
import socket
import statistics
import subprocess
import sys
import threading
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from agent_code.confine.egress import ENTER_SCRIPT, PROXY_PORT, EgressProxy, relay_prefix  # noqa: E402

CLIENT = r"""
import socket, sys, time
host, port, n, proxy = sys.argv[1], int(sys.argv[2]), int(sys.argv[3]), sys.argv[4]
times = []
for _ in range(n):
    t = time.perf_counter()
    if proxy == "-":
        s = socket.create_connection((host, port))
    else:
        s = socket.create_connection(("127.0.0.1", int(proxy)))
        s.sendall(f"CONNECT {host}:{port} HTTP/1.1\r\n\r\n".encode())
        head = b""
        while b"\r\n\r\n" not in head:
            head += s.recv(1)
    s.sendall(b"GET / HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n")
    while s.recv(65536):
        pass
    s.close()
    times.append(time.perf_counter() - t)
print(" ".join(f"{x:.6f}" for x in times))
"""


class _Quiet(http.server.BaseHTTPRequestHandler):
    def do_GET(self) -> None:   # noqa: N802
        self.send_response(200)
        self.send_header("Content-Length", "2")
        self.end_headers()
        self.wfile.write(b"ok")

    def log_message(self, *args: object) -> None:
        pass


def ms(values: list[float]) -> str:
    values = sorted(values)
    p95 = values[min(len(values) - 1, int(len(values) * 0.95))]
    return f"median {statistics.median(values) * 1000:6.2f} ms   p95 {p95 * 1000:6.2f} ms"


def unix_tunnel_request(path: Path, port: int) -> float:
    start = time.perf_counter()
    s = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    s.connect(str(path))
    s.sendall(f"CONNECT 127.0.0.1:{port} HTTP/1.1\r\n\r\n".encode())
    head = b""
    while b"\r\n\r\n" not in head:
        head += s.recv(1)
    s.sendall(b"GET / HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n")
    while s.recv(65536):
        pass
    s.close()
    return time.perf_counter() - start


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--requests", type=int, default=200)
    args = parser.parse_args()
    n = args.requests

    starts, closes = [], []
    for _ in range(50):
        proxy = EgressProxy(["127.0.0.1"])
        t = time.perf_counter()
        proxy.start()
        starts.append(time.perf_counter() - t)
        t = time.perf_counter()
        proxy.close()
        closes.append(time.perf_counter() - t)
    print(f"proxy start()                      {ms(starts)}")
    print(f"proxy close()                      {ms(closes)}")

    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), _Quiet)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    port = server.server_address[1]
    client = [sys.executable, "-I", "-S", "-c", CLIENT]
    with EgressProxy(["127.0.0.1"]) as proxy:
        assert proxy.socket_path is not None
        direct = [float(x) for x in subprocess.run([*client, "127.0.0.1", str(port), str(n), "-"], capture_output=True,
                                                   text=True, check=True).stdout.split()]
        tunnelled = [unix_tunnel_request(proxy.socket_path, port) for _ in range(n)]
        print(f"request direct (host)              {ms(direct)}")
        print(f"request via proxy socket (host)    {ms(tunnelled)}   "
              f"added {(statistics.median(tunnelled) - statistics.median(direct)) * 1000:.2f} ms")
        bwrap = shutil.which("bwrap")
        if bwrap is None:
            print("bubblewrap not installed: no in-wall numbers")
            return
        sock_dir = str(proxy.socket_path.parent)
        wall = [bwrap, "--ro-bind", "/", "/", "--dev", "/dev", "--proc", "/proc", "--unshare-net", "--unshare-pid",
                "--die-with-parent", "--bind", sock_dir, sock_dir, "--"]
        inside = subprocess.run([*wall, *relay_prefix(ENTER_SCRIPT, PROXY_PORT, proxy.socket_path), *client,
                                 "127.0.0.1", str(port), str(n), str(PROXY_PORT)], capture_output=True, text=True)
        if inside.returncode != 0:
            print(f"in the wall: failed: {inside.stderr.strip()}")
            return
        walled = [float(x) for x in inside.stdout.split()]
        print(f"request in the wall via relay      {ms(walled)}   "
              f"added {(statistics.median(walled) - statistics.median(direct)) * 1000:.2f} ms")
        plain, entered = [], []
        for _ in range(20):
            t = time.perf_counter()
            subprocess.run([*wall, "true"], check=True)
            plain.append(time.perf_counter() - t)
            t = time.perf_counter()
            subprocess.run([*wall, *relay_prefix(ENTER_SCRIPT, PROXY_PORT, proxy.socket_path), "true"], check=True)
            entered.append(time.perf_counter() - t)
        print(f"bwrap true                         {ms(plain)}")
        print(f"bwrap enter.py --relay true        {ms(entered)}   "
              f"added {(statistics.median(entered) - statistics.median(plain)) * 1000:.2f} ms")
    server.shutdown()


if __name__ == "__main__":
    main()
