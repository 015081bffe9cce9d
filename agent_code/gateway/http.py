"""HTTP plumbing shared by every protocol's routes: bounded body reading, the credentials
(the API key is the session id), cancellation when the client goes away, error mapping, and
JSON responses that stay valid UTF-8 whatever they echo.

Errors are raised as :class:`HttpError` (status, kind, message, and the optional ``param`` and
``code`` OpenAI's format carries) and turned into each protocol's own error format by its routes.
"""

from __future__ import annotations

import asyncio
import contextlib
import errno
import json
import logging
import math
import re
from types import ModuleType
from typing import Any, Awaitable, Callable, Mapping, TypeVar

from starlette.requests import ClientDisconnect, Request
from starlette.responses import Response

from agent_code.engines.base import EngineError, EngineRequestError
from agent_code.gateway.pipeline import RenderError

log = logging.getLogger("agent_code.gateway")
T = TypeVar("T")

DEFAULT_MAX_BODY_BYTES = 32 * 1024 * 1024
DISCONNECT_POLL_S = 0.25
BODY_IDLE_TIMEOUT_S = 30.0     # longest wait for the next chunk of a request body
BODY_TOTAL_TIMEOUT_S = 300.0   # longest for a whole request body
STORAGE_FULL = (errno.ENOSPC, errno.EDQUOT)   # a write that failed for want of room: 507, not 500


class HttpError(Exception):
    """``param`` and ``code`` are optional details that OpenAI's error format carries."""

    def __init__(self, status: int, kind: str, message: str, *, param: str | None = None,
                 code: str | None = None) -> None:
        super().__init__(message)
        self.status, self.kind, self.message = status, kind, message
        self.param, self.code = param, code


class ClientGone(Exception):
    """The client disconnected before its reply was ready."""


class _NotFinite(ValueError):
    """A number JSON cannot carry (NaN, Infinity, or one that overflows a float)."""




_SURROGATE_HEX = re.compile(r"\\u([dD][89a-fA-F][0-9a-fA-F]{2})")


def lone_surrogate_escape(text: str) -> int | None:
    """The first ``\\uD800``–``\\uDFFF`` escape in JSON ``text`` that is not half of a
    surrogate pair (a high one directly followed by a low one), or None. Escaped backslashes
    (``\\\\ud800`` is a backslash and the text ``ud800``) are not escapes. Reads the text
    once, without serialising the parsed body again (which cost milliseconds per request on
    a long session whose system prompt holds an escaped emoji)."""
    pending: tuple[int, int] | None = None          # an unpaired high surrogate: (code, end)
    for m in _SURROGATE_HEX.finditer(text):
        start = m.start()
        slashes = 0
        while start - slashes - 1 >= 0 and text[start - slashes - 1] == "\\":
            slashes += 1
        if slashes % 2:                             # the backslash is itself escaped: plain text
            continue
        code = int(m.group(1), 16)
        if code >= 0xDC00:                          # a low one: the second half of a pair, or lone
            if pending is None or pending[1] != start:
                return code
            pending = None
            continue
        if pending is not None:
            return pending[0]
        pending = (code, m.end())
    return pending[0] if pending is not None else None


def _finite_float(text: str) -> float:
    value = float(text)
    if not math.isfinite(value):
        raise _NotFinite(f"the number {text[:40]} is out of range")
    return value


def _float_range_int(text: str) -> int:
    if len(text) > 309:  # more digits than any float holds: no field of a request takes such a number
        raise _NotFinite(f"the integer {text[:20]}... ({len(text)} digits) is out of range")
    return int(text)


def _no_constant(name: str) -> Any:
    raise _NotFinite(f"{name} is not a JSON value")


orjson: ModuleType | None   # None: not installed (the standard library reads the body)
try:
    import orjson
except ImportError:  # pragma: no cover - a dependency; the standard library path below suffices
    orjson = None

# digits -> "0", everything else -> "x": a run of 19 zeros may be an integer orjson would turn into a
# float (beyond 64 bits: 20 digits, or 19 below -2**63, as -9223372036854775809 is)
_DIGIT_RUNS = bytes(0x30 if 0x30 <= b <= 0x39 else 0x78 for b in range(256))
_LONG_RUN = b"0" * 19


def parse_json_body(raw: bytes) -> Any:
    """Strict JSON: UTF-8, no lone surrogate escape (``"\\ud800"``: not Unicode, and the
    tokenizer refuses it anyway), no NaN/Infinity, no number (integers included) beyond a float's
    range, bounded nesting. Anything else is a 400 — never a 500
    later, when a reply, a turn log line or a sample holding such a value fails to serialize.

    orjson reads a body first (3-4x faster here): it refuses every one of those itself (and
    a BOM, and nesting past 1024), and such a body goes on to the standard library's strict
    reading below, which says why it is refused or, for a BOM, accepts it. The one thing orjson
    would change rather than refuse is an integer beyond 64 bits (it makes it a float), so a
    body with a run of 19 or more digits anywhere is left to the standard library too."""
    return read_json_bytes(raw)[0]


def needs_standard_library(raw: bytes) -> bool:
    """Whether :func:`parse_json_body` leaves ``raw`` to the standard library at once (no orjson,
    or a run of digits orjson might turn into a float)."""
    return orjson is None or _LONG_RUN in raw.translate(_DIGIT_RUNS)


def read_json_bytes(raw: bytes) -> tuple[Any, bool]:
    """:func:`parse_json_body`'s value, and whether orjson read it (else the standard library)."""
    if not raw.strip():
        raise HttpError(400, "invalid_request_error", "request body is empty; expected a JSON object")
    if orjson is not None and not needs_standard_library(raw):
        try:
            return orjson.loads(raw), True
        except orjson.JSONDecodeError:
            pass
    return _standard_library(raw), False


def _standard_library(raw: bytes) -> Any:
    try:
        # decoded strictly here: json.loads(bytes) would let UTF-8-encoded surrogates through
        text = raw.decode("utf-8-sig")
        value = json.loads(text, parse_float=_finite_float, parse_int=_float_range_int, parse_constant=_no_constant)
        lone = lone_surrogate_escape(text)  # an escape is the only way a string can hold one
        if lone is not None:
            raise HttpError(400, "invalid_request_error",
                            f"request body is not valid Unicode: it holds a lone UTF-16 surrogate (\\u{lone:04x})")
        return value
    except UnicodeDecodeError:
        raise HttpError(400, "invalid_request_error", "request body is not valid UTF-8") from None
    except json.JSONDecodeError as exc:
        raise HttpError(400, "invalid_request_error",
                        f"request body is not valid JSON: {exc.msg} at line {exc.lineno} column {exc.colno}") from None
    except RecursionError:
        raise HttpError(400, "invalid_request_error", "request body is nested too deeply") from None
    except ValueError as exc:  # _NotFinite, or an integer past Python's digit limit
        raise HttpError(400, "invalid_request_error", f"request body is not valid JSON: {str(exc).split(';')[0][:200]}") from None


async def read_body(request: Request, limit: int) -> bytes:
    """The whole body, at most ``limit`` bytes (413 beyond), within the body timeouts (408): a
    client that trickles its body, or declares a length and never sends it, does not hold the
    request (and its task) for longer than ``BODY_TOTAL_TIMEOUT_S``, nor stalls longer than
    ``BODY_IDLE_TIMEOUT_S`` between two chunks. uvicorn itself has no such timeout."""
    declared = request.headers.get("content-length")
    if declared is not None:
        if not declared.isdigit():
            raise HttpError(400, "invalid_request_error", "content-length is not a number")
        if int(declared) > limit:
            raise HttpError(413, "request_too_large", f"request body is over the {limit}-byte limit")
    chunks, size = [], 0
    loop = asyncio.get_running_loop()
    deadline = loop.time() + BODY_TOTAL_TIMEOUT_S
    try:
        async with asyncio.timeout(min(deadline, loop.time() + BODY_IDLE_TIMEOUT_S)) as timer:
            async for chunk in request.stream():
                size += len(chunk)
                if size > limit:
                    raise HttpError(413, "request_too_large", f"request body is over the {limit}-byte limit")
                chunks.append(chunk)
                timer.reschedule(min(deadline, loop.time() + BODY_IDLE_TIMEOUT_S))
    except TimeoutError:
        raise HttpError(408, "timeout_error", f"request body not received in time ({size} bytes arrived; "
                        f"at most {BODY_IDLE_TIMEOUT_S:g} s between chunks, {BODY_TOTAL_TIMEOUT_S:g} s in all)") from None
    except ClientDisconnect:
        raise HttpError(400, "invalid_request_error", "the client disconnected before sending the whole body") from None
    return b"".join(chunks)


async def read_json(request: Request, limit: int, parse: Callable[[bytes], Any] = parse_json_body) -> Any:
    """The request's JSON body (see :func:`read_body` and :func:`parse_json_body`, or ``parse``);
    a large one is parsed off the event loop. Its size is left in ``request.state.body_bytes``, the
    bytes in ``request.state.raw_body`` (identical retries: ``gateway/replay.py``)."""
    from agent_code.gateway import offload

    raw = await read_body(request, limit)
    request.state.body_bytes, request.state.raw_body = len(raw), raw
    return await offload.run_if(len(raw) >= offload.LARGE_BODY_BYTES, parse, raw)


def large_body(request: Request) -> bool:
    """Whether :func:`read_json` read a body large enough to work on off the event loop."""
    from agent_code.gateway.offload import LARGE_BODY_BYTES

    return getattr(request.state, "body_bytes", 0) >= LARGE_BODY_BYTES


def credential_from(request: Request) -> str | None:
    """The API key the client sent (``Authorization: Bearer ID`` or ``x-api-key: ID``), if any."""
    return credential_in(request.headers)


def credential_in(headers: Mapping[str, str]) -> str | None:
    """:func:`credential_from` of a request's headers."""
    auth = headers.get("authorization", "")
    if auth[:7].lower() == "bearer " and auth[7:].strip():
        return auth[7:].strip()
    return headers.get("x-api-key", "").strip() or None


def session_id_from(request: Request) -> str:
    """The API key is the session id; a client that sends none uses the session ``default``."""
    return credential_from(request) or "default"


def json_bytes(payload: object) -> bytes:
    """``payload`` as compact JSON in UTF-8. orjson writes it (a session's samples are large:
    several times faster than the standard library); what orjson will not write — a lone
    surrogate (echoed from a hostile request, say), an integer past 64 bits, a type it does
    not know — goes to the standard library, which escapes lone surrogates instead of failing.
    A float that is not finite (a logprob of -inf) is written as null, never as the ``NaN``
    that is not JSON."""
    if orjson is not None:
        try:
            return orjson.dumps(payload, option=orjson.OPT_NON_STR_KEYS)
        except TypeError:
            pass
    payload = _finite(payload)
    text = json.dumps(payload, ensure_ascii=False, separators=(",", ":"), allow_nan=False)
    try:
        return text.encode("utf-8")
    except UnicodeEncodeError:
        return json.dumps(payload, ensure_ascii=True, separators=(",", ":"), allow_nan=False).encode("ascii")


def _finite(value: Any) -> Any:
    """``value`` with every float that is not finite made None (as orjson writes it)."""
    if isinstance(value, float):
        return value if math.isfinite(value) else None
    if isinstance(value, dict):
        return {k: _finite(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [_finite(v) for v in value]
    return value


def json_response(payload: object, status: int = 200, headers: dict[str, str] | None = None) -> Response:
    """A JSON response (:func:`json_bytes`): its bytes are valid UTF-8 and valid JSON whatever
    the payload holds, instead of a 500."""
    return Response(json_bytes(payload), status_code=status, headers=headers, media_type="application/json")


def disconnected(request: Request) -> bool:
    """Whether the client has gone away: ``request.is_disconnected()`` without its cancel scope.

    Both take one message from the server if one is ready at once (an ``http.disconnect``: gone)
    and otherwise wait for none. Starlette does it by awaiting ``receive()`` in a scope cancelled
    beforehand (anyio delivers that cancellation through the event loop and formats the task's
    repr for its message: some 40 µs a request); here the ``receive()`` coroutine is stepped once
    by hand: if it returns at once, that is its message; if it would wait, it is closed, which
    unwinds it as a cancellation would (a waiter it queued is removed)."""
    if getattr(request, "_is_disconnected", False):
        return True
    step = request.receive().__await__()
    try:
        step.send(None)
    except StopIteration as finished:
        message = finished.value
    else:
        step.close()   # it would have waited: nothing has come
        return False
    if isinstance(message, dict) and message.get("type") == "http.disconnect":
        request._is_disconnected = True   # what Starlette's own check records
        return True
    return False


async def unless_disconnected(request: Request, work: Awaitable[T]) -> T:
    """Await ``work``; if the client disconnects first, cancel it and raise ClientGone."""
    task = asyncio.ensure_future(work)
    try:
        while True:
            done, _ = await asyncio.wait({task}, timeout=DISCONNECT_POLL_S)
            if done:
                return task.result()
            if disconnected(request):
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
    if isinstance(status, int) and isinstance(kind, str):  # a SessionError, or any error that says both
        return HttpError(status, kind, str(exc), param=getattr(exc, "param", None), code=getattr(exc, "code", None))
    if isinstance(exc, RenderError):
        return HttpError(400, "invalid_request_error", str(exc))
    if isinstance(exc, EngineRequestError):   # this request's content (a prompt over the context): not retried
        return HttpError(400, "invalid_request_error", f"the engine refused the request: {exc}")
    if isinstance(exc, EngineError):
        # 529 tells Anthropic clients to retry later
        return HttpError(529, "overloaded_error", f"engine error: {exc}")
    if isinstance(exc, OSError) and exc.errno in STORAGE_FULL:
        log.error("the trajectory dir is full: %s", exc)
        return HttpError(507, "api_error", f"the gateway could not write its trajectory dir: {exc}",
                         code="insufficient_storage")
    log.exception("unexpected error in a turn")
    return HttpError(500, "api_error", f"internal error: {type(exc).__name__}: {exc}")
