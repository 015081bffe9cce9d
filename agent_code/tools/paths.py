"""The confinement layer: every path a tool touches goes through here.

* :func:`resolve_inside` turns a path the model gave into a real, symlink-free path and
  refuses anything that lands outside ``ctx.root`` (``..``, absolute paths, symlinks in
  any component, ``/proc/self/...`` magic links), and paths that cannot be meant literally:
  NUL bytes, text that is not Unicode, over :data:`MAX_PATH_CHARS` characters, ``~`` (never
  expanded) and ``..`` between backslashes (Windows style). Other odd spellings
  (``%2e%2e``, look-alike dots, other letter case) are taken literally: names inside the root.
* :func:`read_regular` and :func:`write_regular` open the resolved file without following a
  last-moment symlink and without blocking (a FIFO or device swapped in is refused, never
  waited on). ``write_regular`` refuses a file with more than one hard link: a hard link is
  the same file under another name, which may lie outside the root, so changing it there would
  change it everywhere. Reading one is allowed (its path is inside the root; making a hard link
  needs access to the file already, and git never makes one).
* :func:`walk` lists a tree the same way for glob, grep and project_tree: sorted, never
  following directory symlinks, dropping symlinks that point outside the root and the
  directories in :data:`IGNORED_DIRS`.
"""

from __future__ import annotations

import os
import stat
from dataclasses import dataclass
from pathlib import Path
from typing import Callable, Iterator, Literal

from agent_code.tools.base import ToolContext, ToolError

IGNORED_DIRS = frozenset({
    ".git", "node_modules", "__pycache__", ".venv", "venv", ".mypy_cache", ".pytest_cache",
    ".ruff_cache", ".tox", "dist", "build", ".idea",
    ".agent",  # agent-code's own state (session transcripts): searching it finds the agent's own words
})
MAX_FILE_BYTES = 5 * 1024 * 1024  # larger files are "huge": read_file refuses them, grep skips them
BINARY_SNIFF_BYTES = 8192
MAX_PATH_CHARS = 4096  # PATH_MAX on Linux: anything longer cannot name a file


def _root(ctx: ToolContext) -> Path:
    return Path(os.path.realpath(ctx.root))


def is_within(path: Path, root: Path) -> bool:
    return path == root or root in path.parents


def resolve_inside(ctx: ToolContext, path: str, *, kind: Literal["file", "dir", "any"] = "any",
                   must_exist: bool = True) -> Path:
    """Resolve ``path`` (relative to the root, or absolute) to a real path inside the root."""
    check_spelling(path)
    root = _root(ctx)
    candidate = Path(path) if os.path.isabs(path) else root / path
    real = Path(os.path.realpath(candidate))
    if not is_within(real, root):
        raise ToolError(f"path {_shown(path)} is outside the working directory {root}")
    try:
        st = real.stat()
    except FileNotFoundError:
        if must_exist:
            what = {"file": "file", "dir": "directory", "any": "file or directory"}[kind]
            raise ToolError(f"no such {what}: {path!r}") from None
        return real
    except OSError as exc:
        raise ToolError(f"cannot access {path!r}: {exc.strerror}") from None
    if kind == "file":
        if stat.S_ISDIR(st.st_mode):
            raise ToolError(f"{path!r} is a directory, not a file")
        if not stat.S_ISREG(st.st_mode):
            raise ToolError(f"{path!r} is not a regular file")
    elif kind == "dir" and not stat.S_ISDIR(st.st_mode):
        raise ToolError(f"{path!r} is not a directory")
    return real


def _shown(path: str) -> str:
    return repr(path) if len(path) <= 200 else repr(path[:200]) + f"… ({len(path)} characters)"


def check_spelling(path: str) -> None:
    """Refuse a path that cannot be meant literally (see the module docstring); pure."""
    if "\x00" in path:
        raise ToolError(f"path {_shown(path)} contains a NUL byte")
    if not path.strip():
        raise ToolError("path is empty; use '.' for the working directory")
    if len(path) > MAX_PATH_CHARS:
        raise ToolError(f"path {_shown(path)} is too long (the limit is {MAX_PATH_CHARS} characters)")
    try:
        path.encode("utf-8", "surrogateescape")  # undecodable names listed by a tool round-trip
    except UnicodeEncodeError:
        raise ToolError(f"path {_shown(path)} is not valid Unicode text") from None
    if path == "~" or path.startswith("~/"):
        raise ToolError(f"path {_shown(path)}: '~' is not expanded; give a path relative to the working "
                        "directory")
    if "\\" in path and ".." in path.replace("\\", "/").split("/"):
        raise ToolError(f"path {_shown(path)} uses '..' with backslashes; paths use '/' and may not leave "
                        "the working directory")


def read_regular(real: Path, path: str) -> bytes:
    """The bytes of ``real`` (resolved by :func:`resolve_inside`), refusing anything that is
    not a regular file by the time it is opened (no symlink followed, no FIFO waited on)."""
    try:
        fd = os.open(real, os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK | os.O_CLOEXEC)
    except OSError as exc:
        raise ToolError(f"cannot read {_shown(path)}: {exc.strerror}") from None
    with os.fdopen(fd, "rb") as f:
        if not stat.S_ISREG(os.fstat(fd).st_mode):
            raise ToolError(f"{_shown(path)} is not a regular file")
        return f.read()


def write_regular(real: Path, data: bytes, path: str) -> None:
    """Replace the content of ``real`` (created if missing) in place — keeping its mode and
    owner — refusing a non-regular file and a file with other hard links (module docstring)."""
    try:
        real.parent.mkdir(parents=True, exist_ok=True)
        fd = os.open(real, os.O_WRONLY | os.O_CREAT | os.O_NOFOLLOW | os.O_NONBLOCK | os.O_CLOEXEC, 0o666)
    except OSError as exc:
        raise ToolError(f"cannot write {_shown(path)}: {exc.strerror}") from None
    with os.fdopen(fd, "wb") as f:
        st = os.fstat(fd)
        if not stat.S_ISREG(st.st_mode):
            raise ToolError(f"{_shown(path)} is not a regular file")
        if st.st_nlink > 1:
            raise ToolError(f"{_shown(path)} has {st.st_nlink} hard links: the edit tools do not change a file "
                            "that also exists under other names (which may be outside the working directory); "
                            "write a new file instead")
        try:
            f.truncate(0)
            f.write(data)
        except OSError as exc:
            raise ToolError(f"cannot write {_shown(path)}: {exc.strerror}") from None


def display(ctx: ToolContext, path: Path | str) -> str:
    """``path`` relative to the root, POSIX style; ``"."`` for the root itself."""
    root = _root(ctx)
    p = Path(path)
    try:
        rel = p.relative_to(root) if p.is_absolute() else p
    except ValueError:
        return p.as_posix()
    return rel.as_posix() or "."


def is_binary(path: Path) -> bool:
    """A file is binary when its first 8 KiB hold a NUL byte (what git and ripgrep check)."""
    with open(path, "rb") as f:
        return b"\x00" in f.read(BINARY_SNIFF_BYTES)


def split_lines(data: bytes) -> list[str]:
    """Decode (invalid UTF-8 becomes U+FFFD) and split on ``\\n`` only, as ripgrep does.

    A trailing ``\\r`` stays on the line (so ``$`` behaves as in ripgrep); callers strip it
    for display. Line numbers from here agree between read_file and grep.
    """
    lines = data.decode("utf-8", errors="replace").split("\n")
    if lines[-1] == "":
        lines.pop()
    return lines


def cut_line(line: str, limit: int) -> str:
    """Drop a trailing ``\\r`` and shorten a line longer than ``limit`` characters."""
    line = line.removesuffix("\r")
    if len(line) <= limit:
        return line
    return f"{line[:limit]}… [{len(line) - limit} more characters on this line]"


def printable(text: str) -> str:
    """Replace lone surrogates (undecodable file names) so the text is valid UTF-8."""
    return text.encode("utf-8", "replace").decode("utf-8")


# --- walking --------------------------------------------------------------------------

@dataclass(frozen=True)
class Entry:
    path: Path                    # where it sits (a symlink's own path, not its target)
    rel: str                      # POSIX path relative to the root
    kind: Literal["dir", "file", "other"]  # of the target, for a symlink
    target: Path | None = None    # resolved target of a symlink (always inside the root)

    @property
    def name(self) -> str:
        return self.path.name

    @property
    def is_dir(self) -> bool:
        return self.kind == "dir"

    @property
    def is_file(self) -> bool:
        return self.kind == "file"

    @property
    def is_symlink(self) -> bool:
        return self.target is not None


def children(ctx: ToolContext, directory: Path) -> list[Entry]:
    """The entries of one directory, sorted by name, minus ignored dirs and escaping symlinks."""
    root = _root(ctx)
    try:
        with os.scandir(directory) as it:
            dirents = sorted(it, key=lambda d: d.name)
    except OSError:
        return []
    out: list[Entry] = []
    for d in dirents:
        p = Path(d.path)
        target: Path | None = None
        try:
            if d.is_symlink():
                target = Path(os.path.realpath(p))
                if not is_within(target, root) or not target.exists():
                    continue  # escaping or dangling link: never shown, never read
                mode = target.stat().st_mode
            else:
                mode = d.stat(follow_symlinks=False).st_mode
        except OSError:
            continue
        kind: Literal["dir", "file", "other"] = (
            "dir" if stat.S_ISDIR(mode) else "file" if stat.S_ISREG(mode) else "other")
        if kind == "dir" and d.name in IGNORED_DIRS:
            continue
        out.append(Entry(p, display(ctx, p), kind, target))
    return out


def walk(ctx: ToolContext, start: Path, *, max_depth: int | None = None,
         skip: Callable[[Entry], bool] | None = None) -> Iterator[Entry]:
    """Depth-first, sorted walk below ``start`` (a resolved directory inside the root).

    Direct children have depth 1; directories at ``max_depth`` are yielded but not entered.
    Directory symlinks are yielded but never entered. Entries for which ``skip`` returns
    true are neither yielded nor entered.
    """

    def go(directory: Path, depth: int) -> Iterator[Entry]:
        for e in children(ctx, directory):
            if skip is not None and skip(e):
                continue
            yield e
            if e.is_dir and not e.is_symlink and (max_depth is None or depth < max_depth):
                yield from go(e.path, depth + 1)

    yield from go(start, 1)
