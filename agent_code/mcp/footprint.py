"""What a project MCP server runs, pinned, so that an approval covers it (not only its entry).

An approved ``.mcp.json`` entry such as ``{"command": "python", "args": ["server.py"]}`` says
nothing about what ``server.py`` holds: the agent (even in ``acceptEdits``, with no shell) can
rewrite it, and the next start would run the new code as the user. So the approval keeps a
*footprint* of the server beside the entry's digest, and a server whose footprint changed does
not start until it is approved again (``agent_code.mcp.plan``).

The footprint of a stdio server (:func:`footprint`), label → pin:

* ``cwd`` — the directory it runs in (the project, resolved);
* ``command`` — the executable the command resolves to, as the child's ``exec`` would find it:
  a command with a ``/`` relative to the project, else the first executable on the ``PATH`` it
  will run with (the entry's ``env`` ``PATH`` over ours; relative or empty ``PATH`` entries are
  the project) — its resolved path, and the file itself pinned as below;
* every *word* of the arguments and of the ``env`` values that names an existing path: each
  argument whole, its shell-like words (``bash -c "python x.py"``), the value after ``=``
  (``--config=./c.json``) and the ``:``-separated parts (``PYTHONPATH=.:lib``, where an empty
  part is the project, as Python reads it); the word after ``-m`` as a module (``-m pkg.mod``
  pins the package ``pkg``, or ``pkg.py``). A word that names nothing now and a file later
  is a change too;
* a file is pinned by the sha256 of its bytes (read once, through one descriptor), with its
  resolved path when it is a link, so a link swapped to another file is a change; a file over
  16 MiB by its identity instead (device, inode, size, mtime, ctime — ctime cannot be set
  back by the user); something not a regular file (a FIFO, a device) by its kind, never opened
  for reading;
* a directory inside the project (the project itself too: ``.`` or ``PYTHONPATH=.``) by every
  file under it, recursively, following links to directories once, skipping ``.git`` and
  ``__pycache__``; a directory outside the project by its path only (``/``, ``$HOME`` given to a
  filesystem server is data, and the agent's writes stay in the project);
* around each file word inside the project, the files the same interpreter would import from
  its directory (``helper.py`` beside ``server.py``, ``lib.mjs`` beside ``server.js``): the whole
  directory, recursively, when it is a subdirectory of the project (``tools/mcp/server.py``
  pins every ``.py`` under ``tools/mcp``); only the files directly in it when the script is at
  the project's top (recursing there would be the whole project);
* the script's shebang line when the command is a file in the project (its interpreter is a word);
* ``.mcp.json`` itself: a file or, when it is a link, where it points.

An http server's footprint is its entry (its URL and headers as written) and ``.mcp.json``.

At most :data:`MAX_FILES` files and :data:`MAX_BYTES` bytes are read for one server; past that
(``npx ./pkg`` with its ``node_modules``, a whole large project) the footprint is *unpinned*:
the approval cannot be kept, so the REPL asks at every start and ``agent-code mcp list`` leaves
it off, saying why. Put such a server in ``~/.agent-code/settings.json`` (the user's own, not
the project's) to have it start unasked.

What it does not cover, by design or because it is unbounded: files the server reads or
imports from elsewhere in the project (a script at the project's top importing ``pkg/mod.py``
from a subdirectory, ``require('../lib')``, a config file it opens by a name it computes),
what it loads from outside the project without naming it (the interpreter's own library, a
global install's ``node_modules``; a file outside the project that it *names* is pinned like any
other, a directory there by its path only), Python's compiled caches (``__pycache__/*.pyc``, which Python prefers over the
source while their header matches it), and what a package manager fetches (``npx -y pkg``,
``uvx pkg``: the registry's, not the project's).

Time of check and time of use: the footprint is computed when the user is asked and is what
is recorded; it is computed again immediately before the server process is spawned
(``McpManager``'s guard) and a difference stops the start. What remains is the gap between that
second check and the interpreter opening each file (milliseconds) and any file read later —
running the checked bytes themselves is not possible in general (a script finds its modules
beside itself by its path).
"""

from __future__ import annotations

import hashlib
import os
import shlex
import stat
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Iterator

if TYPE_CHECKING:
    from agent_code.mcp.config import ServerConfig

MAX_FILE_BYTES = 16 * 1024 * 1024     # a file bigger than this is pinned by identity, not content
MAX_FILES = 2000                      # files read for one server's footprint
MAX_BYTES = 64 * 1024 * 1024          # bytes read for one server's footprint
SKIPPED_DIRS = (".git", "__pycache__")
SIBLINGS = (frozenset({".py", ".pyw", ".pyc", ".so"}),
            frozenset({".js", ".mjs", ".cjs", ".json", ".ts", ".mts", ".cts", ".node", ".wasm"}),
            frozenset({".sh", ".bash"}),
            frozenset({".rb"}), frozenset({".pl", ".pm"}), frozenset({".php"}), frozenset({".lua"}))
COMMAND, CWD, CONFIG = "command", "cwd", ".mcp.json itself"


@dataclass
class Footprint:
    """A server's pins (label → pin, see the module doc) and why it could not be pinned whole."""

    pins: dict[str, str] = field(default_factory=dict)
    unpinned: list[str] = field(default_factory=list)

    def changed(self, approved: dict[str, str]) -> list[str]:
        """The labels whose pin differs from ``approved`` (added, removed or changed), sorted."""
        return sorted(k for k in set(self.pins) | set(approved) if self.pins.get(k) != approved.get(k))

    def files(self) -> list[str]:
        """The labels of the files and directories pinned (not the command's resolution, cwd or config)."""
        return [k for k in self.pins if k not in (COMMAND, CWD, CONFIG)]


class _Walker:
    def __init__(self, root: Path) -> None:
        self.root = Path(os.path.abspath(root))
        self.real_root = Path(os.path.realpath(root))
        self.out = Footprint()
        self.files = 0
        self.bytes = 0
        self.seen_dirs: set[str] = set()

    # --- where a path is ---------------------------------------------------------------

    def resolve(self, word: str) -> Path:
        return Path(os.path.normpath(word if os.path.isabs(word) else self.root / word))

    def inside(self, path: Path) -> bool:
        for where, base in ((str(path), str(self.root)), (os.path.realpath(path), str(self.real_root))):
            if where == base or where.startswith(base.rstrip(os.sep) + os.sep):
                return True
        return False

    def label(self, path: Path) -> str:
        for base in (self.root, self.real_root):
            if path == base:
                return "."
            if base in path.parents:
                return path.relative_to(base).as_posix()
        return str(path)

    # --- pins --------------------------------------------------------------------------

    def budget(self, size: int, what: str) -> bool:
        self.files += 1
        self.bytes += size
        if self.files > MAX_FILES or self.bytes > MAX_BYTES:
            if not self.out.unpinned:
                self.out.unpinned.append(f"it names {what}, and more than {MAX_FILES} files or "
                                         f"{MAX_BYTES // (1024 * 1024)} MiB would have to be checked")
            return False
        return True

    def pin_file(self, path: Path, label: str | None = None) -> str | None:
        """Pin one path that is not a directory; the pin, or None when past the budget."""
        label = label or self.label(path)
        if label in self.out.pins:
            return self.out.pins[label]
        real = os.path.realpath(path)
        where = f" -> {real}" if real != str(path) else ""
        try:
            mode = os.stat(path).st_mode
            if not stat.S_ISREG(mode):   # a FIFO, a device: never opened (opening one may block or act)
                self.out.pins[label] = f"{stat.filemode(mode)[0]}-file{where}"
                return self.out.pins[label]
            # one descriptor: what is hashed is what is fstat'ed (a swap since the stat is seen)
            fd = os.open(path, os.O_RDONLY | os.O_NONBLOCK | getattr(os, "O_CLOEXEC", 0))
        except OSError as exc:
            pin = f"unreadable ({exc.strerror}){where}"
        else:
            try:
                st = os.fstat(fd)
                if not stat.S_ISREG(st.st_mode):
                    pin = f"{stat.filemode(st.st_mode)[0]}-file{where}"
                elif st.st_size > MAX_FILE_BYTES:
                    pin = (f"identity {st.st_dev}:{st.st_ino} size {st.st_size} mtime {st.st_mtime_ns} "
                           f"ctime {st.st_ctime_ns}{where}")
                else:
                    if not self.budget(st.st_size, label):
                        return None
                    digest = hashlib.sha256()
                    with os.fdopen(os.dup(fd), "rb") as f:
                        while chunk := f.read(1 << 20):
                            digest.update(chunk)
                    pin = f"sha256:{digest.hexdigest()}{where}"
            finally:
                os.close(fd)
        self.out.pins[label] = pin
        return pin

    def pin_dir(self, path: Path) -> None:
        label = self.label(path)
        if not self.inside(path):
            self.out.pins.setdefault(label, f"directory {os.path.realpath(path)} (by its path)")
            return
        self.out.pins.setdefault(label, f"directory {os.path.realpath(path)}")
        self._walk(path, label)

    def _walk(self, path: Path, label: str, family: frozenset[str] | None = None) -> None:
        real = os.path.realpath(path)
        if real in self.seen_dirs or self.out.unpinned:
            return
        self.seen_dirs.add(real)
        try:
            names = sorted(os.listdir(path))
        except OSError as exc:
            self.out.pins[label + "/"] = f"unlistable ({exc.strerror})"
            return
        for name in names:
            if self.out.unpinned:
                return
            child, child_label = path / name, ("" if label == "." else label + "/") + name
            if name in SKIPPED_DIRS and os.path.isdir(child):
                continue
            if os.path.isdir(child):
                if os.path.islink(child):
                    self.out.pins[child_label] = f"directory link -> {os.path.realpath(child)}"
                self._walk(child, child_label, family)
            elif family is not None and Path(name).suffix.lower() not in family:
                continue
            elif self.pin_file(child, child_label) is None:
                return

    def pin_word(self, word: str) -> None:
        if not word or len(word) > 4096 or "\0" in word:
            return
        path = self.resolve(word)
        if not os.path.lexists(path):
            return
        if os.path.isdir(path):
            self.pin_dir(path)
            return
        if self.pin_file(path) is None or not self.inside(path):
            return
        real = Path(os.path.realpath(path))
        family = next((f for f in SIBLINGS if real.suffix.lower() in f), None)
        if family is None:
            return
        if str(real.parent) != str(self.real_root) and self.inside(real.parent):
            self._walk(real.parent, self.label(real.parent), family)   # a script in a subdirectory: all of it
            return
        try:
            siblings = sorted(os.listdir(real.parent))
        except OSError:
            return
        for name in siblings:
            sibling = real.parent / name
            if Path(name).suffix.lower() in family and not os.path.isdir(sibling):
                if self.pin_file(sibling) is None:
                    return

    def pin_module(self, module: str) -> None:
        top = module.split(".")[0]
        if top and top.isidentifier():
            for word in (top, top + ".py"):
                if os.path.lexists(self.resolve(word)):
                    self.pin_word(word)


def _words(text: str, *, env: bool) -> Iterator[str]:
    """The path-like words of one argument or ``env`` value (see the module doc)."""
    try:
        parts = shlex.split(text)
    except ValueError:
        parts = text.split()
    for word in dict.fromkeys([text, *parts]):
        values = [word] + ([word.split("=", 1)[1]] if "=" in word else [])
        for value in values:
            yield value
            if os.pathsep in value:
                for part in value.split(os.pathsep):
                    yield part if part or not env else "."


def resolve_command(config: ServerConfig, root: Path) -> Path | None:
    """Where the server's command is found, as the child's exec finds it (module doc); None
    when it is not found."""
    command = config.command
    if os.sep in command:
        path = Path(os.path.normpath(command if os.path.isabs(command) else Path(root) / command))
        return path if os.path.lexists(path) else None
    child_env = {"PATH": os.environ.get("PATH", os.defpath), **dict(config.env)}
    for directory in os.get_exec_path(child_env):
        base = Path(directory) if os.path.isabs(directory) else Path(root) / directory
        candidate = Path(os.path.normpath(base / command))
        if candidate.is_file() and os.access(candidate, os.X_OK):
            return candidate
    return None


def footprint(config: ServerConfig, root: Path) -> Footprint:
    """The footprint of ``config`` started in ``root`` (the module doc)."""
    walker = _Walker(root)
    pins = walker.out.pins
    if config.scope == "project":
        from agent_code.mcp.config import PROJECT_FILE

        path = Path(root) / PROJECT_FILE
        pins[CONFIG] = (f"link -> {os.path.realpath(path)}" if os.path.islink(path)
                        else "file" if os.path.lexists(path) else "missing")
    if config.transport != "stdio":
        return walker.out
    pins[CWD] = str(walker.real_root)
    command = resolve_command(config, root)
    words: list[str] = []
    if command is None:
        pins[COMMAND] = f"{config.command}: not found"
    else:
        pins[COMMAND] = f"{walker.label(command)} ({os.path.realpath(command)})"
        if walker.inside(command) and not os.path.isdir(command):
            words.append(str(command))
            try:
                with open(command, "rb") as f:
                    first = f.readline(512)
                if first.startswith(b"#!"):
                    words += _words(first[2:].decode("utf-8", "replace").strip(), env=False)
            except OSError:
                pass
        else:
            walker.pin_file(command)
    module_next = False
    for arg in config.args:
        if module_next:
            walker.pin_module(arg)
        module_next = arg == "-m"
        if arg.startswith("-m") and len(arg) > 2 and arg[2] != "-":
            walker.pin_module(arg[2:])
        words += _words(arg, env=False)
    for _name, value in config.env:
        words += _words(value, env=True)
    for word in words:
        if walker.out.unpinned:
            break
        walker.pin_word(word)
    return walker.out
