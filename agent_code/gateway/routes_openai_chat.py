"""``POST /v1/chat/completions`` (JSON or SSE). Way in and way out only: translation lives in
:mod:`agent_code.protocols.openai_chat`, the HTTP turn in :mod:`agent_code.gateway.turn_flow`,
the session identity rules in :mod:`agent_code.gateway.identity`. Errors use OpenAI's format.
"""

from __future__ import annotations

import time
from typing import Any, Iterable

from starlette.requests import Request
from starlette.responses import Response

from agent_code.gateway import offload
from agent_code.gateway.body_memo import read_json_extending
from agent_code.gateway.http import (HttpError, as_http_error, credential_from, json_response, large_body)
from agent_code.gateway.identity import SessionResolver
from agent_code.gateway.pipeline import Gateway, PreparedTurn, TurnOutcome
from agent_code.gateway.turn_flow import TurnFlow
from agent_code.protocols import openai_chat as wire
from agent_code.protocols import openai_common as oc
from agent_code.protocols.canonical import ChatRequest

PROTOCOL = "openai-chat"


def openai_error_response(err: HttpError) -> Response:
    status, body = oc.error_body(err.status, err.kind, err.message, err.param, err.code)
    return json_response(body, status=status)


class ChatReply:
    """The way out of one chat completion (one completion id for JSON and SSE alike)."""

    protocol = PROTOCOL

    def __init__(self, gateway: Gateway, chat: ChatRequest, wire_info: wire.ChatWire) -> None:
        self.model = chat.model or gateway.model_name
        self.chunks = wire.ChunkMaker(completion_id=wire.new_completion_id(), model=self.model,
                                      include_usage=wire_info.include_usage)

    def error(self, err: HttpError) -> Response:
        return openai_error_response(err)

    def _args(self, outcome: TurnOutcome) -> dict[str, Any]:
        return {"finish_reason": wire.finish_reason_for(outcome.reply, outcome.finish_reason),
                "prompt_tokens": len(outcome.prompt_ids), "completion_tokens": len(outcome.generation.output_ids)}

    def body(self, outcome: TurnOutcome) -> dict[str, Any]:
        return wire.completion_body(outcome.reply, completion_id=self.chunks.completion_id,
                                    created=self.chunks.created, model=self.model, **self._args(outcome))

    def opening(self, turn: PreparedTurn) -> Iterable[bytes]:
        yield oc.sse_data(self.chunks.opening())

    def keepalive(self) -> bytes:
        return wire.KEEPALIVE

    def progress(self, news: list[tuple[str, str]]) -> list[bytes]:
        """Content deltas for what became certain during the generation."""
        return [oc.sse_data(c) for kind, piece in news if kind != "reasoning_done"
                for c in getattr(self.chunks, kind)(piece)]

    def reply_events(self, outcome: TurnOutcome) -> tuple[list[bytes], list[bytes]]:
        return [oc.sse_data(c) for c in self.chunks.reply(outcome.reply, **self._args(outcome))], [wire.DONE]

    def stream_error(self, err: HttpError) -> bytes:
        return oc.sse_data(oc.error_body(err.status, err.kind, err.message, err.param, err.code)[1])


class ChatCompletionsRoutes:
    def __init__(self, gateway: Gateway, flow: TurnFlow, sessions: SessionResolver, *, max_body_bytes: int) -> None:
        self.gw, self.flow, self.sessions = gateway, flow, sessions
        self.max_body_bytes = max_body_bytes

    async def completions(self, request: Request) -> Response:
        started = time.perf_counter()
        try:
            credential = credential_from(request)
            known = self.gw.store.sessions.get(credential) if credential else None
            body, body_memo = await read_json_extending(request, self.max_body_bytes,
                                                        known.body_memo if known is not None else None, "messages")
            chat, info = await offload.run_if(large_body(request), wire.translate_request, body,
                                              default_max_tokens=self.gw.default_max_tokens)
            session = self.sessions.resolve(credential, info.identity, chat)
            if credential and session.id == credential:   # the memo is the session's own
                session.body_memo = body_memo
        except Exception as exc:
            return openai_error_response(as_http_error(exc))
        return await self.flow.answer(request, session, chat, ChatReply(self.gw, chat, info), started=started,
                                      after_commit=self.sessions.remember)
