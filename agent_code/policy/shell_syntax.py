"""Bash syntax for the permission layer: a tokenizer and a parser of simple commands.

:func:`tokenize` follows bash's quoting (``'…'``, ``"…"``, ``$'…'``, backslashes, line
continuations), comments, operators (``;`` ``&&`` ``||`` ``|`` ``&`` ``(`` ``)``, newlines,
redirections) and keeps the scripts inside ``$(…)``, backticks and ``<(…)`` with the word
they occur in; here-documents are read too. It is lenient: an unterminated quote ends at
the end of the text instead of failing, so a check still sees the words (bash would
refuse to run it anyway). It is bash-aware where :mod:`shlex` is not (``shlex`` knows no
``$(…)``, backticks, newlines as separators or here-documents).

:func:`parse` turns the tokens into pipelines of simple commands; leading reserved words
(``if``, ``then``, ``do``, ``{``, ``!`` …) and variable assignments are dropped, loop and
case headers skipped (their substitutions kept), and recursive forking functions (fork
bombs) noticed. Nothing is expanded, run or looked up: these are pure functions.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

# --- tokens ---------------------------------------------------------------------------

# longest first, so that "&&" is not read as two "&"
OPERATORS = ("<<<", "<<-", "&>>", ";;&", "&&", "||", ";;", ";&", "|&", "&>", ">>", ">|", ">&", "<<",
             "<&", "<>", "|", "&", ";", "<", ">", "(", ")")
REDIRECTIONS = frozenset({">", ">>", ">|", "&>", "&>>", ">&", "<", "<<", "<<-", "<<<", "<&", "<>"})
PIPES = frozenset({"|", "|&"})
WRITE_REDIRECTIONS = frozenset({">", ">>", ">|", "&>", "&>>", ">&", "<>"})


@dataclass(frozen=True)
class Word:
    """One shell word after quote removal. ``subs`` holds the scripts of the command
    substitutions in it (``$(…)``, backticks, ``<(…)``), which run before the command;
    their text stays in ``text`` as written. ``heredoc`` is a here-document's body
    (on the delimiter word of ``<<``)."""

    text: str
    subs: tuple[str, ...] = ()
    heredoc: str | None = None


@dataclass(frozen=True)
class Op:
    op: str


Token = Word | Op

_ANSI_C = {"n": "\n", "t": "\t", "r": "\r", "a": "\a", "b": "\b", "f": "\f", "v": "\v", "e": "\x1b",
           "E": "\x1b", "\\": "\\", "'": "'", '"': '"', "?": "?"}


def _ansi_c(body: str) -> str:
    """The value of ``$'…'`` quoting (``\\n``, ``\\x41``, ``\\101``, ``\\u00e9`` …)."""
    out: list[str] = []
    i = 0
    while i < len(body):
        c = body[i]
        if c != "\\" or i + 1 == len(body):
            out.append(c)
            i += 1
            continue
        nxt = body[i + 1]
        if nxt in _ANSI_C:
            out.append(_ANSI_C[nxt])
            i += 2
        elif nxt in "xuU":
            width = {"x": 2, "u": 4, "U": 8}[nxt]
            digits = re.match(f"[0-9a-fA-F]{{1,{width}}}", body[i + 2:])
            if digits:
                out.append(chr(int(digits.group(), 16)))
                i += 2 + len(digits.group())
            else:
                out.append("\\" + nxt)
                i += 2
        elif nxt in "01234567":
            digits = re.match(r"[0-7]{1,3}", body[i + 1:])
            assert digits is not None
            out.append(chr(int(digits.group(), 8)))
            i += 1 + len(digits.group())
        else:
            out.append("\\" + nxt)
            i += 2
    return "".join(out)


class _Lexer:
    """Bash-like tokenizer over one script; see :func:`tokenize`."""

    def __init__(self, text: str) -> None:
        self.s = text
        self.n = len(text)
        self.tokens: list[Token] = []
        self.chars: list[str] | None = None  # the word being built; None: between words
        self.subs: list[str] = []
        self.heredocs: list[tuple[int, str, bool, bool]] = []  # (token index, delimiter, strip tabs, expands)
        self.awaiting_delimiter: str | None = None
        self._word_quoted = False  # the word being built has a quoted part (a quoted delimiter)

    # -- helpers
    def _flush(self) -> None:
        if self.chars is None:
            return
        word = Word("".join(self.chars), tuple(self.subs))
        if self.awaiting_delimiter is not None:
            op = self.awaiting_delimiter
            self.awaiting_delimiter = None
            quoted = self._word_quoted
            self.heredocs.append((len(self.tokens), word.text, op == "<<-", not quoted))
        self.tokens.append(word)
        self.chars, self.subs = None, []
        self._word_quoted = False

    def _start(self) -> list[str]:
        if self.chars is None:
            self.chars = []
            self.subs = []
            self._word_quoted = False
        return self.chars

    def _paren(self, i: int) -> tuple[str, int]:
        """Body of a ``(…)`` whose ``(`` ends just before ``i``; the index after ``)``."""
        depth, j = 1, i
        while j < self.n:
            c = self.s[j]
            if c == "\\":
                j += 2
                continue
            if c == "'":
                end = self.s.find("'", j + 1)
                j = self.n if end == -1 else end + 1
                continue
            if c == '"':
                j = self._double(j + 1)[2]
                continue
            if c == "`":
                j = self._backtick(j + 1)[1]
                continue
            if c == "(":
                depth += 1
            elif c == ")":
                depth -= 1
                if depth == 0:
                    return self.s[i:j], j + 1
            j += 1
        return self.s[i:], self.n

    def _backtick(self, i: int) -> tuple[str, int]:
        """Body of a backtick substitution starting at ``i``; the index after the closing one."""
        out, j = [], i
        while j < self.n:
            c = self.s[j]
            if c == "\\" and j + 1 < self.n and self.s[j + 1] in "`\\$":
                out.append(self.s[j + 1])
                j += 2
                continue
            if c == "`":
                return "".join(out), j + 1
            out.append(c)
            j += 1
        return "".join(out), self.n

    def _double(self, i: int) -> tuple[str, list[str], int]:
        """A double-quoted string from ``i`` (after the quote): its value, the substitutions
        in it, and the index after the closing quote."""
        out: list[str] = []
        subs: list[str] = []
        j = i
        while j < self.n:
            c = self.s[j]
            if c == '"':
                return "".join(out), subs, j + 1
            if c == "\\" and j + 1 < self.n:
                nxt = self.s[j + 1]
                if nxt == "\n":
                    j += 2
                    continue
                if nxt in '$`"\\':
                    out.append(nxt)
                    j += 2
                    continue
                out.append(c)
                j += 1
                continue
            if c == "$" and self.s.startswith("((", j + 1):
                body, k = self._paren(j + 2)
                out.append(self.s[j:k])
                j = k
                continue
            if c == "$" and self.s.startswith("(", j + 1):
                body, k = self._paren(j + 2)
                subs.append(body)
                out.append(self.s[j:k])
                j = k
                continue
            if c == "`":
                body, k = self._backtick(j + 1)
                subs.append(body)
                out.append(self.s[j:k])
                j = k
                continue
            out.append(c)
            j += 1
        return "".join(out), subs, self.n

    def _read_heredocs(self, i: int) -> int:
        """Read the bodies of pending here-documents, from the line starting at ``i``."""
        for index, delimiter, strip_tabs, expands in self.heredocs:
            lines: list[str] = []
            while i < self.n:
                end = self.s.find("\n", i)
                end = self.n if end == -1 else end
                line = self.s[i:end]
                i = end + 1
                if (line.lstrip("\t") if strip_tabs else line) == delimiter:
                    break
                lines.append(line)
            body = "\n".join(lines)
            word = self.tokens[index]
            assert isinstance(word, Word)
            subs = heredoc_substitutions(body) if expands else ()
            self.tokens[index] = Word(word.text, word.subs + subs, heredoc=body)
        self.heredocs = []
        return min(i, self.n)

    # -- main loop
    def run(self) -> list[Token]:
        s, n = self.s, self.n
        i = 0
        while i < n:
            c = s[i]
            if c in " \t\r":
                self._flush()
                i += 1
            elif c == "\n":
                self._flush()
                self.tokens.append(Op("\n"))
                i += 1
                if self.heredocs:
                    i = self._read_heredocs(i)
            elif c == "\\":
                if i + 1 < n and s[i + 1] == "\n":
                    i += 2  # line continuation
                else:
                    self._start().append(s[i + 1] if i + 1 < n else "")
                    self._word_quoted = True
                    i += 2
            elif c == "'":
                end = s.find("'", i + 1)
                end = n if end == -1 else end
                self._start().append(s[i + 1:end])
                self._word_quoted = True
                i = end + 1
            elif c == '"':
                value, subs, i = self._double(i + 1)
                self._start().append(value)
                self.subs.extend(subs)
                self._word_quoted = True
            elif c == "`":
                body, k = self._backtick(i + 1)
                self._start().append(s[i:k])
                self.subs.append(body)
                i = k
            elif c == "$" and s.startswith("'", i + 1):
                end = i + 2
                while end < n and s[end] != "'":
                    end += 2 if s[end] == "\\" else 1
                self._start().append(_ansi_c(s[i + 2:min(end, n)]))
                self._word_quoted = True
                i = end + 1
            elif c == "$" and s.startswith("((", i + 1):
                _, k = self._paren(i + 2)
                self._start().append(s[i:k])  # arithmetic, not a command
                i = k
            elif c == "$" and s.startswith("(", i + 1):
                body, k = self._paren(i + 2)
                self._start().append(s[i:k])
                self.subs.append(body)
                i = k
            elif c in "<>" and s.startswith("(", i + 1):
                body, k = self._paren(i + 2)  # process substitution
                self._start().append(s[i:k])
                self.subs.append(body)
                i = k
            elif c == "#" and self.chars is None:
                end = s.find("\n", i)
                i = n if end == -1 else end
            elif c in ";&|<>()":
                if c in "<>" and self.chars is not None and self.chars and all(
                        ch.isdigit() for ch in self.chars) and not self.subs:
                    self.chars = None  # a file descriptor number: 2>/dev/null
                self._flush()
                op = next(o for o in OPERATORS if s.startswith(o, i))
                self.tokens.append(Op(op))
                if op in ("<<", "<<-"):
                    self.awaiting_delimiter = op
                i += len(op)
            else:
                self._start().append(c)
                i += 1
        self._flush()
        return self.tokens


def heredoc_substitutions(body: str) -> tuple[str, ...]:
    """The ``$(…)`` and backtick scripts in an unquoted here-document's body (they run;
    quotes there are plain characters)."""
    lexer = _Lexer(body)
    subs: list[str] = []
    i = 0
    while i < len(body):
        c = body[i]
        if c == "\\":
            i += 2
        elif c == "$" and body.startswith("((", i + 1):
            i = lexer._paren(i + 2)[1]
        elif c == "$" and body.startswith("(", i + 1):
            sub, i = lexer._paren(i + 2)
            subs.append(sub)
        elif c == "`":
            sub, i = lexer._backtick(i + 1)
            subs.append(sub)
        else:
            i += 1
    return tuple(subs)


def tokenize(text: str) -> list[Token]:
    """Words (quotes removed, substitutions noted) and operators of a bash script."""
    return _Lexer(text).run()


# --- simple commands and pipelines ----------------------------------------------------

@dataclass(frozen=True)
class Simple:
    """One simple command: its words (assignments and reserved words dropped) and its
    redirections as ``(operator, target word)``."""

    words: tuple[Word, ...]
    redirects: tuple[tuple[str, Word], ...] = ()

    @property
    def argv(self) -> tuple[str, ...]:
        return tuple(w.text for w in self.words)


@dataclass(frozen=True)
class Script:
    pipelines: tuple[tuple[Simple, ...], ...]
    fork_bomb: bool = False
    substitutions: tuple[str, ...] = ()  # in words that are not part of a simple command's argv


LEADING_RESERVED = frozenset({"if", "then", "else", "elif", "do", "while", "until", "!", "{", "}", "fi",
                              "done", "esac", "time", "in"})
HEADER_RESERVED = frozenset({"for", "select", "case", "function"})
ASSIGNMENT = re.compile(r"^[A-Za-z_][A-Za-z0-9_]*(\[[^]]*\])?\+?=")


def _command_span(words: list[Word]) -> tuple[int, int]:
    """Where the command is in a simple command's words: leading reserved words and
    assignments are skipped; a loop or case header is no command (an empty span)."""
    start = 0
    while start < len(words) and (words[start].text in LEADING_RESERVED or ASSIGNMENT.match(words[start].text)):
        start += 1
    end = len(words)
    if start < end and words[start].text in HEADER_RESERVED:
        return start, start
    if end - start > 1 and words[end - 1].text == "}":
        end -= 1
    return start, end


def _opens(text: str) -> int:
    return 1 if text.startswith("{") else 0


def _closes(text: str) -> int:
    return 1 if text.endswith("}") and not re.search(r"\$\{[^{}]*\}$", text) else 0


def _function_body(tokens: list[Token], start: int) -> list[Token]:
    """The tokens of a function body starting at ``start``: its ``{ … }`` group, or the
    rest of the script when the body is not a brace group."""
    if start >= len(tokens) or not (isinstance(tokens[start], Word) and _opens(tokens[start].text)):  # type: ignore[union-attr]
        return tokens[start:]
    depth = 0
    for j in range(start, len(tokens)):
        tok = tokens[j]
        if isinstance(tok, Word):
            depth += _opens(tok.text) - _closes(tok.text)
            if depth <= 0:
                return tokens[start:j + 1]
    return tokens[start:]


def _forking_functions(tokens: list[Token]) -> bool:
    """Whether a function is defined whose body pipes into itself or runs itself in the
    background (``:(){ :|:& };:``, ``bomb() { bomb | bomb & }``)."""
    for k, tok in enumerate(tokens):
        if not isinstance(tok, Word):
            continue
        name: str | None = None
        if k + 2 < len(tokens) and tokens[k + 1] == Op("(") and tokens[k + 2] == Op(")"):
            name, start = tok.text, k + 3
        elif tok.text == "function" and k + 1 < len(tokens) and isinstance(tokens[k + 1], Word):
            name, start = tokens[k + 1].text, k + 2  # type: ignore[union-attr]
            if tokens[start:start + 2] == [Op("("), Op(")")]:
                start += 2
        if not name:
            continue
        items = [t.text.strip("{}") if isinstance(t, Word) else t for t in _function_body(tokens, start)]
        for a, b, c in zip(items, items[1:], items[2:] + [None]):
            if a == name and (b in (Op("|"), Op("|&")) and c == name or b == Op("&")):
                return True
    return False


def parse(text: str) -> Script:
    """The pipelines of simple commands in ``text``, separators and groupings flattened."""
    tokens = tokenize(text)
    pipelines: list[tuple[Simple, ...]] = []
    stages: list[Simple] = []
    words: list[Word] = []
    redirects: list[tuple[str, Word]] = []
    loose_subs: list[str] = []
    pending: str | None = None

    def end_stage() -> None:
        nonlocal words, redirects
        start, end = _command_span(words)
        cleaned = words[start:end]
        for w in words[:start] + words[end:]:
            loose_subs.extend(w.subs)  # `x=$(cmd)` and `for f in $(cmd)` still run cmd
        if cleaned or redirects:
            stages.append(Simple(tuple(cleaned), tuple(redirects)))
        words, redirects = [], []

    def end_pipeline() -> None:
        nonlocal stages
        if stages:
            pipelines.append(tuple(stages))
        stages = []

    for tok in tokens:
        if isinstance(tok, Word):
            if pending is not None:
                redirects.append((pending, tok))
                pending = None
            else:
                words.append(tok)
        elif tok.op in REDIRECTIONS:
            pending = tok.op
        elif tok.op in PIPES:
            end_stage()
        else:
            end_stage()
            end_pipeline()
    end_stage()
    end_pipeline()
    return Script(tuple(pipelines), _forking_functions(tokens), tuple(loose_subs))
