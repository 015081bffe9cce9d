"""Read-only commands: what plan mode lets the bash tool run.

:func:`read_only_command_problem` is an allow-list over a real tokenization (``shlex`` with
shell punctuation, then checked against the policy's tree-sitter reading of the same line),
never a substring match: every command in a pipeline or
``;``/``&&``/``||`` chain must be an allowed reader with no writing option, and redirections
other than to ``/dev/null``, substitutions, subshells, background jobs, variable assignments
and multi-line scripts are refused. It is deliberately conservative: a refused harmless
command costs the model one turn, an allowed writer would break the promise of plan mode.

Judging the words is not enough for git: a "read-only" ``git status`` or ``git diff`` runs the
programs that the repository's own config names (fsmonitor, textconv, external diff, filters,
pagers, hooks). The bash tool therefore runs a command allowed this way with that config
neutralised (``agent_code/tools/readonly_git.py``); this module refuses what cannot be
neutralised there (git options that change what git runs, subcommands that write or reach a
remote).
"""

from __future__ import annotations

import re
import shlex

from agent_code.policy.commands import analyze

READ_ONLY_COMMANDS = frozenset({
    "ls", "cat", "head", "tail", "wc", "grep", "egrep", "fgrep", "rg", "pwd", "echo", "printf",
    "tree", "file", "stat", "du", "df", "which", "type", "diff", "cmp", "cut", "tr", "nl",
    "basename", "dirname", "realpath", "readlink", "date", "whoami", "id", "uname", "true",
    "false", "cd", "find", "sort", "uniq", "test", "[", "md5sum", "sha1sum", "sha256sum", "git",
})
# options that make an otherwise read-only command write files or run programs
_WRITING_OPTIONS: dict[str, tuple[str, ...]] = {
    "find": ("-exec", "-execdir", "-ok", "-okdir", "-delete", "-fprint", "-fprint0", "-fprintf", "-fls"),
    "sort": ("-o", "--output", "--compress-program"),
    "tree": ("-o", "-R"),
    "rg": ("--pre", "--hostname-bin"),
    "file": ("-C", "--compile"),
    "date": ("-s", "--set"),
    "printf": ("-v",),  # it assigns a variable (and evaluates a subscript in its name)
    "test": ("-v",),    # -v evaluates a subscript in the name it tests
    "[": ("-v",),
    "git": ("--output", "--ext-diff", "-O", "--open-files-in-pager", "--exec"),
}
GIT_READ_ONLY = frozenset({
    "status", "diff", "log", "show", "blame", "rev-parse", "ls-files", "ls-tree", "grep", "describe",
    "shortlog", "cat-file", "rev-list", "merge-base", "show-ref", "branch", "tag", "remote", "stash",
    "config", "reflog",
})
_SEPARATORS = frozenset({";", "&&", "||", "|"})
_ASSIGNMENT = re.compile(r"^[A-Za-z_][A-Za-z0-9_]*\+?=")
_SHELL_PUNCTUATION = set("();<>|&")


def _tokens(command: str) -> list[str]:
    """Shell words and operators; ``#`` is an ordinary character (a comment would otherwise
    hide what follows it from the check, while bash may still run it: ``ls a#; rm x``)."""
    lexer = shlex.shlex(command, posix=True, punctuation_chars=True)
    lexer.whitespace_split = True
    lexer.commenters = ""
    return list(lexer)


def _is_operator(token: str) -> bool:
    return bool(token) and set(token) <= _SHELL_PUNCTUATION


def _option_hits(args: list[str], options: tuple[str, ...]) -> str | None:
    """The first of ``args`` that spells one of ``options``.

    A ``--long`` option is hit by any unambiguous-looking abbreviation as well (``--out=x``
    for ``--output``: GNU getopt and git's parse-options both accept one), a one-letter
    option wherever it appears in a bundle of flags (``-nO``, ``-Ovim``: the letter after
    other letters, its value attached or not); other options (``find -exec``) only exactly."""
    for arg in args:
        if arg == "--":
            break  # what follows is operands (paths), never options
        for opt in options:
            if arg == opt:
                return arg
            if opt.startswith("--") and arg.startswith("--") and len(arg) > 2:
                name = arg[2:].split("=", 1)[0]
                if name and opt[2:].startswith(name):
                    return arg
            elif len(opt) == 2 and opt[0] == "-" and arg.startswith("-") and not arg.startswith("--"):
                at = arg.find(opt[1], 1)
                if at > 0 and arg[1:at].isalpha() or at == 1:
                    return arg
    return None


# per git subcommand: options that write, edit, verify with gpg or reach a remote
_GIT_WRITING: dict[str, tuple[str, ...]] = {
    "branch": ("-d", "-D", "-m", "-M", "-c", "-C", "-f", "-u", "-t", "--delete", "--move", "--copy", "--force",
               "--set-upstream-to", "--unset-upstream", "--edit-description", "--track", "--no-track",
               "--create-reflog", "--recurse-submodules"),
    "tag": ("-a", "-s", "-u", "-f", "-d", "-m", "-F", "-e", "-v", "--annotate", "--sign", "--local-user",
            "--force", "--delete", "--message", "--file", "--edit", "--create-reflog", "--verify", "--cleanup"),
    "config": ("--add", "--unset", "--unset-all", "--replace-all", "--rename-section", "--remove-section",
               "-e", "--edit"),
    "describe": ("--dirty", "--broken"),  # they refresh (and may write) the index
}
_GIT_CONFIG_READS = ("--get", "--get-all", "--get-regexp", "--get-urlmatch", "--get-color", "--get-colorbool",
                     "--list", "-l")


def _git_problem(args: list[str]) -> str | None:
    i = 0
    while i < len(args) and args[i].startswith("-"):  # options before the subcommand
        if args[i] == "-C" and i + 1 < len(args):
            i += 2
        elif args[i] == "--no-pager":
            i += 1
        else:
            return f"git option {args[i]} is not allowed (it can change what git runs)"
    if i == len(args):
        return None  # plain `git`: prints its help
    sub, rest = args[i], args[i + 1:]
    if sub not in GIT_READ_ONLY:
        return f"git {sub} can change the repository"
    if _option_hits(rest, ("--help",)):
        return f"git {sub} --help starts a manual viewer or browser that git's config can name"
    hit = _option_hits(rest, _GIT_WRITING.get(sub, ()))
    if hit is not None:
        return f"git {sub} {hit}: with this option git {sub} changes the repository or runs a program"
    positional = [a for a in rest if not a.startswith("-")]
    if sub in ("branch", "tag") and positional and not ({"-l", "--list"} & set(rest)):
        return f"git {sub} with a name creates or changes one"
    if sub == "stash":  # `git stash -m x show` or `git stash -- list` is a push
        if not rest:
            return "git stash (push) changes the working tree"
        if rest[0] not in ("list", "show"):
            return "only git stash list/show are read-only (any other git stash pushes or changes stashes)"
    if sub == "remote":
        lead = 0
        while lead < len(rest) and rest[lead] in ("-v", "--verbose"):
            lead += 1
        action = rest[lead:lead + 1]
        if action == ["show"] and "-n" not in rest[lead + 1:]:
            return "git remote show contacts the remote (git remote show -n does not)"
        if action not in ([], ["show"], ["get-url"]):
            return "only git remote, remote -v, show -n and get-url are read-only"
    if sub == "reflog" and rest and not rest[0].startswith("-") and rest[0] not in ("show", "exists"):
        return "only git reflog (show) and reflog exists are read-only"
    if sub == "config" and not _option_hits(rest, _GIT_CONFIG_READS):
        return "only git config --get/--list is read-only"
    return None


def _simple_command_problem(words: list[str]) -> str | None:
    """Why one simple command (no operators) is not read-only, or None."""
    if not words:
        return "empty command"
    if _ASSIGNMENT.match(words[0]):
        return f"variable assignment {words[0]!r} (it can change what a command runs)"
    name, args = words[0], words[1:]
    if name not in READ_ONLY_COMMANDS:
        return f"{name!r} is not a read-only command"
    hit = _option_hits(args, _WRITING_OPTIONS.get(name, ()))
    if hit is not None:
        return f"{name} {hit} writes files or runs programs"
    if name == "uniq" and len([a for a in args if not a.startswith("-")]) > 1:
        return "uniq with an output file writes it"
    if name == "git":
        return _git_problem(args)
    return None


def read_only_command_problem(command: str) -> str | None:
    """``None`` when ``command`` only reads; otherwise why it is not read-only (one phrase)."""
    if not command.strip():
        return "empty command"
    if "\n" in command or "\r" in command:
        return "multi-line commands are not checked as read-only"
    if "`" in command or "$(" in command or "${" in command:
        return "command substitution or parameter expansion"
    try:
        tokens = _tokens(command)
    except ValueError as exc:  # unbalanced quotes
        return f"cannot parse the command ({exc})"
    words: list[str] = []
    i = 0
    while i < len(tokens):
        token = tokens[i]
        nxt = tokens[i + 1] if i + 1 < len(tokens) else None
        if token in _SEPARATORS:
            problem = _simple_command_problem(words)
            if problem:
                return problem
            words = []
        elif token in (">", ">>", "&>", ">|") and nxt == "/dev/null":
            i += 1
        elif token == ">&" and nxt in ("1", "2"):
            i += 1
        elif token == "<" and nxt is not None and nxt.startswith(("/dev/tcp/", "/dev/udp/")):
            return f"input from {nxt} opens a network connection"
        elif token == "<" and nxt is not None and not _is_operator(nxt):
            i += 1  # input from a file: reading
        elif _is_operator(token):
            return f"shell operator {token!r} (redirection, subshell or background job)"
        else:
            words.append(token)
        i += 1
    problem = _simple_command_problem(words)
    return problem if problem is not None else _parser_disagrees(command)


def _parser_disagrees(command: str) -> str | None:
    """The same line read by the policy's tree-sitter parser (:func:`commands.analyze`)
    must show only those readers too: where the two readings of a line differ, the line
    is refused rather than judged by the more lenient one."""
    analysis = analyze(command)
    if analysis.errors or analysis.unknown or analysis.opaque:
        return "the shell parser cannot read this command line as plain readers"
    for c in analysis.commands:
        if c.wrapper is not None or c.program not in READ_ONLY_COMMANDS:
            return f"{c.program!r} is not a read-only command"
    return None


def is_read_only_command(command: str) -> bool:
    """True when every command in ``command`` only reads (see :func:`read_only_command_problem`)."""
    return read_only_command_problem(command) is None
