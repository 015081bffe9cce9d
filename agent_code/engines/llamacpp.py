"""llama.cpp in process, through xllamacpp's embedded llama.cpp server.

How it is driven (xllamacpp 2026.x):

* load — ``params = xllamacpp.CommonParams()``; ``params.model.path``, ``n_ctx``, ``n_batch``,
  ``n_parallel``, ``cpuparams[_batch].n_threads``, ``verbosity = -1`` (silent),
  ``warmup = False``; ``server = xllamacpp.Server(params)``. Construction blocks until the model
  is loaded (1.4-2 s for the default 0.5B Q4_K_M on 2 cores) and starts llama.cpp's own server
  loop (continuous batching, prompt cache) plus an HTTP listener on 127.0.0.1 that we do not use
  (it gets a random API key so nothing else on the host can use it).
* generate — ``server.handle_completions(body, callback)``, llama.cpp's OpenAI-compatible
  ``/v1/completions`` handler called directly, with ``body = {"prompt": [token ids],
  "max_tokens", "temperature", "top_p", "top_k", "min_p": 0, "seed", "n_probs": 1,
  "stream": true, "return_progress": true, "json_schema"?}``. Each streamed chunk carries
  ``choices[0].logprobs.content = [{"id", "logprob", "bytes", ...}]``: the sampled token ids and
  their logprobs, in order (the end-of-generation token included). The final chunk has
  ``finish_reason`` and ``usage``; errors arrive as ``{"error": {...}}`` chunks.
  ``sampling.tool_grammar`` (a JSON schema) goes in as ``json_schema`` (llama.cpp compiles it
  with LLGuidance): the whole completion is constrained to the schema. ``sampling.grammar``
  goes in as ``grammar`` instead: LLGuidance Lark when it starts with ``%llguidance {}``
  (``%json {schema}`` embeds a JSON schema in a rule), else GBNF. Beware: a Lark grammar that
  does not compile is silently ignored (the output is unconstrained); a bad GBNF is a 400.

Semantics:

* Logprobs are llama.cpp's ``n_probs`` values for the sampled token: log-softmax of the raw
  logits (the model's distribution at temperature 1, before top-k/top-p), like vLLM's default.
* Unset sampling fields mean plain sampling from the model (temperature 1, top-p 1, no top-k,
  no min-p), not llama.cpp's defaults (0.8 / 0.95 / 40 / 0.05), so engines agree.
* Stop strings are matched here, on the sampled tokens' bytes, not by llama.cpp (which drops the
  token that completes a stop string from its output): ``output_ids`` run through the token that
  completes the first stop string, finish ``"stop"``, the string in ``meta["stop"]``.

Cancellation: the blocking call runs in a worker thread; the stream callback returns ``True``
when the awaiting task is cancelled, which makes xllamacpp drop the response, and llama.cpp
cancels the task and frees the slot. The callback runs once per sampled token and, thanks to
``return_progress``, once per prompt batch (``n_batch`` tokens: 256 by default, ~2 s of
prefill on 2 cores). llama.cpp handles the cancel between batches, so the slot is free within
about two prompt batches, or one token when generating. A request still queued
behind others (all ``n_parallel`` slots busy) gets no callback until it starts, so it is
cancelled when it starts. ``generate`` waits for that (at most ``cancel_timeout`` s) before
re-raising ``CancelledError``; a result that arrives later is discarded.

``stream`` is ``generate`` piece by piece: the callback wakes the event loop for each sampled
token, and the tokens gathered since the last wake-up go out as one piece (closing or
cancelling the stream cancels the request the same way).

Measured (2 cores, x86-64 prebuilt CPU wheel, default Qwen2.5-Coder-0.5B Q4_K_M, 2 threads):
load 1.4 s at n_ctx 4096, 2.0 s at the default 32768; prefill ~100-160 tok/s; generation
~31-38 tok/s (``n_probs: 1`` and streaming cost nothing measurable); resident memory ~650 MB
at n_ctx 4096, ~980 MB at 32768 (the process, tokenizer excluded).
"""

from __future__ import annotations

import asyncio
import concurrent.futures
import json
import os
import secrets
import threading
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any, AsyncIterator, Callable, Sequence

from agent_code.engines.base import EngineError, EngineRequestError, Generation, Piece, request_error_status
from agent_code.protocols.canonical import SamplingParams

if TYPE_CHECKING:   # an optional package (the local extra), imported when the model loads
    import xllamacpp


def _default_threads() -> int:
    """The CPUs this process may use, less those that other processes keep busy right now
    (:func:`busy_cpus`), at least 1 and at most 16; ``AGENT_CODE_THREADS`` sets it. llama.cpp's
    threads wait for each other at every layer, so a thread on a core that another busy process
    holds slows all of them: on 2 cores beside 2 busy processes the 0.5B model generated 3
    tokens/s with 2 threads and 10-11 with 1."""
    given = os.environ.get("AGENT_CODE_THREADS", "").strip()
    if given.isdigit() and int(given) > 0:
        return min(int(given), 256)
    try:
        n = len(os.sched_getaffinity(0))
    except (AttributeError, OSError):
        n = os.cpu_count() or 1
    busy = busy_cpus()
    return max(1, min(n - round(busy or 0.0), 16))


def busy_cpus(interval: float = 0.25) -> float | None:
    """How many CPUs' worth of time the machine spent busy over ``interval`` seconds (from
    ``/proc/stat``; this process is idle meanwhile, so it is what the others use); None where
    there is no ``/proc/stat``."""
    def sample() -> tuple[int, int] | None:
        try:
            with open("/proc/stat", encoding="ascii") as f:
                fields = [int(x) for x in f.readline().split()[1:]]
        except (OSError, ValueError):
            return None
        idle = fields[3] + (fields[4] if len(fields) > 4 else 0)  # idle + iowait
        return sum(fields[:8]), idle   # user nice system idle iowait irq softirq steal

    first = sample()
    if first is None:
        return None
    time.sleep(interval)
    second = sample()
    if second is None or second[0] <= first[0]:
        return None
    total, idle = second[0] - first[0], second[1] - first[1]
    return (total - idle) / total * (os.cpu_count() or 1)


@dataclass
class _Run:
    """What one streamed completion produced (filled by the callback, in the worker thread)."""

    stops: list[bytes]
    cancel: threading.Event
    ids: list[int] = field(default_factory=list)
    logprobs: list[float] = field(default_factory=list)
    text: bytearray = field(default_factory=bytearray)
    finish: str | None = None
    stop: str | None = None
    usage: dict = field(default_factory=dict)
    timings: dict = field(default_factory=dict)
    error: object = None   # llama.cpp's error object (JSON), or our own message
    chunks: int = 0
    notify: Callable[[], None] | None = None   # called (in the worker thread) after each chunk

    def on_chunk(self, chunk: dict[str, Any] | str | bytes) -> bool:
        """xllamacpp's stream callback: True stops the stream (and the task in llama.cpp)."""
        try:
            self._take(chunk)
            if self.notify is not None:
                self.notify()
        except Exception as exc:  # never let an exception escape into the C++ caller
            self.error = f"malformed chunk from llama.cpp ({type(exc).__name__}: {exc}): {chunk!r:.300}"
        return self.cancel.is_set() or self.stop is not None or self.error is not None

    def _take(self, chunk: dict[str, Any] | str | bytes) -> None:
        self.chunks += 1
        data: dict[str, Any] = json.loads(chunk) if isinstance(chunk, (str, bytes)) else chunk
        if "error" in data:
            self.error = data["error"]
            return
        if data.get("usage"):
            self.usage = data["usage"]
        if data.get("timings"):
            self.timings = data["timings"]
        for choice in data.get("choices") or ():
            for entry in (choice.get("logprobs") or {}).get("content") or ():
                if self.stop is not None:
                    break  # tokens sampled after the stop string: not ours
                self.ids.append(int(entry["id"]))
                self.logprobs.append(float(entry["logprob"]))
                if self.stops:
                    self._check_stop(bytes(entry.get("bytes") or b""))
            if choice.get("finish_reason"):
                self.finish = choice["finish_reason"]

    def _check_stop(self, piece: bytes) -> None:
        if not piece:
            return
        start = len(self.text)
        self.text += piece
        longest = max(len(s) for s in self.stops)
        window = bytes(self.text[max(0, start - longest + 1):])
        for stop in self.stops:
            if stop in window:
                self.stop = stop.decode("utf-8")
                return


class LlamaCppEngine:
    """An in-process llama.cpp engine (see the module doc)."""

    name = "llamacpp"
    supports_grammar = True  # honours SamplingParams.grammar (LLGuidance Lark or GBNF)

    def __init__(self, model_path: str | os.PathLike | None = None, *, n_ctx: int = 32768,
                 n_threads: int | None = None, n_parallel: int = 1, n_batch: int = 256,
                 n_gpu_layers: int | None = None, cache_ram_mib: int | None = None,
                 cancel_timeout: float = 60.0, verbose: bool = False):
        self._model_path = Path(model_path) if model_path is not None else None
        self.n_ctx = n_ctx
        self.n_threads = n_threads  # None: chosen when the model loads (_default_threads samples the load)
        self.n_parallel = max(1, n_parallel)
        self.n_batch = n_batch
        self.n_gpu_layers = n_gpu_layers
        self.cache_ram_mib = cache_ram_mib
        self.cancel_timeout = cancel_timeout
        self.verbose = verbose
        self.load_seconds: float | None = None
        self._server: xllamacpp.Server | None = None
        self._load_lock = threading.Lock()
        self._pool = concurrent.futures.ThreadPoolExecutor(
            max_workers=self.n_parallel + 2, thread_name_prefix="llamacpp")
        self._inflight: set[threading.Event] = set()
        self._closed = False

    @property
    def model_path(self) -> Path:
        if self._model_path is None:
            from agent_code.render.models import default_gguf
            self._model_path = default_gguf()
        return self._model_path

    # ----------------------------------------------------------------- loading

    def load(self) -> xllamacpp.Server:
        """Load the model (once; blocking). ``generate`` calls this in a worker thread."""
        with self._load_lock:
            if self._closed:
                raise EngineError("the llama.cpp engine is closed")
            if self._server is not None:
                return self._server
            try:
                import xllamacpp
            except ImportError as exc:
                raise EngineError("the llamacpp engine needs xllamacpp: pip install 'agent-code[local]'") from exc
            try:
                path = self.model_path
            except Exception as exc:
                raise EngineError(f"no model for the llamacpp engine: {exc}") from exc
            if not path.is_file():
                raise EngineError(f"llama.cpp model file not found: {path}")
            params = xllamacpp.CommonParams()
            params.model.path = str(path)
            params.n_ctx = self.n_ctx
            params.n_batch = self.n_batch
            params.n_ubatch = min(self.n_batch, 512)
            params.n_parallel = self.n_parallel
            params.kv_unified = self.n_parallel > 1  # every slot may use the whole context
            if not self.n_threads:
                self.n_threads = _default_threads()
            params.cpuparams.n_threads = self.n_threads
            params.cpuparams_batch.n_threads = self.n_threads
            params.verbosity = 3 if self.verbose else -1
            params.warmup = False
            params.n_threads_http = 1
            params.api_keys = [secrets.token_hex(16)]  # the unused HTTP listener is not for others
            if self.n_gpu_layers is not None:
                params.n_gpu_layers = self.n_gpu_layers
            if self.cache_ram_mib is not None:
                params.cache_ram_mib = self.cache_ram_mib
            start = time.perf_counter()
            try:
                self._server = xllamacpp.Server(params)
            except Exception as exc:
                raise EngineError(f"llama.cpp could not load {path}: {exc}") from exc
            self.load_seconds = time.perf_counter() - start
            return self._server

    # ----------------------------------------------------------------- generation

    def request_body(self, prompt_ids: Sequence[int], sampling: SamplingParams) -> dict[str, Any]:
        body: dict[str, Any] = {
            "prompt": [int(i) for i in prompt_ids],
            "max_tokens": int(sampling.max_new_tokens),
            **sampling.plain(top_k_off=0),
            "n_probs": 1,
            "stream": True,
            "return_progress": True,
            "cache_prompt": True,
        }
        if sampling.seed is not None:
            body["seed"] = int(sampling.seed)
        if sampling.grammar:
            body["grammar"] = sampling.grammar
        elif sampling.tool_grammar:
            body["json_schema"] = sampling.tool_grammar
        return body

    def _run(self, body: dict[str, Any], run: _Run) -> _Run:
        server = self.load()
        if run.cancel.is_set():
            return run
        try:
            server.handle_completions(body, run.on_chunk)
        except Exception as exc:
            run.error = f"{type(exc).__name__}: {exc}"
        return run

    async def generate(self, prompt_ids: Sequence[int], sampling: SamplingParams, *,
                       session_id: str | None = None) -> Generation:
        generation = None
        async for item in self._steps(prompt_ids, sampling, pieces=False):
            generation = item
        assert isinstance(generation, Generation)
        return generation

    def stream(self, prompt_ids: Sequence[int], sampling: SamplingParams, *,
               session_id: str | None = None) -> AsyncIterator[Piece | Generation]:
        return self._steps(prompt_ids, sampling, pieces=True)

    async def _steps(self, prompt_ids: Sequence[int], sampling: SamplingParams, *,
                     pieces: bool) -> AsyncIterator[Piece | Generation]:
        """The request's pieces (when ``pieces``) and then its Generation."""
        if self._closed:
            raise EngineError("the llama.cpp engine is closed")
        if sampling.max_new_tokens is not None and sampling.max_new_tokens <= 0:
            yield Generation([], [], "length", prompt_tokens=len(prompt_ids))
            return
        body = self.request_body(prompt_ids, sampling)
        run = _Run(stops=[s.encode("utf-8") for s in sampling.stop if s], cancel=threading.Event())
        woken = asyncio.Event()
        if pieces:
            loop = asyncio.get_running_loop()

            def notify() -> None:
                loop.call_soon_threadsafe(woken.set)
            run.notify = notify
        self._inflight.add(run.cancel)
        done = asyncio.wrap_future(self._pool.submit(self._run, body, run))
        sent = 0
        try:
            while not done.done():
                wake = asyncio.ensure_future(woken.wait())
                try:
                    waiting: set[asyncio.Future[Any]] = {done, wake}
                    await asyncio.wait(waiting, return_when=asyncio.FIRST_COMPLETED)
                finally:
                    wake.cancel()
                woken.clear()
                if pieces and len(run.ids) > sent and run.error is None:
                    end = len(run.ids)
                    yield Piece(run.ids[sent:end], run.logprobs[sent:end])
                    sent = end
            await done
        except (asyncio.CancelledError, GeneratorExit):
            run.cancel.set()
            await asyncio.wait({done}, timeout=self.cancel_timeout)
            raise
        finally:
            self._inflight.discard(run.cancel)
        generation = self._generation(run, prompt_ids)
        if pieces and len(generation.output_ids) > sent:
            yield Piece(generation.output_ids[sent:], generation.logprobs[sent:])
        yield generation

    def _generation(self, run: _Run, prompt_ids: Sequence[int]) -> Generation:
        if run.error is not None:   # one with a 4xx code (a prompt over the context) refuses this request only
            code = run.error.get("code") if isinstance(run.error, dict) else None
            raise (EngineRequestError if request_error_status(code) else EngineError)(
                f"llama.cpp: {_error_text(run.error)}")
        if run.stop is not None:
            finish = "stop"
        elif run.finish in ("stop", "length"):
            finish = run.finish
        elif run.cancel.is_set():
            finish = "abort"
        else:
            raise EngineError(f"llama.cpp ended the stream without a finish reason after {run.chunks} chunks")
        meta: dict[str, Any] = {"engine": self.name}
        if run.stop is not None:
            meta["stop"] = run.stop
        if run.usage:
            meta["cached_tokens"] = (run.usage.get("prompt_tokens_details") or {}).get("cached_tokens", 0)
        if run.timings:
            meta["timings"] = run.timings
        return Generation(output_ids=run.ids, logprobs=run.logprobs, finish_reason=finish,
                          prompt_tokens=int(run.usage.get("prompt_tokens", len(prompt_ids))), meta=meta)

    async def close(self) -> None:
        """Stop running requests, then free the model (its destructor joins llama.cpp's loop)."""
        self._closed = True
        for cancel in list(self._inflight):
            cancel.set()
        loop = asyncio.get_running_loop()
        await loop.run_in_executor(None, self._shutdown)

    def _shutdown(self) -> None:
        self._pool.shutdown(wait=True, cancel_futures=True)
        with self._load_lock:
            server, self._server = self._server, None
        del server


def _error_text(error: object) -> str:
    if isinstance(error, dict):
        message = error.get("message") or error
        kind = error.get("type")
        return f"{message} ({kind})" if kind else str(message)
    return str(error)
