"""HTTP plumbing shared by every protocol's routes: bounded body reading, the credentials
(the API key is the session id), cancellation when the client goes away, error mapping, and
JSON responses that stay valid UTF-8 whatever they echo.

Errors are raised as :class:`HttpError` (status, kind, message, and the optional ``param`` and
``code`` OpenAI's format carries) and turned into each protocol's own error format by its routes.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import logging
from typing import Any, Awaitable, TypeVar

from starlette.requests import Request
from starlette.responses import Response

from agent_code.engines.base import EngineError
from agent_code.gateway.pipeline import RenderError
from agent_code.gateway.sessions import SessionError

log = logging.getLogger("agent_code.gateway")
T = TypeVar("T")

DEFAULT_MAX_BODY_BYTES = 32 * 1024 * 1024
DISCONNECT_POLL_S = 0.25


class HttpError(Exception):
    """``param`` and ``code`` are optional details that OpenAI's error format carries."""

    def __init__(self, status: int, kind: str, message: str, *, param: str | None = None,
                 code: str | None = None) -> None:
        super().__init__(message)
        self.status, self.kind, self.message = status, kind, message
        self.param, self.code = param, code


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


def credential_from(request: Request) -> str | None:
    """The API key the client sent (``Authorization: Bearer ID`` or ``x-api-key: ID``), if any."""
    auth = request.headers.get("authorization", "")
    if auth[:7].lower() == "bearer " and auth[7:].strip():
        return auth[7:].strip()
    return request.headers.get("x-api-key", "").strip() or None


def session_id_from(request: Request) -> str:
    """The API key is the session id; a client that sends none uses the session ``default``."""
    return credential_from(request) or "default"


def json_response(payload: Any, status: int = 200, headers: dict[str, str] | None = None) -> Response:
    """A JSON response whose bytes are valid UTF-8 even when the payload holds a lone surrogate
    (echoed from a hostile request, say): those are escaped instead of failing with a 500."""
    text = json.dumps(payload, ensure_ascii=False, separators=(",", ":"))
    try:
        raw = text.encode("utf-8")
    except UnicodeEncodeError:
        raw = json.dumps(payload, ensure_ascii=True, separators=(",", ":")).encode("ascii")
    return Response(raw, status_code=status, headers=headers, media_type="application/json")


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
        return HttpError(status, kind, str(exc), param=getattr(exc, "param", None), code=getattr(exc, "code", None))
    if isinstance(exc, RenderError):
        return HttpError(400, "invalid_request_error", str(exc))
    if isinstance(exc, EngineError):
        # 529 tells Anthropic clients to retry later
        return HttpError(529, "overloaded_error", f"engine error: {exc}")
    log.exception("unexpected error in a turn")
    return HttpError(500, "api_error", f"internal error: {type(exc).__name__}: {exc}")
