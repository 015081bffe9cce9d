"""A local stand-in for an SGLang server's native HTTP API, on 127.0.0.1.

Speaks ``POST /generate`` (token ids in, ``output_ids`` + ``meta_info.output_token_logprobs``
out, in SGLang's shapes), ``POST /abort_request``, ``GET /health``, ``GET /get_model_info`` and
``POST /update_weight_version`` (``{"new_version"}``: what every later reply's
``meta_info.weight_version`` says; ``"default"`` until then, as SGLang's ``--weight-version``).
A real uvicorn server in a thread, so clients talk real HTTP and disconnects are real.

Generation is deterministic: :meth:`FakeModel.plan` maps a prompt to the token ids the "model"
would emit (ending with ``eos_id``), ``FakeModel.logprob`` gives each one's logprob; tests
can queue exact replies in ``fake.model.replies``. The server honours ``max_new_tokens``, stop
strings (on ``model.decode`` text; the ids run through the token completing the stop string, the
text is trimmed), ``stop_token_ids``, ``ignore_eos``, the context length, aborts (by ``rid``) and
client disconnects, emitting one token every ``token_delay`` seconds. With ``"stream": true`` it
answers SGLang's event stream (one ``data:`` event per token, cumulative or incremental by
``stream_mode``, then ``data: [DONE]``; a too-long prompt as an error event). Everything received is
recorded in ``requests``; ``aborted`` lists the rids it was asked to abort, ``cancelled`` the rids
whose generation actually stopped early (abort or disconnect), ``disconnected`` the rids whose
client went away.

Failure modes for fault-injection tests: ``error_next = (status, payload)`` answers the next
``/generate`` with that JSON error, ``raw_next = (status, bytes)`` with those raw bytes (garbage,
truncated JSON, wrong shapes). :mod:`fakes.process` runs a fake in a child process, to be killed.
"""

from __future__ import annotations

import asyncio
import json
import socket
import threading
import time
from collections import deque
from typing import Any, AsyncIterator, Callable

import uvicorn
from starlette.applications import Starlette
from starlette.requests import Request
from starlette.responses import JSONResponse, Response
from starlette.routing import Route


class ThreadedASGIServer:
    """Runs an ASGI app with uvicorn on 127.0.0.1:<port> (default: a free one) in a daemon thread."""

    def __init__(self, app: Any, port: int = 0):
        self._sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
        self._sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        self._sock.bind(("127.0.0.1", port))
        self.port = self._sock.getsockname()[1]
        self.url = f"http://127.0.0.1:{self.port}"
        config = uvicorn.Config(app, log_level="error", lifespan="off", access_log=False)
        self._server = uvicorn.Server(config)
        self._thread = threading.Thread(target=self._server.run, kwargs={"sockets": [self._sock]},
                                        name=f"fake-server-{self.port}", daemon=True)

    def start(self) -> None:
        self._thread.start()
        deadline = time.monotonic() + 10
        while not self._server.started:
            if time.monotonic() > deadline or not self._thread.is_alive():
                raise RuntimeError("the fake server did not start")
            time.sleep(0.01)

    def stop(self) -> None:
        self._server.should_exit = True
        self._thread.join(timeout=10)
        self._sock.close()


class FakeModel:
    """A deterministic toy model over a small vocabulary."""

    def __init__(self, eos_id: int = 2, vocab_size: int = 1000, reply_len: int = 12,
                 decode: Callable[[list[int]], str] | None = None):
        self.eos_id = eos_id
        self.vocab_size = vocab_size
        self.reply_len = reply_len
        self.replies: deque[list[int]] = deque()  # exact replies to give first (eos not implied)
        self.decode = decode or (lambda ids: "".join(f"w{i} " for i in ids if i != eos_id))

    def plan(self, prompt: list[int]) -> list[int]:
        if self.replies:
            return list(self.replies.popleft())
        seed = sum(prompt) * 31 + len(prompt)
        return [3 + (seed + 17 * k) % (self.vocab_size - 3) for k in range(self.reply_len)] + [self.eos_id]

    @staticmethod
    def logprob(k: int, token_id: int) -> float:
        return -round(((token_id * 7 + k) % 97 + 1) / 50, 4)


async def _steps(model: FakeModel, prompt: list[int], max_new: int, stops: list[str], stop_ids: set[int],
                 ignore_eos: bool, delay: float, should_stop: Callable[[], Any]
                 ) -> AsyncIterator[tuple[list[int], dict[str, Any] | None]]:
    """Run the toy model one token at a time: yields (the ids so far, None) after each token and
    (the ids, why it ended) last (an abort ends it without a new token)."""
    plan = model.plan(prompt)
    out: list[int] = []
    for k in range(max_new):
        token = plan[k] if k < len(plan) else 4   # the plan ran out without eos: a filler token
        if delay:
            await asyncio.sleep(delay)
        reason = await should_stop()
        if reason:
            yield out, {"type": "abort", "message": reason}
            return
        out.append(token)
        if (token == model.eos_id and not ignore_eos) or token in stop_ids:
            yield out, {"type": "stop", "matched": token}
            return
        if stops:
            text = model.decode(out)
            hit = next((s for s in stops if s in text), None)
            if hit is not None:
                yield out, {"type": "stop", "matched": hit}
                return
        if k == max_new - 1:
            yield out, {"type": "length", "length": max_new}
            return
        yield out, None
    yield out, {"type": "length", "length": max_new}


async def _emit(model: FakeModel, prompt: list[int], max_new: int, stops: list[str], stop_ids: set[int],
                ignore_eos: bool, delay: float, should_stop: Callable[[], Any]) -> dict[str, Any]:
    """Run the toy model: what a generation produced and why it ended."""
    async for out, finish in _steps(model, prompt, max_new, stops, stop_ids, ignore_eos, delay, should_stop):
        if finish is not None:
            return {"ids": out, "finish": finish}
    raise AssertionError("the toy model ended without a finish")


class EventStream:
    """An ASGI response that sends ``data: ...`` events as ``events`` makes them, and notices a
    client that goes away (``gone`` is set; its generator can check it between tokens)."""

    def __init__(self, events: Callable[[asyncio.Event], AsyncIterator[bytes]]):
        self.events = events

    async def __call__(self, scope: Any, receive: Any, send: Any) -> None:
        gone = asyncio.Event()

        async def watch() -> None:
            while (await receive())["type"] != "http.disconnect":
                pass
            gone.set()

        watcher = asyncio.ensure_future(watch())
        events = self.events(gone)
        try:
            await send({"type": "http.response.start", "status": 200,
                        "headers": [(b"content-type", b"text/event-stream"), (b"cache-control", b"no-cache")]})
            async for chunk in events:
                await send({"type": "http.response.body", "body": chunk, "more_body": True})
            await send({"type": "http.response.body", "body": b"", "more_body": False})
        except OSError:
            gone.set()
        finally:
            watcher.cancel()
            await events.aclose()


def sse(payload: Any) -> bytes:
    return b"data: " + json.dumps(payload).encode() + b"\n\n"


DONE = b"data: [DONE]\n\n"


class FakeSGLang:
    def __init__(self, *, model: FakeModel | None = None, token_delay: float = 0.0,
                 context_length: int = 4096, include_output_ids: bool = True,
                 model_path: str = "fake/sglang-model", stream_mode: str = "cumulative", port: int = 0):
        self.model = model or FakeModel()
        self.stream_mode = stream_mode   # "cumulative" (SGLang's default) or "incremental" (--incremental-streaming-output)
        self.token_delay = token_delay
        self.context_length = context_length
        self.include_output_ids = include_output_ids
        self.model_path = model_path
        self.weight_version = "default"      # SGLang's --weight-version default
        self.requests: list[dict[str, Any]] = []
        self.aborted: list[str] = []
        self.cancelled: list[str] = []
        self.disconnected: list[str] = []
        self.running: set[str] = set()
        self._abort_flags: dict[str, asyncio.Event] = {}
        self.error_next: tuple[int, dict[str, Any]] | None = None  # answer the next /generate with this
        self.raw_next: tuple[int, bytes] | None = None              # ... or with these raw bytes
        app = Starlette(routes=[
            Route("/generate", self._generate, methods=["POST"]),
            Route("/abort_request", self._abort, methods=["POST"]),
            Route("/health", self._health, methods=["GET"]),
            Route("/get_model_info", self._model_info, methods=["GET"]),
            Route("/update_weight_version", self._update_weight_version, methods=["POST"]),
        ])
        self._server = ThreadedASGIServer(app, port)
        self.url = self._server.url

    def __enter__(self) -> "FakeSGLang":
        self._server.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._server.stop()

    def _record(self, request: Request, body: Any) -> None:
        self.requests.append({"path": request.url.path, "body": body,
                              "headers": {k.lower(): v for k, v in request.headers.items()}})

    async def _health(self, request: Request) -> JSONResponse:
        return JSONResponse({})

    async def _model_info(self, request: Request) -> JSONResponse:
        return JSONResponse({"model_path": self.model_path, "tokenizer_path": self.model_path,
                             "is_generation": True, "weight_version": self.weight_version})

    async def _update_weight_version(self, request: Request) -> JSONResponse:
        body = await request.json()
        self._record(request, body)
        if not isinstance(body.get("new_version"), str):
            return _error(400, "new_version must be a string")
        self.weight_version = body["new_version"]
        return JSONResponse({"success": True, "message": f"Weight version updated to {self.weight_version}",
                             "new_version": self.weight_version})

    async def _abort(self, request: Request) -> JSONResponse:
        body = await request.json()
        self._record(request, body)
        rid = body.get("rid")
        self.aborted.append(rid)
        if rid in self._abort_flags:
            self._abort_flags[rid].set()
        return JSONResponse({})

    async def _generate(self, request: Request) -> JSONResponse:
        try:
            body = await request.json()
        except ValueError:
            return _error(400, "invalid JSON body")
        self._record(request, body)
        if self.error_next is not None:
            (status, payload), self.error_next = self.error_next, None
            return JSONResponse(payload, status_code=status)
        if self.raw_next is not None:
            (status, raw), self.raw_next = self.raw_next, None
            return Response(raw, status_code=status, media_type="application/json")
        prompt = body.get("input_ids")
        if not isinstance(prompt, list) or not all(isinstance(i, int) for i in prompt) or not prompt:
            return _error(400, "input_ids must be a non-empty list of token ids (this fake takes no text)")
        params = body.get("sampling_params") or {}
        max_new = params.get("max_new_tokens", 128)
        if len(prompt) + max_new > self.context_length:
            if body.get("stream"):   # SGLang reports it inside the stream, as an error event
                message = (f"Requested token count exceeds the model's maximum context length of "
                           f"{self.context_length} tokens.")
                return Response(sse({"error": {"message": message}}) + DONE, media_type="text/event-stream")
            return _error(400, f"Requested token count exceeds the model's maximum context length of "
                               f"{self.context_length} tokens. You requested a total of "
                               f"{len(prompt) + max_new} tokens: {len(prompt)} tokens from the input "
                               f"messages and {max_new} tokens for the completion.")
        rid = body.get("rid") or f"auto-{len(self.requests)}"
        flag = self._abort_flags[rid] = asyncio.Event()
        self.running.add(rid)
        if body.get("stream"):
            return EventStream(lambda gone: self._stream(body, prompt, params, rid, flag, gone))

        async def should_stop() -> str | None:
            if flag.is_set():
                return f"Abort request {rid}"
            if await request.is_disconnected():
                self.disconnected.append(rid)
                return "client disconnected"
            return None

        try:
            result = await _emit(self.model, prompt, max_new, list(params.get("stop") or []),
                                 set(params.get("stop_token_ids") or []), bool(params.get("ignore_eos")),
                                 self.token_delay, should_stop)
        finally:
            self.running.discard(rid)
            self._abort_flags.pop(rid, None)
        ids, finish = result["ids"], result["finish"]
        if finish["type"] == "abort":
            self.cancelled.append(rid)
        text = self.model.decode(ids)
        if finish["type"] == "stop" and isinstance(finish.get("matched"), str):
            text = text[:text.find(finish["matched"])]
        meta: dict[str, Any] = {
            "id": rid, "finish_reason": finish, "prompt_tokens": len(prompt), "weight_version": self.weight_version,
            "completion_tokens": len(ids), "cached_tokens": 0, "e2e_latency": 0.0,
        }
        if body.get("return_logprob"):
            meta["output_token_logprobs"] = [[self.model.logprob(k, t), t, None] for k, t in enumerate(ids)]
            meta["input_token_logprobs"] = []
        payload: dict[str, Any] = {"text": text, "meta_info": meta}
        if self.include_output_ids:
            payload["output_ids"] = ids
        return JSONResponse(payload)


    async def _stream(self, body: dict[str, Any], prompt: list[int], params: dict[str, Any], rid: str,
                      flag: asyncio.Event, gone: asyncio.Event) -> AsyncIterator[bytes]:
        """SGLang's streamed ``/generate``: one event per token, ``output_ids``, the text and
        ``output_token_logprobs`` cumulative or since the last event (``stream_mode``),
        ``completion_tokens`` the count so far, ``finish_reason`` null until the last; then [DONE]."""
        async def should_stop() -> str | None:
            if flag.is_set():
                return f"Abort request {rid}"
            if gone.is_set():
                self.disconnected.append(rid)
                return "client disconnected"
            return None

        incremental, sent = self.stream_mode == "incremental", 0
        try:
            async for ids, finish in _steps(self.model, prompt, params.get("max_new_tokens", 128),
                                            list(params.get("stop") or []), set(params.get("stop_token_ids") or []),
                                            bool(params.get("ignore_eos")), self.token_delay, should_stop):
                if finish is not None and finish["type"] == "abort":
                    self.cancelled.append(rid)
                    if gone.is_set():
                        return
                start = sent if incremental else 0
                meta: dict[str, Any] = {"id": rid, "finish_reason": finish, "prompt_tokens": len(prompt),
                                        "weight_version": self.weight_version,
                                        "completion_tokens": len(ids), "cached_tokens": 0}
                if body.get("return_logprob"):
                    meta["output_token_logprobs"] = [[self.model.logprob(k, ids[k]), ids[k], None]
                                                     for k in range(start, len(ids))]
                payload: dict[str, Any] = {"text": self.model.decode(ids[start:]), "meta_info": meta}
                if self.include_output_ids:
                    payload["output_ids"] = ids[start:]
                sent = len(ids)
                yield sse(payload)
            yield DONE
        finally:
            self.running.discard(rid)
            self._abort_flags.pop(rid, None)


def _error(status: int, message: str) -> JSONResponse:
    return JSONResponse({"error": {"message": message}}, status_code=status)
