"""JSON files: reading the JSONL files users write by hand (scripts, task sets) with errors that
point at ``file:line`` (blank lines and lines starting with ``#`` are skipped), and writing a
JSON file whole or not at all."""

from __future__ import annotations

import json
import os
import tempfile
from pathlib import Path
from typing import Any, Iterator


def read_jsonl(path: str | Path, error: type[Exception], what: str) -> Iterator[tuple[int, str, Any]]:
    """``(line number, "file:line", parsed object)`` for every data line of ``path``; an
    unreadable file or a line that is not JSON raises ``error`` (naming ``what`` / the line)."""
    path = Path(path)
    try:
        lines = path.read_text(encoding="utf-8").splitlines()
    except (OSError, UnicodeDecodeError) as exc:
        raise error(f"cannot read {what} {path}: {getattr(exc, 'strerror', None) or exc}") from None
    for number, line in enumerate(lines, 1):
        if not line.strip() or line.lstrip().startswith("#"):
            continue
        where = f"{path}:{number}"
        try:
            obj = json.loads(line)
        except json.JSONDecodeError as exc:
            raise error(f"{where}: invalid JSON: {exc.msg} (column {exc.colno})") from None
        yield number, where, obj


def write_json_atomic(path: str | Path, data: Any, *, indent: int = 1) -> None:
    """``data`` as JSON in ``path``, atomically: written to a temp file in the same directory,
    then renamed over ``path``, so a reader sees the old file or the new one, never a part
    (the temp file is removed if anything fails). Raises OSError."""
    path = Path(path)
    fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=f".{path.name}.", suffix=".tmp")
    try:
        with os.fdopen(fd, "w", encoding="utf-8") as handle:
            json.dump(data, handle, ensure_ascii=False, indent=indent)
            handle.write("\n")
        os.replace(tmp, path)
    except BaseException:
        try:
            os.unlink(tmp)
        except OSError:
            pass
        raise
