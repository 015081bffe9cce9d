"""Permission rules: ``allow`` / ``ask`` / ``deny`` lists of ``TOOL`` or ``TOOL(SPECIFIER)``.

Syntax (as in Claude Code's settings, with our tool names)::

    "bash"                    every call of the tool named bash
    "bash(git diff:*)"        bash running `git diff` with any further arguments
    "bash(npm test)"          bash running exactly `npm test`
    "bash(rm -rf /)"          (deny) any rm with -r and -f whose first operand is /
    "edit_file"               every edit_file call
    "read_file(secrets/**)"   read_file of anything under secrets/
    "Edit(src/**)"            any tool of kind edit, on a path under src/
    "Read(*.env)"  "Execute"  kinds: Read, Edit, Execute (any case) name every tool of that kind
    "*"                       every tool
    "mcp__github__*"          every tool of the MCP server github (also "mcp__github")

The tool part is a tool's name (case-insensitive, so Claude Code's ``Bash(...)`` works),
a name pattern (``*`` any characters), an MCP server's prefix, or a kind. The specifier
is matched against the call's **subject**: its ``command`` argument (a command pattern;
agent-code's own tools only), else its ``path``/``file_path`` argument (a path glob),
else its first string argument (a ``fnmatch`` glob).

**Command patterns** are words (split with :mod:`shlex`), read like a command:
program, flags, operands — and matched against every command the call would run,
after :func:`commands.analyze` has split and unwrapped it and :func:`commands.normalize`
has normalized both sides (``rm -fr``, ``rm -r -f`` and ``rm --recursive --force`` are
the same; ``/usr/bin/git`` is ``git``). A command matches when the program matches, it
has every flag of the pattern (any order), and its operands start with the pattern's
operands (``*`` inside a word is a wildcard). Then:

* **deny** and **ask** rules match a command line if *any* command in it matches, with
  any extra flags or operands (as if the pattern ended in ``:*``): ``bash(rm:*)`` denies
  ``ls && sudo rm -f x``, ``bash(git push:*)`` denies ``git -C repo push --force``.
* **allow** rules are exact unless the pattern ends in ``:*`` (or a last word ``*``):
  ``bash(npm test)`` allows ``npm test`` but not ``npm test --watch``. A command line is
  allowed only when *every* command in it is allowed by some rule — ``cd``, ``echo``,
  ``pwd``, ``true`` … need none, and transparent wrappers (``timeout``, ``nice``,
  ``env``, ``xargs`` …) count as what they run, but ``sudo``/``su``/``doas`` must be
  allowed themselves — with no output redirected to a file, nothing nested too
  deep to see, no variable set, and no ``cd`` out of the project (one ``cd``, into an
  existing directory of the project that is no repository of its own).

**Path globs** are relative to the project: ``*`` and ``?`` stay within a directory,
``**`` crosses directories, a pattern without ``/`` matches a name at any depth (like
``.gitignore``), and a pattern also matches everything below a directory it matches
(``secrets`` covers ``secrets/key.pem``). The call's path is resolved first, so
``./a/../secrets/x`` and a symlink into ``secrets/`` are caught.

Precedence: the built-in deny list (:mod:`policy.denylist`), then deny rules, then the
built-in ask for a command line that cannot be judged (a syntax error, ``eval "$x"``,
``$cmd``, a script piped into a shell: :func:`builtin_ask`), then ask rules, then allow
rules; :meth:`RuleSet.evaluate` returns the first that decides, or
None for "no rule: ask the permission mode". A directory-walking call (``grep`` over
the whole project) is judged by its own path argument, not by every file it reads.
"""

from __future__ import annotations

import fnmatch
import os
import re
import shlex
from dataclasses import dataclass, field
from functools import lru_cache
from pathlib import Path
from typing import Final, Iterable, Literal

from agent_code.globs import glob_regex
from agent_code.policy import denylist
from agent_code.policy.evaluated import flat_text
from agent_code.policy.commands import Analysis, Command, Invocation, analyze, normalize, own_argv
from agent_code.policy.runners import abbreviates
from agent_code.policy.shell_syntax import WRITE_REDIRECTIONS
from agent_code.tools.base import TOOL_KINDS, Tool

Behavior = Literal["allow", "ask", "deny"]
BEHAVIORS: Final[tuple[Behavior, ...]] = ("deny", "ask", "allow")  # precedence order
KIND_ALIASES: Final = {kind: kind for kind in TOOL_KINDS}  # "Read" / "read" → kind read
PATH_ARGUMENTS: Final = ("path", "file_path")
# commands that need no allow rule of their own inside a command line
NEUTRAL_COMMANDS: Final = frozenset({"cd", "pwd", "echo", "printf", "true", "false", ":", "test", "[", "[[", "sleep",
                              "exit", "wait"})
# A line that sets a variable is never auto-approved by an allow rule: what a variable
# changes is what the allowed program runs (``PATH=.:$PATH ls``, ``GIT_EXTERNAL_DIFF=x git
# diff``, ``LD_PRELOAD=``, ``BASH_ENV=``, ``CC=`` for make, ``export``, ``env X=…``).
# Read from the text, so an assignment inside quotes also counts: conservative, it asks.
_SETS_VARIABLE: Final = re.compile(r"(?:^|[\s;&|(`{])[A-Za-z_][A-Za-z0-9_]*(?:\[[^\]]*\])?\+?=")
# git's options before the sub-command that change what git runs or which config it reads
# (``-c core.fsmonitor=…``, ``--exec-path``, ``-C``/``--git-dir`` to another repository's
# config, ``-p`` forcing the configured pager); only these are harmless
_GIT_HARMLESS_GLOBALS: Final = frozenset({"--no-pager", "-P", "--no-optional-locks", "--literal-pathspecs",
                                   "--no-replace-objects", "--glob-pathspecs", "--noglob-pathspecs",
                                   "--icase-pathspecs", "--version", "-v", "--html-path", "--man-path",
                                   "--info-path"})
# git sub-command options that run a configured program or write a file
_GIT_RISKY_OPTIONS: Final = re.compile(r"^(--ext-diff|--textconv|--output(=.*)?|--open-files-in-pager(=.*)?|-O.*"
                                r"|--upload-pack(=.*)?|--receive-pack(=.*)?|--exec(=.*)?|--config(=.*)?)$")


def _git_runs_configured_programs(argv: tuple[str, ...]) -> bool:
    """Whether a git command line chooses what git runs (see above)."""
    k = 1
    while k < len(argv) and argv[k].startswith("-"):
        if argv[k] not in _GIT_HARMLESS_GLOBALS:
            return True
        k += 1
    return any(_GIT_RISKY_OPTIONS.match(word) for word in argv[k + 1:])


# A line that changes directory is approved by an allow rule only when it moves into the
# project itself: an allowed program run elsewhere reads that place's config (``cd /tmp/evil
# && git status`` runs the fsmonitor a planted repository names), which the rule's own
# exclusions (``git -C``) were written to keep out. Wrappers that change directory count
# too (``env -C DIR``, ``unshare --wd``, ``firejail --private-cwd``).
_CHDIR_OPTION: Final = re.compile(r"^(-[A-Za-z]*[CDw]|--(c|ch|chd|chdi|chdir|wd|private-cwd|working-directory)(=|$))")
_CD_PROGRAMS: Final = frozenset({"cd", "pushd", "popd", "chdir"})
_SHELL_VALUE: Final = re.compile(r"[$`~*?\[{]")


def _leaves_the_project(commands: list[Command], root: Path | None) -> bool:
    """Whether a command of the line may run somewhere other than the project (above)."""
    moves = [c for c in commands if c.wrapper is None and c.program in _CD_PROGRAMS]
    if any(c.wrapper is not None and not c.privileged and any(_CHDIR_OPTION.match(w) for w in c.argv[1:])
           for c in commands):
        return True
    if not moves:
        return False
    if len(moves) > 1:  # one cd, taken from where every bash call starts: the project (cwd when None)
        return True
    return not _project_directory(moves[0], root if root is not None else Path(os.getcwd()))


def _project_directory(command: Command, root: Path) -> bool:
    """``cd DIR`` to an existing directory of the project (resolved, symlinks followed)
    that is not inside another repository below it."""
    if command.program == "popd":
        return False
    args = [a for a in command.argv[1:] if a not in ("-L", "-P", "-e", "-@", "--")]
    if len(args) != 1 or args[0].startswith("-") or _SHELL_VALUE.search(args[0]):
        return False
    target = args[0]
    if os.environ.get("CDPATH") and not target.startswith(("/", "./", "../")) and target not in (".", ".."):
        return False  # cd looks in $CDPATH first
    top = os.path.realpath(root)
    place = os.path.realpath(os.path.join(top, target))
    if place != top and not place.startswith(top.rstrip(os.sep) + os.sep) or not os.path.isdir(place):
        return False
    while place != top:  # a nested repository has a config of its own
        if os.path.lexists(os.path.join(place, ".git")):
            return False
        place = os.path.dirname(place)
    return True


UNPACKERS: Final = frozenset({"unzip", "bsdunzip", "7z", "7za", "unrar", "cpio", "pax", "ar", "patch"})


def _writes_paths_its_input_names(command: Command) -> bool:
    """An archive unpacked or a patch applied writes the files the archive or patch names,
    which no rule can see (``.git/config`` among them): an allow rule does not approve it."""
    argv = command.argv
    if command.program in UNPACKERS:
        return True
    if command.program in ("tar", "bsdtar", "gtar"):
        return denylist.tar_extracts(argv)
    if command.program == "git":
        sub = next((w for w in argv[1:] if not w.startswith("-")), "")
        return sub in ("apply", "am")
    return False


# a wrapper's options that write a file (strace -o FILE, time -o FILE), set the environment of
# what it runs (strace -E VAR=…, xargs --process-slot-var=VAR, env -S … is a script of its own)
# or run a command of their own (flock -c): what the command it wraps is allowed for says
# nothing of those
_WRAPPER_OPTIONS_THAT_ACT: Final = {
    "strace": ("-o", "--output", "-E", "--env"), "ltrace": ("-o", "--output"), "time": ("-o", "--output"),
    "xargs": ("--process-slot-var",), "flock": ("-c", "--command"), "systemd-run": ("-E", "--setenv"),
    "screen": ("-L", "-Logfile"),
}


def _wrapper_does_more(wrapper: str, words: tuple[str, ...]) -> bool:
    """Whether a wrapper's own ``words`` use an option of :data:`_WRAPPER_OPTIONS_THAT_ACT`
    (alone, glued to its value: ``-EVAR=1``, ``-o|cmd``, or with "=")."""
    acting = _WRAPPER_OPTIONS_THAT_ACT.get(wrapper)
    if not acting:
        return False
    for w in words[1:]:
        if w.startswith("--"):  # long options as getopt_long reads them: abbreviated too (--out=F)
            if any(abbreviates(w, option) for option in acting if option.startswith("--")):
                return True
        elif w.startswith("-") and any(option[1] in w[1:] for option in acting if not option.startswith("--")):
            return True  # a short option alone, glued to its value or in a bundle (-fo FILE, -fEVAR=…)
    return False


def _changes_the_environment(command: Command) -> bool:
    """``printf -v NAME`` assigns a variable (``PATH``) like an assignment does."""
    return command.program == "printf" and any(w.startswith("-v") for w in command.argv[1:])
SAFE_REDIRECT_TARGETS: Final = frozenset({"/dev/null", "/dev/stdout", "/dev/stderr", "/dev/tty"})
_RULE: Final = re.compile(r"^\s*(?P<tool>[A-Za-z_*][\w.*-]*)\s*(?:\((?P<spec>.*)\))?\s*$", re.DOTALL)


class RuleError(ValueError):
    """A rule that cannot be read; the message names the rule and where it came from."""


# --- one rule -------------------------------------------------------------------------

@dataclass(frozen=True)
class CommandPattern:
    """A command pattern, normalized like the commands it is matched against."""

    invocation: Invocation
    prefix: bool  # ended in ":*" (or a last word "*"): further flags and operands allowed


@dataclass(frozen=True)
class Rule:
    text: str           # as written
    behavior: Behavior
    tool: str           # tool name, kind, or "*"
    specifier: str | None = None
    source: str = ""    # where it came from: a settings file, "session", ...

    def __str__(self) -> str:
        return self.text


@lru_cache(maxsize=1024)
def parse_command_pattern(spec: str) -> CommandPattern:
    """``git diff:*`` → program git, operands (diff,), prefix; raises :class:`RuleError`."""
    text = spec.strip()
    prefix = text.endswith(":*")
    if prefix:
        text = text[:-2].rstrip()
    try:
        words = shlex.split(text)
    except ValueError as exc:
        raise RuleError(f"cannot split the command pattern {spec!r}: {exc}") from None
    if words and words[-1] == "*":
        words, prefix = words[:-1], True
    if not words:
        raise RuleError(f"the command pattern {spec!r} names no command")
    return CommandPattern(normalize(words), prefix)


def parse_rule(text: object, behavior: Behavior, source: str = "") -> Rule:
    """Read one rule (from a settings file: any JSON value); raises :class:`RuleError` saying
    what is wrong and where."""
    where = f" (in {source})" if source else ""
    if not isinstance(text, str):
        raise RuleError(f"{behavior} rule {text!r}{where} is not a string")
    m = _RULE.match(text)
    if m is None:
        raise RuleError(f"invalid {behavior} rule {text!r}{where}: expected TOOL or TOOL(SPECIFIER), "
                        "e.g. bash(git diff:*) or read_file(secrets/**)")
    spec = m.group("spec")
    if spec is not None:
        spec = spec.strip()
        if not spec:
            raise RuleError(f"invalid {behavior} rule {text!r}{where}: empty parentheses; "
                            f"write {m.group('tool')} for every call")
        if spec in ("*", ":*"):
            spec = None
    if spec is not None:
        try:  # every specifier must read as words: it may be matched against a command
            parse_command_pattern(spec)
        except RuleError as exc:
            raise RuleError(f"invalid {behavior} rule {text!r}{where}: {exc}") from None
    return Rule(text.strip(), behavior, m.group("tool"), spec, source)


def applies_to(rule: Rule, tool: Tool) -> bool:
    """Whether the rule's tool part names ``tool``: by name, kind, ``*``, a name pattern
    (``mcp__github__*``: ``*`` any characters), or an MCP server's prefix (``mcp__github``:
    every tool of that server, as in Claude Code)."""
    part, name = rule.tool.lower(), tool.name.lower()
    if part == "*" or part == name or KIND_ALIASES.get(part) == tool.kind:
        return True
    if "*" in part:
        return fnmatch.fnmatchcase(name, part)  # the rule's syntax allows no other wildcard
    return part.startswith("mcp__") and part.count("__") == 1 and name.startswith(part + "__")


# --- the subject of a call ------------------------------------------------------------

@dataclass(frozen=True)
class Subject:
    """What a specifier is matched against: a command, a path, or some other value."""

    kind: Literal["command", "path", "value", "none"]
    value: str = ""


def subject_of(tool: Tool, arguments: object) -> Subject:
    if not isinstance(arguments, dict):
        return Subject("none")
    command = arguments.get("command")
    if isinstance(command, str) and getattr(tool, "origin", None) is None:  # not an MCP tool's own word
        return Subject("command", command)
    for key in PATH_ARGUMENTS:
        if isinstance(arguments.get(key), str):
            return Subject("path", arguments[key])
    for key in tool.input_schema.get("properties", {}):
        if isinstance(arguments.get(key), str):
            return Subject("value", arguments[key])
    return Subject("none")


# --- path globs -----------------------------------------------------------------------

def path_matches(pattern: str, path: str) -> bool:
    """Whether a project-relative ``path`` (``/``-separated, normalized) matches ``pattern``
    (see the module doc: ``**``, anchoring, directories cover their contents)."""
    pattern = pattern.strip()
    pattern = pattern.removeprefix("./")
    anchored = "/" in pattern.rstrip("/")
    pattern = pattern.strip("/")
    regex = ("" if anchored else "(?:.*/)?") + glob_regex(pattern) + "(?:/.*)?"
    return re.fullmatch(regex, path, re.DOTALL) is not None


def relative_path(path: str, root: Path | None) -> str:
    """The call's path as the rules see it: relative to ``root`` with ``.``/``..`` and
    symlinks resolved; a path outside the root stays absolute."""
    if root is None:
        return os.path.normpath(path)
    root = Path(os.path.realpath(root))
    real = Path(os.path.realpath(path if os.path.isabs(path) else root / path))
    try:
        rel = real.relative_to(root)
    except ValueError:
        return str(real)
    return rel.as_posix() if rel.parts else "."


# --- commands -------------------------------------------------------------------------

def command_matches(pattern: CommandPattern, invocation: Invocation, exact: bool) -> bool:
    """One normalized command against one pattern; ``exact`` for allow rules (see the
    module doc), otherwise extra flags and operands are fine."""
    want = pattern.invocation
    if not fnmatch.fnmatchcase(invocation.program, want.program):
        return False
    for name, value in want.flags:
        if not any(n == name and (value is None or (v is not None and fnmatch.fnmatchcase(v, value)))
                   for n, v in invocation.flags):
            return False
    if len(invocation.operands) < len(want.operands):
        return False
    if not all(fnmatch.fnmatchcase(have, pat) for have, pat in zip(invocation.operands, want.operands)):
        return False
    if exact and not pattern.prefix:
        return (len(invocation.operands) == len(want.operands)
                and {n for n, _ in invocation.flags} == {n for n, _ in want.flags})
    return True


def writes_a_file(command: Command) -> bool:
    """Whether the command's redirections write a file (``> out``), not just discard or
    duplicate output (``2>&1``, ``> /dev/null``)."""
    for op, target in command.redirects:
        if op not in WRITE_REDIRECTIONS or target in SAFE_REDIRECT_TARGETS:
            continue
        if op == ">&" and (target.isdigit() or target == "-"):
            continue
        return True
    return False


# --- a set of rules -------------------------------------------------------------------

@dataclass(frozen=True)
class Verdict:
    """What the rules decided for one call: the behaviour, the rule (its text, or the
    built-in rule's id), where it came from, and what matched (a sub-command)."""

    behavior: Behavior
    rule: str
    source: str
    detail: str = ""

    @property
    def builtin(self) -> bool:
        return self.source == "built-in"


@dataclass
class RuleSet:
    """Rules in precedence order, plus the built-in deny list (always on)."""

    rules: list[Rule] = field(default_factory=list)
    home: str | None = None  # the user's home, for the built-in list (None: Path.home())

    @classmethod
    def from_lists(cls, allow: Iterable[str] = (), ask: Iterable[str] = (), deny: Iterable[str] = (),
                   source: str = "") -> "RuleSet":
        rules = [parse_rule(t, "deny", source) for t in deny]
        rules += [parse_rule(t, "ask", source) for t in ask]
        rules += [parse_rule(t, "allow", source) for t in allow]
        return cls(rules)

    def add(self, rule: Rule) -> None:
        if rule not in self.rules:
            self.rules.append(rule)

    def of(self, behavior: Behavior) -> list[Rule]:
        return [r for r in self.rules if r.behavior == behavior]

    def evaluate(self, tool: Tool, arguments: object, root: Path | None = None,
                 analysis: Analysis | None = None) -> Verdict | None:
        """The first of: a built-in deny, a deny rule, an ask rule, allow rules; None when no
        rule decides (the permission mode does). ``analysis`` is the command's
        :func:`~agent_code.policy.commands.analyze` when the caller already has it (one
        parse per check)."""
        subject = subject_of(tool, arguments)
        if subject.kind != "command":
            analysis = None
        elif analysis is None or analysis.text != subject.value:
            analysis = analyze(subject.value)
        if analysis is not None:
            hit = denylist.first_hit(analysis, self.home)
            if hit is not None:
                return Verdict("deny", hit.rule, "built-in", f"{hit.reason}: {hit.command}")
        path = relative_path(subject.value, root) if subject.kind == "path" else None
        for behavior in ("deny", "ask"):
            for rule in self.of(behavior):
                detail = _matches_any(rule, tool, subject, analysis, path)
                if detail is not None:
                    return Verdict(behavior, rule.text, rule.source, detail)
            if behavior == "deny" and analysis is not None:
                unjudged = builtin_ask(analysis)
                if unjudged is not None:
                    return unjudged
        return self._allowed(tool, subject, analysis, path, root)

    def _allowed(self, tool: Tool, subject: Subject, analysis: Analysis | None, path: str | None,
                 root: Path | None = None) -> Verdict | None:
        rules = [r for r in self.of("allow") if applies_to(r, tool)]
        if not rules:
            return None
        bare = next((r for r in rules if r.specifier is None), None)
        if bare is not None:
            return Verdict("allow", bare.text, bare.source)
        if analysis is not None:
            return _allowed_command(rules, analysis, root)
        for rule in rules:
            if _specifier_matches(rule, subject, path):
                return Verdict("allow", rule.text, rule.source)
        return None


UNPARSABLE: Final = "unparsable-command"
UNJUDGED: Final = "unjudged-command"


def builtin_ask(analysis: Analysis) -> Verdict | None:
    """The built-in ``ask`` for a command line the deny list cannot judge (and found
    nothing dangerous in): one with a syntax error, or one that runs something only known
    when it runs (``eval "$x"``, ``$cmd``, ``… | sh``). The REPL asks the user; headless
    modes, bypassPermissions included, refuse it."""
    if analysis.errors:
        return Verdict("ask", UNPARSABLE, "built-in",
                       f"the built-in check cannot read this command line ({analysis.errors[0]}), so it cannot "
                       "tell whether it is safe")
    if analysis.unknown:
        return Verdict("ask", UNJUDGED, "built-in",
                       f"the built-in check cannot judge this command line: {analysis.unknown[0]}")
    return None


def _specifier_matches(rule: Rule, subject: Subject, path: str | None) -> bool:
    assert rule.specifier is not None
    if subject.kind == "path" and path is not None:
        return path_matches(rule.specifier, path)
    if subject.kind == "value":
        return fnmatch.fnmatchcase(subject.value, rule.specifier)
    return False


def _matches_any(rule: Rule, tool: Tool, subject: Subject, analysis: Analysis | None,
                 path: str | None) -> str | None:
    """For a deny/ask rule: what it matched in this call (``""`` for the whole call), or None."""
    if not applies_to(rule, tool):
        return None
    if rule.specifier is None:
        return ""
    if analysis is not None:
        pattern = parse_command_pattern(rule.specifier)
        for command in analysis.commands:
            if command_matches(pattern, normalize(command.argv), exact=False):
                return " ".join(command.argv)
        return None
    return "" if _specifier_matches(rule, subject, path) else None


def _allowed_command(rules: list[Rule], analysis: Analysis, root: Path | None = None) -> Verdict | None:
    """Allowed only if every command in the line is allowed (see the module doc)."""
    if analysis.opaque or analysis.fork_bomb or analysis.errors or analysis.unknown:
        return None
    if analysis.binds_environment or _SETS_VARIABLE.search(analysis.flat or flat_text(analysis.text)):
        return None
    if _leaves_the_project(analysis.commands, root):
        return None
    patterns = [(r, parse_command_pattern(r.specifier)) for r in rules if r.specifier is not None]
    used: list[Rule] = []
    for index, command in enumerate(analysis.commands):
        if writes_a_file(command):
            return None
        if command.wrapper is not None and _wrapper_does_more(command.wrapper, own_argv(analysis.commands, index)):
            return None
        if command.wrapper is not None and not command.privileged:
            continue  # timeout, nice, env, xargs, bash -c …: judged by what they run
        if _changes_the_environment(command) or _writes_paths_its_input_names(command):
            return None
        if command.wrapper is None and command.program in NEUTRAL_COMMANDS:
            continue
        if command.program == "git" and _git_runs_configured_programs(command.argv):
            return None
        inv = normalize(command.argv)
        rule = next((r for r, p in patterns if command_matches(p, inv, exact=True)), None)
        if rule is None:
            return None
        used.append(rule)
    if not used:
        return None
    return Verdict("allow", used[0].text, used[0].source)


def suggest_rules(tool: Tool, arguments: object) -> list[str]:
    """Allow rules for "always allow this" in the REPL: for a command, one
    ``bash(PROGRAM SUBCOMMAND:*)`` per command it runs (the first operand is kept when it
    looks like a sub-command: ``git diff``, ``npm test``); ``Edit`` for an edit tool; the
    tool's name otherwise."""
    subject = subject_of(tool, arguments)
    if subject.kind == "command":
        rules: list[str] = []
        for command in analyze(subject.value).commands:
            if (command.wrapper is not None and not command.privileged) or command.program in NEUTRAL_COMMANDS:
                continue
            inv = normalize(command.argv)
            words = [shlex.quote(inv.program)]
            if inv.operands and re.fullmatch(r"[a-z][a-z0-9-]*", inv.operands[0]):
                words.append(inv.operands[0])
            rule = f"{tool.name}({' '.join(words)}:*)"
            if rule not in rules:
                rules.append(rule)
        return rules
    if tool.kind == "edit":
        return ["Edit"]
    return [tool.name]
