"""The built-in deny list: commands too destructive to run in any mode.

These checks run on every command a tool would run (:func:`commands.analyze` finds them
at any depth and under any wrapper, and :func:`commands.normalize` reads each one's
flags whatever their spelling), before settings rules and the permission mode, and
nothing turns them off: not ``bypassPermissions``, not an allow rule. Each is a pure
predicate with an id (shown in the denial and in docs/permissions.md):

=======================  ==============================================================
id                       refuses
=======================  ==============================================================
``rm-protected``         recursive ``rm`` of ``/``, ``/*``, a top-level system
                         directory, ``~``/``$HOME`` (or its ``/*``), ``..`` (or
                         ``../*``, ``../..``); any ``rm --no-preserve-root``; ``rm`` of
                         an unquoted expansion (``rm $X`` may split into ``-rf /``)
``sync-delete``          ``rsync --delete`` into one of those paths
``find-delete``          ``find`` starting at one of those paths (after ``--``, none:
                         ``.``, judged after a ``cd``; ``-files0-from``: any) with
                         ``-delete``, or an ``-exec``/``-execdir``/``-ok``/``-okdir`` whose
                         command, under any wrapper (``env``, ``nice``, ``timeout 5``,
                         ``sudo``, ``busybox``, ``xargs`` …), removes, rewrites or re-owns
                         what it is given (``rm``, ``shred``, ``chmod``, ``truncate``, ``cp
                         … {}``, ``sed -i``), runs code (a shell, an interpreter, ``eval``,
                         ``$RM``, ``{}`` itself) or is such a ``find``
``chmod-protected``      recursive ``chmod``/``chown``/``chgrp``/``chattr``/``setfacl``
                         of one of those paths; any of them on ``/`` or ``/*`` itself
``move-protected``       ``mv`` of one of those paths (``mv -t DIR SRC…`` too)
``format-disk``          ``mkfs``, ``mkfs.*``, ``mke2fs``, ``mkswap``, ``wipefs``,
                         ``blkdiscard``, ``badblocks``, partition and volume tools that
                         change something (``fdisk /dev/sda``, ``sgdisk``, ``parted …
                         mklabel``, ``cryptsetup luksFormat``, ``zpool destroy`` …)
``write-device``         ``dd of=/dev/…``, ``> /dev/…``, ``tee``/``cp``/``shred``/
                         ``truncate``/``tar cf`` onto a device (``/dev/null``,
                         ``/dev/std*``, ``/dev/tty``, ``/dev/fd/*``, ``/dev/shm/*`` and the
                         like are fine)
``power``                ``shutdown``, ``reboot``, ``halt``, ``poweroff``, ``pm-suspend``,
                         ``rtcwake``, ``init 0|1|6``, ``systemctl``/``loginctl``
                         ``poweroff|reboot|suspend|isolate…``, stopping sshd/systemd
                         services, ``kill`` of pid 1 or -1, ``killall5``
``kernel``               ``insmod``, ``rmmod``, ``modprobe``, ``kexec``, ``sysctl -w``,
                         writes to ``/proc/sysrq-trigger``, ``/proc/sys/``, ``/sys/power/``,
                         ``/dev/mem``; ``swapoff -a``, ``umount -a``, ``umount /``
``system-file``          writing, truncating or removing ``/etc/passwd``, ``/etc/shadow``,
                         ``/etc/sudoers(.d)``, ``/etc/fstab``, ``/etc/ld.so.preload``,
                         ``/boot/*``, ``/bin/*``, ``/usr/bin/*`` …; ``userdel``,
                         ``usermod``, ``passwd -d``
``fork-bomb``            a cycle in the call graph of the functions and aliases the line
                         defines (at any depth, ``eval`` and ``bash -c`` text included;
                         ``$FUNCNAME`` is the function) with a call in it that runs beside
                         its caller — a pipeline stage, ``&``, ``coproc``, ``<(…)``
                         (``:(){ :|:& };:``, ``a(){ b|b& }; b(){ a|a& }; a``); an endless
                         loop starting background jobs with no pause
``download-to-shell``    a network fetcher's output (``curl``, ``wget``, ``nc``, ``socat``,
                         ``/dev/tcp`` …) piped, through any stages, into one that runs what
                         it reads as code: a shell or interpreter reading stdin, code only
                         known when it runs (``xargs … bash -c``, ``xargs -I{} sh -c {}``,
                         ``sh -c "$(cat)"``, ``eval "$l"``, ``parallel``), a function of the
                         line that does; or run by one through ``$(…)``/``<(…)``
``too-deep``             a command line nested deeper than the analysis follows (more
                         than ``MAX_DEPTH`` levels of ``bash -c``/``$(…)``): what it
                         hides cannot be checked
=======================  ==============================================================

**Expansion.** Operands are judged by their word pattern (:attr:`shell_syntax.Word.pattern`),
not their text: an operand the shell may expand counts as possibly any protected path
(:func:`possibly_protected`). Brace expansion is enumerated exactly (``/{etc,usr}``); a
glob counts when it may match a protected path or everything inside one (``/*``, ``/e*``,
``.*``, ``~/*``; ``build/*`` does not); ``$X``, ``"$HOME"``, ``$(…)``, ``~user`` count
unless a literal last component pins the path to an ordinary name (``"$HOME"/build`` is
fine; ``$X``, ``/$(echo)``, ``$X/etc`` are not). After a ``cd`` into a protected (or
unknown) directory, relative operands are judged from there too (``cd / && rm -rf *``).

A line the deny list finds nothing in but cannot fully read (tree-sitter syntax errors)
or judge (``eval "$x"``, ``$CMD``, ``cat x | sh``) is the rules' built-in *ask*
(:func:`rules.builtin_ask`), not a denial.

This is a seatbelt, not a sandbox: a program can still do any of it from inside an
interpreter (``python -c "shutil.rmtree('/')"``). The sandbox is what confines commands.
"""

from __future__ import annotations

import operator
import os
import posixpath
import re
from dataclasses import dataclass
from functools import lru_cache
from pathlib import Path
from typing import Callable, Final, Iterator

from agent_code.policy.commands import (INTERPRETERS, SHELLS, UNKNOWN_DIRECTORY, WRAPPERS, Analysis, Command, Invocation,
                                       _skip_options, normalize, normalize_path, program_name, reads_script_from_stdin,
                                       run_by, shell_script)
from agent_code.policy.shell_syntax import UNKNOWN, UNKNOWN_QUOTED, WRITE_REDIRECTIONS, escape

SYSTEM_DIRS: Final = frozenset({"/bin", "/boot", "/dev", "/etc", "/home", "/lib", "/lib32", "/lib64", "/opt", "/proc",
                         "/root", "/sbin", "/srv", "/sys", "/usr", "/var", "/Users", "/System", "/Library",
                         "/Applications", "/snap", "/mnt", "/media", "/run", "/private", "/nix", "/efi"})
SAFE_DEVICES: Final = re.compile(r"^/dev/(null|zero|full|random|urandom|stdin|stdout|stderr|tty|ptmx|fd/\d+|pts/.*|"
                          r"shm(/.*)?)$")
DOWNLOADERS: Final = frozenset({"curl", "wget", "fetch", "aria2c", "http", "https"})
# programs whose output is what a network peer sent (openssl only as s_client)
FETCHERS: Final = DOWNLOADERS | frozenset({"wget2", "curlie", "xh", "xhs", "httpie", "nc", "ncat", "netcat", "socat",
                                           "telnet", "lynx", "links", "elinks", "w3m", "ftp", "tftp", "openssl"})
FORMATTERS: Final = re.compile(r"^(mkfs(\..+)?|mke2fs|mkswap|wipefs|mkntfs|mkdosfs|mkfs_msdos|newfs(_.+)?|mkexfatfs|"
                        r"mkfs\.\w+|blkdiscard|badblocks)$")
# partition and volume tools, and the sub-commands of theirs that destroy data
DISK_TOOLS: Final[dict[str, frozenset[str] | None]] = {
    "fdisk": None, "sfdisk": None, "cfdisk": None, "gdisk": None, "sgdisk": None, "parted": None,
    "zpool": frozenset({"destroy", "labelclear", "create"}), "zfs": frozenset({"destroy"}),
    "lvremove": None, "vgremove": None, "pvremove": None, "dmsetup": frozenset({"remove", "remove_all", "wipe_table"}),
    "cryptsetup": frozenset({"luksFormat", "erase", "luksErase", "reencrypt"}), "nvme": frozenset({"format", "sanitize"}),
    "mdadm": None, "hdparm": None, "sg_format": None, "diskutil": frozenset({"eraseDisk", "eraseVolume",
                                                                           "partitionDisk", "zeroDisk"}),
}
# read-only spellings of those tools (listing partitions is fine)
DISK_READ_FLAGS: Final = frozenset({"-l", "--list", "-s", "--show", "--print", "-p", "-V", "--version", "-h", "--help",
                             "-I", "--detail", "--examine", "-D", "-E", "-Q", "--query"})
# files whose loss or rewrite breaks the machine or its security
SYSTEM_FILES: Final = frozenset({"/etc/passwd", "/etc/shadow", "/etc/group", "/etc/gshadow", "/etc/sudoers", "/etc/fstab",
                          "/etc/ld.so.preload", "/etc/inittab", "/etc/crypttab", "/etc/login.defs", "/etc/hosts",
                          "/etc/resolv.conf", "/etc/nsswitch.conf", "/etc/environment", "/etc/profile",
                          "/etc/bash.bashrc", "/etc/ssh/sshd_config", "/etc/security/limits.conf"})
SYSTEM_TREES: Final = ("/boot/", "/etc/sudoers.d/", "/etc/pam.d/", "/etc/systemd/", "/etc/cron.d/", "/etc/init.d/",
                "/etc/profile.d/", "/lib/modules/", "/usr/lib/modules/", "/etc/modprobe.d/", "/etc/default/grub",
                "/proc/sys/", "/sys/", "/bin/", "/sbin/", "/usr/bin/", "/usr/sbin/", "/lib/", "/lib64/",
                "/usr/lib/", "/usr/lib64/", "/efi/", "/etc/apt/", "/etc/yum.repos.d/")
KERNEL_FILES: Final = ("/proc/sysrq-trigger", "/proc/sys/", "/sys/power/", "/sys/kernel/", "/dev/mem", "/dev/kmem",
                "/dev/port", "/proc/kcore", "/sys/firmware/")
POWER_PROGRAMS: Final = frozenset({"shutdown", "reboot", "halt", "poweroff", "pm-suspend", "pm-hibernate",
                            "pm-suspend-hybrid", "systemd-hibernate", "kexec", "rtcwake", "zzz", "s2ram",
                            "killall5", "hibernate"})
POWER_VERBS: Final = frozenset({"poweroff", "reboot", "halt", "kexec", "suspend", "hibernate", "hybrid-sleep",
                         "suspend-then-hibernate", "rescue", "emergency", "soft-reboot", "default"})
KERNEL_PROGRAMS: Final = frozenset({"insmod", "rmmod", "kexec", "kmod", "depmod"})
WRITERS: Final = frozenset({"tee", "truncate", "shred", "sponge", "install", "cp", "mv", "rsync", "ln", "dd", "unlink",
                     "rm", "ddrescue", "scp", "patch"})


@dataclass(frozen=True)
class Hit:
    """One built-in rule that a command breaks: the rule's id, what it refuses, and the
    offending command as the model wrote it (or the part of it that matters)."""

    rule: str
    reason: str
    command: str


class Words:
    """``normalize(argv)`` as the checks read it (their ``inv``), made when one first reads
    more than ``program``: most checks of most commands read nothing else (``sort``,
    ``echo x > f``: not the program they look for). ``program`` is what normalize gives
    (``program_name(argv[0])``); ``flags``, ``operands`` and ``has_flag`` are normalize's own."""

    __slots__ = ("argv", "program", "_invocation")

    def __init__(self, argv: tuple[str, ...]) -> None:
        self.argv = argv
        self.program = program_name(argv[0]) if argv else ""
        self._invocation: Invocation | None = None

    def invocation(self) -> Invocation:
        if self._invocation is None:
            self._invocation = normalize(self.argv)
        return self._invocation

    @property
    def flags(self) -> tuple[tuple[str, str | None], ...]:
        return self.invocation().flags

    @property
    def operands(self) -> tuple[str, ...]:
        return self.invocation().operands

    def has_flag(self, name: str) -> bool:
        return self.invocation().has_flag(name)


# --- what a word may name -------------------------------------------------------------

def _with_home(path: str, home: str | None) -> str:
    """``~/x``, ``$HOME/x``, ``${HOME}/x`` with the home directory put in."""
    if not home or path[:1] not in ("~", "$"):  # (each lead starts with one of them)
        return path
    for lead, below in _HOME_LEADS:
        if path == lead or path.startswith(below):
            return home.rstrip("/") + path[len(lead):]
    return path


_HOME_LEADS: Final = (("~", "~/"), ("$HOME", "$HOME/"), ("${HOME}", "${HOME}/"))


@lru_cache(maxsize=1024)  # a pure function of the words
def is_protected(word: str, home: str | None = None) -> bool:
    """Whether removing or re-owning ``word`` recursively would wreck the machine or
    the user's home: ``/``, ``/*``, a top-level system directory (or its ``/*``), ``~``,
    ``$HOME``, the real home directory (each or its ``/*``), ``..`` chains, and any of
    those reached through ``..`` (``~/..``, ``/tmp/../etc``)."""
    path = normalize_path(word)
    homes = _home_paths(home) if home else ()
    with_home = _with_home(word, home)
    # (the word without a home prefix is its own second candidate: judged once)
    for candidate in (path,) if with_home == word else (path, normalize_path(with_home)):
        base = candidate.removesuffix("/*")
        if base in ("", "/") or candidate == "/*":
            return True
        if base in SYSTEM_DIRS:
            return True
        if base in ("~", "$HOME"):
            return True
        if base in homes:
            return True
        if _DOTDOTS.fullmatch(base):
            return True
        if base == UNKNOWN_DIRECTORY:   # /proc/PID/cwd, /dev/fd/N: may be any directory
            return True
    return False


@lru_cache(maxsize=8)  # (one home per session, asked for on every word)
def _home_paths(home: str) -> tuple[str, str]:
    """The home directory, normalized, and the directory it is in."""
    normalized = normalize_path(home)
    return normalized, posixpath.dirname(normalized)


# re.sub with a callable is several times faster than with an r"\1" template
_GROUP_1: Final = operator.itemgetter(1)
_DOTDOTS: Final = re.compile(r"\.\.(/\.\.)*")
_ESCAPED: Final = re.compile(r"\\(.)", re.DOTALL)
_GLOB: Final = re.compile(r"(?<!\\)(?:\\\\)*[*?\[]")  # an unescaped glob character


def _unescape(pattern: str) -> str:
    if "\\" not in pattern:
        return pattern
    return _ESCAPED.sub(_GROUP_1, pattern)


def _is_glob(pattern: str) -> bool:
    return _GLOB.search(pattern) is not None


def brace_alternatives(pattern: str, limit: int = 256) -> list[str]:
    """Brace expansion of a word pattern (``/{etc,usr}`` → ``/etc``, ``/usr``;
    ``{1..3}``), escapes honoured. Past ``limit`` words: one word that may be anything."""
    if "{" not in pattern and limit >= 1:  # no brace to expand (what _first_brace finds too)
        return [pattern]
    out: list[str] = []
    todo = [pattern]
    while todo:
        p = todo.pop()
        found = _first_brace(p)
        if found is None:
            out.append(p)
        else:
            i, j, alternatives = found
            todo.extend(p[:i] + a + p[j + 1:] for a in reversed(alternatives))
        if len(out) + len(todo) > limit:
            return [UNKNOWN]
    return out


def _first_brace(p: str) -> tuple[int, int, list[str]] | None:
    i = 0
    while i < len(p):
        if p[i] == "\\":
            i += 2
            continue
        if p[i] == "{":
            depth, j, commas = 0, i, []
            while j < len(p):
                c = p[j]
                if c == "\\":
                    j += 2
                    continue
                if c == "{":
                    depth += 1
                elif c == "}":
                    depth -= 1
                    if depth == 0:
                        break
                elif c == "," and depth == 1:
                    commas.append(j)
                j += 1
            if j < len(p):
                body = p[i + 1:j]
                if commas:
                    cuts = [i, *commas, j]
                    return i, j, [p[a + 1:b] for a, b in zip(cuts, cuts[1:])]
                seq = re.fullmatch(r"(-?\d+|[A-Za-z])\.\.(-?\d+|[A-Za-z])(?:\.\.-?\d+)?", body)
                if seq:
                    a, b = seq.group(1), seq.group(2)
                    if a.lstrip("-").isdigit() and b.lstrip("-").isdigit():
                        lo, hi = sorted((int(a), int(b)))
                        if hi - lo > 256:
                            return i, j, [UNKNOWN]
                        return i, j, [str(k) for k in range(lo, hi + 1)]
                    if a.isalpha() and b.isalpha():
                        lo, hi = sorted((ord(a), ord(b)))
                        return i, j, [escape(chr(k)) for k in range(lo, hi + 1)]
        i += 1
    return None


_CLASS_START: Final = re.compile(r"\[[:.=]")


def _bracket_end(pattern: str, at: int) -> int:
    """Where the bracket expression opened at ``at`` ends (its "]"), or -1: a "]" first (after
    "!"/"^") is a member, and "[:alpha:]", "[.x.]", "[=e=]" inside are skipped whole."""
    i = at + 1
    if pattern[i:i + 1] in ("!", "^"):
        i += 1
    if pattern[i:i + 1] == "]":  # a "]" first is a member
        i += 1
    while i < len(pattern):
        if pattern[i] == "]":
            return i
        if pattern[i] == "\\":  # an escaped character is a member ("[e\\]]": "e" or "]")
            i += 2
            continue
        opened = _CLASS_START.match(pattern, i)
        if opened is not None:
            close = pattern.find(opened.group()[1] + "]", i + 2)
            if close != -1:
                i = close + 2
                continue  # (an unclosed "[=" is a "[" member: "[[=e]" is "[" "=" or "e")
        i += 1
    return -1


def _bracket(body: str) -> str:
    """A glob's ``[…]`` as a regex class; one that is none (a reversed range ``[z-a]``, a POSIX
    class ``[[:alpha:]]``) as any character of a name: it may match more, never less."""
    if "[" not in body and "\\" not in body and not any(pair in body for pair in ("--", "&&", "~~", "||")):
        # (escapes, classes and the pairs the regex engine reads as set operations: any character)
        try:
            re.compile(f"[{body}]")
            return f"[{body}]"
        except re.error:
            pass
    return "[^/]"


@lru_cache(maxsize=1024)  # a pure function of the words
def _glob_regex(pattern: str) -> re.Pattern[str]:
    """A glob pattern as a regex over paths: ``*``/``?`` stay in one component and do not
    match a leading dot; escapes are literal."""
    out, i = [], 0
    while i < len(pattern):
        c = pattern[i]
        if c not in "\\*?[":  # a run of literal characters, escaped at once (re.escape works per character)
            literal = _GLOB_LITERALS.match(pattern, i)
            assert literal is not None
            out.append(re.escape(literal.group()))
            i = literal.end()
            continue
        at_start = i == 0 or pattern[i - 1] == "/"
        if c == "\\" and i + 1 < len(pattern):
            out.append(re.escape(pattern[i + 1]))
            i += 2
            continue
        if c == "*":
            out.append(("(?!\\.)" if at_start else "") + "[^/]*")
        elif c == "?":
            out.append(("(?!\\.)" if at_start else "") + "[^/]")
        elif c == "[":
            end = _bracket_end(pattern, i)
            if end == -1:
                out.append(re.escape(c))
            else:
                body = pattern[i + 1:end].replace("\\", "\\\\")
                if body.startswith("!"):
                    body = "^" + body[1:]
                out.append(_bracket(body))
                i = end + 1
                continue
        else:
            out.append(re.escape(c))
        i += 1
    return re.compile("".join(out))


_GLOB_LITERALS: Final = re.compile(r"[^\\*?\[]+")
_PROBES: Final = ("bin", "x", "lib64", "a.b", "data")
# and the hidden ones a dot glob takes (``~/.*``, ``~/.??*``, ``~/.[!.]*``: every dot-file of the
# home, .ssh and .config among them; ``*`` itself matches no leading dot)
_DOT_PROBES: Final = (".ssh", ".config", ".bashrc", ".a.b", ".local")


# the last components of the protected directories: the system ones, and the home's (_home_name)
_SYSTEM_NAMES: Final = frozenset(d.rsplit("/", 1)[1] for d in SYSTEM_DIRS)


@lru_cache(maxsize=8)  # (one home per session, asked for on every word under an unknown directory)
def _home_name(home: str) -> str:
    return normalize_path(home).rsplit("/", 1)[-1]


@lru_cache(maxsize=1024)  # a pure function of the words
def possibly_protected(pattern: str, home: str | None = None) -> bool:
    """Whether a word pattern (:attr:`shell_syntax.Word.pattern`) may name a protected
    path once the shell has expanded it: braces are enumerated exactly; a glob counts when
    it may match a protected path or everything in one; a ``$…``, ``$(…)`` or ``~user``
    counts unless a literal last component pins the path to an ordinary name
    (``"$HOME"/build`` is fine, ``"$HOME"``, ``/$(echo)``, ``$X/etc`` are not)."""
    if UNKNOWN not in pattern and UNKNOWN_QUOTED not in pattern and not _SPECIAL.search(pattern):
        return is_protected(pattern, home)
    return any(_alternative_protected(alt, home) for alt in brace_alternatives(pattern))


_SPECIAL: Final = re.compile(r"[\\{*?\[~]")  # what may make a pattern more than one literal path
# the paths a glob is tried against (and, per home, _home_paths)
_GLOB_CANDIDATES: Final = ("/", *SYSTEM_DIRS, "..", "../..", "../../..", "./..")
_TILDE: Final = re.compile(r"~([^/\\]*)")
_SLASHES: Final = re.compile(r"/+")
_DOT_DIRS: Final = re.compile(r"(^|/)\./")


def _alternative_protected(p: str, home: str | None) -> bool:
    tilde = _TILDE.match(p)
    if tilde:
        user = tilde.group(1)
        if user == "":
            p = escape(home) + p[1:] if home else p
        else:  # ~user, ~+, ~-: someone's home or a working directory
            p = UNKNOWN_QUOTED + p[tilde.end():]
    if UNKNOWN in p or UNKNOWN_QUOTED in p:
        comps = p.split("/")
        while len(comps) > 1 and comps[-1] in ("", "."):
            comps.pop()
        last = comps[-1]
        if UNKNOWN in last or UNKNOWN_QUOTED in last or last in ("..", "", "~"):
            return True
        # may it be the name of a protected directory (in an unknown one)?
        if not _is_glob(last):  # a literal name: its _glob_regex matches that name only
            name = _unescape(last)
            return name in _SYSTEM_NAMES or (home is not None and home != "" and name == _home_name(home))
        regex = _glob_regex(last)
        return any(map(regex.fullmatch, _SYSTEM_NAMES)) or (home is not None and home != ""
                                                            and regex.fullmatch(_home_name(home)) is not None)
    if not _is_glob(p):
        return is_protected(_unescape(p), home)
    path = _SLASHES.sub("/", p)
    path = _DOT_DIRS.sub(_GROUP_1, path)
    path = path.rstrip("/") or "/"
    if ".." in path.split("/"):
        path = posixpath.normpath(path)
    regex = _glob_regex(path)
    if any(map(regex.fullmatch, _GLOB_CANDIDATES)) or (home and any(map(regex.fullmatch, _home_paths(home)))):
        return True
    parent, _, last = path.rpartition("/")
    parent = parent or ("/" if path.startswith("/") else ".")  # (a glob at the root: its parent is "/")
    if _is_glob(last) and not _is_glob(parent) and is_protected(_unescape(parent), home):
        last_regex = _glob_regex(last)
        return (sum(bool(last_regex.fullmatch(probe)) for probe in _PROBES) >= 3
                or sum(bool(last_regex.fullmatch(probe)) for probe in _DOT_PROBES) >= 3)
    return False


def _patterns(c: Command) -> tuple[str, ...]:
    return c.patterns or tuple(escape(a) for a in c.argv)


def _word(c: Command, pattern: str) -> str:
    """The word of ``c`` as written whose pattern is ``pattern`` (for messages)."""
    for word, shape in zip(c.argv, _patterns(c)):
        if shape == pattern:
            return word
    return "(the input of xargs)" if pattern in (UNKNOWN, UNKNOWN_QUOTED) else _unescape(pattern)


def _shown(command: Command) -> str:
    """The command as words, with its redirections."""
    return " ".join([*command.argv, *(f"{op} {target}" for op, target in command.redirects)])


def _may(pattern: str) -> str:
    if UNKNOWN in pattern or UNKNOWN_QUOTED in pattern or "~" in pattern:
        return " (the shell expands it: it may name any protected path)"
    if pattern != escape(_unescape(pattern)):
        return " (a glob or brace expansion that may name a protected path)"
    return ""


def _splits(pattern: str) -> bool:
    """An unquoted expansion at the start of a word: it may become options and paths."""
    return pattern.startswith(UNKNOWN)


def _rm_protected(c: Command, inv: Words, home: str | None) -> str | None:
    if inv.program not in ("rm", "rimraf"):
        return None
    shape = normalize(_patterns(c), paths=False)
    if inv.has_flag("--no-preserve-root") or shape.has_flag("--no-preserve-root"):
        return "rm --no-preserve-root"
    target = next((op for op in shape.operands if possibly_protected(op, home)), None)
    if (inv.has_flag("-r") or shape.has_flag("-r") or inv.program == "rimraf") and target is not None:
        return f"recursive removal of {_word(c, target)}" + _may(target)
    splitting = next((op for op in shape.operands if _splits(op)), None)
    if splitting is not None:
        return f"rm of the unquoted expansion {_word(c, splitting)}, which may hold -r and a protected path"
    return None


def _sync_delete(c: Command, inv: Words, home: str | None) -> str | None:
    """``rsync --delete SRC /``: deletes whatever in the destination is not in the source."""
    if inv.program != "rsync" or not any(n.startswith(("--delete", "--del", "--remove-source-files"))
                                         for n, _ in inv.flags):
        return None
    shape = normalize(_patterns(c), paths=False)
    if shape.operands and possibly_protected(shape.operands[-1], home):
        return f"rsync --delete into {_word(c, shape.operands[-1])}" + _may(shape.operands[-1])
    return None


def _find_delete(c: Command, inv: Words, home: str | None) -> str | None:
    """``find`` starting at a protected path with ``-delete``, or an ``-exec``/``-execdir``/
    ``-ok``/``-okdir`` whose command, under whatever wraps it, may change the files it is
    given (:func:`_exec_changes`): it does so to every file of the tree."""
    if inv.program != "find":
        return None
    if not ("-delete" in c.argv or any(_exec_changes(argv, shape) for argv, shape in _exec_clauses(c))):
        return None
    for word, shape in _find_starts(c):
        if possibly_protected(shape, home):
            return f"find deleting or changing everything under {word}" + _may(shape)
    return None


def _find_starts(c: Command) -> list[tuple[str, str]]:
    """find's starting points as (word, pattern): the words before its first expression
    (after -H/-L/-P, -D …, -O… and a ``--``); ``.`` when there is none; anything when
    ``-files0-from`` reads them from a file."""
    starts: list[tuple[str, str]] = []
    for word, shape in zip(c.argv[1:], _patterns(c)[1:]):
        if word in ("-H", "-L", "-P", "-D", "--") or _OPTIMIZE_FLAG.fullmatch(word):
            continue
        if word.startswith("-") or word in ("(", "!"):
            break
        starts.append((word, shape))
    if "-files0-from" in c.argv:
        starts.append(("(the paths -files0-from reads)", UNKNOWN))
    return starts or [(".", ".")]


def _exec_clauses(c: Command) -> list[tuple[tuple[str, ...], tuple[str, ...]]]:
    """The commands of find's ``-exec``/``-execdir``/``-ok``/``-okdir`` (up to ``;`` or ``+``),
    as words and patterns."""
    argv, shapes = c.argv, _patterns(c)
    out = []
    k = 1
    while k < len(argv):
        if argv[k] in _EXEC_ACTIONS:
            end = k + 1
            while end < len(argv) and argv[end] not in (";", "+"):
                end += 1
            if end > k + 1:
                out.append((argv[k + 1:end], shapes[k + 1:end]))
            k = end
        k += 1
    return out


_EXEC_ACTIONS: Final = frozenset({"-exec", "-execdir", "-ok", "-okdir"})


def _exec_changes(argv: tuple[str, ...], shapes: tuple[str, ...]) -> bool:
    """Whether a command find runs on each file (``{}``) may remove, rewrite or re-own it, or
    run anything at all: judged on the command under its wrappers (``env``, ``nice``,
    ``timeout 5``, ``sudo``, ``busybox``, ``xargs`` …, as :func:`commands.run_by` peels them).
    It may when it runs a script (``sh -c``, ``eval``, ``su -c``, ``ssh``), names its program
    by an expansion (``$RM``) or runs the found file itself (``{}``), is an interpreter, one of
    the programs that remove or change the files they are given, a find that does, or copies,
    links, installs or writes over ``{}`` (``cp /dev/null {}``, ``dd of={}``, ``sed -i``)."""
    leaf, runs_script = run_by(argv)
    if runs_script:
        return True
    if not leaf:
        return False
    shape = shapes[len(argv) - len(leaf):] if len(shapes) == len(argv) and argv[len(argv) - len(leaf):] == leaf \
        else tuple(escape(a) for a in leaf)
    program = program_name(leaf[0])
    if UNKNOWN in shape[0] or UNKNOWN_QUOTED in shape[0] or "{}" in leaf[0]:
        return True
    if program in _CHANGES_ITS_FILES or program in INTERPRETERS or _PYTHON.fullmatch(program) \
            or program in _RUNS_CODE:
        return True
    if program == "find":
        return "-delete" in leaf or any(_exec_changes(*clause) for clause in
                                                        _exec_clauses(Command(leaf, patterns=shape)))
    operands = [w for w in leaf[1:] if not w.startswith("-")]
    if program in ("tee", "sponge") and any("{}" in w for w in operands):
        return True
    if program in ("cp", "ln", "install", "rsync", "patch") and any("{}" in w for w in operands[1:]):
        return True  # (``{}`` as the destination: written over)
    if program in ("dd", "dcfldd", "ddrescue") and any(w.startswith("of=") and "{}" in w for w in leaf):
        return True
    return program in ("sed", "gsed") and any(w.startswith("-i") or w.startswith("--in-place") or
                                             (w.startswith("-") and not w.startswith("--") and "i" in w)
                                             for w in leaf[1:])


_CHANGES_ITS_FILES: Final = frozenset({"rm", "rimraf", "shred", "unlink", "rmdir", "srm", "wipe", "chmod", "chown",
                                       "chgrp", "chattr", "setfacl", "chcon", "truncate", "mv", "fallocate"})
_RUNS_CODE: Final = frozenset({"awk", "gawk", "mawk", "nawk", "busybox", "toybox", "xargs", "parallel", "lua",
                               "tclsh", "Rscript", "deno", "bun", "pwsh", "osascript"})


_OPTIMIZE_FLAG: Final = re.compile(r"-O\d")


def _chmod_protected(c: Command, inv: Words, home: str | None) -> str | None:
    if inv.program not in ("chmod", "chown", "chgrp", "chattr", "setfacl", "chcon"):
        return None
    shape = normalize(_patterns(c), paths=False)
    recursive = any(i.has_flag("-R") or i.has_flag("-r") and inv.program != "chmod" for i in (inv, shape))
    mode_as_flag = inv.program == "chmod" and any(_MODE_FLAG.fullmatch(n) for n, _ in inv.flags)
    takes_first = inv.program in ("chmod", "chown", "chgrp", "chattr") and not mode_as_flag
    paths = shape.operands[1:] if takes_first else shape.operands
    if recursive or any(_splits(op) for op in paths):
        target = next((op for op in paths if possibly_protected(op, home)), None)
        if target is not None:
            return f"recursive {inv.program} of {_word(c, target)}" + _may(target)
    for op in paths:  # even without -R: the root itself, a system directory, or everything in /
        if not (UNKNOWN in op or UNKNOWN_QUOTED in op) and possibly_protected(op, None) and \
                normalize_path(_unescape(op)) not in ("..", "../..") and "~" not in op:
            return f"{inv.program} of {_unescape(op)}"
    return None


_MODE_FLAG: Final = re.compile(r"-[rwxXst]")


def _move_protected(c: Command, inv: Words, home: str | None) -> str | None:
    if inv.program != "mv":
        return None
    argv = normalize(_patterns(c), paths=False)
    flags = dict(argv.flags)
    operands = list(argv.operands)
    target_dir = next((v for n, v in argv.flags if n in ("-t", "--target-directory") and v), None)
    if "-t" in flags or "--target-directory" in flags or target_dir:
        sources = operands[1:] if "-t" in flags and flags["-t"] is None and operands else operands
    else:
        sources = operands[:-1]
    target = next((op for op in sources if possibly_protected(op, home)), None)
    if target is not None:
        return f"moving {_word(c, target)}" + _may(target)
    return None


def _format_disk(c: Command, inv: Words, home: str | None) -> str | None:
    if FORMATTERS.match(inv.program):
        return f"formatting or wiping a disk ({inv.program})"
    if inv.program in DISK_TOOLS:
        verbs = DISK_TOOLS[inv.program]
        if verbs is None:
            if inv.program == "hdparm" and not any(n.startswith("--security-erase") or n in ("--trim-sector-ranges",
                                                   "--write-sector", "--make-bad-sector", "--dco-restore")
                                                   for n, _ in inv.flags):
                return None
            if inv.program == "mdadm" and not any(n in ("--zero-superblock", "--create", "-C") for n, _ in inv.flags):
                return None
            if inv.program == "parted" and any(op in PARTED_WRITES for op in inv.operands):
                return f"parted {next(op for op in inv.operands if op in PARTED_WRITES)}"
            if inv.flags and all(n in DISK_READ_FLAGS for n, _ in inv.flags) and inv.program != "sgdisk":
                return None
            if inv.program == "sgdisk" and all(n in DISK_READ_FLAGS for n, _ in inv.flags):
                return None
            if inv.program == "parted" and any(op in ("print", "-l") for op in inv.operands) and not any(
                    op in ("mklabel", "mkpart", "rm", "resizepart", "mktable") for op in inv.operands):
                return None
            return f"changing disk partitions or volumes ({inv.program})"
        hit = next((op for op in inv.operands if op in verbs), None)
        if hit is not None:
            return f"{inv.program} {hit}"
    return None


def _is_device(path: str) -> bool:
    path = normalize_path(path)
    return path.startswith("/dev/") and not SAFE_DEVICES.match(path)


def _maybe_device(word: str, shape: str | None = None) -> bool:
    """A block or character device other than the harmless ones; a pattern under /dev/
    with an expansion or glob counts too (``/dev/sd$X``, ``/dev/sd*``)."""
    if shape and shape != escape(word) and (UNKNOWN in shape or UNKNOWN_QUOTED in shape or _is_glob(shape)):
        return bool(_UNDER_DEV.match(shape)) and not SAFE_DEVICES.match(normalize_path(word))
    return _is_device(word)


_UNDER_DEV: Final = re.compile(r"/+dev/")


_DEVICE_OPERAND_PROGRAMS: Final = frozenset({"tee", "shred", "truncate", "badblocks", "sponge", "blkdiscard",
                                      "cp", "mv", "install", "rsync", "ddrescue", "cat", "pv"})


def _write_device(c: Command, inv: Words, home: str | None) -> str | None:
    for op, target in c.redirects:
        if op in WRITE_REDIRECTIONS and _is_device(target):
            return f"writing to the device {target}"
    shapes = _patterns(c)
    if inv.program in ("dd", "ddrescue") or inv.program == "dcfldd":
        for word, shape in zip(c.argv[1:], shapes[1:]):
            if word.startswith("of=") and _maybe_device(word[3:], shape[3:]):
                return f"writing to the device {word[3:]}"
    program = inv.program
    operands = [(w, p) for w, p in zip(c.argv[1:], shapes[1:]) if not w.startswith("-")] \
        if program in _DEVICE_OPERAND_PROGRAMS else []  # (only these read them)
    if inv.program in ("tee", "shred", "truncate", "badblocks", "sponge", "blkdiscard") and any(
            _maybe_device(w, p) for w, p in operands):
        return f"writing to the device {next(w for w, p in operands if _maybe_device(w, p))}"
    if inv.program == "find":
        for k, word in enumerate(c.argv[:-1]):
            if word in ("-fls", "-fprint", "-fprint0", "-fprintf") and _maybe_device(c.argv[k + 1], shapes[k + 1]
                                                                                  if k + 1 < len(shapes) else c.argv[k + 1]):
                return f"writing to the device {c.argv[k + 1]}"
    if program not in ("rm", "unlink", "mv"):
        written = next((f for f in _written_files(c, inv) if _is_device(f)), None)
        if written is not None:
            return f"writing to the device {written}"
    if inv.program in ("cp", "mv", "install", "rsync", "ddrescue", "cat", "pv") and operands and \
            inv.program not in ("cat", "pv") and _maybe_device(*operands[-1]):
        return f"writing to the device {operands[-1][0]}"
    return None


def _system_path(path: str) -> bool:
    if "/" not in path:
        return False
    path = normalize_path(path)
    return path in SYSTEM_FILES or path.startswith(SYSTEM_TREES) or path + "/" in SYSTEM_TREES


def _kernel_path(path: str) -> bool:
    path = normalize_path(path)
    return path in _KERNEL_EXACT or path.startswith(KERNEL_FILES)


_KERNEL_EXACT: Final = frozenset(k.rstrip("/") for k in KERNEL_FILES)


def _written_files(c: Command, inv: Words) -> list[str]:
    """Files the command writes, truncates or removes (its redirections, and the
    destinations of the usual writers)."""
    out = [t for op, t in c.redirects if op in WRITE_REDIRECTIONS and not (op == ">&" and (t.isdigit() or t == "-"))] \
        if c.redirects else []
    if inv.program in ("tee", "truncate", "shred", "sponge", "unlink", "rm"):
        out += inv.operands
    elif inv.program in ("cp", "mv", "install", "rsync", "ln", "scp") and len(inv.operands) >= 2:
        operands = inv.operands
        out.append(operands[-1])
        if inv.program == "mv":
            out += operands[:-1]
    elif inv.program in ("dd", "dcfldd"):
        out += [w[3:] for w in c.argv[1:] if w.startswith("of=")]
    elif inv.program in ("sed", "perl") and any(n in ("-i", "--in-place") or n.startswith("-i") for n, _ in inv.flags):
        out += inv.operands[1:]
    elif inv.program == "patch":
        out += inv.operands[:1]
    # -o FILE / --output=FILE (sort, gcc, curl, tar -f …): each such word starts with -o, -O,
    # --output or --file=, which one search of the words joined shows (most have none)
    joined = "\x00" + "\x00".join(c.argv[1:])
    if "\x00-o" in joined or "\x00-O" in joined or "\x00--output" in joined or "\x00--file=" in joined:
        for k, word in enumerate(c.argv[1:], 1):
            if word in ("-o", "--output", "--output-file", "-O", "--output-document") and k + 1 < len(c.argv):
                out.append(c.argv[k + 1])
            elif word.startswith(("--output=", "--output-file=", "--output-document=", "--file=")):
                out.append(word.split("=", 1)[1])
            elif word.startswith("-o") and len(word) > 2 and inv.program in ("sort", "gcc", "cc", "clang", "ld"):
                out.append(word[2:])
    if inv.program == "tar" and len(c.argv) > 1 and _TAR_WRITES.search(c.argv[1].lstrip("-").split("f")[0] + (
            c.argv[1] if not c.argv[1].startswith("-") else "")):
        for k, word in enumerate(c.argv[1:], 1):
            if (word in ("-f", "--file") or (not word.startswith("--") and word.endswith("f"))) and k + 1 < len(c.argv):
                out.append(c.argv[k + 1])
    return out


_TAR_WRITES: Final = re.compile(r"[cru]")


def _system_file(c: Command, inv: Words, home: str | None) -> str | None:
    if c.patterns and c.patterns != c.argv:  # operands as the deny list sees them (after a cd, rebased)
        seen = tuple([_unescape(p) for p in c.patterns])
        if seen != c.argv:
            inv = Words(seen)
    for path in _written_files(c, inv):
        if _system_path(path):
            return f"writing or removing the system file {path}"
    if inv.program in ("chmod", "chown", "chgrp", "chattr") and any(
            normalize_path(op) in SYSTEM_FILES for op in inv.operands[1:]):
        return f"{inv.program} of {next(op for op in inv.operands[1:] if normalize_path(op) in SYSTEM_FILES)}"
    if inv.program in ("passwd", "userdel", "usermod", "deluser", "chpasswd", "visudo", "vipw", "groupdel") and \
            inv.program != "passwd":
        return f"changing the system's accounts ({inv.program})"
    if inv.program == "passwd" and any(n in ("-d", "--delete", "-l", "--lock") for n, _ in inv.flags):
        return "passwd removing or locking a password"
    return None


PARTED_WRITES: Final = frozenset({"mklabel", "mktable", "mkpart", "mkpartfs", "rm", "resizepart", "resize", "rescue",
                           "name", "set", "toggle", "disk_set", "disk_toggle", "move", "cp", "mkfs"})
# systemd targets that stop, restart or suspend the machine (``systemctl start reboot.target``)
POWER_TARGETS: Final = re.compile(r"^(reboot|poweroff|halt|kexec|soft-reboot|suspend|hibernate|hybrid-sleep|"
                           r"suspend-then-hibernate|sleep|ctrl-alt-del|rescue|emergency|shutdown|exit|final)"
                           r"(\.target)?$")


def _power(c: Command, inv: Words, home: str | None) -> str | None:
    if inv.program in POWER_PROGRAMS:
        return f"{inv.program} of the machine"
    if inv.program in ("init", "telinit") and inv.operands[:1] in (("0",), ("6",), ("1",), ("s",), ("S",)):
        return f"{inv.program} {inv.operands[0]}"
    if inv.program in ("systemctl", "loginctl") and set(inv.operands) & POWER_VERBS:
        return f"{inv.program} " + next(o for o in inv.operands if o in POWER_VERBS)
    if inv.program == "systemctl" and "isolate" in inv.operands:
        return "systemctl isolate"
    if inv.program == "systemctl" and any(POWER_TARGETS.match(o) for o in inv.operands):
        return "systemctl " + next(o for o in inv.operands if POWER_TARGETS.match(o))
    if inv.program in ("systemctl", "service") and any(o in ("stop", "kill", "mask", "disable") for o in inv.operands) \
            and any(re.match(r"(ssh|sshd|systemd-\w+|dbus|networking|network-manager|NetworkManager|"
                             r"systemd-logind|getty@.*|init)(\.service)?$", o) for o in inv.operands):
        return f"{inv.program} stopping a service the machine needs"
    if inv.program in ("kill", "pkill", "killall") and (
            any(op in ("1", "-1") for op in inv.operands) or inv.has_flag("-1")
            or (inv.program != "kill" and any(op in ("init", "systemd", "sshd") for op in inv.operands))):
        return f"{inv.program} of init or of every process"
    if inv.program in ("dbus-send", "gdbus", "busctl", "qdbus", "qdbus6") and re.search(r"(PowerOff|Reboot|Suspend|Hibernate|Halt)", " ".join(c.argv)):
        return "powering off through D-Bus"
    return None


def _kernel(c: Command, inv: Words, home: str | None) -> str | None:
    if inv.program in KERNEL_PROGRAMS:
        return f"{inv.program}: loading, removing or replacing kernel code"
    if inv.program == "modprobe" and not any(n in ("-n", "--dry-run", "-c", "--showconfig", "-D",
                                                   "--show-depends", "--show", "-V", "--version")
                                             for n, _ in inv.flags):
        return "modprobe: loading or removing a kernel module"
    if inv.program == "sysctl" and (any(n in ("-w", "--write", "-p", "--load", "--system") for n, _ in inv.flags)
                                    or any("=" in op for op in inv.operands)):
        return "sysctl changing kernel parameters"
    if inv.program in ("swapoff", "umount") and (inv.has_flag("-a") or inv.has_flag("--all")):
        return f"{inv.program} -a"
    if inv.program == "umount":
        unmounted = [op for op in inv.operands if normalize_path(op) == "/" or normalize_path(op) in SYSTEM_DIRS]
        if unmounted:
            return f"umount of {unmounted[0]}"
    if inv.program == "mount" and any(op == "remount" or op.startswith("remount,") or ",remount" in op
                                      for _, op in inv.flags if op) and "/" in inv.operands:
        return "remounting /"
    if inv.program == "echo" or inv.program == "printf" or True:
        for op, target in c.redirects:
            if op in WRITE_REDIRECTIONS and _kernel_path(target):
                return f"writing to the kernel interface {target}"
    if inv.program in ("tee", "dd", "cp", "sponge") and any(_kernel_path(w.removeprefix("of=")) for w in c.argv[1:]):
        return f"writing to the kernel interface {next(w for w in c.argv[1:] if _kernel_path(w.removeprefix('of=')))}"
    return None


def _root_or_system(word: str) -> bool:
    path = normalize_path(word).rstrip("/") or "/"
    return path == "/" or path in SYSTEM_DIRS or path == UNKNOWN_DIRECTORY


def tar_extracts(argv: tuple[str, ...]) -> bool:
    """Whether a tar command line unpacks (``xf``, ``-x``, ``--extract``, ``--get``)."""
    first = argv[1] if len(argv) > 1 else ""
    return (not first.startswith("-") and "x" in first) or any(
        w in ("--extract", "--get") or _EXTRACT_FLAG.match(w) is not None for w in argv[1:])


_EXTRACT_FLAG: Final = re.compile(r"^-[A-Za-z]*x")


def _overwrite_root(c: Command, inv: Words, home: str | None) -> str | None:
    """Unpacking or copying a tree over ``/`` or a system directory (``tar xf x.tar -C /``,
    ``unzip -o x.zip -d /``, ``cp -r x/. /``): every file it holds replaces the system's."""
    argv = c.argv
    if inv.program in ("tar", "bsdtar", "gtar"):
        extracting = tar_extracts(argv)
        dirs = [argv[k + 1] for k, w in enumerate(argv[:-1]) if w in ("-C", "--directory", "--cd")]
        dirs += [w.split("=", 1)[1] for w in argv if w.startswith(("--directory=", "--cd="))]
        dirs += [w[2:] for w in argv[1:] if w.startswith("-C") and len(w) > 2]
        hit = next((d for d in dirs if _root_or_system(d)), None)
        if extracting and hit is not None:
            return f"unpacking an archive over {hit}"
    if inv.program in ("unzip", "7z", "7za", "unrar", "bsdunzip"):
        dirs = [argv[k + 1] for k, w in enumerate(argv[:-1]) if w == "-d"]
        dirs += [w[2:] for w in argv[1:] if w.startswith(("-d", "-o")) and len(w) > 2 and inv.program != "unzip"
                 or (inv.program == "unzip" and w.startswith("-d") and len(w) > 2)]
        hit = next((d for d in dirs if _root_or_system(d)), None)
        if hit is not None:
            return f"unpacking an archive over {hit}"
    if inv.program in ("cp", "rsync") and inv.operands and (
            inv.has_flag("-r") or inv.has_flag("-a") or inv.has_flag("--archive") or inv.has_flag("--recursive")) \
            and len(inv.operands) >= 2 and _root_or_system(inv.operands[-1]):
        return f"copying a tree over {inv.operands[-1]}"
    return None


CommandCheck = Callable[[Command, Words, "str | None"], "str | None"]
COMMAND_CHECKS: Final[tuple[tuple[str, CommandCheck], ...]] = (
    ("rm-protected", _rm_protected),
    ("find-delete", _find_delete),
    ("sync-delete", _sync_delete),
    ("chmod-protected", _chmod_protected),
    ("move-protected", _move_protected),
    ("format-disk", _format_disk),
    ("write-device", _write_device),
    ("overwrite-root", _overwrite_root),
    ("power", _power),
    ("kernel", _kernel),
    ("system-file", _system_file),
)
RULE_IDS: Final = tuple(dict.fromkeys(rule for rule, _ in COMMAND_CHECKS)) + ("fork-bomb", "download-to-shell", "too-deep")


def _reads_stdin_script(c: Command) -> bool:
    """A shell or interpreter that runs what comes in on stdin (``bash``, ``sh -s``,
    ``python3 -``, ``python3``)."""
    if c.program in SHELLS:
        return shell_script(c.argv)[1]
    if c.program in INTERPRETERS or _PYTHON.fullmatch(c.program):
        operands = normalize(c.argv).operands
        return not operands or operands[0] == "-"
    return False


_PYTHON: Final = re.compile(r"python\d(\.\d+)?")


def _download_to_shell(analysis: Analysis) -> Hit | None:
    """Downloaded text reaching code: in a pipeline, a stage that fetches from the network
    (:func:`_fetches`) and a later one, through any stages between (``tee``, ``cat``,
    ``base64 -d``), that runs what it reads as code (:func:`_runs_its_input`); or a
    shell, interpreter, ``eval`` or ``source`` running a fetcher's output through ``$(…)`` or
    ``<(…)``."""
    for spans in analysis.stage_spans:
        fetched = False
        for span in spans:
            if fetched and _runs_its_input(analysis, span, set()):
                return Hit("download-to-shell", "running downloaded text as code", analysis.text)
            fetched = fetched or _fetches(analysis, span)
    for c in analysis.commands:
        if c.sub_programs and (c.program in INTERPRETERS or c.program in ("eval", "source", ".")) \
                and c.sub_programs & FETCHERS:
            return Hit("download-to-shell", "running a downloaded script", _shown(c))
    return None


def _fetches(analysis: Analysis, span: tuple[int, int, int, int]) -> bool:
    """Whether a pipeline stage (its span of commands) may write what it fetched from the
    network: a fetcher in it (in a ``$(…)`` of it too), or a read from ``/dev/tcp``/``/dev/udp``."""
    for c in analysis.commands[span[0]:span[1]]:
        if c.program in FETCHERS and (c.program != "openssl" or "s_client" in c.argv):
            return True
        if any(op in ("<", "<>") and target.startswith(("/dev/tcp/", "/dev/udp/")) for op, target in c.redirects):
            return True
    return False


def _runs_its_input(analysis: Analysis, span: tuple[int, int, int, int], called: set[str]) -> bool:
    """Whether a pipeline stage may run what it reads as code: a command in it (or in a
    function of the line it calls) that runs its stdin as a script (``sh``, ``python3 -``,
    ``source /dev/stdin``, ``at now``); whose code is only known when it runs (``sh -c
    "$(cat)"``, ``perl -e "$x"``, the input of ``xargs … bash -c`` or ``xargs -I{} sh -c {}``,
    ``bash <(cat)``, ``$line``, ``parallel`` without a command); or anything the analysis
    could not judge in it (``eval "$l"``)."""
    if span[3] > span[2]:
        return True
    for c in analysis.commands[span[0]:span[1]]:
        if not c.argv:
            continue
        if (reads_script_from_stdin(c) or _reads_stdin_script(c)) and not any(op in _OWN_INPUT for op, _ in c.redirects):
            return True
        if any(UNKNOWN in p or UNKNOWN_QUOTED in p for p in _code_patterns(c)):
            return True
        if c.program == "parallel" and not any(w in (":::", "::::") for w in c.argv) and \
                _skip_options(c.argv, WRAPPERS["parallel"].value_options, 0) is None:
            return True  # (it runs the lines it reads as commands)
        if c.program in analysis.function_spans and c.program not in called:
            called.add(c.program)
            if any(_runs_its_input(analysis, body, called) for body in analysis.function_spans[c.program]):
                return True
    return False


_OWN_INPUT: Final = frozenset({"<", "<<", "<<-", "<<<", "<&"})
_CODE_FLAG: Final = re.compile(r"-[A-Za-z]*[ceEr]|--eval|--exec|-p|--print")
_AWKS: Final = frozenset({"awk", "gawk", "mawk", "nawk"})
_OTHER_INTERPRETERS: Final = frozenset({"lua", "luajit", "tclsh", "Rscript", "deno", "bun", "pwsh", "osascript", "jshell",
                                        "irb", "php", "node", "nodejs", "ruby", "perl"})


def _code_patterns(c: Command) -> list[str]:
    """The patterns of the words ``c`` runs as code: the program's name; a shell's or an
    interpreter's options and its ``-c``/``-e`` script or script file (not the arguments after
    it); ``eval``'s words; what ``source`` reads; awk's program."""
    shape = _patterns(c)
    out = [shape[0]]
    program = c.program
    if program in ("eval",):
        return [*out, *shape[1:]]
    if program in ("source", "."):
        return [*out, *shape[1:2]]
    if not (program in SHELLS or program in _OTHER_INTERPRETERS or program in INTERPRETERS or program in _AWKS
            or _PYTHON.fullmatch(program)):
        return out
    argv = c.argv + shape[len(c.argv):]  # (what xargs or parallel append is patterns only)
    k = 1
    while k < len(argv):
        word = argv[k]
        if word == "--":
            k += 1
            break
        if not word.startswith(("-", "+")) or word in ("-", "+"):
            break
        out.append(shape[k])  # (an option spelled by an expansion may be -c and its code)
        if program in _AWKS and word in ("-f", "--file"):
            return out  # (the program is a file it names)
        if (_CODE_FLAG.fullmatch(word) and not (_PYTHON.fullmatch(program) or program in SHELLS)) or \
                ((_PYTHON.fullmatch(program) or program in SHELLS) and not word.startswith("--") and "c" in word[1:]):
            if k + 1 < len(argv):
                out.append(shape[k + 1])
            if _PYTHON.fullmatch(program) or program in SHELLS:
                return out  # (the rest are its arguments)
            k += 2
            continue
        if program in SHELLS and word in ("-o", "+o", "-O", "+O", "--rcfile", "--init-file"):
            k += 2
            continue
        k += 1
    if k < len(argv):
        out.append(shape[k])  # the script file (or awk's program)
    return out


def _checks_for(program: str, writes: bool) -> tuple[tuple[str, CommandCheck], ...]:
    """The checks that can hit a command of ``program`` (``writes``: it redirects output
    or names an output file): from a table made at import for the programs some check
    names; for any other program only the checks of writes (and format-disk's pattern)."""
    found = _CHECKS_BY_PROGRAM.get((program, writes))
    if found is not None:
        return found
    # (FORMATTERS only matches names with one of these starts: most programs skip the regex)
    if _CHECKS_BY_PROGRAM is _NO_TABLE or (program.startswith(_FORMATTER_STARTS) and FORMATTERS.match(program)):
        return _compute_checks(program, writes)
    return _WRITE_CHECKS if writes else ()


_FORMATTER_STARTS: Final = ("mk", "wipefs", "newfs", "blkdiscard", "badblocks")


def _compute_checks(program: str, writes: bool) -> tuple[tuple[str, CommandCheck], ...]:
    checks = [(rule, check) for rule, check, programs in _CHECKS
              if (programs is None or program in programs) or (writes and rule in _WRITE_RULES)
              or (rule == "format-disk" and FORMATTERS.match(program))]
    return tuple(checks)


def _checks() -> list[tuple[str, CommandCheck, frozenset[str] | None]]:
    return [(rule, check, _CHECK_PROGRAMS.get(rule)) for rule, check in COMMAND_CHECKS]


_HOMES: Final[dict[str | None, str]] = {}


def _home() -> str:
    """``str(Path.home())``, once per value of ``$HOME`` (which it is read from)."""
    key = os.environ.get("HOME")
    home = _HOMES.get(key)
    if home is None:
        if len(_HOMES) > 8:
            _HOMES.clear()
        home = _HOMES[key] = str(Path.home())
    return home


def hits(analysis: Analysis, home: str | None = None) -> Iterator[Hit]:
    """Every built-in rule the analysed command line breaks (usually zero or one)."""
    home = home if home is not None else _home()
    if analysis.opaque:
        yield Hit("too-deep", "commands nested too deeply to check", analysis.text[:200])
    if analysis.fork_bomb:
        yield Hit("fork-bomb", "a fork bomb", analysis.text)
    download = _download_to_shell(analysis)
    if download is not None:
        yield download
    bases = _directories_changed_to(analysis, home)
    # the hits of each command judged so far: a command equal to an earlier one (the same
    # words, patterns, redirections and wrapper; a long line repeats ``wc -l``, ``grep``)
    # breaks the same rules, as every check is a pure function of the command, its
    # normalized words, ``home`` and ``bases`` (all fixed for the call): its hits are
    # yielded again, not recomputed. (Nothing outlives the call.)
    judged: dict[Command, list[Hit]] = {}
    for command in analysis.commands:
        program = command.program
        # a program whose checks do not depend on whether it writes needs no look at its words
        checks = _SAME_EITHER_WAY.get(program)
        if checks is None:
            # whether it redirects output (not to a harmless target) or names an output file:
            # a word of argv[1:] starting with -o, --output, --file, of= or -O (a line of the
            # words joined by newlines starting so: what _OUTPUT_WORD's search finds, in
            # substring tests that cost half as much)
            writes = False
            for op, target in command.redirects:
                if op in WRITE_REDIRECTIONS and target not in _HARMLESS_TARGETS:
                    writes = True
                    break
            argv = command.argv
            if not writes and len(argv) > 1:
                joined = "\n" + "\n".join(argv[1:])
                writes = ("\n-o" in joined or "\n-O" in joined or "\n--output" in joined or "\n--file" in joined
                          or "\nof=" in joined)
            checks = (_CHECKS_WRITING if writes else _CHECKS_NOT_WRITING).get(program)  # _CHECKS_BY_PROGRAM's
            if checks is None:
                if not writes and _CHECKS_BY_PROGRAM is not _NO_TABLE and not program.startswith(_FORMATTER_STARTS):
                    continue  # what _checks_for gives any other program that writes nothing: no check
                checks = _checks_for(program, writes)
        if not checks:
            continue
        known = judged.get(command)
        if known is not None:
            yield from known
            continue
        found: list[Hit] = []
        for hit in _command_hits(command, checks, bases, home):  # (lazily: first_hit stops at one)
            found.append(hit)
            yield hit
        judged[command] = found


def _command_hits(command: Command, checks: tuple[tuple[str, CommandCheck], ...], bases: list[str],
                  home: str | None) -> Iterator[Hit]:
    """The hits of one command: each of ``checks``, and for a program that takes paths, each
    again with its relative operands under each directory of ``bases`` (``cd`` targets)."""
    inv = Words(command.argv)
    moves = bases if command.program in _PATH_PROGRAMS else ()
    rebased_under: dict[str, Command | None] = {}  # made when a check needs it
    for rule, check in checks:
        reason = check(command, inv, home)
        if reason is None and moves and rule not in _SAME_UNDER_ANY_BASE:
            for base in moves:
                if rule in _SAME_UNDER_AN_UNKNOWN_BASE and base.startswith(_UNKNOWN_STARTS):
                    continue
                rebased = rebased_under[base] if base in rebased_under else \
                    rebased_under.setdefault(base, _rebased(command, base))
                if rebased is not None:
                    reason = check(rebased, inv, home)
                    if reason is not None:
                        reason += f" (after cd {_unescape(base)})"
                        break
        if reason is not None:
            yield Hit(rule, reason, _shown(command))


_HARMLESS_TARGETS: Final = frozenset({"/dev/null", "/dev/stdout", "/dev/stderr", "0", "1", "2", "-"})
_WRITE_RULES: Final = frozenset({"write-device", "kernel", "system-file"})
_PATH_PROGRAMS: Final = frozenset({"rm", "find", "rsync", "chmod", "chown", "chgrp", "chattr", "setfacl", "chcon", "mv",
                            "tee", "truncate", "shred", "sponge", "unlink", "cp", "install", "ln", "sed", "perl"})
_CHECK_PROGRAMS: Final[dict[str, frozenset[str] | None]] = {
    "rm-protected": frozenset({"rm", "rimraf"}),
    "find-delete": frozenset({"find"}),
    "sync-delete": frozenset({"rsync"}),
    "chmod-protected": frozenset({"chmod", "chown", "chgrp", "chattr", "setfacl", "chcon"}),
    "move-protected": frozenset({"mv"}),
    "format-disk": frozenset(DISK_TOOLS),
    "write-device": frozenset({"dd", "ddrescue", "dcfldd", "tee", "shred", "truncate", "badblocks", "sponge",
                               "blkdiscard", "cp", "mv", "install", "rsync", "pv", "tar", "find"}),
    "overwrite-root": frozenset({"tar", "bsdtar", "gtar", "unzip", "7z", "7za", "unrar", "bsdunzip", "cp", "rsync"}),
    "power": POWER_PROGRAMS | {"init", "telinit", "systemctl", "loginctl", "service", "kill", "pkill", "killall",
                               "dbus-send", "gdbus", "busctl", "qdbus", "qdbus6"},
    "kernel": KERNEL_PROGRAMS | {"modprobe", "sysctl", "swapoff", "umount", "mount", "tee", "dd", "cp", "sponge"},
    "system-file": WRITERS | {"sed", "perl", "patch", "chmod", "chown", "chgrp", "chattr", "passwd", "userdel",
                              "usermod", "deluser", "chpasswd", "visudo", "vipw", "groupdel", "tar", "sort", "gcc",
                              "cc", "clang", "ld"},
}


def _directories_changed_to(analysis: Analysis, home: str | None) -> list[str]:
    """Patterns of the directories a ``cd``/``pushd`` in the line may move to, when one of
    them may be protected: relative paths after it are judged from there too
    (``cd / && rm -rf *``)."""
    bases: list[str] = []
    for c in analysis.commands:
        if c.program not in ("cd", "pushd"):
            continue
        shape = [p for a, p in zip(c.argv[1:], _patterns(c)[1:]) if not a.startswith("-") or a == "-"]
        target = shape[0] if shape else "~"
        target = UNKNOWN_QUOTED if target == "-" else target
        if possibly_protected(target, home) and target not in bases:
            bases.append(target)
    return bases


_NOT_RELATIVE: Final = ("-", "/", "~", UNKNOWN, UNKNOWN_QUOTED)
# Checks a command rebased under a cd's directory (_rebased: only its patterns change) needs
# no second look from: these never read a command's patterns (argv, redirections and the
# normalized argv only), so they answer for the rebased command what they did for it …
_SAME_UNDER_ANY_BASE = frozenset({"format-disk", "overwrite-root", "power", "kernel"})
# … and these only find absolute paths (/dev/…, /etc/passwd …) among the operands a base
# changes, which a base that begins with an expansion (``cd "$X"``, ``cd $(…)``) turns into
# relative patterns ("\x02/sda"): for such a base they answer what they did without it
_SAME_UNDER_AN_UNKNOWN_BASE = frozenset({"system-file", "write-device"})
_UNKNOWN_STARTS: Final = (UNKNOWN, UNKNOWN_QUOTED)


def _rebased(c: Command, base: str) -> Command | None:
    """``c`` with its relative operands put under ``base``."""
    if c.program == "find" and _find_starts(c) == [(".", ".")] and "." not in c.argv:
        # (find without a starting point starts at "."; spelled out, it is rebased like any)
        c = Command((c.argv[0], ".", *c.argv[1:]), c.redirects, c.wrapper, c.privileged, c.sub_programs,
                    (_patterns(c)[0], ".", *_patterns(c)[1:]))
    shapes = list(_patterns(c))
    under = base.rstrip("/") + "/"
    changed = False
    for k in range(1, len(shapes)):
        p = shapes[k]
        if p.startswith(_NOT_RELATIVE) or "=" in p:
            continue
        shapes[k] = under + p
        changed = True
    if not changed:
        return None
    return Command(c.argv, c.redirects, c.wrapper, c.privileged, c.sub_programs, tuple(shapes))


def first_hit(analysis: Analysis, home: str | None = None) -> Hit | None:
    return next(hits(analysis, home), None)


_CHECKS: Final = _checks()
_NO_TABLE: Final[dict[tuple[str, bool], tuple[tuple[str, CommandCheck], ...]]] = {}


def _checks_table() -> dict[tuple[str, bool], tuple[tuple[str, CommandCheck], ...]]:
    if any(programs is None for _, _, programs in _CHECKS):
        return _NO_TABLE  # a check for every program: no shortcut
    named = set().union(*(programs for _, _, programs in _CHECKS if programs is not None))
    return {(program, writes): _compute_checks(program, writes) for program in named for writes in (False, True)}


_CHECKS_BY_PROGRAM: Final = _checks_table()
_WRITE_CHECKS: Final = _compute_checks("", True)
# _CHECKS_BY_PROGRAM split by ``writes`` (a lookup without a key tuple)
_CHECKS_WRITING: Final = {program: checks for (program, writes), checks in _CHECKS_BY_PROGRAM.items() if writes}
_CHECKS_NOT_WRITING: Final = {program: checks for (program, writes), checks in _CHECKS_BY_PROGRAM.items() if not writes}
# the programs of the table whose checks are the same whether or not they write
_SAME_EITHER_WAY: Final = {program: checks for (program, writes), checks in _CHECKS_BY_PROGRAM.items()
                    if writes and _CHECKS_BY_PROGRAM[(program, False)] == checks}
