"""Enter the wall's network namespace: loopback up, the egress relay started, the command exec'd.

Standard library only. The wall runs it inside a fresh network namespace (bubblewrap
``--unshare-net``: the command has only its own loopback interface) in front of every
sandboxed command::

    python3 -I -S enter.py --relay PORT SOCKET -- PROGRAM [ARG...]

In one process, then the program in its place (same pid, so the sandbox waits on the program):

1. **Loopback up** (bubblewrap brings it up already; a bare ``unshare --net`` does not).
2. **The relay** (``--relay``, may be repeated): ``127.0.0.1:PORT`` is bound here (so the
   program finds it listening from its first instruction), and the listener is handed to a
   daemon (:mod:`agent_code.confine.relay_inside`, loaded by path) that forwards each
   connection to the Unix socket ``SOCKET`` — the egress proxy on the host
   (:mod:`agent_code.confine.egress`), which decides where it may go. Programs find it through
   the proxy variables (:func:`agent_code.confine.egress.proxy_env`).
3. ``exec PROGRAM``.

The daemon is detached (two forks, its own session: not a child of the program, so a program
that waits for *all* its children never waits for it, and the terminal's signals do not reach
it), holds none of the program's descriptors (0, 1 and 2 are ``/dev/null``, everything else
closed: a pipe to the command's output closes when the command's own processes are done), and
watches the program's process through a pidfd: when the program ends, it exits too. In a
bubblewrap PID namespace the kernel ends it anyway when the namespace's first process ends.

Any failure before the exec ends the command with exit code 125 and the reason on stderr
(127: the program cannot be run).
"""

from __future__ import annotations

import os
import sys

TYPE_CHECKING = False  # (typing is not imported at run time: this file starts every command)
if TYPE_CHECKING:
    import socket
    from typing import Callable

EXIT_SETUP_FAILED = 125
USAGE = "usage: enter.py [--relay PORT SOCKET]... -- PROGRAM [ARG...]"
LOOPBACK = "127.0.0.1"


class _Module:
    """relay_inside.py's namespace as attributes (the functions this file calls are declared)."""

    loopback_up: Callable[[], None]
    listen: Callable[[str, int], socket.socket]
    serve: Callable[[socket.socket, str], None]

    def __init__(self, namespace: dict) -> None:
        self.__dict__.update(namespace)


def relay_module() -> _Module:
    """relay_inside.py (next to this file), run as a plain file: ``-I -S`` puts no package on
    the path, and importlib's machinery costs more than the script. (The rollout sandbox's
    ``sandbox/local_enter.py`` loads its relay through this too.)"""
    path = os.path.join(os.path.dirname(os.path.abspath(__file__)), "relay_inside.py")
    with open(path, "rb") as f:
        namespace = {"__name__": "agent_code_relay_inside", "__file__": path}
        exec(compile(f.read(), path, "exec"), namespace)
    return _Module(namespace)


def parse(argv: list[str]) -> tuple[list[tuple[int, str]], list[str]]:
    """(relays as (port, socket), the command) from the arguments; ValueError when malformed."""
    relays: list[tuple[int, str]] = []
    i = 0
    while i < len(argv) and argv[i] != "--":
        if argv[i] != "--relay" or i + 2 >= len(argv):
            raise ValueError(USAGE)
        port = int(argv[i + 1])
        if not 0 < port < 65536:
            raise ValueError(f"--relay: port {port} out of range")
        relays.append((port, argv[i + 2]))
        i += 3
    command = argv[i + 1:]
    if i >= len(argv) or not command:
        raise ValueError(USAGE)
    return relays, command


def _watch_and_exit(pid: int, pidfd: int | None) -> None:
    """End this process once ``pid`` (open as ``pidfd`` where the kernel has pidfds) has ended;
    a thread's body."""
    import select
    if pidfd is not None:
        poller = select.poll()
        poller.register(pidfd, select.POLLIN)
        poller.poll()
        os._exit(0)
    while True:   # no pidfd (Python or kernel too old): ask every half second
        try:
            os.kill(pid, 0)
        except ProcessLookupError:
            os._exit(0)
        except PermissionError:
            pass
        select.select([], [], [], 0.5)


def start_relay(module: _Module, listener: socket.socket, socket_path: str) -> None:
    """Hand ``listener`` to a detached daemon serving it (see the module's docstring); returns
    once the daemon watches this process, so it can never watch a recycled pid."""
    program = os.getpid()
    ready_r, ready_w = os.pipe()
    middle = os.fork()
    if middle == 0:   # the middle process: a new session, the daemon, gone
        try:
            os.close(ready_r)
            os.setsid()
            if os.fork() == 0:
                _daemon(module, listener, socket_path, program, ready_w)
        finally:
            os._exit(0)
    os.close(ready_w)
    os.waitpid(middle, 0)
    ready = os.read(ready_r, 1)
    os.close(ready_r)
    if ready != b"1":
        raise OSError("the relay did not start")


def _daemon(module: _Module, listener: socket.socket, socket_path: str, program: int, ready_w: int) -> None:
    try:
        devnull = os.open(os.devnull, os.O_RDWR)
        for fd in (0, 1, 2):
            os.dup2(devnull, fd)
        keep = sorted({listener.fileno(), ready_w})
        os.closerange(3, keep[0])
        for low, high in zip(keep, keep[1:] + [1 << 20]):
            os.closerange(low + 1, high)
        try:
            pidfd: int | None = os.pidfd_open(program)
        except AttributeError:
            pidfd = None
        except OSError:   # gone already (ESRCH)
            return
        os.write(ready_w, b"1")   # the program's pid is held (pidfd) or still there: it may start
        os.close(ready_w)
        import threading
        threading.Thread(target=_watch_and_exit, args=(program, pidfd), daemon=True).start()
        module.serve(listener, socket_path)
    finally:
        os._exit(0)


def main(argv: list[str]) -> int:
    try:
        relays, command = parse(argv)
    except ValueError as exc:
        print(f"agent-code sandbox: {exc}", file=sys.stderr)
        return 2
    step = "loading the relay"
    try:
        for fd in (0, 1, 2):   # a closed one would be taken by the relay's descriptors, then lost
            try:
                os.fstat(fd)
            except OSError:
                os.open(os.devnull, os.O_RDWR)
        module = relay_module()
        step = "bringing up loopback"
        module.loopback_up()
        for port, socket_path in relays:
            step = f"starting the network relay on {LOOPBACK}:{port}"
            listener = module.listen(LOOPBACK, port)
            try:
                start_relay(module, listener, socket_path)
            finally:
                listener.close()
    except OSError as exc:
        print(f"agent-code sandbox: {step} failed: {exc}", file=sys.stderr)
        return EXIT_SETUP_FAILED
    try:
        os.execvp(command[0], command)
    except OSError as exc:
        print(f"agent-code sandbox: cannot run {command[0]}: {exc}", file=sys.stderr)
        return 127
    return 0  # not reached


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
