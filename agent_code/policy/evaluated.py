"""Text that bash evaluates as code later: values that reach arithmetic or prompt expansion.

Bash runs a ``$(…)`` or `…` it finds in text it *evaluates*, not only in text it parses:

* an array subscript is expanded when bash evaluates it (``a[$(cmd)]``), and arithmetic
  evaluates a variable's value as an expression, recursively: ``x='a[$(rm -rf ~)]';
  echo $((x))`` runs rm, though the line shows only a quoted string and ``$((x))``. The same
  holds for ``((…))``, ``let``, ``$[…]``, ``for ((…))``, the arithmetic operators of ``[[ ]]``
  (``-eq`` …), ``declare -i``, indexed subscripts (``${a[x]}``) and substring offsets
  (``${s:x}``);
* builtins that take a variable *name* evaluate a subscript in it: ``test -v 'a[$(…)]'``,
  ``printf -v``, ``read``, ``mapfile``, ``getopts``, ``wait -p``, namerefs (``declare -n``), and
  indirection (``${!x}``);
* ``${x@P}`` expands a value as a prompt, running the ``$(…)`` in it.

:func:`evaluated_code` finds the lines where such text may carry code and says why; the
analysis counts them as unknown (the policy asks). A line is judged as before when it
evaluates nothing, or when nothing it evaluates can hold code: no subscript with ``$(…)``/`\\``
is planted anywhere in it, no ``$(…)`` sits in the arithmetic itself, and no variable the
arithmetic names was read when the line runs (``read``, ``mapfile``, a ``for`` over a glob or
``$(…)``, ``x=$(…)``, ``a=(*)``, followed through the line's assignments: ``y=$x``). Numbers
from ``$(… | wc -l)``, ``$(nproc)`` and ``$(seq N…)`` count as numbers. The constructs are found
by their spelling, which errs towards finding more. Pure functions of the text.
"""

from __future__ import annotations

import re
from bisect import bisect_left
from typing import Final

from agent_code.policy.shell_syntax import _ansi_c

# --- constructs that evaluate text -----------------------------------------------------------

_PROMPT_EXPANSION: Final = re.compile(r"@P\s*\}")
# ${!name} and ${!name[i]}: the value names another variable (${!prefix*}, ${!a[@]} list names)
_INDIRECTION: Final = re.compile(r"\$\{!(?![A-Za-z_][A-Za-z0-9_]*(?:\[[@*]\]|[@*])\})")
_NAMEREF: Final = re.compile(r"(?:declare|typeset|local)\s+(?:[-+][A-Za-z]*\s+)*-[A-Za-z]*n")  # (+x, +r before -n)
# a variable name with a subscript given to a builtin that evaluates it (quotes may split it:
# `-v 'a[$'"(…)]"`): -v NAME (test, [, [[, printf), read/mapfile/readarray/getopts/wait -p/unset
# test -v, [ -v, [[ -v, printf -v, wait -p NAME (a name given by an expansion may hold one too);
# only in those commands: mkdir -p "$d", grep -v "$x" name no variable
_OPTION_SUBSCRIPT: Final = re.compile(r"(?:\btest|\bprintf|\bwait|(?:^|(?<=\s))\[\[?)\s[^;&|\n]*?(?<=\s)-[vp]\s*\S*[\[$]")
_OPTION_TAKERS: Final = ("test", "printf", "wait", "[")  # where a match of _OPTION_SUBSCRIPT can start
_NAME_TAKERS: Final = ("read", "mapfile", "readarray", "getopts", "unset", "declare", "typeset", "local", "export", "readonly")
_TAKER_SUBSCRIPT: Final = re.compile(r"(?:read|mapfile|readarray|getopts|unset|declare|typeset|local|export|readonly)\b"
                              r"[^;&|\n]*\[")
# --- sources of values that may carry code ---------------------------------------------------

_NAME: Final = r"[A-Za-z_][A-Za-z0-9_]*"
# a planted value: a subscript holding "$(" or "`" (quotes and backslashes may split them;
# "$((" is arithmetic): any arithmetic in the line may reach it through some variable
_PLANTED: Final = re.compile(r"\[[^]\n]*(?:\$['\"\\]*\((?!\()|`)")  # (searched by _planted)
_OLD_ARITHMETIC: Final = re.compile(r"\$\[([^]]*)\]")  # $[…] (found by _old_arithmetic)
_PLANTED_AFTER: Final = re.compile(r"\$['\"\\]*\((?!\()|`")  # _PLANTED after its "[" and the text to its end
_SUBSTITUTION: Final = re.compile(r"\$\((?!\()|`")  # (not "$((": an arithmetic expansion)
# substitutions whose output is a number: `… | wc -l` (no file named: wc prints the count
# alone), `nproc`, `seq` of numbers
_NUMERIC_SUBSTITUTION: Final = re.compile(r"\$\([^()`]*\|\s*wc(?:\s+-[lcwm]+)*\s*\)|\$\(\s*nproc\s*\)|"
                                   r"\$\(\s*seq(?:\s+-?[0-9]+)+\s*\)")
_DEFINES_COUNTERS: Final = re.compile(r"\b(?:wc|nproc|seq)\s*\(\s*\)|\bfunction\s+(?:wc|nproc|seq)\b")
# names whose values are read when the line runs: read, mapfile, getopts, printf -v, wait -p,
# the variable of a for/select over a list that expands (a glob, $x, $(…))
# NAME=VALUE (VALUE: up to an operator or a blank, an $((…)) or an array (…) whole)
_ASSIGNED: Final = re.compile(r"(?:^|(?<=[\s;&|(){}`]))(" + _NAME + r")(?:\[[^]]*\])?\+?="
                       r"((?:\$\(\((?:[^()]|\([^()]*\))*\)\)|\([^()]*\)|\"[^\"]*\"|'[^']*'|[^\s;&|<>()])*)")
_NAME_CHARS: Final = frozenset("ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789_")
_BEFORE_NAME: Final = frozenset(";&|(){}`")  # (and whitespace): what _ASSIGNED's lookbehind allows


def _assignments(text: str) -> list[re.Match[str]]:
    """``_ASSIGNED.finditer(text)``, tried only where a match can start: the start of a name
    that ends before an "=" (``x=``, ``x+=``, ``x[…]=``). The search itself tries the pattern
    at every character, a tenth of a millisecond on a 2 kB line (tests/test_policy_fastpaths.py
    compares them)."""
    starts = set()
    q = text.find("=")
    while q >= 0:
        end = q - 1 if q and text[q - 1] == "+" else q
        ends = [end]  # where the name may end: before "=" / "+=", or before a subscript's "["
        if end and text[end - 1] == "]":
            j = text.find("[", text.rfind("]", 0, end - 1) + 1, end - 1)
            while j >= 0:  # (any "[" after the last "]" before it may open the subscript)
                ends.append(j)
                j = text.find("[", j + 1, end - 1)
        for name_end in ends:
            p = name_end
            while p and text[p - 1] in _NAME_CHARS:
                p -= 1
            if p < name_end and (p == 0 or text[p - 1] in _BEFORE_NAME or text[p - 1].isspace()):
                starts.add(p)
        q = text.find("=", q + 1)
    found: list[re.Match[str]] = []
    last = 0
    for p in sorted(starts):
        if p >= last:
            m = _ASSIGNED.match(text, p)
            if m is not None:
                found.append(m)
                last = m.end()
    return found


_USES: Final = re.compile(r"\$\{?#?(" + _NAME + r")|(?<![$\w])(" + _NAME + r")")
_POSITIONAL: Final = re.compile(r"\$\{?[1-9@*]")


_ARITHMETIC_TESTS: Final = ("-eq", "-ne", "-lt", "-le", "-gt", "-ge")
_DECLARERS: Final = ("declare", "typeset", "local")  # (export and readonly take no -i or -n)
_LET: Final = re.compile(r"let\s+([^;&|\n]*)")
_SEPARATORS: Final = re.compile(r"[;&|\n]")  # where a command's segment of the line ends
_SUBSCRIPT_OR_OFFSET: Final = re.compile(r"\$\{[#!]?(?:" + _NAME + r"|[@*0-9]+)(\[[^]]*\](?::(?![-=+?])[^}]*)?|:(?![-=+?])[^}]*)")
_SUBSCRIPT_ASSIGNED: Final = re.compile(r"(\[[^]]*\])\+?=")  # a[i]=…, a=([i]=…)
_DECLARATION: Final = re.compile(r"(?:declare|typeset|local)\s([^;&|\n]*)")


_COMMAND_START: Final = frozenset(" \t\n;&|({`!")  # what may stand before a command's name


def _at_words(text: str, words: tuple[str, ...], pattern: re.Pattern[str]) -> list[re.Match[str]]:
    """``pattern`` matched where one of ``words`` stands where a command's name may (after a
    blank, an operator or an opening bracket; found by plain searches: the pattern is tried at
    those places only, not at every character)."""
    found = []
    for word in words:
        at = text.find(word)
        while at >= 0:
            if at == 0 or text[at - 1] in _COMMAND_START:
                m = pattern.match(text, at)
                if m is not None:
                    found.append(m)
            at = text.find(word, at + 1)
    return found


def _option_subscript(text: str) -> bool:
    """``_OPTION_SUBSCRIPT.search(text)``, tried only where a match can start (an occurrence
    of one of ``_OPTION_TAKERS``): the search itself tries the pattern at every character,
    a tenth of a millisecond on a 2 kB line (tests/test_policy_fastpaths.py compares them)."""
    match = _OPTION_SUBSCRIPT.match
    for word in _OPTION_TAKERS:
        at = text.find(word)
        while at >= 0:
            if match(text, at) is not None:
                return True
            at = text.find(word, at + 1)
    return False


def _arithmetic_texts(text: str) -> list[str]:
    """The texts bash evaluates as arithmetic in ``text`` (found by their spelling; each
    pattern only where a substring it needs is present: most lines have none)."""
    out: list[str] = []
    at = text.find("((")
    while at >= 0:  # $((…)), ((…)), for ((…))
        depth, i = 2, at + 2
        while i < len(text) and depth:
            c = text[i]
            if c == "(":
                depth += 1
            elif c == ")":
                depth -= 1
            i += 1
        out.append(text[at + 2:i])
        at = text.find("((", at + 2)
    if "$[" in text:
        out += _old_arithmetic(text)
    if "let" in text:
        out += [m.group(1) for m in _at_words(text, ("let",), _LET)]
    separators: list[int] | None = None
    for test in _ARITHMETIC_TESTS:  # [[ x -eq y ]], [ x -eq y ], test …: the command's words, to be safe
        at = text.find(test)
        while at >= 0:
            if separators is None:
                separators = [m.start() for m in _SEPARATORS.finditer(text)]
            start, stop = _segment(separators, at, len(text))
            out.append(text[start:stop])
            at = text.find(test, at + 1)
    if "${" in text:
        out += _SUBSCRIPT_OR_OFFSET.findall(text)
    if "]=" in text or "]+=" in text:
        out += _subscripts_assigned(text)
    if any(word in text for word in _DECLARERS):  # declare -i x=value, declare +r -i y, declare $o y
        for m in _at_words(text, _DECLARERS, _DECLARATION):
            words = m.group(1).split()
            if any((w[:1] in "-+" and "i" in w) or w.startswith("$") for w in words):
                out.append(m.group(1))
    return out


def _segment(separators: list[int], at: int, length: int) -> tuple[int, int]:
    """The segment of a line around ``at`` (after the separator before it, up to the one after
    it), from the line's sorted ``separators`` (``_SEPARATORS``) and its ``length``."""
    i = bisect_left(separators, at)
    return (separators[i - 1] + 1 if i else 0), (separators[i] if i < len(separators) else length)


def _old_arithmetic(text: str) -> list[str]:
    """``_OLD_ARITHMETIC.findall(text)`` in one pass: that search reads from every "$[" to the
    end of a line that closes none of them (the square of the line)."""
    out = []
    at = text.find("$[")
    while at >= 0:
        end = text.find("]", at + 2)
        if end < 0:  # (nor does any "$[" after it close)
            break
        out.append(text[at + 2:end])
        at = text.find("$[", end + 1)
    return out


def _subscripts_assigned(text: str) -> list[str]:
    """``_SUBSCRIPT_ASSIGNED.findall(text)`` in one pass: between one "]" and the next, the
    match can only start at the first "[" (the search itself reads from each of them)."""
    out = []
    start = 0
    close = text.find("]")
    while close >= 0:
        after = close + 1
        if text.startswith("=", after) or text.startswith("+=", after):
            opened = text.find("[", start, close)
            if opened >= 0:
                out.append(text[opened:close + 1])
        start = after
        close = text.find("]", after)
    return out


def _planted(text: str) -> bool:
    """``_PLANTED.search(text) is not None`` in one pass: between one "]" or newline and the
    next, what follows the first "[" holds what follows any later one (the search itself
    reads from each "[")."""
    start = 0
    for m in _BRACKET_END.finditer(text):
        opened = text.find("[", start, m.start())
        if opened >= 0 and _PLANTED_AFTER.search(text, opened + 1, m.start()) is not None:
            return True
        start = m.start() + 1
    opened = text.find("[", start)
    return opened >= 0 and _PLANTED_AFTER.search(text, opened + 1) is not None


# variables commands set without naming them: untrusted wherever arithmetic reads them
_IMPLICIT: Final = frozenset({"REPLY", "MAPFILE", "_", "BASH_REMATCH", "OPTARG", "COPROC", "BASH_ARGV", "BASH_ARGC",
                       "BASH_COMMAND", "READLINE_LINE", "BASH_EXECUTION_STRING"})
_BINDERS: Final = ("read", "mapfile", "readarray", "getopts", "printf", "wait", "declare", "typeset", "local", "export",
            "readonly", "unset", "for", "select", "coproc")
# the words whose scans read to the separator after them (_bindings, _at_words): _scan_cost
_SEGMENT_WORDS: Final = tuple(dict.fromkeys((*_BINDERS, *_DECLARERS, *_NAME_TAKERS, "let")))
_AFTER_BINDER: Final = (" ", "\t", "<", ">")
_REDIRECTION_WORD: Final = re.compile(r"[0-9]*(?:<|>)")  # a word that starts a redirection (<<<, 2>, >f …)
_VALUE_OPTIONS: Final = {"read": ("-d", "-i", "-n", "-N", "-p", "-t", "-u"), "mapfile": ("-d", "-n", "-O", "-s", "-u", "-c"),
                  "readarray": ("-d", "-n", "-O", "-s", "-u", "-c")}
_NUMBER_VALUE: Final = re.compile(r"[+-]?[0-9]*|\(\s*(?:[+-]?[0-9]+\s*)*\)")
_COPY_VALUE: Final = re.compile(r"\$?\{?(" + _NAME + r")\}?")


def _bindings(text: str) -> tuple[set[str], str | None]:
    """Names the line's commands set from what runs (read, mapfile, for, printf -v …), and why
    no name can be trusted, when a command takes a name only known when it runs (``read "$n"``,
    ``declare $o y``)."""
    bound: set[str] = set()
    for word in _BINDERS:
        at = text.find(word)
        while at >= 0:
            # (a blank or a redirection after the name: `read<<<"$v" x` binds x)
            if (at == 0 or text[at - 1] in _COMMAND_START) and text[at + len(word):at + len(word) + 1] in _AFTER_BINDER:
                end = _SEPARATORS.search(text, at)
                words = text[at + len(word):end.start() if end is not None else len(text)].split()
                why = _bind(word, words, bound)
                if why is not None:
                    return bound, why
            at = text.find(word, at + 1)
    return bound, None


_LOWERCASE_ENVIRONMENT: Final = frozenset({"http_proxy", "https_proxy", "ftp_proxy", "all_proxy", "no_proxy"})


def _bind(command: str, words: list[str], bound: set[str]) -> str | None:
    """Add to ``bound`` what one command sets from what runs; why nothing can be trusted, or None."""
    if command in ("for", "select"):
        if words:
            if len(words) < 2 or words[1] != "in" or not all(w.lstrip("+-").isdigit() for w in words[2:]):
                bound.add(words[0])  # over the positional parameters, or over words that are not numbers
        return None
    if command == "printf":
        for k, w in enumerate(words):
            if w.startswith("-v"):
                name = w[2:] or (words[k + 1] if k + 1 < len(words) else "")
                if "$" in name or "`" in name:
                    return "printf -v with a name only known when it runs"
                bound.add(name.split("[")[0])
        return None
    skip = _VALUE_OPTIONS.get(command, ())
    value_next = False
    for w in words:
        if value_next:
            value_next = False
            continue
        if _REDIRECTION_WORD.match(w):  # `read -r <<< "$v" x`: its target, then names again
            value_next = not w.lstrip("0123456789").lstrip("<>&|-")  # the operator alone: the target follows
            continue
        if w.startswith(("-", "+")) and command != "coproc":
            value_next = w in skip
            continue
        name = w.split("=", 1)[0]
        if "$" in name or "`" in name:
            return f"{command} with a name or an option only known when it runs"
        if command not in ("declare", "typeset", "local", "export", "readonly", "unset") or "=" not in w:
            if command not in ("declare", "typeset", "local", "export", "readonly", "unset"):
                bound.add(name.split("[")[0])
    return None


def _one_arithmetic_expansion(value: str) -> bool:
    """Whether ``value`` is one ``$((…))`` and nothing else (``$((1))+x+$((0))`` is not)."""
    if not (value.startswith("$((") and value.endswith("))")):
        return False
    depth = 0
    for k, c in enumerate(value[1:], start=1):
        if c == "(":
            depth += 1
        elif c == ")":
            depth -= 1
            if depth == 0:
                return k == len(value) - 1
    return False


def _untrusted(used: set[str], text: str) -> str | None:
    """The first of ``used`` (names arithmetic evaluates) whose value may not be a number:
    set implicitly (REPLY …), bound by a command from what runs, or assigned anything but
    numbers, ``$((…))`` or a copy of a trusted name (arithmetic evaluates a name's value as an
    expression again, so a copy is as good as what it copies). A name the line never sets is
    the environment's. Why none can be trusted, when a command binds a name only known then."""
    bound, why = _bindings(text)
    if why is not None:
        return why
    values: dict[str, list[str]] = {}
    for m in _assignments(text):
        # (a value that stops at "(" is one the pattern cannot read: `a=("$(…)")`, nested
        # parentheses; it stands as "(", which no number matches)
        unread = m.end() < len(text) and text[m.end()] == "("
        values.setdefault(m.group(1), []).append("(" if unread else m.group(2))
    for m in re.finditer(r"\$\{(" + _NAME + r"):?[-=?+]?=([^}]*)", text):  # ${x:=value}
        values.setdefault(m.group(1), []).append(m.group(2))
    trusted: dict[str, bool] = {}  # decided, or being decided (False: a cycle back to it)

    def copies(name: str) -> list[str] | None:
        """The names ``name`` is a copy of; None when a value of its own may not be a number."""
        if name in _IMPLICIT or name in bound:
            return None
        out: list[str] = []
        for v in values.get(name, ()):
            if _NUMBER_VALUE.fullmatch(v) is None and not _one_arithmetic_expansion(v):
                copy = _COPY_VALUE.fullmatch(v)
                if copy is None:
                    return None
                out.append(copy.group(1))
        return out

    def trust(name: str) -> bool:
        """Whether every name ``name`` copies, at any remove, is trusted; depth-first with a
        stack of its own (`a=$b; b=$c; …` is a chain as long as the line)."""
        stack: list[tuple[str, list[str]]] = []
        pending, ok = [name], True
        while True:
            if pending:
                n = pending.pop()
                if n in trusted:
                    ok = trusted[n]
                else:
                    found = copies(n)
                    trusted[n] = False
                    if found is None:
                        ok = False
                    else:
                        stack.append((n, found[::-1]))
                        continue
            if not stack:
                return ok
            n, todo = stack[-1]
            if ok and todo:
                pending.append(todo.pop())
            else:  # every copy trusted (or one not: the rest are not needed)
                trusted[n] = ok
                stack.pop()

    for name in sorted(used):
        if not trust(name):
            return f"arithmetic on {name!r}, a value that may not be a number (a subscript in it would run a $(…))"
    return None


_ANSI_C: Final = re.compile(r"\$'((?:[^'\\]|\\.)*)'", re.DOTALL)


def _flat(text: str) -> str:
    """``text`` with ``$'…'`` strings decoded and quotes and backslashes dropped: how its
    words read after quote removal (``$'\\x5b'`` is "[", ``\\let`` is "let", ``'-i'`` is "-i",
    ``'a[$'"(…)"`` is "a[$(…)"), for the patterns below. Dropping them only uncovers: what the
    patterns find in the line as written they find here too (quoted text reads as code)."""
    if "$'" in text:
        text = _ANSI_C.sub(lambda m: _ansi_c(m.group(1)), text)
    return text.replace("\\\n", "").replace("\\", "").replace("'", "").replace('"', "")


def flat_text(text: str) -> str:
    """``text`` after quote removal (:func:`_flat`), as the patterns of the policy read it."""
    return _flat(text) if "'" in text or '"' in text or "\\" in text else text


def evaluated_code(text: str) -> str | None:
    """Why ``text`` (a command line) may run code hidden in a value it evaluates, or None
    (read after quote removal: :func:`_flat`)."""
    return read_values(text)[0]


def read_values(text: str, flat: str | None = None) -> tuple[str | None, bool]:
    """:func:`evaluated_code` of ``text`` (``flat``: its :func:`flat_text`, when the caller has
    it), and whether a command of it binds a variable that may be in the environment of the
    commands after it without an assignment's ``NAME=`` (``for HOME in …``, ``read PATH``,
    ``printf -v GIT_DIR``, ``getopts`` …) or one whose name is only known when it runs: what a
    later command then runs with may differ from what it shows. Environment variables are the
    upper-case names (and the lower-case proxies); a loop's ``f`` is none. Read once."""
    flat = flat_text(text) if flat is None else flat
    if len(flat) > COSTED_LENGTH and _scan_cost(flat) > _scan_budget(flat):
        return TOO_TANGLED, True
    bound, why = _bindings(flat)
    binds = why is not None or any(not name.islower() or name in _LOWERCASE_ENVIRONMENT for name in bound)
    return _evaluated_code(flat, why), binds


# --- what the scans below cost -----------------------------------------------------------------
# Each scan reads from where its construct starts to where it ends (a binder or a declaration to
# the next separator, "((" to its ")", "[" to its "]"), so a line of many starts that share one
# long end costs the square of its length: 10 kB of `declare a=$(declare b=$(…` or `read read
# read …` took a quarter to half a second, 13 kB of nested "((" over a second, and 64 kB a
# minute. For a line past COSTED_LENGTH the scans' reading is added up first, in one pass of
# its own (linear, but for a sort); past a budget linear in the line, nothing is scanned and the
# line is one whose values cannot be followed (asked, as any unknown). Up to COSTED_LENGTH
# the square is bounded (a tenth of a second), and common lines pay nothing for the count.

COSTED_LENGTH = 4096  # (plain, not Final: tests lower it)
TOO_TANGLED: Final = ("its evaluated values are too tangled to follow (constructs nested or repeated so often that "
                      "checking them would take too long)")
_BRACKET_END: Final = re.compile(r"[]\n]")
_SUBSCRIPT_START: Final = re.compile(r"\$\{[#!]?(?:" + _NAME + r"|[@*0-9]+)\[")  # _SUBSCRIPT_OR_OFFSET's, to its "["


def _scan_budget(text: str) -> int:
    """Characters the scans may read for ``text``: 64 a character, and 256k whatever the line."""
    return 64 * len(text) + 262144


def _scan_cost(text: str) -> int:
    """How many characters :func:`_bindings`, :func:`_at_words`, :func:`_option_subscript`
    and :func:`_arithmetic_texts` read in ``text``, within a small factor: from each place a
    match may start to where its scan stops at the latest (the separator after it, its
    closing bracket), counted once per place (a declarer is read by three scans and
    _bindings). The other scans read each character a bounded number of times (``_planted``,
    ``_old_arithmetic`` and ``_subscripts_assigned`` do in one pass what a regex search did
    from every "[")."""
    separators = [m.start() for m in _SEPARATORS.finditer(text)]
    end = len(text)
    cost = 0

    def to_separator(at: int) -> int:
        return _segment(separators, at, end)[1] - at

    for word in _SEGMENT_WORDS:  # _bindings, _at_words: after a command's start
        at = text.find(word)
        while at >= 0:
            if at == 0 or text[at - 1] in _COMMAND_START:
                cost += to_separator(at)
            at = text.find(word, at + 1)
    for word in _OPTION_TAKERS:  # _option_subscript: where _OPTION_SUBSCRIPT's start matches
        at = text.find(word)
        while at >= 0:
            after = at + len(word) + (word == "[" and text.startswith("[", at + 1))
            if (at == 0 or (text[at - 1].isspace() if word == "[" else text[at - 1] not in _NAME_CHARS)) \
                    and text[after:after + 1].isspace():
                cost += to_separator(at)
            at = text.find(word, at + 1)
    for word in _ARITHMETIC_TESTS:  # _arithmetic_texts: every one, the whole of its segment
        at = text.find(word)
        while at >= 0:
            start, stop = _segment(separators, at, end)
            cost += stop - start
            at = text.find(word, at + 1)
    if text.count("((") > 16:  # (up to 16, they read at most 16 lines' length: within the budget)
        opened: list[int] = []
        for k, c in enumerate(text):
            if c == "(":
                opened.append(k)
            elif c == ")" and opened:
                start = opened.pop()
                if text.startswith("((", start):
                    cost += k - start
        cost += sum(end - start for start in opened if text.startswith("((", start))  # never closed
    if "${" in text:  # _SUBSCRIPT_OR_OFFSET: from each `${NAME[` to the next "]"
        for m in _SUBSCRIPT_START.finditer(text):
            close = text.find("]", m.end())
            cost += (close if close >= 0 else end) - m.start()
    return cost


def _evaluated_code(text: str, dynamic: str | None) -> str | None:
    """:func:`evaluated_code` of the flat ``text``; ``dynamic``: its :func:`_bindings`' reason."""
    if "@P" in text and _PROMPT_EXPANSION.search(text):
        return "a value expanded as a prompt (${x@P}) runs the $(…) in it"
    if "${!" in text and _INDIRECTION.search(text):
        return "an indirect expansion (${!x}) evaluates a name only known when it runs"
    # (each pattern only where a substring it needs is present: most lines have none)
    if any(word in text for word in _DECLARERS) and (
            _at_words(text, _DECLARERS, _NAMEREF)
            or any(w.startswith("$") for m in _at_words(text, _DECLARERS, _DECLARATION) for w in m.group(1).split())):
        return "a nameref (declare -n), or a declaration whose options or names are only known when it runs"
    if (("-v" in text or "-p" in text) and ("[" in text or "$" in text) and _option_subscript(text)) \
            or ("[" in text and _at_words(text, _NAME_TAKERS, _TAKER_SUBSCRIPT)):
        return "a variable name with a subscript that bash evaluates (it may run a $(…) in it)"
    if dynamic is not None and ("$" in text or "`" in text):
        return dynamic  # read "$n", unset "$n": a name, and a subscript in it, known when it runs
    # numbers stand for those, unless the line may make them other programs (a function of the
    # name, PATH changed)
    numeric = "$(" in text and "PATH" not in text and not _DEFINES_COUNTERS.search(text)
    plain = _NUMERIC_SUBSTITUTION.sub("0", text) if numeric else text
    arithmetic = _arithmetic_texts(plain)
    if not arithmetic:
        return None
    if "[" in text and _planted(text):
        return "arithmetic on a value that may hold a subscript with a $(…), which bash runs"
    if any(_SUBSTITUTION.search(part) for part in arithmetic):
        return "arithmetic on the output of a command (a subscript in it would run a $(…))"
    if any(_POSITIONAL.search(part) for part in arithmetic):
        return "arithmetic on positional parameters (a function's or set's arguments)"
    used = {a or b for part in arithmetic for a, b in _USES.findall(part)}
    if not used:  # arithmetic on numbers only
        return None
    return _untrusted(used, plain)
