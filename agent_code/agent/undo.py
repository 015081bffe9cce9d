"""``/undo``: put back the file the agent changed last, one change per call.

The edit tools keep a :class:`~agent_code.tools.base.Backup` of each file's content just
before every change (``ToolContext.backups``, newest last). Undoing the newest one
writes that content back — or deletes the file when the change created it — and says
what it did. Undoing again goes one change further back, across files.

A file changed on disk since the agent's change (by the user, a formatter, a command)
is not overwritten: :func:`undo_last` refuses with the reason unless ``force``. After an
undo the file's read stamp is the restored content (which the model had read before it
changed the file), so the edit tools' staleness check stays meaningful.

The undo runs in agent-code's own process, outside the OS sandbox, while the file may have been
replaced since by a command inside it: a file (or a directory on its path) that is now a
symbolic link is refused, even with ``force`` — writing or deleting through it would reach
wherever the link points (``~/.bash_profile``, ``~/.ssh``), which the command itself could not.
The content goes back the way the edit tools write (``tools.paths.write_regular``: no link
followed, no file with other hard links changed).
"""

from __future__ import annotations

import os
from dataclasses import dataclass
from pathlib import Path

from agent_code.tools.base import FileStamp, ToolContext, ToolError
from agent_code.tools.edit import unified_diff
from agent_code.tools.paths import write_regular


@dataclass(frozen=True)
class UndoResult:
    done: bool
    message: str   # for the user
    note: str = ""  # for the model: what changed under it (empty when nothing did)


def _name(ctx: ToolContext, path) -> str:
    try:
        return path.relative_to(ctx.root).as_posix()
    except ValueError:
        return str(path)


def _linked(ctx: ToolContext, path: Path) -> str | None:
    """Why ``path`` (real when the agent changed it) cannot be undone now: it, or a directory on
    its way, is a link (or it is no longer inside the project); None when it can."""
    root = Path(os.path.realpath(ctx.root))
    if os.path.realpath(path.parent) != str(path.parent) or not (path.parent == root or root in path.parent.parents):
        return "a directory on its path is now a link out of it"
    if os.path.islink(path):
        return "it is now a link"
    return None


def undo_last(ctx: ToolContext, force: bool = False) -> UndoResult:
    """Undo the newest change in ``ctx.backups`` (see the module doc)."""
    if not ctx.backups:
        return UndoResult(False, "nothing to undo: no file has been changed in this session")
    backup = ctx.backups[-1]
    path, name = backup.path, _name(ctx, backup.path)
    linked = _linked(ctx, path)
    if linked is not None:   # even with force: the link may point anywhere (module doc)
        return UndoResult(False, f"not undoing the change to {name}: {linked} (a command replaced it); "
                                 "restore it yourself if you want to")
    try:
        current = path.read_bytes() if path.exists() else None
    except OSError as exc:
        return UndoResult(False, f"cannot read {name}: {exc.strerror}")
    stamp = ctx.files.get(path)
    if not force and stamp is not None and current is not None and FileStamp.of(path, current) != stamp:
        return UndoResult(False, f"{name} has changed on disk since the agent's {backup.tool}; not undoing "
                                 "(use /undo --force to overwrite it anyway)")
    try:
        if backup.before is None:
            if current is not None:
                path.unlink()
            ctx.files.stamps.pop(path, None)
            message = f"deleted {name} (created by {backup.tool})"
        else:
            write_regular(path, backup.before, name)
            ctx.files.record(path, backup.before)
            message = f"restored {name} to its content before {backup.tool}"
            if current is not None:
                diff = unified_diff(_text(current), _text(backup.before), name, max_lines=40)
                message += "\n" + diff if diff else ""
    except OSError as exc:
        return UndoResult(False, f"cannot undo the change to {name}: {exc.strerror}")
    except ToolError as exc:
        return UndoResult(False, f"cannot undo the change to {name}: {exc}")
    ctx.backups.pop()
    left = len(ctx.backups)
    message += f"\n({left} earlier change{'s' * (left != 1)} can still be undone)" if left else ""
    note = (f"[the user ran /undo: {name} was deleted]" if backup.before is None
            else f"[the user ran /undo: {name} is back to its content before your {backup.tool}; "
                 "read it again before changing it]")
    return UndoResult(True, message, note)


def _text(data: bytes) -> str:
    return data.decode("utf-8", errors="replace")
