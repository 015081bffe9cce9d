"""Engines: prompt token ids in, sampled token ids + logprobs out (see :mod:`.base`).

``create_engine(spec, renderer)`` builds one from a spec string:

=====================  =========================================================
``scripted:PATH``      replies from a JSONL script (:mod:`.scripted`)
``llamacpp``           llama.cpp in process on the default model (:mod:`.llamacpp`)
``llamacpp:PATH.gguf`` llama.cpp in process on that GGUF
``sglang:URL``         an SGLang server's native ``/generate`` (:mod:`.sglang`)
``vllm:URL``           a vLLM server's ``/v1/completions`` (:mod:`.vllm`)
``hf:MODEL``           transformers + torch in process (:mod:`.hf`), hub id or directory
``instant[:TEXT]``     the same short reply at once, every request (:mod:`.instant`;
                       default: a Hermes call to ``Read``) — for load tests
``sglang:URL1,URL2``   a pool of replicas, sessions pinned to one (:mod:`.pool`);
``vllm:URL1,URL2``     likewise for vLLM servers
``SPEC*N``             a pool of N in-process replicas of ``SPEC`` (``llamacpp*2``)
=====================  =========================================================

Each engine module is imported only when its spec is used, so optional dependencies
(xllamacpp, torch) are needed only by those who use them.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from agent_code.engines.base import Engine, EngineError, Generation

if TYPE_CHECKING:
    from agent_code.render.template import Renderer

__all__ = ["Engine", "EngineError", "Generation", "ENGINE_SPECS", "create_engine"]

ENGINE_SPECS = ("scripted:PATH", "llamacpp", "llamacpp:PATH.gguf", "llamacpp:qwen2.5-coder-1.5b", "sglang:URL",
                "vllm:URL", "hf:MODEL", "instant[:TEXT]", "sglang:URL1,URL2", "SPEC*N")
MAX_REPLICAS = 64


def _pool(spec: str, renderer: Renderer, options: dict[str, Any]) -> Engine | None:
    """A :class:`~agent_code.engines.pool.PoolEngine` when ``spec`` names several replicas."""
    import re

    from agent_code.engines.pool import PoolEngine

    times = re.fullmatch(r"(.+)\*(\d+)", spec.strip())
    if times:
        n = int(times.group(2))
        if not 1 <= n <= MAX_REPLICAS:
            raise ValueError(f"engine spec {spec!r}: between 1 and {MAX_REPLICAS} replicas")
        return PoolEngine([create_engine(times.group(1), renderer, **options) for _ in range(n)])
    kind, _, arg = spec.partition(":")
    if kind.strip().lower() in ("sglang", "vllm") and "," in arg:
        urls = [u.strip() for u in arg.split(",")]
        if not all(urls) or len(urls) > MAX_REPLICAS:
            raise ValueError(f"engine spec {spec!r}: give 1 to {MAX_REPLICAS} comma-separated URLs")
        return PoolEngine([create_engine(f"{kind}:{u}", renderer, **options) for u in urls],
                          names=urls)
    return None


def create_engine(spec: str, renderer: Renderer, **options: Any) -> Engine:
    """An engine for ``spec`` (see the module doc); ``options`` go to its constructor."""
    pooled = _pool(spec, renderer, options)
    if pooled is not None:
        return pooled
    kind, _, arg = spec.partition(":")
    kind = kind.strip().lower()
    arg = arg.strip()
    if kind == "scripted" and arg:
        from agent_code.engines.scripted import ScriptedEngine
        return ScriptedEngine(arg, renderer, **options)
    if kind == "instant":
        from agent_code.engines.instant import InstantEngine
        return InstantEngine(renderer, arg or None, **options)
    if kind == "llamacpp":
        from agent_code.engines.llamacpp import LlamaCppEngine
        from agent_code.render.models import resolve_gguf

        # a path, or a registered model's name (llamacpp:qwen2.5-coder-1.5b): its GGUF
        return LlamaCppEngine(resolve_gguf(arg) if arg else None, **options)
    if kind == "sglang" and arg:
        from agent_code.engines.sglang import SGLangEngine
        return SGLangEngine(arg, **options)
    if kind == "vllm" and arg:
        from agent_code.engines.vllm import VLLMEngine
        return VLLMEngine(arg, **options)
    if kind == "hf" and arg:
        from agent_code.engines.hf import HFEngine
        return HFEngine(arg, renderer=renderer, **options)
    raise ValueError(f"unknown engine spec {spec!r}; expected one of: {', '.join(ENGINE_SPECS)}")
