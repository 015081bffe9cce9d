"""HTTP plumbing shared by every protocol's routes: bounded body reading, the session
id from the credentials, cancellation when the client goes away, and error mapping.

Errors are raised as :class:`HttpError` (status, kind, message) and turned into each
protocol's own error format by its routes.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import logging
from typing import Any, Awaitable, TypeVar

from starlette.requests import Request

from agent_code.engines.base import EngineError
from agent_code.gateway.pipeline import RenderError
from agent_code.gateway.sessions import SessionError

log = logging.getLogger("agent_code.gateway")
T = TypeVar("T")

DEFAULT_MAX_BODY_BYTES = 32 * 1024 * 1024
DISCONNECT_POLL_S = 0.25


class HttpError(Exception):
    def __init__(self, status: int, kind: str, message: str) -> None:
        super().__init__(message)
        self.status, self.kind, self.message = status, kind, message


class ClientGone(Exception):
    """The client disconnected before its reply was ready."""


async def read_json(request: Request, limit: int) -> Any:
    declared = request.headers.get("content-length")
    if declared is not None:
        if not declared.isdigit():
            raise HttpError(400, "invalid_request_error", "content-length is not a number")
        if int(declared) > limit:
            raise HttpError(413, "request_too_large", f"request body is over the {limit}-byte limit")
    chunks, size = [], 0
    async for chunk in request.stream():
        size += len(chunk)
        if size > limit:
            raise HttpError(413, "request_too_large", f"request body is over the {limit}-byte limit")
        chunks.append(chunk)
    raw = b"".join(chunks)
    if not raw.strip():
        raise HttpError(400, "invalid_request_error", "request body is empty; expected a JSON object")
    try:
        return json.loads(raw)
    except UnicodeDecodeError:
        raise HttpError(400, "invalid_request_error", "request body is not valid UTF-8") from None
    except json.JSONDecodeError as exc:
        raise HttpError(400, "invalid_request_error",
                        f"request body is not valid JSON: {exc.msg} at line {exc.lineno} column {exc.colno}") from None
    except RecursionError:
        raise HttpError(400, "invalid_request_error", "request body is nested too deeply") from None


def session_id_from(request: Request) -> str:
    """The API key is the session id: ``Authorization: Bearer ID`` or ``x-api-key: ID``."""
    auth = request.headers.get("authorization", "")
    if auth[:7].lower() == "bearer " and auth[7:].strip():
        return auth[7:].strip()
    return request.headers.get("x-api-key", "").strip() or "default"


async def unless_disconnected(request: Request, work: Awaitable[T]) -> T:
    """Await ``work``; if the client disconnects first, cancel it and raise ClientGone."""
    task = asyncio.ensure_future(work)
    try:
        while True:
            done, _ = await asyncio.wait({task}, timeout=DISCONNECT_POLL_S)
            if done:
                return task.result()
            if await request.is_disconnected():
                raise ClientGone()
    finally:
        if not task.done():
            task.cancel()
            with contextlib.suppress(BaseException):
                await task


def as_http_error(exc: BaseException) -> HttpError:
    """Map any failure of a turn to a status and an error kind."""
    if isinstance(exc, HttpError):
        return exc
    status = getattr(exc, "status", None)
    kind = getattr(exc, "kind", None)
    if isinstance(exc, SessionError) or (isinstance(status, int) and isinstance(kind, str)):
        return HttpError(status, kind, str(exc))
    if isinstance(exc, RenderError):
        return HttpError(400, "invalid_request_error", str(exc))
    if isinstance(exc, EngineError):
        # 529 tells Anthropic clients to retry later
        return HttpError(529, "overloaded_error", f"engine error: {exc}")
    log.exception("unexpected error in a turn")
    return HttpError(500, "api_error", f"internal error: {type(exc).__name__}: {exc}")
