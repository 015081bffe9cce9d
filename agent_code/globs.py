"""Path globs → regular expressions, one dialect for every part of agent-code that matches
paths: the ``glob`` and ``grep`` tools, permission rules (``policy/rules.py``) and a task's
test files (``tasks/grading.py``)."""

from __future__ import annotations

import re


def glob_regex(pattern: str) -> str:
    """Translate a glob into regex source for ``fullmatch`` against a POSIX relative path.

    ``*`` and ``?`` never cross ``/``; ``**`` as a whole component matches any number of
    directories; ``[abc]``/``[!a-z]`` classes, ``{a,b}`` alternatives and ``\\`` escapes work.
    """
    out: list[str] = []
    i, n = 0, len(pattern)
    while i < n:
        c = pattern[i]
        if c == "*":
            if pattern.startswith("**", i) and (i == 0 or pattern[i - 1] == "/"):
                if i + 2 == n:
                    out.append(".*")
                    i += 2
                    continue
                if pattern[i + 2] == "/":
                    out.append("(?:.*/)?")
                    i += 3
                    continue
            while i < n and pattern[i] == "*":
                i += 1
            out.append("[^/]*")
            continue
        if c == "?":
            out.append("[^/]")
        elif c == "[" and (close := _class_end(pattern, i)) > 0:
            out.append(_class_regex(pattern[i + 1:close]))
            i = close
        elif c == "{" and (close := _brace_end(pattern, i)) > 0:
            alts = _split_top_level(pattern[i + 1:close])
            out.append("(?:" + "|".join(glob_regex(a) for a in alts) + ")")
            i = close
        elif c == "\\" and i + 1 < n:
            i += 1
            out.append(re.escape(pattern[i]))
        else:
            out.append(re.escape(c))
        i += 1
    return "".join(out)


def _class_end(p: str, i: int) -> int:
    j = i + 1
    if j < len(p) and p[j] in "!^":
        j += 1
    if j < len(p) and p[j] == "]":
        j += 1
    while j < len(p) and p[j] != "]":
        j += 1
    return j if j < len(p) else -1


def _class_regex(body: str) -> str:
    negate = body[:1] in ("!", "^")
    if negate:
        body = body[1:]
    items: list[str] = []
    k = 0
    while k < len(body):
        if k + 2 < len(body) and body[k + 1] == "-":
            items.append(f"{re.escape(body[k])}-{re.escape(body[k + 2])}")
            k += 3
        else:
            items.append(re.escape(body[k]))
            k += 1
    return ("[^/" if negate else "[") + "".join(items) + "]"


def _brace_end(p: str, i: int) -> int:
    depth = 0
    for j in range(i, len(p)):
        if p[j] == "{":
            depth += 1
        elif p[j] == "}":
            depth -= 1
            if depth == 0:
                return j
    return -1


def _split_top_level(body: str) -> list[str]:
    parts, depth, cur = [], 0, ""
    for ch in body:
        if ch == "," and depth == 0:
            parts.append(cur)
            cur = ""
            continue
        depth += ch == "{"
        depth -= ch == "}"
        cur += ch
    return parts + [cur]
