"""vLLM over HTTP, token in / token out through its OpenAI-compatible ``POST /v1/completions``.

Request::

    {"model", "prompt": [token ids], "max_tokens", "temperature", "top_p", "top_k", "min_p",
     "seed"?, "stop", "logprobs": 1, "return_tokens_as_token_ids": true,
     "skip_special_tokens": false, "structured_outputs"/"guided_json"?}

Response: ``choices[0]`` has ``logprobs.tokens`` (``"token_id:N"`` strings, thanks to
``return_tokens_as_token_ids``) and ``logprobs.token_logprobs`` (one per token), plus
``finish_reason`` (``"stop"`` | ``"length"`` | ``"abort"``) and ``stop_reason`` (the matched
stop string or token id). ``usage.prompt_tokens`` is the prompt length. The sampled ids are
the ``token_id:N`` values (vLLM lists every sampled token, the end-of-sequence one and the one
completing a stop string included); ``choices[0].token_ids``, which newer servers add, must
agree when present.

``model`` defaults to the first id of ``GET /v1/models`` (looked up once). The tool grammar
(a JSON schema) is sent as ``structured_outputs: {"json": schema}`` (vLLM >= 0.11) or, with
``legacy_guided=True``, as ``guided_json``.

Streaming (``stream``): the same request with ``"stream": true`` and
``stream_options: {"include_usage": true}`` answers server-sent events: one chunk per step with
only the new tokens' ``logprobs`` (and ``token_ids``), ``finish_reason``/``stop_reason`` on the
last content chunk, then a chunk with no choices and the ``usage``, then ``data: [DONE]``. An error
after the stream began comes as a ``data: {"error": {...}}`` event. An HTTP 400/413/422 (a prompt
over the context) and an error event that names no 5xx are :class:`EngineRequestError`: they refuse
this request and say nothing of the server's health. ``healthy`` probes ``GET /health``.

Weight version: vLLM's replies carry none (neither ``/v1/completions`` nor its token-in
``/inference/v1/generate``; its dev-mode ``GET /weight_info`` says the version *now*, which a
weight update can change between a reply and the question), so a generation here has no
``meta["weight_version"]`` and the gateway records its own counter, which the trainer sets when it
resumes admission after an update (``POST /v1/admin/resume {"weight_version"}``,
:mod:`agent_code.gateway.weights`).

Cancellation closes the HTTP request; vLLM's server aborts a request whose client
disconnected (its API handlers are wrapped to cancel on disconnect), freeing the sequence.

Session affinity: ``X-Session-ID: <session>`` on every request, the header vLLM's
production-stack router hashes on with ``--routing-logic session --session-key X-Session-ID``
(configurable with ``session_header``); a single vLLM server ignores it.
"""

from __future__ import annotations

from typing import Any, AsyncIterator, Sequence

import httpx

from agent_code.engines.base import EngineError, Generation, Piece
from agent_code.engines.http_client import LoopClient, http_error, probe_health, raise_error_event, sse_json, token_ids
from agent_code.protocols.canonical import SamplingParams

SESSION_HEADER = "X-Session-ID"


class VLLMEngine:
    name = "vllm"

    def __init__(self, base_url: str, *, model: str | None = None, timeout: float = 600.0,
                 api_key: str | None = None, session_header: str | None = SESSION_HEADER,
                 legacy_guided: bool = False, transport: httpx.AsyncBaseTransport | None = None):
        if not base_url.startswith(("http://", "https://")):
            base_url = "http://" + base_url
        base_url = base_url.rstrip("/")
        if base_url.endswith("/v1"):
            base_url = base_url[:-3]
        self.base_url = base_url
        self.model = model
        self.timeout = timeout
        self.session_header = session_header
        self.legacy_guided = legacy_guided
        self._client = LoopClient(self.base_url, timeout=timeout, transport=transport,
                                  headers={"Authorization": f"Bearer {api_key}"} if api_key else {})

    def _http(self) -> httpx.AsyncClient:
        return self._client.get()

    async def _model(self, client: httpx.AsyncClient) -> str:
        if self.model is None:
            try:
                response = await client.get("/v1/models")
                response.raise_for_status()
                model = response.json()["data"][0]["id"]
                if not isinstance(model, str) or not model:
                    raise ValueError(f"the model id {model!r} is not a name")
                self.model = model
            except (httpx.HTTPError, ValueError, KeyError, IndexError, TypeError) as exc:
                raise EngineError(f"cannot tell which model vLLM at {self.base_url} serves "
                                  f"(GET /v1/models: {exc}); pass the model name") from exc
        return self.model

    def request_body(self, prompt_ids: Sequence[int], sampling: SamplingParams, model: str) -> dict[str, Any]:
        body: dict[str, Any] = {
            "model": model,
            "prompt": [int(i) for i in prompt_ids],
            "max_tokens": int(sampling.max_new_tokens),
            **sampling.plain(top_k_off=-1),
            "stop": list(sampling.stop),
            "logprobs": 1,
            "return_tokens_as_token_ids": True,
            "skip_special_tokens": False,
            "stream": False,
        }
        if sampling.seed is not None:
            body["seed"] = int(sampling.seed)
        if sampling.tool_grammar:
            if self.legacy_guided:
                body["guided_json"] = sampling.tool_grammar
            else:
                body["structured_outputs"] = {"json": sampling.tool_grammar}
        return body

    async def generate(self, prompt_ids: Sequence[int], sampling: SamplingParams, *,
                       session_id: str | None = None) -> Generation:
        client = self._http()
        model = await self._model(client)
        body = self.request_body(prompt_ids, sampling, model)
        headers = {self.session_header: session_id} if session_id and self.session_header else {}
        try:
            # cancellation closes this request's connection: vLLM aborts on disconnect
            response = await client.post("/v1/completions", json=body, headers=headers)
        except httpx.HTTPError as exc:
            raise EngineError(f"vLLM at {self.base_url} failed: {type(exc).__name__}: {exc}") from exc
        return self._parse(response, len(prompt_ids))

    def stream(self, prompt_ids: Sequence[int], sampling: SamplingParams, *,
               session_id: str | None = None) -> AsyncIterator[Piece | Generation]:
        return self._stream(prompt_ids, sampling, session_id)

    async def _stream(self, prompt_ids: Sequence[int], sampling: SamplingParams,
                      session_id: str | None) -> AsyncIterator[Piece | Generation]:
        client = self._http()
        model = await self._model(client)
        body = {**self.request_body(prompt_ids, sampling, model), "stream": True,
                "stream_options": {"include_usage": True}}
        headers = {self.session_header: session_id} if session_id and self.session_header else {}
        ids: list[int] = []
        logprobs: list[float] = []
        direct: list[int] | None = None
        last: dict[str, Any] | None = None      # the choice that finished
        usage: dict[str, Any] = {}
        try:
            # closing the stream (cancellation, an early close) disconnects: vLLM aborts the request
            async with client.stream("POST", "/v1/completions", json=body, headers=headers) as response:
                if response.status_code != 200:
                    await response.aread()
                    raise http_error("vLLM /v1/completions", response)
                async for event in sse_json(response):
                    raise_error_event(event, "vLLM")
                    usage = event.get("usage") or usage
                    for choice in event.get("choices") or []:
                        lp = choice.get("logprobs") or {}
                        new_ids = token_ids([_token_id(t) for t in lp.get("tokens") or []])
                        new_logprobs = [float(x) if x is not None else float("nan")
                                        for x in lp.get("token_logprobs") or []]
                        if len(new_ids) != len(new_logprobs):
                            raise EngineError(f"vLLM streamed {len(new_ids)} tokens but {len(new_logprobs)} logprobs")
                        if choice.get("token_ids") is not None:
                            direct = (direct or []) + token_ids(choice["token_ids"])
                        ids += new_ids
                        logprobs += new_logprobs
                        if new_ids:
                            yield Piece(new_ids, new_logprobs)
                        if choice.get("finish_reason") is not None:
                            last = choice
        except httpx.HTTPError as exc:
            raise EngineError(f"vLLM at {self.base_url} failed: {type(exc).__name__}: {exc}") from exc
        except (ValueError, KeyError, IndexError, TypeError, AttributeError, OverflowError) as exc:
            raise EngineError(f"vLLM sent a malformed stream chunk: {type(exc).__name__}: {str(exc)[:300]}") from exc
        if last is None:
            raise EngineError("vLLM's stream ended before the reply finished")
        whole = {"finish_reason": last["finish_reason"], "stop_reason": last.get("stop_reason"), "token_ids": direct,
                 "logprobs": {"tokens": ids, "token_logprobs": logprobs}}
        try:
            yield self._generation({"choices": [whole], "usage": usage}, len(prompt_ids))
        except (ValueError, KeyError, TypeError, AttributeError) as exc:
            raise EngineError(f"vLLM's last stream chunk is malformed: {type(exc).__name__}: {exc}") from exc

    def _parse(self, response: httpx.Response, n_prompt: int) -> Generation:
        if response.status_code != 200:
            raise http_error("vLLM /v1/completions", response)
        try:
            return self._generation(response.json(), n_prompt)
        except (ValueError, KeyError, IndexError, TypeError, AttributeError, OverflowError) as exc:
            raise EngineError(f"vLLM returned a malformed completion: {type(exc).__name__}: {str(exc)[:200]}: "
                              f"{response.text[:300]}") from exc

    def _generation(self, data: dict[str, Any], n_prompt: int) -> Generation:
        """The Generation in a decoded completion (any shape error raises ValueError, KeyError,
        IndexError, TypeError or AttributeError; the caller words it)."""
        choice = data["choices"][0]
        lp = choice.get("logprobs") or {}
        ids = token_ids([_token_id(t) for t in lp.get("tokens") or []])
        logprobs = [float(x) if x is not None else float("nan") for x in lp.get("token_logprobs") or []]
        finish = choice.get("finish_reason")
        usage = data.get("usage") or {}
        if len(ids) != len(logprobs):
            raise EngineError(f"vLLM returned {len(ids)} tokens but {len(logprobs)} logprobs")
        direct = choice.get("token_ids")
        if direct is not None and token_ids(direct) != ids:
            raise EngineError("vLLM's token_ids disagree with its logprob tokens")
        if finish == "abort":
            raise EngineError("vLLM aborted the request")
        if finish not in ("stop", "length"):
            raise EngineError(f"vLLM returned an unknown finish reason {finish!r}")
        meta: dict[str, Any] = {"engine": self.name}
        if isinstance(choice.get("stop_reason"), str):
            meta["stop"] = choice["stop_reason"]
        cached = (usage.get("prompt_tokens_details") or {}).get("cached_tokens")
        if cached is not None:
            meta["cached_tokens"] = cached
        return Generation(output_ids=ids, logprobs=logprobs, finish_reason=finish,
                          prompt_tokens=int(usage.get("prompt_tokens", n_prompt)), meta=meta)

    async def healthy(self) -> bool:
        """Whether the server answers ``GET /health`` (an engine pool's active health check)."""
        return await probe_health(self._http())

    async def close(self) -> None:
        await self._client.aclose()


def _token_id(token: object) -> int:
    if isinstance(token, int) and not isinstance(token, bool):
        return token
    if isinstance(token, str) and token.startswith("token_id:"):
        return int(token[len("token_id:"):])
    raise ValueError(f"token {token!r} is not 'token_id:N' (is return_tokens_as_token_ids supported?)")
