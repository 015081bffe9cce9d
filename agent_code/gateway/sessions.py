"""Gateway sessions: one per rollout (or per API key), with its limits and its turns.

A session is opened explicitly (``POST /v1/sessions``) or on first use. The session id
is what the client sends as its API key. Limits: a turn cap (the next request gets
429), a cap on requests generating at once in one session (429), and a context budget that
clamps ``max_new_tokens`` (a reply that hits it stops with ``max_tokens``). A closed session
refuses further turns (503). The store caps how many sessions are open at once
(``max_sessions``: opening one more, explicitly or on first use, is 429); a finished or
deleted session frees its slot.
"""

from __future__ import annotations

import asyncio
import time
from dataclasses import dataclass, field
from typing import Any

from agent_code.trajectory.history import SessionHistory
from agent_code.trajectory.records import TurnRecord


class SessionError(Exception):
    def __init__(self, status: int, kind: str, message: str) -> None:
        super().__init__(message)
        self.status, self.kind = status, kind


@dataclass
class Session:
    id: str
    sampling: dict[str, Any] = field(default_factory=dict)   # defaults merged into each request
    max_context_tokens: int | None = None
    max_turns: int | None = None
    turns: list[TurnRecord] = field(default_factory=list)
    history: SessionHistory = field(default_factory=SessionHistory, repr=False)
    closed: bool = False
    created_at: float = field(default_factory=time.time)
    in_flight: int = 0
    max_in_flight: int | None = None   # requests generating at once (None: no cap)
    lock: asyncio.Lock = field(default_factory=asyncio.Lock, repr=False)

    def check_open(self) -> None:
        if self.closed:
            raise SessionError(503, "api_error", f"session '{self.id}' is closed")
        if self.max_turns is not None and len(self.turns) + self.in_flight >= self.max_turns:
            raise SessionError(429, "rate_limit_error",
                               f"session '{self.id}' reached its turn limit ({self.max_turns})")
        if self.max_in_flight is not None and self.in_flight >= self.max_in_flight:
            raise SessionError(429, "rate_limit_error",
                               f"session '{self.id}' already has {self.in_flight} request(s) generating, its "
                               f"limit; wait for a reply before sending the next request")

    def summary(self) -> dict[str, Any]:
        return {"session_id": self.id, "turns": len(self.turns), "closed": self.closed,
                "max_context_tokens": self.max_context_tokens, "max_turns": self.max_turns,
                "sampling": self.sampling, "created_at": self.created_at}


class SessionStore:
    def __init__(self, default_max_turns: int | None = None, default_max_context: int | None = None, *,
                 max_sessions: int | None = None, max_in_flight: int | None = None) -> None:
        self.sessions: dict[str, Session] = {}
        self.default_max_turns = default_max_turns
        self.default_max_context = default_max_context
        self.max_sessions = max_sessions        # sessions open at once (None: no cap)
        self.max_in_flight = max_in_flight      # per session (None: no cap)
        self._open = 0                          # sessions in ``sessions`` not yet closed

    @property
    def open_count(self) -> int:
        """Sessions open now: the ones that count against ``max_sessions``."""
        return self._open

    def open(self, session_id: str, *, sampling: dict[str, Any] | None = None,
             max_context_tokens: int | None = None, max_turns: int | None = None) -> Session:
        if session_id in self.sessions:
            raise SessionError(409, "invalid_request_error", f"session '{session_id}' already exists")
        if self.max_sessions is not None and self._open >= self.max_sessions:
            raise SessionError(429, "rate_limit_error",
                               f"the gateway already has {self._open} open sessions, its limit; finish or "
                               f"delete one before opening session '{session_id}'")
        session = Session(session_id, sampling=dict(sampling or {}),
                          max_context_tokens=max_context_tokens or self.default_max_context,
                          max_turns=max_turns or self.default_max_turns, max_in_flight=self.max_in_flight)
        self.sessions[session_id] = session
        self._open += 1
        return session

    def get_or_open(self, session_id: str) -> Session:
        return self.sessions.get(session_id) or self.open(session_id)

    def get(self, session_id: str) -> Session:
        try:
            return self.sessions[session_id]
        except KeyError:
            raise SessionError(404, "not_found_error", f"no session '{session_id}'") from None

    def unfinished(self, session_id: str) -> Session:
        """The session, if it is not finished yet (409 if it is)."""
        session = self.get(session_id)
        if session.closed:
            raise SessionError(409, "invalid_request_error", f"session '{session_id}' is already finished")
        return session

    def close(self, session_id: str) -> Session:
        session = self.unfinished(session_id)
        session.closed = True
        self._open -= 1
        return session

    def drop(self, session_id: str) -> Session:
        """Forget a session and its turns (a rollout that is thrown away)."""
        session = self.get(session_id)
        if not session.closed:
            session.closed = True
            self._open -= 1
        del self.sessions[session_id]
        return session
