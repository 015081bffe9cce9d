"""Edits a small model writes as code blocks (the small-model profile).

A model of a billion or two parameters fixes a short file well when it may answer with the
corrected file in a fenced code block, and badly when the same file must go out as a JSON string
inside a tool call (measured on the bundled tasks with Qwen2.5-Coder-1.5B: the block came back
fixed in 4 of 4 samples, the ``write_file`` call wrote the file's name, a tool list or runs of
blank lines into it). Aider's "whole" edit format rests on the same finding.

:func:`block_edits` returns an ``on_stop`` hook for the agent loop: when a reply without tool
calls holds such a block, the block becomes a ``write_file`` call the model did not make, run as
if it had (:meth:`Agent.act`: the permission policy decides, the tool's own checks apply — the
file must have been read in this session and be unchanged since — and the ``after_tool`` hooks
run, so the tests run after it), and the loop goes on with what happened as the next user message.

Which file a block is for (:func:`find_edits`): a path in its fence line (```` ```python
thermo.py````) or on one of the two lines before it (``thermo.py:``, ``**thermo.py**``); else, when
the session has read exactly one file of the block's language, that one. Only files the session
has read count. What is written:

* the block itself, when it is the whole file: for Python, it parses and defines every top-level
  function and class the file defines (a script that defines none: when its path was named); for
  other files, when its path was named;
* for Python, a block of only functions and classes the file already defines (and imports): each
  replaces its namesake in the file (decorators included), new imports go after the file's last
  top-level import — small models often answer with just the corrected function;
* nothing otherwise (a block that is not valid Python, an example, a test): the reply stands as
  the answer.
"""

from __future__ import annotations

import ast
import re
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Callable, Sequence

from agent_code.types import ToolCall

if TYPE_CHECKING:
    from agent_code.agent.loop import Agent, AgentResult

MAX_EDITS = 3
MAX_BLOCKS = 20
MAX_FILE_BYTES = 256 * 1024
# an opening fence (its info string), the body, a closing fence on its own line (or the end of
# the reply: a model cut off at its token limit leaves the last block open)
_FENCE = re.compile(r"^```[ \t]*([^\n`]*)\n(.*?)(?:^```[ \t]*$|\Z)", re.M | re.S)
_PATH_WORD = re.compile(r"(?<![\w/.-])([\w][\w./-]*\.[A-Za-z0-9]{1,6})(?![\w/-])")
_NAME_LINE = re.compile(r"[#*`\s]*[\w][\w./-]*\.[A-Za-z0-9]{1,6}[*`]*:?")
_DEF_LINE = re.compile(r"(?:async[ \t]+def|def|class)[ \t]+(\w+)")
_LANGUAGES = {"py": "python", "python": "python", "python3": "python"}


@dataclass(frozen=True)
class BlockEdit:
    """A file's new content, from a code block: ``path`` as the project names it, ``how`` it
    was made (``whole file`` or ``replaced NAME, …``)."""

    path: str
    content: str
    how: str


def _language(info: str) -> str | None:
    word = info.split()[0].lower() if info.split() else ""
    return _LANGUAGES.get(word, word or None)


def _named_path(info: str, before: str) -> str | None:
    """A path named in the fence line, else on one of the two lines before the block."""
    for text in (info, *reversed(before.rstrip("\n").split("\n")[-2:])):
        found = _PATH_WORD.findall(text)
        if found:
            return found[-1]
    return None


def find_edits(text: str, read: dict[str, str]) -> list[BlockEdit]:
    """The edits the code blocks in ``text`` stand for (see the module doc). ``read``: the
    files the session has read, project-relative path → current content."""
    edits: list[BlockEdit] = []
    for n, match in enumerate(_FENCE.finditer(text)):
        if n == MAX_BLOCKS:  # a reply of thousands of fences is no fix: the first ones are looked at
            break
        info, body = match.group(1).strip(), match.group(2)
        language = _language(info)
        first, _, rest = body.partition("\n")
        if _NAME_LINE.fullmatch(first.strip()):  # the path as the block's first line: `thermo.py:`
            info, body = f"{info} {first.strip().strip('*`:#')}", rest
        named = _named_path(info, text[:match.start()])
        path = _resolve(named, language, read)
        if path is None:
            continue
        edit = _edit_for(path, read[path], body, named is not None)
        if edit is not None and all(e.path != edit.path for e in edits):
            edits.append(edit)
        if len(edits) >= MAX_EDITS:
            break
    return edits


def _resolve(named: str | None, language: str | None, read: dict[str, str]) -> str | None:
    if named is not None:
        key = named.removeprefix("./")
        if key in read:
            return key
        ends = [p for p in read if p.endswith("/" + key)]  # `pager.py` for src/pager.py
        return ends[0] if len(ends) == 1 else None
    if language == "python" or language is None:
        python = [p for p in read if p.endswith(".py")]
        return python[0] if len(python) == 1 else None
    return None


def _parse(text: str) -> ast.Module | None:
    """``ast.parse(text)``, or None for text that is not Python — or nests past what the parser
    or Python's recursion allows (a hostile block must never take the agent loop down)."""
    try:
        return ast.parse(text)
    except (SyntaxError, ValueError, RecursionError, MemoryError):
        return None


def _top_level(tree: ast.Module) -> dict[str, ast.stmt]:
    return {node.name: node for node in tree.body
            if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef))}


def _edit_for(path: str, current: str, body: str, named: bool) -> BlockEdit | None:
    if not body.endswith("\n"):
        body += "\n"
    if not path.endswith(".py"):
        return BlockEdit(path, body, "whole file") if named else None
    old = _parse(current)
    new = _parse(body)
    if new is None:
        return _salvaged(path, current, old, body)
    if old is None:
        return BlockEdit(path, body, "whole file") if named else None
    old_defs, new_defs = _top_level(old), _top_level(new)
    if not new_defs:  # a script: the whole of it, when the file defines nothing either and is named
        return BlockEdit(path, body, "whole file") if named and not old_defs else None
    if set(old_defs) <= set(new_defs):
        return BlockEdit(path, body, "whole file")
    imports = [n for n in new.body if isinstance(n, (ast.Import, ast.ImportFrom))]
    if set(new_defs) - set(old_defs) or len(new_defs) + len(imports) != len(new.body):
        return None  # something else than the file's own functions: an example, a test
    return BlockEdit(path, _merged(current, old, body, new_defs, old_defs, imports),
                     "replaced " + ", ".join(new_defs))


def _salvaged(path: str, current: str, old: ast.Module | None, body: str) -> BlockEdit | None:
    """A block that is not valid Python as a whole (an unclosed docstring, a stray line, a cut-off
    end): the top-level functions and classes in it that parse on their own and that the file
    defines replace their namesakes, when one of them differs."""
    if old is None:
        return None
    old_defs = _top_level(old)
    lines = _lines(body)
    starts = [i for i, line in enumerate(lines) if _DEF_LINE.match(line)]
    chunks: list[str] = []
    for n, at in enumerate(starts):
        start, end = at, at + 1
        while start > 0 and lines[start - 1].startswith("@"):
            start -= 1
        limit = starts[n + 1] if n + 1 < len(starts) else len(lines)
        while end < limit and (not lines[end].strip() or lines[end][:1] in " \t)]}"):
            end += 1
        chunks.append("".join(lines[start:end]))
    kept: list[str] = []
    for chunk in chunks:
        tree = _parse(chunk)
        if tree is None:
            continue
        defs = _top_level(tree)
        if len(tree.body) == 1 and len(defs) == 1 and set(defs) <= set(old_defs):
            kept.append(chunk.rstrip("\n") + "\n")
    if not kept:
        return None
    joined = "\n\n".join(kept)
    new = _parse(joined)
    if new is None:
        return None
    merged = _merged(current, old, joined, _top_level(new), old_defs, [])
    return BlockEdit(path, merged, "replaced " + ", ".join(_top_level(new))) if merged != current else None


def _lines(text: str) -> list[str]:
    """``text`` in lines as the parser counts them (ends kept): at ``\n`` only, where
    ``str.splitlines`` would also split at U+2028, form feeds and other separators that ast's
    line numbers do not count."""
    parts = text.split("\n")
    out = [part + "\n" for part in parts[:-1]]
    return out + [parts[-1]] if parts[-1] else out


def _span(node: ast.stmt) -> tuple[int, int]:
    """0-based first line (decorators included) and end line (exclusive) of ``node``."""
    decorators = getattr(node, "decorator_list", [])
    first = min([node.lineno, *(d.lineno for d in decorators)])
    return first - 1, node.end_lineno or node.lineno


def _merged(current: str, old: ast.Module, body: str, new_defs: dict[str, ast.stmt],
            old_defs: dict[str, ast.stmt], imports: Sequence[ast.stmt]) -> str:
    lines = _lines(current)
    if lines and not lines[-1].endswith("\n"):
        lines[-1] += "\n"
    block = _lines(body)
    replacements = []
    for name, node in new_defs.items():
        start, end = _span(node)
        replacements.append((_span(old_defs[name]), block[start:end]))
    for (start, end), text in sorted(replacements, key=lambda r: r[0][0], reverse=True):
        lines[start:end] = text
    have = {line.strip() for line in lines}
    new_imports: list[str] = []
    for node in sorted(imports, key=lambda n: not (isinstance(n, ast.ImportFrom) and n.module == "__future__")):
        start, end = _span(node)
        text = block[start:end]
        if "".join(text).strip() not in have:
            new_imports += text
    if new_imports:
        old_imports = [n for n in old.body if isinstance(n, (ast.Import, ast.ImportFrom))]
        if old_imports:
            at = _span(old_imports[-1])[1]
        elif old.body and isinstance(old.body[0], ast.Expr) and isinstance(getattr(old.body[0], "value", None),
                                                                            ast.Constant):
            at = _span(old.body[0])[1]  # after the module docstring
        else:  # after a shebang, an encoding line and the comments at the top
            at = 0
            while at < len(lines) and lines[at].lstrip().startswith("#"):
                at += 1
        lines[at:at] = new_imports
    return "".join(lines)


def _read_files(agent: "Agent") -> dict[str, str]:
    """The project files this session has read, by their project-relative path, as they are now."""
    root = agent.ctx.root
    out: dict[str, str] = {}
    for real in agent.ctx.files.stamps:
        try:
            rel = Path(real).relative_to(root).as_posix()
            if Path(real).stat().st_size > MAX_FILE_BYTES:
                continue  # not a file a model rewrites whole in a reply
            out[rel] = Path(real).read_text(encoding="utf-8")
        except (ValueError, OSError, UnicodeDecodeError):
            continue
    return out


def fix_request(agent: "Agent") -> str:
    """The line that closes a small model's first prompt once it holds the code and the failing
    tests: what to answer with (measured: with it last, the 1.5B model answers with the fixed file)."""
    read = sorted(_read_files(agent))
    what = f"the whole corrected {read[0]}" if len(read) == 1 else "each corrected file, whole,"
    return f"Reply with {what} in one code block."


def block_edits(agent: "Agent") -> Callable[["AgentResult"], str | None]:
    """The ``on_stop`` hook (module doc) for ``agent``."""
    count = 0

    def hook(done: "AgentResult") -> str | None:
        nonlocal count
        if not done.final or "```" not in done.final:
            return None
        edits = find_edits(done.final, _read_files(agent))
        if not edits:
            return None
        reports = []
        for edit in edits:
            count += 1
            result = agent.act(ToolCall(f"block-{count}", "write_file", {"path": edit.path, "content": edit.content}))
            if result.is_error:
                reports.append(f"Your code block for {edit.path} ({edit.how}) was refused:\n{result.content}")
            elif result.content.startswith("No change"):
                reports.append(f"Your code block for {edit.path} ({edit.how}) is the file as it already is: "
                               "nothing changed, and the tests fail as before. Find the bug and change the code.")
            else:
                reports.append(f"Your code block for {edit.path} ({edit.how}) was saved:\n{result.content}")
        return ("\n\n".join(reports) + "\n\nIf the tests pass now, answer in one or two sentences: what was wrong "
                "and what you changed. Otherwise send the whole corrected file again in one code block.")

    return hook
