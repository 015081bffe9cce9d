"""Enter the local sandbox: build the agent's root, start its gateway relay, drop to its uid, exec.

Standard library only. :class:`agent_code.sandbox.local.LocalSandbox` runs it for every command
of the ``agent`` user, as root, as the first process (pid 1) of fresh PID, mount and network
namespaces (``unshare --pid --fork --kill-child --mount --propagation private --net``)::

    python3 -I -S local_enter.py SPEC CWD -- /bin/sh -c COMMAND

``SPEC`` is a :mod:`marshal` file (written by the same interpreter; json would double the
start-up time) of a dict: see ``LocalSandbox._spec``.

In one process, with no other program started:

1. **A root of its own.** A tmpfs is mounted on ``spec["mountpoint"]`` and filled with
   read-only bind mounts of the toolchain (``/usr`` and the merged-usr links or dirs), a minimal
   ``/etc`` (a list of host entries, plus the sandbox's own ``passwd``/``group``/``hosts``), the
   paths the sandbox was asked to provide (an interpreter, the CLI agent's package), and
   read-write bind mounts of the sandbox's own workspace, home and TMPDIR — each at its host
   path. Paths to hide that lie inside a mounted one get an empty read-only directory (or an
   empty file) on top. ``/dev`` holds null, zero, full, random, urandom, tty, a new devpts
   instance and a private ``/dev/shm``; ``/proc`` is the new PID namespace's; ``/tmp``,
   ``/var/tmp`` and ``/run`` are empty private tmpfs. ``pivot_root`` then makes this the
   namespace's root, and the host's tree is detached from it (so even a chroot escape finds
   nothing of the host).
2. **The network namespace**: ``lo`` up, nothing else. With ``spec["relay"]``, the gateway
   relay's in-namespace end (:mod:`agent_code.confine.relay_inside`) is bound to its loopback
   address and forked off; it serves as the agent's uid with no privileges left.
3. **The agent's identity**: ``RLIMIT_NPROC``, no capabilities (bounding set emptied), no
   supplementary groups, the sandbox uid/gid, ``no_new_privs``, and a seccomp filter that
   refuses new user namespaces (``clone``/``unshare`` with ``CLONE_NEWUSER``; ``clone3``
   answers ENOSYS so libc falls back to ``clone``) — a user namespace would hand the agent
   capabilities (over its own namespaces) and the kernel surface that comes with them.

Any failure ends the command with exit code 125 and the reason on stderr: a sandbox that cannot
be built is never entered half-built.
"""

from __future__ import annotations

import ctypes
import marshal
import os
import resource
import struct
import sys

TYPE_CHECKING = False  # (typing is not imported at run time: this file starts every sandbox)
if TYPE_CHECKING:
    from agent_code.confine.enter import _Module as _RelayModule

MS_RDONLY, MS_NOSUID, MS_NODEV, MS_NOEXEC = 0x1, 0x2, 0x4, 0x8
MS_REMOUNT, MS_BIND, MS_REC, MS_PRIVATE = 0x20, 0x1000, 0x4000, 0x40000
MNT_DETACH = 0x2
PR_SET_DUMPABLE, PR_CAPBSET_DROP, PR_SET_NO_NEW_PRIVS, PR_SET_SECCOMP = 4, 24, 38, 22
SECCOMP_MODE_FILTER = 2
CLONE_NEWUSER = 0x10000000
EXIT_SETUP_FAILED = 125
# (audit arch, pivot_root, clone, unshare, clone3) per machine
ARCHES = {"x86_64": (0xC000003E, 155, 56, 272, 435), "aarch64": (0xC00000B7, 41, 220, 97, 435)}
DEV_NODES = ("null", "zero", "full", "random", "urandom", "tty")

_libc = ctypes.CDLL(None, use_errno=True)
_libc.mount.argtypes = (ctypes.c_char_p, ctypes.c_char_p, ctypes.c_char_p, ctypes.c_ulong, ctypes.c_char_p)
_libc.umount2.argtypes = (ctypes.c_char_p, ctypes.c_int)
_libc.prctl.argtypes = (ctypes.c_int, ctypes.c_ulong, ctypes.c_ulong, ctypes.c_ulong, ctypes.c_ulong)


class SetupError(Exception):
    pass


def _check(ret: int, what: str) -> None:
    if ret != 0:
        err = ctypes.get_errno()
        raise SetupError(f"{what}: {os.strerror(err)}")


def _b(value: str | None) -> bytes | None:
    return None if value is None else os.fsencode(value)


def mount(source: str | None, target: str, fstype: str | None, flags: int, data: str | None = None) -> None:
    _check(_libc.mount(_b(source), _b(target), _b(fstype), flags, _b(data)), f"mount {source or ''} on {target}")


def bind(source: str, target: str, *, writable: bool = False) -> None:
    """``source`` at ``target``: read-only (unless ``writable``), no setuid, no devices."""
    mount(source, target, None, MS_BIND)
    mount(None, target, None, MS_REMOUNT | MS_BIND | MS_NOSUID | MS_NODEV | (0 if writable else MS_RDONLY))


def tmpfs(target: str, mode: str, size: str, flags: int = MS_NOSUID | MS_NODEV) -> None:
    mount("agent-code", target, "tmpfs", flags, f"mode={mode},size={size}")


def _place(root: str, path: str, *, directory: bool) -> str:
    """``root + path`` made to exist (parents as root-owned 0755 dirs); returns it."""
    target = root + path
    if directory:
        os.makedirs(target, exist_ok=True)
    elif not os.path.lexists(target):
        os.makedirs(os.path.dirname(target), exist_ok=True)
        with open(target, "wb"):
            pass
    return target


def _inside(path: str, parent: str) -> bool:
    return path == parent or path.startswith(parent.rstrip("/") + "/")


def build_root(spec: dict) -> None:
    root = spec["mountpoint"]
    size = spec.get("tmpfs_size", "1g")
    tmpfs(root, "0755", "16m")
    mounted: list[str] = []   # what is visible so far (a hide matters only inside one of them)
    # the toolchain: dirs read-only, merged-usr links as links
    for path in spec["system"]:
        if os.path.islink(path):
            _place(root, os.path.dirname(path), directory=True)
            os.symlink(os.readlink(path), root + path)
        elif os.path.isdir(path):
            bind(path, _place(root, path, directory=True))
            mounted.append(path)
    # /etc: the listed host entries, then the sandbox's own files
    _place(root, "/etc", directory=True)
    for name in spec["etc"]:
        host = "/etc/" + name
        if os.path.islink(host):
            _place(root, os.path.dirname(host), directory=True)
            os.symlink(os.readlink(host), root + host)
        elif os.path.exists(host):
            bind(host, _place(root, host, directory=os.path.isdir(host)))
    for name, source in spec["etc_files"].items():
        target = root + "/etc/" + name
        if os.path.islink(target):
            os.unlink(target)
        bind(source, _place(root, "/etc/" + name, directory=False))
    # /dev, /proc, the private tmpfs dirs
    dev = _place(root, "/dev", directory=True)
    tmpfs(dev, "0755", "64k", MS_NOSUID | MS_NOEXEC)
    for node in DEV_NODES:
        if os.path.exists("/dev/" + node):
            _place(root, "/dev/" + node, directory=False)
            mount("/dev/" + node, dev + "/" + node, None, MS_BIND)
            mount(None, dev + "/" + node, None, MS_REMOUNT | MS_BIND | MS_NOSUID | MS_NOEXEC)
    for name, target in (("fd", "/proc/self/fd"), ("stdin", "/proc/self/fd/0"), ("stdout", "/proc/self/fd/1"),
                         ("stderr", "/proc/self/fd/2"), ("ptmx", "pts/ptmx")):
        os.symlink(target, f"{dev}/{name}")
    os.mkdir(dev + "/pts")
    try:
        mount("devpts", dev + "/pts", "devpts", MS_NOSUID | MS_NOEXEC, "newinstance,ptmxmode=0666,mode=0620")
    except SetupError:
        pass  # no pseudo-terminals for this agent: programs that want one fail, nothing else does
    os.mkdir(dev + "/shm")
    tmpfs(dev + "/shm", "1777", size)
    mount("proc", _place(root, "/proc", directory=True), "proc", MS_NOSUID | MS_NODEV | MS_NOEXEC)
    for path, mode in (("/tmp", "1777"), ("/var/tmp", "1777"), ("/run", "0755")):
        tmpfs(_place(root, path, directory=True), mode, size)
    # what was provided, the sandbox's own dirs, and what stays hidden: shallowest first, so a
    # path inside another goes on top of it (a hidden dir inside a provided one is covered; a
    # provided one inside a hidden one comes back)
    kept = {p: False for p in spec["ro"]}
    kept.update({p: True for p in spec["rw"]})
    ops = [(p, "bind") for p in kept] + [(h, "hide") for h in spec["hide"] if h not in kept]
    ops.sort(key=lambda op: op[0].rstrip("/").count("/"))
    hidden: list[str] = []
    for path, kind in ops:
        if not os.path.exists(path):
            continue
        if kind == "bind":
            if any(_inside(path, m) for m in mounted) and not kept[path] and \
                    not any(_inside(path, h) for h in hidden) and path not in spec["rw"]:
                continue  # already visible as it is on the host, inside a provided path
            bind(path, _place(root, path, directory=os.path.isdir(path)), writable=kept[path])
            mounted.append(path)
        elif any(_inside(path, m) for m in mounted):
            if os.path.isdir(path):
                target = _place(root, path, directory=True)
                tmpfs(target, "0755", "1m")
                hidden.append(path)
            else:
                bind("/dev/null", _place(root, path, directory=False))
    # the relay's socket dir, where the relay reaches it (the agent may connect too: it leads
    # to the gateway only)
    if spec.get("relay"):
        sock_dir = os.path.dirname(spec["relay"]["socket"])
        bind(sock_dir, _place(root, sock_dir, directory=True))
    # the new root becomes the namespace's root; the host's tree is detached
    os.chdir(root)
    arch = ARCHES.get(os.uname().machine)
    if arch is None:
        raise SetupError(f"unsupported machine {os.uname().machine}")
    _check(_libc.syscall(arch[1], b".", b"."), "pivot_root")
    _check(_libc.umount2(b".", MNT_DETACH), "detaching the host's root")
    os.chdir("/")
    for path in hidden:
        mount(None, path, None, MS_REMOUNT | MS_RDONLY | MS_NOSUID | MS_NODEV)
    mount(None, "/", None, MS_REMOUNT | MS_RDONLY | MS_NOSUID | MS_NODEV)


def _relay_module() -> _RelayModule:
    """The in-namespace relay, ``agent_code/confine/relay_inside.py``, as ``confine/enter.py``
    loads it (both run as plain files: ``-I -S`` puts no package on the path)."""
    path = os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(__file__))), "confine", "enter.py")
    with open(path, "rb") as f:
        namespace: dict = {"__name__": "agent_code_enter", "__file__": path}
        exec(compile(f.read(), path, "exec"), namespace)
    return namespace["relay_module"]()


def drop_privileges(uid: int, gid: int, nproc: int | None = None) -> None:
    if nproc is not None:
        resource.setrlimit(resource.RLIMIT_NPROC, (nproc, nproc))
    for cap in range(64):
        if _libc.prctl(PR_CAPBSET_DROP, cap, 0, 0, 0) != 0 and ctypes.get_errno() == 22:  # EINVAL: no such cap
            break
    os.setgroups([])
    os.setresgid(gid, gid, gid)
    os.setresuid(uid, uid, uid)
    _check(_libc.prctl(PR_SET_NO_NEW_PRIVS, 1, 0, 0, 0), "no_new_privs")


def seccomp_no_user_namespaces() -> None:
    """A filter refusing new user namespaces (EPERM), ``clone3`` (ENOSYS: libc falls back to
    ``clone``, whose flags a filter can read), and every syscall of a foreign ABI (x32, i386)."""
    arch = ARCHES.get(os.uname().machine)
    if arch is None:
        raise SetupError(f"no seccomp filter for machine {os.uname().machine}")
    audit_arch, _, nr_clone, nr_unshare, nr_clone3 = arch
    LD, JEQ, JGE, JSET, RET = 0x20, 0x15, 0x35, 0x45, 0x06   # BPF_LD|W|ABS, JMP|JEQ|K, JMP|JGE|K, JMP|JSET|K, RET|K
    ALLOW, ERRNO = 0x7FFF0000, 0x00050000
    EPERM, ENOSYS = 1, 38
    prog = [
        (LD, 0, 0, 4),                          # arch
        (JEQ, 1, 0, audit_arch),
        (RET, 0, 0, ERRNO | EPERM),             # a foreign ABI: nothing
        (LD, 0, 0, 0),                          # nr
        (JGE, 0, 1, 0x40000000),                # x32 syscalls
        (RET, 0, 0, ERRNO | EPERM),
        (JEQ, 0, 1, nr_clone3),
        (RET, 0, 0, ERRNO | ENOSYS),
        (JEQ, 1, 0, nr_clone),
        (JEQ, 0, 3, nr_unshare),
        (LD, 0, 0, 16),                         # args[0], low 32 bits: the flags
        (JSET, 0, 1, CLONE_NEWUSER),
        (RET, 0, 0, ERRNO | EPERM),
        (RET, 0, 0, ALLOW),
    ]
    raw = b"".join(struct.pack("HBBI", *ins) for ins in prog)
    buf = ctypes.create_string_buffer(raw, len(raw))

    class SockFprog(ctypes.Structure):
        _fields_ = [("len", ctypes.c_ushort), ("filter", ctypes.c_void_p)]

    fprog = SockFprog(len(prog), ctypes.addressof(buf))
    _check(_libc.prctl(PR_SET_SECCOMP, SECCOMP_MODE_FILTER, ctypes.addressof(fprog), 0, 0), "seccomp")


def start_relay(module, relay: dict, uid: int, gid: int) -> None:
    """The in-namespace end of the gateway relay, forked off as the agent's uid."""
    listener = module.listen(relay["host"], int(relay["port"]))
    if os.fork() == 0:
        try:
            os.setsid()
            devnull = os.open(os.devnull, os.O_RDWR)
            for fd in (0, 1, 2):
                os.dup2(devnull, fd)
            drop_privileges(uid, gid)
            _libc.prctl(PR_SET_DUMPABLE, 0, 0, 0, 0)
            module.serve(listener, relay["socket"])
        finally:
            os._exit(0)
    listener.close()


def main(argv: list[str]) -> int:
    if len(argv) < 4 or argv[2] != "--":
        print("usage: local_enter.py SPEC CWD -- PROGRAM [ARG...]", file=sys.stderr)
        return 2
    spec_path, cwd, command = argv[0], argv[1], argv[3:]
    step = "reading the spec"
    try:
        with open(spec_path, "rb") as f:
            spec = marshal.load(f)
        uid, gid = int(spec["uid"]), int(spec["gid"])
        os.umask(0o022)
        relay_module = _relay_module()   # loaded from the host's tree, before it is detached
        step = "building the root"
        build_root(spec)
        step = "bringing up loopback"
        relay_module.loopback_up()
        if spec.get("relay"):
            step = "starting the gateway relay"
            start_relay(relay_module, spec["relay"], uid, gid)
        step = "dropping privileges"
        drop_privileges(uid, gid, spec.get("nproc"))
        if spec.get("seccomp", True):
            step = "installing the seccomp filter"
            seccomp_no_user_namespaces()
        step = f"entering {cwd}"
        os.chdir(cwd)
    except (OSError, SetupError, ValueError, KeyError) as exc:
        print(f"agent-code sandbox: {step} failed: {exc}", file=sys.stderr)
        return EXIT_SETUP_FAILED
    try:
        os.execv(command[0], command)
    except OSError as exc:
        print(f"agent-code sandbox: cannot run {command[0]}: {exc}", file=sys.stderr)
        return 127
    return 0  # not reached


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
