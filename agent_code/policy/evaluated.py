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
evaluates nothing, or when nothing it evaluates can hold code: no value in it was planted
(a text with ``[`` and ``$(``/`\\``) nor read from what runs (``read``, ``$(…)`` in a value or
in the arithmetic itself, a glob or expansion in a ``for`` list …). Numbers from ``$(… | wc
-l)``, ``$(nproc)`` and ``$(seq N…)`` count as numbers. Pure functions of the text.
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

# a planted value: text holding "[" and later "$(" or "`" (quotes may split them)
_PLANTED = re.compile(r"\[[^\n]*(?:\$['\"]*\(|`)", re.DOTALL)
# values read from what runs, or named at run time
_READ_AT_RUN_TIME = re.compile(r"(?:^|[\s;&|(])(?:read|mapfile|readarray|getopts|printf\s+-v|wait\s+-p)\b|"
                               r"\$\{!|(?:^|[\s;&|(])for\s+[A-Za-z_][A-Za-z0-9_]*\s+in\b[^;\n]*[*?[$`]")
_SUBSTITUTION = re.compile(r"\$\((?!\()|`")  # (not "$((": an arithmetic expansion)
# substitutions whose output is a number: `… | wc -l` (no file named: wc prints the count
# alone), `nproc`, `seq` of numbers
_NUMERIC_SUBSTITUTION = re.compile(r"\$\([^()`]*\|\s*wc(?:\s+-[lcwm]+)*\s*\)|\$\(\s*nproc\s*\)|"
                                   r"\$\(\s*seq(?:\s+-?[0-9]+)+\s*\)")


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
    if _READ_AT_RUN_TIME.search(plain):
        return "arithmetic on a value read when it runs (a subscript in it would run a $(…))"
    if _SUBSTITUTION.search(plain):
        return "arithmetic on the output of a command (a subscript in it would run a $(…))"
    return None
