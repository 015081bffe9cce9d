"""The ASGI app: routes, session management, health. Thin on purpose: everything with
logic lives in the pipeline (the turn), the shared HTTP turn flow, and one route module per
wire protocol (Anthropic Messages, OpenAI Chat Completions, OpenAI Responses). Who may use the
session management routes is decided in :mod:`agent_code.gateway.auth` (``admin_token``)."""

from __future__ import annotations

import time
from typing import Any

from starlette.applications import Starlette
from starlette.exceptions import HTTPException
from starlette.requests import Request
from starlette.responses import JSONResponse, Response
from starlette.routing import Route

from agent_code import __version__
from agent_code.gateway.auth import ManagementGuard
from agent_code.gateway.http import DEFAULT_MAX_BODY_BYTES, HttpError, as_http_error, read_json
from agent_code.gateway.identity import SessionResolver
from agent_code.gateway.pipeline import Gateway
from agent_code.gateway.routes_anthropic import AnthropicRoutes, error_response
from agent_code.gateway.routes_openai_chat import ChatCompletionsRoutes, openai_error_response
from agent_code.gateway.routes_openai_responses import ResponsesRoutes
from agent_code.gateway.turn_flow import TurnFlow
from agent_code.trajectory.samples import SAMPLE_STATUSES

OPENAI_PATHS = ("/v1/chat/", "/chat/", "/v1/responses", "/responses")
SESSION_FIELDS = {"session_id": str, "sampling": dict, "max_context_tokens": int, "max_turns": int}
# a session's sampling defaults, checked when the session opens (not at its first turn)
SAMPLING_FIELDS: dict[str, Any] = {"temperature": (int, float), "top_p": (int, float), "top_k": int, "seed": int,
                                   "max_new_tokens": int}


def check_sampling(sampling: dict[str, Any]) -> None:
    for key, value in sampling.items():
        kind = SAMPLING_FIELDS.get(key)
        if kind is not None and value is not None and (isinstance(value, bool) or not isinstance(value, kind)):
            raise HttpError(400, "invalid_request_error",
                            f"'sampling.{key}' must be " + ("an integer" if kind is int else "a number"))


def create_app(gateway: Gateway, *, max_body_bytes: int = DEFAULT_MAX_BODY_BYTES,
               ping_interval_s: float = 5.0, admin_token: str | None = None) -> Starlette:
    """The gateway's app. ``admin_token``: the token the session management routes require
    (None: they are open to requests without a key; see :mod:`agent_code.gateway.auth`)."""
    guard = ManagementGuard(admin_token or None)
    flow = TurnFlow(gateway, ping_interval_s=ping_interval_s)
    resolver = SessionResolver(gateway.store)
    anthropic = AnthropicRoutes(gateway, flow, max_body_bytes=max_body_bytes)
    chat = ChatCompletionsRoutes(gateway, flow, resolver, max_body_bytes=max_body_bytes)
    responses = ResponsesRoutes(gateway, flow, resolver, max_body_bytes=max_body_bytes)
    started = time.time()

    async def healthz(request: Request) -> Response:
        return JSONResponse({"status": "ok", "version": __version__, "engine": gateway.engine.name,
                             "model": gateway.model_name, "sessions": len(gateway.store.sessions),
                             "uptime_s": round(time.time() - started, 3)})

    async def models(request: Request) -> Response:
        # one entry readable as an Anthropic and as an OpenAI model object
        entry = {"type": "model", "id": gateway.model_name, "display_name": gateway.model_name,
                 "created_at": "2026-01-01T00:00:00Z", "object": "model", "created": 1767225600,
                 "owned_by": "agent-code"}
        return JSONResponse({"object": "list", "data": [entry], "has_more": False, "first_id": entry["id"],
                             "last_id": entry["id"]})

    async def open_session(request: Request) -> Response:
        try:
            guard.require(request, "open")
            body = await read_json(request, max_body_bytes)
            if not isinstance(body, dict):
                raise HttpError(400, "invalid_request_error", "expected a JSON object")
            for key, value in body.items():
                kind = SESSION_FIELDS.get(key)
                if kind is None:
                    raise HttpError(400, "invalid_request_error",
                                    f"unknown field '{key}' (allowed: {', '.join(SESSION_FIELDS)})")
                if not isinstance(value, kind) or isinstance(value, bool) or (kind is int and value < 1):
                    raise HttpError(400, "invalid_request_error", f"'{key}' must be a {kind.__name__}"
                                    + (" of at least 1" if kind is int else ""))
            check_sampling(body.get("sampling") or {})
            if not body.get("session_id"):
                raise HttpError(400, "invalid_request_error", "'session_id' is required")
            guard.require(request, "open", body["session_id"])
            session = gateway.store.open(body["session_id"], sampling=body.get("sampling"),
                                         max_context_tokens=body.get("max_context_tokens"),
                                         max_turns=body.get("max_turns"))
            return JSONResponse(session.summary(), status_code=201)
        except Exception as exc:
            return error_response(as_http_error(exc))

    async def get_session(request: Request) -> Response:
        try:
            guard.require(request, "read", request.path_params["sid"])
            return JSONResponse(gateway.store.get(request.path_params["sid"]).summary())
        except Exception as exc:
            return error_response(as_http_error(exc))

    async def get_turns(request: Request) -> Response:
        try:
            guard.require(request, "read", request.path_params["sid"])
            session = gateway.store.get(request.path_params["sid"])
            return JSONResponse({"session_id": session.id, "turns": [t.to_dict() for t in session.turns]})
        except Exception as exc:
            return error_response(as_http_error(exc))

    async def finish_session(request: Request) -> Response:
        try:
            guard.require(request, "finish", request.path_params["sid"])
            body = await read_json(request, max_body_bytes)
            if not isinstance(body, dict):
                raise HttpError(400, "invalid_request_error", "expected a JSON object")
            unknown = set(body) - {"reward", "metadata", "rollout_id", "status"}
            if unknown:
                raise HttpError(400, "invalid_request_error", f"unknown field(s): {', '.join(sorted(unknown))}")
            reward = body.get("reward")
            if reward is not None and (isinstance(reward, bool) or not isinstance(reward, (int, float))):
                raise HttpError(400, "invalid_request_error", "'reward' must be a number or null")
            if not isinstance(body.get("metadata", {}), dict):
                raise HttpError(400, "invalid_request_error", "'metadata' must be an object")
            if not isinstance(body.get("rollout_id", ""), str):
                raise HttpError(400, "invalid_request_error", "'rollout_id' must be a string")
            if body.get("status") not in (None, *SAMPLE_STATUSES):
                raise HttpError(400, "invalid_request_error",
                                f"'status' must be one of {', '.join(SAMPLE_STATUSES)} or null")
            sid = request.path_params["sid"]
            samples = gateway.finish_session(sid, reward, body.get("metadata"), body.get("rollout_id"),
                                             body.get("status"))
            return JSONResponse({"session_id": sid, "samples": [s.to_dict() for s in samples]})
        except Exception as exc:
            return error_response(as_http_error(exc))

    async def delete_session(request: Request) -> Response:
        try:
            guard.require(request, "delete", request.path_params["sid"])
            session = gateway.store.drop(request.path_params["sid"])
            return JSONResponse({"session_id": session.id, "deleted": True, "turns": len(session.turns)})
        except Exception as exc:
            return error_response(as_http_error(exc))

    async def http_error(request: Request, exc: Any) -> Response:
        status = getattr(exc, "status_code", 500)
        kind = {404: "not_found_error", 405: "invalid_request_error"}.get(status, "api_error")
        err = HttpError(status, kind, f"{request.method} {request.url.path}: {getattr(exc, 'detail', 'error')}")
        path = request.url.path
        openai = path.startswith(OPENAI_PATHS)
        return openai_error_response(err) if openai else error_response(err)

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
        Route("/v1/sessions", open_session, methods=["POST"]),
        Route("/v1/sessions/{sid}", get_session, methods=["GET"]),
        Route("/v1/sessions/{sid}", delete_session, methods=["DELETE"]),
        Route("/v1/sessions/{sid}/finish", finish_session, methods=["POST"]),
        Route("/v1/sessions/{sid}/turns", get_turns, methods=["GET"]),
    ]
    return Starlette(routes=routes, exception_handlers={HTTPException: http_error, 500: http_error})
