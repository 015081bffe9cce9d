"""The Anthropic Messages endpoints: ``POST /v1/messages`` (JSON or SSE) and
``POST /v1/messages/count_tokens``. Way in and way out only: translation lives in
:mod:`agent_code.protocols.anthropic`, the HTTP turn (prepare, generate with disconnect
handling and pings, commit after the reply) in :mod:`agent_code.gateway.turn_flow`, the turn
itself in :mod:`agent_code.gateway.pipeline`. A client without an API key uses the session
``default`` (on a gateway of explicit sessions it is refused instead: 401).
"""

from __future__ import annotations

import time
from typing import Any, Iterable

from starlette.requests import Request
from starlette.responses import Response

from agent_code.gateway import offload
from agent_code.gateway.body_memo import read_json_extending
from agent_code.gateway.http import (HttpError, as_http_error, credential_from, json_response, large_body,
                                     read_json)
from agent_code.gateway.identity import require_session_key, session_for_key
from agent_code.gateway.pipeline import Gateway, PreparedTurn, TurnOutcome
from agent_code.gateway.turn_flow import TurnFlow
from agent_code.protocols import anthropic as wire
from agent_code.protocols.canonical import ChatRequest

PROTOCOL = "anthropic"


def error_response(err: HttpError) -> Response:
    return json_response(wire.error_body(err.kind, err.message), status=err.status)


class AnthropicReply:
    """The way out of one ``/v1/messages`` request (one message id for JSON and SSE alike)."""

    protocol = PROTOCOL

    def __init__(self, gateway: Gateway, chat: ChatRequest, signer: wire.ThinkingSigner) -> None:
        self.gw, self.chat, self.signer = gateway, chat, signer
        self.message_id = wire.new_message_id()
        self.model = chat.model or gateway.model_name
        self.stream = wire.MessageStream(signer=signer, thinking_requested=chat.thinking)

    def _args(self, outcome: TurnOutcome) -> dict[str, Any]:
        stop_reason, stop_sequence = wire.stop_reason_for(outcome.reply, outcome.finish_reason,
                                                          outcome.stop_sequence)
        return {"model": self.model, "message_id": self.message_id, "stop_reason": stop_reason,
                "stop_sequence": stop_sequence, "input_tokens": len(outcome.prompt_ids),
                "output_tokens": len(outcome.generation.output_ids), "signer": self.signer,
                "thinking_requested": self.chat.thinking}

    def error(self, err: HttpError) -> Response:
        return error_response(err)

    def body(self, outcome: TurnOutcome) -> dict[str, Any]:
        return wire.response_body(outcome.reply, **self._args(outcome))

    def opening(self, turn: PreparedTurn) -> Iterable[bytes]:
        """``message_start`` and a ping at once, so client watchdogs stay calm."""
        yield wire.sse_encode(*wire.message_start_event(model=self.model, message_id=self.message_id,
                                                        input_tokens=len(turn.prompt_ids)))
        yield wire.ping_event()

    def keepalive(self) -> bytes:
        return wire.ping_event()

    def progress(self, news: list[tuple[str, str]]) -> list[bytes]:
        """Content deltas for what became certain during the generation."""
        events = []
        for kind, piece in news:
            events += getattr(self.stream, kind)(piece)
        return [wire.sse_encode(e, d) for e, d in events]

    def reply_events(self, outcome: TurnOutcome) -> tuple[list[bytes], list[bytes]]:
        args = self._args(outcome)
        events = [wire.sse_encode(e, d) for e, d in self.stream.finish(
            outcome.reply, stop_reason=args["stop_reason"], stop_sequence=args["stop_sequence"],
            output_tokens=args["output_tokens"])]
        return events[:-1], events[-1:]  # message_start went out first; message_stop after the record

    def stream_error(self, err: HttpError) -> bytes:
        return wire.sse_encode("error", wire.error_body(err.kind, err.message))


class AnthropicRoutes:
    def __init__(self, gateway: Gateway, flow: TurnFlow, *, max_body_bytes: int) -> None:
        self.gw = gateway
        self.flow = flow
        self.max_body_bytes = max_body_bytes
        self.signer = wire.ThinkingSigner()

    async def count_tokens(self, request: Request) -> Response:
        try:
            require_session_key(self.gw.store, credential_from(request))
            body = await read_json(request, self.max_body_bytes)
            count = await offload.run(lambda: len(self.gw.render(wire.translate_count_request(body))))
            return json_response({"input_tokens": count})
        except Exception as exc:
            return error_response(as_http_error(exc))

    async def messages(self, request: Request) -> Response:
        started = time.perf_counter()
        try:
            # the session's previous request, parsed and translated: only what is new is read again
            known = self.gw.store.sessions.get(credential_from(request) or "default")
            body, body_memo = await read_json_extending(request, self.max_body_bytes,
                                                        known.body_memo if known is not None else None, "messages")
            memo = known.translation_memo if known is not None else None
            chat, memo = await offload.run_if(large_body(request), wire.translate_request_memo, body,
                                              signer=self.signer, memo=memo)
            session = session_for_key(self.gw.store, credential_from(request))
            session.translation_memo, session.body_memo = memo, body_memo
        except Exception as exc:
            return error_response(as_http_error(exc))
        return await self.flow.answer(request, session, chat, AnthropicReply(self.gw, chat, self.signer),
                                      started=started)
