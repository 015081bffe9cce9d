"""Gateway sessions: one per rollout (or per API key), with its limits and its turns.

A session is opened explicitly (``POST /v1/sessions``) or on first use. The session id
is what the client sends as its API key. Limits: a turn cap (the next request gets
429), a cap on requests generating at once in one session (429), a cap on each turn's new
tokens (``max_new_tokens``: a request asking for more gets that many) and a context budget that
clamps ``max_new_tokens`` to what is left of it (a reply that hits either stops with ``max_tokens``,
its turn record's finish reason ``length``). A closed session
refuses further turns (503). The store caps how many sessions are open at once
(``max_sessions``: opening one more, explicitly or on first use, is 429); a finished or
deleted session frees its slot.

Ownership (see :mod:`agent_code.gateway.auth` for the management routes):

* ``open_on_first_use`` (``serve --sessions auto``, the default for a developer's gateway): a
  model request with an unknown key opens that session. ``False`` (``--sessions explicit``,
  every rollout gateway): only sessions opened with ``POST /v1/sessions`` are served; an
  unknown key is refused (401), never opened.
* A finished or deleted session id is *ended* for good: it is never opened again, neither on
  first use nor explicitly (409). The store keeps the ended ids only (no turns), and a gateway
  with a trajectory dir persists them (``DIR/ended.jsonl``) and reloads them on start, so a
  restart does not forget them.
"""

from __future__ import annotations

import asyncio
import threading
import time
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, Callable, ParamSpec, TypeVar

from agent_code.trajectory.history import SessionHistory
from agent_code.trajectory.records import TurnRecord

if TYPE_CHECKING:
    from agent_code.gateway.body_memo import BodyMemo
    from agent_code.protocols.anthropic import TranslationMemo

T = TypeVar("T")
P = ParamSpec("P")


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
    max_new_tokens: int | None = None   # the most tokens one turn may sample, whatever the request asks
    turns: list[TurnRecord] = field(default_factory=list)
    history: SessionHistory = field(default_factory=SessionHistory, repr=False)
    closed: bool = False
    created_at: float = field(default_factory=time.time)
    in_flight: int = 0
    max_in_flight: int | None = None   # requests generating at once (None: no cap)
    last_body_bytes: int | None = None  # the size of its previous request's body (gateway/turn_flow.py)
    translation_memo: TranslationMemo | None = None   # its previous request, translated
    body_memo: BodyMemo | None = None   # its previous request's body, parsed (gateway/body_memo.py)
    lock: asyncio.Lock = field(default_factory=asyncio.Lock, repr=False)   # the order of its requests
    guard: threading.RLock = field(default_factory=threading.RLock, repr=False)  # one worker thread at a time

    def guarded(self, fn: Callable[P, T]) -> Callable[P, T]:
        """``fn`` run holding this session's guard: what changes the session's turns and history
        (prepare, commit, finish) runs in worker threads one at a time (gateway/offload.py)."""
        def call(*args: P.args, **kwargs: P.kwargs) -> T:
            with self.guard:
                return fn(*args, **kwargs)
        return call

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
                "max_new_tokens": self.max_new_tokens, "sampling": self.sampling, "created_at": self.created_at}


class SessionStore:
    def __init__(self, default_max_turns: int | None = None, default_max_context: int | None = None, *,
                 max_sessions: int | None = None, max_in_flight: int | None = None,
                 open_on_first_use: bool = True) -> None:
        self.sessions: dict[str, Session] = {}
        self.open_on_first_use = open_on_first_use
        self.ended: set[str] = set()            # finished or deleted ids: never reopened (ids only)
        # called with (session id, "finished" | "deleted") when a session ends (persists the tombstone)
        self.on_end: Callable[[str, str], None] | None = None
        self.default_max_turns = default_max_turns
        self.default_max_context = default_max_context
        self.max_sessions = max_sessions        # sessions open at once (None: no cap)
        self.max_in_flight = max_in_flight      # per session (None: no cap)
        self._open = 0                          # sessions in ``sessions`` not yet closed

    @property
    def open_count(self) -> int:
        """Sessions open now: the ones that count against ``max_sessions``."""
        return self._open

    def _refuse_ended(self, session_id: str) -> None:
        if session_id in self.ended:
            raise SessionError(409, "invalid_request_error",
                               f"session '{session_id}' was finished or deleted and cannot be reopened")

    def open(self, session_id: str, *, sampling: dict[str, Any] | None = None,
             max_context_tokens: int | None = None, max_turns: int | None = None,
             max_new_tokens: int | None = None) -> Session:
        self._refuse_ended(session_id)
        if session_id in self.sessions:
            raise SessionError(409, "invalid_request_error", f"session '{session_id}' already exists")
        if self.max_sessions is not None and self._open >= self.max_sessions:
            raise SessionError(429, "rate_limit_error",
                               f"the gateway already has {self._open} open sessions, its limit; finish or "
                               f"delete one before opening session '{session_id}'")
        session = Session(session_id, sampling=dict(sampling or {}),
                          max_context_tokens=max_context_tokens or self.default_max_context,
                          max_turns=max_turns or self.default_max_turns, max_new_tokens=max_new_tokens,
                          max_in_flight=self.max_in_flight)
        self.sessions[session_id] = session
        self._open += 1
        return session

    def get_or_open(self, session_id: str) -> Session:
        """The session a model request's key names: opened on first use only in ``auto`` mode."""
        session = self.sessions.get(session_id)
        if session is not None:
            return session
        self._refuse_ended(session_id)
        if not self.open_on_first_use:
            raise SessionError(401, "authentication_error",
                               "invalid API key: this gateway serves only the sessions its orchestrator opened "
                               "(the key must be a session id opened with POST /v1/sessions)")
        return self.open(session_id)

    def _ended(self, session_id: str, how: str) -> None:
        self.ended.add(session_id)
        if self.on_end is not None:
            self.on_end(session_id, how)

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
        self._ended(session_id, "finished")
        return session

    def drop(self, session_id: str) -> Session:
        """Forget a session and its turns (a rollout that is thrown away)."""
        session = self.get(session_id)
        if not session.closed:
            session.closed = True
            self._open -= 1
        del self.sessions[session_id]
        if session_id not in self.ended:
            self._ended(session_id, "deleted")
        return session
