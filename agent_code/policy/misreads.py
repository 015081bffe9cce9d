"""Where tree-sitter-bash and bash read a line differently, found in the tree and the bytes.

The grammar is not bash: it reads some characters as blanks that bash does not (a carriage
return, an escaped blank), ends words and strings where bash goes on (a backslash right after
a quote, ``$'\\\\'``), reads a newline as a blank after a pipeline of three stages, and reads
some here-document delimiters otherwise. Each check below looks for the character such a
place needs (most lines have none) and then asks the tree; :func:`check` runs them all and
returns an error for each place found, which makes the line one the policy cannot judge
(it asks). :func:`heredoc_word` reads a here-document's delimiter as bash does, for the
syntax reader's own check. Every class here was found by running lines through bash
(tests/test_policy_bash_differential.py) and has attack rows in tests/test_policy_attacks.py.
"""

from __future__ import annotations

import re
from typing import Final

from agent_code.policy import grammar
from agent_code.policy.grammar import Node

KIND: Final = grammar.KIND  # (see shell_syntax._KIND)


def check(root: Node, parsed: bytes, source: bytes) -> tuple[str, ...]:
    """An error for each place where bash reads ``parsed`` (``source``, the line as given,
    plus a final newline the parser may have added) otherwise than the tree ``root``."""
    errors: tuple[str, ...] = ()
    if b"\r" in parsed or b"\v" in parsed or b"\f" in parsed or _ESCAPED_BLANK.search(parsed):  # _MISREAD
        errors += _misread(root, parsed)
    if b"\\" in parsed:
        errors += _glued(root, parsed)
    if b"\n" in parsed[:len(source)]:  # (a newline parse added ends the input: no line joined there)
        errors += _joined(root, parsed)
    if b"$'" in parsed:
        errors += _ansi_c_misread(root, parsed)
    return errors


# Where tree-sitter-bash and bash read a line differently: the grammar counts a carriage return,
# a vertical tab and a form feed as blanks (bash only a space and a tab: for it they are word
# characters, so in ``echo a<CR># ; rm -rf ~`` the "#" starts no comment and rm runs); it reads a
# backslash before a blank as whitespace (bash: a word, ``\ `` is the argument " "); and a
# backslash, carriage return, newline as a line continuation (bash: an escaped carriage return,
# then the end of the command: ``echo a\<CR><LF>rm -rf ~`` runs rm)
_MISREAD: Final = re.compile(rb"\\[ \t\v\f\r]|[\v\f\r]")
# (the test before _misread: three byte searches and a pattern that starts with a literal
# backslash, which the regex engine finds by a fast scan: a tenth of _MISREAD's search)
_ESCAPED_BLANK: Final = re.compile(rb"\\[ \t\v\f\r]")


def _misread(root: Node, source: bytes) -> tuple[str, ...]:
    """An error for each place of ``_MISREAD`` that the parser read as whitespace: one that lies
    between tokens (the smallest node around it has children), not inside a word, a string, a
    comment or a here-document, where both read it alike. A line holding one cannot be judged
    from the tree."""
    found: list[str] = []
    for m in _MISREAD.finditer(source):
        node = root.descendant_for_byte_range(m.start(), m.start() + 1)
        if node is not None and node.child_count:
            what = "an escaped blank or carriage return" if source[m.start()] == 92 else \
                "a carriage return, vertical tab or form feed"   # (92: a backslash)
            found.append(f"{what} at character {m.start()}, which the parser does not read as bash does")
            if len(found) == 3:
                break
    return tuple(found)


# Where a newline between tokens is a separator for bash as well: the nodes whose children are
# statements (a newline ends one) or literal text (where it is a character); in a list or a
# pipeline only after its operator (``a &&``, ``a |``), where bash reads on. Anywhere else the
# parser took a newline for a blank: tree-sitter-bash does so after a pipeline of three or more
# stages in some contexts (``ls | grep x | head -n 1<LF>rm -rf ~ && true`` came out as ``head -n
# 1 rm -rf ~``, a command that ends a pipeline) where bash ends the command and runs the next.
_NEWLINE_SEPARATES: Final = frozenset({
    "program", "compound_statement", "subshell", "do_group", "if_statement", "elif_clause", "else_clause",
    "while_statement", "for_statement", "c_style_for_statement", "case_statement", "case_item",
    "function_definition", "command_substitution", "process_substitution", "string", "translated_string",
    "heredoc_redirect", "heredoc_body", "array", "ERROR",
})
_CONTINUED_BY: Final = {"list": frozenset({"&&", "||"}), "pipeline": frozenset({"|", "|&"})}


def _joined(root: Node, source: bytes) -> tuple[str, ...]:
    """An error for each newline (not escaped) that the parser read as a blank inside a
    statement: the smallest node around it has children and is none of ``_NEWLINE_SEPARATES``
    (nor a list or a pipeline right after its operator). A line holding one cannot be judged
    from the tree (see ``_NEWLINE_SEPARATES``)."""
    found: list[str] = []
    at = source.find(b"\n")
    while at >= 0:
        node = root.descendant_for_byte_range(at, at + 1)
        if node is not None and node.child_count:
            kind = KIND[node.kind_id]
            if kind not in _NEWLINE_SEPARATES and not _escaped(source, at) and not _after_operator(node, kind, at):
                found.append(f"a line break at character {at} that the parser reads as a blank inside "
                             f"`{kind}` (bash ends the command there)")
                if len(found) == 3:
                    break
        at = source.find(b"\n", at + 1)
    return tuple(found)


def _escaped(source: bytes, at: int) -> bool:
    """Whether the character at ``at`` follows an odd number of backslashes."""
    start = at
    while start and source[start - 1] == 92:  # (a backslash)
        start -= 1
    return (at - start) % 2 == 1


def _after_operator(node: Node, kind: str, at: int) -> bool:
    """In a list or a pipeline: whether the last token before ``at`` (comments aside) is the
    operator that lets bash read on after a newline."""
    operators = _CONTINUED_BY.get(kind)
    if operators is None:
        return False
    before = None
    for child in node.children:
        if child.end_byte > at:
            break
        if KIND[child.kind_id] != "comment":
            before = KIND[child.kind_id]
    return before in operators


# A word part glued to a backslash escape (``"r"\\m``, ``$x\\m``, ``'a'\\b``) is one word for bash; the
# grammar ends the word before the backslash and starts another: ``"r"\\m -rf ~`` ran ``rm -rf ~``
# as the program "r", ``echo x > "/etc/pass"\\wd`` wrote /etc/passwd to the target "/etc/pass"
# (approved in bypassPermissions). A backslash after one of these starts a word for bash too.
_WORD_BREAKS: Final = frozenset(b" \t\n;&|<>")  # (not ")": it may close a $(…) of the word)
# nodes whose parts are adjacent by nature (a word's pieces, ``name=value``, ``${x#…}``, arithmetic)
_ADJACENT_PARTS: Final = frozenset({
    "concatenation", "string", "translated_string", "expansion", "variable_assignment", "heredoc_body", "regex",
    "arithmetic_expansion", "binary_expression", "unary_expression", "postfix_expression", "ternary_expression",
    "parenthesized_expression", "subscript", "brace_expression", "extglob_pattern",
})


def _glued(root: Node, source: bytes) -> tuple[str, ...]:
    """An error for each backslash escape that the parser made the start of a new word, right
    after the end of the one before (not in a node whose parts are adjacent anyway)."""
    found: list[str] = []
    at = source.find(b"\\")
    while at >= 0 and len(found) < 3:
        if at and source[at - 1] not in _WORD_BREAKS and at + 1 < len(source):  # (a final one glues nothing)
            # the word after it starts at the backslash, or after a line continuation (``a\\<LF>b``
            # is the word "ab" for bash; the grammar skips the continuation as a blank)
            start = at + 2 if source[at + 1:at + 2] == b"\n" else at
            node = root.descendant_for_byte_range(start, start + 1) \
                if start < len(source) and source[start] not in _WORD_BREAKS else None
            while node is not None and node.start_byte == start:
                parent = node.parent
                if parent is None or parent.start_byte != start:
                    break
                node = parent
            if node is not None and node.start_byte == start:
                before = node.prev_sibling
                parent = node.parent
                if before is not None and before.is_named and before.end_byte == at and parent is not None \
                        and KIND[parent.kind_id] not in _ADJACENT_PARTS:
                    found.append(f"a backslash at character {at} that the parser reads as the start of a new "
                                 f"word (bash: the same word goes on)")
        at = source.find(b"\\", at + 2)
    return tuple(found)


def _ansi_c_misread(root: Node, source: bytes) -> tuple[str, ...]:
    """An error for each ``$'…'`` string the parser ends at another place than bash, which
    ends it at the first quote no backslash escapes: tree-sitter-bash read ``$'\\\\'`` as running
    on past its quote (``echo $'\\\\'<LF>rm -rf ~<LF>echo '`` was one echo; bash runs rm)."""
    found: list[str] = []
    at = source.find(b"$'")
    while at >= 0 and len(found) < 3:
        node = root.descendant_for_byte_range(at, at + 2)
        if node is not None and node.start_byte == at and KIND[node.kind_id] == "ansi_c_string":
            i, n, end = at + 2, len(source), -1
            while i < n:
                c = source[i]
                if c == 92:  # a backslash: escapes what follows, a quote included
                    i += 2
                elif c == 39:
                    end = i + 1
                    break
                else:
                    i += 1
            if end != node.end_byte:
                found.append(f"a $'…' string at character {at} that the parser ends at another place than bash")
            at = source.find(b"$'", max(node.end_byte, at + 2))
        else:
            at = source.find(b"$'", at + 2)
    return tuple(found)


_HEREDOC_WORD_ENDS: Final = frozenset(b" \t\n;&|()<>")


def heredoc_word(source: bytes, at: int) -> tuple[int, str, int]:
    """The delimiter of the here-document whose ``<<``/``<<-`` is at ``at``, as bash reads it:
    where its word starts, its text after quote removal, where it ends."""
    i = at + 2
    if source[i:i + 1] == b"-":
        i += 1
    while source[i:i + 1] in (b" ", b"\t"):
        i += 1
    start, out, n = i, bytearray(), len(source)
    while i < n and source[i] not in _HEREDOC_WORD_ENDS:
        c = source[i]
        if c == 92:  # a backslash: the next character as it is
            out += source[i + 1:i + 2]
            i += 2
        elif c == 39:  # '…'
            end = source.find(b"'", i + 1)
            end = n if end < 0 else end
            out += source[i + 1:end]
            i = end + 1
        elif c == 34:  # "…" (a backslash escapes $ ` " \ and a newline)
            i += 1
            while i < n and source[i] != 34:
                if source[i] == 92 and i + 1 < n and source[i + 1] in b'$`"\\\n':
                    i += 1
                out.append(source[i])
                i += 1
            i += 1
        else:
            out.append(c)
            i += 1
    return start, out.decode("utf-8", "replace"), min(i, n)
