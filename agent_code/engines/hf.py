"""Hugging Face transformers in process (torch), for small models, tests and debugging.

``HFEngine(model_id_or_path, device="cpu")`` loads ``AutoModelForCausalLM`` lazily on first use
(torch is imported then, so the package works without it: ``pip install 'agent-code[hf]'``).

Generation is a manual decoding loop over the model's KV cache rather than ``generate()``: it
samples exactly as configured (temperature, top-k, top-p; greedy at temperature 0; a private
``torch.Generator`` seeded from ``sampling.seed``), records each sampled id with its logprob
(log-softmax of the raw logits, the model's distribution at temperature 1, as the other engines
report), and checks a cancellation flag between steps. The prompt is prefilled in chunks of
``prefill_chunk`` tokens with the same check in between.

Ends: an end-of-sequence id (``eos_ids``, default the model's ``generation_config`` /
``config`` ``eos_token_id`` plus the renderer's ``eos_ids``) → ``"stop"``, the end id included;
a stop string (needs a renderer to decode) → ``"stop"`` through the completing token;
``max_new_tokens`` → ``"length"``.

Cancellation: requests run one at a time in a worker thread. Cancelling the awaiting task sets
the request's flag; the loop stops at the next step (or prefill chunk), and ``generate`` waits
for that before re-raising ``CancelledError``. A queued request that is cancelled never runs.
"""

from __future__ import annotations

import asyncio
import concurrent.futures
import threading
from typing import TYPE_CHECKING, Any, Sequence

from agent_code.engines.base import EngineError, Generation
from agent_code.protocols.canonical import SamplingParams

if TYPE_CHECKING:   # torch and transformers: optional (the hf extra), imported when the model loads
    import torch
    from transformers import PreTrainedModel

    from agent_code.render.template import Renderer


class HFEngine:
    name = "hf"

    def __init__(self, model_id_or_path: str, device: str = "cpu", *, renderer: Renderer | None = None,
                 dtype: str | None = None, eos_ids: Sequence[int] | None = None,
                 prefill_chunk: int = 512, cancel_timeout: float = 60.0):
        self.model_id = str(model_id_or_path)
        self.device = device
        self.renderer = renderer
        self.dtype = dtype
        self._eos_override = list(eos_ids) if eos_ids is not None else None
        self.prefill_chunk = max(1, prefill_chunk)
        self.cancel_timeout = cancel_timeout
        self.eos_ids: list[int] = []
        self.aborted = 0  # generations stopped by cancellation
        self._model: PreTrainedModel | None = None
        self._cache_kw = "past_key_values"
        self._keep_kw: str | None = None
        self._load_lock = threading.Lock()
        self._pool = concurrent.futures.ThreadPoolExecutor(max_workers=1, thread_name_prefix="hf-engine")
        self._inflight: set[threading.Event] = set()
        self._closed = False

    # ----------------------------------------------------------------- loading

    def load(self) -> PreTrainedModel:
        with self._load_lock:
            if self._model is not None:
                return self._model
            try:
                import torch
                from transformers import AutoModelForCausalLM
            except ImportError as exc:
                raise EngineError("the hf engine needs torch: pip install 'agent-code[hf]'") from exc
            kwargs: dict[str, Any] = {}
            if self.dtype:
                kwargs["dtype"] = getattr(torch, self.dtype) if self.dtype != "auto" else "auto"
            try:
                model = AutoModelForCausalLM.from_pretrained(self.model_id, **kwargs)
                model.to(self.device)
                model.eval()
            except Exception as exc:
                raise EngineError(f"cannot load the model {self.model_id!r}: {type(exc).__name__}: {exc}") from exc
            import inspect
            params = inspect.signature(model.forward).parameters
            # transformers >= 5.2x names the KV cache argument ``cache``; older ones ``past_key_values``
            self._cache_kw = "cache" if "cache" in params else "past_key_values"
            self._keep_kw = next((k for k in ("logits_to_keep", "num_logits_to_keep") if k in params), None)
            self.eos_ids = self._eos_override if self._eos_override is not None else self._model_eos(model)
            self._model = model
            return model

    def _model_eos(self, model: PreTrainedModel) -> list[int]:
        ids: list[int] = []
        for source in (getattr(model, "generation_config", None), model.config):
            value = getattr(source, "eos_token_id", None) if source is not None else None
            for v in (value if isinstance(value, (list, tuple)) else [value]):
                if isinstance(v, int) and v not in ids:
                    ids.append(v)
        for v in getattr(self.renderer, "eos_ids", None) or ():
            if v not in ids:
                ids.append(int(v))
        return ids

    # ----------------------------------------------------------------- generation

    def _sample(self, logits: torch.Tensor, sampling: SamplingParams, generator: torch.Generator) -> int:
        import torch   # loaded by load()
        temperature = 1.0 if sampling.temperature is None else float(sampling.temperature)
        if temperature <= 0:
            return int(torch.argmax(logits))
        scores = logits / temperature
        if sampling.top_k is not None and 0 < sampling.top_k < scores.shape[-1]:
            kth = torch.topk(scores, sampling.top_k).values[-1]
            scores = scores.masked_fill(scores < kth, float("-inf"))
        if sampling.top_p is not None and sampling.top_p < 1.0:
            sorted_scores, order = torch.sort(scores, descending=True)
            cumulative = torch.softmax(sorted_scores, dim=-1).cumsum(dim=-1)
            drop = cumulative - torch.softmax(sorted_scores, dim=-1) >= sampling.top_p  # keep the first over p
            scores = scores.masked_fill(torch.zeros_like(drop).scatter(0, order, drop), float("-inf"))
        probs = torch.softmax(scores, dim=-1)
        return int(torch.multinomial(probs, 1, generator=generator))

    def _run(self, prompt_ids: list[int], sampling: SamplingParams, cancel: threading.Event) -> dict[str, Any]:
        if cancel.is_set():
            return {"ids": [], "logprobs": [], "finish": "abort"}
        model = self.load()
        import torch   # loaded by load()
        generator = torch.Generator(device=self.device)
        if sampling.seed is not None:
            generator.manual_seed(int(sampling.seed))
        else:
            generator.seed()
        stops = [s for s in sampling.stop if s]
        window = 4 * max((len(s) for s in stops), default=0) + 2
        ids: list[int] = []
        logprobs: list[float] = []
        finish, stop = "length", None
        with torch.inference_mode():
            past: object = None
            logits = None
            for start in range(0, len(prompt_ids), self.prefill_chunk):
                if cancel.is_set():
                    self.aborted += 1
                    return {"ids": [], "logprobs": [], "finish": "abort"}
                chunk = torch.tensor([prompt_ids[start:start + self.prefill_chunk]], device=self.device)
                past, logits = self._forward(model, chunk, past, last_only=True)
            assert logits is not None  # an empty prompt was refused before (generate)
            for _ in range(int(sampling.max_new_tokens)):
                if cancel.is_set():
                    self.aborted += 1
                    finish = "abort"
                    break
                logits = logits.float()
                token = self._sample(logits, sampling, generator)
                ids.append(token)
                logprobs.append(float(torch.log_softmax(logits, dim=-1)[token]))
                if token in self.eos_ids:
                    finish = "stop"
                    break
                if stops and self.renderer is not None:
                    tail = self.renderer.decode(ids[-window:])
                    stop = next((s for s in stops if s in tail), None)
                    if stop is not None:
                        finish = "stop"
                        break
                past, logits = self._forward(model, torch.tensor([[token]], device=self.device), past)
        return {"ids": ids, "logprobs": logprobs, "finish": finish, "stop": stop}

    def _forward(self, model: PreTrainedModel, input_ids: torch.Tensor, cache: object,
                 last_only: bool = False) -> tuple[object, torch.Tensor]:
        """(the KV cache, opaque here: the model's own; the next-token logits)."""
        kwargs: dict[str, Any] = {"input_ids": input_ids, "use_cache": True}
        if cache is not None:
            kwargs[self._cache_kw] = cache
        if last_only and self._keep_kw:
            kwargs[self._keep_kw] = 1  # full-vocabulary logits for the last position only
        out = model(**kwargs)
        cache = out["cache"] if "cache" in out else out["past_key_values"]
        return cache, out.logits[0, -1]

    async def generate(self, prompt_ids: Sequence[int], sampling: SamplingParams, *,
                       session_id: str | None = None) -> Generation:
        if self._closed:
            raise EngineError("the hf engine is closed")
        prompt = [int(i) for i in prompt_ids]
        if not prompt:
            raise EngineError("empty prompt")
        cancel = threading.Event()
        self._inflight.add(cancel)
        future = self._pool.submit(self._run, prompt, sampling, cancel)
        try:
            result = await asyncio.wrap_future(future)
        except asyncio.CancelledError:
            cancel.set()
            await asyncio.wait({asyncio.wrap_future(future)}, timeout=self.cancel_timeout)
            raise
        except EngineError:
            raise
        except Exception as exc:
            raise EngineError(f"hf generation failed: {type(exc).__name__}: {exc}") from exc
        finally:
            self._inflight.discard(cancel)
        meta: dict[str, Any] = {"engine": self.name}
        if result.get("stop"):
            meta["stop"] = result["stop"]
        return Generation(output_ids=result["ids"], logprobs=result["logprobs"], finish_reason=result["finish"],
                          prompt_tokens=len(prompt), meta=meta)

    async def close(self) -> None:
        self._closed = True
        for cancel in list(self._inflight):
            cancel.set()
        await asyncio.get_running_loop().run_in_executor(None, self._pool.shutdown, True)
        self._model = None
