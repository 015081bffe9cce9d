"""``/undo``: put back the file the agent changed last, one change per call.

The edit tools keep a :class:`~agent_code.tools.base.Backup` of each file's content just
before every change (``ToolContext.backups``, newest last). Undoing the newest one
writes that content back — or deletes the file when the change created it — and says
what it did. Undoing again goes one change further back, across files.

A file changed on disk since the agent's change (by the user, a formatter, a command)
is not overwritten: :func:`undo_last` refuses with the reason unless ``force``. After an
undo the file's read stamp is the restored content (which the model had read before it
changed the file), so the edit tools' staleness check stays meaningful.
"""

from __future__ import annotations

from dataclasses import dataclass

from agent_code.tools.base import FileStamp, ToolContext
from agent_code.tools.edit import unified_diff


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


def undo_last(ctx: ToolContext, force: bool = False) -> UndoResult:
    """Undo the newest change in ``ctx.backups`` (see the module doc)."""
    if not ctx.backups:
        return UndoResult(False, "nothing to undo: no file has been changed in this session")
    backup = ctx.backups[-1]
    path, name = backup.path, _name(ctx, backup.path)
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
            with open(path, "wb") as f:
                f.write(backup.before)
            ctx.files.record(path, backup.before)
            message = f"restored {name} to its content before {backup.tool}"
            if current is not None:
                diff = unified_diff(_text(current), _text(backup.before), name, max_lines=40)
                message += "\n" + diff if diff else ""
    except OSError as exc:
        return UndoResult(False, f"cannot undo the change to {name}: {exc.strerror}")
    ctx.backups.pop()
    left = len(ctx.backups)
    message += f"\n({left} earlier change{'s' * (left != 1)} can still be undone)" if left else ""
    note = (f"[the user ran /undo: {name} was deleted]" if backup.before is None
            else f"[the user ran /undo: {name} is back to its content before your {backup.tool}; "
                 "read it again before changing it]")
    return UndoResult(True, message, note)


def _text(data: bytes) -> str:
    return data.decode("utf-8", errors="replace")
