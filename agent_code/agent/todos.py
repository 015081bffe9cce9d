"""The agent's todo list: what ``todo_write`` keeps, checks and shows.

The model owns the list: each ``todo_write`` call sends the *whole* list (content and a
status per item), which replaces the previous one. That keeps the tool idempotent and the
state trivially consistent — there is no item id to get wrong, no partial update to merge.
The list lives on the :class:`~agent_code.agent.loop.Agent` (``agent.todos``), goes out in a
``todos`` event each time it changes, and is written to the session log so a resumed
session keeps it.

Everything here is pure: :func:`parse_todos` validates what the model sent (clear errors
it can act on), :func:`render_todos` is the text the model (and a terminal) sees.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass
from typing import Any, Literal, get_args

TodoStatus = Literal["pending", "in_progress", "completed"]
STATUSES: tuple[str, ...] = get_args(TodoStatus)
MAX_TODOS = 50
MAX_CONTENT_CHARS = 500
_MARK = {"pending": "[ ]", "in_progress": "[>]", "completed": "[x]"}


@dataclass(frozen=True)
class Todo:
    content: str
    status: TodoStatus = "pending"

    def to_dict(self) -> dict[str, str]:
        return asdict(self)


class TodoError(ValueError):
    """The list the model sent is malformed; the message says what to fix."""


def parse_todos(items: object) -> list[Todo]:
    """Check a list of ``{"content", "status"}`` objects and turn it into :class:`Todo` s."""
    if not isinstance(items, list):
        raise TodoError(f"todos must be a list, got {type(items).__name__}")
    if len(items) > MAX_TODOS:
        raise TodoError(f"at most {MAX_TODOS} todos, got {len(items)}: merge small steps")
    todos: list[Todo] = []
    for i, item in enumerate(items):
        where = f"todos[{i}]"
        if not isinstance(item, dict):
            raise TodoError(f"{where} must be an object with 'content' and 'status'")
        unknown = set(item) - {"content", "status", "id", "activeForm", "priority"}
        if unknown:
            raise TodoError(f"{where} has unknown field(s) {sorted(unknown)} (use content and status)")
        content = item.get("content")
        if not isinstance(content, str) or not content.strip():
            raise TodoError(f"{where}.content must be a non-empty string")
        if len(content) > MAX_CONTENT_CHARS:
            raise TodoError(f"{where}.content is over {MAX_CONTENT_CHARS} characters: keep items short")
        status = item.get("status", "pending")
        if status not in STATUSES:
            raise TodoError(f"{where}.status must be one of {', '.join(STATUSES)}, got {status!r}")
        todos.append(Todo(content.strip(), status))
    return todos


def render_todos(todos: list[Todo]) -> str:
    """One line per item, ``[ ]`` pending, ``[>]`` in progress, ``[x]`` completed, and a count."""
    if not todos:
        return "(no todos)"
    done = sum(t.status == "completed" for t in todos)
    lines = [f"{_MARK[t.status]} {t.content}" for t in todos]
    return "\n".join(lines) + f"\n({done}/{len(todos)} completed)"


def todos_from_dicts(items: list[dict[str, Any]]) -> list[Todo]:
    """Todos back from their stored form (a session log); bad entries are skipped."""
    try:
        return parse_todos(items)
    except TodoError:
        return []
