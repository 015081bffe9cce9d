"""What the HTTP engines (SGLang, vLLM) share: one httpx client per event loop, turning an
error response into one readable line and the right error (:class:`EngineRequestError` for a
refusal of the request's content, :class:`EngineError` for a failure of the server), reading a
streamed reply's events (and its error events), checking the token ids an engine sent back, and
probing a server's health route (what an engine pool uses to bring a drained replica back)."""

from __future__ import annotations

import asyncio
import json
from typing import Any, AsyncIterator

import httpx

from agent_code.engines.base import EngineError, EngineRequestError, request_error_status

HEALTH_TIMEOUT_S = 5.0


class LoopClient:
    """An ``httpx.AsyncClient`` made on first use in the running loop (and remade if the
    loop changes: a client cannot outlive the loop it was made in)."""

    def __init__(self, base_url: str, *, timeout: float, headers: dict[str, str],
                 transport: httpx.AsyncBaseTransport | None = None) -> None:
        self.base_url, self.timeout, self.headers, self.transport = base_url, timeout, headers, transport
        self._client: httpx.AsyncClient | None = None
        self._loop: asyncio.AbstractEventLoop | None = None

    def get(self) -> httpx.AsyncClient:
        loop = asyncio.get_running_loop()
        if self._client is None or self._loop is not loop or self._client.is_closed:
            self._client = httpx.AsyncClient(
                base_url=self.base_url, headers=self.headers, transport=self.transport,
                timeout=httpx.Timeout(self.timeout, connect=min(10.0, self.timeout)))
            self._loop = loop
        return self._client

    async def aclose(self) -> None:
        if self._client is not None:
            client, self._client = self._client, None
            try:
                await client.aclose()
            except RuntimeError:
                pass  # its event loop is gone


def error_text(response: httpx.Response) -> str:
    try:
        data = response.json()
    except ValueError:
        return response.text[:500]
    if isinstance(data, dict):
        err = data.get("error")
        if isinstance(err, dict):
            return str(err.get("message") or err)
        return str(err or data.get("message") or data.get("detail") or data)[:500]
    return str(data)[:500]


def http_error(what: str, response: httpx.Response) -> EngineError:
    """The error of an engine reply with a status other than 200: ``what`` (``SGLang /generate``)
    ``returned HTTP <status>: <its message>``, an :class:`EngineRequestError` when the status
    blames the request (400, 413, 422), else an :class:`EngineError` (5xx, 401, 404, 429 …)."""
    kind = EngineRequestError if request_error_status(response.status_code) else EngineError
    return kind(f"{what} returned HTTP {response.status_code}: {error_text(response)}")


async def probe_health(client: httpx.AsyncClient, path: str = "/health") -> bool:
    """Whether the server answers ``GET path`` with a 2xx within :data:`HEALTH_TIMEOUT_S`."""
    try:
        response = await client.get(path, timeout=HEALTH_TIMEOUT_S)
    except httpx.HTTPError:
        return False
    return response.is_success


async def sse_json(response: httpx.Response) -> AsyncIterator[Any]:
    """The decoded JSON of each ``data:`` line of a server-sent-events reply, up to ``[DONE]``
    (raises ValueError on a line that is not JSON)."""
    async for line in response.aiter_lines():
        if not line.startswith("data:"):
            continue                     # blank separators, comments, event names
        data = line[5:].strip()
        if data == "[DONE]":
            return
        yield json.loads(data)


def raise_error_event(event: object, engine: str) -> None:
    """Raise when a streamed ``event`` is an ``{"error": ...}`` event, which a server sends in place
    of a chunk when it refuses the request (SGLang: a ValueError such as a prompt over the context;
    vLLM: with its status as ``code``): :class:`EngineRequestError` (``<engine> refused the
    request: <message>``), or :class:`EngineError` when the event names a status that does not
    blame the request (a 5xx)."""
    if isinstance(event, dict) and "error" in event:
        error = event["error"]
        message = error.get("message") if isinstance(error, dict) else error
        code = error.get("code", error.get("status_code")) if isinstance(error, dict) else None
        if isinstance(code, int) and not isinstance(code, bool) and not request_error_status(code):
            raise EngineError(f"{engine} failed: {message}")
        raise EngineRequestError(f"{engine} refused the request: {message}")


def new_part(chunk: list, held: list, total: object, what: str) -> list:
    """What a streamed event adds to ``held``: servers send either everything so far or only
    what is new; ``total``, the count so far the event reports, tells which (raises ValueError
    when neither fits, or when a cumulative event rewrites what was already received)."""
    if not isinstance(total, int) or isinstance(total, bool):
        raise TypeError(f"the event's token count {total!r} is not an integer")
    if len(chunk) == total and chunk[:len(held)] == held:
        return chunk[len(held):]
    if len(held) + len(chunk) == total:
        return chunk
    raise ValueError(f"an event with {len(chunk)} {what} after {len(held)} does not make {total}")


MAX_TOKEN_ID = 2**31 - 1


def token_ids(values: object) -> list[int]:
    """``values`` as token ids: a list of integers in ``[0, 2**31)`` (a tokenizer cannot decode
    others; a float, bool or string in their place is a malformed reply). Raises ValueError or
    TypeError otherwise."""
    if not isinstance(values, list):
        raise TypeError(f"token ids must be a list, got {type(values).__name__}")
    for value in values:
        if not isinstance(value, int) or isinstance(value, bool):
            raise TypeError(f"token id {value!r} is not an integer")
        if not 0 <= value <= MAX_TOKEN_ID:
            raise ValueError(f"token id {value} is out of range")
    return list(values)
