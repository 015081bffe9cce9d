"""The sandbox's end of a relay: a TCP listener on the sandbox's own loopback that forwards
every connection to a Unix socket, the host's end. Two walls use it:

* a rollout sandbox's gateway relay (the host's end is :mod:`agent_code.sandbox.relay`; the
  local sandbox's launcher, :mod:`agent_code.sandbox.local_enter`, loads this file by path, and
  the Docker sandbox copies it into the container);
* the confine wall's network allow-list (the host's end is the egress proxy,
  :mod:`agent_code.confine.egress`; :mod:`agent_code.confine.enter` loads this file by path).

Standard library only, so it runs as a plain file under any ``python3`` (a Docker image's
included). Run as root inside a fresh network namespace::

    python3 relay_inside.py --listen 127.0.0.1:8000 --socket /run/agent-code/gateway.sock --lo-up

``--lo-up`` brings the namespace's loopback interface up (a new namespace starts with it down);
alone (no ``--listen``) it does only that. ``listen`` and ``serve`` are the same steps for a
caller that imports this file (the local sandbox's launcher binds, then forks and drops
privileges itself).
The command returns once the listener is bound (exit 0; non-zero with the reason on stderr
otherwise), leaving a daemon behind that serves until its namespace (or container) goes away.
The agent then reaches its gateway at the usual ``http://127.0.0.1:8000`` and nothing else:
the namespace has no other interface, and the host's end connects only to the gateway.
At most ``--max-connections`` (default 32, as the host's end) are relayed at once (two threads
each); one more is closed as soon as it is accepted.
"""

from __future__ import annotations

import fcntl
import os
import socket
import struct
import sys
import threading
import time

SIOCGIFFLAGS, SIOCSIFFLAGS, IFF_UP = 0x8913, 0x8914, 0x1
MAX_CONNECTIONS = 32


def loopback_up() -> None:
    """``ip link set lo up`` without iproute2: the SIOCSIFFLAGS ioctl on ``lo``."""
    with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as s:
        req = struct.pack("16sH14x", b"lo", 0)
        flags = struct.unpack("16sH14x", fcntl.ioctl(s.fileno(), SIOCGIFFLAGS, req))[1]
        if not flags & IFF_UP:
            fcntl.ioctl(s.fileno(), SIOCSIFFLAGS, struct.pack("16sH14x", b"lo", flags | IFF_UP))


def _one_way(src: socket.socket, dst: socket.socket, done: threading.Semaphore) -> None:
    """Copy ``src`` to ``dst`` until ``src`` ends, then pass the half-close on."""
    try:
        while data := src.recv(65536):
            dst.sendall(data)
    except OSError:
        pass
    try:
        dst.shutdown(socket.SHUT_WR)
    except OSError:
        pass
    done.release()


def _pump(a: socket.socket, b: socket.socket, slots: threading.Semaphore | None = None) -> None:
    """Copy bytes both ways, one thread per direction (a slow reader on one side never stalls
    the other), until both sides have closed; then close both (and give back the slot)."""
    done = threading.Semaphore(0)
    try:
        threading.Thread(target=_one_way, args=(b, a, done), daemon=True).start()
        _one_way(a, b, done)
        done.acquire()
        done.acquire()
    finally:
        a.close()
        b.close()
        if slots is not None:
            slots.release()


def listen(host: str, port: int) -> socket.socket:
    """A listening TCP socket on ``host:port`` (IPv4, or IPv6 when ``host`` holds a colon)."""
    family = socket.AF_INET6 if ":" in host else socket.AF_INET
    listener = socket.socket(family, socket.SOCK_STREAM)
    listener.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    listener.bind((host, port))
    listener.listen(128)
    return listener


UNIX_PATH_MAX = 100   # sun_path holds 108 bytes; a longer path is reached through its directory


def short_unix_path(path: str) -> str:
    """``path``, or, when it is too long for a Unix socket address, the same socket reached
    through an ``O_PATH`` descriptor of its directory (``/proc/self/fd/N/NAME``; the descriptor
    stays open for the life of the process)."""
    if len(os.fsencode(path)) < UNIX_PATH_MAX:
        return path
    fd = os.open(os.path.dirname(path) or ".", os.O_PATH | os.O_DIRECTORY)
    return f"/proc/self/fd/{fd}/{os.path.basename(path)}"


def serve(listener: socket.socket, socket_path: str, max_connections: int = MAX_CONNECTIONS) -> None:
    """Forward every connection to ``listener`` to the Unix socket ``socket_path``, forever; at
    most ``max_connections`` at once (one more is closed at once)."""
    socket_path = short_unix_path(socket_path)
    slots = threading.Semaphore(max_connections)
    while True:
        try:
            conn, _ = listener.accept()
        except OSError:
            time.sleep(0.1)   # e.g. out of file descriptors: wait, do not spin
            continue
        if not slots.acquire(blocking=False):
            conn.close()
            continue
        upstream = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        try:
            upstream.connect(socket_path)
            threading.Thread(target=_pump, args=(conn, upstream, slots), daemon=True).start()
        except (OSError, RuntimeError):   # no gateway end, or no thread to be had
            conn.close()
            upstream.close()
            slots.release()


_serve = serve  # the name earlier callers used


def main(argv: list[str] | None = None) -> int:
    import argparse  # here: the local sandbox's launcher loads this file on every command

    parser = argparse.ArgumentParser(prog="relay_inside.py")
    parser.add_argument("--listen", help="HOST:PORT on the sandbox's loopback")
    parser.add_argument("--socket", help="the host end's Unix socket")
    parser.add_argument("--lo-up", action="store_true", help="bring the loopback interface up first")
    parser.add_argument("--foreground", action="store_true", help="serve here instead of as a daemon")
    parser.add_argument("--max-connections", type=int, default=MAX_CONNECTIONS, help="relayed at once")
    args = parser.parse_args(argv)
    if bool(args.listen) != bool(args.socket) or not (args.listen or args.lo_up):
        parser.error("give --listen and --socket together (or only --lo-up)")
    try:
        if args.lo_up:
            loopback_up()
        if not args.listen:
            return 0
        host, _, port = args.listen.rpartition(":")
        listener = listen(host.strip("[]") or "127.0.0.1", int(port))
    except (OSError, ValueError, OverflowError) as exc:
        print(f"relay_inside: cannot listen on {args.listen}: {exc}", file=sys.stderr)
        return 1
    if args.foreground:
        serve(listener, args.socket, args.max_connections)
        return 0
    if os.fork():
        return 0  # the listener is bound: the caller may start the agent now
    os.setsid()
    devnull = os.open(os.devnull, os.O_RDWR)
    for fd in (0, 1, 2):
        os.dup2(devnull, fd)
    serve(listener, args.socket, args.max_connections)
    return 0


if __name__ == "__main__":
    sys.exit(main())
