"""Who may manage gateway sessions: the admin token, and a session's own key.

The model routes (``/v1/messages``, ``/v1/chat/completions``, ``/v1/responses``) stay open: the
API key names the session, and an agent must be able to call them. The session management routes
(``POST /v1/sessions``, ``GET``/``DELETE /v1/sessions/ID``, ``/turns``, ``/finish``) are what the
rollout orchestrator uses, and finishing a session sets its reward — an agent that could call
them could grade itself, or read other rollouts' turns. So:

* **With an admin token** (``--admin-token``, ``AGENT_CODE_ADMIN_TOKEN``; ``agent-code serve``
  insists on one when bound to a non-loopback host) the admin — a request carrying the token as
  ``x-agent-code-admin: TOKEN`` or ``Authorization: Bearer TOKEN`` — may do everything. A
  session's own key (its id, as ``Authorization: Bearer ID`` or ``x-api-key: ID``) may *read*
  that one session (``GET /v1/sessions/ID`` and ``/turns``) and nothing else: opening,
  finishing and deleting are the admin's. No credential → 401; a wrong one → 403.
* **Without one** (loopback only, and only for a gateway of ``auto`` sessions — a developer's
  ``agent-code serve``/``--local``) management is open to a request that carries no key, but a
  session key is treated exactly as with a token: it may read its own session and nothing else
  (key ``A`` on ``/v1/sessions/B`` → 403; key ``A`` finishing, deleting or opening ``A`` → 403).

A gateway of **explicit** sessions (``serve --sessions explicit``; every rollout gateway: the
in-process one of ``agent-code rollout``, Ray node gateways) cannot run without an admin token
(``create_app`` and ``serve`` refuse): there, an agent could otherwise drop its key and finish
its own session with any reward. Keyless management is therefore only ever open on a loopback
developer gateway, where sessions are opened on first use anyway and no reward is at stake;
``agent-code rollout --gateway URL`` refuses to run without ``--admin-token`` for the same
reason, and checks that the gateway does require it.

Decisions are pure functions (:func:`decide`, :func:`bind_problem`); :class:`ManagementGuard`
applies them to a request and raises an :class:`HttpError` the routes turn into their error
format.
"""

from __future__ import annotations

import hmac
import ipaddress
from dataclasses import dataclass
from typing import Literal

from starlette.requests import Request

from agent_code.gateway.http import HttpError, credential_from

ADMIN_HEADER = "x-agent-code-admin"
ADMIN_ENV = "AGENT_CODE_ADMIN_TOKEN"
Action = Literal["open", "read", "finish", "delete", "weights"]   # weights: pause, resume, versions, engines
_HOW = f"send it as '{ADMIN_HEADER}: TOKEN' or 'Authorization: Bearer TOKEN'"


def is_loopback(host: str) -> bool:
    """Whether binding ``host`` keeps the server on this machine. ``localhost`` and loopback
    addresses are; wildcards (``0.0.0.0``, ``::``), other addresses and names are not (a name
    could resolve anywhere)."""
    host = host.strip().removeprefix("[").removesuffix("]")
    if host.lower() == "localhost":
        return True
    try:
        return ipaddress.ip_address(host).is_loopback
    except ValueError:
        return False


def bind_problem(host: str, admin_token: str | None) -> str | None:
    """Why serving on ``host`` with this token is refused, or None when it is fine."""
    if admin_token or is_loopback(host):
        return None
    return (f"refusing to listen on {host!r} (not a loopback address) without an admin token: the session "
            f"routes (open, read, finish with a reward, delete) would be open to the network. Pass "
            f"--admin-token TOKEN or set {ADMIN_ENV} (the rollout side sends it with --admin-token), "
            f"or bind 127.0.0.1")


def _same(given: str | None, expected: str) -> bool:
    return given is not None and hmac.compare_digest(given.encode("utf-8", "surrogatepass"),
                                                     expected.encode("utf-8", "surrogatepass"))


def is_admin(credential: str | None, admin_header: str | None, admin_token: str | None) -> bool:
    """Whether a request carrying ``credential`` (its API key) and ``admin_header`` holds the
    gateway's ``admin_token`` (False when there is none)."""
    return bool(admin_token) and (_same(admin_header, admin_token or "") or _same(credential, admin_token or ""))


def decide(action: Action, session_id: str | None, *, credential: str | None, admin_header: str | None,
           admin_token: str | None) -> HttpError | None:
    """The refusal of ``action`` on ``session_id`` (None: not known yet, e.g. before an open
    request's body is read), or None when it is allowed.

    ``credential`` is the request's API key (Bearer or x-api-key), ``admin_header`` its
    ``x-agent-code-admin`` header, ``admin_token`` the gateway's (None: none configured)."""
    if admin_token:
        if is_admin(credential, admin_header, admin_token):
            return None
        if admin_header is not None:
            return HttpError(403, "permission_error", f"the {ADMIN_HEADER} header does not hold this gateway's "
                                                      "admin token")
        if credential is None:
            return HttpError(401, "authentication_error",
                             f"managing sessions needs this gateway's admin token ({_HOW})")
        if action == "read" and session_id is not None and _same(credential, session_id):
            return None  # a session may read its own turns
        return HttpError(403, "permission_error", _refusal(action, session_id, own=session_id == credential))
    if credential is None:
        return None  # open management (loopback, auto sessions, no token): the developer's gateway
    if action == "read" and session_id is not None and _same(credential, session_id):
        return None  # a key reads its own session, and does nothing else, token or not
    own = session_id is not None and session_id == credential
    return HttpError(403, "permission_error", _refusal(action, session_id, own=own))


def _refusal(action: Action, session_id: str | None, *, own: bool) -> str:
    if action == "weights":
        return f"the weight and engine routes need the admin token ({_HOW})"
    what = f"session '{session_id}'" if session_id is not None else "a session"
    if own:
        return (f"a session's key may only read its own session; to {action} {what} use the "
                f"admin token ({_HOW})")
    return (f"this key may not {action} {what}: a session's key reaches only its own session "
            f"(the orchestrator uses the admin token)")


@dataclass(frozen=True)
class ManagementGuard:
    """The gateway's admin token (None: open management), applied to requests."""

    admin_token: str | None = None

    def require(self, request: Request, action: Action, session_id: str | None = None) -> None:
        """Raise the :class:`HttpError` refusing ``action``, if it is refused."""
        denied = decide(action, session_id, credential=credential_from(request),
                        admin_header=request.headers.get(ADMIN_HEADER), admin_token=self.admin_token)
        if denied is not None:
            raise denied
