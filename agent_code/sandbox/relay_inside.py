"""The sandbox's end of the gateway relay: a TCP listener on the sandbox's own loopback that
forwards every connection to a Unix socket (the host's end, :mod:`agent_code.sandbox.relay`).

Standard library only, so it runs as a plain file under any ``python3`` (a Docker image's
included). Run as root inside a fresh network namespace::

    python3 relay_inside.py --listen 127.0.0.1:8000 --socket /run/agent-code/gateway.sock --lo-up

``--lo-up`` brings the namespace's loopback interface up (a new namespace starts with it down).
The command returns once the listener is bound (exit 0; non-zero with the reason on stderr
otherwise), leaving a daemon behind that serves until its namespace (or container) goes away.
The agent then reaches its gateway at the usual ``http://127.0.0.1:8000`` and nothing else:
the namespace has no other interface, and the host's end connects only to the gateway.
"""

from __future__ import annotations

import argparse
import fcntl
import os
import select
import socket
import struct
import sys
import threading

SIOCGIFFLAGS, SIOCSIFFLAGS, IFF_UP = 0x8913, 0x8914, 0x1


def loopback_up() -> None:
    """``ip link set lo up`` without iproute2: the SIOCSIFFLAGS ioctl on ``lo``."""
    with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as s:
        req = struct.pack("16sH14x", b"lo", 0)
        flags = struct.unpack("16sH14x", fcntl.ioctl(s.fileno(), SIOCGIFFLAGS, req))[1]
        if not flags & IFF_UP:
            fcntl.ioctl(s.fileno(), SIOCSIFFLAGS, struct.pack("16sH14x", b"lo", flags | IFF_UP))


def _pump(a: socket.socket, b: socket.socket) -> None:
    """Copy bytes both ways until both sides have closed (half-closes passed on)."""
    open_ends = {a: b, b: a}
    try:
        while open_ends:
            readable, _, _ = select.select(list(open_ends), [], [], 3600)
            if not readable:
                return
            for src in readable:
                dst = open_ends[src]
                data = src.recv(65536)
                if data:
                    dst.sendall(data)
                    continue
                del open_ends[src]
                try:
                    dst.shutdown(socket.SHUT_WR)
                except OSError:
                    pass
    except OSError:
        pass
    finally:
        a.close()
        b.close()


def _serve(listener: socket.socket, socket_path: str) -> None:
    while True:
        try:
            conn, _ = listener.accept()
        except OSError:
            continue
        upstream = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        try:
            upstream.connect(socket_path)
        except OSError:
            conn.close()
            upstream.close()
            continue
        threading.Thread(target=_pump, args=(conn, upstream), daemon=True).start()


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="relay_inside.py")
    parser.add_argument("--listen", required=True, help="HOST:PORT on the sandbox's loopback")
    parser.add_argument("--socket", required=True, help="the host end's Unix socket")
    parser.add_argument("--lo-up", action="store_true", help="bring the loopback interface up first")
    parser.add_argument("--foreground", action="store_true", help="serve here instead of as a daemon")
    args = parser.parse_args(argv)
    host, _, port = args.listen.rpartition(":")
    try:
        if args.lo_up:
            loopback_up()
        listener = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
        listener.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        listener.bind((host or "127.0.0.1", int(port)))
        listener.listen(128)
    except (OSError, ValueError) as exc:
        print(f"relay_inside: cannot listen on {args.listen}: {exc}", file=sys.stderr)
        return 1
    if args.foreground:
        _serve(listener, args.socket)
        return 0
    if os.fork():
        return 0  # the listener is bound: the caller may start the agent now
    os.setsid()
    devnull = os.open(os.devnull, os.O_RDWR)
    for fd in (0, 1, 2):
        os.dup2(devnull, fd)
    _serve(listener, args.socket)
    return 0


if __name__ == "__main__":
    sys.exit(main())
