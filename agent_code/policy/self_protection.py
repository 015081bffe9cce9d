"""Self-protection: the agent may not rewrite what decides its own permissions.

Without it, ``acceptEdits`` would be ``bypassPermissions`` one step later: the edit tools
could write ``.agent/settings.local.json`` (``"defaultMode": "bypassPermissions"``, a hook
that runs anything), ``.git/config`` (``core.fsmonitor``, ``core.pager``, aliases) or a
``.git/hooks/*`` script, and the next run — or the user's next ``git commit`` — would run
what the agent wrote. So in every mode but ``bypassPermissions`` (``default``,
``acceptEdits``, ``plan``), :class:`~agent_code.policy.permissions.PermissionPolicy`
refuses a call that would write one of these **protected locations**:

================================  ==============================================================
location                          why
================================  ==============================================================
``.agent/`` (any depth)           the project's settings (``settings.json``,
                                  ``settings.local.json``: rules, ``defaultMode``, hooks), hook
                                  scripts kept there, and the session transcripts ``-c`` resumes
``~/.agent-code/``                the user's settings, skills and ``AGENTS.md``
``.agents/skills/``               the project's skills (instructions the model follows)
``.git`` (any depth, file or      git's config, hooks and attributes: programs git runs as the
dir), ``~/.gitconfig``,           user (fsmonitor, pager, textconv, hooks, aliases), and the
``~/.config/git/``, the           ``.git`` *file* of a worktree, which names the git directory
directory ``core.hooksPath``
names
================================  ==============================================================

Project instruction files (``AGENTS.md``, ``AGENT.md``, ``CLAUDE.md``, see
``agent/memory.py``) are *not* protected: they only go into the system prompt, and no
permission, rule, mode or hook is ever read from them, so writing them cannot loosen a
check (and keeping them up to date is ordinary work the user asks for). The user-level
``~/.agent-code/AGENTS.md`` is protected with the rest of ``~/.agent-code/``.

**How a path is matched.** Every name is compared case-insensitively (``.GIT``,
``.Agent``): Linux is case-sensitive, so there ``.GIT`` is another directory and refusing
it costs little, but on a case-insensitive file system (macOS, Windows) it *is* ``.git``.
A path is judged twice: as written, made absolute against the working directory and
normalized (``./.agent/../.agent/x`` is ``.agent/x``), and with symlinks resolved (a link
to ``.agent/settings.local.json``, a symlinked parent directory, a dangling link whose
target would be created). A protected name anywhere in either form counts, and so does
the real location of each protected place (``.agent`` itself may be a symlink). A new file
in a protected directory is a write into it; so is removing or renaming one (``mv``,
``rm``): removing ``.agent/settings.json`` removes its deny rules.

**Edit tools** (kind ``edit``): every path argument (``path``, ``file_path`` …) is judged
literally — the tools expand nothing.

**Shell commands** are judged on :func:`commands.analyze`'s view of them (every command
at any depth, wrappers unwrapped). A relative path is judged from every directory the line
may be in — the project and wherever each ``cd``/``pushd`` leads from any of them — so
neither subshells nor the order of ``&&``/``||`` lists matter:

* a write redirection (``>``, ``>>``, ``&>``, ``<>`` …) whose target is protected, the
  files a known writer writes (``tee``, ``cp``/``install``/``rsync``/``ln`` destinations and
  ``-t DIR``, every operand of ``mv``, ``rm``, ``touch``, ``truncate``, ``chmod`` …,
  ``sed -i``/``perl -i`` files, ``dd of=``, any program's ``-o``/``--output`` file),
  ``git config`` that sets something (it writes ``.git/config`` or ``~/.gitconfig``),
  ``git init --template`` (it installs hooks), a recursive ``cp``/``rsync`` into the
  project or home of a tree that holds ``.git``/``.agent``/``.agents``, ``mv`` of the
  project itself or a directory above it, ``agent-code settings accept`` and
  ``agent-code --trust-project`` (the agent accepting its own settings change, or trusting a
  folder for the user; agent-code run under ``script``/``tmux``/``expect``,
  which could answer the REPL's question, is asked) — **deny**;
* any other command that names a protected path as an argument (``tar -C .git -x``,
  ``git checkout old -- .agent/settings.json``, ``env -C .agent …``) unless it only reads
  (``cat``, ``ls``, ``grep``, ``git diff`` …) — **deny**;
* a word the shell expands is judged over what it may expand to: ``~``, ``~user``,
  ``$HOME`` and ``$PWD`` are filled in, braces are expanded, and a glob counts when it may
  match a protected name (``.ag*``, ``.[g]it``; ``*`` only after ``shopt -s dotglob``) —
  **deny**. A write target that cannot be known (``$VAR``, ``$(…)``, a ``cd`` to an
  unknown directory before a relative write), and a protected name inside an argument that
  is not a path (an interpreter's ``-c`` code, sed's ``w`` command, awk's ``print >``) —
  **ask**: no allow rule approves such a command, the user sees it (headless: refused).

What the policy cannot see is not covered: a program that writes protected files from its
own code (``python script.py``, ``make``, an archive extracted by ``tar`` without naming a
protected path), and a process left running that swaps a symlink in between the check and
the write. The sandbox confines those; the settings trust store (``agent/trust.py``) keeps a
settings file changed that way from taking effect unaccepted. ``/undo`` is the user's command, not a tool,
and only restores files the agent changed itself.

Everything here is a pure function of the paths and the file system's symlinks (read,
never written).
"""

from __future__ import annotations

import fnmatch
import os
import posixpath
import pwd
import re
import stat
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Final, Iterable, Literal, cast

from agent_code.policy.commands import Analysis, Command, normalize, own_argv, program_name
from agent_code.policy.shell_syntax import WRITE_REDIRECTIONS

PROJECT_DIR: Final = ".agent"          # agent/settings.py PROJECT_DIR
USER_DIR: Final = ".agent-code"        # agent/settings.py USER_DIR
SKILLS_PARENT, SKILLS_DIR = ".agents", "skills"   # tools/skills.py PROJECT_SKILLS

# one protected name (a single path component, case-insensitive) -> what it is
PROTECTED_NAMES: Final[dict[str, str]] = {
    ".agent": "the agent's project settings, hooks and sessions (.agent/)",
    ".agent-code": "the user's agent-code settings, skills and instructions (~/.agent-code/)",
    ".git": "git's config and hooks (.git/), which git runs as the user",
    ".gitconfig": "git's user config (~/.gitconfig), which names programs git runs",
}
SKILLS_WHAT: Final = "the project's skills (.agents/skills/)"
GIT_XDG_WHAT: Final = "git's user config (~/.config/git/), which names programs git runs"
HOOKS_PATH_WHAT: Final = "git's hooks directory (core.hooksPath)"

# a protected name inside a longer word (code, a sed script): ask, never allow
_NAME_IN_TEXT: Final = re.compile(r"(?i)(?<![\w.-])\.(agent-code|agents|agent|gitconfig|git)(?![\w.-])")
_GLOB_CHARS: Final = set("*?[")
_EXPANSION: Final = re.compile(r"\$|`")
_CODE_CHARS: Final = set(" \t\n'\"();<>|&=")  # a word holding these is code or text, not a path
_CODE_CHARS_RE: Final = re.compile("[" + re.escape("".join(sorted(_CODE_CHARS))) + "]")
_EXTGLOB: Final = re.compile(r"[@!+*?]\(")

Severity = Literal["deny", "ask"]


@dataclass(frozen=True)
class Finding:
    """Why a call touches a protected location: ``deny`` (it writes one) or ``ask`` (it may:
    the policy cannot tell). ``what`` names the location, ``detail`` the offending part
    of the call as written."""

    severity: Severity
    what: str
    detail: str

    def message(self, tool_name: str) -> str:
        """The refusal the model reads."""
        if self.severity == "deny":
            return (f"Permission denied: {tool_name} was not run: it would change {self.what} "
                    f"({self.detail}). The agent may not change its own settings, hooks, skills or git's "
                    "config and hooks, in any permission mode but bypassPermissions: that would let it grant "
                    "itself permissions. Do not retry it or a variant of it; tell the user the exact change "
                    "you want, and they can make it themselves.")
        return (f"Permission denied: {tool_name} needs the user's approval: it may change {self.what} "
                f"({self.detail}), and nobody can approve it in this run. Do not retry it; tell the user the "
                "exact change you want, and they can make it themselves.")


_set_field: Final = object.__setattr__  # (a frozen dataclass's field, set once in __post_init__)


# --- where the protected places are -------------------------------------------------

@dataclass(frozen=True)
class Places:
    """The protected places of one project for one user: ``root`` and ``home`` as given,
    and the real (symlink-resolved) location of each place with what it is. The fields
    after ``real`` are derived from them once, when the instance is made (each check reads
    them many times)."""

    root: Path
    home: Path
    real: tuple[tuple[str, str], ...]   # (real path, what)
    # (real path, its case-folded form without a trailing ``/``, what) per place
    prefixes: tuple[tuple[str, str, str], ...] = field(init=False, repr=False, compare=False)
    # the case-folded places, for ``str.startswith``: a path under none of them is no place
    folded_starts: tuple[str, ...] = field(init=False, repr=False, compare=False)
    root_text: str = field(init=False, repr=False, compare=False)
    # whether ``root_text + "/" + name`` is normalized as it stands (no ``//``, ``/.`` or
    # trailing ``/`` in the root) for a name without ``/`` that does not start with a dot
    root_is_plain: bool = field(init=False, repr=False, compare=False)
    root_slash: str = field(init=False, repr=False, compare=False)  # root_text with one trailing "/"

    def __post_init__(self) -> None:
        # (fields, computed once here: each check reads them many times)
        prefixes = tuple((p, p.casefold().rstrip("/") or "/", what) for p, what in self.real)
        text = str(self.root)
        _set_field(self, "prefixes", prefixes)
        _set_field(self, "folded_starts", tuple(folded for _, folded, _ in prefixes))
        _set_field(self, "root_text", text)
        _set_field(self, "root_is_plain", text.startswith("/") and not ("//" in text or "/." in text
                                                                        or text.endswith("/")))
        _set_field(self, "root_slash", text.rstrip("/") + "/")

    @classmethod
    def of(cls, root: Path | str | None, home: Path | str | None = None) -> "Places":
        root_path = Path(os.path.abspath(root if root is not None else os.getcwd()))
        home_path = Path(os.path.abspath(home if home is not None else Path.home()))
        places = [
            (root_path / PROJECT_DIR, PROTECTED_NAMES[".agent"]),
            (root_path / SKILLS_PARENT / SKILLS_DIR, SKILLS_WHAT),
            (root_path / ".git", PROTECTED_NAMES[".git"]),
            (home_path / USER_DIR, PROTECTED_NAMES[".agent-code"]),
            (home_path / ".gitconfig", PROTECTED_NAMES[".gitconfig"]),
            (home_path / ".config" / "git", GIT_XDG_WHAT),
        ]
        gitdir = _gitdir_of(root_path / ".git")
        common = _commondir_of(gitdir) if gitdir is not None else None
        for place in (gitdir, common):  # a worktree's git directory, and the repository's it shares
            if place is not None:
                places.append((place, PROTECTED_NAMES[".git"]))
        hooks = _hooks_path(root_path, common or gitdir or root_path / ".git", home_path)
        if hooks is not None:
            places.append((hooks, HOOKS_PATH_WHAT))
        places += [(script, f"a hook script named in the settings ({label})")
                   for script, label in hook_scripts(root_path, home_path)]
        real = tuple((os.path.realpath(p), what) for p, what in places)
        return cls(root_path, home_path, real)

    @classmethod
    def cached(cls, root: Path | str | None, home: Path | str | None = None) -> "Places":
        """:meth:`of`, reused while the files it reads are unchanged."""
        # the absolute root and home and the files to stat, per (root, home) as given, the
        # working directory and $HOME (what the two paths depend on): a check stats the files
        # only, without building Path objects each time
        given = (root, home, os.getcwd(), os.environ.get("HOME") if home is None else None)
        paths = _PATHS.get(given)
        if paths is None:
            root_path = Path(os.path.abspath(root if root is not None else os.getcwd()))
            home_path = Path(os.path.abspath(home if home is not None else Path.home()))
            if len(_PATHS) > 32:
                _PATHS.clear()
            paths = _PATHS[given] = (root_path, home_path, tuple(str(p) for p in _inputs(root_path, home_path)))
        root_path, home_path, inputs = paths
        key = (root_path, home_path, tuple([_signature(p) for p in inputs]))
        places = _CACHE.get(key)
        if places is None:
            if len(_CACHE) > 32:
                _CACHE.clear()
            places = _CACHE[key] = cls.of(root_path, home_path)
        return places


_CACHE: Final[dict[Any, Places]] = {}
_PATHS: Final[dict[Any, tuple[Path, Path, tuple[str, ...]]]] = {}


def _inputs(root: Path, home: Path) -> list[Path]:
    return [root / ".git", root / ".git" / "config", root / PROJECT_DIR, *_settings_files(root, home)]


def _signature(path: Path | str) -> tuple[int, int, int] | None:
    try:
        st = os.stat(path)
    except OSError:
        return None
    return st.st_mtime_ns, st.st_size, st.st_ino


def _settings_files(root: Path, home: Path) -> list[Path]:
    """The settings files a run reads (``agent/settings.py``), for their hook commands."""
    return [home / USER_DIR / "settings.json", root / PROJECT_DIR / "settings.json",
            root / PROJECT_DIR / "settings.local.json"]


def hook_scripts(root: Path, home: Path) -> list[tuple[Path, str]]:
    """Files that the settings' hook commands name (``scripts/lint.sh``,
    ``$AGENT_CODE_PROJECT_DIR/hooks/check.py``): a hook runs without asking, so writing its
    script would run code without asking. Words that name an existing file, or contain a
    ``/``, count; the project-dir variables are filled in."""
    import json

    from agent_code.policy.commands import analyze

    out: list[tuple[Path, str]] = []
    for path in _settings_files(root, home):
        try:
            data = json.loads(path.read_text(encoding="utf-8"))
        except (OSError, ValueError):
            continue
        label = f"~/{USER_DIR}/settings.json" if path.parent.name == USER_DIR else f"{PROJECT_DIR}/{path.name}"
        hooks = data.get("hooks") if isinstance(data, dict) else None
        for matchers in (hooks.values() if isinstance(hooks, dict) else []):
            for matcher in (matchers if isinstance(matchers, list) else []):
                entries = matcher.get("hooks") if isinstance(matcher, dict) else None
                for entry in (entries if isinstance(entries, list) else []):
                    command = entry.get("command") if isinstance(entry, dict) else None
                    if not isinstance(command, str):
                        continue
                    for c in analyze(command).commands:
                        for word in c.argv:
                            word = re.sub(r"^\$\{?(AGENT_CODE_PROJECT_DIR|CLAUDE_PROJECT_DIR)\}?(?=/|$)",
                                          str(root), word)
                            word = str(home) + word[1:] if word.startswith("~/") else word
                            if not word or word.startswith("-") or "$" in word:
                                continue
                            full = Path(word) if os.path.isabs(word) else root / word
                            if full.is_file() or ("/" in word and not full.exists()):
                                out.append((full, label))
    return out


def _gitdir_of(dot_git: Path) -> Path | None:
    """The git directory a ``.git`` *file* names (a worktree or submodule)."""
    try:
        if not dot_git.is_file():
            return None
        text = dot_git.read_text(encoding="utf-8", errors="replace")
    except OSError:
        return None
    m = re.match(r"\s*gitdir:\s*(.+?)\s*$", text, re.MULTILINE)
    if m is None:
        return None
    target = Path(m.group(1))
    return target if target.is_absolute() else dot_git.parent / target


def _commondir_of(gitdir: Path) -> Path | None:
    """The repository's git directory a worktree's git directory shares (its ``commondir``
    file: config and hooks live there), None for a main repository."""
    try:
        text = (gitdir / "commondir").read_text(encoding="utf-8", errors="replace").strip()
    except OSError:
        return None
    if not text:
        return None
    target = Path(text)
    return target if target.is_absolute() else Path(os.path.normpath(gitdir / target))


def _hooks_path(root: Path, gitdir: Path, home: Path) -> Path | None:
    """``core.hooksPath`` from the repository's config, read as text (git is not run)."""
    try:
        text = (gitdir / "config").read_text(encoding="utf-8", errors="replace")
    except OSError:
        return None
    section = ""
    for line in text.splitlines():
        line = line.strip()
        if line.startswith("["):
            section = line.strip("[]").split()[0].lower() if line.strip("[]").split() else ""
            continue
        key, eq, value = line.partition("=")
        if eq and section == "core" and key.strip().lower() == "hookspath":
            value = value.strip().strip('"')
            if value.startswith("~/"):
                return home / value[2:]
            return Path(value) if os.path.isabs(value) else root / value
    return None


# --- one concrete path ----------------------------------------------------------------

def _named(parts: Iterable[str]) -> str | None:
    """What a protected name among path components is (None: none is)."""
    parts = parts if isinstance(parts, list) else list(parts)
    if not any(p[:1] == "." for p in parts):  # every protected name starts with a dot
        return None
    parts = [p.casefold() for p in parts if p]
    for i, part in enumerate(parts):
        if part in PROTECTED_NAMES:
            return PROTECTED_NAMES[part]
        if part == SKILLS_PARENT and (i + 1 == len(parts) or parts[i + 1] == SKILLS_DIR):
            return SKILLS_WHAT
        if part == ".config" and i + 1 < len(parts) and parts[i + 1] == "git":
            return GIT_XDG_WHAT
    return None


def _components(path: str, root: Path) -> list[str]:
    """Components of an absolute ``path``: relative to ``root`` when inside it (the
    project's own location may contain any name), else all of them."""
    base = str(root).rstrip("/") + "/"
    if path.startswith(base):
        path = path[len(base):]
    elif path == str(root):
        return []
    return path.split("/")


def _real(path: str, cache: dict[str, str]) -> str:
    """``os.path.realpath`` of a normalized absolute ``path`` (no ``.``/``..``), with the
    directories already resolved in this check reused: one ``lstat`` per new component
    (none below one that does not exist: nothing there can be a link)."""
    known = cache.get(path)
    if known is not None:
        return known
    parent, _, name = path.rpartition("/")
    if not name:
        real = path
    else:
        parent = parent or "/"
        real = _resolve_child(cache.get(parent) or _real(parent, cache), name, cache)
    cache[path] = real
    return real


def _resolve_child(above: str, name: str, cache: dict[str, str]) -> str:
    """The real path of ``name`` in the resolved directory ``above``: one ``lstat`` (none when
    ``above``'s failed), the link followed when it is one; a path whose lstat fails is noted
    in ``cache`` (``_ABSENT``)."""
    full = above + "/" + name if above != "/" else "/" + name
    if _ABSENT + above in cache:  # its lstat would fail: no link
        cache[_ABSENT + full] = full
        return full
    try:
        if _ACCESS_NOFOLLOW and not os.access(full, os.F_OK, effective_ids=True, follow_symlinks=False):
            # (see _ACCESS_NOFOLLOW) its lstat would fail: no link, nor anything below it
            cache[_ABSENT + full] = full
            return full
        is_link = stat.S_ISLNK(os.lstat(full).st_mode)
    except (FileNotFoundError, NotADirectoryError):
        cache[_ABSENT + full] = full
        return full
    except (OSError, ValueError):
        return full
    return os.path.realpath(full) if is_link else full


# in _real's cache, a resolved path whose lstat fails (it does not exist, a directory above
# it is a file, or cannot be searched …) is noted under this prefix and itself (no path to
# resolve starts with a NUL): the lstat of every path below it fails too (it resolves the
# same directories first), so nothing below it is a link either
_ABSENT: Final = "\x00"

# Most words judged as paths name nothing that exists, and a failed os.lstat raises: building
# the FileNotFoundError costs more than the system call. os.access(F_OK) without following a
# last symlink answers False instead (a dangling link exists: True), with the effective ids
# lstat uses; it is False for every error lstat would raise on the way there (ENOENT,
# ENOTDIR, EACCES, ELOOP, ENAMETOOLONG), which all fail every path below as well. Only a path
# that exists gets its lstat. tests/test_policy_fastpaths.py compares it with lstat alone.
_ACCESS_NOFOLLOW = os.access in os.supports_follow_symlinks and os.access in os.supports_effective_ids


def protected_path(path: str, places: Places, cwd: Path | None = None,
                   cache: dict[str, str] | None = None) -> str | None:
    """What protected location ``path`` (literal: nothing is expanded) is, is inside, or
    would be created in; None when it is none. Relative paths are taken from ``cwd``
    (default: the project root). ``cache`` keeps resolved directories for one check."""
    if cache is not None and (cwd is None or cwd is places.root) and "/" not in path and path[:1] not in ("", ".") \
            and places.root_is_plain:
        return _protected_name(path, places, cache)
    if path.startswith("/"):
        joined = path
    else:
        base = places.root_text if cwd is None or cwd is places.root else str(cwd)
        joined = base + "/" + path
    root = places.root_text
    # the usual word: no empty, "." or ".." component, so normpath would return it as it is
    # (but for a trailing "/", here the only one, which it drops: src/); and with no component
    # starting with a dot it holds no protected name
    plain = joined.startswith("/") and not ("//" in joined or "/." in joined)
    if plain and joined.endswith("/"):
        plain = joined != "/"
        if plain:
            joined = joined[:-1]
    if plain:
        lexical = joined
    else:
        lexical = posixpath.normpath(joined)
        if lexical.startswith("//"):
            lexical = "/" + lexical.lstrip("/")
        what = _named_below(lexical, root, places.root_slash)
        if what is not None:
            return what
    try:
        if not plain and ("/../" in joined or joined.endswith("/..")):
            physical = os.path.realpath(joined)  # `..` after a symlink: resolve the way the kernel does
        else:
            physical = _real(lexical, cache if cache is not None else {})
    except (OSError, ValueError):
        physical = lexical
    if physical != lexical:
        what = _named_below(physical, root, places.root_slash)
        if what is not None:
            return what
        forms: tuple[str, ...] = (lexical, physical)
    else:
        forms = (lexical,)
    starts = places.folded_starts
    for form in forms:
        folded = form.casefold()
        if not folded.startswith(starts):  # under no place (each test below implies this one)
            continue
        for place, folded_place, what in places.prefixes:
            if form == place or folded == folded_place or folded.startswith(folded_place + "/"):
                return what
    return None


def _protected_name(name: str, places: Places, cache: dict[str, str]) -> str | None:
    """:func:`protected_path` of ``name`` in the project root, for the commonest word: one
    component (no ``/``), not ``.``/``..`` or a dot name, in a root whose text is already
    normalized (``places.root_is_plain``). Then ``root/name`` is its own normalized form,
    and ``_real`` of it is one step from the root's: the same steps, inline (test_policy_fastpaths
    compares the two)."""
    root = places.root_text
    lexical = root + "/" + name
    physical = cache.get(lexical)
    if physical is None:
        try:  # (what _real does, for one component)
            physical = _resolve_child(cache.get(root) or _real(root, cache), name, cache)
            cache[lexical] = physical
        except (OSError, ValueError):
            physical = lexical
    if physical == lexical:  # (most words: not a link)
        if not lexical.casefold().startswith(places.folded_starts):
            return None  # under no place: what the loop below finds for it
        forms: tuple[str, ...] = (lexical,)
    else:
        what = _named_below(physical, root, places.root_slash)
        if what is not None:
            return what
        forms = (lexical, physical)
    starts = places.folded_starts
    for form in forms:
        folded = form.casefold()
        if not folded.startswith(starts):
            continue
        for place, folded_place, what in places.prefixes:
            if form == place or folded == folded_place or folded.startswith(folded_place + "/"):
                return what
    return None


def _named_below(path: str, root: str, base: str | None = None) -> str | None:
    """:func:`_named` of :func:`_components` (``root`` as text; ``base``: it with one
    trailing ``/``, when the caller has it)."""
    if base is None:
        base = root.rstrip("/") + "/"
    if path.startswith(base):
        path = path[len(base):]
    elif path == root:
        return None
    if not path.startswith(".") and "/." not in path:  # every protected name starts with a dot
        return None
    return _named(path.split("/"))


# --- edit tools -------------------------------------------------------------------------

PATH_KEYS: Final = ("path", "file_path", "notebook_path", "paths", "source", "destination", "target",
             "old_path", "new_path")


def _path_arguments(arguments: object) -> list[str]:
    if not isinstance(arguments, dict):
        return []
    out: list[str] = []
    for key in PATH_KEYS:
        value = arguments.get(key)
        if isinstance(value, str):
            out.append(value)
        elif isinstance(value, list):
            out.extend(v for v in value if isinstance(v, str))
    return out


def check_edit(arguments: object, places: Places) -> Finding | None:
    """A call of an ``edit`` tool: does any of its path arguments name a protected place?"""
    for path in _path_arguments(arguments):
        if "\x00" in path:
            continue  # refused by the tool itself
        what = protected_path(path, places)
        if what is not None:
            return Finding("deny", what, f"path {path!r}")
    return None


# --- shell words ----------------------------------------------------------------------

def expand_braces(word: str, limit: int = 64) -> list[str] | None:
    """Bash brace expansion of ``word`` (``{a,b}``, nested); None for a sequence
    (``{a..z}``), more than ``limit`` results or more than ``limit`` braces (the expansion
    recurses once a brace: a bound on its depth and its work), which are judged as unknown."""
    if "{" not in word:
        return [word]
    if word.count("{") > limit:
        return None
    depth, start = 0, -1
    for i, ch in enumerate(word):
        if ch == "{":
            if depth == 0:
                start = i
            depth += 1
        elif ch == "}" and depth:
            depth -= 1
            if depth == 0:
                inner = word[start + 1:i]
                options = _split_top(inner)
                if len(options) < 2:
                    if ".." in inner:
                        return None
                    rest = expand_braces(word[i + 1:], limit)
                    return None if rest is None else [word[:i + 1] + r for r in rest]
                out: list[str] = []
                for option in options:
                    tails = expand_braces(option + word[i + 1:], limit)
                    if not tails:
                        return None
                    out += [word[:start] + tail for tail in tails]
                    if len(out) > limit:
                        return None
                return out
    return [word]


def _split_top(text: str) -> list[str]:
    parts, depth, current = [], 0, ""
    for ch in text:
        if ch == "{":
            depth += 1
        elif ch == "}":
            depth -= 1
        if ch == "," and depth == 0:
            parts.append(current)
            current = ""
        else:
            current += ch
    parts.append(current)
    return parts


def _glob_names(component: str, dotglob: bool) -> str | None:
    """The protected name a glob component may match (bash: a leading ``.`` must be
    matched by a literal ``.`` unless ``dotglob``)."""
    if not dotglob and not component.startswith("."):
        return None
    for name in (*PROTECTED_NAMES, SKILLS_PARENT):
        if fnmatch.fnmatchcase(name, component.casefold()) or fnmatch.fnmatchcase(name, component):
            return PROTECTED_NAMES.get(name, SKILLS_WHAT)
    return None


@dataclass
class _Shell:
    """What is known while walking a command line: the working directory (None: unknown
    after a ``cd`` that cannot be followed) and whether ``dotglob`` may be on."""

    places: Places
    cwd: Path | None
    dotglob: bool = False
    cwds: tuple[Path, ...] = ()     # every directory the line may be in (``cd``); () = (cwd,)
    cwd_unknown: bool = False       # and one that cannot be known
    real: dict[str, str] = field(default_factory=dict)      # resolved directories
    concrete: dict[tuple[str, Path | None], str | None] = field(default_factory=dict)  # _judge_one's protected_path
    judged: dict[tuple[Any, ...], tuple[Severity, str] | None] = field(default_factory=dict)  # see judge_word
    temp: str | None = None         # where $TMPDIR points, when the line does not set it
    every_cwd: tuple[Path | None, ...] | None = None  # cwds, then None when one is unknown (made once)


def judge_word(word: str, shell: _Shell) -> tuple[Severity, str] | None:
    """A shell word as a path: ``("deny", what)`` when it names (or may glob to) a protected
    place, ``("ask", what)`` when it cannot be known, None when it is safe."""
    here = shell.cwd
    # (in the root, the usual directory, without it: a Path's hash is a Python-level call)
    key = (word, shell.dotglob) if here is shell.places.root else (word, here, shell.dotglob)
    judged = shell.judged
    # (one lookup: a verdict may be None; typed object, as the sentinel is neither a verdict nor None)
    cached: object = judged.get(key, _UNJUDGED)
    if cached is not _UNJUDGED:
        return cast("tuple[Severity, str] | None", cached)
    verdict = None
    if shell.cwds or shell.cwd_unknown:  # judged from every directory the line may be in
        every = shell.every_cwd
        if every is None:
            every = shell.every_cwd = (*shell.cwds, *((None,) if shell.cwd_unknown else ()))
        if _is_plain(word):  # nothing for the shell to expand (most words): the short way
            # one name (no "/", not "", "." or a dot name): in the root it is _protected_name's
            # word; in an unknown directory _judge_plain finds no dot component in it and it
            # is relative, so it is that ask. (The second shortcut needs no plain root but
            # is taken with the first: test_policy_fastpaths' general run, which makes
            # root_is_plain false, compares both with _judge_plain.)
            places = shell.places
            root = places.root
            one_name = "/" not in word and word[:1] not in ("", ".") and places.root_is_plain
            for cwd in every:
                found: tuple[Severity, str] | None
                if cwd is root and one_name:  # (what _judge_plain and protected_path come to)
                    what = _protected_name(word, places, shell.real)
                    found = ("deny", what) if what else None
                elif cwd is None and one_name:
                    found = _after_unknown_cd(word)
                else:
                    found = _judge_plain(word, shell, cwd)
                if found is not None and found[0] == "deny":
                    verdict = found
                    break
                verdict = verdict or found
        else:
            # a relative word with no brace, "~" or "$" at its start (its text is the same in
            # every directory), in an unknown directory after a known one: _judge_one's steps
            # that do not read the directory (a protected name, extglob or glob) found no deny
            # in the known one, and those that do find nothing in an unknown one, so it ends
            # in one of these two asks. (root_is_plain plays no part but is the switch that
            # test_policy_fastpaths' general run turns off, to compare this with _judge_one.)
            relative = word[:1] not in ("/", "~", "$") and "{" not in word and shell.places.root_is_plain
            saved = shell.cwd
            try:
                for cwd in every:
                    if cwd is None and relative and every[0] is not None:
                        found = _computed(word) if "$" in word or "`" in word else _after_unknown_cd(word)
                        verdict = verdict or found
                        continue
                    shell.cwd = cwd
                    found = _judge_word(word, shell)
                    if found is not None and found[0] == "deny":
                        verdict = found
                        break
                    verdict = verdict or found
            finally:
                shell.cwd = saved
    elif _is_plain(word):
        verdict = _judge_plain(word, shell, shell.cwd)
    else:
        verdict = _judge_word(word, shell)
    judged[key] = verdict
    return verdict


_UNJUDGED: Final[Any] = object()


def _judge_word(word: str, shell: _Shell) -> tuple[Severity, str] | None:
    if "{" not in word:
        return _judge_one(word, shell)
    alternatives = expand_braces(word)
    if alternatives is None:
        return "ask", "a path the shell computes (a brace sequence, or braces past counting)"
    unknown = None
    for alt in alternatives:
        verdict = _judge_one(alt, shell)
        if verdict is not None and verdict[0] == "deny":
            return verdict
        unknown = unknown or verdict
    return unknown


_PLAIN: Final = re.compile(r"[^~$`{}*?\[@!+(]*")
_PLAIN_BUT_PARENTHESES: Final = re.compile(r"[^~$`{}*?\[]*")  # _PLAIN, "@", "!", "+" and "(" allowed


def _is_plain(word: str) -> bool:
    """Whether :func:`_judge_plain` judges ``word`` as :func:`_judge_word` would: it is
    ``_PLAIN``; or it holds "@", "!", "+" or "(" (``+%s``, ``print(1)``) but no extglob
    (``+(…)``), and no component starts with a dot, the one case where _judge_one's look
    at the components as written (``x/.git/..``) differs from _judge_plain's."""
    if _PLAIN.fullmatch(word):
        return True
    return (_PLAIN_BUT_PARENTHESES.fullmatch(word) is not None and _EXTGLOB.search(word) is None
            and not word.startswith(".") and "/." not in word)
_TILDE_USER: Final = re.compile(r"^~([A-Za-z0-9_.+-]*)(?=/|$)")
_HOME_VAR: Final = re.compile(r"^(\$HOME|\$\{HOME\})(?=/|$)")
_TEMP_VAR: Final = re.compile(r"^(\$(TMPDIR|TMP|TEMP)|\$\{(TMPDIR|TMP|TEMP)\})(?=/|$)")
_PWD_VAR: Final = re.compile(r"^(\$PWD|\$\{PWD\})(?=/|$)")


def _judge_plain(word: str, shell: _Shell, cwd: Path | None) -> tuple[Severity, str] | None:
    """:func:`_judge_one` of a word with nothing for the shell to expand (``_PLAIN``), in
    ``cwd`` (None: unknown)."""
    if cwd is not None:
        what = protected_path(word or ".", shell.places, cwd, shell.real)
        return ("deny", what) if what else None
    # after a cd that cannot be followed (what the general path below does for such a word)
    if word.startswith(".") or "/." in word:  # else no component starts with a dot: _named finds none
        what = _named(word.split("/"))
        if what is not None:
            return "deny", what
    if not word.startswith("/"):
        return _after_unknown_cd(word)
    what = protected_path(word, shell.places, None, shell.real)
    return ("deny", what) if what else None


def _after_unknown_cd(word: str) -> tuple[Severity, str]:
    return "ask", f"a relative path after a cd that cannot be followed ({word})"


def _computed(word: str) -> tuple[Severity, str]:
    return "ask", f"a path the shell computes ({word})"


def _has_glob(part: str) -> bool:
    """``_GLOB_CHARS & set(part)``, without the set."""
    return "*" in part or "?" in part or "[" in part


_AGENT_OR_GIT: Final = re.compile(r"(?i)agent|git")


def _judge_one(word: str, shell: _Shell) -> tuple[Severity, str] | None:
    places = shell.places
    if _PLAIN.fullmatch(word):  # nothing for the shell to expand
        return _judge_plain(word, shell, shell.cwd)
    if "{}" in word:  # find -exec's placeholder: any file find walks to
        return "ask", f"the files find finds ({word})"
    text = word
    m = _TILDE_USER.match(text) if text.startswith("~") else None
    if m:
        user = m.group(1)
        home: Path | None
        if not user:
            home = places.home
        elif user == "+":
            home = shell.cwd
        elif user == "-":
            home = None
        else:
            try:
                home = Path(pwd.getpwnam(user).pw_dir)
            except KeyError:
                home = None
        if home is None:
            return "ask", f"a path in a directory the shell computes ({word})"
        text = str(home) + text[m.end():]
    if text.startswith("$"):  # each of these begins with one
        text = _HOME_VAR.sub(lambda _: str(places.home), text)
        if shell.temp is not None:
            text = _TEMP_VAR.sub(lambda _: shell.temp or "/tmp", text)
        if shell.cwd is not None:
            text = _PWD_VAR.sub(lambda _: str(shell.cwd), text)
    parts = text.split("/")
    # per component, what the shell may do with it: expand ($, `: _EXPANSION), glob
    # (_GLOB_CHARS), extglob (_EXTGLOB, which needs a "(") — substring tests, in one pass: the
    # literal components, the others with what each may do, and the first to expand or glob
    literal: list[str] = []
    special: list[tuple[str, bool, bool, bool]] = []
    end = len(parts)
    first_expand = first_glob = end
    for i, p in enumerate(parts):
        e = "$" in p or "`" in p
        g = "*" in p or "?" in p or "[" in p  # _has_glob
        x = "(" in p and _EXTGLOB.search(p) is not None
        if not (e or g or x):
            literal.append(p)
            continue
        special.append((p, e, g, x))
        if e and first_expand == end:
            first_expand = i
        if g and first_glob == end:
            first_glob = i
    what = _named(literal)
    if what is not None:
        return "deny", what
    for part, e, g, x in special:
        if x:
            if shell.dotglob or part.startswith(".") or _AGENT_OR_GIT.search(part):
                return "deny", "a protected place the pattern may match"
        elif g and not e:
            what = _glob_names(part, shell.dotglob)
            if what is not None:
                return "deny", what
    if first_expand < end:
        prefix = "/".join(parts[:first_expand])
        if prefix and not _has_glob(prefix):
            what = (protected_path(prefix, places, shell.cwd, shell.real) if shell.cwd or os.path.isabs(prefix)
                    else None)
            if what is not None:
                return "deny", what
        return _computed(word)
    absolute = text.startswith("/")  # os.path.isabs
    if not absolute and shell.cwd is None:
        return _after_unknown_cd(word)
    concrete = "/".join(parts[:first_glob])
    if absolute and not concrete.startswith("/"):
        concrete = "/" + concrete
    concrete = concrete or "."
    # (the same concrete part recurs: "." for every *.x, src for src/*.py …; per check and
    # directory, as shell.real keeps what the file system showed)
    key = (concrete, shell.cwd)
    seen: object = shell.concrete.get(key, _UNJUDGED)  # (object: see judge_word)
    if seen is _UNJUDGED:
        what = shell.concrete[key] = protected_path(concrete, places, shell.cwd, shell.real)
    else:
        what = cast("str | None", seen)
    return ("deny", what) if what else None


# --- shell commands -------------------------------------------------------------------

# programs that only read the files they name (not uniq IN OUT, xxd -r IN OUT, yq -i, file -C,
# view's :w: left out); an output option (``-o``, ``--output``) is judged for every program
READERS: Final = frozenset({
    "cat", "less", "more", "head", "tail", "ls", "dir", "stat", "wc", "grep", "egrep", "fgrep",
    "rg", "ag", "diff", "cmp", "comm", "md5sum", "sha1sum", "sha256sum", "sha512sum", "cksum", "b2sum",
    "test", "[", "[[", "readlink", "realpath", "basename", "dirname", "echo", "printf", "jq", "tree",
    "du", "od", "hexdump", "strings", "nl", "cut", "sort", "tr", "column", "fold", "bat",
    "cd", "pushd", "popd", "pwd", "true", "false", ":", "type", "which", "command", "lsattr",
    "namei", "getfacl", "sleep",
})
GIT_READERS: Final = frozenset({
    "status", "diff", "log", "show", "blame", "rev-parse", "ls-files", "ls-tree", "grep", "describe",
    "shortlog", "cat-file", "rev-list", "merge-base", "show-ref", "check-ignore", "check-attr",
    "name-rev", "whatchanged", "reflog", "help", "version", "add", "commit", "fetch", "push",
})
# writers whose every operand is a file they change (or remove, or rename)
ALL_OPERAND_WRITERS: Final = frozenset({
    "mv", "rm", "rmdir", "unlink", "shred", "truncate", "touch", "mkdir", "chmod", "chown", "chgrp",
    "chattr", "setfacl", "mkfifo", "mknod", "patch", "srm",
})
DEST_WRITERS: Final = frozenset({"cp", "install", "rsync", "scp", "ln", "link"})
_WRITERS: Final = ALL_OPERAND_WRITERS | DEST_WRITERS | {"tee"}
_TARGET_PROGRAMS: Final = _WRITERS | {"sed", "gsed", "perl", "dd"}  # _write_targets reads their operands
# readers that check_command has nothing to judge of but their output options (-o FILE …):
# not git, find or sort (_is_reader looks at their words), no writer, copier or linker
_ONLY_READERS = READERS - {"git", "find", "sort", "ln", "link", "cp", "sed", "gsed", "perl", "tee"} \
    - ALL_OPERAND_WRITERS - DEST_WRITERS - _TARGET_PROGRAMS - {"cp", "rsync", "mv", "ditto"}
INTERPRETERS: Final = re.compile(r"^(python[0-9.]*|perl|ruby|node|php|awk|gawk|mawk|nawk|lua|tclsh|osascript|pwsh)$")
_SHOPT_DOTGLOB: Final = {"dotglob", "globskipdots"}


def _write_targets(argv: tuple[str, ...], program: str | None = None) -> list[str]:
    """The files a known writer writes (see the module doc); ``program``: ``argv[0]``'s."""
    if program is None:
        program = program_name(argv[0]) if argv else ""
    if program not in _TARGET_PROGRAMS:
        return _output_options(argv)
    inv = normalize(argv)
    operands = list(inv.operands)
    values = [v for n, v in inv.flags if v is not None]
    if program == "tee":
        return operands
    if program in ALL_OPERAND_WRITERS:
        return operands + values
    if program in DEST_WRITERS:
        targets = [v for n, v in inv.flags if n in ("--target-directory", "-t") and v]
        for k, word in enumerate(argv):
            if word in ("-t",) and k + 1 < len(argv):
                targets.append(argv[k + 1])
            elif _T_CLUSTER.fullmatch(word) and k + 1 < len(argv):
                targets.append(argv[k + 1])
        if operands:
            targets.append(operands[-1])
        if program in ("ln", "link") and len(operands) >= 2:
            targets.extend(operands[1:])
        return targets
    if program in ("sed", "gsed", "perl") and _in_place(argv):
        return operands
    if program == "dd":
        return [w[3:] for w in argv[1:] if w.startswith("of=")]
    return []


_T_CLUSTER: Final = re.compile(r"-[A-Za-z]*t")  # -t DIR, or -t last in a cluster (-avt DIR)


def _in_place(argv: tuple[str, ...]) -> bool:
    """``sed -i``, ``sed -Ei.bak``, ``sed --in-place``, ``perl -pi -e``."""
    for w in argv[1:]:
        if w.startswith("--in-place"):
            return True
        if w.startswith("-") and not w.startswith("--") and "i" in w[1:].split(".", 1)[0]:
            return True
    return False


def _output_options(argv: tuple[str, ...]) -> list[str]:
    """Files named by an output option of any program (``-o FILE``, ``--output=FILE``,
    ``wget -O FILE``): written, whatever the program."""
    out: list[str] = []
    # every output option starts with -o, -O or --output: most command lines have none,
    # which one search of the words joined shows
    joined = "\x00" + "\x00".join(argv[1:])
    if "\x00-o" not in joined and "\x00-O" not in joined and "\x00--output" not in joined:
        return out
    for k, w in enumerate(argv[1:], start=1):
        if not w.startswith("-"):  # every output option does
            continue
        if w in ("-o", "--output", "--output-document", "-O") and k + 1 < len(argv):
            if w != "-O" or program_name(argv[0]) == "wget":
                out.append(argv[k + 1])
        elif w.startswith(("--output=", "--output-document=")):
            out.append(w.split("=", 1)[1])
    return out


_TREE_COPIERS: Final = frozenset({"cp", "rsync", "mv", "ditto"})


def _tree_copy(argv: tuple[str, ...], shell: "_Shell") -> Finding | None:
    """``cp -r SRC DEST``, ``rsync -a SRC/ DEST``, ``mv SRC DEST`` of a directory that holds
    a protected name (``SRC/.git``, ``SRC/.agent``) into the project or the home directory:
    it writes those places without naming them. ``mv`` of the project itself (or a
    directory above it) is refused too: a new one could be put in its place."""
    program = program_name(argv[0])
    if program not in ("cp", "rsync", "mv", "ditto"):
        return None
    inv = normalize(argv)
    flags = {n for n, _ in inv.flags}
    recursive = program in ("mv", "ditto") or bool(flags & {"-r", "-a", "-R", "--recursive", "--archive"})
    operands = list(inv.operands)
    if not recursive or len(operands) < 2:
        return None
    places = shell.places
    shown = " ".join(argv)[:200]
    dest = operands[-1]
    sources = operands[:-1]
    if program == "mv":
        for src in sources:
            if _EXPANSION.search(src) or _GLOB_CHARS & set(src):
                continue
            real = os.path.realpath(os.path.join(str(shell.cwd or places.root), src))
            for anchor in (places.root, places.home):
                if str(anchor) == real or str(anchor).startswith(real.rstrip("/") + "/"):
                    return Finding("deny", "the project or home directory that holds the agent's settings", shown)
        return None
    if _EXPANSION.search(dest):
        return None
    dest_real = os.path.realpath(os.path.join(str(shell.cwd or places.root), dest))
    if dest_real not in (os.path.realpath(places.root), os.path.realpath(places.home)):
        return None
    for src in sources:
        if _EXPANSION.search(src):
            return Finding("ask", "a protected place the copied tree may hold", shown)
        base = os.path.join(str(shell.cwd or places.root), src.rstrip("*").rstrip("/") or "/")
        try:
            names = os.listdir(base) if os.path.isdir(base) else []
        except OSError:
            names = []
        hit = next((n for n in names if n.casefold() in PROTECTED_NAMES or n.casefold() == SKILLS_PARENT), None)
        if hit is not None:
            return Finding("deny", PROTECTED_NAMES.get(hit.casefold(), SKILLS_WHAT), f"{shown} (it holds {hit})")
    return None


def _git_config_writes(argv: tuple[str, ...]) -> str | None:
    """For ``git … config …``: the config file it writes (``""``: the repository's or the
    user's), or None when it only reads."""
    i = 1
    while i < len(argv) and argv[i].startswith("-"):
        i += 2 if argv[i] in ("-C", "-c", "--git-dir", "--work-tree", "--namespace") else 1
    if i >= len(argv) or argv[i] != "config":
        return None
    rest = argv[i + 1:]
    file = None
    positional: list[str] = []
    writes = False
    k = 0
    while k < len(rest):
        w = rest[k]
        if w in ("-f", "--file") and k + 1 < len(rest):
            file = rest[k + 1]
            k += 2
            continue
        if w.startswith("--file="):
            file = w.split("=", 1)[1]
        elif w in ("--add", "--unset", "--unset-all", "--replace-all", "--rename-section", "--remove-section",
                   "-e", "--edit"):
            writes = True
        elif w in ("--get", "--get-all", "--get-regexp", "--get-urlmatch", "--get-color", "--get-colorbool",
                   "-l", "--list"):
            return None
        elif not w.startswith("-"):
            positional.append(w)
        k += 1
    if positional[:1] and positional[0] in ("set", "unset", "edit", "rename-section", "remove-section"):
        writes = True
    elif positional[:1] and positional[0] in ("get", "list"):
        return None
    elif len(positional) >= 2:
        writes = True
    if not writes:
        return None
    return file or ""


def _git_template_init(argv: tuple[str, ...], text: str) -> bool:
    """``git init --template=DIR`` (or with ``GIT_TEMPLATE_DIR``/``init.templateDir``): in an
    existing repository it installs the template's hooks."""
    i = 1
    while i < len(argv) and argv[i].startswith("-"):
        i += 2 if argv[i] in ("-C", "-c", "--git-dir", "--work-tree", "--namespace") else 1
    if i >= len(argv) or argv[i] != "init":
        return False
    return (any(w.startswith("--template") for w in argv[i + 1:])
            or bool(re.search(r"(?i)GIT_TEMPLATE_DIR|init\.templatedir", text)))


def _is_reader(argv: tuple[str, ...], program: str | None = None) -> bool:
    if program is None:
        program = program_name(argv[0]) if argv else ""
    if program == "git":
        i = 1
        while i < len(argv) and argv[i].startswith("-"):
            i += 2 if argv[i] in ("-C", "-c", "--git-dir", "--work-tree", "--namespace") else 1
        return i >= len(argv) or argv[i] in GIT_READERS
    if program == "find":
        return not any(w in ("-delete", "-exec", "-execdir", "-ok", "-okdir", "-fprint", "-fprint0", "-fprintf",
                             "-fls") for w in argv[1:])
    if program == "sort":
        return not any(w == "-o" or w.startswith(("--output", "-o")) for w in argv[1:])
    return program in READERS


def _fed_by_xargs(commands: list[Command], index: int) -> bool:
    """Whether the command at ``index`` runs under ``xargs``/``parallel`` (its arguments
    come from input the policy does not see)."""
    leaf = commands[index].argv
    k = index - 1
    while k >= 0 and commands[k].wrapper is not None and commands[k].argv[-len(leaf):] == leaf:
        if commands[k].program in ("xargs", "parallel"):
            return True
        k -= 1
    return False


def _find_deletes_broadly(argv: tuple[str, ...]) -> bool:
    """``find -delete`` with no name filter, or one that may match a settings file or a
    protected name: it may remove a protected file below its start."""
    if "-delete" not in argv:
        return False
    names = [argv[k + 1] for k, w in enumerate(argv[:-1]) if w in ("-name", "-iname", "-path", "-ipath",
                                                                     "-wholename", "-regex", "-iregex")]
    if not names:
        return True
    probes = ("settings.json", "settings.local.json", "config", "SKILL.md", *PROTECTED_NAMES, SKILLS_PARENT)
    return any(fnmatch.fnmatch(probe, pattern) or _NAME_IN_TEXT.search(pattern) for pattern in names
               for probe in probes)


_ACCEPTS_SETTINGS: Final = re.compile(r"(?is)agent[-_]code\b.*\bsettings\b.*\baccept\b")
_RUNS_ITSELF: Final = re.compile(r"(?i)agent[-_]code")
# agent-code trusting a folder for the user (it writes the trust store): the flag as written or
# as a word after quote removal (``--trust-pro''ject``), ``=value`` forms included
_TRUSTS_FOLDER: Final = re.compile(r"(?i)(?<![\w-])--trust-project(?:=\S*)?(?![\w-])")
PTY_PROGRAMS: Final = frozenset({"script", "unbuffer", "expect", "socat", "tmux", "screen", "empty", "pty", "ptyrun",
                          "zpty", "faketty"})


def _accepts_settings(analysis: Analysis) -> Finding | None:
    """The agent accepting its own settings changes: ``agent-code settings accept`` (which
    writes the trust store in ``~/.agent-code/``), or agent-code run under a program that
    gives it a terminal (``script``, ``tmux``, ``expect`` …), where its start-up question
    about changed settings could be answered by the agent."""
    text = analysis.text
    if _TRUSTS_FOLDER.search(text) or any(_TRUSTS_FOLDER.fullmatch(w) for c in analysis.commands for w in c.argv):
        return Finding("deny", "the user's trust of a project folder (~/.agent-code/trust/)",
                       "agent-code --trust-project")
    # both patterns need "agent" (no letter of it has a non-ASCII case variant that
    # re.IGNORECASE would match): a line without it skips the two scans of the whole text
    if "agent" not in text.lower():
        return None
    if _ACCEPTS_SETTINGS.search(text):
        return Finding("deny", "the user's acceptance of changed settings (~/.agent-code/trust/)",
                       "agent-code settings accept")
    if _RUNS_ITSELF.search(text) and any(c.program in PTY_PROGRAMS for c in analysis.commands):
        return Finding("ask", "the user's acceptance of changed settings (~/.agent-code/trust/)",
                       "agent-code under a terminal emulator")
    return None


def check_command(analysis: Analysis, places: Places) -> Finding | None:
    """The first write to a protected place that ``analysis`` shows (``deny``), else the
    first one it may hide (``ask``), else None."""
    accepting = _accepts_settings(analysis)
    if accepting is not None and accepting.severity == "deny":
        return accepting
    text = analysis.text
    cwds, cwd_unknown = _directories(analysis.commands, places)
    shell = _Shell(places, places.root, dotglob="dotglob" in text or "GLOBIGNORE" in text,
                   cwds=cwds if len(cwds) > 1 or cwd_unknown else (), cwd_unknown=cwd_unknown)
    # (the substring tests spare most lines the regex's scan of the whole text)
    if not (("TMP" in text or "TEMP" in text) and _SETS_TEMP.search(text)):  # the line does not set it
        temp = os.environ.get("TMPDIR") or "/tmp"
        shell.temp = temp if os.path.isabs(temp) else None
    maybe: Finding | None = accepting

    def note(verdict: tuple[Severity, str] | None, c: Command, detail: str | None = None) -> Finding | None:
        """A deny finding for ``verdict`` (``detail``: default the command shown), or None,
        an ask kept in ``maybe`` when it is the first (the detail made only when needed)."""
        nonlocal maybe
        if verdict is None:
            return None
        if verdict[0] == "deny":
            return Finding("deny", verdict[1], _shown(c) if detail is None else detail)
        if maybe is None:
            maybe = Finding(verdict[0], verdict[1], _shown(c) if detail is None else detail)
        return None

    commands = analysis.commands
    seen: set[tuple[str, ...]] = set()  # the words of the commands judged below
    for index, c in enumerate(commands):
        for op, target in c.redirects:
            if op not in WRITE_REDIRECTIONS or (op == ">&" and (target.isdigit() or target == "-")):
                continue
            verdict = judge_word(target, shell)
            if verdict is not None:  # (the detail is made only for a verdict)
                found = note(verdict, c, f"{op} {target}")
                if found:
                    return found
        argv = c.argv if c.wrapper is None else own_argv(commands, index)
        if not argv:
            continue
        program = c.program if argv is c.argv else program_name(argv[0])  # (c.program is argv[0]'s)
        if c.wrapper is not None:
            if argv is c.argv:
                continue  # a shell running a script, eval, su -c …: the script is judged itself
            for word in argv[1:]:  # a wrapper's own options: env -C DIR, sudo -D DIR
                verdict = None if _EXPANSION.search(word) else judge_word(word, shell)
                if verdict is not None and verdict[0] == "deny":
                    return Finding("deny", verdict[1], _shown(c))
            continue
        if program in _ONLY_READERS:  # (most commands) what the steps below come to for them
            for target in _output_options(argv):
                found = note(judge_word(target, shell), c)
                if found:
                    return found
            continue
        # Words met before (in a command with no wrapper before it, so not fed by xargs: the
        # one thing of its place in the line the steps below read): they are judged the same
        # in the same shell, so they add nothing: a deny would have returned the first time,
        # and an ask of theirs is already in ``maybe`` (which only the first ask sets).
        if _SKIP_REPEATS and not (index and commands[index - 1].wrapper is not None):
            if argv in seen:
                continue
            seen.add(argv)
        if program == "git" and _git_config_writes(argv) == "":
            return Finding("deny", "git's config (.git/config or ~/.gitconfig), which names programs git runs",
                           _shown(c))
        if program in _TREE_COPIERS:
            copied = None
            for cwd in shell.cwds or (shell.cwd,):
                found_copy = _tree_copy(argv, _Shell(places, cwd))
                if found_copy is not None and (copied is None or found_copy.severity == "deny"):
                    copied = found_copy
            if copied is not None:
                if copied.severity == "deny":
                    return copied
                maybe = maybe or copied
        if program == "git" and _git_template_init(argv, text):
            return Finding("deny", "git's hooks (.git/hooks), which git init copies from a template", _shown(c))
        targets = _write_targets(argv, program) if program in _TARGET_PROGRAMS else _output_options(argv)
        writer = (program in ALL_OPERAND_WRITERS or program in DEST_WRITERS or program == "tee"
                  or (program in ("sed", "gsed", "perl") and any(w.startswith("-i") for w in argv[1:])))
        if writer and _fed_by_xargs(commands, index):
            note(("ask", "the files named in its input (xargs)"), c)
        if program in ("ln", "link") or (program == "cp" and "-s" in argv):
            targets = list(normalize(argv).operands)  # a link's target too: it is written through later
        if program == "find" and _find_deletes_broadly(argv):
            note(("ask", "any file below where find starts (find -delete)"), c)
        for target in targets:
            verdict = judge_word(target, shell)
            if verdict is not None:
                found = note(verdict, c)
                if found:
                    return found
        if _is_reader(argv, program):
            continue
        for word in argv[1:]:
            # the word, then what follows its first "=" (X=PATH, --opt=PATH); one with an
            # expansion is left to the ask below
            if not ("$" in word or "`" in word):  # _EXPANSION
                verdict = judge_word(word, shell)
                if verdict is not None and verdict[0] == "deny":
                    return Finding("deny", verdict[1], _shown(c))
            if "=" in word:
                value = word.split("=", 1)[1]
                if not ("$" in value or "`" in value):
                    verdict = judge_word(value, shell)
                    if verdict is not None and verdict[0] == "deny":
                        return Finding("deny", verdict[1], _shown(c))
            if maybe is None and _CODE_CHARS_RE.search(word):
                hit = _NAME_IN_TEXT.search(word)
                if hit is not None:
                    maybe = Finding("ask", PROTECTED_NAMES.get(hit.group(0).casefold(), SKILLS_WHAT), _shown(c))
    return maybe


_SETS_TEMP: Final = re.compile(r"(?<![$\w{])(TMPDIR|TMP|TEMP)\b")
_SKIP_REPEATS = True  # check_command's skip of equal commands (test_policy_fastpaths turns it off)


def _shown(c: Command) -> str:
    """A command as the finding shows it."""
    return " ".join(c.argv)[:200]


MAX_CWDS: Final = 16


def _directories(commands: list[Command], places: Places) -> tuple[tuple[Path, ...], bool]:
    """Every directory a command of the line may run in — the root and where each
    ``cd``/``pushd`` may lead from any of them — and whether one cannot be known (a ``cd``
    to ``$DIR``, ``cd -``, ``popd``). Order-free on purpose: subshells, ``&&``/``||`` and
    the parser's order do not matter, a write is judged from each."""
    cwds = [places.root]
    unknown = False
    for c in commands:
        if c.wrapper is not None or c.program not in ("cd", "pushd", "popd"):
            continue
        if c.program == "popd":
            unknown = True
            continue
        for base in list(cwds):
            target = _follow_cd(c.argv, base, places.home)
            if target is None:
                unknown = True
            elif target not in cwds:
                cwds.append(target)
        if len(cwds) > MAX_CWDS:
            return tuple(cwds[:MAX_CWDS]), True
    return tuple(cwds), unknown


def _follow_cd(argv: tuple[str, ...], base: Path, home: Path) -> Path | None:
    """The working directory after ``cd``/``pushd`` from ``base`` (None: cannot be known)."""
    args = [a for a in argv[1:] if not (a.startswith("-") and a != "-")]
    if not args:
        return home
    target = args[0]
    if target == "~" or target.startswith("~/"):
        target = str(home) + target[1:]
    target = _HOME_VAR.sub(lambda _: str(home), target)
    if target == "-" or target.startswith("~") or _EXPANSION.search(target) or _GLOB_CHARS & set(target):
        return None
    if not os.path.isabs(target):
        target = os.path.join(str(base), target)
    return Path(posixpath.normpath(target))


def check_call(kind: str, arguments: object, command: str | None, analysis: Analysis | None,
               places: Places) -> Finding | None:
    """Self-protection for one call of a tool of ``kind``: an edit tool by its path
    arguments, a command by its analysis; None for anything else."""
    if kind == "edit":
        return check_edit(arguments, places)
    if command is not None:
        if analysis is None:
            from agent_code.policy.commands import analyze

            analysis = analyze(command)
        return check_command(analysis, places)
    return None
