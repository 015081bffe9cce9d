"""Which session an OpenAI-protocol request belongs to.

In order: the API key (``Authorization: Bearer ID`` or ``x-api-key``); else the body's
``metadata.session_id``; else its ``user``. A client that sends none of these (some agent CLIs
send no key at all) is grouped by its history: the gateway remembers, for every turn it recorded
in such an identity-less session, the canonical conversation that turn ended with (prompt
messages + the reply, under the same tools — the same key :mod:`agent_code.trajectory.history`
uses to reuse held tokens). A request whose messages extend one of those conversations joins that
session; otherwise a new session ``anon-<hex>`` is opened. So one CLI conversation stays one
session, and its turns chain token-exactly.

Limits, by construction: the first request of a conversation always opens a new session (there
is nothing to match yet, and identical first prompts from different rollouts must not merge); two
identity-less conversations with identical histories cannot be told apart (the later request
joins the session that generated the matched turn); and a session that has been finished or
dropped is not joined again. Rollouts should therefore pass a key; this is for clients that
cannot. The session id is returned in the ``x-agent-code-session`` response header.

A gateway that serves only explicitly opened sessions (``SessionStore.open_on_first_use`` False,
every rollout gateway) names the session by the API key alone: no body identity, no grouping by
history, and a request without a key is refused (401) — so nothing a request's body says can
reach another rollout's session.
"""

from __future__ import annotations

import secrets
from typing import Callable, Mapping

from agent_code.gateway.auth import ADMIN_HEADER, is_admin
from agent_code.gateway.http import credential_in
from agent_code.gateway.sessions import Session, SessionError, SessionStore
from agent_code.protocols.canonical import ChatRequest
from agent_code.trajectory.history import conversation_key, prefix_keys
from agent_code.trajectory.records import TurnRecord

ANONYMOUS_PREFIX = "anon-"


NO_SESSION = "no-session"   # the budget every key naming no live session shares (explicit sessions)


def budget_key(store: SessionStore, admin_token: str | None) -> Callable[[Mapping[str, str]], str | None]:
    """Which per-session request budget a request counts against, from its headers
    (:class:`agent_code.gateway.connections.SessionRequestCap`): ``session:<its key>`` (``default``
    without one); on a gateway of explicit sessions, :data:`NO_SESSION` for a key that names no
    live session; None (not counted) for the admin token's requests."""
    def key(headers: Mapping[str, str]) -> str | None:
        credential = credential_in(headers)
        if is_admin(credential, headers.get(ADMIN_HEADER), admin_token):
            return None
        session_id = credential or "default"
        if store.open_on_first_use or session_id in store.sessions:
            return f"session:{session_id}"
        return NO_SESSION
    return key


def require_session_key(store: SessionStore, credential: str | None) -> None:
    """On a gateway of explicit sessions, refuse a request whose key names no live session
    (401; 409 for an ended one). Used by the routes that read no session (``/v1/models``,
    ``count_tokens``), so an unknown key learns nothing there either. Open otherwise."""
    if store.open_on_first_use:
        return
    if not credential:
        raise SessionError(401, "authentication_error",
                           "missing API key: this gateway serves only the sessions its orchestrator opened; "
                           "send the session id as the API key")
    if credential not in store.sessions:
        store.get_or_open(credential)   # raises: 409 for an ended session, 401 for an unknown key


def session_for_key(store: SessionStore, credential: str | None) -> Session:
    """The session an Anthropic request names: its key (``default`` without one, in ``auto``
    mode only; an explicit gateway requires the key)."""
    require_session_key(store, credential)
    return store.get_or_open(credential or "default")


class SessionResolver:
    def __init__(self, store: SessionStore) -> None:
        self.store = store
        self._by_conversation: dict[bytes, str] = {}   # conversation key → identity-less session id
        self._anonymous: set[str] = set()

    def resolve(self, credential: str | None, body_identity: str | None, request: ChatRequest) -> Session:
        if not self.store.open_on_first_use:
            if not credential:
                raise SessionError(401, "authentication_error",
                                   "missing API key: this gateway serves only the sessions its orchestrator "
                                   "opened; send the session id as the API key")
            return self.store.get_or_open(credential)
        sid = credential or body_identity
        if sid:
            return self.store.get_or_open(sid)
        found = self._extended(request)
        if found is not None:
            return found
        sid = self._mint()
        self._anonymous.add(sid)
        return self.store.open(sid)

    def remember(self, session: Session, record: TurnRecord) -> None:
        """Called after a turn is recorded: index it if its session is identity-less."""
        if session.id in self._anonymous:
            self._by_conversation[conversation_key(record)] = session.id

    def _extended(self, request: ChatRequest) -> Session | None:
        messages = request.messages
        keys = prefix_keys(messages, request.tools)
        for j in range(len(messages), 0, -1):  # longest held conversation first
            if messages[j - 1].get("role") != "assistant":
                continue
            sid = self._by_conversation.get(keys[j - 1])
            if sid is None:
                continue
            session = self.store.sessions.get(sid)
            if session is None:  # dropped: forget its turns
                self._by_conversation = {k: v for k, v in self._by_conversation.items() if v != sid}
                self._anonymous.discard(sid)
            elif not session.closed:
                return session
        return None

    def _mint(self) -> str:
        while True:
            sid = ANONYMOUS_PREFIX + secrets.token_hex(8)
            if sid not in self.store.sessions:
                return sid
