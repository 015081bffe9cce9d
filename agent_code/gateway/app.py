"""The ASGI app: routes and health. Thin on purpose: everything with logic lives in the
pipeline (the turn), the shared HTTP turn flow, one route module per wire protocol (Anthropic
Messages, OpenAI Chat Completions, OpenAI Responses) and the session management routes
(:mod:`.routes_sessions`). Who may use those is decided in :mod:`agent_code.gateway.auth`
(``admin_token``); what a web page in a developer's browser cannot send (another ``Host``, another
``Origin``, a body that is not JSON) in :mod:`agent_code.gateway.request_guard`, around the whole
app; how many requests one session may have open at once in :mod:`agent_code.gateway.connections`
(``max_session_requests``)."""

from __future__ import annotations

import time
from typing import Iterable

from starlette.applications import Starlette
from starlette.exceptions import HTTPException
from starlette.requests import Request
from starlette.responses import Response
from starlette.routing import Route
from starlette.types import ASGIApp

from agent_code import __version__
from agent_code.gateway.auth import ManagementGuard
from agent_code.gateway.http import DEFAULT_MAX_BODY_BYTES, HttpError, as_http_error, credential_from, json_response
from agent_code.gateway.connections import DEFAULT_SESSION_REQUESTS, SessionRequestCap
from agent_code.gateway.identity import SessionResolver, budget_key, require_session_key
from agent_code.gateway.sessions import SessionError
from agent_code.gateway.pipeline import Gateway
from agent_code.gateway.routes_admin import AdminRoutes
from agent_code.gateway.routes_anthropic import AnthropicRoutes, error_response
from agent_code.gateway.routes_openai_chat import ChatCompletionsRoutes, openai_error_response
from agent_code.gateway.routes_openai_responses import ResponsesRoutes
from agent_code.gateway.request_guard import RequestGuard
from agent_code.gateway.routes_sessions import SessionRoutes
from agent_code.gateway.turn_flow import TurnFlow
from agent_code.gateway.wire_errors import error_for_path


def create_app(gateway: Gateway, *, max_body_bytes: int = DEFAULT_MAX_BODY_BYTES,
               ping_interval_s: float = 5.0, admin_token: str | None = None,
               allowed_hosts: Iterable[str] = (),
               max_session_requests: int = DEFAULT_SESSION_REQUESTS) -> ASGIApp:
    """The gateway's app. ``admin_token``: the token the session management routes require
    (None: they are open to requests without a key; see :mod:`agent_code.gateway.auth`). A
    gateway of explicit sessions (``gateway.store.open_on_first_use`` False) must have one:
    otherwise an agent could finish its own session with a reward of its choosing.
    ``allowed_hosts``: host names served besides ``localhost`` and IP literals
    (:mod:`agent_code.gateway.request_guard`; ValueError for one that is not a bare name).
    ``max_session_requests``: requests one session may have open at once
    (:class:`agent_code.gateway.connections.SessionRequestCap`)."""
    if not gateway.store.open_on_first_use and not admin_token:
        raise ValueError("a gateway of explicit sessions needs an admin token: without one its session routes "
                         "(open, finish with a reward, delete) would be open to every agent")
    guard = ManagementGuard(admin_token or None)
    flow = TurnFlow(gateway, ping_interval_s=ping_interval_s)
    resolver = SessionResolver(gateway.store)
    anthropic = AnthropicRoutes(gateway, flow, max_body_bytes=max_body_bytes)
    chat = ChatCompletionsRoutes(gateway, flow, resolver, max_body_bytes=max_body_bytes)
    responses = ResponsesRoutes(gateway, flow, resolver, max_body_bytes=max_body_bytes)
    sessions = SessionRoutes(gateway, guard, max_body_bytes=max_body_bytes)
    admin = AdminRoutes(gateway, guard)
    started = time.time()

    async def healthz(request: Request) -> Response:
        return json_response({"status": "ok", "version": __version__, "engine": gateway.engine.name,
                             "model": gateway.model_name, "sessions": len(gateway.store.sessions),
                             "uptime_s": round(time.time() - started, 3)})

    async def models(request: Request) -> Response:
        openai = request.url.path == "/models" or "authorization" in request.headers
        try:   # a gateway of explicit sessions answers only a live session's key
            require_session_key(gateway.store, credential_from(request))
        except SessionError as exc:
            err = as_http_error(exc)
            return openai_error_response(err) if openai else error_response(err)
        # one entry readable as an Anthropic and as an OpenAI model object
        entry = {"type": "model", "id": gateway.model_name, "display_name": gateway.model_name,
                 "created_at": "2026-01-01T00:00:00Z", "object": "model", "created": 1767225600,
                 "owned_by": "agent-code"}
        return json_response({"object": "list", "data": [entry], "has_more": False, "first_id": entry["id"],
                             "last_id": entry["id"]})

    async def http_error(request: Request, exc: Exception) -> Response:
        status = getattr(exc, "status_code", 500)
        kind = {404: "not_found_error", 405: "invalid_request_error"}.get(status, "api_error")
        err = HttpError(status, kind, f"{request.method} {request.url.path}: {getattr(exc, 'detail', 'error')}")
        return error_for_path(request.url.path, err)

    routes = [
        Route("/v1/messages", anthropic.messages, methods=["POST"]),
        Route("/v1/messages/count_tokens", anthropic.count_tokens, methods=["POST"]),
        Route("/v1/chat/completions", chat.completions, methods=["POST"]),
        Route("/chat/completions", chat.completions, methods=["POST"]),
        Route("/v1/responses", responses.responses, methods=["POST"]),
        Route("/responses", responses.responses, methods=["POST"]),
        Route("/v1/models", models, methods=["GET"]),
        Route("/models", models, methods=["GET"]),
        Route("/healthz", healthz, methods=["GET"]),
        Route("/v1/sessions", sessions.open, methods=["POST"]),
        Route("/v1/sessions/{rest:path}", sessions.one, methods=["GET", "POST", "DELETE"]),
        Route("/v1/admin/pause", admin.pause, methods=["POST"]),
        Route("/v1/admin/resume", admin.resume, methods=["POST"]),
        Route("/v1/admin/weights", admin.weights, methods=["GET"]),
        Route("/v1/engines", admin.engines, methods=["GET"]),
    ]
    app = Starlette(routes=routes, exception_handlers={HTTPException: http_error, 500: http_error})
    capped = SessionRequestCap(app, max_session_requests, budget_key(gateway.store, admin_token or None))
    return RequestGuard(capped, allowed_hosts)
