"""The weight-update routes (:mod:`.weights`), the orchestrator's: they need the admin token
(or, on a developer's loopback gateway without one, a request without a key). Errors use
Anthropic's format.

    POST /v1/admin/pause    {"mode"?: "wait" | "reject"}   → the status
    POST /v1/admin/resume   {"weight_version"?: str}       → the status
    GET  /v1/admin/weights                                  → the status
    GET  /v1/engines                                        → the engine's replicas, health, pinned sessions
"""

from __future__ import annotations

from typing import Any, Awaitable, Callable

from starlette.requests import Request
from starlette.responses import Response

from agent_code.gateway.auth import ManagementGuard
from agent_code.gateway.http import HttpError, as_http_error, json_response, read_json
from agent_code.gateway.pipeline import Gateway
from agent_code.gateway.routes_anthropic import error_response
from agent_code.gateway.weights import PauseMode

MAX_BODY_BYTES = 64 * 1024


class AdminRoutes:
    def __init__(self, gateway: Gateway, guard: ManagementGuard) -> None:
        self.gateway, self.guard = gateway, guard

    async def _body(self, request: Request, allowed: dict[str, str]) -> dict[str, object]:
        """The JSON object body (empty when there is none), with only the ``allowed`` fields."""
        if not (await request.body()).strip():
            return {}
        body = await read_json(request, MAX_BODY_BYTES)
        if not isinstance(body, dict):
            raise HttpError(400, "invalid_request_error", "expected a JSON object")
        unknown = sorted(set(body) - set(allowed))
        if unknown:
            raise HttpError(400, "invalid_request_error",
                            f"unknown field(s): {', '.join(unknown)} (allowed: {', '.join(allowed) or 'none'})")
        return body

    async def _answer(self, request: Request, handle: Callable[[Request], Awaitable[dict[str, Any]]]) -> Response:
        """The admin token checked, then ``handle``'s body; any failure in Anthropic's error format."""
        try:
            self.guard.require(request, "weights")
            return json_response(await handle(request))
        except Exception as exc:
            return error_response(as_http_error(exc))

    async def pause(self, request: Request) -> Response:
        return await self._answer(request, self._pause)

    async def resume(self, request: Request) -> Response:
        return await self._answer(request, self._resume)

    async def weights(self, request: Request) -> Response:
        return await self._answer(request, self._status)

    async def engines(self, request: Request) -> Response:
        return await self._answer(request, self._engines)

    async def _pause(self, request: Request) -> dict[str, Any]:
        body = await self._body(request, {"mode": "wait or reject"})
        mode = body.get("mode", "wait")
        if mode not in ("wait", "reject"):
            raise HttpError(400, "invalid_request_error", "'mode' must be 'wait' or 'reject'")
        chosen: PauseMode = "wait" if mode == "wait" else "reject"
        self.gateway.weights.pause(chosen)
        return self.gateway.weights.status()

    async def _resume(self, request: Request) -> dict[str, Any]:
        body = await self._body(request, {"weight_version": "a string"})
        version = body.get("weight_version")
        if version is not None and (not isinstance(version, str) or not version.strip() or len(version) > 256):
            raise HttpError(400, "invalid_request_error", "'weight_version' must be a non-empty string "
                                                          "of at most 256 characters")
        self.gateway.weights.resume(version)
        return self.gateway.weights.status()

    async def _status(self, request: Request) -> dict[str, Any]:
        return self.gateway.weights.status()

    async def _engines(self, request: Request) -> dict[str, Any]:
        engine = self.gateway.engine
        status = getattr(engine, "status", None)
        body: dict[str, Any] = status() if status is not None else {"engine": engine.name, "max_sessions": None,
                                                                    "replicas": [{
            "name": engine.name, "healthy": True, "sessions": sorted(self.gateway.store.sessions)}]}
        if self.guard.admin_token is None:  # a keyless developer gateway: session ids are API keys, count them
            for replica in body["replicas"]:
                replica["sessions"] = len(replica["sessions"])
        return body
