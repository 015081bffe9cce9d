"""The built-in deny list: commands too destructive to run in any mode.

These checks run on every command a tool would run (:func:`commands.analyze` finds them
at any depth and under any wrapper, and :func:`commands.normalize` reads each one's
flags whatever their spelling), before settings rules and the permission mode, and
nothing turns them off: not ``bypassPermissions``, not an allow rule. Each is a pure
predicate with an id (shown in the denial and in the README):

=======================  ==============================================================
id                       refuses
=======================  ==============================================================
``rm-protected``         recursive ``rm`` of ``/``, ``/*``, a top-level system
                         directory, ``~``/``$HOME`` (or its ``/*``), ``..`` (or
                         ``../*``, ``../..``); also any ``rm --no-preserve-root``
``find-delete``          ``find`` starting at one of those paths with ``-delete`` or an
                         ``-exec rm``
``chmod-protected``      recursive ``chmod``/``chown``/``chgrp`` of one of those paths
``move-protected``       ``mv`` of one of those paths
``format-disk``          ``mkfs``, ``mkfs.*``, ``mke2fs``, ``mkswap``, ``wipefs``,
                         ``mkntfs``, ``mkdosfs``
``write-device``         ``dd of=/dev/…``, ``> /dev/…``, ``tee``/``cp``/``shred`` onto a
                         device (``/dev/null``, ``/dev/std*``, ``/dev/tty``, ``/dev/fd/*``,
                         ``/dev/shm/*`` and the like are fine)
``fork-bomb``            a function that pipes into itself or re-runs itself in the
                         background (``:(){ :|:& };:``)
``download-to-shell``    ``curl``/``wget`` output piped into a shell or interpreter, or
                         run by one through ``$(…)``/``<(…)``
``power``                ``shutdown``, ``reboot``, ``halt``, ``poweroff``, ``init 0``/
                         ``init 6``, ``systemctl poweroff|reboot|halt``
``too-deep``             a command line nested deeper than the analysis follows (more
                         than ``MAX_DEPTH`` levels of ``bash -c``/``$(…)``): what it
                         hides cannot be checked
=======================  ==============================================================

This is a seatbelt, not a sandbox: a program can still do any of it from inside an
interpreter (``python -c "shutil.rmtree('/')"``). The sandbox is what confines commands.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from pathlib import Path
from typing import Callable, Iterator

from agent_code.policy.commands import (INTERPRETERS, SHELLS, Analysis, Command, Invocation, normalize,
                                       normalize_path, shell_script)
from agent_code.policy.shell_syntax import WRITE_REDIRECTIONS

SYSTEM_DIRS = frozenset({"/bin", "/boot", "/dev", "/etc", "/home", "/lib", "/lib32", "/lib64", "/opt", "/proc",
                         "/root", "/sbin", "/srv", "/sys", "/usr", "/var", "/Users", "/System", "/Library",
                         "/Applications"})
SAFE_DEVICES = re.compile(r"^/dev/(null|zero|full|random|urandom|stdin|stdout|stderr|tty|ptmx|fd/\d+|pts/.*|"
                          r"shm(/.*)?)$")
DOWNLOADERS = frozenset({"curl", "wget", "fetch", "aria2c", "http", "https"})
FORMATTERS = re.compile(r"^(mkfs(\..+)?|mke2fs|mkswap|wipefs|mkntfs|mkdosfs|mkfs_msdos|newfs(_.+)?)$")


@dataclass(frozen=True)
class Hit:
    """One built-in rule that a command breaks: the rule's id, what it refuses, and the
    offending command as the model wrote it (or the part of it that matters)."""

    rule: str
    reason: str
    command: str


def is_protected(word: str, home: str | None = None) -> bool:
    """Whether removing or re-owning ``word`` recursively would wreck the machine or
    the user's home: ``/``, ``/*``, a top-level system directory (or its ``/*``), ``~``,
    ``$HOME``, the real home directory (each or its ``/*``), and ``..`` chains."""
    path = normalize_path(word)
    base = path.removesuffix("/*")
    if base in ("", "/") or path == "/*":
        return True
    if base in SYSTEM_DIRS:
        return True
    if base in ("~", "$HOME") or (home and base == normalize_path(home)):
        return True
    return bool(re.fullmatch(r"\.\.(/\.\.)*", base))


def _shown(command: Command) -> str:
    """The command as words, with its redirections."""
    return " ".join([*command.argv, *(f"{op} {target}" for op, target in command.redirects)])


def _rm_protected(c: Command, inv: Invocation, home: str | None) -> str | None:
    if inv.program != "rm":
        return None
    if inv.has_flag("--no-preserve-root"):
        return "rm --no-preserve-root"
    if inv.has_flag("-r") and any(is_protected(op, home) for op in inv.operands):
        target = next(op for op in inv.operands if is_protected(op, home))
        return f"recursive removal of {target}"
    return None


def _find_delete(c: Command, inv: Invocation, home: str | None) -> str | None:
    if inv.program != "find":
        return None
    starts = []
    for word in c.argv[1:]:
        if word.startswith("-") or word in ("(", "!"):
            break
        starts.append(word)
    runs_rm = any(word in ("-exec", "-execdir", "-ok", "-okdir") and nxt.rsplit("/", 1)[-1] == "rm"
                  for word, nxt in zip(c.argv, c.argv[1:]))
    if (inv.has_flag("-delete") or runs_rm) and any(is_protected(s, home) for s in starts):
        return f"find deleting under {next(s for s in starts if is_protected(s, home))}"
    return None


def _chmod_protected(c: Command, inv: Invocation, home: str | None) -> str | None:
    if inv.program in ("chmod", "chown", "chgrp") and inv.has_flag("-R"):
        target = next((op for op in inv.operands if is_protected(op, home)), None)
        if target is not None:
            return f"recursive {inv.program} of {target}"
    return None


def _move_protected(c: Command, inv: Invocation, home: str | None) -> str | None:
    if inv.program == "mv" and len(inv.operands) >= 2:
        target = next((op for op in inv.operands[:-1] if is_protected(op, home)), None)
        if target is not None:
            return f"moving {target}"
    return None


def _format_disk(c: Command, inv: Invocation, home: str | None) -> str | None:
    return f"formatting a disk ({inv.program})" if FORMATTERS.match(inv.program) else None


def _is_device(path: str) -> bool:
    path = normalize_path(path)
    return path.startswith("/dev/") and not SAFE_DEVICES.match(path)


def _write_device(c: Command, inv: Invocation, home: str | None) -> str | None:
    for op, target in c.redirects:
        if op in WRITE_REDIRECTIONS and _is_device(target):
            return f"writing to the device {target}"
    if inv.program == "dd":
        for word in c.argv[1:]:
            if word.startswith("of=") and _is_device(word[3:]):
                return f"writing to the device {word[3:]}"
    if inv.program in ("tee", "shred") and any(_is_device(op) for op in inv.operands):
        return f"writing to the device {next(op for op in inv.operands if _is_device(op))}"
    if inv.program in ("cp", "mv", "install", "rsync") and inv.operands and _is_device(inv.operands[-1]):
        return f"writing to the device {inv.operands[-1]}"
    return None


def _power(c: Command, inv: Invocation, home: str | None) -> str | None:
    if inv.program in ("shutdown", "reboot", "halt", "poweroff"):
        return f"{inv.program} of the machine"
    if inv.program in ("init", "telinit") and inv.operands[:1] in (("0",), ("6",)):
        return f"{inv.program} {inv.operands[0]}"
    if inv.program == "systemctl" and set(inv.operands) & {"poweroff", "reboot", "halt", "kexec"}:
        return "systemctl " + next(o for o in inv.operands if o in ("poweroff", "reboot", "halt", "kexec"))
    return None


CommandCheck = Callable[[Command, Invocation, "str | None"], "str | None"]
COMMAND_CHECKS: tuple[tuple[str, CommandCheck], ...] = (
    ("rm-protected", _rm_protected),
    ("find-delete", _find_delete),
    ("chmod-protected", _chmod_protected),
    ("move-protected", _move_protected),
    ("format-disk", _format_disk),
    ("write-device", _write_device),
    ("power", _power),
)
RULE_IDS = tuple(rule for rule, _ in COMMAND_CHECKS) + ("fork-bomb", "download-to-shell", "too-deep")


def _reads_stdin_script(c: Command) -> bool:
    """A shell or interpreter that runs what comes in on stdin (``bash``, ``sh -s``,
    ``python3 -``, ``python3``)."""
    if c.program in SHELLS:
        return shell_script(c.argv)[1]
    if c.program in INTERPRETERS or re.fullmatch(r"python\d(\.\d+)?", c.program):
        operands = normalize(c.argv).operands
        return not operands or operands[0] == "-"
    return False


def _download_to_shell(analysis: Analysis) -> Hit | None:
    for stages in analysis.pipelines:
        seen_download = False
        for stage in stages:
            if stage is None:
                continue
            if seen_download and _reads_stdin_script(stage):
                return Hit("download-to-shell", "running a downloaded script", analysis.text)
            seen_download |= stage.program in DOWNLOADERS
    for c in analysis.commands:
        if (c.program in INTERPRETERS or c.program in ("eval", "source", ".")) and c.sub_programs & DOWNLOADERS:
            return Hit("download-to-shell", "running a downloaded script", _shown(c))
    return None


def hits(analysis: Analysis, home: str | None = None) -> Iterator[Hit]:
    """Every built-in rule the analysed command line breaks (usually zero or one)."""
    home = home if home is not None else str(Path.home())
    if analysis.opaque:
        yield Hit("too-deep", "commands nested too deeply to check", analysis.text[:200])
    if analysis.fork_bomb:
        yield Hit("fork-bomb", "a fork bomb", analysis.text)
    download = _download_to_shell(analysis)
    if download is not None:
        yield download
    for command in analysis.commands:
        inv = normalize(command.argv)
        for rule, check in COMMAND_CHECKS:
            reason = check(command, inv, home)
            if reason is not None:
                yield Hit(rule, reason, _shown(command))


def first_hit(analysis: Analysis, home: str | None = None) -> Hit | None:
    return next(hits(analysis, home), None)
