"""The session management routes — the orchestrator's (who may use them: :mod:`.auth`):

    POST   /v1/sessions                  open one {"session_id", "sampling"?, "max_context_tokens"?, "max_turns"?,
                                                   "max_new_tokens"?}
    GET    /v1/sessions/{id}             its summary
    GET    /v1/sessions/{id}/turns       its recorded turns
    POST   /v1/sessions/{id}/finish      close it with a reward → its samples
    DELETE /v1/sessions/{id}             forget it

A session id is whatever a client sent as its API key, so it may hold any character, ``/``
included: the id is the first segment of the request's raw (still percent-encoded) path,
decoded on its own — ``/v1/sessions/team%2Fa/finish`` finishes session ``team/a``. Errors use
Anthropic's format.
"""

from __future__ import annotations

from typing import Any, Awaitable, Callable
from urllib.parse import unquote

from starlette.requests import Request
from starlette.responses import Response

from agent_code.gateway.auth import Action, ManagementGuard
from agent_code.gateway import offload
from agent_code.gateway.http import HttpError, as_http_error, json_response, read_json
from agent_code.gateway.pipeline import Gateway
from agent_code.gateway.routes_anthropic import error_response
from agent_code.trajectory.samples import SAMPLE_STATUSES

PREFIX = "/v1/sessions/"
SESSION_FIELDS = {"session_id": str, "sampling": dict, "max_context_tokens": int, "max_turns": int,
                  "max_new_tokens": int}
# a session's sampling defaults, checked when the session opens (not at its first turn)
SAMPLING_FIELDS: dict[str, Any] = {"temperature": (int, float), "top_p": (int, float), "top_k": int, "seed": int,
                                   "max_new_tokens": int}
FINISH_FIELDS = {"reward", "metadata", "rollout_id", "status"}


def check_sampling(sampling: dict[str, Any]) -> None:
    for key, value in sampling.items():
        kind = SAMPLING_FIELDS.get(key)
        if kind is not None and value is not None and (isinstance(value, bool) or not isinstance(value, kind)):
            raise HttpError(400, "invalid_request_error",
                            f"'sampling.{key}' must be " + ("an integer" if kind is int else "a number"))


def split_session_path(raw_path: str) -> tuple[str, tuple[str, ...]] | None:
    """``/v1/sessions/<id>[/rest…]`` (raw, percent-encoded) → (decoded id, rest); None if the
    path is not one of a session."""
    if not raw_path.startswith(PREFIX):
        return None
    first, *rest = raw_path[len(PREFIX):].split("/")
    if not first:
        return None
    return unquote(first, errors="strict"), tuple(rest)


class SessionRoutes:
    def __init__(self, gateway: Gateway, guard: ManagementGuard, *, max_body_bytes: int) -> None:
        self.gateway, self.guard, self.max_body_bytes = gateway, guard, max_body_bytes
        # (what follows the id, method) → (the guard's action, the handler)
        self.routes: dict[tuple[tuple[str, ...], str], tuple[Action, Callable[[Request, str], Awaitable[Response]]]] = {
            ((), "GET"): ("read", self.summary), (("turns",), "GET"): ("read", self.turns),
            (("finish",), "POST"): ("finish", self.finish), ((), "DELETE"): ("delete", self.delete)}

    async def open(self, request: Request) -> Response:
        try:
            self.guard.require(request, "open")
            body = await read_json(request, self.max_body_bytes)
            if not isinstance(body, dict):
                raise HttpError(400, "invalid_request_error", "expected a JSON object")
            for key, value in body.items():
                kind = SESSION_FIELDS.get(key)
                if kind is None:
                    raise HttpError(400, "invalid_request_error",
                                    f"unknown field '{key}' (allowed: {', '.join(SESSION_FIELDS)})")
                if not isinstance(value, kind) or isinstance(value, bool) or (isinstance(value, int) and value < 1):
                    raise HttpError(400, "invalid_request_error", f"'{key}' must be a {kind.__name__}"
                                    + (" of at least 1" if kind is int else ""))
            check_sampling(body.get("sampling") or {})
            if not body.get("session_id"):
                raise HttpError(400, "invalid_request_error", "'session_id' is required")
            self.guard.require(request, "open", body["session_id"])
            session = self.gateway.store.open(body["session_id"], sampling=body.get("sampling"),
                                              max_context_tokens=body.get("max_context_tokens"),
                                              max_turns=body.get("max_turns"),
                                              max_new_tokens=body.get("max_new_tokens"))
            return json_response(session.summary(), status=201)
        except Exception as exc:
            return error_response(as_http_error(exc))

    async def one(self, request: Request) -> Response:
        """Every route under ``/v1/sessions/{id}``."""
        try:
            raw = request.scope.get("raw_path")
            path = raw.decode("latin-1") if isinstance(raw, bytes) else request.url.path
            try:
                parts = split_session_path(path)
            except UnicodeDecodeError:
                raise HttpError(400, "invalid_request_error", "the session id in the path is not UTF-8") from None
            if parts is None:
                raise HttpError(404, "not_found_error", f"{request.method} {request.url.path}: Not Found")
            sid, rest = parts
            route = self.routes.get((rest, request.method))
            if route is None:
                if any(rest == known for known, _ in self.routes):
                    raise HttpError(405, "invalid_request_error",
                                    f"{request.method} {request.url.path}: Method Not Allowed")
                raise HttpError(404, "not_found_error", f"{request.method} {request.url.path}: Not Found")
            action, handler = route
            self.guard.require(request, action, sid)
            return await handler(request, sid)
        except Exception as exc:
            return error_response(as_http_error(exc))

    async def summary(self, request: Request, sid: str) -> Response:
        return json_response(self.gateway.store.get(sid).summary())

    async def turns(self, request: Request, sid: str) -> Response:
        session = self.gateway.store.get(sid)
        return json_response({"session_id": session.id, "turns": [t.to_dict() for t in session.turns]})

    async def delete(self, request: Request, sid: str) -> Response:
        session = self.gateway.store.drop(sid)
        return json_response({"session_id": session.id, "deleted": True, "turns": len(session.turns)})

    async def finish(self, request: Request, sid: str) -> Response:
        body = await read_json(request, self.max_body_bytes)
        if not isinstance(body, dict):
            raise HttpError(400, "invalid_request_error", "expected a JSON object")
        unknown = set(body) - FINISH_FIELDS
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
        session = self.gateway.store.sessions.get(sid)
        finish = self.gateway.finish_session if session is None else session.guarded(self.gateway.finish_session)
        samples = await offload.run(finish, sid, reward, body.get("metadata"), body.get("rollout_id"),
                                    body.get("status"))   # samples built and written off the loop
        return json_response({"session_id": sid, "samples": [s.to_dict(copy_data=False) for s in samples]})
