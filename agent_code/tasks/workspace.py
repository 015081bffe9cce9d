"""A task's repository in a sandbox, as a one-commit git repo, and the agent's diff against it.

**Snapshots** are made on this machine, once per process for each (repository, commit): a tar
of the tree at ``base_commit`` (``git archive``: no history, so later commits — the fix — are
not in the sandbox to be found), or of the working tree when there is no ``base_commit``
(``.git`` and bytecode / tool caches left out). A git URL is cloned once (bare) into the cache
dir. One file then goes into the sandbox and is unpacked there, which is one transfer for any
backend. Working-tree snapshots are keyed by the tree's file sizes and mtimes too, so an
edited directory is snapshotted afresh.

**The baseline** is a fresh ``git init`` with one commit of everything, made with a fixed
identity and date, so the same tree gives the same commit in every sandbox. ``setup`` runs
after it (a setup may need a git repo, e.g. setuptools-scm) and anything it leaves is folded
into that one commit (except what the repo's .gitignore ignores, such as build output), so the
agent's diff holds only the agent's changes. Bytecode and test
caches are excluded through ``.git/info/exclude`` (not committed) so they never show up in a
diff. The tree is then handed to the agent user.

**Who runs git.** Preparation runs as root on content we trust. Everything after the agent has
had the workspace (``collect_diff``, and in ``grading.py`` applying the diff) runs as the
agent user: its ``.git/config`` is agent-writable, and settings such as ``core.fsmonitor`` run
commands, which must never run as root. Output-shaping settings are pinned on the command line
so the diff ``git apply`` reads back is always in the standard form.
"""

from __future__ import annotations

import asyncio
import atexit
import hashlib
import os
import shlex
import shutil
import subprocess
import tarfile
import tempfile
import threading
from dataclasses import dataclass
from pathlib import Path
from typing import Callable, Mapping

from agent_code.sandbox.base import ExecResult, Sandbox
from agent_code.tasks.task import Task, TaskError, is_git_url

BASELINE_REF = "refs/tags/agent-code-baseline"
PROBLEM_FILE = "PROBLEM.md"

# Deterministic, config-independent git: no system/global config (no hooks, no signing, no
# aliases), a fixed identity and date for the baseline commit, and — for root working in a tree
# owned by the agent user — every directory trusted.
GIT_ENV: dict[str, str] = {
    "GIT_CONFIG_NOSYSTEM": "1", "GIT_CONFIG_GLOBAL": "/dev/null", "GIT_TERMINAL_PROMPT": "0",
    "GIT_CONFIG_COUNT": "1", "GIT_CONFIG_KEY_0": "safe.directory", "GIT_CONFIG_VALUE_0": "*",
    "GIT_AUTHOR_NAME": "agent-code", "GIT_AUTHOR_EMAIL": "agent-code@localhost",
    "GIT_COMMITTER_NAME": "agent-code", "GIT_COMMITTER_EMAIL": "agent-code@localhost",
    "GIT_AUTHOR_DATE": "2000-01-01T00:00:00+0000", "GIT_COMMITTER_DATE": "2000-01-01T00:00:00+0000",
}
# Never part of a snapshot of a working tree, nor of a diff.
JUNK_DIRS = frozenset({".git", "__pycache__", ".pytest_cache", ".mypy_cache", ".ruff_cache"})
JUNK_SUFFIXES = (".pyc", ".pyo")
EXCLUDES = "__pycache__/\n*.py[co]\n.pytest_cache/\n.mypy_cache/\n.ruff_cache/\n"
PRESETUP_REF = "refs/tags/agent-code-presetup"      # the repository before the task's setup ran
# root's copy of the baseline's .git (root's home: the agent user cannot read or write it)
PRISTINE_GIT = '"$HOME/.agent-code-baseline.git"'
MAX_DIFF_BYTES = 16 * 1024 * 1024                   # a larger diff is the agent's outcome, not graded
# The one way a diff is written, whatever the repo's config says.
DIFF_FLAGS = ("--binary --full-index --no-renames --no-color --no-ext-diff --no-textconv "
              "--src-prefix=a/ --dst-prefix=b/")


@dataclass(frozen=True)
class Workspace:
    workdir: str                 # the repository inside the sandbox
    baseline: str                # the baseline commit's sha
    problem_path: str | None     # where the problem statement was written (None: not written)


# --- host-side snapshots --------------------------------------------------------------------

_cache_dir: Path | None = None
_snapshots: dict[tuple[str, ...], Path] = {}
_locks: dict[tuple[str, ...], threading.Lock] = {}
_locks_guard = threading.Lock()


def _cache() -> Path:
    global _cache_dir
    with _locks_guard:
        if _cache_dir is None:
            _cache_dir = Path(tempfile.mkdtemp(prefix="agent-code-tasks-"))
            atexit.register(shutil.rmtree, _cache_dir, True)
    return _cache_dir


def clear_snapshot_cache() -> None:
    """Forget (and delete) every snapshot and clone this process made."""
    global _cache_dir
    with _locks_guard:
        _snapshots.clear()
        if _cache_dir is not None:
            shutil.rmtree(_cache_dir, ignore_errors=True)
            _cache_dir = None


def _git(*args: str, cwd: str | Path | None = None, stdout: int | None = subprocess.PIPE) -> str:
    try:
        proc = subprocess.run(["git", *args], cwd=cwd, env={**os.environ, **GIT_ENV}, stdout=stdout,
                              stderr=subprocess.PIPE, text=stdout == subprocess.PIPE)
    except FileNotFoundError:
        raise TaskError("git is not installed on this machine") from None
    if proc.returncode != 0:
        err = proc.stderr if isinstance(proc.stderr, str) else proc.stderr.decode(errors="replace")
        raise TaskError(f"git {' '.join(args)} failed: {err.strip()}")
    return proc.stdout if isinstance(proc.stdout, str) else ""


def _git_prefix(path: Path) -> str | None:
    """``path``'s place inside its git repository ('' at the top), or None outside any repo."""
    try:
        return _git("rev-parse", "--show-prefix", cwd=path).strip()
    except TaskError:
        return None


def _clone(url: str) -> Path:
    """A bare clone of ``url`` in the cache dir, made once."""
    target = _cache() / "clones" / hashlib.sha256(url.encode()).hexdigest()[:16]
    if not target.exists():
        target.parent.mkdir(parents=True, exist_ok=True)
        partial = target.with_suffix(".partial")
        shutil.rmtree(partial, ignore_errors=True)
        _git("clone", "--quiet", "--bare", url, str(partial))
        partial.rename(target)
    return target


def _resolve(repo_dir: Path, commit: str, *, fetch: bool) -> str:
    try:
        return _git("rev-parse", "--verify", "--quiet", f"{commit}^{{commit}}", cwd=repo_dir).strip()
    except TaskError:
        if not fetch:
            raise TaskError(f"commit '{commit}' not found in {repo_dir}") from None
    # not on any branch of the clone: servers usually allow fetching a commit by its sha
    _git("fetch", "--quiet", "origin", commit, cwd=repo_dir)
    return _resolve(repo_dir, commit, fetch=False)


def _tree_fingerprint(root: Path) -> str:
    digest = hashlib.sha256()
    for dirpath, dirnames, filenames in os.walk(root):
        dirnames[:] = sorted(d for d in dirnames if d not in JUNK_DIRS)
        for name in sorted(filenames):
            if name.endswith(JUNK_SUFFIXES) or name == ".git":
                continue
            st = os.lstat(os.path.join(dirpath, name))
            digest.update(f"{os.path.relpath(os.path.join(dirpath, name), root)}\0{st.st_size}\0"
                          f"{st.st_mtime_ns}\0{st.st_mode}\n".encode())
    return digest.hexdigest()[:16]


def _tar_tree(root: Path, target: Path) -> None:
    def keep(info: tarfile.TarInfo) -> tarfile.TarInfo | None:
        parts = Path(info.name).parts
        if any(p in JUNK_DIRS for p in parts) or info.name.endswith(JUNK_SUFFIXES):
            return None
        info.uid = info.gid = 0
        info.uname = info.gname = ""
        return info

    with tarfile.open(target, "w") as tar:
        for entry in sorted(os.listdir(root)):
            tar.add(root / entry, arcname=entry, filter=keep)


def _make_snapshot(repo: str, commit: str | None) -> Path:
    """A tar of ``repo`` at ``commit`` (or of its working tree), cached for the process."""
    if is_git_url(repo):
        repo_dir, prefix = _clone(repo), None
        commit = commit or "HEAD"
        sha = _resolve(repo_dir, commit, fetch=True)
    else:
        repo_dir = Path(repo)
        if not repo_dir.is_dir():
            raise TaskError(f"repository {repo} is not a directory")
        if commit is None:
            key = ("tree", repo, _tree_fingerprint(repo_dir))
            return _cached(key, lambda target: _tar_tree(repo_dir, target))
        prefix = _git_prefix(repo_dir)
        if prefix is None:
            raise TaskError(f"base_commit '{commit}' given but {repo} is not a git repository")
        sha = _resolve(repo_dir, commit, fetch=False)
    tree = f"{sha}:{prefix}" if prefix else sha
    return _cached(("git", repo, tree),
                   lambda target: _git("archive", "--format=tar", "-o", str(target), tree, cwd=repo_dir))


def _cached(key: tuple[str, ...], make: Callable[[Path], object]) -> Path:
    with _locks_guard:
        lock = _locks.setdefault(key, threading.Lock())
    with lock:
        path = _snapshots.get(key)
        if path is not None and path.exists():
            return path
        folder = _cache() / "snapshots"
        folder.mkdir(parents=True, exist_ok=True)
        path = folder / (hashlib.sha256("\0".join(key).encode()).hexdigest()[:20] + ".tar")
        make(path)
        _snapshots[key] = path
        return path


def snapshot(task: Task) -> Path:
    """The host-side tar of ``task``'s repository at its ``base_commit`` (cached per process)."""
    return _make_snapshot(task.repo, task.base_commit)


# --- inside the sandbox ---------------------------------------------------------------------

async def run_step(box: Sandbox, cmd: str, what: str, *, user: str = "root", env: Mapping[str, str] | None = None,
                   timeout: float | None = 120) -> ExecResult:
    """``cmd`` in the workspace with git pinned down (``GIT_ENV``); its failure is a TaskError."""
    result = await box.exec(cmd, user=user, env={**(env or {}), **GIT_ENV}, timeout=timeout, cwd=box.workdir)
    if result.timed_out:
        raise TaskError(f"{what} timed out after {timeout:g}s: {cmd}\n{result.output()}")
    if not result.ok:
        raise TaskError(f"{what} failed (exit {result.exit_code}): {cmd}\n{result.output()}")
    return result


async def prepare_workspace(box: Sandbox, task: Task, *, env: Mapping[str, str] | None = None,
                            setup_timeout: float = 600, write_problem: bool = True) -> Workspace:
    """Put ``task``'s repository into ``box.workdir`` as a fresh one-commit git repo owned by the
    agent user, run the task's ``setup`` (as root, with ``env``, e.g. a ``PATH``), and write the
    problem statement to ``<home>/PROBLEM.md``. Raises :class:`TaskError` when any step fails."""
    tar = await asyncio.to_thread(snapshot, task)
    staged = f"{box.home}/.agent-code-snapshot.tar"
    await box.upload(str(tar), staged)
    q = shlex.quote
    await run_step(box, f"find . -mindepth 1 -maxdepth 1 -exec rm -rf {{}} + && tar -xf {q(staged)} --no-same-owner"
                   f" && rm -f {q(staged)}", "unpacking the repository")
    # -f: the snapshot is exactly what the repo holds, even files its own .gitignore matches
    await run_step(box, "git init -q -b main . && git add -A -f && git commit -q --no-verify --allow-empty -m baseline"
                   f" && printf %s {q(EXCLUDES)} >> .git/info/exclude", "making the baseline commit")
    for command in task.setup:
        await run_step(box, command, f"setup command of task '{task.id}'", env=env, timeout=setup_timeout)
    # fold whatever setup left into the one baseline commit (the tree before it stays tagged: the
    # grader treats what the setup wrote as the machine's, not the project's)
    await run_step(box, f"git tag -f {PRESETUP_REF.removeprefix('refs/tags/')} >/dev/null"
                   " && git add -A && git commit -q --no-verify --allow-empty --amend -m baseline"
                   f" && git tag -f {BASELINE_REF.removeprefix('refs/tags/')} >/dev/null",
                   "recording the baseline")
    baseline = (await run_step(box, "git rev-parse HEAD", "reading the baseline")).stdout.strip()
    # the harness's own copy of the repository's git metadata, where the agent user cannot reach it:
    # collect_diff puts it back, so nothing the agent does to .git decides whether its diff is read
    await run_step(box, f'rm -rf {PRISTINE_GIT} && cp -a .git {PRISTINE_GIT}', "keeping the pristine git metadata")
    uid, gid = await _agent_ids(box)
    await run_step(box, f"chown -R {uid}:{gid} .", "handing the workspace to the agent user")
    problem_path = None
    if write_problem:
        problem_path = f"{box.home}/{PROBLEM_FILE}"
        await box.write_file(problem_path, task.problem_statement.rstrip("\n") + "\n", user="agent")
    return Workspace(box.workdir, baseline, problem_path)


async def _agent_ids(box: Sandbox) -> tuple[int, int]:
    """The agent user's uid and gid, asked from ``/`` (never from a directory the agent could
    have locked, such as its workspace after ``chmod 000 .``)."""
    result = await box.exec("id -u && id -g", user="agent", env=GIT_ENV, timeout=60, cwd="/")
    ids = result.stdout.split()
    if not result.ok or len(ids) != 2 or not all(i.isdigit() for i in ids):
        raise TaskError(f"finding the agent user failed (exit {result.exit_code}): {result.output()}")
    return int(ids[0]), int(ids[1])


class DiffError(TaskError):
    """What the agent left in its workspace cannot be read as a diff (too large, unreadable,
    unstageable): the agent's own outcome, never the machine's."""


async def collect_diff(box: Sandbox, baseline: str | None = None, *, timeout: float = 120,
                       max_bytes: int = MAX_DIFF_BYTES) -> str:
    """Everything the agent changed since the baseline — edits, new files, deletions, binary
    files, mode changes — as one ``git apply``-able diff ('' when nothing changed). Stages with
    ``git add -A`` (as the agent user), so ignored files are not part of it, unless the agent
    force-added them (``git add -f``: read off its index, when it left a readable one).

    The agent's workspace is read as the agent left it, but never through state it could
    have broken: first (as root) every process of the agent user still running is killed (a
    daemon holding ``index.lock``; the local sandbox ends them with each command), the
    harness's pristine ``.git`` (kept by :func:`prepare_workspace` outside the agent's reach) replaces whatever ``.git`` the agent
    left — deleted, corrupted, locked, re-configured, turned into a link — and the tree is given
    back to the agent user, readable (an agent that ``chmod 000`` its files). What still fails
    then (a diff over ``max_bytes``, a file git cannot stage, a tree too big to stage in
    ``timeout``) is caused by the workspace's content: :class:`DiffError`. A sandbox that cannot
    be used at all raises its own ``SandboxError``."""
    uid, gid = await _agent_ids(box)
    # the local sandbox's PID namespaces end every agent process with its command (and without
    # isolation the agent is this user: nothing to stop); a container may keep a daemon running
    stop = "" if box.name == "local" else f"pkill -KILL -U {uid} 2>/dev/null; "
    restore = (f"{stop}if [ -d {PRISTINE_GIT} ]; then rm -rf .git && cp -a {PRISTINE_GIT} .git; fi"
               f" && chown -hR {uid}:{gid} . && chmod -R u+rwX .")
    ref = shlex.quote(baseline or BASELINE_REF)
    out, forced = f"{box.home}/.agent-code-diff", f"{box.home}/.agent-code-forced"
    q = shlex.quote
    # the ignored files the agent force-added (``git add -f``) are part of its change: listed from
    # its own index, as the agent user, before that index goes (a broken one lists nothing)
    await box.exec(f"rm -f {q(forced)}; git ls-files -z --cached --ignored --exclude-standard 2>/dev/null"
                   f" | head -c 1000000 > {q(forced)}", user="agent", env=GIT_ENV, timeout=timeout, cwd=box.workdir)
    try:
        await run_step(box, restore, "restoring the pristine git metadata", timeout=timeout)
    except TaskError as exc:
        raise DiffError(str(exc)) from None
    add_forced = (f"if [ -s {q(forced)} ]; then git --literal-pathspecs add -f --pathspec-from-file={q(forced)}"
                  " --pathspec-file-nul >/dev/null 2>&1; fi; ")
    result = await box.exec(f"rm -f {q(out)} && git add -A && {{ {add_forced}true; }} && git diff --cached {DIFF_FLAGS} {ref} -- > {q(out)}"
                            f" && size=$(wc -c < {q(out)}) && if [ $size -gt {int(max_bytes)} ];"
                            f" then echo \"the diff is $size bytes, over the limit of {int(max_bytes)}\" >&2; exit 3; fi"
                            f" && cat {q(out)} && rm -f {q(out)}",
                            user="agent", env=GIT_ENV, timeout=timeout, cwd=box.workdir)
    if result.timed_out:
        raise DiffError(f"staging the workspace took over {timeout:g}s")
    if not result.ok:
        last = (result.stderr.strip().splitlines() or [f"exit {result.exit_code}"])[-1]
        raise DiffError(f"git could not read the workspace: {last[:500]}" if result.exit_code != 3 else last)
    if result.truncated:
        raise DiffError(f"the diff was cut off while it was read (over {max_bytes} bytes)")
    return result.stdout
