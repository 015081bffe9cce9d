"""Commands and options that run a shell command given to them as a word, and the variables
whose value a shell or another program runs: what the analysis cannot open up and so asks about.

* :func:`runs_given_command` — ``fc``, ``strace``/``ltrace -o '|CMD'``, ``flock -c``, ``split
  --filter``, tar's exec options, ``npx -c``, fakeroot's eval'd options, and sed's ``e``
  command, ``s///e`` and ``w``, read by a small sed-script reader that knows GNU sed's
  addresses, brackets, labels and option bundles;
* :func:`abbreviates` — a long option as getopt_long reads it (``--filt`` for ``--filter``);
* :data:`STARTUP_NAMES` — the variables a shell runs at startup or as a prompt, and those git,
  an editor, less, tar, perl or node take code or config from.

Every class here came from an attacker review (tests/test_policy_attacks.py, sections U and V).
Pure functions of the words.
"""

from __future__ import annotations

import re
from typing import Final

# a variable whose value a shell runs (or expands as a prompt) later, a table that rebinds a
# command's name (BASH_CMDS, BASH_ALIASES), an exported function (BASH_FUNC_NAME%%, which a child
# bash defines from the environment), and variables whose value another program runs as a
# command or reads its config or options from (git's GIT_CONFIG_PARAMETERS / GIT_CONFIG_COUNT +
# KEY_n + VALUE_n, an editor but true/cat/:, less's input filter, TAR_OPTIONS, PERL5OPT …)
STARTUP_NAMES: Final = (r"(?:PROMPT_COMMAND|BASH_ENV|ENV|PS0|PS1|PS2|PS3|PS4|SHELLOPTS|BASHOPTS|BASH_FUNC_[^\s=]*|BASH_CMDS"
                 r"|BASH_ALIASES|BASH_LOADABLES_PATH|EXECIGNORE"
                 r"|GIT_CONFIG_PARAMETERS|GIT_CONFIG_COUNT|GIT_CONFIG_KEY_\w*|GIT_CONFIG_VALUE_\w*|GIT_CONFIG_GLOBAL"
                 r"|GIT_CONFIG_SYSTEM|GIT_CONFIG|GIT_EXTERNAL_DIFF|GIT_SSH|GIT_SSH_COMMAND|GIT_PROXY_COMMAND"
                 r"|GIT_ASKPASS|SSH_ASKPASS|GIT_EXEC_PATH|GIT_TEMPLATE_DIR"
                 r"|(?:GIT_EDITOR|GIT_SEQUENCE_EDITOR|EDITOR|VISUAL)(?!=(?:true|cat|:)(?:[\s;&|)]|$))"
                 r"|LESSOPEN|LESSCLOSE|LD_PRELOAD|LD_AUDIT|BROWSER|TAR_OPTIONS|PERL5OPT|RUBYOPT|NODE_OPTIONS)")

_TAR_RUNS: Final = ("--to-command", "--checkpoint-action", "--use-compress-program", "--info-script", "--new-volume-script",
             "--rsh-command", "--rmt-command")


def abbreviates(word: str, option: str) -> bool:
    """Whether ``word`` names the long ``option`` (``--filter``), whole or as a prefix getopt_long
    takes for it (``--filt``, ``--filt=CMD``); an ambiguous prefix counts too (it only errs)."""
    name = word.split("=", 1)[0]
    return len(name) > 2 and name.startswith("--") and option.startswith(name)


def _any_abbreviates(words: tuple[str, ...], options: tuple[str, ...]) -> bool:
    return any(abbreviates(w, option) for w in words if w.startswith("--") for option in options)


_GIVEN_COMMAND_RUNNERS: Final = frozenset({"fc", "strace", "ltrace", "npx", "fakeroot", "flock", "split", "tar", "gtar",
                                    "bsdtar", "sed", "gsed"})


def runs_given_command(program: str, argv: tuple[str, ...]) -> str | None:
    """Options and builtins that run a shell command they are given, which the line shows only
    as a word: ``fc`` (it runs history entries, or its -e editor), ``strace``/``ltrace -o
    '|CMD'``, ``flock -c CMD``, ``split --filter=CMD``, tar's ``--checkpoint-action=exec=``,
    ``-I``/``--use-compress-program``, ``--to-command``, ``-F``/``--info-script``, and sed's ``e``
    command, ``s///e`` and ``w`` (a file it writes). Long options are read as getopt_long reads
    them, abbreviated too (``split --filt=CMD``)."""
    if program not in _GIVEN_COMMAND_RUNNERS:  # (most commands)
        return None
    words = argv[1:]
    options = [w for w in words if w.startswith("-") and not w.startswith("--") and w != "-"]
    if program == "fc" and (not any("l" in w for w in options) or any("s" in w or "e" in w for w in options)):
        return "fc runs commands from the shell's history (or its -e editor; -s and -e run even with -l)"
    if program in ("strace", "ltrace"):
        for k, w in enumerate(words):
            if not w.startswith("-"):
                break  # the traced command
            nxt = words[k + 1] if k + 1 < len(words) else ""
            if abbreviates(w, "--output"):
                value = w.split("=", 1)[1] if "=" in w else nxt
            elif not w.startswith("--") and "o" in w:  # -o, -oVALUE, or last in a bundle: -fo VALUE, -fo'|…'
                value = w[w.index("o") + 1:] or nxt
            else:
                value = ""
            if value.startswith(("|", "!")):
                return f"{program} -o '|…' pipes its output into a shell command"
            if program == "strace" and not w.startswith("--") and "E" in w:  # -E VAR=…, -fEVAR=…
                variable = (w[w.index("E") + 1:] or nxt).split("=", 1)[0]
                if re.fullmatch(STARTUP_NAMES, variable):
                    return "strace -E sets a variable whose value a program runs"
    if program == "npx" and (any(w == "-c" or (not w.startswith("--") and "c" in w[1:]) for w in options)
                             or _any_abbreviates(words, ("--call",))):
        return "npx -c runs a shell command"
    if program == "fakeroot" and (any(w[1:2] in ("s", "l", "i", "b") for w in options)
                                  or _any_abbreviates(words, ("--faked", "--lib"))):
        return "fakeroot passes its --faked, -s, -i, -l and -b values through eval"
    if program == "flock" and any(w == "-c" or (w.startswith("-") and not w.startswith("--") and "c" in w[1:])
                                  for w in words) or program == "flock" and _any_abbreviates(words, ("--command",)):
        return "flock -c runs a shell command"
    if program == "split" and _any_abbreviates(words, ("--filter",)):
        return "split --filter runs a shell command"
    if program in ("tar", "gtar", "bsdtar") and (_any_abbreviates(words, _TAR_RUNS) or any(
            (w.startswith("-") and not w.startswith("--") and ("I" in w or "F" in w))
            or (k == 0 and not w.startswith("-") and ("I" in w or "F" in w)) for k, w in enumerate(words))):
        return f"{program} runs a program it is given (a compressor, a script, a checkpoint action)"
    if program in ("sed", "gsed") and _sed_runs_or_writes(words):
        return "a sed script that runs a command (e, s///e) or writes a file (w)"
    return None


def _sed_scripts(words: tuple[str, ...]) -> list[str] | None:
    """The scripts of a sed command line (-e/--expression values, in option bundles too: ``-ne
    SCRIPT``; else the first operand); None when one is read from a file (-f), or an option is
    one not read here."""
    scripts: list[str] = []
    operands: list[str] = []
    k = 0
    while k < len(words):
        w = words[k]
        if w == "--":
            operands += words[k + 1:]
            break
        if w.startswith("--"):
            if abbreviates(w, "--expression"):
                if "=" in w:
                    scripts.append(w.split("=", 1)[1])
                elif k + 1 < len(words):
                    scripts.append(words[k + 1])
                    k += 1
            elif abbreviates(w, "--file"):
                return None
            elif abbreviates(w, "--line-length") and "=" not in w:
                k += 1  # its value
            k += 1
            continue
        if w.startswith("-") and w != "-":
            for j, letter in enumerate(w[1:], start=1):  # a bundle: -n, -E, -e SCRIPT, -iSUFFIX …
                rest = w[j + 1:]
                if letter == "e":
                    if rest:
                        scripts.append(rest)
                    elif k + 1 < len(words):
                        scripts.append(words[k + 1])
                        k += 1
                    break
                if letter == "f":
                    return None
                if letter == "l":
                    if not rest:
                        k += 1  # its value
                    break
                if letter in "is":  # -i[SUFFIX] (the rest is the suffix); -s takes none
                    if letter == "i":
                        break
                    continue
                if letter not in "nErsuzb":
                    return None  # an option not read here
            k += 1
            continue
        operands.append(w)
        k += 1
    return scripts or operands[:1]


def _sed_regex_end(script: str, i: int, delimiter: str) -> int:
    """Past the delimiter that ends a regex starting at ``script[i]``: escapes skipped, bracket
    expressions whole (GNU sed reads ``/[/]/`` as one address)."""
    n = len(script)
    while i < n:
        c = script[i]
        if c == "\\":
            i += 2
        elif c == "[":
            i = _bracket_end(script, i)
        elif c == delimiter:
            return i + 1
        else:
            i += 1
    return n


def _sed_one_address(script: str, i: int) -> int:
    """Past one address at ``script[i]`` (a number, ``first~step``, ``$``, ``/re/``, ``\\cREc``, with
    the I/M flags), or ``i`` when none stands there."""
    n = len(script)
    if i < n and script[i].isdigit():
        while i < n and (script[i].isdigit() or script[i] == "~"):
            i += 1
    elif i < n and script[i] == "$":
        i += 1
    elif i < n and script[i] == "/":
        i = _sed_regex_end(script, i + 1, "/")
    elif i + 1 < n and script[i] == "\\":
        i = _sed_regex_end(script, i + 2, script[i + 1])
    else:
        return i
    while i < n and script[i] in "IM":
        i += 1
    return i


def _sed_address_end(script: str, i: int) -> int:
    """Past the address part of a command at ``script[i]``: blanks, an address, ``,ADDR`` (or
    ``,+N``/``,~N``), ``!`` (and blanks around them)."""
    n = len(script)
    while i < n and script[i] in " \t":
        i += 1
    i = _sed_one_address(script, i)
    while i < n and script[i] in " \t":
        i += 1
    if i < n and script[i] == ",":
        i += 1
        while i < n and script[i] in " \t":
            i += 1
        if i < n and script[i] in "+~":
            i += 1
        i = _sed_one_address(script, i)
    while i < n and script[i] in " \t!":
        i += 1
    return i


def _bracket_end(script: str, i: int) -> int:
    """Where the bracket expression that opens at ``script[i]`` ends (past its "]"; a "]" first
    or after "^" is a member, so are [:class:], [.x.] and [=x=]); the end of the script if it
    does not close."""
    j = i + 1
    if script[j:j + 1] == "^":
        j += 1
    if script[j:j + 1] == "]":
        j += 1
    while j < len(script):
        if script[j] == "[" and script[j + 1:j + 2] in (":", ".", "="):
            close = script.find(script[j + 1] + "]", j + 2)
            if close < 0:
                return len(script)
            j = close + 2
            continue
        if script[j] == "]":
            return j + 1
        j += 1
    return len(script)


def _sed_runs_or_writes(words: tuple[str, ...]) -> bool:
    """Whether a sed script holds an ``e`` command, an ``s`` with the ``e`` or ``w`` flag, or a
    ``w``/``W`` command (read the way GNU sed reads its commands; a script it cannot read, or
    one from a file, counts)."""
    scripts = _sed_scripts(words)
    if scripts is None:
        return True
    for script in scripts:
        i, n = 0, len(script)
        while i < n:
            if script[i] in " \t\n;{}":
                i += 1
                continue
            if script[i] == "#":  # a comment, to the end of the line
                i = script.find("\n", i)
                i = n if i < 0 else i
                continue
            i = _sed_address_end(script, i)
            if i >= n:
                break
            command = script[i]
            if command in "ewW":
                return True
            if command in "sy":
                if i + 1 >= n:
                    return True
                delimiter, i, parts = script[i + 1], i + 2, 0
                while i < n and parts < 2:
                    if script[i] == "\\":
                        i += 2
                        continue
                    if script[i] == "[" and parts == 0 and command == "s":  # a bracket expression: its
                        i = _bracket_end(script, i)  # delimiters are literal for GNU sed (s/[/]/x/)
                        continue
                    if script[i] == delimiter:
                        parts += 1
                    i += 1
                if parts < 2:
                    return True  # not read here (sed may read it otherwise)
                flags = i
                while i < n and script[i] not in ";\n}":
                    i += 1
                if command == "s" and ("e" in script[flags:i] or "w" in script[flags:i]):
                    return True
                continue
            if command in ":bTt":  # a label: GNU sed ends it at ";" or a blank
                i += 1
                while i < n and script[i] in " \t":
                    i += 1
                while i < n and script[i] not in "; \t\n":
                    i += 1
                continue
            if command in "aicrRqQlL":  # text, a file read or a number: to the end of the line
                end = script.find("\n", i)
                stop = n if end < 0 else end
                if command in "qQlL":  # (these end at ";" too)
                    semi = script.find(";", i, stop)
                    stop = semi if semi >= 0 else stop
                i = stop
                continue
            if command in "=dDgGhHnNpPxzF{}":
                i += 1
                continue
            return True  # a command not read here
    return False
