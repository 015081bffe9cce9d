"""Durable turn logs and sample export.

Layout under one directory ``DIR``::

    DIR/sessions/<safe id>.turns.jsonl   one TurnRecord.to_dict() per line, fsynced per turn
    DIR/samples.jsonl                    every exported Sample, appended (one per line)
    DIR/samples/<safe id>.parquet        one file per session: that session's samples
    DIR/ended.jsonl                      {"session_id", "how"} per ended session, fsynced:
                                         how = finished | deleted | recovered

Parquet choice: one file per session, written atomically (temp file + rename) when the
session is exported, rather than a single ``samples.parquet`` rewritten from the jsonl on every
export (quadratic over a long run). All per-session files share one schema, so the whole set
reads as one table: ``pyarrow.parquet.read_table("DIR/samples")`` or :func:`read_samples` on
the directory. Exporting a session again replaces its parquet file (the jsonl keeps both).

After a crash, :func:`recover` rebuilds samples from the turn logs: a process killed mid-write
leaves at most a torn last line, which is skipped; every finished turn was fsynced.

What is done stays done. A session is *done* when ``ended.jsonl`` names it (finished, deleted,
or recovered before) or ``samples.jsonl`` already holds samples of it (finishing appends the
samples first and the ``ended`` line right after; a crash between the two still leaves the
session done, because the samples line is the commit point). :func:`recover` rebuilds only the
sessions that are not done and marks each one it wrote as ``recovered``, so running it again
changes nothing; a gateway reloads the ended ids on start and never reopens them.
"""

from __future__ import annotations

import hashlib
import json
import logging
import os
import re
import threading
from pathlib import Path
from typing import TYPE_CHECKING, Any, Callable, Iterable, Iterator

from agent_code.trajectory.records import TurnRecord
from agent_code.trajectory.samples import Sample, build_samples

if TYPE_CHECKING:   # an optional package (the parquet extra), imported where it is used
    import pyarrow as pa

__all__ = ["TurnLog", "safe_name", "write_samples", "read_samples", "recover", "read_turn_log", "mark_ended",
           "ended_ids", "exported_ids", "done_ids", "SAMPLES_JSONL", "SAMPLES_DIR", "SESSIONS_DIR", "ENDED_JSONL"]

log = logging.getLogger(__name__)

SESSIONS_DIR = "sessions"
ENDED_JSONL = "ended.jsonl"
SAMPLES_JSONL = "samples.jsonl"
SAMPLES_DIR = "samples"
TURNS_SUFFIX = ".turns.jsonl"


def safe_name(session_id: str) -> str:
    """A file-name stem for any session id: sanitized, capped, plus a short hash of the id (so
    two ids that sanitize alike never share a file)."""
    stem = re.sub(r"[^A-Za-z0-9_-]+", "_", session_id).strip("_")[:64] or "session"
    return f"{stem}-{hashlib.sha256(session_id.encode('utf-8', 'surrogatepass')).hexdigest()[:12]}"


def _fsync_dir(directory: Path) -> None:
    try:
        fd = os.open(directory, os.O_RDONLY)
    except OSError:
        return                      # not supported here (e.g. Windows)
    try:
        os.fsync(fd)
    except OSError:
        pass
    finally:
        os.close(fd)


def _append_lines(path: Path, lines: Iterable[str]) -> None:
    """Append complete lines, fsynced (a new file's directory entry too). A torn last line left
    by a crash is ended first, so it stays one unreadable line on its own. If the write fails
    (disk full, I/O error) the file is cut back to its old size, so no partial record stays
    behind, and the OSError propagates: the caller must not count the lines as written."""
    new = not path.exists()
    data = b"".join((line + "\n").encode("utf-8") for line in lines)
    fd = os.open(path, os.O_RDWR | os.O_APPEND | os.O_CREAT, 0o644)
    try:
        size = os.fstat(fd).st_size
        if size > 0 and os.pread(fd, 1, size - 1) != b"\n":
            data = b"\n" + data       # a torn line from a crash: never glue a record onto it
        try:
            view = memoryview(data)
            while view:
                view = view[os.write(fd, view):]
            os.fsync(fd)
        except OSError:
            try:
                os.ftruncate(fd, size)
            except OSError:
                log.error("%s: could not cut a failed append back to %d bytes", path, size)
            raise
    finally:
        os.close(fd)
    if new:
        _fsync_dir(path.parent)


class TurnLog:
    """Append-only per-session turn logs under ``DIR/sessions``; safe to share between threads."""

    def __init__(self, directory: str | os.PathLike):
        self.directory = Path(directory)
        self.sessions_dir = self.directory / SESSIONS_DIR
        self._lock = threading.Lock()

    def path_for(self, session_id: str) -> Path:
        return self.sessions_dir / (safe_name(session_id) + TURNS_SUFFIX)

    def append(self, record: TurnRecord, parent: TurnRecord | None = None) -> Path:
        """Write one turn as one JSON line, flushed and fsynced before returning; what it
        shares with ``parent`` (its parent record, already in this log) by reference
        (:meth:`TurnRecord.to_log`)."""
        line = json.dumps(record.to_log(parent), ensure_ascii=False, separators=(",", ":"))
        path = self.path_for(record.session_id)
        with self._lock:
            if not self.sessions_dir.is_dir():
                self.sessions_dir.mkdir(parents=True, exist_ok=True)
                _fsync_dir(self.directory)
            _append_lines(path, [line])
        return path

    def mark_ended(self, session_id: str, how: str) -> None:
        """Record durably that ``session_id`` ended (finished, deleted, recovered)."""
        mark_ended(self.directory, [session_id], how, lock=self._lock)

    def ended_ids(self) -> set[str]:
        return ended_ids(self.directory)

    def read(self, session_id: str) -> list[TurnRecord]:
        return read_turn_log(self.path_for(session_id))

    def sessions(self) -> dict[str, list[TurnRecord]]:
        """Every logged session's records, by session id (sorted by turn index)."""
        out: dict[str, list[TurnRecord]] = {}
        if not self.sessions_dir.is_dir():
            return out
        for path in sorted(self.sessions_dir.glob("*" + TURNS_SUFFIX)):
            for rec in read_turn_log(path):
                out.setdefault(rec.session_id, []).append(rec)
        for sid, recs in out.items():
            recs.sort(key=lambda r: r.index)
        return out


def _json_lines(path: Path) -> Iterator[dict[str, Any]]:
    """JSON objects of a .jsonl file; a torn last line (crash mid-write) is skipped, as is
    (with a warning) any other line that does not parse."""
    with open(path, "rb") as fh:
        lines = fh.read().split(b"\n")
    last = len(lines) - 1
    for n, raw in enumerate(lines):
        if not raw.strip():
            continue
        try:
            obj = json.loads(raw)
        except ValueError:
            if n != last:
                log.warning("%s:%d: skipping a line that is not JSON", path, n + 1)
            continue
        if isinstance(obj, dict):
            yield obj


def read_turn_log(path: str | os.PathLike) -> list[TurnRecord]:
    """The records of one turn log, in file order; a turn written by reference
    (:meth:`TurnRecord.to_log`) is rebuilt from the records before it, sharing their ids."""
    records = []
    earlier: dict[str, dict[int, TurnRecord]] = {}   # per session id: index -> latest record
    for obj in _json_lines(Path(path)):
        try:
            seen = earlier.setdefault(str(obj.get("session_id")), {})
            record = TurnRecord.from_log(obj, seen)
        except (TypeError, ValueError) as exc:
            log.warning("%s: skipping a malformed turn record: %s", path, exc)
            continue
        seen[record.index] = record
        records.append(record)
    return records


def mark_ended(directory: str | os.PathLike, session_ids: Iterable[str], how: str, *,
               lock: threading.Lock | None = None) -> None:
    """Append one ``ended.jsonl`` line per id (fsynced)."""
    lines = [json.dumps({"session_id": sid, "how": how}, ensure_ascii=False, separators=(",", ":"))
             for sid in session_ids]
    if not lines:
        return
    directory = Path(directory)
    directory.mkdir(parents=True, exist_ok=True)
    if lock is None:
        _append_lines(directory / ENDED_JSONL, lines)
    else:
        with lock:
            _append_lines(directory / ENDED_JSONL, lines)


def ended_ids(directory: str | os.PathLike) -> set[str]:
    """The ids ``DIR/ended.jsonl`` names (finished, deleted or recovered sessions)."""
    path = Path(directory) / ENDED_JSONL
    if not path.is_file():
        return set()
    return {obj["session_id"] for obj in _json_lines(path) if isinstance(obj.get("session_id"), str)}


def exported_ids(directory: str | os.PathLike) -> set[str]:
    """The session ids ``DIR/samples.jsonl`` holds samples of."""
    path = Path(directory) / SAMPLES_JSONL
    if not path.is_file():
        return set()
    return {obj["session_id"] for obj in _json_lines(path) if isinstance(obj.get("session_id"), str)}


def done_ids(*directories: str | os.PathLike) -> set[str]:
    """Sessions that are done in any of ``directories``: ended, or with samples exported."""
    out: set[str] = set()
    for d in directories:
        out |= ended_ids(d) | exported_ids(d)
    return out


def recover(directory: str | os.PathLike, *, reward: float | None = None, status: str | None = "aborted",
            rollout_id: str | None = None, reward_policy: str = "full",
            decode: Callable[[list[int]], str] | None = None, skip: Iterable[str] = ()) -> list[Sample]:
    """Samples rebuilt from every turn log under ``directory`` (the converter after a crash),
    except the sessions in ``skip`` (pass :func:`done_ids` to leave finished sessions alone).

    Each session's samples get ``reward`` (None: not scored) and status ``status``
    ("aborted" by default; None derives it from each leaf's finish reason).
    """
    samples: list[Sample] = []
    skipped = set(skip)
    for sid, records in sorted(TurnLog(directory).sessions().items()):
        if sid in skipped:
            continue
        samples.extend(build_samples(records, reward=reward, rollout_id=rollout_id, reward_policy=reward_policy,
                                     status_override=status, decode=decode, metadata={"recovered": True}))
    return samples


# --------------------------------------------------------------------------- export

def _schema() -> pa.Schema:
    import pyarrow as pa
    return pa.schema([
        ("session_id", pa.string()), ("rollout_id", pa.string()), ("index", pa.int64()),
        ("branch", pa.string()), ("tokens", pa.list_(pa.int32())), ("response_length", pa.int64()),
        ("loss_mask", pa.list_(pa.int8())), ("rollout_log_probs", pa.list_(pa.float32())),
        ("reward", pa.float64()), ("status", pa.string()), ("response", pa.string()),
        ("metadata", pa.string()),   # JSON text
    ])


def _table(samples: list[Sample]) -> pa.Table:
    import pyarrow as pa
    schema = _schema()
    columns: dict[str, list[Any]] = {name: [] for name in schema.names}
    for s in samples:
        row = s.to_dict()
        row["metadata"] = json.dumps(row["metadata"], ensure_ascii=False)
        if row["reward"] is not None:
            row["reward"] = float(row["reward"])  # an int reward past int64 would fail pyarrow's conversion
        for name in schema.names:
            columns[name].append(row[name])
    return pa.Table.from_pydict(columns, schema=schema)


def write_samples(samples: Iterable[Sample], directory: str | os.PathLike) -> list[Path]:
    """Append ``samples`` to ``DIR/samples.jsonl`` and write each session's
    ``DIR/samples/<safe id>.parquet`` (all of that session's samples go in one call). Returns the
    parquet paths written."""
    samples = list(samples)
    directory = Path(directory)
    directory.mkdir(parents=True, exist_ok=True)
    if not samples:
        return []
    by_session: dict[str, list[Sample]] = {}
    for s in samples:
        by_session.setdefault(s.session_id, []).append(s)
    tables = {sid: _table(group) for sid, group in by_session.items()}  # a sample that cannot convert: before any write
    # parquet first: each file is replaced whole, so writing it again is harmless; the jsonl
    # append comes last and is cut back if it fails. A write that fails (disk full) can
    # therefore be retried without leaving a duplicate line behind.
    out_dir = directory / SAMPLES_DIR
    out_dir.mkdir(exist_ok=True)
    written = [_write_table(table, out_dir / (safe_name(sid) + ".parquet")) for sid, table in tables.items()]
    _fsync_dir(out_dir)
    _append_lines(directory / SAMPLES_JSONL,
                  (json.dumps(s.to_dict(copy_data=False), ensure_ascii=False, separators=(",", ":")) for s in samples))
    return written


def write_parquet(samples: Iterable[Sample], path: str | os.PathLike) -> Path:
    """Write ``samples`` to one parquet file, atomically (a temp file renamed into place)."""
    return _write_table(_table(list(samples)), Path(path))


def _write_table(table: pa.Table, path: Path) -> Path:
    import pyarrow.parquet as pq

    tmp = path.with_name(path.name + ".tmp")
    try:
        pq.write_table(table, tmp)
        os.replace(tmp, path)
    except BaseException:
        tmp.unlink(missing_ok=True)   # a half-written temp file would only take up room
        raise
    return path


def _from_row(row: dict[str, Any]) -> Sample:
    meta = row.get("metadata")
    row = dict(row, metadata=json.loads(meta) if isinstance(meta, str) else (meta or {}))
    return Sample.from_dict(row)


def read_samples(path: str | os.PathLike) -> list[Sample]:
    """Samples from a ``.jsonl`` file, a ``.parquet`` file, or a directory of parquet files
    (an export directory ``DIR`` reads ``DIR/samples/``)."""
    path = Path(path)
    if path.is_dir():
        sub = path / SAMPLES_DIR
        target = sub if sub.is_dir() else path
        files = sorted(target.glob("*.parquet"))
        if not files and (path / SAMPLES_JSONL).is_file():
            return read_samples(path / SAMPLES_JSONL)
        return [s for f in files for s in read_samples(f)]
    if path.suffix == ".parquet":
        import pyarrow.parquet as pq
        return [_from_row(row) for row in pq.read_table(path).to_pylist()]
    return [_from_row(obj) for obj in _json_lines(path)]
