"""Bash syntax for the permission layer, read with tree-sitter's bash grammar.

:func:`parse` turns a command line into a :class:`Script`: pipelines of stages, each a
:class:`Simple` command (its words after quote removal, and its redirections) or a
:class:`Compound` one (a subshell, ``{ … }``, ``if``/``while``/``for``/``case``, a
function body) holding a script of its own. Every construct that runs commands is
opened up: ``$(…)``, backticks, ``<(…)``/``>(…)``, substitutions inside ``$((…))``,
``((…))``, ``${x:-$(…)}``, ``[[ … ]]``, loop lists and ``case`` subjects, assignments;
here-document bodies and here-strings are kept with the redirection that feeds them.

Each :class:`Word` also carries a ``pattern``: its text as the shell would expand it,
with literal (quoted or escaped) glob and brace characters escaped by a backslash and
every expansion whose value is only known when it runs (``$x``, ``${…}``, ``$(…)``,
``$((…))``, ``<(…)``) replaced by :data:`UNKNOWN` (unquoted: it may split into several
words) or :data:`UNKNOWN_QUOTED` (one word). Two values are known without running
anything: ``$(echo WORDS)`` with literal words is its output, and inside ``for d in a b;
do … done`` over literal words (a body that does not assign ``d``) ``$d`` is the brace
pattern ``{a,b}``. The deny list reads patterns; rules read the text.

tree-sitter recovers from syntax errors: what it could not read is listed in
``Script.errors`` (the words inside an error are still grouped into commands, so the
deny list sees them). Recursive forking functions (fork bombs) and loops that spawn
background jobs forever are noticed here. Nothing is expanded, run or looked up: these
are pure functions. The grammar's :class:`tree_sitter.Parser` is built once per process.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from functools import lru_cache
from typing import Final, NamedTuple, Sequence, Union

import tree_sitter

from agent_code.policy import misreads
from agent_code.policy import grammar
from agent_code.policy.grammar import Node, parser

# (read for every node: a global of this module, without the attribute lookup on grammar)
_KIND: Final = grammar.KIND

REDIRECTIONS: Final = frozenset({">", ">>", ">|", "&>", "&>>", ">&", "<", "<<", "<<-", "<<<", "<&", "<>", "<&-", ">&-"})
PIPES: Final = frozenset({"|", "|&"})
WRITE_REDIRECTIONS: Final = frozenset({">", ">>", ">|", "&>", "&>>", ">&", "<>"})
ASSIGNMENT: Final = re.compile(r"^[A-Za-z_][A-Za-z0-9_]*(\[[^]]*\])?\+?=")

UNKNOWN: Final = "\x01"         # an unquoted expansion: any text, maybe several words
UNKNOWN_QUOTED: Final = "\x02"  # a quoted expansion: any text, one word
_PATTERN_SPECIAL: Final = set("*?[]{},~\\")




# --- the model ------------------------------------------------------------------------

class Word(NamedTuple):
    """One shell word after quote removal. ``subs`` are the scripts of the command
    substitutions in it (which run before the command); their text stays in ``text`` as
    written. ``heredoc`` is a here-document's body (on the delimiter word of ``<<``).
    ``pattern``: see the module doc (empty: ``text`` escaped, nothing expands)."""

    text: str
    subs: tuple["Script", ...] = ()
    heredoc: str | None = None
    pattern: str = ""

    @property
    def shape(self) -> str:
        return self.pattern or escape(self.text)

    @property
    def dynamic(self) -> bool:
        """Whether its value is only known when it runs (a parameter, substitution …)."""
        return UNKNOWN in self.pattern or UNKNOWN_QUOTED in self.pattern


_tuple_new: Final = tuple.__new__  # _tuple_new(Word, (…)): a Word without NamedTuple's __new__ (a hot path)


class Simple(NamedTuple):
    """One simple command: its words (assignments and reserved words dropped) and its
    redirections as ``(operator, target word)``."""

    words: tuple[Word, ...]
    redirects: tuple[tuple[str, Word], ...] = ()

    @property
    def argv(self) -> tuple[str, ...]:
        return tuple(w.text for w in self.words)


@dataclass(frozen=True, init=False)
class Compound:
    """A compound command as one pipeline stage: its body, and redirections on it."""

    body: "Script"
    kind: str = "group"
    redirects: tuple[tuple[str, Word], ...] = ()

    def __init__(self, body: "Script", kind: str = "group", redirects: tuple[tuple[str, Word], ...] = ()) -> None:
        self.__dict__.update(body=body, kind=kind, redirects=redirects)  # frozen, without a setattr per field


Stage = Union[Simple, Compound]


@dataclass(frozen=True, init=False)
class Script:
    pipelines: tuple[tuple[Stage, ...], ...] = ()
    fork_bomb: bool = False
    substitutions: tuple["Script", ...] = ()  # in words that are not part of a simple command's argv
    functions: tuple[str, ...] = ()           # names of the functions it defines
    errors: tuple[str, ...] = ()              # syntax errors (tree-sitter ERROR / MISSING nodes)
    # the calls made in the bodies of the functions it defines: (function, name called, whether
    # the call runs beside its caller — a pipeline stage, ``&``, ``coproc``, ``<(…)``); the
    # analysis joins them into one call graph (commands.forks_in_a_cycle)
    calls: tuple[tuple[str, str, bool], ...] = ()

    def __init__(self, pipelines: tuple[tuple[Stage, ...], ...] = (), fork_bomb: bool = False,
                 substitutions: tuple["Script", ...] = (), functions: tuple[str, ...] = (),
                 errors: tuple[str, ...] = (), calls: tuple[tuple[str, str, bool], ...] = ()) -> None:
        self.__dict__.update(pipelines=pipelines, fork_bomb=fork_bomb, substitutions=substitutions,
                             functions=functions, errors=errors, calls=calls)  # frozen, without a setattr per field


_SPECIAL_RE: Final = re.compile(r"([*?\[\]{},~\\])")


_ESCAPES: Final = str.maketrans({c: "\\" + c for c in _PATTERN_SPECIAL})


def escape(text: str) -> str:
    """``text`` as a pattern that matches only itself."""
    return text.translate(_ESCAPES)


# --- quoting --------------------------------------------------------------------------

_ANSI_C: Final = {"n": "\n", "t": "\t", "r": "\r", "a": "\a", "b": "\b", "f": "\f", "v": "\v", "e": "\x1b",
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
                try:
                    out.append(chr(int(digits.group(), 16)))
                except ValueError:
                    out.append("\ufffd")
                i += 2 + len(digits.group())
            else:
                out.append("\\" + nxt)
                i += 2
        elif nxt in "01234567":
            digits = re.match(r"[0-7]{1,3}", body[i + 1:])
            assert digits is not None
            out.append(chr(int(digits.group(), 8)))
            i += 1 + len(digits.group())
        elif nxt == "c" and i + 2 < len(body):
            out.append(chr(ord(body[i + 2]) & 0x1F))
            i += 3
        else:
            out.append("\\" + nxt)
            i += 2
    return "".join(out)


def _unescape_double(raw: str) -> str:
    """The value of text inside ``"…"``: ``\\$ \\` \\" \\\\`` and line continuations."""
    if "\\" not in raw:
        return raw
    return _DOUBLE_QUOTED_ESCAPE.sub(lambda m: "" if m.group(1) == "\n" else m.group(1), raw)


_DOUBLE_QUOTED_ESCAPE: Final = re.compile(r'\\(\n|[$`"\\])')


# --- tree → model ---------------------------------------------------------------------


STATEMENTS: Final = frozenset({
    "command", "pipeline", "list", "redirected_statement", "subshell", "compound_statement", "if_statement",
    "while_statement", "for_statement", "c_style_for_statement", "case_statement", "function_definition",
    "negated_command", "test_command", "declaration_command", "unset_command", "variable_assignment",
    "variable_assignments", "program", "do_group", "else_clause", "elif_clause", "case_item", "ERROR",
})
FLATTENED: Final = frozenset({"program", "list", "do_group", "else_clause", "elif_clause", "case_item"})
COMPOUNDS: Final = {"subshell": "subshell", "compound_statement": "group", "if_statement": "if", "while_statement": "loop",
             "for_statement": "loop", "c_style_for_statement": "loop", "case_statement": "case", "ERROR": "error"}
SUBSTITUTIONS: Final = frozenset({"command_substitution", "process_substitution"})
EXPANSIONS: Final = frozenset({"simple_expansion", "expansion", "command_substitution", "process_substitution",
                        "arithmetic_expansion"})
REDIRECT_NODES: Final = frozenset({"file_redirect", "heredoc_redirect", "herestring_redirect"})
_LOOSE_WORDS: Final = frozenset({"word", "string", "raw_string", "concatenation", "simple_expansion", "expansion",
                          "command_substitution", "ansi_c_string", "number"})
_BRACE_COMMA: Final = re.compile(r"(?<!\\),")
_PLAIN_PARAMETER: Final = re.compile(r"\$\{?[A-Za-z_][A-Za-z0-9_]*\}?")
_SPACE: Final = re.compile(r"\s")
_CHANGES_VARIABLES: Final = re.compile(r"\bread\b|\b(declare|local|typeset|export|unset|mapfile|readarray|getopts|printf\s+-v|"
                                r"eval|source)\b|^\.\s", re.MULTILINE)
# the reader gives up (RecursionError, which the analysis reads as opaque) past this many
# nested containers and word parts: below Python's own limit, on any thread's stack
# (chains, `a && b && …`, are read with a stack: no bound on their length)
MAX_NESTING: Final = 150
# (every match holds a "(" or a "`": two searches for those, much cheaper than the
# pattern's own scan, spare most texts the pattern)
_HIDDEN_SUBSTITUTION: Final = re.compile(r"\$\(|`|[<>]\(")
_INFINITE: Final = frozenset({"true", ":", "[ 1 ]", "((1))", "[[ 1 ]]"})
_PACING: Final = frozenset({"sleep", "wait", "break", "exit", "return", "read"})
# what may stand before the name a command calls and still call a shell function (``command``,
# ``env``, ``exec`` … run a program, not a function)
_CALL_PREFIXES: Final = frozenset({"time", "coproc", "builtin", "!", "then", "do", "else"})
_FUNCNAME: Final = re.compile(r"\$\{?FUNCNAME(\[0?\])?\}?")
_CALLED_QUOTES: Final = re.compile(r"[\"'\\]")
_BODY_SHELLS: Final = frozenset({"bash", "sh", "dash", "zsh", "ksh", "mksh", "ash"})
_MAX_EVAL_DEPTH: Final = 4


@lru_cache(maxsize=256)
def _assigns(name: str) -> re.Pattern[str]:
    """Text that (re)binds the loop variable ``name``."""
    name = re.escape(name)
    return re.compile(rf"(^|[^\w]){name}(\[[^]]*\])?\+?=|\b(for|select)\s+{name}\b", re.MULTILINE)


class _Acc:
    """What a script is being built from."""

    def __init__(self) -> None:
        self.pipelines: list[tuple[Stage, ...]] = []
        self.subs: list[Script] = []
        self.functions: list[str] = []
        self.fork_bomb = False
        self.calls: list[tuple[str, str, bool]] = []

    def script(self, errors: tuple[str, ...] = ()) -> Script:
        return Script(tuple(self.pipelines), self.fork_bomb, tuple(self.subs), tuple(self.functions), errors,
                      tuple(self.calls))


class _Reader:
    # Speed notes (this runs on every bash call): ``node.type`` builds a new str each time,
    # so kinds are read as ``_KIND[node.kind_id]`` (the same, interned, name); when the
    # line is ASCII, byte offsets are str offsets and text is sliced, not decoded.

    def __init__(self, source: bytes, text: str | None = None) -> None:
        self.src = source
        self.ascii = text if text is not None and text.isascii() else None  # byte offsets are str offsets
        self.bindings: dict[str, str] = {}  # loop variables whose values are known (name → pattern)
        self.errors: list[str] = []  # places where the tree and bash part ways (here-documents)
        self.depth = 0  # how deep the reading is in container and _parts (see MAX_NESTING)
        # tree-sitter-bash makes "==" and "=~" after a command name tokens of its own (`git == x`
        # came out as `git x`); bash passes them on as words: commands read them then
        self.test_operators = b"==" in source or b"=~" in source

    def text(self, node: Node) -> str:
        if self.ascii is not None:
            return self.ascii[node.start_byte:node.end_byte]
        return self.src[node.start_byte:node.end_byte].decode("utf-8", "replace")

    def span(self, start: int, end: int) -> str:
        if self.ascii is not None:
            return self.ascii[start:end]
        return self.src[start:end].decode("utf-8", "replace")

    # -- statements
    def statement(self, node: Node, acc: _Acc) -> None:
        kind = _KIND[node.kind_id]
        if kind in FLATTENED:
            self.container(node, acc)
            return
        stages = self.stages(node, acc, kind)
        if stages:
            acc.pipelines.append(tuple(stages))

    def container(self, node: Node, acc: _Acc) -> None:
        """The statements among ``node``'s children; loose words (inside an ERROR) are
        grouped into commands; other expressions only contribute their substitutions."""
        self.depth += 1
        try:
            if self.depth > MAX_NESTING:
                raise RecursionError(f"nested deeper than {MAX_NESTING} levels")
            self._container(node, acc)
        finally:
            self.depth -= 1

    def _container(self, node: Node, acc: _Acc) -> None:
        if _KIND[node.kind_id] == "ERROR":
            self._error_container(node, acc)
            return
        pipelines = acc.pipelines
        # (a stack, not recursion, for the flattened kinds: `a && b && … && z` is a list in a
        # list in a list, as deep as the chain is long; it is read to the end like `a; b; …`)
        pending = node.named_children[::-1]
        while pending:
            child = pending.pop()
            kind = _KIND[child.kind_id]
            if kind == "command":  # the common case, directly
                pipelines.append((self.command(child, (), acc),))
            elif kind == "comment":
                continue
            elif kind in FLATTENED:
                pending += child.named_children[::-1]
            elif kind in STATEMENTS:
                stages = self.stages(child, acc, kind)
                if stages:
                    pipelines.append(tuple(stages))
            elif kind in REDIRECT_NODES:
                op, target, _ = self.redirect(child, acc)
                pipelines.append((Simple((), ((op, target),)),))
            else:
                acc.subs.extend(self.substitutions(child))

    def _error_container(self, node: Node, acc: _Acc) -> None:
        """An ERROR node: its statements, and its loose words grouped into commands."""
        loose: list[Node] = []

        def flush() -> None:
            if loose:
                acc.pipelines.append((self.simple(loose, [], acc),))
                loose.clear()

        for child in node.children:
            kind = _KIND[child.kind_id]
            if not child.is_named:
                if kind not in ("$(", "`", "<(", ">("):
                    flush()
                continue
            if kind == "comment":
                continue
            if kind in STATEMENTS:
                flush()
                self.statement(child, acc)
            elif kind in REDIRECT_NODES:
                flush()
                op, target, _ = self.redirect(child, acc)
                acc.pipelines.append((Simple((), ((op, target),)),))
            elif kind in _LOOSE_WORDS:
                loose.append(child)
            else:
                acc.subs.extend(self.substitutions(child))
        flush()

    def stages(self, node: Node, acc: _Acc, kind: str) -> list[Stage]:
        """The pipeline stages of the statement ``node`` (of type ``kind``)."""
        if kind == "pipeline":
            out: list[Stage] = []
            for child in node.named_children:
                sub = _KIND[child.kind_id]
                if sub == "command":
                    out.append(self.command(child, (), acc))
                elif sub != "comment":
                    out += self.stages(child, acc, sub)
            return out
        if kind == "list":  # only as a here-document's continuation: its first part continues the pipeline
            children = [c for c in node.named_children if _KIND[c.kind_id] != "comment"]
            if not children:
                return []
            first = self.stages(children[0], acc, _KIND[children[0].kind_id])
            for child in children[1:]:
                self.statement(child, acc)
            return first
        if kind == "command":
            return [self.command(node, (), acc)]
        if kind == "redirected_statement":
            return self.redirected(node, acc)
        if kind in ("declaration_command", "unset_command"):
            keyword = next((c for c in node.children if not c.is_named), None)
            words = [Word(self.text(keyword))] if keyword is not None else []
            return [self.simple(node.named_children, [], acc, words)]
        if kind == "test_command":
            subs = tuple(s for c in node.named_children for s in self.substitutions(c))
            return [Simple((Word("[[", subs),))]
        if kind in ("variable_assignment", "variable_assignments"):
            acc.subs.extend(self.substitutions(node))
            return []
        if kind == "negated_command":
            out = []
            for child in node.named_children:
                out += self.stages(child, acc, _KIND[child.kind_id])
            return out
        if kind == "function_definition":
            return [self.function(node, acc)]
        if kind in FLATTENED:
            inner = _Acc()
            self.container(node, inner)
            return [Compound(inner.script(), "group")]
        inner = _Acc()
        binding = self._loop_binding(node) if kind == "for_statement" else None
        if binding is not None:
            name, values = binding
            saved = self.bindings.get(name)
            self.bindings[name] = values
            try:
                self.container(node, inner)
            finally:
                if saved is None:
                    self.bindings.pop(name, None)
                else:
                    self.bindings[name] = saved
        else:
            self.container(node, inner)
        if kind in ("while_statement", "c_style_for_statement") and self._spawns_forever(node):
            inner.fork_bomb = True
        return [Compound(inner.script(), COMPOUNDS.get(kind, kind))]

    def _loop_binding(self, node: Node) -> tuple[str, str] | None:
        """``for d in build dist; do … "$d" …``: the loop variable's values as one pattern
        (``{build,dist}``), when they are literal and the body does not assign the variable."""
        variable = node.child_by_field_name("variable")
        body = node.child_by_field_name("body")
        if variable is None or body is None:
            return None
        name = self.text(variable)
        values = node.children_by_field_name("value")
        if not values:
            return None
        shapes = []
        for value in values:
            text, shape = self._expand(value)  # word(value) less its substitutions' scripts
            if UNKNOWN in shape or UNKNOWN_QUOTED in shape:
                return None
            shapes.append(_BRACE_COMMA.sub(r"\\,", shape or escape(text)))
        text = self.text(body)
        if _CHANGES_VARIABLES.search(text) or (name in text and _assigns(name).search(text)):
            return None  # the body may change it
        return name, shapes[0] if len(shapes) == 1 else "{" + ",".join(shapes) + "}"

    def redirected(self, node: Node, acc: _Acc) -> list[Stage]:
        body = node.child_by_field_name("body")
        redirects: list[tuple[str, Word]] = []
        after: list[Stage] = []
        for child in node.children:
            if _KIND[child.kind_id] in REDIRECT_NODES:
                op, target, more = self.redirect(child, acc)
                redirects.append((op, target))
                for extra in more:
                    kind = _KIND[extra.kind_id]
                    if kind in REDIRECT_NODES:
                        redirects.append(self.redirect(extra, acc)[:2])
                    else:
                        after += self.stages(extra, acc, kind)
        if body is None:
            first: Stage = Simple((), tuple(redirects))
        else:
            kind = _KIND[body.kind_id]
            if kind == "command":
                first = self.command(body, redirects, acc)
            else:
                stages = self.stages(body, acc, kind)
                if not stages:  # a body that runs no command (``v=$(…) 2>x``: its substitutions are in acc)
                    first = Simple((), tuple(redirects))
                elif len(stages) == 1 and isinstance(stages[0], Simple):
                    first = Simple(stages[0].words, stages[0].redirects + tuple(redirects))
                elif len(stages) == 1 and isinstance(stages[0], Compound):
                    first = Compound(stages[0].body, stages[0].kind, stages[0].redirects + tuple(redirects))
                else:  # a pipeline with redirections on its last stage
                    inner = Script(pipelines=(tuple(stages),))
                    first = Compound(inner, "group", tuple(redirects))
        return [first, *after]

    def redirect(self, node: Node, acc: _Acc) -> tuple[str, Word, list[Node]]:
        """A redirection: its operator, its target word (for a here-document the delimiter,
        with the body), and statements or redirections that tree-sitter nested inside it."""
        children = node.children
        op = ""
        for child in children:
            if not child.is_named:
                op = self.text(child)
                break
        more: list[Node] = []
        if _KIND[node.kind_id] == "heredoc_redirect":
            start = body_node = None
            for child in children:
                kind = _KIND[child.kind_id]
                if kind == "heredoc_start":
                    start = child if start is None else start
                elif kind == "heredoc_body":
                    body_node = child if body_node is None else body_node
                elif kind != "heredoc_end" and kind != "comment" and child.is_named:
                    more.append(child)
            delimiter = self.text(start) if start is not None else ""
            quoted = any(q in delimiter for q in "'\"\\")
            body = self.text(body_node) if body_node is not None else ""
            if op == "<<-":
                body = "\n".join(line.lstrip("\t") for line in body.split("\n"))
            self._check_heredoc(node, start, body, more, op)
            subs = () if quoted or body_node is None else tuple(self.substitutions(body_node))
            if not quoted and not subs and "$(" in body:  # (the grammar reads no body after `<<$X`)
                self.errors.append(f"a here-document at character {node.start_byte} whose $(…) the parser "
                                   "does not read")
            if not quoted and "`" in body:  # the grammar leaves `…` in a here-document's body unread
                subs += tuple(_backquoted(body))
            word = Word(re.sub(r"['\"\\]", "", delimiter), subs, heredoc=body,
                        pattern=escape(body) if quoted else self.heredoc_pattern(body_node))
            return op, word, more
        targets = []
        descriptors = []
        for child in node.named_children:
            kind = _KIND[child.kind_id]
            if kind == "file_descriptor":
                descriptors.append(child)
            elif kind != "ERROR" and kind != "comment":
                targets.append(child)
        if not targets and op in (">&", "<&") and _KIND[node.kind_id] == "file_redirect":
            targets = descriptors[1:]
        if not targets:
            return op, Word(""), more
        word = self.word(targets[0])
        for extra in targets[1:]:  # `> f x`: tree-sitter keeps trailing words here
            acc.subs.extend(self.substitutions(extra))
        return op, word, more

    def _check_heredoc(self, node: Node, start: Node | None, body: str, more: list[Node], op: str) -> None:
        """Where the grammar reads a here-document otherwise than bash, note an error: a
        delimiter word that is not the one bash reads (``<<EOF;`` took "EOF;", so the body ran on
        past the line "EOF" while bash ran the lines after it), a body holding the delimiter's
        line (bash ends there), words the grammar hung on the redirection (``rm <<EOF -rf ~``:
        rm's arguments for bash)."""
        if start is None:
            return  # a syntax error of its own
        word_start, delimiter, word_end = misreads.heredoc_word(self.src, node.start_byte)
        if (word_start, word_end) != (start.start_byte, start.end_byte):
            self.errors.append(f"a here-document delimiter at character {start.start_byte} that the parser "
                               f"reads otherwise than bash (bash: {delimiter!r})")
        elif delimiter in body.split("\n")[:-1] or (delimiter == "" and "\n\n" in "\n" + body) \
                or not self._ends_with(node, delimiter, op):
            self.errors.append(f"a here-document at character {start.start_byte} whose body the parser reads "
                               f"past the line that ends it for bash")
        for extra in more:
            if _KIND[extra.kind_id] in _LOOSE_WORDS:
                self.errors.append(f"a word at character {extra.start_byte} after a here-document's delimiter "
                                   "that the parser does not place")
                break

    def _ends_with(self, node: Node, delimiter: str, op: str) -> bool:
        """Whether the here-document's end line, as the parser found it, is ``delimiter`` (the
        grammar has taken lines after it for the end: ``<<E'O'F`` with ``$(…)`` in the body)."""
        for child in node.children:
            if _KIND[child.kind_id] == "heredoc_end":
                if child.is_missing:
                    return True  # a syntax error of its own
                end = self.text(child)
                return (end.lstrip("\t") if op == "<<-" else end) == delimiter
        return True

    def heredoc_pattern(self, body: Node | None) -> str:
        if body is None:
            return ""
        out, pos = [], body.start_byte
        for child in body.named_children:
            if _KIND[child.kind_id] in EXPANSIONS:
                out.append(escape(self.src[pos:child.start_byte].decode("utf-8", "replace")) + UNKNOWN)
                pos = child.end_byte
        out.append(escape(self.src[pos:body.end_byte].decode("utf-8", "replace")))
        return "".join(out)

    def command(self, node: Node, redirects: "Sequence[tuple[str, Word]]", acc: _Acc) -> Simple:
        words: list[Word] = []
        src = self.ascii
        for child in (node.children if self.test_operators else node.named_children):
            kind = _KIND[child.kind_id]
            if not child.is_named:  # (only when the line holds "==" or "=~")
                if kind == "==" or kind == "=~":  # the grammar's test operators: words for bash
                    words.append(Word(kind, (), None, escape(kind)))
                continue
            if kind == "command_name":
                child = child.named_child(0)
                if child is None:
                    continue
                kind = _KIND[child.kind_id]
            if kind == "word":  # the common case, inline: a plain word
                raw = src[child.start_byte:child.end_byte] if src is not None else self.text(child)
                words.append(_tuple_new(Word, (raw, (), None, raw)) if "\\" not in raw else self.word(child, kind))
            elif kind == "raw_string":
                raw = src[child.start_byte:child.end_byte] if src is not None else self.text(child)
                value = raw[1:-1] if len(raw) >= 2 and raw.endswith("'") else raw[1:]
                words.append(_tuple_new(Word, (value, (), None, value.translate(_ESCAPES))))  # escape(value)
            elif kind == "variable_assignment":
                acc.subs.extend(self.substitutions(child))
            elif kind in REDIRECT_NODES:
                redirects = [*redirects, self._redirection(child, acc)]
            elif kind != "comment":
                words.append(self.word(child, kind))
        return _tuple_new(Simple, (tuple(words), tuple(redirects)))

    def simple(self, nodes: list, redirects: list[tuple[str, Word]], acc: _Acc,
               words: list[Word] | None = None) -> Simple:
        words = list(words or [])
        for child in nodes:
            if isinstance(child, Word):
                words.append(child)
                continue
            kind = _KIND[child.kind_id]
            if kind in REDIRECT_NODES:
                redirects = [*redirects, self._redirection(child, acc)]
            elif kind != "comment":
                words.append(self.word(child, kind))
        return Simple(tuple(words), tuple(redirects))

    def _redirection(self, node: Node, acc: _Acc) -> tuple[str, Word]:
        """A command's redirection (operator, target), the statements tree-sitter nested in it
        read into ``acc``."""
        op, target, more = self.redirect(node, acc)
        for extra in more:
            self.statement(extra, acc)
        return op, target

    def function(self, node: Node, acc: _Acc) -> Compound:
        name_node = node.child_by_field_name("name")
        name = self.text(name_node) if name_node is not None else ""
        body = node.child_by_field_name("body")
        inner = _Acc()
        if body is not None:
            self.statement(body, inner)
            if name:
                calls = self.calls_in(body, name, False)
                acc.calls.extend((name, called, beside) for called, beside in calls)
                # (a call of itself beside itself: the body alone is a fork bomb)
                inner.fork_bomb |= (name, True) in calls
        acc.functions.append(name)
        return Compound(inner.script(), "function")

    # -- fork bombs: the calls of a function's body
    def calls_in(self, node: Node, function: str, beside: bool, depth: int = 0) -> set[tuple[str, bool]]:
        """The names ``node`` calls, each with whether the call runs beside (concurrently with)
        the code around it: as a stage of a pipeline of several, behind ``&``, under ``coproc``,
        in ``<(…)``/``>(…)``. ``$FUNCNAME`` is ``function``; the literal text of ``eval`` and of
        ``bash -c`` (a function exported with ``export -f`` is defined there too) is read as
        part of the body. Nested function definitions are their own."""
        found: set[tuple[str, bool]] = set()
        stack = [(node, beside)]
        while stack:
            n, behind = stack.pop()
            kind = _KIND[n.kind_id]
            if kind == "function_definition":
                continue
            if kind == "command":
                self._called(n, function, behind, depth, found)
            kids = n.children
            for i, kid in enumerate(kids):
                side = behind or kind == "pipeline" or kind == "process_substitution" \
                    or (i + 1 < len(kids) and _KIND[kids[i + 1].kind_id] == "&")
                stack.append((kid, side))
        return found

    def _called(self, command: Node, function: str, beside: bool, depth: int, found: set[tuple[str, bool]]) -> None:
        called = command.child_by_field_name("name")
        if called is None:
            return
        words = [called, *command.children_by_field_name("argument")]
        names = [_CALLED_QUOTES.sub("", self.text(w)) for w in words]
        names = [function if _FUNCNAME.fullmatch(w) else w for w in names]
        k = 0
        while k < len(names) - 1 and names[k] in _CALL_PREFIXES:  # time f, coproc f, builtin eval …
            beside |= names[k] == "coproc"
            k += 1
        name = names[k]
        found.add((name, beside))
        if depth >= _MAX_EVAL_DEPTH:
            return
        text = None
        if name == "eval":
            text = " ".join(self.word(w).text for w in words[k + 1:])
        elif name in _BODY_SHELLS and k + 2 < len(words) and names[k + 1].startswith("-") \
                and "c" in names[k + 1] and not names[k + 1].startswith("--"):
            text = self.word(words[k + 2]).text
        if text:
            src = text.encode("utf-8", "surrogatepass")
            found |= _Reader(src, text).calls_in(parser().parse(src).root_node, function, beside, depth + 1)

    def _spawns_forever(self, node: Node) -> bool:
        """``while true; do x & done`` (no sleep, wait or break in it): a process flood."""
        condition = node.child_by_field_name("condition")
        body = node.child_by_field_name("body")
        if body is None:
            return False
        if _KIND[node.kind_id] == "c_style_for_statement":
            forever = condition is None
        else:
            forever = condition is not None and self.text(condition).strip().rstrip(";").strip() in _INFINITE
        if not forever:
            return False
        names, background = set(), False  # names: what runs in the foreground (a pause counts there)
        stack = [(body, False)]
        while stack:
            n, in_background = stack.pop()
            if not in_background and _KIND[n.kind_id] == "command":
                called = n.child_by_field_name("name")
                if called is not None:
                    names.add(self.text(called))
            kids = n.children
            for i, kid in enumerate(kids):
                behind = in_background or (i + 1 < len(kids) and _KIND[kids[i + 1].kind_id] == "&")
                background |= _KIND[kid.kind_id] == "&"
                stack.append((kid, behind))
        return background and not (names & _PACING)

    # -- words
    def substitutions(self, node: Node) -> list[Script]:
        """The scripts of every substitution inside an expression."""
        text = self.text(node)
        if not (("(" in text or "`" in text) and _HIDDEN_SUBSTITUTION.search(text)):  # (see _HIDDEN_SUBSTITUTION)
            return []
        return self._opened(node)

    def _opened(self, node: Node) -> list[Script]:
        """``substitutions`` less its text pre-check."""
        out: list[Script] = []
        stack = [node]
        while stack:
            n = stack.pop()
            if not n.is_named and not n.child_count:
                continue  # a bare token ("$(", '"' …): no kind below is one
            kind = _KIND[n.kind_id]
            if kind in SUBSTITUTIONS:
                inner = _Acc()
                self.container(n, inner)
                out.append(inner.script())
                continue
            if kind == "regex" or kind == "extglob_pattern":
                if _HIDDEN_SUBSTITUTION.search(self.text(n)):
                    out.extend(_hidden(self.text(n)))
                continue
            if n.child_count:
                stack.extend(reversed(n.children))
        return out

    def word(self, node: Node, kind: str | None = None) -> Word:
        """The word ``node`` (its kind, when the caller knows it)."""
        if kind is None:
            kind = _KIND[node.kind_id]
        raw = self.text(node)
        if kind == "word" or kind == "number":  # the common case: a plain word
            if "\\" not in raw:
                return _tuple_new(Word, (raw, (), None, raw))
        elif kind == "raw_string":
            value = raw[1:-1] if len(raw) >= 2 and raw.endswith("'") else raw[1:]
            return _tuple_new(Word, (value, (), None, escape(value)))
        texts: list[str] = []
        pattern: list[str] = []
        self._parts(node, texts, pattern, False, kind)
        subs = tuple(self._opened(node)) if ("(" in raw or "`" in raw) and _HIDDEN_SUBSTITUTION.search(raw) else ()
        return _tuple_new(Word, ("".join(texts), subs, None, "".join(pattern)))

    def _expand(self, node: Node, kind: str | None = None) -> tuple[str, str]:
        """A word's text and pattern."""
        texts: list[str] = []
        pattern: list[str] = []
        self._parts(node, texts, pattern, False, kind)
        return "".join(texts), "".join(pattern)

    def _parts(self, node: Node, texts: list[str], pattern: list[str], quoted: bool, kind: str | None = None) -> None:
        self.depth += 1
        try:
            if self.depth > MAX_NESTING:
                raise RecursionError(f"nested deeper than {MAX_NESTING} levels")
            self._parts_of(node, texts, pattern, quoted, kind)
        finally:
            self.depth -= 1

    def _parts_of(self, node: Node, texts: list[str], pattern: list[str], quoted: bool, kind: str | None = None) -> None:
        if kind is None:
            kind = _KIND[node.kind_id]
        if kind in EXPANSIONS:
            raw = self.ascii[node.start_byte:node.end_byte] if self.ascii is not None else self.text(node)
            if self.bindings and kind in ("simple_expansion", "expansion"):
                bound = self.bindings.get(raw.lstrip("$").strip("{}"))
                if bound is not None and _PLAIN_PARAMETER.fullmatch(raw):
                    texts.append(raw)  # a loop variable over literal words: one of them
                    pattern.append(bound)
                    return
            folded = self._echoed(node, raw) if kind == "command_substitution" else None
            if folded is not None and (quoted or not _SPACE.search(folded)):
                texts.append(folded)  # `$(echo rm -rf /)`: its output is known
                pattern.append(escape(folded) if quoted else folded)
                return
            texts.append(raw)
            pattern.append(UNKNOWN_QUOTED if quoted else UNKNOWN)
        elif kind == "word" and not quoted:
            raw = self.ascii[node.start_byte:node.end_byte] if self.ascii is not None else self.text(node)
            if "\\" not in raw:  # nothing escaped: the word as it stands
                texts.append(raw)
                pattern.append(raw)
                return
            i = 0
            while i < len(raw):
                c = raw[i]
                if c == "\\" and i + 1 < len(raw):
                    if raw[i + 1] != "\n":
                        texts.append(raw[i + 1])
                        pattern.append(escape(raw[i + 1]))
                    i += 2
                    continue
                texts.append(c)
                pattern.append(c)
                i += 1
        elif kind == "raw_string":
            raw = self.text(node)
            value = raw[1:-1] if len(raw) >= 2 and raw.endswith("'") else raw[1:]
            texts.append(value)
            pattern.append(escape(value))
        elif kind == "ansi_c_string":
            raw = self.text(node)
            body = raw[2:-1] if len(raw) >= 3 and raw.endswith("'") else raw[2:]
            value = _ansi_c(body)
            texts.append(value)
            pattern.append(escape(value))
        elif kind == "string" or kind == "translated_string":
            start, end = node.start_byte, node.end_byte
            if end - start > 1 and self.src[end - 1] == 34:  # a closing '"'
                end -= 1
            pos = start + (2 if kind == "translated_string" else 1)
            for child in node.named_children:
                child_start = child.start_byte
                if child_start > pos:
                    gap = _unescape_double(self.span(pos, child_start))
                    texts.append(gap)
                    pattern.append(escape(gap))
                child_kind = _KIND[child.kind_id]
                if child_kind in EXPANSIONS:
                    self._parts(child, texts, pattern, True, child_kind)
                else:
                    value = _unescape_double(self.text(child))
                    texts.append(value)
                    pattern.append(value.translate(_ESCAPES))  # escape(value)
                child_end = child.end_byte
                if child_end > pos:
                    pos = child_end
            if end > pos:
                gap = _unescape_double(self.span(pos, end))
                texts.append(gap)
                pattern.append(escape(gap))
        elif kind == "concatenation":
            pos = node.start_byte
            for child in node.children:
                child_start = child.start_byte
                if child_start > pos:  # text tree-sitter left between the parts
                    gap = self.span(pos, child_start)
                    texts.append(gap)
                    pattern.append(gap)
                self._parts(child, texts, pattern, quoted)
                pos = child.end_byte
        elif kind == "variable_assignment":
            value_node = node.child_by_field_name("value")
            head = self.span(node.start_byte, value_node.start_byte if value_node is not None else node.end_byte)
            texts.append(head)
            pattern.append(escape(head))
            if value_node is not None:
                self._parts(value_node, texts, pattern, quoted)
        elif node.child_count and kind not in ("number", "brace_expression", "regex", "extglob_pattern"):
            pos = node.start_byte
            for child in node.children:
                child_start = child.start_byte
                if child_start > pos:
                    gap = self.span(pos, child_start)
                    texts.append(gap)
                    pattern.append(gap if not quoted else escape(gap))
                self._parts(child, texts, pattern, quoted)
                pos = child.end_byte
            if node.end_byte > pos:
                gap = self.span(pos, node.end_byte)
                texts.append(gap)
                pattern.append(gap if not quoted else escape(gap))
        else:
            raw = self.text(node)
            texts.append(raw)
            pattern.append(escape(raw) if quoted else raw)

    def _echoed(self, node: Node, text: str) -> str | None:
        """The output of ``$(echo WORDS)`` (``text``) when the words are literal (else None)."""
        if "echo" not in text:  # the cheap test first
            return None
        commands = [c for c in node.named_children if _KIND[c.kind_id] != "comment"]
        if len(commands) != 1 or _KIND[commands[0].kind_id] != "command":
            return None
        command = commands[0]
        name = command.child_by_field_name("name")
        if name is None or self.text(name) != "echo":
            return None
        texts = []
        for child in command.named_children:
            kind = _KIND[child.kind_id]
            if kind == "command_name":
                continue
            if kind.endswith("redirect") or kind == "variable_assignment":
                return None
            if kind != "raw_string" and _HIDDEN_SUBSTITUTION.search(self.text(child)):
                # a word that may run a substitution is not literal: returning before reading it
                # keeps `$(echo $(echo …))` linear (reading it here and again in `word`: 2^depth)
                return None
            word = self.word(child, kind)
            if word.dynamic or word.subs:
                return None
            texts.append(word.text)
        while texts and texts[0] in ("-n", "-e", "-E", "-ne", "-en"):
            texts.pop(0)
        return " ".join(texts)


_BACKQUOTED: Final = re.compile(r"(?<!\\)`((?:[^`\\]|\\.)*)(`|$)", re.DOTALL)


def _backquoted(body: str) -> list[Script]:
    """The scripts of the `…` substitutions in an unquoted here-document's body (the grammar
    reads none of them; bash runs them): each read as a line of its own; an unclosed one is an
    error."""
    found: list[Script] = []
    for m in _BACKQUOTED.finditer(body):
        if not m.group(2):
            found.append(Script(errors=("an unclosed ` in a here-document",)))
            continue
        found.append(parse(re.sub(r"\\([$`\\])", r"\1", m.group(1))))
    return found


def _hidden(text: str) -> list[Script]:
    """Substitutions that tree-sitter kept as plain text (inside ``${x#…}`` patterns or
    ``[[ … =~ … ]]``): read the text again as the argument of a command."""
    script = parse(": " + text)
    found = list(script.substitutions)
    for pipeline in script.pipelines:
        for stage in pipeline:
            if isinstance(stage, Simple):
                found += [s for w in stage.words for s in w.subs]
    if not found and script.errors:
        found.append(Script(errors=script.errors))
    return found


def _errors(root: Node, source: bytes) -> tuple[str, ...]:
    """Up to three syntax errors, each quoting the text near it (``source`` is the line as
    given: a newline :func:`parse` added is not quoted)."""
    if not root.has_error:
        return ()
    found: list[str] = []
    stack = [root]
    while stack and len(found) < 3:
        n = stack.pop()
        if n.is_missing:
            found.append(f"missing `{n.type}` at character {n.start_byte}")
        elif n.type == "ERROR":
            near = source[n.start_byte:n.end_byte].decode("utf-8", "replace")
            near = near if len(near) <= 40 else near[:37] + "..."
            found.append(f"syntax error at character {n.start_byte} near `{near}`")
            continue
        if n.has_error:
            stack.extend(reversed(n.children))
    return tuple(found) or ("syntax error",)


def calls_of(text: str, caller: str) -> set[tuple[str, bool]]:
    """The names the script ``text`` calls (as a function body named ``caller`` would: see
    ``_Reader.calls_in``), each with whether the call runs beside the script."""
    source = text.encode("utf-8", "surrogatepass")
    return _Reader(source, text).calls_in(parser().parse(source).root_node, caller, False)


def parse(text: str) -> Script:
    """The script in ``text``: pipelines of simple and compound commands, every
    substitution opened up, syntax errors listed (see the module doc)."""
    if "$[" in text and _old_arithmetic_depth(text) > MAX_NESTING:
        # tree-sitter-bash does not know the old arithmetic `$[…]`: nested, it recovers from
        # an error at each level, which costs the square of the depth (8 s for 60 kB); past
        # the reader's own limit it is not parsed, and the line is as deep as the reader's
        # RecursionError says (the analysis reads it as opaque: denied)
        raise RecursionError(f"`$[` nested deeper than {MAX_NESTING} levels")
    source = text.encode("utf-8", "surrogatepass")
    parsed = source
    if text and text[-1] not in "\n\\":
        # tree-sitter-bash runs its error recovery (60-170 µs) for a pipeline of three or
        # more stages that ends the input; a final newline, which bash reads as the same end
        # of the command, spares it. Not after a backslash, where it would join two lines.
        text += "\n"
        parsed += b"\n"
    return read(parser().parse(parsed), parsed, text, source)


_BRACKET: Final = re.compile(r"\$\[|[][]")


def _old_arithmetic_depth(text: str) -> int:
    """How many ``$[`` are open at once, at most, in ``text`` (as written: quotes and escapes
    not read), a ``]`` closing the last bracket open (``$[`` or ``[``)."""
    open_: list[bool] = []  # per open bracket: whether it is a `$[`
    arithmetic = deepest = 0
    for m in _BRACKET.finditer(text):
        if m.group() == "]":
            if open_ and open_.pop():
                arithmetic -= 1
        else:
            old = m.group() == "$["
            open_.append(old)
            if old:
                arithmetic += 1
                deepest = max(deepest, arithmetic)
    return deepest


def read(tree: tree_sitter.Tree, parsed: bytes, text: str | None, source: bytes) -> Script:
    """The script of ``tree``, tree-sitter's parse of ``parsed`` (``text``, encoded; None:
    every span is decoded from the bytes), with its
    errors: those tree-sitter reports (quoting ``source``, the line as given) and every place
    where the tree and bash part ways (the checks above; each needs a character it looks for)."""
    root = tree.root_node
    reader = _Reader(parsed, text)
    acc = _Acc()
    reader.container(root, acc)
    errors = _errors(root, source) + misreads.check(root, parsed, source)
    if reader.errors:
        errors += tuple(reader.errors)
    return acc.script(errors)
