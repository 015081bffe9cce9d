"""Edit tools: write_file and edit_file, the tools that change files (kind ``edit``).

Paths are confined exactly like the read tools' (:func:`paths.resolve_inside`). On top
of that, each change must pass these rules, each refused with a :class:`ToolError` that
tells the model what to do instead:

* **Read before you change.** Changing an existing file (edit_file, or write_file over
  it) needs a read_file of it earlier in this session: ``ctx.files`` holds a
  :class:`FileStamp` per file read. Creating a new file needs no read.
* **No stale edits.** If the file changed on disk since that read (mtime, size or
  content differ: a command, a formatter, the user), the change is refused until the
  model reads it again. After our own change the stamp is refreshed, so consecutive
  edits of one file work without re-reading.
* **Unambiguous replacements.** ``old_string`` must occur exactly once (overlapping
  matches count) unless ``replace_all``; an empty or unchanged ``old_string`` is refused.
* Files must be UTF-8 text; CRLF files stay CRLF (``old_string``/``new_string`` typed
  with ``\\n`` are matched and written with ``\\r\\n``).

Every change appends a :class:`Backup` of the previous content to ``ctx.backups`` (the
hook for ``/undo``) and answers with a short unified diff, so the model sees what it did.
"""

from __future__ import annotations

import difflib
import re
from pathlib import Path
from typing import Annotated

from agent_code.tools.base import Backup, FileStamp, ToolContext, ToolError, tool
from agent_code.tools.paths import display, printable, read_regular, resolve_inside, write_regular

MAX_DIFF_LINES = 80
MAX_MATCH_LINES_SHOWN = 10
_LINE_NUMBER_PREFIX = re.compile(r"^ *\d+\t", re.MULTILINE)


# --- pure helpers ---------------------------------------------------------------------

def split_keep_ends(text: str) -> list[str]:
    """Lines of ``text`` with their ``\n``, split on ``\n`` only (unlike ``str.splitlines``,
    which also splits on form feeds, ``\x1c``, U+2028 …, characters source files may hold)."""
    parts = text.split("\n")
    return [p + "\n" for p in parts[:-1]] + ([parts[-1]] if parts[-1] else [])


def unified_diff(before: str | None, after: str, name: str, max_lines: int = MAX_DIFF_LINES) -> str:
    """A ``git diff``-style unified diff of one file (``before is None``: a new file),
    cut to ``max_lines`` lines with a note saying how many were left out."""
    old = split_keep_ends(before or "")
    new = split_keep_ends(after)
    out: list[str] = []
    for line in difflib.unified_diff(old, new, "/dev/null" if before is None else f"a/{name}",
                                     f"b/{name}", n=3):
        if line.endswith("\n"):
            out.append(line[:-1].removesuffix("\r"))
        else:
            out += [line.removesuffix("\r"), "\\ No newline at end of file"]
    if len(out) > max_lines:
        out = out[:max_lines] + [f"… {len(out) - max_lines} more diff lines not shown"]
    return "\n".join(out)


def match_positions(text: str, needle: str) -> list[int]:
    """Start offsets of every occurrence of ``needle`` in ``text``, overlapping ones included."""
    found: list[int] = []
    i = text.find(needle)
    while i != -1:
        found.append(i)
        i = text.find(needle, i + 1)
    return found


def with_file_line_endings(text: str, old: str, new: str) -> tuple[str, str]:
    """For a CRLF file, turn bare ``\\n`` in ``old``/``new`` into ``\\r\\n`` (read_file shows
    lines without their ``\\r``, so the model types ``\\n``); otherwise leave them alone."""
    if "\r\n" not in text or old in text or "\r" in old:
        return old, new
    return old.replace("\n", "\r\n"), new.replace("\r\n", "\n").replace("\n", "\r\n")


def _line_of(text: str, offset: int) -> int:
    return text.count("\n", 0, offset) + 1


def _decode(data: bytes, path: str) -> str:
    try:
        return data.decode("utf-8")
    except UnicodeDecodeError:
        raise ToolError(f"{path!r} is not valid UTF-8 text; the edit tools only change UTF-8 files") from None


def _encode(text: str, what: str) -> bytes:
    try:
        return text.encode("utf-8")
    except UnicodeEncodeError:
        raise ToolError(f"{what} is not valid Unicode text (it contains a lone surrogate)") from None


# --- shared steps ---------------------------------------------------------------------

def _current_content(ctx: ToolContext, real: Path, path: str, action: str) -> bytes:
    """The content of an existing file the model wants to change, if it may: it was read
    in this session and has not changed since."""
    stamp = ctx.files.get(real)
    if stamp is None:
        raise ToolError(f"{path!r} has not been read in this session; read it with read_file "
                        f"first, then {action} it")
    data = read_regular(real, path)
    try:
        now = FileStamp.of(real, data)
    except OSError as exc:
        raise ToolError(f"cannot read {path!r}: {exc.strerror}") from None
    if now != stamp:
        raise ToolError(f"{path!r} has changed on disk since you last read it (by a command or "
                        f"another program); read it again with read_file, then {action} it")
    return data


def _store(ctx: ToolContext, real: Path, path: str, before: bytes | None, after: bytes,
           tool_name: str) -> None:
    """Write ``after``, keeping ``before`` in ``ctx.backups`` and refreshing the read stamp."""
    write_regular(real, after, path)  # in place (mode, owner kept); never through a hard link
    ctx.backups.append(Backup(real, before, tool_name))
    ctx.files.record(real, after)


# --- the tools ------------------------------------------------------------------------

@tool(kind="edit")
def write_file(
    ctx: ToolContext,
    path: Annotated[str, "File to write, relative to the working directory."],
    content: Annotated[str, "The complete new content of the file."],
) -> str:
    """Create a file, or replace all of an existing file's content. Missing parent
    directories are created. Overwriting an existing file requires that you read it with
    read_file in this session and that it has not changed since; a new file needs no read.
    To change part of a file, prefer edit_file. Returns a unified diff of the change."""
    real = resolve_inside(ctx, path, kind="file", must_exist=False)
    after = _encode(content, "content")
    name = printable(display(ctx, real))
    if real.exists():
        before = _current_content(ctx, real, path, "overwrite")
        if before == after:
            return f"No change: {name} already has exactly this content."
        old_text = _decode(before, path)
        _store(ctx, real, path, before, after, "write_file")
        return f"Wrote {name}.\n" + unified_diff(old_text, content, name)
    _store(ctx, real, path, None, after, "write_file")
    lines = len(split_keep_ends(content))
    return f"Created {name} ({lines} line{'s' * (lines != 1)}).\n" + unified_diff(None, content, name)


@tool(kind="edit")
def edit_file(
    ctx: ToolContext,
    path: Annotated[str, "File to change, relative to the working directory."],
    old_string: Annotated[str, "Exact text to replace, copied from the file (indentation "
                               "included, without read_file's line-number prefix)."],
    new_string: Annotated[str, "Text to put in its place (must differ from old_string)."],
    replace_all: Annotated[bool, "Replace every occurrence instead of exactly one."] = False,
) -> str:
    """Replace text in an existing file. `old_string` must match the file exactly,
    whitespace and indentation included, and occur exactly once (add surrounding lines
    to make it unique) unless replace_all is true. The file must have been read with
    read_file in this session and not changed since; consecutive edits need no re-read.
    Returns a unified diff of the change."""
    if old_string == new_string:
        raise ToolError("old_string and new_string are identical; nothing would change")
    if not old_string:
        raise ToolError("old_string is empty; give the exact text to replace, or use write_file "
                        "to create a file or replace its whole content")
    real = resolve_inside(ctx, path, kind="file", must_exist=False)
    if not real.exists():
        raise ToolError(f"no such file: {path!r}; edit_file changes existing files, use write_file "
                        "to create one")
    before = _current_content(ctx, real, path, "edit")
    text = _decode(before, path)
    old, new = with_file_line_endings(text, old_string, new_string)
    where = match_positions(text, old)
    if not where:
        hint = (" It looks like it includes read_file's line-number prefixes; leave them out."
                if _LINE_NUMBER_PREFIX.search(old_string) else
                " It must match exactly, including whitespace and indentation; read the file "
                "again if unsure of its current text.")
        raise ToolError(f"old_string was not found in {path!r}.{hint}")
    if len(where) > 1 and not replace_all:
        lines = sorted({_line_of(text, i) for i in where})
        shown = ", ".join(map(str, lines[:MAX_MATCH_LINES_SHOWN]))
        if len(lines) > MAX_MATCH_LINES_SHOWN:
            shown += ", …"
        raise ToolError(f"old_string occurs {len(where)} times in {path!r} (lines {shown}); include "
                        "more surrounding lines so it matches exactly once, or set replace_all "
                        "to true to replace every occurrence")
    count = text.count(old) if replace_all else 1
    updated = text.replace(old, new, -1 if replace_all else 1)
    _store(ctx, real, path, before, _encode(updated, "new_string"), "edit_file")
    name = printable(display(ctx, real))
    return (f"Edited {name}: {count} replacement{'s' * (count != 1)}.\n"
            + unified_diff(text, updated, name))
