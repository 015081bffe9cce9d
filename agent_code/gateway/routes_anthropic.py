"""The Anthropic Messages endpoints: ``POST /v1/messages`` (JSON or SSE) and
``POST /v1/messages/count_tokens``. Translation both ways lives in
:mod:`agent_code.protocols.anthropic`; the turn itself in :mod:`agent_code.gateway.pipeline`.
"""

from __future__ import annotations

import asyncio
import contextlib
import time
from typing import Any, AsyncIterator

from starlette.requests import Request
from starlette.responses import JSONResponse, Response, StreamingResponse

from agent_code.gateway.http import (ClientGone, HttpError, as_http_error, read_json, session_id_from,
                                     unless_disconnected)
from agent_code.protocols import anthropic as wire


def error_response(err: HttpError) -> JSONResponse:
    return JSONResponse(wire.error_body(err.kind, err.message), status_code=err.status)


class AnthropicRoutes:
    def __init__(self, gateway: Any, *, max_body_bytes: int, ping_interval_s: float = 5.0) -> None:
        self.gw = gateway
        self.max_body_bytes = max_body_bytes
        self.ping_interval_s = ping_interval_s
        self.signer = wire.ThinkingSigner()

    async def count_tokens(self, request: Request) -> Response:
        try:
            body = await read_json(request, self.max_body_bytes)
            chat = wire.translate_count_request(body)
            return JSONResponse({"input_tokens": len(self.gw.render(chat))})
        except Exception as exc:
            return error_response(as_http_error(exc))

    async def messages(self, request: Request) -> Response:
        started = time.perf_counter()
        try:
            body = await read_json(request, self.max_body_bytes)
            chat = wire.translate_request(body, signer=self.signer)
            session = self.gw.store.get_or_open(session_id_from(request))
            turn = self.gw.prepare(session, chat)
        except Exception as exc:
            return error_response(as_http_error(exc))
        if chat.stream:
            return StreamingResponse(self._stream(session, turn, started), media_type="text/event-stream",
                                     headers={"cache-control": "no-cache", "x-accel-buffering": "no"})
        try:
            outcome = await unless_disconnected(request, self.gw.generate(session, turn))
        except ClientGone:
            return Response(status_code=499)  # nobody is listening; nothing is recorded
        except Exception as exc:
            return error_response(as_http_error(exc))
        payload = wire.response_body(outcome.reply, **self._reply_args(outcome))
        if await request.is_disconnected():
            return Response(status_code=499)
        # recorded before the reply is written, so a client that acts on the reply (finishes
        # the session, say) always finds the turn there
        self.gw.commit(session, outcome, "anthropic", time.perf_counter() - started)
        return JSONResponse(payload)

    def _reply_args(self, outcome: Any, message_id: str | None = None) -> dict[str, Any]:
        stop_reason, stop_sequence = wire.stop_reason_for(outcome.reply, outcome.finish_reason,
                                                          outcome.stop_sequence)
        return {"model": outcome.request.model or self.gw.model_name,
                "message_id": message_id or wire.new_message_id(),
                "stop_reason": stop_reason, "stop_sequence": stop_sequence,
                "input_tokens": len(outcome.prompt_ids), "output_tokens": len(outcome.generation.output_ids),
                "signer": self.signer, "thinking_requested": outcome.request.thinking}

    async def _stream(self, session: Any, turn: Any, started: float) -> AsyncIterator[bytes]:
        """``message_start`` at once, pings while the engine works (so client watchdogs
        stay calm), then the reply's events. If the client goes away, Starlette cancels
        this generator: the engine task is cancelled with it and nothing is recorded."""
        message_id = wire.new_message_id()
        task = asyncio.ensure_future(self.gw.generate(session, turn))
        try:
            yield wire.sse_encode(*wire.message_start_event(
                model=turn.request.model or self.gw.model_name, message_id=message_id,
                input_tokens=len(turn.prompt_ids)))
            yield wire.ping_event()
            while True:
                done, _ = await asyncio.wait({task}, timeout=self.ping_interval_s)
                if done:
                    break
                yield wire.ping_event()
            try:
                outcome = task.result()
            except Exception as exc:
                err = as_http_error(exc)
                yield wire.sse_encode("error", wire.error_body(err.kind, err.message))
                return
            events = wire.stream_events(outcome.reply, **self._reply_args(outcome, message_id))
            for event, data in events[1:-1]:  # message_start went out first
                yield wire.sse_encode(event, data)
            # everything but message_stop has been written: record, then end the stream
            self.gw.commit(session, outcome, "anthropic", time.perf_counter() - started)
            yield wire.sse_encode(*events[-1])
        finally:
            if not task.done():
                task.cancel()
                with contextlib.suppress(BaseException):
                    await task
