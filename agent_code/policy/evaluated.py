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

from agent_code.policy.shell_syntax import _ansi_c

# --- constructs that evaluate text -----------------------------------------------------------

_PROMPT_EXPANSION = re.compile(r"@P\s*\}")
# ${!name} and ${!name[i]}: the value names another variable (${!prefix*}, ${!a[@]} list names)
_INDIRECTION = re.compile(r"\$\{!(?![A-Za-z_][A-Za-z0-9_]*(?:\[[@*]\]|[@*])\})")
_NAMEREF = re.compile(r"(?:declare|typeset|local)\s+(?:-[A-Za-z]*\s+)*-[A-Za-z]*n")
# a variable name with a subscript given to a builtin that evaluates it (quotes may split it:
# `-v 'a[$'"(…)]"`): -v NAME (test, [, [[, printf), read/mapfile/readarray/getopts/wait -p/unset
# test -v, [ -v, [[ -v, printf -v, wait -p NAME (a name given by an expansion may hold one too);
# only in those commands: mkdir -p "$d", grep -v "$x" name no variable
_OPTION_SUBSCRIPT = re.compile(r"(?:\btest|\bprintf|\bwait|(?:^|(?<=\s))\[\[?)\s[^;&|\n]*?(?<=\s)-[vp]\s+\S*[\[$]")
_NAME_TAKERS = ("read", "mapfile", "readarray", "getopts", "unset", "declare", "typeset", "local", "export", "readonly")
_TAKER_SUBSCRIPT = re.compile(r"(?:read|mapfile|readarray|getopts|unset|declare|typeset|local|export|readonly)\b"
                              r"[^;&|\n]*\[")
# --- sources of values that may carry code ---------------------------------------------------

_NAME = r"[A-Za-z_][A-Za-z0-9_]*"
# a planted value: a subscript holding "$(" or "`" (quotes and backslashes may split them;
# "$((" is arithmetic): any arithmetic in the line may reach it through some variable
_PLANTED = re.compile(r"\[[^]\n]*(?:\$['\"\\]*\((?!\()|`)")
_SUBSTITUTION = re.compile(r"\$\((?!\()|`")  # (not "$((": an arithmetic expansion)
# substitutions whose output is a number: `… | wc -l` (no file named: wc prints the count
# alone), `nproc`, `seq` of numbers
_NUMERIC_SUBSTITUTION = re.compile(r"\$\([^()`]*\|\s*wc(?:\s+-[lcwm]+)*\s*\)|\$\(\s*nproc\s*\)|"
                                   r"\$\(\s*seq(?:\s+-?[0-9]+)+\s*\)")
# names whose values are read when the line runs: read, mapfile, getopts, printf -v, wait -p,
# the variable of a for/select over a list that expands (a glob, $x, $(…))
_READERS = re.compile(r"(?:read|mapfile|readarray|getopts|printf\s+-v|wait\s+-p)\b([^;&|\n)]*)")
_READER_WORDS = ("read", "mapfile", "getopts", "printf", "wait")
_LOOP = re.compile(r"\b(?:for|select)\s+(" + _NAME + r")\s+in\b([^;\n]*)")
_ASSIGNED = re.compile(r"(?:^|(?<=[\s;&|(){}`]))(" + _NAME + r")(?:\[[^]]*\])?\+?=((?:\"[^\"]*\"|'[^']*'|\S)*)")
_USES = re.compile(r"\$\{?#?(" + _NAME + r")|(?<![$\w])(" + _NAME + r")")
_POSITIONAL = re.compile(r"\$\{?[1-9@*]")


_ARITHMETIC_TESTS = ("-eq", "-ne", "-lt", "-le", "-gt", "-ge")
_DECLARERS = ("declare", "typeset", "local")  # (export and readonly take no -i or -n)
_LET = re.compile(r"let\s+([^;&|\n]*)")
_SEPARATORS = re.compile(r"[;&|\n]")
_SUBSCRIPT_OR_OFFSET = re.compile(r"\$\{[#!]?(?:" + _NAME + r"|[@*0-9]+)(\[[^]]*\]|:(?![-=+?])[^}]*)")
_SUBSCRIPT_ASSIGNED = re.compile(r"(\[[^]]*\])\+?=")  # a[i]=…, a=([i]=…)
_INTEGER_DECLARED = re.compile(r"(?:declare|typeset|local)\s+(?:-[A-Za-z]*\s+)*-[A-Za-z]*i"
                               r"[A-Za-z]*\s([^;&|\n]*)")


_COMMAND_START = frozenset(" \t\n;&|({`!")  # what may stand before a command's name


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
        out += re.findall(r"\$\[([^]]*)\]", text)
    if "let" in text:
        out += [m.group(1) for m in _at_words(text, ("let",), _LET)]
    for test in _ARITHMETIC_TESTS:  # [[ x -eq y ]], [ x -eq y ], test …: the command's words, to be safe
        at = text.find(test)
        while at >= 0:
            start = max((m.end() for m in _SEPARATORS.finditer(text, 0, at)), default=0)
            end = _SEPARATORS.search(text, at)
            out.append(text[start:end.start() if end is not None else len(text)])
            at = text.find(test, at + 1)
    if "${" in text:
        out += _SUBSCRIPT_OR_OFFSET.findall(text)
    if "]=" in text or "]+=" in text:
        out += _SUBSCRIPT_ASSIGNED.findall(text)
    if any(word in text for word in _DECLARERS):  # declare -i x=value
        out += [m.group(1) for m in _at_words(text, _DECLARERS, _INTEGER_DECLARED)]
    return out


def _tainted(text: str) -> set[str]:
    """Names whose values may hold code: read when the line runs, or assigned the output of a
    command, or another tainted name's value (followed through the line's assignments)."""
    tainted: set[str] = set()
    for m in _at_words(text, _READER_WORDS, _READERS):
        tainted.update(re.findall(_NAME, m.group(1)))
    if "for" in text or "select" in text:
        for m in _LOOP.finditer(text):
            if re.search(r"[*?[$`]", m.group(2)):
                tainted.add(m.group(1))
    flows: list[tuple[str, set[str]]] = []
    for m in _ASSIGNED.finditer(text) if "=" in text else ():
        name, value = m.group(1), m.group(2)
        if _SUBSTITUTION.search(value) or "<(" in value or (value.startswith("(") and re.search(r"[*?[]", value)):
            tainted.add(name)  # (a=(*): an array of file names)
        elif "$" in value:
            flows.append((name, {a or b for a, b in _USES.findall(value.replace("$((", " ("))}))
    for m in re.finditer(r"\$\{(" + _NAME + r"):?=([^}]*)", text):  # ${x:=value}
        if _SUBSTITUTION.search(m.group(2)) or "$" in m.group(2):
            tainted.add(m.group(1))
    changed = True
    while changed:  # x=$y: x is tainted when y is
        changed = False
        for name, sources in flows:
            if name not in tainted and sources & tainted:
                tainted.add(name)
                changed = True
    return tainted


_ANSI_C = re.compile(r"\$'((?:[^'\\]|\\.)*)'", re.DOTALL)


def _flat(text: str) -> str:
    """``text`` with ``$'…'`` strings decoded and quotes and backslashes dropped: how its
    words read after quote removal (``$'\\x5b'`` is "[", ``\\let`` is "let", ``'-i'`` is "-i",
    ``'a[$'"(…)"`` is "a[$(…)"), for the patterns below. Dropping them only uncovers: what the
    patterns find in the line as written they find here too (quoted text reads as code)."""
    if "$'" in text:
        text = _ANSI_C.sub(lambda m: _ansi_c(m.group(1)), text)
    return text.replace("\\", "").replace("'", "").replace('"', "")


def evaluated_code(text: str) -> str | None:
    """Why ``text`` (a command line) may run code hidden in a value it evaluates, or None
    (read after quote removal: :func:`_flat`)."""
    return _evaluated_code(_flat(text) if "'" in text or '"' in text or "\\" in text else text)


def _evaluated_code(text: str) -> str | None:
    if "@P" in text and _PROMPT_EXPANSION.search(text):
        return "a value expanded as a prompt (${x@P}) runs the $(…) in it"
    if "${!" in text and _INDIRECTION.search(text):
        return "an indirect expansion (${!x}) evaluates a name only known when it runs"
    # (each pattern only where a substring it needs is present: most lines have none)
    if any(word in text for word in _DECLARERS) and _at_words(text, _DECLARERS, _NAMEREF):
        return "a nameref (declare -n) evaluates a name only known when it runs"
    if (("-v" in text or "-p" in text) and ("[" in text or "$" in text) and _OPTION_SUBSCRIPT.search(text)) \
            or ("[" in text and _at_words(text, _NAME_TAKERS, _TAKER_SUBSCRIPT)):
        return "a variable name with a subscript that bash evaluates (it may run a $(…) in it)"
    plain = _NUMERIC_SUBSTITUTION.sub("0", text) if "$(" in text else text  # numbers stand for those
    arithmetic = _arithmetic_texts(plain)
    if not arithmetic:
        return None
    if "[" in text and _PLANTED.search(text):
        return "arithmetic on a value that may hold a subscript with a $(…), which bash runs"
    if any(_SUBSTITUTION.search(part) for part in arithmetic):
        return "arithmetic on the output of a command (a subscript in it would run a $(…))"
    if any(_POSITIONAL.search(part) for part in arithmetic) and re.search(r"\bset\s", plain):
        return "arithmetic on positional parameters the line sets"
    used = {a or b for part in arithmetic for a, b in _USES.findall(part)}
    if not used:  # arithmetic on numbers only
        return None
    hit = sorted(used & _tainted(plain))
    if hit:
        return f"arithmetic on {hit[0]!r}, a value read when the line runs (a subscript in it would run a $(…))"
    return None
