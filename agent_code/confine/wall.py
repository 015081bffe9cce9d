"""The wall: bubblewrap around each command the agent runs (bash tool, hooks, MCP stdio servers).

:func:`open_wall` gives a :class:`Wall` for a project, or a :class:`NoWall` that says why there
is none (not Linux, no ``bwrap``, user namespaces refused, turned off). It probes once per
process that bubblewrap really runs here (``bwrap … true`` with the flags below), not just that
the program exists. :meth:`Wall.wrap` turns an argv into the ``bwrap … -- argv`` to exec instead.

**What a wrapped command gets** (bwrap flags, in this order):

* its own user namespace (``--unshare-user``: the uid/gid stay the caller's, root inside holds
  no capability on the host), ``--cap-drop ALL``, no nested user namespaces
  (``--disable-userns``, bwrap >= 0.8; with an older bwrap the wall runs without that refusal and
  :meth:`Wall.describe` says so), bwrap's own ``no_new_privs``;
* its own PID, IPC, UTS and cgroup namespaces and ``--die-with-parent``: when the command's
  first process ends, everything it left running ends with it (``cmd &`` does not survive), and
  when agent-code dies, so does the command; ``--new-session``: no ``TIOCSTI`` into the user's
  terminal;
* its own network namespace, always (``--unshare-net``: loopback only, the host's loopback
  services unreachable). With ``allowed_domains`` set, the command's HTTP(S) goes through the
  egress proxy (``confine/egress.py``: it connects only where a rule allows, never to a
  loopback or private address a rule does not name): the proxy listens on a Unix socket bound
  read-only at ``/run/agent-code-egress`` inside, ``confine/enter.py`` relays the command's
  ``127.0.0.1:3128`` to it, and ``HTTP_PROXY``/``HTTPS_PROXY`` point there
  (:meth:`Wall._network_prefix`); a program that ignores those variables has no network;
* the host's file system **read-only** (``--ro-bind / /``), a fresh ``/dev`` (private
  ``/dev/shm``), its own ``/proc``, an empty ``/run`` (no daemon sockets: docker, dbus,
  databases), ``/tmp`` = the session's temp dir (:attr:`Wall.tmp`, kept across the session's
  commands, removed by :meth:`Wall.close`), ``/var/tmp`` a private dir next to it; ``TMPDIR=/tmp``.
  What commands need from the host's ``/tmp`` is bound back at its path: the interpreter
  (``sys.prefix``, ``sys.base_prefix``, the directory of ``sys.executable`` and of its resolved
  target), the directory holding the ``agent_code`` package, and every ``PATH`` entry of the
  environment given to :meth:`Wall.wrap` (read-only);
* **writable**: the project root, the ``writable`` paths of the settings, the session temp dir
  and, for a git worktree or a submodule (``.git`` is a file), the repository's common git dir
  (so commits work) — only when a file outside the writable roots points back at the project
  (the worktree's ``gitdir``, the submodule's ``core.worktree``): what the project's own ``.git``
  file or a ``.git/commondir`` says was written by earlier commands (:meth:`Wall._owned_common_dir`).
  ``bwrap`` and the ``git`` the wall reads config with are never found on a ``PATH`` entry inside
  the project (``confine/programs.py``);
* **read-only even inside them** (:attr:`Wall.protected`): ``.agent/`` (created on the host
  first when missing, so no command can create settings there), ``.agents/skills`` and
  ``.mcp.json`` when present, a worktree's ``.git`` file, in each git dir (the project's and the
  common one) ``hooks``, ``config``, ``config.worktree``, ``info``, ``modules``, ``commondir``
  and each ``worktrees/*/commondir`` and ``config.worktree``, the directory ``core.hooksPath``
  names and the files ``include.path``/``includeIf.*.path`` name (read with ``git config
  --file``, which runs no program of the repository's), and, when the home directory lies in a
  writable root, ``~/.agent-code`` and the shell start-up files that exist, and agent-code's own
  venv (``sys.prefix``) when it lies in a writable root (a ``.pth`` file there would run at the
  next start, on the host; installing into that venv from inside fails). Every directory
  between a writable root and a protected path is bound onto itself, so it is a mount point:
  ``mv .git x; mkdir .git`` (or the same with ``.agent``, ``.agents``) fails with EBUSY instead of
  putting a fresh ``hooks`` where git looks;
* **hidden** (:attr:`Wall.hidden`; an empty read-only tmpfs over a directory, ``/dev/null`` over a
  file): ``~/.ssh ~/.gnupg ~/.aws ~/.azure ~/.config/gcloud ~/.netrc ~/.docker ~/.kube ~/.npmrc
  ~/.pypirc ~/.git-credentials ~/.config/gh`` and the settings' ``deny_read``.

Mounts are applied shallowest first (a deeper one covers a shallower one; protected paths
come after writable roots at the same depth) and hidden ones last, so nothing re-opens them.

**What remains** (no mount can cover a path that does not exist without creating it in the
user's project, and only ``.agent/`` and, in a ``.git`` directory, ``hooks/`` are created):
a missing ``.mcp.json``, ``.agents/skills``, ``.git/config.worktree``, ``.git/info`` or
``core.hooksPath`` dir can be created by a command (the settings trust review and MCP approval
stand there), a ``.agent`` that is a symlink can be replaced, shell start-up files that do not
exist can be created when the home directory is itself inside a writable root; and everything a
command writes in the project (code, Makefile, tests, a nested repository with its own config)
runs later when the user runs it. Reads are not confined beyond the hidden paths. Symlinks and
hard links do not help a command: a symlink is followed inside the wall (to a read-only path),
and a hard link across mounts fails (EXDEV).

Building the argv costs nothing per command: the mount list depends only on the project and the
settings and is computed once per :class:`Wall`; only the ``PATH`` entries under the private
``/tmp`` (a venv or the read-only git shim there) are added per environment (cached too).
"""

from __future__ import annotations

import os
import re
import shutil
import subprocess
import sys
import tempfile
from dataclasses import dataclass
from pathlib import Path
from typing import Mapping

from agent_code.confine.programs import host_which
from agent_code.confine.egress import ENTER_SCRIPT, PROXY_PORT, EgressProxy, proxy_env, relay_prefix

# credentials no command of the agent needs to read (relative to the home directory)
CREDENTIALS = (".ssh", ".gnupg", ".aws", ".azure", ".config/gcloud", ".netrc", ".docker", ".kube", ".npmrc",
               ".pypirc", ".git-credentials", ".config/gh")
# what a shell or git of the user runs from the home directory: protected when home lies in a writable root
HOME_STARTUP = (".agent-code", ".bashrc", ".bash_profile", ".bash_login", ".bash_logout", ".profile", ".zshrc",
                ".zshenv", ".zprofile", ".zlogin", ".gitconfig", ".config", ".local/bin", ".inputrc")
# in each git dir: what makes git run a program, or points it at another git dir
GIT_PROTECTED = ("hooks", "config", "config.worktree", "info", "modules", "commondir")
# the host's dirs each command gets its own of (the first two: the session's temp dir)
PRIVATE = ("/tmp", "/var/tmp", "/run", "/dev", "/proc")
PROXY_DIR_INSIDE = "/run/agent-code-egress"   # where the proxy's socket dir is, inside
CORE_FLAGS = ("--unshare-user", "--unshare-pid", "--unshare-ipc", "--unshare-uts", "--unshare-cgroup-try",
              "--unshare-net", "--die-with-parent", "--new-session", "--cap-drop", "ALL")
DOMAIN = re.compile(r"(\*\.)?([a-z0-9]([a-z0-9-]{0,61}[a-z0-9])?\.)*[a-z0-9]([a-z0-9-]{0,61}[a-z0-9])?")
SETTINGS_KEYS = ("enabled", "allowed_domains", "writable", "deny_read")


@dataclass(frozen=True)
class WallSettings:
    """The ``sandbox`` section of the settings (see :func:`wall_settings`)."""

    enabled: bool = True
    allowed_domains: tuple[str, ...] = ()
    writable: tuple[str, ...] = ()        # extra writable paths (absolute or ~), the user's choice
    deny_read: tuple[str, ...] = ()       # extra paths hidden (added to :data:`CREDENTIALS`)


def wall_settings(section: object, source: str) -> WallSettings:
    """Parse a settings file's ``"sandbox"`` object::

        "sandbox": {"enabled": true, "allowed_domains": ["pypi.org", "*.github.com"],
                    "writable": ["~/.cache/pip"], "deny_read": ["~/work/secrets", "config/prod.env"]}

    ``None`` is the defaults. ``writable`` paths are absolute or start with ``~`` (never ``/``);
    ``deny_read`` paths may also be relative (to the project). Unknown keys and bad shapes raise
    :class:`ValueError` naming ``source``."""
    if section is None:
        return WallSettings()
    if not isinstance(section, dict):
        raise ValueError(f"'sandbox' in {source} must be an object with {', '.join(SETTINGS_KEYS)}")
    unknown = sorted(set(section) - set(SETTINGS_KEYS))
    if unknown:
        raise ValueError(f"sandbox in {source}: unknown key {unknown[0]!r}; expected {', '.join(SETTINGS_KEYS)}")
    enabled = section.get("enabled", True)
    if not isinstance(enabled, bool):
        raise ValueError(f"sandbox.enabled in {source} must be true or false")

    def strings(key: str) -> tuple[str, ...]:
        value = section.get(key, [])
        if not isinstance(value, list) or not all(isinstance(v, str) and v.strip() for v in value):
            raise ValueError(f"sandbox.{key} in {source} must be a list of non-empty strings")
        return tuple(v.strip() for v in value)

    domains = tuple(d.lower() for d in strings("allowed_domains"))
    for domain in domains:
        if not DOMAIN.fullmatch(domain):
            raise ValueError(f"sandbox.allowed_domains in {source}: {domain!r} is not a domain name "
                             "(example.com or *.example.com)")
    writable = strings("writable")
    for path in writable:
        if not (path.startswith("/") or path.startswith("~")):
            raise ValueError(f"sandbox.writable in {source}: {path!r} must be absolute or start with ~")
        if os.path.normpath(os.path.expanduser(path)) == "/":
            raise ValueError(f"sandbox.writable in {source}: '/' would make everything writable; "
                             "turn the sandbox off instead (\"enabled\": false or --no-sandbox)")
    return WallSettings(enabled, domains, writable, strings("deny_read"))


@dataclass(frozen=True)
class NoWall:
    """There is no wall: commands run as the user, unconfined. ``reason`` says why."""

    reason: str

    def banner(self) -> str:
        """The one line printed at start-up."""
        if self.reason.startswith("turned off"):
            return f"agent-code: the OS sandbox is off ({self.reason}): commands run unconfined"
        if "not found" in self.reason:
            get = "install bubblewrap (apt install bubblewrap)"
        elif "namespace" in self.reason:
            get = "allow unprivileged user namespaces for bwrap"
        else:
            get = "fix the above"
        return (f"agent-code: warning: no OS sandbox ({self.reason}): commands, hooks and MCP servers run "
                "unconfined — they can write wherever you can and reach the network, and only the permission "
                f"rules stand in the way. To get the sandbox, {get}; to silence this, pass --no-sandbox "
                "(or AGENT_CODE_SANDBOX=0).")


_KIND_ORDER = {"tmp": 0, "ro-back": 1, "rw": 2, "self": 3, "ro": 4}


def _order(mounts: list[tuple[Path, str, Path | None]]) -> list[tuple[Path, str, Path | None]]:
    return sorted(mounts, key=lambda m: (len(m[0].parts), _KIND_ORDER[m[1]]))


def _inside(path: Path, parent: Path) -> bool:
    return path == parent or parent in path.parents


def _outermost(paths: list[Path]) -> list[Path]:
    ordered = sorted(set(paths), key=lambda p: len(p.parts))
    return [p for i, p in enumerate(ordered) if not any(_inside(p, h) for h in ordered[:i])]


class Wall:
    """bubblewrap around the agent's commands for one project (module doc). Paths are the
    host's, symlinks resolved."""

    root: Path
    writable: tuple[Path, ...]
    protected: tuple[Path, ...]
    hidden: tuple[Path, ...]
    allowed_domains: tuple[str, ...]
    tmp: Path

    def __init__(self, root: Path, settings: WallSettings, bwrap: str, *, userns_refused: bool = True,
                 home: Path | None = None) -> None:
        self.root = Path(os.path.realpath(root))
        self.bwrap = bwrap
        self.userns_refused = userns_refused
        self.allowed_domains = tuple(settings.allowed_domains)
        self.home = Path(os.path.realpath(home or os.path.expanduser("~")))
        self._session = Path(os.path.realpath(tempfile.mkdtemp(prefix="agent-code-wall-")))
        os.chmod(self._session, 0o700)
        self.tmp = self._session / "tmp"
        self._var_tmp = self._session / "var-tmp"
        self.tmp.mkdir()
        self._var_tmp.mkdir()
        self._closed = False
        self._git_dirs = self._find_git_dirs()
        writable = [self.root]
        for extra in settings.writable:
            path = Path(os.path.realpath(os.path.expanduser(extra)))
            if os.path.exists(path):
                writable.append(path)
        common = self._owned_common_dir(writable)
        if common is not None:
            writable.append(common)   # a worktree: commits write the repository's objects and refs
        self.writable = tuple(_outermost(writable))
        self.protected = tuple(self._find_protected())
        self.hidden = tuple(self._find_hidden(settings.deny_read))
        # the network allow-list: a proxy on a Unix socket, reached from inside through the relay
        # of confine/enter.py (started at the first command that needs it; a bad rule fails here)
        self._proxy = EgressProxy(self.allowed_domains, socket_dir=self._session) if self.allowed_domains else None
        self._proxy_dir: Path | None = None
        self._static = self._plan()
        self._prefixes: dict[tuple[str, ...], list[str]] = {}

    # --- what is where ---------------------------------------------------------------------

    def _find_git_dirs(self) -> list[Path]:
        """The project's git dir and (last) the common one, when ``root/.git`` exists; creates
        ``.git/hooks`` in a ``.git`` directory that lacks it (so it can be mounted read-only)."""
        dot = self.root / ".git"
        if dot.is_dir() and not dot.is_symlink():
            git_dir = dot
        elif dot.is_file():
            try:
                text = dot.read_text(errors="replace").strip()
            except OSError:
                return []
            if not text.startswith("gitdir:"):
                return []
            git_dir = Path(os.path.realpath(self.root / text[len("gitdir:"):].strip()))
        elif dot.is_dir():   # a symlinked .git directory
            git_dir = Path(os.path.realpath(dot))
        else:
            return []
        if not git_dir.is_dir():
            return []
        common = git_dir
        try:
            named = (git_dir / "commondir").read_text().strip()
            if named:
                common = Path(os.path.realpath(git_dir / named))
        except OSError:
            pass
        dirs = [Path(os.path.realpath(git_dir))]
        if common != dirs[0] and common.is_dir():
            dirs.append(common)
        if dot.is_dir():
            try:
                (dirs[0] / "hooks").mkdir(exist_ok=True)
            except OSError:
                pass
        return dirs

    def _owned_common_dir(self, writable: list[Path]) -> Path | None:
        """The common git dir outside the writable roots that commits need written (a worktree's
        repository, a submodule's git dir under its superproject), or None.

        What names it (the ``.git`` file, a ``commondir`` file) lies in the project, which every
        earlier command could write: a planted ``.git/commondir`` or ``.git`` file must not make
        ``~`` (or another repository) writable in the next session. So the dir is taken only when
        a file *outside* the writable roots, which no command could have written, points back at
        this project: ``<common>/worktrees/<name>/gitdir`` naming its ``.git`` file (``git
        worktree``), or ``core.worktree`` of the git dir's own ``config`` naming the project (a
        submodule). Anything else: no extra root (git in the wall then cannot commit)."""
        if not self._git_dirs:
            return None
        git_dir, common = self._git_dirs[0], self._git_dirs[-1]
        if any(_inside(common, w) for w in writable):
            return None

        def unforgeable(path: Path) -> bool:
            real = Path(os.path.realpath(path))
            return real.is_file() and not any(_inside(real, w) for w in writable)

        dot = self.root / ".git"
        back = git_dir / "gitdir"
        if git_dir.parent.name == "worktrees" and git_dir.parent.parent == common and dot.is_file() \
                and unforgeable(back):
            try:
                named = back.read_text(errors="replace").strip()
            except OSError:
                named = ""
            if named and Path(os.path.realpath(git_dir / named)) == Path(os.path.realpath(dot)):
                return common
        config = git_dir / "config"
        git = host_which("git", writable)
        if git_dir == common and git is not None and unforgeable(config):
            try:
                value = subprocess.run([git, "config", "--file", str(config), "--get", "core.worktree"],
                                       capture_output=True, text=True, env=self._git_env(), timeout=10,
                                       stdin=subprocess.DEVNULL, check=False).stdout.strip()
            except (OSError, subprocess.SubprocessError):
                value = ""
            if value and Path(os.path.realpath(git_dir / os.path.expanduser(value))) == self.root:
                return common
        return None

    def _git_env(self) -> dict[str, str]:
        return {"PATH": os.environ.get("PATH", "/usr/bin:/bin"), "HOME": str(self.home), "GIT_CONFIG_NOSYSTEM": "1",
                "GIT_CONFIG_GLOBAL": os.devnull, "LC_ALL": "C"}

    def _git_config_paths(self, git_dir: Path) -> list[Path]:
        """``core.hooksPath`` and the included config files of ``git_dir/config``, read by
        ``git config --file`` (no program of the repository's runs). When git cannot say (an
        include naming a FIFO blocks it until the timeout), the whole git dir: a wall that
        cannot know what git would run protects all of it (commits fail, nothing is planted)."""
        config = git_dir / "config"
        git = host_which("git", self.writable)
        if git is None or not config.is_file():
            return []
        try:
            out = subprocess.run([git, "config", "--file", str(config), "--includes", "--get-regexp",
                                  r"^(core\.hookspath|include\.path|includeif\..*\.path)$"],
                                 capture_output=True, text=True, env=self._git_env(), timeout=5,
                                 stdin=subprocess.DEVNULL, check=False).stdout
        except (OSError, subprocess.SubprocessError):
            return [Path(os.path.realpath(git_dir))]
        found = []
        for line in out.splitlines():
            key, _, value = line.partition(" ")
            if not value:
                continue
            value = os.path.expanduser(value)
            base = self.root if key.lower() == "core.hookspath" else git_dir
            found.append(Path(os.path.realpath(base / value)))
        return found

    def _find_protected(self) -> list[Path]:
        candidates: list[Path] = []
        agent = self.root / ".agent"
        if not os.path.lexists(agent):
            try:
                agent.mkdir()
            except OSError:
                pass
        candidates += [agent, self.root / ".agents" / "skills", self.root / ".mcp.json"]
        if (self.root / ".git").is_file():
            candidates.append(self.root / ".git")
        for git_dir in self._git_dirs:
            candidates += [git_dir / name for name in GIT_PROTECTED]
            candidates += self._git_config_paths(git_dir)
            worktrees = git_dir / "worktrees"
            if worktrees.is_dir():
                for entry in sorted(worktrees.iterdir()):
                    candidates += [entry / "commondir", entry / "config.worktree"]
        if any(_inside(self.home, w) for w in self.writable):
            candidates += [self.home / name for name in HOME_STARTUP]
        if sys.prefix != sys.base_prefix:
            # agent-code's own venv, when it lies in the project: a .pth file or a changed package
            # there would run on the host at the next start (pip installs into it fail inside)
            candidates.append(Path(sys.prefix))
        out: list[Path] = []
        for path in candidates:
            if not os.path.lexists(path):
                continue
            real = Path(os.path.realpath(path))
            if os.path.exists(real) and any(_inside(real, w) for w in self.writable) and real not in self.writable \
                    and real not in out:
                out.append(real)
        return out

    def _find_hidden(self, deny_read: tuple[str, ...]) -> list[Path]:
        paths = [self.home / name for name in CREDENTIALS]
        for entry in deny_read:
            expanded = os.path.expanduser(entry)
            paths.append(Path(expanded) if os.path.isabs(expanded) else self.root / expanded)
        out: list[Path] = []
        for path in paths:
            if not os.path.lexists(path):
                continue
            real = Path(os.path.realpath(path))
            if os.path.exists(real) and real != Path("/") and real not in out:
                out.append(real)
        return out

    def _tool_paths(self) -> list[Path]:
        """The interpreter and the ``agent_code`` package (hooks and the git shim run them)."""
        package = Path(os.path.realpath(__file__)).parent.parent.parent
        exe = Path(sys.executable)
        return [Path(sys.prefix), Path(sys.base_prefix), exe.parent, Path(os.path.realpath(exe)).parent, package]

    def _under_private(self, path: Path) -> bool:
        return any(_inside(path, Path(p)) for p in PRIVATE)

    # --- the mount plan ---------------------------------------------------------------------

    def _back_binds(self, paths: list[Path]) -> list[tuple[Path, str, Path | None]]:
        """Read-only binds of host paths that the private dirs would hide (outside writable roots)."""
        out: list[tuple[Path, str, Path | None]] = []
        for path in paths:
            real = Path(os.path.realpath(path))
            if os.path.isdir(real) and self._under_private(real) and not any(_inside(real, w) for w in self.writable):
                out.append((real, "ro-back", None))
            raw = Path(os.path.abspath(path))   # a PATH entry through a symlink: its own path too
            if raw != real and os.path.isdir(raw) and self._under_private(raw) \
                    and not any(_inside(raw, w) for w in self.writable):
                out.append((raw, "ro-back", real))
        return out

    def _plan(self) -> list[tuple[Path, str, Path | None]]:
        """The mounts after the fixed ones (``/``, ``/dev``, ``/proc``, ``/run``, the temp
        dirs), in the order bwrap applies them, hidden ones excluded."""
        mounts: list[tuple[Path, str, Path | None]] = []
        mounts += self._back_binds(self._tool_paths())
        mounts += [(w, "rw", None) for w in self.writable]
        selfs: set[Path] = set()
        for path in self.protected:
            root = next(w for w in self.writable if _inside(path, w))
            parent = path.parent
            while parent != root and _inside(parent, root):
                selfs.add(parent)
                parent = parent.parent
        mounts += [(p, "self", None) for p in sorted(selfs) if p not in self.protected]
        mounts += [(p, "ro", None) for p in self.protected]
        return _order(self._dedupe(mounts))

    @staticmethod
    def _dedupe(mounts: list[tuple[Path, str, Path | None]]) -> list[tuple[Path, str, Path | None]]:
        seen: dict[Path, tuple[Path, str, Path | None]] = {}
        for m in mounts:
            previous = seen.get(m[0])
            if previous is None or _KIND_ORDER[m[1]] >= _KIND_ORDER[previous[1]]:
                seen[m[0]] = m
        return list(seen.values())

    def _fixed_args(self) -> list[str]:
        args = [*CORE_FLAGS]
        if self.userns_refused:
            args.insert(1, "--disable-userns")
        args += ["--ro-bind", "/", "/", "--dev", "/dev", "--proc", "/proc", "--tmpfs", "/run",
                 "--bind", str(self.tmp), "/tmp"]
        if os.path.isdir("/var/tmp") and not os.path.islink("/var/tmp"):
            args += ["--bind", str(self._var_tmp), "/var/tmp"]
        if self._proxy_dir is not None:
            args += ["--ro-bind", str(self._proxy_dir), PROXY_DIR_INSIDE]
        return args

    def _args(self, mounts: list[tuple[Path, str, Path | None]]) -> list[str]:
        args = self._fixed_args()
        for path, kind, source in mounts:
            src = str(source or path)
            if kind == "ro-back":
                args += ["--ro-bind-try", src, str(path)]
            elif kind in ("rw", "self"):
                args += ["--bind", src, str(path)]
            else:
                args += ["--ro-bind", src, str(path)]
        for path in self.hidden:
            if self._under_private(path) and not self._visible(path, mounts):
                continue   # not there inside anyway
            if os.path.isdir(path):
                args += ["--tmpfs", str(path), "--remount-ro", str(path)]
            else:
                args += ["--ro-bind", os.devnull, str(path)]
        return args

    def _visible(self, path: Path, mounts: list[tuple[Path, str, Path | None]]) -> bool:
        return any(_inside(path, m[0]) for m in mounts)

    def _network_prefix(self) -> list[str]:
        """With ``allowed_domains``, the egress launcher run inside the wall before the command:
        it relays ``127.0.0.1:PROXY_PORT`` to the proxy's socket (bound read-only at
        ``PROXY_DIR_INSIDE``), so the command reaches the network only through the proxy, which
        connects only where a rule allows (``confine/egress.py``). Without: nothing, network off."""
        if self._proxy is None:
            return []
        if self._proxy_dir is None:
            self._proxy_dir = self._proxy.start().parent
            self._prefixes.clear()
        return relay_prefix(ENTER_SCRIPT, PROXY_PORT, Path(PROXY_DIR_INSIDE) / "proxy.sock")

    def _prefix(self, env: Mapping[str, str]) -> list[str]:
        entries = [Path(p) for p in env.get("PATH", "").split(os.pathsep) if os.path.isabs(p)]
        extra = [m for m in self._back_binds(entries) if not self._visible(m[0], self._static)]
        key = tuple(sorted({str(m[0]) for m in extra}))
        prefix = self._prefixes.get(key)
        if prefix is None:
            mounts = _order(self._dedupe(self._static + extra)) if extra else self._static
            prefix = self._prefixes[key] = [self.bwrap, *self._args(mounts)]
        return prefix

    # --- the public face --------------------------------------------------------------------

    def wrap(self, argv: list[str], env: Mapping[str, str]) -> tuple[list[str], dict[str, str]]:
        """The argv and environment to exec instead of ``argv`` with ``env`` (the caller's cwd
        stays: bwrap starts the command in it, and the project root is there at its path)."""
        if self._closed:
            raise RuntimeError("the wall is closed")
        out_env = {k: v for k, v in env.items() if k not in ("TMP", "TEMP")}
        out_env["TMPDIR"] = "/tmp"
        network = self._network_prefix()
        if network:
            out_env.update(proxy_env(PROXY_PORT))
        return [*self._prefix(env), "--", *network, *argv], out_env

    def contains_write(self, path: Path | str) -> bool:
        """Whether a command inside the wall may write ``path`` as it names it (relative: against
        the root; symlinks followed as inside the wall): True in a writable root, the private
        ``/tmp``, ``/var/tmp``, ``/run``, ``/dev``; False under a protected or hidden path or
        anywhere else."""
        target = self._resolve(Path(path) if os.path.isabs(path) else self.root / path)
        verdict = False
        for prefix, writable in (("/", False), ("/dev", True), ("/proc", False), ("/run", True), ("/tmp", True),
                                 ("/var/tmp", True)):
            if _inside(target, Path(prefix)):
                verdict = writable
        for mount, kind, _ in self._static:
            if _inside(target, mount):
                verdict = kind in ("rw", "self")
        if any(_inside(target, h) for h in self.hidden):
            verdict = False
        return verdict

    def _resolve(self, path: Path) -> Path:
        """``path`` with symlinks followed as the wall shows them: through the host's file system
        where the host's paths are visible, lexically inside the private dirs."""
        queue = list(path.parts[1:])
        current = Path("/")
        hops = 0
        while queue:
            name = queue.pop(0)
            if name in ("", "."):
                continue
            if name == "..":
                current = current.parent
                continue
            step = current / name
            if self._under_private(step) and not self._visible(step, self._static):
                if any(step in m[0].parents for m in self._static):
                    current = step   # a directory bwrap made on the way to a mount: no link
                    continue
                return Path(os.path.normpath(step.joinpath(*queue)))
            if os.path.islink(step) and hops < 40:
                hops += 1
                target = Path(os.readlink(step))
                if target.is_absolute():
                    current = Path("/")
                queue = list(target.parts[1:] if target.is_absolute() else target.parts) + queue
                continue
            current = step
        return current

    def describe(self) -> str:
        """One line: what the wall lets commands write, keeps read-only and hides."""
        def short(path: Path) -> str:
            for base, name in ((self.root, ""), (self.home, "~")):
                if _inside(path, base):
                    rel = path.relative_to(base)
                    return (f"{name}/{rel}" if name else str(rel)) if str(rel) != "." else (name or str(path))
            return str(path)

        writes = ", ".join([str(self.root), *(str(w) for w in self.writable if w != self.root), "temp"])
        parts = [f"bubblewrap: writes only {writes}"]
        if self.protected:
            parts.append("read-only: " + ", ".join(short(p) for p in self.protected[:8])
                         + (" …" if len(self.protected) > 8 else ""))
        if self.hidden:
            parts.append("hidden: " + ", ".join(short(p) for p in self.hidden[:6]) + (" …" if len(self.hidden) > 6 else ""))
        if self.allowed_domains:
            parts.append(f"network only through the proxy, to {', '.join(self.allowed_domains)}")
        else:
            parts.append("network off")
        if not self.userns_refused:
            parts.append("nested user namespaces allowed (bwrap < 0.8)")
        return "; ".join(parts)

    def close(self) -> None:
        """Remove the session's temp dir (idempotent)."""
        self._closed = True
        if self._proxy is not None:
            self._proxy.close()
        if self._session.exists():
            subprocess.run(["rm", "-rf", "--one-file-system", "--", str(self._session)], stdin=subprocess.DEVNULL,
                           stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, check=False)
            shutil.rmtree(self._session, ignore_errors=True)

    def __enter__(self) -> "Wall":
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


_probes: dict[tuple[str, int], tuple[str | None, bool]] = {}   # (bwrap, euid) -> (why not, refuses userns)


def _probe(bwrap: str, disable_userns: bool) -> str | None:
    true = shutil.which("true") or "/bin/true"
    flags = list(CORE_FLAGS) + (["--disable-userns"] if disable_userns else [])
    argv = [bwrap, *flags, "--ro-bind", "/", "/", "--dev", "/dev", "--proc", "/proc", "--tmpfs", "/run", "--", true]
    try:
        done = subprocess.run(argv, capture_output=True, text=True, timeout=20, stdin=subprocess.DEVNULL, check=False)
    except (OSError, subprocess.SubprocessError) as exc:
        return f"bwrap cannot start: {exc}"
    if done.returncode == 0:
        return None
    return (done.stderr.strip().splitlines() or [f"exit {done.returncode}"])[-1].removeprefix("bwrap: ")


def probe(bwrap: str) -> tuple[str | None, bool]:
    """Whether bwrap really runs here: (None, or why not; whether ``--disable-userns`` works —
    bwrap < 0.8 lacks it, and then the wall runs without it). Cached per process and user."""
    key = (bwrap, os.geteuid())
    if key not in _probes:
        why = _probe(bwrap, True)
        if why is not None and ("disable-userns" in why or "Unknown option" in why):
            _probes[key] = (_probe(bwrap, False), False)
        else:
            _probes[key] = (why, True)
    return _probes[key]


def open_wall(root: Path, settings: WallSettings = WallSettings()) -> Wall | NoWall:
    """A :class:`Wall` around commands run for the project at ``root``, or a :class:`NoWall`."""
    if not settings.enabled:
        return NoWall("turned off in the settings (\"sandbox\": {\"enabled\": false})")
    if not sys.platform.startswith("linux"):
        return NoWall(f"not available on {sys.platform}: the sandbox needs Linux and bubblewrap")
    real = Path(os.path.realpath(root))
    bwrap = host_which("bwrap", [real])   # never one a command put in the project (confine/programs.py)
    if bwrap is None:
        return NoWall("bwrap not found: install bubblewrap")
    if real == Path("/"):
        return NoWall("the project is /: a wall that lets commands write the project would let them write everything")
    why, refuses = probe(bwrap)
    if why is not None:
        low = why.lower()
        if "namespace" in low or "uid map" in low or "operation not permitted" in low or "permission" in low:
            return NoWall(f"user namespaces refused: {why}")
        return NoWall(f"bwrap does not run here: {why}")
    return Wall(real, settings, bwrap, userns_refused=refuses)
