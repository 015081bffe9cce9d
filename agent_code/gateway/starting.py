"""Serving while the gateway loads: ``/healthz`` answers from the first moment.

Loading a tokenizer (and ``transformers`` with it) or a model takes seconds; a gateway that
listens only after it would look dead to whoever polls it. :class:`StartingApp` is the ASGI
app ``serve`` runs from the start: while the real app is being built (in a thread, so the
event loop stays free) ``GET /healthz`` answers ``200 {"status": "starting"}`` and every
other request waits for the build, then goes to the real app as if it had been there all
along. If the build fails, waiting requests get a 503 in their protocol's error format and
``serve`` exits with the error.
"""

from __future__ import annotations

import asyncio
import functools
import json
import threading
import time
from typing import TYPE_CHECKING, Any, Callable

from agent_code import __version__

if TYPE_CHECKING:
    from starlette.types import ASGIApp, Receive, Scope, Send

OPENAI_PATHS = ("/v1/chat/", "/chat/", "/v1/responses", "/responses", "/models")


class StartingApp:
    """An ASGI app (lifespan off) that serves while :meth:`load` builds the real one."""

    def __init__(self) -> None:
        self.app: ASGIApp | None = None
        self.error: BaseException | None = None
        self.started = time.time()
        self._ready: asyncio.Future[None] | None = None

    async def load(self, build: Callable[[], ASGIApp]) -> ASGIApp:
        """Run ``build`` in a daemon thread (a Ctrl-C during a long model load is not held up
        by it) and install its app; raises what ``build`` raised."""
        loop = asyncio.get_running_loop()
        ready = self._ready = loop.create_future()

        def run() -> None:
            done: Callable[[], None]
            try:
                app = build()
            except BaseException as exc:  # noqa: BLE001  (handed to the loop, which re-raises it)
                done = functools.partial(self._fail, exc)
            else:
                done = functools.partial(self._install, app)
            try:
                loop.call_soon_threadsafe(done)
            except RuntimeError:
                pass  # the server stopped (and its loop closed) before the load ended

        threading.Thread(target=run, name="gateway-load", daemon=True).start()
        await asyncio.shield(ready)
        assert self.app is not None
        return self.app

    def _install(self, app: ASGIApp) -> None:
        self.app = app
        if self._ready is not None and not self._ready.done():
            self._ready.set_result(None)

    def _fail(self, exc: BaseException) -> None:
        self.error = exc
        if self._ready is not None and not self._ready.done():
            self._ready.set_exception(exc)

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if self.app is not None:
            await self.app(scope, receive, send)
            return
        if scope["type"] != "http":
            return
        path = scope.get("path", "")
        if path == "/healthz" and scope.get("method") == "GET" and self.error is None:
            await _json(send, 200, {"status": "starting", "version": __version__,
                                    "uptime_s": round(time.time() - self.started, 3)})
            return
        while self._ready is None and self.app is None and self.error is None:
            await asyncio.sleep(0.01)  # the load is about to begin
        if self._ready is not None and self.error is None:
            try:
                await asyncio.shield(self._ready)
            except BaseException:  # noqa: BLE001  (the build failed: answered below)
                pass
        if self.app is not None:
            await self.app(scope, receive, send)
            return
        message = f"the gateway failed to start: {self.error}" if self.error else "the gateway is starting"
        body: dict[str, Any]
        if path.startswith(OPENAI_PATHS):
            body = {"error": {"message": message, "type": "server_error", "param": None, "code": "unavailable"}}
        else:
            body = {"type": "error", "error": {"type": "overloaded_error" if self.error is None else "api_error",
                                               "message": message}}
        await _json(send, 503, body)


async def _json(send: Send, status: int, body: dict[str, Any]) -> None:
    data = json.dumps(body).encode()
    await send({"type": "http.response.start", "status": status,
                "headers": [(b"content-type", b"application/json"), (b"content-length", str(len(data)).encode())]})
    await send({"type": "http.response.body", "body": data})
