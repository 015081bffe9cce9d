"""Shell commands as the permission layer sees them: parsed, split and unwrapped.

A rule about commands must not be fooled by spelling. ``rm -r -f /``, ``rm -fr /``,
``rm --recursive --force -- /``, ``sudo rm -rf //``, ``bash -c "rm -rf /"``,
``echo ok; rm -rf /`` and ``x=$(rm -rf /)`` all run the same thing, and a check on the
raw string sees none of that. So a command is taken apart the way bash would, in pure
functions (no process is started, nothing is expanded or looked up):

1. :func:`shell_syntax.parse` (tree-sitter's bash grammar: quoting, operators, compound
   commands, functions, every kind of substitution, here-documents) — pipelines of
   simple and compound commands, each word with its text and its expansion pattern.
   Rule patterns, which are plain words, are split with :mod:`shlex`.
2. :func:`analyze` — every command the text would run, at any depth: substitutions
   (in words, assignments, arithmetic, ``[[ … ]]``, parameter expansions), compound
   commands and function bodies, ``coproc``, ``bash -c``/``sh -c`` scripts (``$1``…
   filled in), ``eval``, ``su -c``, ``script -c``, ``trap``, ``alias``, ``watch``,
   ``find -exec``, here-strings, here-documents and literal ``echo … |`` fed to a shell
   (``bash``, ``bash -s``, ``bash /dev/stdin``), and the command under wrappers
   (``sudo``, ``env X=1``, ``nohup``, ``timeout 5``, ``nice``, ``xargs``, ``command``,
   ``exec``, ``busybox``, ``systemd-run`` …; the wrapper is listed too). What runs but
   cannot be judged (``eval "$x"``, ``$CMD``, a script piped in from another command) is
   listed in ``Analysis.unknown``; tree-sitter's syntax errors in ``Analysis.errors``.
3. :func:`normalize` — one command as program, flags and operands: the program's base
   name (``/bin/rm`` → ``rm``), short flag clusters split (``-rf`` → ``-r -f``), known
   long and upper-case aliases mapped (``--recursive``, ``-R`` → ``-r`` for ``rm``),
   ``--`` honoured, and path operands normalized (``//``, ``/.``, ``a/..``, trailing ``/``,
   ``${HOME}`` → ``$HOME``).

Nesting deeper than :data:`MAX_DEPTH` marks the analysis ``opaque``: the built-in deny
list refuses such a command (what it hides cannot be checked) and no allow rule approves it.
"""

from __future__ import annotations

import posixpath
import re
import shlex
import sys
import dataclasses
from dataclasses import dataclass, field
from functools import lru_cache
from typing import Final, Sequence

from agent_code.policy.evaluated import flat_text, read_values
from agent_code.policy.runners import STARTUP_NAMES, runs_given_command
from agent_code.policy.shell_syntax import (ASSIGNMENT, UNKNOWN, UNKNOWN_QUOTED, Compound, Script, Simple, Stage,
                                           calls_of,
                                           Word, escape, parse)

MAX_DEPTH: Final = 8


# --- what runs: unwrapping ------------------------------------------------------------

SHELLS: Final = frozenset({"sh", "bash", "dash", "zsh", "ksh", "mksh", "ash", "fish", "rbash"})
INTERPRETERS: Final = SHELLS | frozenset({"python", "python3", "perl", "ruby", "node", "php"})


@dataclass(frozen=True)
class Wrapper:
    """A command that runs the command in its arguments: which of its options take a
    value, how many positional arguments come before the wrapped command, and whether
    it changes who runs it (``privileged``: an allow rule must name it too)."""

    value_options: frozenset[str] = frozenset()
    skip: int = 0
    privileged: bool = False


def _w(opts: str = "", skip: int = 0, privileged: bool = False) -> Wrapper:
    return Wrapper(frozenset(opts.split()), skip, privileged)


WRAPPERS: Final[dict[str, Wrapper]] = {
    "sudo": _w("-u --user -g --group -p --prompt -C --close-from -D --chdir -h --host -r --role -t "
               "--type -U --other-user -T --command-timeout", privileged=True),
    "doas": _w("-u -C", privileged=True),
    "pkexec": _w("--user", privileged=True),
    "runuser": _w("-u -g -G --user --group --supp-group", privileged=True),
    "chroot": _w("--userspec --groups", skip=1, privileged=True),
    "env": _w("-u --unset -C --chdir"),
    "nice": _w("-n --adjustment"),
    "ionice": _w("-c --class -n --classdata -p --pid"),
    "nohup": _w(),
    "setsid": _w(),
    "time": _w("-f --format -o --output"),
    "timeout": _w("-s --signal -k --kill-after", skip=1),
    "stdbuf": _w("-i -o -e --input --output --error"),
    "command": _w(),
    "builtin": _w(),
    "exec": _w("-a"),
    "xargs": _w("-a --arg-file -d --delimiter -E --eof -I --replace -L --max-lines -n --max-args -P "
                "--max-procs -s --max-chars --process-slot-var"),
    "busybox": _w(), "toybox": _w(),
    "unbuffer": _w(),
    "chrt": _w(skip=1),
    "taskset": _w(skip=1),
    "strace": _w("-o -e -p -s -u -E -P -I"),
    "flock": _w("-w --wait --timeout -E --conflict-exit-code", skip=1),
    "caffeinate": _w("-t -w"),
    "systemd-run": _w("-u --unit -p --property -E --setenv -M --machine --description --slice -H --host "
                      "--uid --gid --working-directory -D --on-calendar --on-active", privileged=True),
    "nsenter": _w("-t --target -S --setuid -G --setgid", privileged=True),
    "unshare": _w("--map-user --map-group --propagation --setgroups"),
    "firejail": _w(),
    "parallel": _w("-j --jobs -S --sshlogin --delay --timeout"),
    "npx": _w("-p --package -c --call"), "bunx": _w("-p --package"), "pnpx": _w(),
    "fakeroot": _w("-l --lib --faked -s -i -b"), "fakechroot": _w(), "catchsegv": _w(),
    "ltrace": _w("-o -e -p -s -u -n"), "proxychains": _w("-f"), "proxychains4": _w("-f"), "torsocks": _w(),
    "screen": _w("-S -c -L -Logfile -p -t -T -e -h -s"),
    "then": _w(), "do": _w(), "else": _w(), "!": _w(),
}
# git config keys whose value git runs as a shell command (``git -c core.pager='…' log``)
_GIT_PROGRAM_KEYS: Final = re.compile(r"^(alias\.[^=]+|core\.(fsmonitor|pager|sshcommand|editor|askpass|hookspath)"
                               r"|diff\.external|diff\.[^=]+\.(textconv|command)|filter\.[^=]+\.(clean|smudge|process)"
                               r"|pager\.[^=]+|sequence\.editor|gpg\.(program|[^=]+\.program)|credential\.helper"
                               r"|uploadpack\.packobjectshook|merge\.[^=]+\.driver|interactive\.difffilter"
                               r"|web\.browser|browser\.[^=]+\.(cmd|path))=(.*)$", re.IGNORECASE | re.DOTALL)
# programs that take a shell command (or a script they cannot show) as an argument
_EDITORS: Final = frozenset({"vi", "vim", "nvim", "ex", "view", "gvim", "emacs", "nano"})
# one of runners.STARTUP_NAMES set in any way (`PS4=`, `PS4+=`, `printf -v PS4`, `read PS4`,
# `export BASH_ENV`, `for PS4 in …`)
_SHELL_STARTUP_VARIABLES: Final = re.compile(r"\b" + STARTUP_NAMES + r"(?:\[[^]]*\])?\+?=|\b(?:printf\s+-v|read|export|declare"
                                      r"|typeset|local|readonly|mapfile|readarray|getopts|wait\s+-p|for|select)\b"
                                      r"[^;&|\n]*\b" + STARTUP_NAMES + r"\b|\bprintf\b[^;&|\n]*\s-v" + STARTUP_NAMES
                                      + r"\b")


def _may_name_startup_code(text: str) -> bool:
    """Whether ``text`` holds a piece every match of :data:`_SHELL_STARTUP_VARIABLES`
    holds: the regex tries its alternatives at every character (0.1 ms on a 2 kB
    line), these substring tests take a microsecond."""
    return "ENV" in text or "OPT" in text or "PS" in text or "PROMPT_COMMAND" in text or "BASH_" in text \
        or "EXECIGNORE" in text or "GIT_" in text or "EDITOR" in text or "VISUAL" in text or "LESS" in text \
        or "LD_PRELOAD" in text or "LD_AUDIT" in text or "BROWSER" in text


_RUNS_MORE: Final = frozenset({"git", "tmux", "make", "gmake", *_EDITORS})


def _runs_more(leaf: tuple[str, ...], depth: int, out: Analysis) -> None:
    """Commands a program runs from its arguments that are not a wrapper's argv: git's
    ``-c KEY=CMD`` for keys whose value is a command (its aliases' ``!…`` included), a
    multiplexer's or editor's command, make reading its makefile from stdin, a shell
    whose startup variables name code."""
    program = program_name(leaf[0])
    if program == "git":
        for k, word in enumerate(leaf[1:-1], start=1):
            if word == "-c" or (word.startswith("-c") and len(word) > 2):
                value = leaf[k + 1] if word == "-c" else word[2:]
                found = _GIT_PROGRAM_KEYS.match(value)
                if found:
                    script = found.group(found.lastindex or 0)
                    _walk(script[1:] if script.startswith("!") else script, depth + 1, out)
            elif word.startswith("--config-env"):
                out.unknown.append("git takes a config value from the environment")
    elif program == "tmux" and any(w in ("new", "new-session", "new-window", "neww", "split-window", "splitw",
                                         "send-keys", "send", "run-shell", "run", "respawn-pane", "respawnp",
                                         "respawn-window", "respawnw", "pipe-pane", "pipep", "if-shell", "if")
                                   for w in leaf[1:]):
        out.unknown.append("tmux runs a shell command")
    elif program in _EDITORS and any(w.startswith(("-c", "+", "--cmd", "-S", "--eval", "-l", "--load", "-x"))
                                     for w in leaf[1:]):
        out.unknown.append(f"{program} runs editor commands")
    elif program in ("make", "gmake") and any(w in ("-f-", "-f/dev/stdin", "--file=-", "--file=/dev/stdin",
                                                    "--eval", "-E") or w.startswith("--eval=")
                                              or (w in ("-f", "--file", "--makefile")
                                                  and leaf[leaf.index(w) + 1:leaf.index(w) + 2] in (("-",), ("/dev/stdin",)))
                                              for w in leaf[1:]):
        out.unknown.append("make runs recipes only known when it runs")



@dataclass(frozen=True, init=False)
class Command:
    """One command that would run. ``wrapper`` names it when it only runs another command
    (which is listed after it); ``redirects`` are ``(operator, target)``; ``sub_programs``
    are the programs run by substitutions in its words."""

    argv: tuple[str, ...]
    redirects: tuple[tuple[str, str], ...] = ()
    wrapper: str | None = None
    privileged: bool = False
    sub_programs: frozenset[str] = frozenset()
    patterns: tuple[str, ...] = ()  # argv as the shell may expand it (shell_syntax.Word.pattern); () as argv

    def __init__(self, argv: tuple[str, ...], redirects: tuple[tuple[str, str], ...] = (),
                 wrapper: str | None = None, privileged: bool = False,
                 sub_programs: frozenset[str] = frozenset(), patterns: tuple[str, ...] = (),
                 program: str | None = None) -> None:
        # (``program``: argv[0]'s base name, when the caller knows it; an analysis builds one
        # Command per command, a long line a hundred)
        if program is None:
            program = program_name(argv[0]) if argv else ""
        # what the frozen dataclass's own __init__ does, without a setattr call per field
        _set_fields(self, "__dict__", {"argv": argv, "redirects": redirects, "wrapper": wrapper,
                                       "privileged": privileged, "sub_programs": sub_programs,
                                       "patterns": patterns, "program": program})

    program: str = dataclasses.field(init=False, repr=False, compare=False)  # argv[0]'s base name


_set_fields: Final = object.__setattr__  # a frozen instance's whole __dict__ at once


Span = tuple[int, int, int, int]


@dataclass
class Analysis:
    """Everything a command line would run; see :func:`analyze`."""

    text: str
    commands: list[Command] = field(default_factory=list)
    pipelines: list[tuple[Command | None, ...]] = field(default_factory=list)  # leaf command per stage
    fork_bomb: bool = False
    opaque: bool = False  # nested deeper than MAX_DEPTH: not fully seen
    errors: list[str] = field(default_factory=list)   # syntax errors (tree-sitter could not read it all)
    unknown: list[str] = field(default_factory=list)  # what runs but cannot be judged (eval "$x", $cmd …)
    functions: set[str] = field(default_factory=set)  # functions the line defines (their bodies are analysed)
    # a command binds a variable that may be in the environment without "=" (for HOME in …, read
    # PATH), or one whose name is only known when it runs (evaluated.read_values)
    binds_environment: bool = False
    flat: str = ""  # the text after quote removal (evaluated.flat_text), as the patterns read it
    # the call graph of the functions (and aliases) the line defines: (caller, callee, whether
    # the call runs beside its caller); see forks_in_a_cycle
    calls: list[tuple[str, str, bool]] = field(default_factory=list)
    # each pipeline of several stages, as what each stage runs: per stage the span of
    # ``commands`` and of ``unknown`` it added, (first command, end, first unknown, end)
    stage_spans: list[tuple[Span, ...]] = field(default_factory=list)
    # the same spans for the body of each function the line defines, by its name
    function_spans: dict[str, list[Span]] = field(default_factory=dict)


def program_name(word: str) -> str:
    """``/usr/bin/rm`` → ``rm``; ``\\rm`` is already ``rm`` after quote removal."""
    if "/" not in word:
        return word
    return posixpath.basename(word.rstrip("/")) or word


def _skip_options(argv: tuple[str, ...], value_options: frozenset[str], skip: int) -> int | None:
    """Index of the wrapped command in ``argv`` (after the wrapper's options and ``skip``
    positionals), or None when there is none."""
    i = 1
    while i < len(argv):
        a = argv[i]
        if a == "--":
            i += 1
            break
        if a.startswith("-") and a != "-":
            i += 2 if a in value_options else 1
            continue
        break
    i += skip
    return i if i < len(argv) else None


def shell_script(argv: tuple[str, ...]) -> tuple[str | None, bool]:
    """For a shell's argv: the ``-c`` script (its ``$0``, ``$1``… filled in from the
    arguments after it) and whether the shell reads its script from stdin."""
    has_c = reads_stdin = False
    i = 1
    while i < len(argv):
        a = argv[i]
        if a == "--":
            i += 1
            break
        if a in ("-o", "+o", "-O", "+O", "--rcfile", "--init-file"):
            i += 2
            continue
        if a.startswith("--"):
            i += 1
            continue
        if a.startswith(("-", "+")) and len(a) > 1:
            has_c |= "c" in a[1:]
            reads_stdin |= "s" in a[1:]
            i += 1
            continue
        break
    rest = argv[i:]
    if has_c:
        if not rest:
            return None, False
        return _fill_positional(rest[0], rest[1:]), False
    return None, reads_stdin or not rest or rest[0] in ("-", "/dev/stdin", "/proc/self/fd/0", "/dev/fd/0")


def _fill_positional(script: str, args: tuple[str, ...]) -> str:
    """``bash -c 'rm -rf "$1"' _ /``: put the arguments where the script uses them. A
    value goes in as written (an unquoted ``$1`` word-splits in bash: ``bash -c '$0'
    'rm -rf /'`` runs rm), unless it holds quotes, which would change the script's
    quoting: then it goes in quoted (or, holding an expansion, double-quoted)."""
    quoted = [a if not re.search(r"[\"']", a) else
              f'"{a}"' if ("$" in a or "`" in a) and '"' not in a else shlex.quote(a) for a in args]

    def value(m: re.Match[str]) -> str:
        key = m.group(1) or m.group(2)
        if key in ("@", "*"):
            return " ".join(quoted[1:])
        index = int(key)
        return quoted[index] if index < len(quoted) else ""

    script = re.sub(r'"\$([@*])"', lambda m: " ".join(quoted[1:]), script)
    return re.sub(r"\$\{([0-9]+|[@*])\}|\$([0-9]|[@*])", value, script)


def _unwrap(argv: tuple[str, ...]) -> tuple[list[tuple[tuple[str, ...], str, bool]], tuple[str, ...] | None,
                                            list[str], list[tuple[str, ...]]]:
    """Peel wrappers off ``argv``: the wrappers as (argv, name, privileged), the command
    finally run (None if none), scripts it runs (``bash -c``, ``eval``…) and further
    commands it runs directly (``find -exec``)."""
    if argv and program_name(argv[0]) not in _UNWRAPPED:  # the common case: an ordinary program
        return [], argv, [], []
    chain: list[tuple[tuple[str, ...], str, bool]] = []
    scripts: list[str] = []
    extra: list[tuple[str, ...]] = []
    for _ in range(32):
        if not argv:
            return chain, None, scripts, extra
        name = program_name(argv[0])
        if name not in _UNWRAPPED:  # the common case: an ordinary program
            return chain, argv, scripts, extra
        if argv[0] in ("{", "}", "(", ")"):  # `coproc { …; }` reaches here as words
            argv = argv[1:]
            continue
        if name == "coproc":
            chain.append((argv, name, False))
            argv = argv[2:] if len(argv) > 2 and argv[2] in ("{", "(") else argv[1:]
            continue
        if name == "trap":
            chain.append((argv, name, False))
            rest = list(argv[1:])
            while rest and rest[0].startswith("-") and rest[0] not in ("-", "--"):
                rest.pop(0)  # -p, -l, -P: options
            if rest[:1] == ["--"]:
                rest.pop(0)  # (the action after it may start with "-": `trap -- '-;cmd' EXIT`)
            if len(rest) > 1:
                scripts.append(rest[0])
            return chain, None, scripts, extra
        if name == "alias":
            chain.append((argv, name, False))
            scripts.extend(a.split("=", 1)[1] for a in argv[1:] if "=" in a)
            return chain, None, scripts, extra
        if name == "script":
            chain.append((argv, name, False))
            for k, a in enumerate(argv):
                if (a == "--command" or re.fullmatch(r"-[a-zA-Z]*c", a)) and k + 1 < len(argv):
                    scripts.append(argv[k + 1])
                elif a.startswith("--command="):
                    scripts.append(a.split("=", 1)[1])
            return chain, None, scripts, extra
        if name == "env":
            i, split = 1, None
            while i < len(argv):
                a = argv[i]
                if a in ("-S", "--split-string") and i + 1 < len(argv):
                    split = (_split(argv[i + 1]), i + 2)
                elif a.startswith("--split-string="):
                    split = (_split(a.split("=", 1)[1]), i + 1)
                elif a.startswith("-S") and len(a) > 2:
                    split = (_split(a[2:]), i + 1)
                elif a in WRAPPERS["env"].value_options:
                    i += 2
                    continue
                elif a.startswith("-") and a != "-" or ASSIGNMENT.match(a):
                    i += 1
                    continue
                break
            chain.append((argv, "env", False))
            argv = (*split[0], *argv[split[1]:]) if split else argv[i:]
            continue
        wrapper = WRAPPERS.get(name)
        if wrapper is not None:
            chain.append((argv, name, wrapper.privileged))
            start = _skip_options(argv, wrapper.value_options, wrapper.skip)
            if start is None:
                return chain, None, scripts, extra
            argv = argv[start:]
            continue
        if name in ("eval",):
            chain.append((argv, name, False))
            scripts.append(" ".join(argv[1:]))
            return chain, None, scripts, extra
        if name == "su" or (name == "runuser" and ("-c" in argv or "--command" in argv)):
            chain.append((argv, name, True))
            for k, a in enumerate(argv):
                if a in ("-c", "--command") and k + 1 < len(argv):
                    scripts.append(argv[k + 1])
                elif a.startswith("--command="):
                    scripts.append(a.split("=", 1)[1])
            return chain, None, scripts, extra
        if name == "ssh":  # the remote command is a script (and the host may be this one)
            chain.append((argv, name, True))
            k = 1
            while k < len(argv) and argv[k].startswith("-"):
                k += 2 if argv[k] in SSH_VALUE_OPTIONS else 1
            if k + 1 < len(argv):
                scripts.append(" ".join(argv[k + 1:]))
            return chain, None, scripts, extra
        if name == "watch":
            chain.append((argv, name, False))
            start = _skip_options(argv, frozenset({"-n", "--interval", "-q", "--equexit"}), 0)
            if start is not None:
                scripts.append(" ".join(argv[start:]))
            return chain, None, scripts, extra
        if name in SHELLS:
            script, _ = shell_script(argv)
            if script is not None:
                chain.append((argv, name, False))
                scripts.append(script)
                return chain, None, scripts, extra
            return chain, argv, scripts, extra
        if name == "find":
            k = 1
            while k < len(argv):
                if argv[k] in ("-exec", "-execdir", "-ok", "-okdir"):
                    end = k + 1
                    while end < len(argv) and argv[end] not in (";", "+"):
                        end += 1
                    if end > k + 1:
                        extra.append(argv[k + 1:end])
                    k = end
                k += 1
        return chain, argv, scripts, extra
    return chain, argv, scripts, extra


def run_by(argv: tuple[str, ...]) -> tuple[tuple[str, ...] | None, bool]:
    """The command ``argv`` finally runs under its wrappers (``env -i nice -n 5 rm …`` → ``rm …``;
    None when it runs none), and whether a wrapper on the way runs a script instead (``sh -c``,
    ``eval``, ``su -c``, ``ssh HOST CMD``, ``alias``, ``trap`` …)."""
    _, leaf, scripts, _ = _unwrap(argv)
    return leaf, bool(scripts)


_UNWRAPPED: Final = frozenset(WRAPPERS) | SHELLS | {"{", "}", "(", ")", "coproc", "trap", "alias", "script", "env", "eval",
                                           "su", "runuser", "watch", "find", "ssh"}
SSH_VALUE_OPTIONS: Final = frozenset("-b -c -D -E -e -F -I -i -J -L -l -m -O -o -p -Q -R -S -W -w -B".split())


def _split(text: str) -> list[str]:
    try:
        return shlex.split(text)
    except ValueError:
        return text.split()


def _walk(text: str, depth: int, out: Analysis) -> None:
    """Analyse a script given as text (the line itself, a ``bash -c`` script …)."""
    if depth > MAX_DEPTH:
        out.opaque = True
        return
    _walk_script(parse(text), depth, out)


def _walk_script(script: Script, depth: int, out: Analysis) -> None:
    if depth > MAX_DEPTH:
        out.opaque = True
        return
    out.fork_bomb |= script.fork_bomb
    if script.errors:
        out.errors.extend(script.errors)
    names = None
    if script.functions:
        out.functions.update(script.functions)
        names = iter(script.functions)  # (the function stages below define them, in this order)
        out.calls.extend(script.calls)
    for sub in script.substitutions:
        _walk_script(sub, depth + 1, out)
    pipelines = out.pipelines
    for pipeline in script.pipelines:
        if len(pipeline) == 1 and not isinstance(pipeline[0], Compound):  # the common case: one command
            pipelines.append((_simple(pipeline[0], None, depth, out),))
            continue
        leaves: list[Command | None] = []
        previous: tuple[Stage, Command | None] | None = None  # the stage before and its leaf
        spans: list[Span] = []
        for stage in pipeline:
            start, unknown_start = len(out.commands), len(out.unknown)
            if isinstance(stage, Compound):
                _walk_script(stage.body, depth, out)
                if stage.kind == "function" and names is not None:
                    name = next(names, None)
                    if name:
                        out.function_spans.setdefault(name, []).append(
                            (start, len(out.commands), unknown_start, len(out.unknown)))
                if stage.redirects:
                    redirects = tuple((op, target.text) for op, target in stage.redirects)
                    out.commands.append(Command((), redirects))
                    # what runs in the targets and here-document bodies of its redirections
                    # (`a | b > $(…)`: tree-sitter puts them on the whole pipeline)
                    for _, target in stage.redirects:
                        for sub in target.subs:
                            _walk_script(sub, depth + 1, out)
                leaf = _first_leaf(stage.body)
                if previous is not None and _stdin_shell_in(stage.body):
                    _feed(previous, depth, out)
            else:
                leaf = _simple(stage, previous, depth, out)
            leaves.append(leaf)
            previous = (stage, leaf)
            spans.append((start, len(out.commands), unknown_start, len(out.unknown)))
        pipelines.append(tuple(leaves))
        if len(spans) > 1:
            out.stage_spans.append(tuple(spans))


def own_argv(commands: list[Command], index: int) -> tuple[str, ...]:
    """A wrapper's own words (without the command it runs, listed next); others' all."""
    c = commands[index]
    if c.wrapper is not None and index + 1 < len(commands):
        nxt = commands[index + 1].argv
        if nxt and len(nxt) < len(c.argv) and c.argv[-len(nxt):] == nxt:
            return c.argv[:-len(nxt)]
    return c.argv


def _first_leaf(script: Script) -> Command | None:
    """What stands for a compound stage in a pipeline: a downloader or a shell in it (the
    command first run by the first of its pipelines that runs one)."""
    for pipeline in script.pipelines:
        for stage in pipeline[:1]:
            if isinstance(stage, Simple) and stage.words:
                leaf = _unwrap(stage.argv)[1]
                if leaf:
                    return Command(leaf)
    return None


def _stdin_shell_in(script: Script) -> bool:
    for pipeline in script.pipelines:
        stage = pipeline[0] if pipeline else None
        if isinstance(stage, Simple) and stage.words:
            leaf = _unwrap(stage.argv)[1]
            if leaf and program_name(leaf[0]) in SHELLS and shell_script(leaf)[1]:
                return True
        elif isinstance(stage, Compound) and _stdin_shell_in(stage.body):
            return True
    return False


def _simple(stage: Simple, previous: tuple[Stage, Command | None] | None, depth: int,
            out: Analysis) -> Command | None:
    words = stage.words
    argv: tuple[str, ...]
    patterns: tuple[str, ...]
    word_subs: tuple[tuple[Script, ...], ...]
    if not words:
        argv = patterns = word_subs = ()
    else:  # the words' fields as columns, at once (zip runs in C: a third of three comprehensions)
        columns = tuple(zip(*words))
        argv, patterns, word_subs = columns[_TEXT], columns[_PATTERN], columns[_SUBS]
    sub_programs: frozenset[str] = _NO_PROGRAMS
    if any(word_subs) or stage.redirects and any(target.subs for _, target in stage.redirects):
        subs = [sub for w in words if w.subs for sub in w.subs]
        subs += [sub for _, target in stage.redirects if target.subs for sub in target.subs]
        before = len(out.commands)
        for sub in subs:
            _walk_script(sub, depth + 1, out)
        sub_programs = frozenset(c.program for c in out.commands[before:])
    redirects = tuple([(op, target.text) for op, target in stage.redirects]) if stage.redirects else ()
    if "" in patterns:  # no pattern: the text, escaped
        patterns = tuple([w.pattern or escape(w.text) for w in words])
    program = argv[0] if argv else ""
    if program and program not in _NOT_ORDINARY and "/" not in program and "$" not in program \
            and UNKNOWN not in patterns[0] and UNKNOWN_QUOTED not in patterns[0]:
        # (most commands) an ordinary program under its own name: what _expand_argv comes to
        ordinary = Command(argv, redirects, None, False, sub_programs, patterns, program)
        out.commands.append(ordinary)
        leaf: Command | None = ordinary
    else:
        leaf = _expand_argv(argv, redirects, sub_programs, depth, out, patterns, previous)
    if leaf is None and not words and redirects:
        out.commands.append(Command((), redirects))
    if leaf is not None and leaf.program in STDIN_SCRIPT_READERS and reads_script_from_stdin(leaf):
        # a shell reading its script from stdin: here-strings, here-documents, echo |
        fed_by_redirect = False
        for op, target in stage.redirects:
            if op == "<<<":
                _walk(_script_for(leaf, target.text), depth + 1, out)
                fed_by_redirect = True
            elif op in ("<<", "<<-") and target.heredoc is not None:
                _walk(_script_for(leaf, target.heredoc), depth + 1, out)
                fed_by_redirect = True
            elif op == "<":
                fed_by_redirect = True  # a script file, like `bash script.sh`
        if previous is not None and not fed_by_redirect:
            _feed(previous, depth, out, leaf)
    return leaf


def reads_script_from_stdin(leaf: Command) -> bool:
    """Whether ``leaf`` runs the text on its stdin as a script: a shell with no script (``bash``,
    ``sh -s``, ``bash /dev/stdin``), ``source /dev/stdin``, ``at``/``batch``, ``crontab -``."""
    if leaf.program in SHELLS:
        return shell_script(leaf.argv)[1]
    if leaf.program in ("source", "."):
        return len(leaf.argv) > 1 and leaf.argv[1] in STDIN_FILES
    if leaf.program in ("at", "batch"):  # a script run later
        return not any(a in ("-l", "-r", "-d", "-c", "-f", "-V") for a in leaf.argv[1:])
    if leaf.program == "crontab":  # a crontab from stdin: its commands run later
        return (len(leaf.argv) == 1 or leaf.argv[-1] == "-") and not any(a in ("-l", "-r", "-e") for a in leaf.argv)
    return False


def _script_for(leaf: Command, text: str) -> str:
    """What ``leaf`` runs of the ``text`` fed to it: a crontab's lines without their times."""
    if leaf.program != "crontab":
        return text
    lines = []
    for line in text.splitlines():
        line = line.strip()
        if not line or line.startswith("#") or re.match(r"^[A-Za-z_][A-Za-z0-9_]*=", line):
            continue
        fields = line.split(None, 1 if line.startswith("@") else 5)
        lines.append(fields[-1] if len(fields) > (1 if line.startswith("@") else 5) else "")
    return "\n".join(lines)


STDIN_SCRIPT_READERS: Final = frozenset(SHELLS | {"source", ".", "at", "batch", "crontab"})
_NO_PROGRAMS: Final[frozenset[str]] = frozenset()
_SHELLS_AND_SOURCE: Final = SHELLS | {"source", "."}
# programs _expand_argv does more for than list them: wrappers, shells, what _runs_more reads
_NOT_ORDINARY = _UNWRAPPED | _RUNS_MORE | _SHELLS_AND_SOURCE
# Word's columns
_TEXT: Final = Word._fields.index("text")
_PATTERN: Final = Word._fields.index("pattern")
_SUBS: Final = Word._fields.index("subs")


def _feed(previous: tuple[Stage, Command | None], depth: int, out: Analysis, reader: Command | None = None) -> None:
    """A shell reads its script from the stage before it: judge that script if it is
    literal text, else mark the line as holding what cannot be judged."""
    stage, leaf = previous
    fed = _literal_output(stage, leaf) if isinstance(stage, Simple) else None
    if fed is not None:
        _walk(_script_for(reader, fed) if reader is not None else fed, depth + 1, out)
    elif leaf is None or leaf.program not in DOWNLOADING:  # downloads are the deny list's
        out.unknown.append("a shell runs a script piped from another command")


DOWNLOADING: Final = frozenset({"curl", "wget", "fetch", "aria2c", "http", "https"})
STDIN_FILES: Final = frozenset({"/dev/stdin", "/proc/self/fd/0", "/dev/fd/0", "-"})


def _literal_output(stage: Simple, leaf: Command | None) -> str | None:
    """What a pipeline stage writes when it only prints literal text: ``echo``/``printf``
    arguments, ``cat`` of a here-document or here-string."""
    if leaf is None:
        return None
    if leaf.program in ("echo", "printf"):
        args = list(leaf.argv[1:])
        while leaf.program == "echo" and args and re.fullmatch(r"-[neE]+", args[0]):
            args.pop(0)  # echo's own options
        if leaf.program == "printf" and args:
            args[0] = args[0].replace("\\n", "\n").replace("\\n", "\n").replace("%s", " ")
            args[0] = args[0].replace("\\n", "\n").replace("\\t", "\t")
        return " ".join(args)
    if leaf.program == "cat" and len(leaf.argv) == 1:
        for op, target in stage.redirects:
            if op == "<<<":
                return target.text
            if op in ("<<", "<<-") and target.heredoc is not None:
                return target.heredoc
    return None


def _xargs_input(previous: tuple[Stage, Command | None] | None) -> str:
    """The pattern of what ``xargs`` appends to its command, from the stage feeding it:
    ``echo``'s words, a ``find``'s starting points, else anything (:data:`UNKNOWN`)."""
    if previous is None:
        return UNKNOWN
    stage, leaf = previous
    if isinstance(stage, Simple) and leaf is not None:
        if leaf.program in ("echo", "printf") and not any(w.dynamic for w in stage.words):
            return " ".join(escape(a) for a in leaf.argv[1:] if not a.startswith("-"))
        if leaf.program == "find":
            starts = []
            for word in leaf.argv[1:]:
                if word.startswith("-") or word in ("(", "!"):
                    break
                starts.append(escape(word))
            return " ".join(starts) or "."
    return UNKNOWN


_FEEDERS: Final = frozenset({"xargs", "parallel"})
# GNU parallel's replacement strings ({}, {.}, {/}, {//}, {/.}, {#}, {%}, {1} …) as patterns
_PARALLEL_REPLACEMENTS: Final = re.compile(r"\\\{[./#%0-9]*\\\}")


def _replace_string(wrapper: tuple[str, ...]) -> str | None:
    """xargs's replace-string (``-I R``, ``-IR``, ``-i``/``-iR``, ``--replace[=R]``) or None."""
    found = None
    k = 1
    while k < len(wrapper):
        word = wrapper[k]
        k += 1
        if word == "--" or not word.startswith("-") or word == "-":
            break
        if word.startswith("--"):
            name, eq, value = word.partition("=")
            if name == "--replace":
                found = value if eq else "{}"
            elif not eq and name in WRAPPERS["xargs"].value_options:
                k += 1  # its value
            continue
        for j, letter in enumerate(word[1:], start=1):
            if letter == "i":
                found = word[j + 1:] or "{}"
                break
            if letter in "IadELlnPs":  # options that take a value: the rest of the word, or the next
                value = word[j + 1:]
                if not value and k < len(wrapper):
                    value = wrapper[k]
                    k += 1
                if letter == "I":
                    found = value
                break
    return found or None


def _fed(shape: tuple[str, ...], wrapper: tuple[str, ...], name: str, given: str) -> tuple[str, ...]:
    """The patterns of the command ``xargs`` or ``parallel`` runs, given their input (the
    pattern ``given``): put where a replace-string stands (``xargs -I{} sh -c {}``,
    ``parallel rm {}``), else after the command's own words."""
    if name == "parallel":
        if any(w in (":::", "::::", ":::+", "::::+") for w in wrapper):
            return shape  # (its arguments are on the line, not read from the input)
        if any(_PARALLEL_REPLACEMENTS.search(p) for p in shape):
            return tuple(_PARALLEL_REPLACEMENTS.sub(lambda _: given, p) for p in shape)
    else:
        replace = _replace_string(wrapper)
        if replace is not None:
            pattern = escape(replace)
            return tuple(p.replace(pattern, given) for p in shape)
    return (*shape, *given.split(" "))


def _expand_argv(argv: tuple[str, ...], redirects: tuple[tuple[str, str], ...], sub_programs: frozenset[str],
                 depth: int, out: Analysis, patterns: tuple[str, ...] = (),
                 previous: tuple[Stage, Command | None] | None = None) -> Command | None:
    """Add the command ``argv`` (its wrappers first) to ``out``; the command finally run."""
    # a line that unwinds without end (a wrapper or a name that expands to itself) stops
    # here, as deep as substitutions may go: the analysis is opaque (the policy asks)
    if depth > MAX_DEPTH:
        out.opaque = True
        return None
    first = argv[0] if argv else ""
    program = first if "/" not in first else program_name(first)  # program_name(first), without a call
    chain: Sequence[tuple[tuple[str, ...], str, bool]]
    leaf: tuple[str, ...] | None
    scripts: Sequence[str]
    extra: Sequence[tuple[str, ...]]
    if argv and program not in _UNWRAPPED:  # the common case, an ordinary program: nothing to unwrap
        chain, leaf, scripts, extra, shape = (), argv, (), (), patterns
    else:
        chain, leaf, scripts, extra = _unwrap(argv)
        fed_by = None  # (the xargs or parallel above: what it runs is given its input)
        for wrapped, name, privileged in chain:
            fed = _fed(tuple(escape(a) for a in wrapped), *fed_by, _xargs_input(previous)) if fed_by else ()
            out.commands.append(Command(wrapped, redirects, wrapper=name, privileged=privileged,
                                        sub_programs=sub_programs, patterns=fed))
            if name in _FEEDERS and fed_by is None:
                fed_by = (wrapped, name)
        if leaf:
            program = program_name(leaf[0])
            if leaf is argv:
                shape = patterns
            else:
                suffix = len(patterns) == len(argv) and tuple(argv[len(argv) - len(leaf):]) == tuple(leaf)
                shape = patterns[len(argv) - len(leaf):] if suffix else ()
            feeder = next(((wrapped, name) for wrapped, name, _ in chain if name in _FEEDERS), None) if chain else None
            if feeder is not None:
                shape = _fed(shape or tuple(escape(a) for a in leaf), *feeder, _xargs_input(previous))
    if chain and chain[-1][1] == "alias":  # an alias is a node of the call graph too
        for word in chain[-1][0][1:]:
            alias, eq, value = word.partition("=")
            if eq and alias:
                out.calls.extend((alias, called, beside) for called, beside in calls_of(value, alias))
    command = None
    if leaf:
        command = Command(leaf, redirects, None, False, sub_programs, shape, program)
        out.commands.append(command)
        if program in _RUNS_MORE:
            _runs_more(leaf, depth, out)
        if shape:
            name = shape[0]
            if UNKNOWN in name or UNKNOWN_QUOTED in name:
                out.unknown.append(f"the command name {leaf[0]!r} is only known when it runs")
            elif "$" in leaf[0] and name != escape(leaf[0]):
                _each_program(leaf, shape, redirects, sub_programs, depth, out)
        if program in _SHELLS_AND_SOURCE:
            if program in SHELLS and len(leaf) > 1 and not shell_script(leaf)[1] and shape:
                script_word = next((p for a, p in zip(leaf[1:], shape[1:]) if not a.startswith(("-", "+"))), "")
                if script_word[:1] in (UNKNOWN, UNKNOWN_QUOTED) and "<(" in " ".join(leaf):
                    out.unknown.append("a shell runs a script produced by another command")
            if program in ("source", ".") and len(leaf) > 1 and leaf[1].startswith("<("):
                out.unknown.append("source of a script produced by another command")
    if scripts:
        runner = chain[-1] if chain else None
        if runner is not None and len(patterns) == len(argv):
            tail = patterns[len(argv) - len(runner[0]) + 1:]
            if any(UNKNOWN in p or UNKNOWN_QUOTED in p for p in tail):
                out.unknown.append(f"{runner[1]} runs a script only known when it runs")
        for script in scripts:
            _walk(script, depth + 1, out)
    for inner in extra:
        _expand_argv(inner, (), frozenset(), depth + 1, out)
    return command


def _each_program(leaf: tuple[str, ...], shape: tuple[str, ...], redirects: tuple[tuple[str, str], ...],
                  sub_programs: frozenset[str], depth: int, out: Analysis) -> None:
    """``for c in ls rm; do $c …; done``: the command as each program it may be."""
    from agent_code.policy.denylist import brace_alternatives  # the deny list imports this module

    alternatives = brace_alternatives(shape[0], limit=16)
    if any(UNKNOWN in a or re.search(r"(?<!\\)[*?[]", a) for a in alternatives):
        out.unknown.append(f"the command name {leaf[0]!r} is only known when it runs")
        return
    if alternatives == [shape[0]]:
        return  # no brace in it: the one name it may be is the one listed (its own call would loop)
    for alternative in alternatives:
        name = re.sub(r"\\(.)", r"\1", alternative)
        _expand_argv((name, *leaf[1:]), redirects, sub_programs, depth + 1, out, (alternative, *shape[1:]))


def _has_option(argv: tuple[str, ...], letters: str) -> bool:
    """Whether a short option among ``letters`` is given (alone or in a bundle: -tC)."""
    return any(a.startswith("-") and not a.startswith("--") and any(c in a[1:] for c in letters) for a in argv[1:])


def _runs_or_rebinds(commands: list[Command], text: str) -> str | None:
    """Builtins that run text they are given as code, or bind a command's name to another
    program: ``mapfile -C CALLBACK``, ``compgen``/``complete`` with ``-W``/``-C``/``-F``, ``hash
    -p PROGRAM NAME``, ``enable`` (it loads or turns off builtins), ``alias`` once aliases are
    expanded. What they run or which program a name then is cannot be judged here."""
    for c in commands:
        program = c.program
        if program in ("mapfile", "readarray") and _has_option(c.argv, "C"):
            return f"{program} -C runs a callback"
        if program in ("compgen", "complete") and _has_option(c.argv, "WCF"):
            return f"{program} runs or expands the text it is given"
        if program == "hash" and _has_option(c.argv, "p"):
            return "hash -p binds a command's name to another program"
        if program == "enable":
            return "enable loads or turns off builtins"
        if program == "alias" and "expand_aliases" in text:
            return "an alias rebinds a command's name"
        runs = runs_given_command(program, c.argv)
        if runs is not None:
            return runs
    return None


def forks_in_a_cycle(calls: Sequence[tuple[str, str, bool]]) -> bool:
    """Whether the call graph ``calls`` (caller, callee, beside) has a cycle with a call that
    runs beside its caller in it: each time round the cycle a process starts beside the one
    before and the recursion never waits for it (``:(){ :|:& }``, ``a(){ b|b& }; b(){ a|a& }``,
    ``f(){ g & }; g(){ f; }``) — a fork bomb, whether each level starts one process or two. A
    recursion whose calls all run in turn (``f(){ … f "$((n-1))"; }``, ``$(f)``) is not one.
    Whether a cycle ends (a guard on an argument) is not judged: a forking cycle is refused."""
    graph: dict[str, set[str]] = {}
    for caller, callee, _ in calls:
        graph.setdefault(caller, set()).add(callee)
    for caller, callee, beside in calls:
        if beside and _reaches(graph, callee, caller):
            return True
    return False


def _reaches(graph: dict[str, set[str]], start: str, goal: str) -> bool:
    seen, todo = {start}, [start]
    while todo:
        node = todo.pop()
        if node == goal:
            return True
        for nxt in graph.get(node, ()):
            if nxt not in seen:
                seen.add(nxt)
                todo.append(nxt)
    return False


def analyze(text: str) -> Analysis:
    """Every command ``text`` would run, in order, at every depth (see the module doc).
    Text nested too deeply to follow (past :data:`MAX_DEPTH`, or deeper than Python's
    recursion allows) comes back ``opaque``."""
    out = Analysis(text)
    flat = out.flat = flat_text(text)  # (after quote removal: `GIT_CONFIG_PARAMETER''S=` is the name it is)
    if _may_name_startup_code(flat) and _SHELL_STARTUP_VARIABLES.search(flat):
        out.unknown.append("a variable names code a shell (or git, an editor, less) runs, or rebinds a command "
                           "(PROMPT_COMMAND, BASH_ENV, ENV, PS4, BASH_CMDS …)")
    try:
        evaluated, out.binds_environment = read_values(text, flat)
        if evaluated is not None:
            out.unknown.append(evaluated)
        _walk(text, 0, out)
        rebinding = _runs_or_rebinds(out.commands, text)
        if rebinding is not None:
            out.unknown.append(rebinding)
        if out.calls and not out.fork_bomb:
            out.fork_bomb = forks_in_a_cycle(out.calls)
    except RecursionError:
        out.opaque = True
    except Exception as error:  # noqa: BLE001 - a line the analysis fails on is one it cannot judge
        # (a bug here must not crash the agent, nor let the line pass: it asks, as for a syntax error)
        out.errors.append(f"the command line could not be analysed ({type(error).__name__}: {error})")
    return out


# --- one command as program, flags and operands ---------------------------------------

# long or differently spelled flags that mean the same as a short one, per program
FLAG_ALIASES: Final[dict[str, dict[str, str]]] = {
    "rm": {"-R": "-r", "--recursive": "-r", "--force": "-f", "--dir": "-d", "--interactive": "-i",
           "--verbose": "-v"},
    "cp": {"-R": "-r", "--recursive": "-r", "--force": "-f", "--archive": "-a"},
    "chmod": {"--recursive": "-R"},
    "chown": {"--recursive": "-R"},
    "chgrp": {"--recursive": "-R"},
    "git": {"--force": "-f"},
    "mkdir": {"--parents": "-p"},
    "mv": {"--target-directory": "-t", "--force": "-f"},
    "ln": {"--target-directory": "-t", "--force": "-f", "--symbolic": "-s"},
}
# every long option of the GNU programs the deny list judges by their flags: getopt_long
# takes any unique prefix of one (``rm --rec``, ``mv --t=DIR``), so a prefix is read as
# the option it abbreviates
LONG_OPTIONS: dict[str, tuple[str, ...]] = {
    "rm": ("--force", "--interactive", "--one-file-system", "--no-preserve-root", "--preserve-root",
           "--recursive", "--dir", "--verbose", "--help", "--version"),
    "mv": ("--backup", "--debug", "--exchange", "--force", "--interactive", "--no-clobber", "--no-copy",
           "--strip-trailing-slashes", "--suffix", "--target-directory", "--no-target-directory", "--update",
           "--verbose", "--context", "--help", "--version"),
    "cp": ("--archive", "--attributes-only", "--backup", "--copy-contents", "--debug", "--force",
           "--interactive", "--link", "--dereference", "--no-clobber", "--no-dereference", "--preserve",
           "--no-preserve", "--parents", "--recursive", "--reflink", "--remove-destination", "--sparse",
           "--strip-trailing-slashes", "--symbolic-link", "--suffix", "--target-directory",
           "--no-target-directory", "--update", "--verbose", "--keep-directory-symlink", "--one-file-system",
           "--context", "--help", "--version"),
    "ln": ("--backup", "--directory", "--force", "--interactive", "--logical", "--no-dereference", "--physical",
           "--relative", "--symbolic", "--suffix", "--target-directory", "--no-target-directory", "--verbose",
           "--help", "--version"),
    "chmod": ("--changes", "--silent", "--quiet", "--verbose", "--no-preserve-root", "--preserve-root",
              "--reference", "--recursive", "--help", "--version"),
    "chown": ("--changes", "--dereference", "--no-dereference", "--from", "--no-preserve-root",
              "--preserve-root", "--quiet", "--silent", "--reference", "--recursive", "--verbose", "--help",
              "--version"),
    "shred": ("--force", "--iterations", "--random-source", "--size", "--remove", "--verbose", "--exact",
              "--zero", "--help", "--version"),
    "mkdir": ("--mode", "--parents", "--verbose", "--context", "--help", "--version"),
}
LONG_OPTIONS["chgrp"] = LONG_OPTIONS["chown"]


def long_option(program: str, name: str) -> str:
    """``name`` (``--rec``) as the long option of ``program`` it abbreviates
    (``--recursive``), when it is a unique prefix of one; else ``name``."""
    known = LONG_OPTIONS.get(program)
    if not known or name in known or len(name) < 3:
        return name
    matches = [option for option in known if option.startswith(name)]
    return matches[0] if len(matches) == 1 else name


# programs whose long options take one dash (``find -delete``): never split into letters
SINGLE_DASH_LONG: Final = frozenset({"find", "java", "go", "gcc", "g++", "cc", "clang", "clang++", "ffmpeg",
                              "xcodebuild", "dd", "qemu-img", "ant"})
# options whose value is the next word (so it is not taken for an operand), per program
VALUE_OPTIONS: Final[dict[str, frozenset[str]]] = {
    "git": frozenset({"-C", "-c", "--git-dir", "--work-tree", "--namespace"}),
    "chmod": frozenset({"--reference"}),
    "chown": frozenset({"--reference", "--from"}),
    "find": frozenset(),
    "mv": frozenset({"-t", "--target-directory", "-S", "--suffix"}),
    "cp": frozenset({"-t", "--target-directory", "-S", "--suffix"}),
}


@dataclass(frozen=True, init=False)
class Invocation:
    """A command reduced to what it means: ``program``, ``flags`` as ``(name, value)``
    (value None when the flag has none) and ``operands``, in order."""

    program: str
    flags: tuple[tuple[str, str | None], ...]
    operands: tuple[str, ...]

    def __init__(self, program: str, flags: tuple[tuple[str, str | None], ...], operands: tuple[str, ...]) -> None:
        _set_fields(self, "__dict__", {"program": program, "flags": flags, "operands": operands})  # (as Command's)

    def has_flag(self, name: str) -> bool:
        return any(n == name for n, _ in self.flags)


_BRACED_VAR: Final = re.compile(r"\$\{([A-Za-z_][A-Za-z0-9_]*)\}")


UNKNOWN_DIRECTORY: Final = "$UNKNOWN_DIRECTORY"
_PROC_LINK: Final = re.compile(r"^/proc/[^/]+/(?:task/[^/]+/)?(root|cwd|fd/[^/]+|map_files/[^/]+)(/.*)?$|^/dev/fd/[^/]+(/.*)?$")


def _proc_alias(path: str) -> str:
    """``/proc/PID/root`` is ``/`` (another spelling of any path); ``/proc/PID/cwd`` and
    an open descriptor (``/proc/self/fd/3``, ``/dev/fd/3``) may be any directory: spelled
    as an unknown variable, which the deny list counts as possibly protected."""
    found = _PROC_LINK.match(path)
    if found is None:
        return path
    rest = (found.group(2) if found.group(1) else found.group(3)) or ""
    if found.group(1) == "root":
        return "/" + rest.lstrip("/")
    if ".." in rest.split("/"):
        return UNKNOWN_DIRECTORY        # above a directory that is not known: anywhere
    rest = posixpath.normpath(rest) if rest.strip("/") else ""
    return UNKNOWN_DIRECTORY + ("" if rest in ("", ".", "/") else rest)


def normalize_path(word: str) -> str:
    """A path operand in a canonical spelling: ``//`` → ``/``, ``/tmp/../`` → ``/``,
    ``~/`` → ``~``, ``${HOME}/.`` → ``$HOME``; other words unchanged."""
    text = _BRACED_VAR.sub(r"$\1", word) if "${" in word else word
    if not ("/" in text or text in (".", "..") or text.startswith(("~", "$"))):
        return text
    if text.startswith("//"):
        text = "/" + text.lstrip("/")
    if text.startswith(("/proc/", "/dev/fd/")):
        text = _proc_alias(re.sub(r"/+", "/", text))
        if text.startswith(UNKNOWN_DIRECTORY):
            return text
    normalized = posixpath.normpath(text)
    return "/" + normalized.lstrip("/") if normalized.startswith("//") else normalized


def normalize(argv: tuple[str, ...] | list[str], paths: bool = True) -> Invocation:
    """See the module doc: base name, split clusters, aliases, ``--``, path operands
    (``paths=False``: operands as written, for word patterns). A pure function of the
    words, so it is memoised: one check normalizes the same command for the deny list,
    the rules and self-protection."""
    if not argv:
        return Invocation("", (), ())
    return _normalize(tuple(argv), paths)


@lru_cache(maxsize=2048)
def _normalize(argv: tuple[str, ...], paths: bool) -> Invocation:
    program = program_name(argv[0])
    aliases = FLAG_ALIASES.get(program, _NO_ALIASES)
    takes_value = VALUE_OPTIONS.get(program, _NO_VALUE_OPTIONS)
    flags: list[tuple[str, str | None]] = []
    operands: list[str] = []
    i, options_done, end = 1, False, len(argv)
    while i < end:
        word = argv[i]
        i += 1
        if options_done or word == "-" or not word.startswith("-"):  # ("-" is the one 1-letter word with a dash)
            # (normalize_path returns a word as it is unless one of these holds: spared the call)
            operands.append(normalize_path(word) if paths and ("/" in word or "${" in word or word in (".", "..")
                                                               or word.startswith(("~", "$"))) else word)
            continue
        if word == "--":
            options_done = True
            continue
        if word.startswith("--"):
            name, eq, value = word.partition("=")
            name = long_option(program, name)
            if not eq and name in takes_value and i < len(argv):
                value, eq = argv[i], "="
                i += 1
            flags.append((aliases.get(name, name), value if eq else None))
            continue
        if word[:2] in takes_value:  # -C DIR or -CDIR
            if len(word) > 2:
                flags.append((word[:2], word[2:]))
            elif i < len(argv):
                flags.append((word, argv[i]))
                i += 1
            else:
                flags.append((word, None))
            continue
        if word[1:].isalpha() and program not in SINGLE_DASH_LONG:
            for letter in word[1:]:
                flag = "-" + letter
                flags.append((aliases.get(flag, flag), None))
        else:
            flags.append((aliases.get(word, word), None))  # -9, -n5, -O2: one flag
    return Invocation(program, tuple(flags), tuple(operands))


_NO_ALIASES: Final[dict[str, str]] = {}
_NO_VALUE_OPTIONS: Final[frozenset[str]] = frozenset()


def clear_caches() -> None:
    """Forget every memoised per-word and per-command result of the policy package (the
    benchmark clears them before each check, to time a cold one)."""
    if not _CACHE_NAMES:  # which module-level names hold a cache: found once
        from agent_code.policy import denylist, self_protection, shell_syntax

        for module in (shell_syntax, sys.modules[__name__], denylist, self_protection):
            for name, value in vars(module).items():
                kind = type(value)
                if kind in _NO_CACHE_KINDS or kind.__module__ == "typing":
                    continue  # a failed getattr on a module or a typing alias costs microseconds
                if callable(getattr(value, "cache_clear", None)) and value is not shell_syntax.parser:
                    _CACHE_NAMES.append((vars(module), name))
    for namespace, name in _CACHE_NAMES:  # read again each time: a test may have replaced one
        clear = getattr(namespace.get(name), "cache_clear", None)
        if clear is not None:
            clear()


_CACHE_NAMES: Final[list[tuple[dict, str]]] = []


# kinds of module-level values that never hold a cache (clear_caches skips them)
_NO_CACHE_KINDS: Final = frozenset({str, bytes, int, bool, float, type(None), tuple, list, dict, set, frozenset,
                             type(re.compile("")), type(sys)})
