"""A local stand-in for vLLM's OpenAI-compatible server, token in / token out, on 127.0.0.1.

Speaks ``GET /v1/models`` and ``POST /v1/completions`` with a prompt of token ids, in vLLM's
shapes: with ``logprobs: 1`` and ``return_tokens_as_token_ids: true`` the choice's
``logprobs.tokens`` are ``"token_id:N"`` strings with ``token_logprobs``/``top_logprobs``/
``text_offset``; ``finish_reason`` is ``"stop"``/``"length"``, ``stop_reason`` the matched stop
string or token id (``None`` for eos); ``return_token_ids: true`` adds ``token_ids``. Unknown
models get vLLM's 404, bad prompts a 400. Like vLLM, a client that disconnects aborts its request
(recorded in ``disconnected``/``cancelled``). ``"stream": true`` gets vLLM's chunk stream
(one token a chunk, the finish on the last, a usage chunk with ``stream_options.include_usage``). The toy model, stop handling and request log are
those of :mod:`fakes.sglang_server`, and so are the failure modes ``error_next`` and ``raw_next``.
"""

from __future__ import annotations

import time
import asyncio
from typing import Any, AsyncIterator

from starlette.applications import Starlette
from starlette.requests import Request
from starlette.responses import JSONResponse, Response
from starlette.routing import Route

from .sglang_server import DONE, EventStream, FakeModel, ThreadedASGIServer, _emit, _steps, sse


class FakeVLLM:
    def __init__(self, *, model: FakeModel | None = None, served_model: str = "fake/vllm-model",
                 token_delay: float = 0.0, max_model_len: int = 4096, include_token_ids: bool = False,
                 port: int = 0):
        self.model = model or FakeModel()
        self.served_model = served_model
        self.token_delay = token_delay
        self.max_model_len = max_model_len
        self.include_token_ids = include_token_ids
        self.requests: list[dict[str, Any]] = []
        self.cancelled: list[str] = []
        self.disconnected: list[str] = []
        self.running: set[str] = set()
        self._n = 0
        self.error_next: tuple[int, dict[str, Any]] | None = None  # answer the next completion with this
        self.raw_next: tuple[int, bytes] | None = None              # ... or with these raw bytes
        app = Starlette(routes=[
            Route("/v1/models", self._models, methods=["GET"]),
            Route("/v1/completions", self._completions, methods=["POST"]),
            Route("/health", self._health, methods=["GET"]),
        ])
        self._server = ThreadedASGIServer(app, port)
        self.url = self._server.url

    def __enter__(self) -> "FakeVLLM":
        self._server.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._server.stop()

    async def _health(self, request: Request) -> JSONResponse:
        return JSONResponse({})

    async def _models(self, request: Request) -> JSONResponse:
        self.requests.append({"path": request.url.path, "body": None,
                              "headers": {k.lower(): v for k, v in request.headers.items()}})
        return JSONResponse({"object": "list", "data": [
            {"id": self.served_model, "object": "model", "created": 0, "owned_by": "vllm",
             "max_model_len": self.max_model_len}]})

    async def _completions(self, request: Request) -> JSONResponse:
        try:
            body = await request.json()
        except ValueError:
            return _error(400, "BadRequestError", "invalid JSON body")
        self.requests.append({"path": request.url.path, "body": body,
                              "headers": {k.lower(): v for k, v in request.headers.items()}})
        if self.error_next is not None:
            (status, payload), self.error_next = self.error_next, None
            return JSONResponse(payload, status_code=status)
        if self.raw_next is not None:
            (status, raw), self.raw_next = self.raw_next, None
            return Response(raw, status_code=status, media_type="application/json")
        if body.get("model") not in (None, self.served_model):
            return _error(404, "NotFoundError", f"The model `{body.get('model')}` does not exist.")
        prompt = body.get("prompt")
        if not isinstance(prompt, list) or not prompt or not all(isinstance(i, int) for i in prompt):
            return _error(400, "BadRequestError", "this fake takes the prompt as a list of token ids")
        max_tokens = body.get("max_tokens") or 16
        if len(prompt) + max_tokens > self.max_model_len:
            return _error(400, "BadRequestError",
                          f"This model's maximum context length is {self.max_model_len} tokens. However, you "
                          f"requested {len(prompt) + max_tokens} tokens ({len(prompt)} in the messages, "
                          f"{max_tokens} in the completion). Please reduce the length of the messages or completion.")
        self._n += 1
        request_id = f"cmpl-{self._n}"
        self.running.add(request_id)
        if body.get("stream"):
            return EventStream(lambda gone: self._stream(body, prompt, max_tokens, request_id, gone))

        async def should_stop() -> str | None:
            if await request.is_disconnected():
                self.disconnected.append(request_id)
                return "client disconnected"
            return None

        try:
            result = await _emit(self.model, prompt, max_tokens, list(body.get("stop") or []),
                                 set(body.get("stop_token_ids") or []), bool(body.get("ignore_eos")),
                                 self.token_delay, should_stop)
        finally:
            self.running.discard(request_id)
        ids, finish = result["ids"], result["finish"]
        if finish["type"] == "abort":
            self.cancelled.append(request_id)
        choice = self._choice(body, ids, 0, finish)
        return JSONResponse({
            "id": request_id, "object": "text_completion", "created": int(time.time()),
            "model": self.served_model, "choices": [choice],
            "usage": {"prompt_tokens": len(prompt), "completion_tokens": len(ids),
                      "total_tokens": len(prompt) + len(ids), "prompt_tokens_details": None},
        })

    def _choice(self, body: dict[str, Any], ids: list[int], start: int, finish: dict[str, Any] | None) -> dict[str, Any]:
        """The choice for the tokens ``ids[start:]`` (all of them when not streaming)."""
        if finish is None:
            finish_reason = stop_reason = None
        elif finish["type"] == "stop":
            matched = finish.get("matched")
            finish_reason, stop_reason = "stop", (None if matched == self.model.eos_id else matched)
        else:
            finish_reason, stop_reason = finish["type"], None
        part = ids[start:]
        text = self.model.decode(part)
        if isinstance(stop_reason, str) and not body.get("include_stop_str_in_output"):
            whole = self.model.decode(ids)
            text = whole[len(self.model.decode(ids[:start])):whole.find(stop_reason)]
        choice: dict[str, Any] = {"index": 0, "text": text, "finish_reason": finish_reason,
                                  "stop_reason": stop_reason, "prompt_logprobs": None}
        if body.get("logprobs") is not None:
            as_ids = bool(body.get("return_tokens_as_token_ids"))
            tokens = [f"token_id:{t}" if as_ids else self.model.decode([t]) for t in part]
            lps = [self.model.logprob(start + k, t) for k, t in enumerate(part)]
            offsets, pos = [], len(self.model.decode(ids[:start]))
            for t in part:
                offsets.append(pos)
                pos += len(self.model.decode([t]))
            choice["logprobs"] = {"text_offset": offsets, "token_logprobs": lps, "tokens": tokens,
                                  "top_logprobs": [{tok: lp} for tok, lp in zip(tokens, lps, strict=True)]}
        else:
            choice["logprobs"] = None
        if self.include_token_ids or body.get("return_token_ids"):
            choice["token_ids"] = part
        return choice

    async def _stream(self, body: dict[str, Any], prompt: list[int], max_tokens: int, request_id: str,
                      gone: asyncio.Event) -> AsyncIterator[bytes]:
        """vLLM's streamed completion: one chunk per token with that token's text, logprobs and
        ``token_ids``; the last content chunk carries ``finish_reason``/``stop_reason``; with
        ``stream_options.include_usage`` a final chunk with no choices and the usage; then [DONE]."""
        async def should_stop() -> str | None:
            if gone.is_set():
                self.disconnected.append(request_id)
                return "client disconnected"
            return None

        head = {"id": request_id, "object": "text_completion", "created": int(time.time()),
                "model": self.served_model}
        sent = 0
        try:
            async for ids, finish in _steps(self.model, prompt, max_tokens, list(body.get("stop") or []),
                                            set(body.get("stop_token_ids") or []), bool(body.get("ignore_eos")),
                                            self.token_delay, should_stop):
                if finish is not None and finish["type"] == "abort":
                    self.cancelled.append(request_id)
                    return
                yield sse({**head, "choices": [self._choice(body, ids, sent, finish)], "usage": None})
                sent = len(ids)
            if (body.get("stream_options") or {}).get("include_usage"):
                yield sse({**head, "choices": [], "usage": {
                    "prompt_tokens": len(prompt), "completion_tokens": sent, "total_tokens": len(prompt) + sent,
                    "prompt_tokens_details": {"cached_tokens": 0}}})
            yield DONE
        finally:
            self.running.discard(request_id)


def _error(status: int, kind: str, message: str) -> JSONResponse:
    return JSONResponse({"error": {"message": message, "type": kind, "param": None, "code": status}},
                        status_code=status)
