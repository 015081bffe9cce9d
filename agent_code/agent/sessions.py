"""Sessions: every turn of a conversation appended to ``<project>/.agent/sessions/<id>.jsonl``.

The file is an append-only **log of changes to the history**, one JSON object a line,
written and flushed as each change happens, so a crash or a kill loses at most the line
being written:

``{"type": "session", ...}``
    the first line: id, project, start time, agent-code version.
``{"type": "message", "message": {...}, "usage"?: {...}}``
    one message appended to the history (the user's prompt, an assistant turn with the
    provider's token usage, the tool results).
``{"type": "rewind", "length": N}``
    the history was cut back to its first N messages (a prompt folded into the previous
    user message rewrites that message: rewind + message).
``{"type": "reset", "reason": ..., "messages": [...]}``
    the history was replaced as a whole: a compaction (``reason: "compaction"``, with its
    summary) or an interrupted turn rolled back.
``{"type": "todos", "todos": [...]}``
    the todo list changed.

Replaying these (:func:`replay`) gives back the history and the todos; a log is never
rewritten. Resuming (:func:`load_session`) validates the replayed history with
:func:`~agent_code.agent.compaction.check_tool_pairing` before it is used: a last assistant
turn whose tools never answered (the process died mid-tool) is dropped with a note; any
other problem is an error naming the file, never a request the API will reject.

The sessions directory carries its own ``.gitignore`` (``*``): transcripts are private
and must not show up in ``git status`` or in a rollout's graded diff.
"""

from __future__ import annotations

import json
import re
import secrets
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, TextIO

from agent_code.agent.compaction import check_tool_pairing, tool_use_ids

SESSIONS_DIR = Path(".agent") / "sessions"
_ID = re.compile(r"^[A-Za-z0-9][A-Za-z0-9_.-]{0,127}$")


class SessionError(Exception):
    """A session cannot be found, read or resumed; the message says why and what exists."""


def sessions_dir(root: Path) -> Path:
    return Path(root) / SESSIONS_DIR


def new_session_id() -> str:
    """Sortable by creation time (UTC timestamp first), unique by its random tail."""
    return time.strftime("%Y%m%d-%H%M%S", time.gmtime()) + "-" + secrets.token_hex(4)


@dataclass
class SessionInfo:
    id: str
    path: Path
    modified: float
    first_prompt: str = ""

    def line(self) -> str:
        when = time.strftime("%Y-%m-%d %H:%M", time.localtime(self.modified))
        prompt = self.first_prompt.replace("\n", " ")
        return f"{self.id}  {when}  {prompt[:60] + ('…' if len(prompt) > 60 else '')}"


def _first_prompt(path: Path) -> str:
    try:
        with path.open(encoding="utf-8") as f:
            for _, line in zip(range(50), f):
                record = json.loads(line)
                message = record.get("message") if record.get("type") == "message" else None
                if message and message.get("role") == "user":
                    for b in message.get("content") or []:
                        if isinstance(b, dict) and b.get("type") == "text":
                            return str(b.get("text", ""))
    except (OSError, ValueError):
        pass
    return ""


def list_sessions(root: Path) -> list[SessionInfo]:
    """The project's sessions, most recently used first."""
    directory = sessions_dir(root)
    if not directory.is_dir():
        return []
    infos = [SessionInfo(p.stem, p, p.stat().st_mtime) for p in directory.glob("*.jsonl") if p.is_file()]
    infos.sort(key=lambda s: (s.modified, s.id), reverse=True)
    for info in infos[:20]:
        info.first_prompt = _first_prompt(info.path)
    return infos


def _recent_listing(root: Path, limit: int = 5) -> str:
    recent = list_sessions(root)[:limit]
    if not recent:
        return f"there are no sessions in {sessions_dir(root)}"
    return "recent sessions:\n" + "\n".join("  " + s.line() for s in recent)


def find_session(root: Path, session_id: str) -> Path:
    """The log of ``session_id`` (a full id, or an unambiguous prefix of one)."""
    if not _ID.match(session_id):
        raise SessionError(f"'{session_id}' is not a session id; {_recent_listing(root)}")
    path = sessions_dir(root) / f"{session_id}.jsonl"
    if path.is_file():
        return path
    matches = [s for s in list_sessions(root) if s.id.startswith(session_id)]
    if len(matches) == 1:
        return matches[0].path
    if len(matches) > 1:
        raise SessionError(f"'{session_id}' matches {len(matches)} sessions; give more of the id. "
                           f"{_recent_listing(root)}")
    raise SessionError(f"no session '{session_id}' in {sessions_dir(root)}; {_recent_listing(root)}")


def latest_session(root: Path) -> Path:
    """The most recently used session of the project (``-c``)."""
    recent = list_sessions(root)
    if not recent:
        raise SessionError(f"no session to continue: there are none in {sessions_dir(root)}")
    return recent[0].path


@dataclass
class Replayed:
    """A session log read back."""

    id: str
    messages: list[dict[str, Any]] = field(default_factory=list)
    todos: list[dict[str, Any]] = field(default_factory=list)
    notes: list[str] = field(default_factory=list)   # what was repaired


def replay(path: Path) -> Replayed:
    """Apply the log's records in order. A torn last line (a crash while writing) is skipped."""
    out = Replayed(path.stem)
    try:
        lines = path.read_text(encoding="utf-8").splitlines()
    except OSError as exc:
        raise SessionError(f"cannot read session {path}: {exc.strerror or exc}") from None
    for lineno, line in enumerate(lines, 1):
        if not line.strip():
            continue
        try:
            record = json.loads(line)
        except json.JSONDecodeError:
            if lineno == len(lines):
                out.notes.append(f"line {lineno} was cut off (skipped)")
                continue
            raise SessionError(f"{path}:{lineno}: not JSON; the session log is damaged") from None
        kind = record.get("type") if isinstance(record, dict) else None
        if kind == "session":
            out.id = str(record.get("id") or out.id)
        elif kind == "message" and isinstance(record.get("message"), dict):
            out.messages.append(record["message"])
        elif kind == "rewind" and isinstance(record.get("length"), int):
            del out.messages[record["length"]:]
        elif kind == "reset" and isinstance(record.get("messages"), list):
            out.messages = list(record["messages"])
        elif kind == "todos" and isinstance(record.get("todos"), list):
            out.todos = record["todos"]
        else:
            raise SessionError(f"{path}:{lineno}: unknown record {str(line)[:80]!r}")
    return out


def repair_tail(messages: list[dict[str, Any]]) -> tuple[list[dict[str, Any]], list[str]]:
    """Drop a last assistant turn whose tool calls have no results (the process stopped
    while its tools ran). Pure; returns (messages, notes)."""
    last = messages[-1] if messages else None
    if last is not None and last.get("role") == "assistant" and tool_use_ids(last):
        # nothing follows the last message, so its tool calls cannot have results
        return messages[:-1], ["the last assistant turn's tool calls never finished; that turn was dropped"]
    return messages, []


def load_session(path: Path) -> Replayed:
    """Replay a session log and check the history before it is used again."""
    replayed = replay(path)
    replayed.messages, notes = repair_tail(replayed.messages)
    replayed.notes += notes
    problems = check_tool_pairing(replayed.messages)
    if problems:
        raise SessionError(f"session {replayed.id} ({path}) cannot be resumed: its history is invalid: "
                           + "; ".join(problems[:3]))
    return replayed


class SessionLog:
    """Appends a conversation's changes to its log file, flushing each line."""

    def __init__(self, path: Path, session_id: str, file: TextIO) -> None:
        self.path = path
        self.id = session_id
        self._file = file

    @classmethod
    def create(cls, root: Path, session_id: str | None = None, **meta: object) -> SessionLog:
        """A new session in the project at ``root``."""
        session_id = session_id or new_session_id()
        directory = _prepare_dir(root)
        path = directory / f"{session_id}.jsonl"
        log = cls(path, session_id, path.open("x", encoding="utf-8"))
        log._write({"type": "session", "id": session_id, "cwd": str(root), "started": time.time(), **meta})
        return log

    @classmethod
    def reopen(cls, path: Path, session_id: str) -> SessionLog:
        """Continue an existing log (``--resume``, ``-c``): new records go at its end."""
        text = path.read_bytes()
        file = path.open("a", encoding="utf-8")
        if text and not text.endswith(b"\n"):
            file.write("\n")  # a torn last line stays a line of its own
        return cls(path, session_id, file)

    def _write(self, record: dict[str, Any]) -> None:
        self._file.write(json.dumps(record, ensure_ascii=False, default=str) + "\n")
        self._file.flush()

    def message(self, message: dict[str, Any], usage: dict[str, int] | None = None) -> None:
        record: dict[str, Any] = {"type": "message", "message": message}
        if usage:
            record["usage"] = usage
        self._write(record)

    def rewind(self, length: int) -> None:
        self._write({"type": "rewind", "length": length})

    def reset(self, messages: list[dict[str, Any]], reason: str, **info: object) -> None:
        self._write({"type": "reset", "reason": reason, "messages": messages, **info})

    def todos(self, todos: list[dict[str, Any]]) -> None:
        self._write({"type": "todos", "todos": todos})

    def close(self) -> None:
        self._file.close()


def _prepare_dir(root: Path) -> Path:
    directory = sessions_dir(root)
    directory.mkdir(parents=True, exist_ok=True)
    ignore = directory / ".gitignore"
    if not ignore.exists():
        try:
            ignore.write_text("# agent-code session transcripts: private, never committed\n*\n")
        except OSError:
            pass
    return directory
