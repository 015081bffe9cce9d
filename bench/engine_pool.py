"""Engine pool routing: the prefix-cache hit rate with session affinity against round-robin.

Three in-process replicas (``--replicas``) stand for engine servers. Each keeps a prefix cache
the way vLLM and SGLang do (blocks of 16 tokens, each known by the hash of everything up to its
end; ``--cache-tokens`` per replica, least recently used out first) and reports, per request,
how many leading prompt tokens it already held (``cached_tokens``, as the real engines do);
replies are instant (a Hermes call to ``Read``). A real gateway on loopback serves
``--sessions`` Claude-Code-shaped sessions of ``--turns`` turns (``claude_shape.py``: the same
system prompt and tools, a distinct task and distinct ~2.8k-token tool results per session),
run together with asyncio. The caches are sized like a busy server's: together they can hold
every session, one alone only a third of them. Twice, in the same run:

* affinity — ``PoolEngine``: each session pinned to one replica, new ones to the least loaded;
* round-robin — the same replicas, each request to the next one in turn (what a load balancer
  without a session key does).

Printed: prompt tokens, cached tokens and the hit rate of each, and the ratio. Target (issue
17): affinity well above round-robin (srt-slurm #236 measured 56% -> 93% on Claude Code traces).

Run: .venv/bin/python bench/engine_pool.py [--replicas 3] [--sessions 16] [--turns 10]
"""

from __future__ import annotations

import argparse
import asyncio
import itertools
import json
import sys
from collections import OrderedDict
from pathlib import Path
from typing import Any, Sequence

import httpx

sys.path.insert(0, str(Path(__file__).resolve().parent))
sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from claude_shape import Conversation, claude_code_tools, prose, system_prompt  # noqa: E402

from agent_code.engines.instant import InstantEngine  # noqa: E402
from agent_code.engines.pool import PoolEngine, Replica  # noqa: E402
from agent_code.gateway.app import create_app  # noqa: E402
from agent_code.gateway.pipeline import Gateway  # noqa: E402
from agent_code.gateway.server import BackgroundServer  # noqa: E402
from agent_code.render.template import load_renderer  # noqa: E402

BLOCK = 16


class CachingReplica(InstantEngine):
    """An instant engine with a block prefix cache that reports ``cached_tokens``."""

    def __init__(self, renderer: Any, name: str, capacity_tokens: int) -> None:
        super().__init__(renderer)
        self.name, self.capacity = name, capacity_tokens // BLOCK
        self.blocks: OrderedDict[int, None] = OrderedDict()
        self.prompt_tokens = self.cached_tokens = 0

    def _hashes(self, ids: Sequence[int]) -> list[int]:
        out, h = [], 0
        for i in range(0, len(ids) - len(ids) % BLOCK, BLOCK):
            h = hash((h, tuple(ids[i:i + BLOCK])))
            out.append(h)
        return out

    async def generate(self, prompt_ids, sampling, *, session_id=None):
        hashes = self._hashes(prompt_ids)
        hit = 0
        for h in hashes:
            if h not in self.blocks:
                break
            hit += 1
        g = await super().generate(prompt_ids, sampling, session_id=session_id)
        for h in self._hashes(list(prompt_ids) + g.output_ids):   # what it now holds
            self.blocks[h] = None
            self.blocks.move_to_end(h)
        while len(self.blocks) > self.capacity:
            self.blocks.popitem(last=False)
        g.meta["cached_tokens"] = hit * BLOCK
        self.prompt_tokens += len(prompt_ids)
        self.cached_tokens += hit * BLOCK
        return g


class RoundRobin(PoolEngine):
    """The same replicas, each request to the next in turn (no session key)."""

    def __init__(self, engines: Sequence[Any]) -> None:
        super().__init__(engines)
        self._next = itertools.cycle(self.replicas)

    def pick(self, session_id: str | None, avoid: Any = ()) -> Replica:
        return next(self._next)


async def drive(url: str, sessions: int, turns: int, system: str, tools: list[dict[str, Any]],
                result_words: int) -> None:
    async def one(k: int) -> None:
        talk = Conversation("anthropic", system=system, tools=tools, result_words=result_words)
        talk.messages[0] = json.dumps({"role": "user", "content": f"Task {k}: {prose(40, 10_000 + k)}"}).encode()
        async with httpx.AsyncClient(base_url=url, timeout=120) as client:
            for turn in range(turns):
                r = await client.post("/v1/messages", content=talk.body(),
                                      headers={"x-api-key": f"s{k}", "content-type": "application/json"})
                r.raise_for_status()
                talk.add_reply(r.json(), 1000 * (k + 1) + turn)

    await asyncio.gather(*(one(k) for k in range(sessions)))


def run(pool_kind: str, args: argparse.Namespace, renderer: Any, system: str, tools: list) -> tuple[int, int]:
    replicas = [CachingReplica(renderer, f"r{i}", args.cache_tokens) for i in range(args.replicas)]
    engine = PoolEngine(replicas, names=[r.name for r in replicas]) if pool_kind == "affinity" else RoundRobin(replicas)
    gateway = Gateway(engine, renderer, model_name="bench")
    with BackgroundServer(create_app(gateway)) as server:
        asyncio.run(drive(server.url, args.sessions, args.turns, system, tools, args.result_words))
    return sum(r.prompt_tokens for r in replicas), sum(r.cached_tokens for r in replicas)


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--replicas", type=int, default=3)
    ap.add_argument("--sessions", type=int, default=16)
    ap.add_argument("--turns", type=int, default=10)
    ap.add_argument("--result-words", type=int, default=2000, help="words per tool result (~1.4 tokens each)")
    ap.add_argument("--cache-tokens", type=int, default=256_000,
                    help="prefix cache per replica (default: a third of what all sessions end up holding, "
                         "plus room: what a replica can keep of its share)")
    ap.add_argument("--tokenizer", default=None)
    args = ap.parse_args()
    renderer = load_renderer(args.tokenizer)
    system, tools = system_prompt(), claude_code_tools()
    rates = {}
    for kind in ("affinity", "round-robin"):
        prompt, cached = run(kind, args, renderer, system, tools)
        rates[kind] = cached / prompt if prompt else 0.0
        print(f"{kind:12} prompt tokens {prompt:9,d}  cached {cached:9,d}  hit rate {rates[kind]:6.1%}")
    ratio = rates["affinity"] / rates["round-robin"] if rates["round-robin"] else float("inf")
    print(f"{args.replicas} replicas, {args.sessions} sessions x {args.turns} turns: affinity hit rate "
          f"{rates['affinity']:.1%} vs round-robin {rates['round-robin']:.1%} = {ratio:.2f}x")
    return 0


if __name__ == "__main__":
    sys.exit(main())
