"""SGLang over HTTP: its native token-in/token-out ``POST /generate``.

Request::

    {"input_ids": [...], "rid": "...", "return_logprob": true, "logprob_start_len": -1,
     "stream": false,
     "sampling_params": {"max_new_tokens", "temperature", "top_p", "top_k", "min_p",
                         "stop", "sampling_seed"?, "json_schema"?}}

Response: ``{"text", "output_ids"?, "meta_info": {"id", "finish_reason": {"type": "stop" |
"length" | "abort", "matched"?, "message"?}, "prompt_tokens", "completion_tokens",
"cached_tokens", "weight_version", "output_token_logprobs": [[logprob, token_id, text|null], ...]}}``.
``output_ids`` is used when the server returns it, else the ids of ``output_token_logprobs``;
they must agree in length with the logprobs. ``logprob_start_len: -1`` asks for the output
tokens' logprobs only (no prompt logprobs, which would cost a prefill pass).

Stop strings go to SGLang, whose output ids run through the token that completes the stop
string (the text is trimmed, not the ids) — the same semantics as the other engines here. A
``finish_reason`` of type ``abort`` that we did not ask for (e.g. the prompt is longer than the
context) raises :class:`EngineError` with SGLang's message — an :class:`EngineRequestError` when its
``status_code`` blames the request, as does an HTTP 400/413/422 or an error event in a stream (a
prompt over the context): those refuse this request and say nothing of the server's health.
``healthy`` probes ``GET /health``.

Weight version: SGLang puts its ``--weight-version`` in every reply's ``meta_info["weight_version"]``
(a string, set again by ``POST /update_weight_version {"new_version"}`` or by a weight update that
names one, as slime's does). It becomes the generation's ``meta["weight_version"]``, which the
gateway records for the turn in place of its own counter (:mod:`agent_code.gateway.weights`).
``"default"``, SGLang's value until someone sets one, says nothing and is left out (the gateway's
counter stands), as is anything that is not a short non-empty string or integer.

Streaming (``stream``): the same request with ``"stream": true`` answers server-sent events, one
``data: {...}`` per decode step and ``data: [DONE]``; each event has ``meta_info.completion_tokens``
(the count so far) and ``finish_reason`` (null until the last). SGLang sends ``output_ids`` and
``output_token_logprobs`` either cumulative (its default) or only the new ones
(``--incremental-streaming-output``); the count tells which. An error (e.g. the prompt is too long)
comes as a ``data: {"error": {"message"}}`` event.

Cancellation: the awaiting task's cancellation closes the HTTP request and sends
``POST /abort_request {"rid": rid}`` (shielded, bounded by ``abort_timeout``) before
``CancelledError`` propagates, so the scheduler frees the request at its next step instead of
waiting for SGLang to notice the disconnect.

Session affinity: every request of a session gets ``rid = "<session>_t<n>"`` (n counts that
session's requests here), and the header ``X-SMG-Routing-Key: <session>``. SGLang's model
gateway (SMG, the ``sglang-router`` successor) pins a routing key to one worker, taking the key
from the body ``rid`` with its ``_t<n>``/``_r<n>`` suffixes stripped, or from
``x-smg-routing-key`` when there is no rid; its ``cache_aware`` policy needs no key at all. A
single SGLang server ignores both. Sessionless requests get a random rid.
"""

from __future__ import annotations

import asyncio
import itertools
import json
import re
import uuid
from typing import Any, AsyncIterator, Sequence

import httpx

from agent_code.engines.base import EngineError, EngineRequestError, Generation, Piece, request_error_status
from agent_code.engines.http_client import (LoopClient, http_error, new_part, probe_health, raise_error_event, sse_json,
                                            token_ids)
from agent_code.protocols.canonical import SamplingParams

ROUTING_HEADER = "X-SMG-Routing-Key"
_RID_UNSAFE = re.compile(r"[^A-Za-z0-9.\-]")
UNSET_WEIGHT_VERSION = "default"   # SGLang's --weight-version until one is set
MAX_WEIGHT_VERSION_CHARS = 256     # the gateway's admin resume takes no longer one


def reported_weight_version(value: object) -> str | None:
    """The weight version a reply's ``meta_info`` names, or None where it names none of its own."""
    if isinstance(value, bool) or not isinstance(value, (str, int)):
        return None
    text = str(value).strip()
    if not text or text == UNSET_WEIGHT_VERSION or len(text) > MAX_WEIGHT_VERSION_CHARS:
        return None
    return text


class SGLangEngine:
    name = "sglang"

    def __init__(self, base_url: str, *, timeout: float = 600.0, abort_timeout: float = 5.0,
                 api_key: str | None = None, routing_header: str | None = ROUTING_HEADER,
                 transport: httpx.AsyncBaseTransport | None = None):
        if not base_url.startswith(("http://", "https://")):
            base_url = "http://" + base_url
        self.base_url = base_url.rstrip("/")
        self.timeout = timeout
        self.abort_timeout = abort_timeout
        self.routing_header = routing_header
        self._client = LoopClient(self.base_url, timeout=timeout, transport=transport,
                                  headers={"Authorization": f"Bearer {api_key}"} if api_key else {})
        self._turns: dict[str, itertools.count] = {}

    def _http(self) -> httpx.AsyncClient:
        return self._client.get()

    def new_rid(self, session_id: str | None) -> str:
        if session_id is None:
            return uuid.uuid4().hex
        turn = next(self._turns.setdefault(session_id, itertools.count(1)))
        return f"{_RID_UNSAFE.sub('-', session_id)}_t{turn}"

    def request_body(self, prompt_ids: Sequence[int], sampling: SamplingParams, rid: str) -> dict[str, Any]:
        params: dict[str, Any] = {
            "max_new_tokens": int(sampling.max_new_tokens),
            **sampling.plain(top_k_off=-1),
            "stop": list(sampling.stop),
        }
        if sampling.seed is not None:
            params["sampling_seed"] = int(sampling.seed)
        if sampling.tool_grammar:
            params["json_schema"] = json.dumps(sampling.tool_grammar)
        return {"input_ids": [int(i) for i in prompt_ids], "sampling_params": params, "rid": rid,
                "return_logprob": True, "logprob_start_len": -1, "stream": False}

    async def generate(self, prompt_ids: Sequence[int], sampling: SamplingParams, *,
                       session_id: str | None = None) -> Generation:
        rid = self.new_rid(session_id)
        body = self.request_body(prompt_ids, sampling, rid)
        headers = {self.routing_header: session_id} if session_id and self.routing_header else {}
        client = self._http()
        try:
            response = await client.post("/generate", json=body, headers=headers)
        except asyncio.CancelledError:
            await self._abort(client, rid)
            raise
        except httpx.HTTPError as exc:
            raise EngineError(f"SGLang at {self.base_url} failed: {type(exc).__name__}: {exc}") from exc
        return self._parse(response, len(prompt_ids), rid)

    def stream(self, prompt_ids: Sequence[int], sampling: SamplingParams, *,
               session_id: str | None = None) -> AsyncIterator[Piece | Generation]:
        return self._stream(prompt_ids, sampling, session_id)

    async def _stream(self, prompt_ids: Sequence[int], sampling: SamplingParams,
                      session_id: str | None) -> AsyncIterator[Piece | Generation]:
        rid = self.new_rid(session_id)
        body = {**self.request_body(prompt_ids, sampling, rid), "stream": True}
        headers = {self.routing_header: session_id} if session_id and self.routing_header else {}
        client = self._http()
        ids: list[int] = []
        logprobs: list[float] = []
        last: dict[str, Any] | None = None
        try:
            async with client.stream("POST", "/generate", json=body, headers=headers) as response:
                if response.status_code != 200:
                    await response.aread()
                    raise http_error("SGLang /generate", response)
                async for event in sse_json(response):
                    new_ids, new_logprobs, meta = self._event(event, ids, logprobs)
                    ids += new_ids
                    logprobs += new_logprobs
                    if new_ids:
                        yield Piece(new_ids, new_logprobs)
                    if meta.get("finish_reason") is not None:
                        last = meta
                        break
        except (asyncio.CancelledError, GeneratorExit):
            await self._abort(client, rid)
            raise
        except httpx.HTTPError as exc:
            raise EngineError(f"SGLang at {self.base_url} failed: {type(exc).__name__}: {exc}") from exc
        except (ValueError, KeyError, IndexError, TypeError, AttributeError, OverflowError) as exc:
            raise EngineError(f"SGLang sent a malformed stream event: {type(exc).__name__}: {str(exc)[:300]}") from exc
        if last is None:
            raise EngineError("SGLang's stream ended before the reply finished")
        triples = [[lp, i, None] for lp, i in zip(logprobs, ids)]
        try:
            yield self._generation({"output_ids": ids, "meta_info": {**last, "output_token_logprobs": triples}},
                                   len(prompt_ids), rid)
        except (ValueError, KeyError, TypeError, AttributeError) as exc:
            raise EngineError(f"SGLang's last stream event is malformed: {type(exc).__name__}: {exc}") from exc

    @staticmethod
    def _event(event: dict[str, Any], ids: list[int], logprobs: list[float]) -> tuple[list[int], list[float], dict[str, Any]]:
        """The ids and logprobs a streamed event adds, and its ``meta_info``."""
        raise_error_event(event, "SGLang")
        meta = event["meta_info"]
        triples = meta.get("output_token_logprobs") or []
        chunk_logprobs = [float(t[0]) for t in triples]
        chunk_ids = event.get("output_ids")
        chunk_ids = token_ids(chunk_ids if chunk_ids is not None else [t[1] for t in triples])
        total = meta["completion_tokens"]
        new_ids = new_part(chunk_ids, ids, total, "output ids")
        new_logprobs = new_part(chunk_logprobs, logprobs, total, "logprobs")
        if len(new_ids) != len(new_logprobs):
            raise EngineError(f"SGLang streamed {len(new_ids)} output ids but {len(new_logprobs)} logprobs "
                              "(is return_logprob supported by this server?)")
        return new_ids, new_logprobs, meta

    async def _abort(self, client: httpx.AsyncClient, rid: str) -> None:
        """Tell SGLang to drop ``rid`` — shielded, so a cancelled caller still sends it."""
        async def send() -> None:
            try:
                await client.post("/abort_request", json={"rid": rid}, timeout=self.abort_timeout)
            except httpx.HTTPError:
                pass  # the server also aborts requests whose client went away
        task = asyncio.ensure_future(send())
        try:
            await asyncio.shield(task)
        except asyncio.CancelledError:
            await asyncio.wait({task}, timeout=self.abort_timeout)

    def _parse(self, response: httpx.Response, n_prompt: int, rid: str) -> Generation:
        if response.status_code != 200:
            raise http_error("SGLang /generate", response)
        try:
            return self._generation(response.json(), n_prompt, rid)
        except (ValueError, KeyError, IndexError, TypeError, AttributeError, OverflowError) as exc:
            raise EngineError(f"SGLang returned a malformed /generate response: {type(exc).__name__}: "
                              f"{str(exc)[:200]}: {response.text[:300]}") from exc

    def _generation(self, data: dict[str, Any] | list[dict[str, Any]], n_prompt: int, rid: str) -> Generation:
        """The Generation in a decoded ``/generate`` body (any shape error raises ValueError,
        KeyError, IndexError, TypeError or AttributeError; the caller words it)."""
        if isinstance(data, list):
            data = data[0]
        meta = data["meta_info"]
        triples = meta.get("output_token_logprobs") or []
        logprobs = [float(t[0]) for t in triples]
        ids = data.get("output_ids")
        ids = token_ids(ids if ids is not None else [t[1] for t in triples])
        finish = meta.get("finish_reason") or {}
        if isinstance(finish, str):
            finish = {"type": finish}
        if len(ids) != len(logprobs):
            raise EngineError(f"SGLang returned {len(ids)} output ids but {len(logprobs)} logprobs "
                              "(is return_logprob supported by this server?)")
        kind = finish.get("type")
        if kind == "abort":   # one that names a status blaming the request (too long a prompt) is a refusal
            error = EngineRequestError if request_error_status(finish.get("status_code")) else EngineError
            raise error(f"SGLang aborted the request: {finish.get('message') or finish}")
        if kind not in ("stop", "length"):
            raise EngineError(f"SGLang returned an unknown finish reason {finish!r}")
        extra: dict[str, Any] = {"engine": self.name, "rid": rid}
        if isinstance(finish.get("matched"), str):
            extra["stop"] = finish["matched"]
        if "cached_tokens" in meta:
            extra["cached_tokens"] = meta["cached_tokens"]
        version = reported_weight_version(meta.get("weight_version"))
        if version is not None:
            extra["weight_version"] = version
        return Generation(output_ids=ids, logprobs=logprobs, finish_reason=kind,
                          prompt_tokens=int(meta.get("prompt_tokens", n_prompt)), meta=extra)

    async def healthy(self) -> bool:
        """Whether the server answers ``GET /health`` (an engine pool's active health check)."""
        return await probe_health(self._http())

    async def close(self) -> None:
        await self._client.aclose()
