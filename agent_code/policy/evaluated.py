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

# --- constructs that evaluate text -----------------------------------------------------------

_PROMPT_EXPANSION = re.compile(r"@P\s*\}")
# ${!name} and ${!name[i]}: the value names another variable (${!prefix*}, ${!a[@]} list names)
_INDIRECTION = re.compile(r"\$\{!(?![A-Za-z_][A-Za-z0-9_]*(?:\[[@*]\]|[@*])\})")
_NAMEREF = re.compile(r"(?:^|[\s;&|(])(?:declare|typeset|local|export|readonly)\s+(?:-[A-Za-z]*\s+)*-[A-Za-z]*n")
# a variable name with a subscript given to a builtin that evaluates it (quotes may split it:
# `-v 'a[$'"(…)]"`): -v NAME (test, [, [[, printf), read/mapfile/readarray/getopts/wait -p/unset
_NAME_SUBSCRIPT = re.compile(r"(?:-v|-p)\s+\S*\[|(?:^|[\s;&|(])(?:read|mapfile|readarray|getopts|unset|declare|"
                             r"typeset|local|export|readonly)\b[^;&|\n]*\[")
_ARITHMETIC = re.compile(r"\$\(\(|\(\(|\$\[|(?:^|[\s;&|(])let\s|-(?:eq|ne|lt|le|gt|ge)\b|"
                         r"(?:^|[\s;&|(])(?:declare|typeset|local)\s+(?:-[A-Za-z]*\s+)*-[A-Za-z]*i|"
                         r"\$\{#?[A-Za-z_][A-Za-z0-9_]*(?:\[|:(?![-=+?]))|[A-Za-z_][A-Za-z0-9_]*\[[^]]*\]\+?=")

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
_STARTS = r"(?:^|(?<=[\s;&|(){}`]))"  # where a command (or a keyword) starts
# names whose values are read when the line runs: read, mapfile, getopts, printf -v, wait -p,
# the variable of a for/select over a list that expands (a glob, $x, $(…))
_READERS = re.compile(_STARTS + r"(?:read|mapfile|readarray|getopts|printf\s+-v|wait\s+-p)\b([^;&|\n)]*)")
_LOOP = re.compile(_STARTS + r"(?:for|select)\s+(" + _NAME + r")\s+in\b([^;\n]*)")
_ASSIGNED = re.compile(r"(?:^|(?<=[\s;&|(){}`]))(" + _NAME + r")(?:\[[^]]*\])?\+?=((?:\"[^\"]*\"|'[^']*'|\S)*)")
_USES = re.compile(r"\$\{?#?(" + _NAME + r")|(?<![$\w])(" + _NAME + r")")
_POSITIONAL = re.compile(r"\$\{?[1-9@*]")


def _arithmetic_texts(text: str) -> list[str]:
    """The texts bash evaluates as arithmetic in ``text`` (found by their spelling)."""
    out: list[str] = []
    for m in re.finditer(r"\(\(", text):  # $((…)), ((…)), for ((…))
        depth, i = 2, m.end()
        while i < len(text) and depth:
            depth += {"(": 1, ")": -1}.get(text[i], 0)
            i += 1
        out.append(text[m.end():i])
    for m in re.finditer(r"\$\[([^]]*)\]", text):
        out.append(m.group(1))
    for m in re.finditer(_STARTS + r"let\s+([^;&|\n]*)", text):
        out.append(m.group(1))
    for m in re.finditer(r"\[\[(.*?)\]\]", text, re.DOTALL):  # [[ x -eq y ]]: operands are arithmetic
        if re.search(r"-(?:eq|ne|lt|le|gt|ge)\b", m.group(1)):
            out.append(m.group(1))
    for m in re.finditer(_STARTS + r"(?:test|\[)\s([^;&|\n]*-(?:eq|ne|lt|le|gt|ge)\b[^;&|\n]*)", text):
        out.append(m.group(1))
    for m in re.finditer(r"\$\{[#!]?" + _NAME + r"(\[[^]]*\]|:(?![-=+?])[^}]*)", text):  # ${a[i]}, ${s:i}
        out.append(m.group(1))
    for m in re.finditer(_NAME + r"(\[[^]]*\])\+?=", text):  # a[i]=…
        out.append(m.group(1))
    for m in re.finditer(_STARTS + r"(?:declare|typeset|local|export|readonly)\s+(?:-[A-Za-z]*\s+)*-[A-Za-z]*i"
                         r"[A-Za-z]*\s([^;&|\n]*)", text):  # declare -i x=value
        out.append(m.group(1))
    return out


def _tainted(text: str) -> set[str]:
    """Names whose values may hold code: read when the line runs, or assigned the output of a
    command, or another tainted name's value (followed through the line's assignments)."""
    tainted: set[str] = set()
    for m in _READERS.finditer(text):
        tainted.update(re.findall(_NAME, m.group(1)))
    for m in _LOOP.finditer(text):
        if re.search(r"[*?[$`]", m.group(2)):
            tainted.add(m.group(1))
    flows: list[tuple[str, set[str]]] = []
    for m in _ASSIGNED.finditer(text):
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


def evaluated_code(text: str) -> str | None:
    """Why ``text`` (a command line) may run code hidden in a value it evaluates, or None."""
    if "@P" in text and _PROMPT_EXPANSION.search(text):
        return "a value expanded as a prompt (${x@P}) runs the $(…) in it"
    if "${!" in text and _INDIRECTION.search(text):
        return "an indirect expansion (${!x}) evaluates a name only known when it runs"
    if _NAMEREF.search(text):
        return "a nameref (declare -n) evaluates a name only known when it runs"
    if "[" in text and _NAME_SUBSCRIPT.search(text):
        return "a variable name with a subscript that bash evaluates (it may run a $(…) in it)"
    if not _ARITHMETIC.search(text):
        return None
    if "[" in text and _PLANTED.search(text):
        return "arithmetic on a value that may hold a subscript with a $(…), which bash runs"
    plain = _NUMERIC_SUBSTITUTION.sub("0", text) if "$(" in text else text  # numbers stand for those
    arithmetic = _arithmetic_texts(plain)
    if any(_SUBSTITUTION.search(part) for part in arithmetic):
        return "arithmetic on the output of a command (a subscript in it would run a $(…))"
    if any(_POSITIONAL.search(part) for part in arithmetic) and re.search(_STARTS + r"set\s", plain):
        return "arithmetic on positional parameters the line sets"
    tainted = _tainted(plain)
    used = {a or b for part in arithmetic for a, b in _USES.findall(part)}
    hit = sorted(used & tainted)
    if hit:
        return f"arithmetic on {hit[0]!r}, a value read when the line runs (a subscript in it would run a $(…))"
    return None
