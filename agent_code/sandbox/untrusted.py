"""Reading what a sandbox's agent could have shaped — its files, its logs, a command's output — as
untrusted input: nothing one rollout puts there may block, starve or bloat the orchestrator.

* **Files** (:func:`open_regular`, :func:`read_capped`): a regular file only. Each component of
  the path below the sandbox's root is opened with ``O_NOFOLLOW`` (no symlink anywhere on the
  way, no ``..``), the last one with ``O_PATH`` — which never blocks and has no side effect, a
  FIFO's or a device's included — and ``fstat`` must say regular file before the same inode is
  opened for reading (``O_NONBLOCK``, through ``/proc/self/fd``). Then at most a head and a tail
  are read, with ``pread`` at offsets taken from that one ``fstat``: a sparse 100 GB file costs
  the cap, a file still growing is read up to the size it had, and a time cap ends the reading
  in any case. Callers run this off the event loop (``asyncio.to_thread``).
* **Streams** (:class:`HeadTail`): a command's stdout/stderr kept to a head and a tail as it
  arrives; what lies between is counted and dropped, never held.

What was left out is said, never hidden: :class:`Capped` carries the count (``cut``), and the
text a caller shows carries :func:`cut_marker`.
"""

from __future__ import annotations

import base64
import binascii
import collections
import os
import shlex
import stat
import time
from dataclasses import dataclass
from pathlib import Path

from agent_code.sandbox.base import ExecResult, SandboxError

MIB = 1 << 20
READ_LIMIT = 64 * MIB        # a file read whole (read_file): larger is an error, not a silent cut
LOG_LIMIT = 8 * MIB          # a job's log (stream-json / JSONL): its tail is kept
STDERR_LIMIT = 1 * MIB       # the agent CLI's stderr: its tail is kept
OUTPUT_LIMIT = 16 * MIB      # each of a command's stdout and stderr: head and tail kept
READ_SECONDS = 10.0          # a file's reading ends here whatever is left
CHUNK = 1 * MIB


@dataclass(frozen=True)
class Capped:
    """What was kept of a file or a stream, and how many bytes of it were left out."""
    data: bytes
    cut: int = 0

    @property
    def truncated(self) -> bool:
        return self.cut > 0


def cut_marker(cut: int) -> bytes:
    return f"\n[... {cut} bytes cut by agent-code's sandbox: output too large ...]\n".encode()


def _no_dotdot(parts: tuple[str, ...], path: Path) -> None:
    if ".." in parts:
        raise SandboxError(f"{path}: '..' in a path read from the sandbox")


def open_regular(path: str | os.PathLike, base: str | os.PathLike | None = None) -> int:
    """A read-only, non-blocking fd of the regular file at ``path``. Below ``base`` (a trusted
    directory, e.g. the sandbox's root) no symlink is followed at all; above it, or without it,
    only the last component must not be one. :class:`FileNotFoundError` when nothing is there,
    :class:`IsADirectoryError` for a directory, :class:`SandboxError` for anything else but a
    regular file."""
    target = Path(path)
    parts: tuple[str, ...] = ()
    start = target.parent
    if base is not None and Path(base) in target.parents:
        start, parts = Path(base), target.relative_to(base).parts[:-1]
    _no_dotdot(target.parts, target)
    flags = os.O_PATH | os.O_NOFOLLOW | os.O_CLOEXEC
    fd = os.open(start, os.O_PATH | os.O_DIRECTORY | os.O_CLOEXEC)
    try:
        for part in parts:
            try:
                step = os.open(part, flags | os.O_DIRECTORY, dir_fd=fd)
            except FileNotFoundError:
                raise
            except OSError as exc:   # a symlink (ELOOP/ENOTDIR with O_NOFOLLOW) or a file on the way
                raise SandboxError(f"{path}: {part} is not a plain directory ({exc.strerror})") from None
            os.close(fd)
            fd = step
        node = os.open(target.name, flags, dir_fd=fd)
    finally:
        os.close(fd)
    try:
        kind = os.fstat(node)
        if stat.S_ISDIR(kind.st_mode):
            raise IsADirectoryError(f"{path} is a directory")
        if not stat.S_ISREG(kind.st_mode):
            raise SandboxError(f"{path} is not a regular file ({_kind(kind.st_mode)}): not read")
        # the same inode, now for reading: O_PATH gave no way to swap it in between
        opened = os.open(f"/proc/self/fd/{node}", os.O_RDONLY | os.O_NONBLOCK | os.O_CLOEXEC)
    finally:
        os.close(node)
    again = os.fstat(opened)
    if (again.st_dev, again.st_ino) != (kind.st_dev, kind.st_ino) or not stat.S_ISREG(again.st_mode):
        os.close(opened)
        raise SandboxError(f"{path} changed while it was opened: not read")
    return opened


def _kind(mode: int) -> str:
    for test, name in ((stat.S_ISLNK, "a symlink"), (stat.S_ISFIFO, "a FIFO"), (stat.S_ISDIR, "a directory"),
                       (stat.S_ISCHR, "a character device"), (stat.S_ISBLK, "a block device"),
                       (stat.S_ISSOCK, "a socket")):
        if test(mode):
            return name
    return "not a regular file"


def _pread(fd: int, offset: int, size: int, deadline: float) -> bytes:
    """Up to ``size`` bytes at ``offset``: less at the end of the file or at the deadline."""
    chunks, end = [], offset + size
    while offset < end and time.monotonic() < deadline:
        data = os.pread(fd, min(CHUNK, end - offset), offset)
        if not data:
            break
        chunks.append(data)
        offset += len(data)
    return b"".join(chunks)


def read_capped(path: str | os.PathLike, *, head: int, tail: int, base: str | os.PathLike | None = None,
                seconds: float = READ_SECONDS) -> Capped:
    """The regular file at ``path`` (see :func:`open_regular`), at most ``head`` bytes of its
    start and ``tail`` of its end; what lies between is counted in ``cut``, not read. Blocking
    (bounded by ``seconds``): call it in a thread."""
    deadline = time.monotonic() + seconds
    fd = open_regular(path, base)
    try:
        size = os.fstat(fd).st_size   # one size: a file still growing is read up to it
        if size <= head + tail:
            data = _pread(fd, 0, size, deadline)
            return Capped(data, size - len(data))
        first = _pread(fd, 0, head, deadline) if head else b""
        last = _pread(fd, size - tail, tail, deadline) if tail else b""
        return Capped(first + last, size - len(first) - len(last))
    finally:
        os.close(fd)


def read_whole(path: str | os.PathLike, *, limit: int = READ_LIMIT, base: str | os.PathLike | None = None,
               seconds: float = READ_SECONDS) -> bytes:
    """The regular file at ``path`` whole; :class:`SandboxError` past ``limit`` bytes or ``seconds``."""
    deadline = time.monotonic() + seconds
    fd = open_regular(path, base)
    try:
        size = os.fstat(fd).st_size
        if size > limit:
            raise SandboxError(f"{path} is larger than {limit} bytes ({size}): not read")
        data = _pread(fd, 0, size, deadline)
        if len(data) < size and time.monotonic() >= deadline:
            raise SandboxError(f"{path} could not be read in {seconds:g} s")
        return data
    finally:
        os.close(fd)


# --- the same, by a command inside a remote sandbox (docker, e2b) ---------------------------------

READ_TAG = "@@agent-code-read@@"


def read_command(path: str, limit: int) -> str:
    """A POSIX ``sh`` command (coreutils or busybox) that prints :data:`READ_TAG`, the size of the
    regular file at ``path`` and its last ``limit`` bytes in base64. Exit 3: nothing there; 4: not
    a regular file (a symlink, whatever it leads to, included); 5: not readable by the user running
    it; 6: a directory. It prints ``limit`` bytes at most (``head -c`` ends a ``tail`` on a file still growing);
    what could slip in between the checks and ``tail``'s open (a FIFO that holds the open, a symlink
    to ``/dev/zero`` that never ends) is ended by the caller's timeout."""
    p, n = shlex.quote(path), max(1, int(limit))
    return (f"if [ -L {p} ]; then exit 4; elif [ ! -e {p} ]; then exit 3; elif [ -d {p} ]; then exit 6; "
            f"elif [ ! -f {p} ]; then exit 4; "
            f"elif [ ! -r {p} ]; then exit 5; fi; printf '%s %s\\n' {READ_TAG} \"$(stat -c %s -- {p})\"; "
            f"tail -c {n} -- {p} | head -c {n} | base64")


def parse_read(result: ExecResult, path: str) -> Capped:
    """What :func:`read_command` printed, as :class:`Capped`; its failures as errors."""
    if result.timed_out:
        raise SandboxError(f"reading {path} took longer than {READ_SECONDS:g} s (not a regular file?): not read")
    if result.exit_code == 3:
        raise FileNotFoundError(path)
    if result.exit_code == 6:
        raise IsADirectoryError(f"{path} is a directory")
    if result.exit_code == 4:
        raise SandboxError(f"{path} is not a regular file: not read")
    if not result.ok or READ_TAG not in result.stdout:
        raise SandboxError(f"could not read {path} (exit {result.exit_code}): {result.output(500)}")
    header, _, body = result.stdout.rpartition(READ_TAG)[2].partition("\n")   # after what a login profile said
    try:
        data = base64.b64decode(body)
    except (binascii.Error, ValueError) as exc:
        raise SandboxError(f"could not read {path}: {exc}") from None
    size = int(header) if header.strip().isdigit() else len(data)
    return Capped(data, max(0, size - len(data)))


def whole_lines(capped: Capped) -> Capped:
    """A tail that starts at a line: the partial first line of a cut log is dropped (and counted)."""
    if not capped.truncated or not capped.data:
        return capped
    newline = capped.data.find(b"\n")
    drop = len(capped.data) if newline < 0 else newline + 1
    return Capped(capped.data[drop:], capped.cut + drop)


def shown(capped: Capped, *, head: int | None = None) -> bytes:
    """The kept bytes with :func:`cut_marker` where the cut was (after ``head`` bytes; at the start
    when ``None``), for text a person or a parser reads."""
    if not capped.truncated:
        return capped.data
    at = 0 if head is None else min(head, len(capped.data))
    return capped.data[:at] + cut_marker(capped.cut) + capped.data[at:]


class HeadTail:
    """A stream kept to its first ``head`` and last ``tail`` bytes as it arrives."""

    def __init__(self, head: int, tail: int) -> None:
        self.head, self.tail = head, tail
        self._head = bytearray()
        self._tail: collections.deque[bytes] = collections.deque()
        self._tail_len = 0
        self.cut = 0

    def feed(self, data: bytes) -> None:
        room = self.head - len(self._head)
        if room > 0:
            self._head += data[:room]
            data = data[room:]
        if not data:
            return
        self._tail.append(data)
        self._tail_len += len(data)
        while self._tail and self._tail_len - len(self._tail[0]) >= self.tail:
            self.cut += len(self._tail[0])
            self._tail_len -= len(self._tail.popleft())

    def result(self) -> Capped:
        rest = b"".join(self._tail)
        extra = max(0, len(rest) - self.tail)
        return Capped(bytes(self._head) + rest[extra:], self.cut + extra)
