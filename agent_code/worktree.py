"""Git worktrees for parallel sessions: ``agent-code --worktree NAME``.

A session started with ``--worktree NAME`` runs in ``<repo>/.agent/worktrees/NAME``, a git
worktree of the repository on its own branch ``agent/NAME`` (created from the current
``HEAD`` the first time, reused after that). Two agents in two worktrees edit the same
paths without touching each other's files or the main checkout; their work meets again
through git (merge or cherry-pick the branches).

``<repo>`` is always the repository's *main* worktree, so ``--worktree`` from inside another
worktree still puts the new one next to the others. ``/.agent/worktrees/`` is added to the
repository's ``info/exclude`` (shared by all its worktrees, never committed), so the main
checkout's ``git status`` does not list them; agent-code's own tools skip ``.agent/``
anyway, and the permission policy's self-protection refuses a session in the main checkout
writing into them (they are under its ``.agent/``). Inside a worktree the project is the
worktree itself: its paths are judged relative to it.

:func:`remove` refuses a worktree with uncommitted changes (modified, staged or untracked
files) unless forced; agent-code's own session transcripts (``.agent/sessions/``) do not
count as changes and go with the worktree. The branch is kept.

The path is never taken through a link: a repository can commit ``.agent`` or
``.agent/worktrees`` as a symbolic link (to ``~/.agent-code/skills``, say, where a checked-out
``SKILL.md`` would become a user skill in every project), or leave a link, or a dangling one,
as ``.agent/worktrees/NAME``. :func:`ensure` walks ``.agent/worktrees/NAME`` one directory at
a time from the main worktree with ``O_NOFOLLOW`` (creating each with ``mkdir``, which fails on
an existing link rather than following it), creates ``NAME`` itself, lets git check out into
that empty directory, and checks afterwards that the path still is that directory — a link
swapped in meanwhile is refused, not used. Any link there is an error naming it;
:func:`remove` refuses the same paths.

Everything runs real ``git`` (2.17 or newer for ``git worktree remove``); the whole of
:func:`ensure` holds a lock in the git directory, so two sessions starting at once with
different names both get theirs.
"""

from __future__ import annotations

import errno
import fcntl
import os
import re
import stat
import subprocess
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import Iterator

WORKTREES_DIR = Path(".agent") / "worktrees"
BRANCH_PREFIX = "agent/"
EXCLUDE_LINE = "/.agent/worktrees/"
SESSIONS_DIR = ".agent/sessions/"   # agent/sessions.py: transcripts, not the user's work
_NAME = re.compile(r"[A-Za-z0-9][A-Za-z0-9._-]{0,63}")
LOCK_NAME = "agent-code-worktrees.lock"


class WorktreeError(Exception):
    """Something git or the user must fix; the message says what."""


@dataclass
class Worktree:
    name: str
    path: Path
    branch: str | None          # None: a detached HEAD
    head: str = ""
    created: bool = False        # made by this call (ensure)
    exists: bool = True          # the directory is there (git lists a removed one as prunable)
    locked: bool = False
    changes: list[str] = field(default_factory=list)  # `git status --porcelain` lines (list)


def _git(cwd: Path, *args: str, check: bool = True) -> subprocess.CompletedProcess[str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith("GIT_")}  # no inherited GIT_DIR etc.
    env["GIT_TERMINAL_PROMPT"] = "0"
    from agent_code.confine.programs import host_which

    # never a git a command put on PATH inside the project: not from cwd, nor from a repository
    # around it (a worktree's main checkout too)
    here = Path(os.path.realpath(cwd))
    git = host_which("git", [here, *(d for d in here.parents if os.path.lexists(d / ".git"))])
    if git is None:
        raise WorktreeError("git is not installed (worktrees need git)")
    try:
        proc = subprocess.run([git, "-C", str(cwd), *args], capture_output=True, text=True, env=env,
                              stdin=subprocess.DEVNULL, timeout=120)
    except FileNotFoundError:
        raise WorktreeError("git is not installed (worktrees need git)") from None
    except subprocess.TimeoutExpired:
        raise WorktreeError(f"git {' '.join(args)} did not finish in 120 s") from None
    if check and proc.returncode != 0:
        message = (proc.stderr or proc.stdout).strip().splitlines()
        raise WorktreeError(f"git {' '.join(args[:2])} failed: {message[-1] if message else proc.returncode}")
    return proc


def check_name(name: str) -> str:
    """``name`` if it can name a worktree directory and its branch; raises :class:`WorktreeError`."""
    if not _NAME.fullmatch(name or "") or ".." in name or name.endswith((".", ".lock")):
        raise WorktreeError(f"invalid worktree name {name!r}: use letters, digits, '.', '_' and '-' "
                            "(at most 64, starting with a letter or digit)")
    return name


def common_dir(cwd: Path) -> Path:
    """The repository's git directory shared by all its worktrees (``.git`` of the main one)."""
    proc = _git(cwd, "rev-parse", "--git-common-dir", check=False)
    if proc.returncode != 0:
        raise WorktreeError(f"{cwd} is not inside a git repository (--worktree needs one: git init, "
                            "and commit once)")
    path = Path(proc.stdout.strip())
    return (path if path.is_absolute() else Path(cwd) / path).resolve()


def _porcelain(cwd: Path) -> list[dict[str, str]]:
    """``git worktree list --porcelain``, one dict per worktree (the main one first)."""
    out: list[dict[str, str]] = []
    for block in _git(cwd, "worktree", "list", "--porcelain").stdout.split("\n\n"):
        entry: dict[str, str] = {}
        for line in block.splitlines():
            key, _, value = line.partition(" ")
            entry[key] = value
        if "worktree" in entry:
            out.append(entry)
    return out


def main_worktree(cwd: Path) -> Path:
    """The top of the repository's main worktree (where ``.agent/worktrees/`` lives)."""
    common_dir(cwd)  # a clear error outside a repository
    entries = _porcelain(cwd)
    if not entries or "bare" in entries[0]:
        raise WorktreeError("a bare repository has no main worktree to put .agent/worktrees/ in")
    return Path(entries[0]["worktree"]).resolve()


def worktree_path(main: Path, name: str) -> Path:
    return Path(main) / WORKTREES_DIR / check_name(name)


_DIR_FLAGS = os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW | getattr(os, "O_CLOEXEC", 0)


def _open_dir(parent_fd: int, name: str, shown: Path, create: bool) -> int | None:
    """The directory ``name`` in ``parent_fd``, opened without following a link (``mkdir``
    first with ``create``: it fails on an existing link, never following it); None when it
    does not exist and ``create`` is off. Raises :class:`WorktreeError` for a link (dangling
    or not) or anything but a directory."""
    if create:
        try:
            os.mkdir(name, 0o755, dir_fd=parent_fd)
        except FileExistsError:
            pass
        except OSError as exc:
            raise WorktreeError(f"cannot create {shown}: {exc.strerror or exc}") from None
    try:
        return os.open(name, _DIR_FLAGS, dir_fd=parent_fd)
    except FileNotFoundError:
        if create:
            raise WorktreeError(f"{shown} vanished while it was being created") from None
        return None
    except OSError as exc:
        if exc.errno in (errno.ELOOP, errno.ENOTDIR, errno.EMLINK):
            raise WorktreeError(_not_a_directory(shown)) from None
        raise WorktreeError(f"cannot open {shown}: {exc.strerror or exc}") from None


def _not_a_directory(shown: Path) -> str:
    try:
        kind = "a symbolic link" if os.path.islink(shown) else "not a directory"
    except OSError:
        kind = "not a directory"
    return (f"{shown} is {kind}: worktrees are made only in a real .agent/worktrees/ directory of the "
            "repository, never through a link (the repository, or a session, may have put it there: "
            "remove it, and check what it points to)")


def _walk(main: Path, name: str, create: bool) -> tuple[os.stat_result | None, os.stat_result | None]:
    """Check ``main/.agent/worktrees/NAME`` without following links (module doc): each of
    ``.agent`` and ``worktrees`` a real directory (made with ``create``), ``NAME`` absent (None)
    or a real directory. Returns the stat of ``worktrees`` and of ``NAME`` (None: absent, or
    ``worktrees`` absent without ``create``); with ``create``, ``NAME`` is made too (empty)."""
    fds: list[int] = []
    try:
        fds.append(os.open(main, _DIR_FLAGS))
        shown = Path(main)
        for part in WORKTREES_DIR.parts:
            shown = shown / part
            fd = _open_dir(fds[-1], part, shown, create)
            if fd is None:
                return None, None
            fds.append(fd)
        base = os.fstat(fds[-1])
        shown = shown / name
        if create:
            try:
                os.mkdir(name, 0o755, dir_fd=fds[-1])
            except FileExistsError:
                pass
            except OSError as exc:
                raise WorktreeError(f"cannot create {shown}: {exc.strerror or exc}") from None
        fd = _open_dir(fds[-1], name, shown, create=False)
        if fd is None:
            return base, None
        fds.append(fd)
        return base, os.fstat(fd)
    except OSError as exc:
        raise WorktreeError(f"cannot open {main}: {exc.strerror or exc}") from None
    finally:
        for opened in fds:
            os.close(opened)


def _same(a: os.stat_result | None, b: os.stat_result | None) -> bool:
    return a is not None and b is not None and (a.st_dev, a.st_ino) == (b.st_dev, b.st_ino)


def _is_empty_dir(path: Path) -> bool:
    try:
        st = os.lstat(path)
        return stat.S_ISDIR(st.st_mode) and not any(os.scandir(path))
    except OSError:
        return False


@contextmanager
def _locked(common: Path) -> Iterator[None]:
    with open(common / LOCK_NAME, "a") as handle:
        fcntl.flock(handle, fcntl.LOCK_EX)
        try:
            yield
        finally:
            fcntl.flock(handle, fcntl.LOCK_UN)


def exclude_worktrees(common: Path) -> None:
    """Add ``/.agent/worktrees/`` to ``info/exclude`` once (the caller holds the lock)."""
    exclude = common / "info" / "exclude"
    try:
        text = exclude.read_text(encoding="utf-8")
    except FileNotFoundError:
        text = ""
    if EXCLUDE_LINE in text.splitlines():
        return
    exclude.parent.mkdir(parents=True, exist_ok=True)
    with open(exclude, "a", encoding="utf-8") as handle:
        if text and not text.endswith("\n"):
            handle.write("\n")
        handle.write("# agent-code's worktrees (agent-code --worktree NAME)\n" + EXCLUDE_LINE + "\n")


def _registered(main: Path, path: Path) -> dict[str, str] | None:
    for entry in _porcelain(main):
        if Path(entry["worktree"]).resolve() == path.resolve():
            return entry
    return None


def _branch_of(entry: dict[str, str]) -> str | None:
    ref = entry.get("branch")
    return ref.removeprefix("refs/heads/") if ref else None


def ensure(cwd: Path, name: str) -> Worktree:
    """The worktree ``name`` of the repository at ``cwd``: reused when it exists, else created
    on branch ``agent/NAME`` (that branch if it exists, else a new one from ``HEAD``)."""
    check_name(name)
    common = common_dir(cwd)
    main = main_worktree(cwd)
    path = worktree_path(main, name)
    branch = BRANCH_PREFIX + name
    with _locked(common):
        exclude_worktrees(common)
        _, found = _walk(main, name, create=False)  # a link on the way is refused before git sees the path
        entry = _registered(main, path)
        if entry is not None:
            if found is None:  # removed by hand: git still lists it; forget it and make it again
                _git(main, "worktree", "prune")
            else:
                return Worktree(name, path, _branch_of(entry), entry.get("HEAD", ""), created=False,
                                locked="locked" in entry)
        if found is not None and not _is_empty_dir(path):
            raise WorktreeError(f"{path} exists but is not a git worktree of this repository; move it away "
                                "or choose another name")
        if _git(main, "rev-parse", "--verify", "--quiet", "HEAD", check=False).returncode != 0:
            raise WorktreeError("the repository has no commit yet: commit once, then start a worktree")
        has_branch = _git(main, "rev-parse", "--verify", "--quiet", f"refs/heads/{branch}",
                          check=False).returncode == 0
        base, made = _walk(main, name, create=True)  # NAME made here, empty: git checks out into it
        if has_branch:
            _git(main, "worktree", "add", str(path), branch)
        else:
            _git(main, "worktree", "add", "-b", branch, str(path), "HEAD")
        # the path must still lead, through no link, to the directory made above
        try:
            base_now, after = _walk(main, name, create=False)
        except WorktreeError as exc:
            base_now = after = None
            why = f" ({exc})"
        else:
            why = ""
        if not (_same(base, base_now) and _same(made, after)):
            raise WorktreeError(f"{path} was replaced while the worktree was being created (a link swapped in?); "
                                f"git may have checked the repository out elsewhere: see git worktree list{why}")
        head = _git(path, "rev-parse", "HEAD").stdout.strip()
    return Worktree(name, path, branch, head, created=True)


def changes(path: Path) -> list[str]:
    """Uncommitted changes in a worktree: ``git status --porcelain`` lines (untracked files
    too, ignored ones not), leaving out agent-code's session transcripts."""
    proc = _git(path, "status", "--porcelain=v1", "--untracked-files=all")
    return [line for line in proc.stdout.splitlines()
            if line and not (line.startswith("?? ") and line[3:].strip('"').startswith(SESSIONS_DIR))]


def list_worktrees(cwd: Path) -> list[Worktree]:
    """The worktrees under ``.agent/worktrees/`` of the repository at ``cwd``, by name."""
    main = main_worktree(cwd)
    base = (main / WORKTREES_DIR).resolve()
    out = []
    for entry in _porcelain(main):
        path = Path(entry["worktree"])
        if path.parent.resolve() != base:
            continue
        exists = path.is_dir()
        out.append(Worktree(path.name, path, _branch_of(entry), entry.get("HEAD", ""), exists=exists,
                            locked="locked" in entry, changes=changes(path) if exists else []))
    return sorted(out, key=lambda w: w.name)


def remove(cwd: Path, name: str, force: bool = False) -> Worktree:
    """Remove the worktree ``name`` (its directory and git's record of it; the branch stays).
    Refuses one with uncommitted changes, or a locked one, unless ``force``."""
    check_name(name)
    main = main_worktree(cwd)
    path = worktree_path(main, name)
    _walk(main, name, create=False)  # never through a link (module doc)
    entry = _registered(main, path)
    if entry is None:
        raise WorktreeError(f"no worktree named {name!r} (agent-code worktree list shows them)")
    found = Worktree(name, path, _branch_of(entry), entry.get("HEAD", ""), exists=path.is_dir(),
                     locked="locked" in entry)
    if not found.exists:
        _git(main, "worktree", "prune")
        return found
    try:
        if Path.cwd().resolve().is_relative_to(path.resolve()):
            raise WorktreeError(f"cannot remove {path}: it is the current directory (cd out of it first)")
    except OSError:
        pass
    found.changes = changes(path)
    if not force:
        if found.changes:
            shown = "\n".join(f"  {line}" for line in found.changes[:20])
            more = f"\n  … and {len(found.changes) - 20} more" if len(found.changes) > 20 else ""
            raise WorktreeError(f"worktree {name!r} has uncommitted changes; commit them on branch "
                                f"{found.branch or '(detached)'} or use --force to discard them:\n{shown}{more}")
        if found.locked:
            raise WorktreeError(f"worktree {name!r} is locked (git worktree unlock {path}), or use --force")
    # our own check passed (or --force): git's would also count the session transcripts
    _git(main, "worktree", "remove", *(["--force", "--force"] if found.locked else ["--force"]), str(path))
    return found
