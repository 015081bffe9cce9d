"""``POST /v1/responses`` and ``POST /responses`` (Codex calls ``{base_url}/responses``, and a
base URL may or may not end in ``/v1``), JSON or SSE. Way in and way out only: translation
lives in :mod:`agent_code.protocols.openai_responses`, the HTTP turn in
:mod:`agent_code.gateway.turn_flow`, the session identity rules in
:mod:`agent_code.gateway.identity`. Errors use OpenAI's format; a failure after the stream
started is a ``response.failed`` event.
"""

from __future__ import annotations

import time
from typing import Any, Iterable

from starlette.requests import Request
from starlette.responses import Response

from agent_code.gateway import offload
from agent_code.gateway.body_memo import read_json_extending
from agent_code.gateway.http import HttpError, as_http_error, credential_from, large_body
from agent_code.gateway.identity import SessionResolver
from agent_code.gateway.routes_openai_chat import openai_error_response
from agent_code.gateway.pipeline import Gateway, PreparedTurn, TurnOutcome
from agent_code.gateway.turn_flow import TurnFlow
from agent_code.protocols import openai_common as oc
from agent_code.protocols import openai_responses as wire
from agent_code.protocols.anthropic import ThinkingSigner
from agent_code.protocols.canonical import ChatRequest

PROTOCOL = "openai-responses"


class ResponsesReply:
    """The way out of one response (one response id and one event sequence)."""

    protocol = PROTOCOL

    def __init__(self, gateway: Gateway, chat: ChatRequest, info: wire.ResponsesWire, signer: ThinkingSigner) -> None:
        self.writer = wire.ResponseWriter(info, model=chat.model or gateway.model_name)
        self.signer = signer

    def error(self, err: HttpError) -> Response:
        return openai_error_response(err)

    def body(self, outcome: TurnOutcome) -> dict[str, Any]:
        return self.writer.final(outcome.reply, finish_reason=outcome.finish_reason,
                                 input_tokens=len(outcome.prompt_ids),
                                 output_tokens=len(outcome.generation.output_ids), signer=self.signer)

    def opening(self, turn: PreparedTurn) -> Iterable[bytes]:
        return [oc.sse_event(*e) for e in self.writer.opening()]

    def keepalive(self) -> bytes:
        return oc.sse_event(*self.writer.keepalive())

    def progress(self, news: list[tuple[str, str]]) -> list[bytes]:
        """Content deltas for what became certain during the generation."""
        events: list[tuple[str, dict[str, Any]]] = []
        for kind, piece in news:
            events += (self.writer.reasoning_done(piece, self.signer) if kind == "reasoning_done"
                       else getattr(self.writer, kind)(piece))
        return [oc.sse_event(*e) for e in events]

    def reply_events(self, outcome: TurnOutcome) -> tuple[list[bytes], list[bytes]]:
        events = [oc.sse_event(*e) for e in self.writer.reply_events(self.body(outcome))]
        return events[:-1], events[-1:]  # the completed event only once the turn is recorded

    def stream_error(self, err: HttpError) -> bytes:
        _, body = oc.error_body(err.status, err.kind, err.message, err.param, err.code)
        return oc.sse_event(*self.writer.failed(err.message, body["error"]["code"] or body["error"]["type"]))


class ResponsesRoutes:
    def __init__(self, gateway: Gateway, flow: TurnFlow, sessions: SessionResolver, *, max_body_bytes: int) -> None:
        self.gw, self.flow, self.sessions = gateway, flow, sessions
        self.max_body_bytes = max_body_bytes
        self.signer = ThinkingSigner()  # seals reasoning into encrypted_content

    async def responses(self, request: Request) -> Response:
        started = time.perf_counter()
        try:
            credential = credential_from(request)
            known = self.gw.store.sessions.get(credential) if credential else None
            body, body_memo = await read_json_extending(request, self.max_body_bytes,
                                                        known.body_memo if known is not None else None, "input")
            chat, info = await offload.run_if(large_body(request), wire.translate_request, body, signer=self.signer,
                                              default_max_tokens=self.gw.default_max_tokens)
            session = self.sessions.resolve(credential, info.identity, chat)
            if credential and session.id == credential:   # the memo is the session's own
                session.body_memo = body_memo
        except Exception as exc:
            return openai_error_response(as_http_error(exc))
        return await self.flow.answer(request, session, chat, ResponsesReply(self.gw, chat, info, self.signer),
                                      started=started, after_commit=self.sessions.remember)
