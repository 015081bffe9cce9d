"""Time to first token through the gateway against the engine's own, embedded llama.cpp.

The same prompt goes (a) straight to the engine's ``stream`` in this process and (b) through the
gateway over loopback HTTP as a streamed Anthropic ``/v1/messages`` request, timed on the client
to the first ``text_delta``. The two alternate, so the machine's load hits both alike. Two cases:

* ``same prompt``: every request repeats one prompt, so llama.cpp reuses its cached prefix and
  the engine's TTFT is one token's evaluation: the gateway's own cost shows most plainly;
* ``fresh tail``: each request ends in a user message no request had before (a nonce), so the
  engine also evaluates that tail.

Target (issue 14): gateway TTFT <= engine TTFT + 50 ms. Prints medians and p90s per case.

Run: .venv/bin/python bench/ttft.py [--reps 15] [--threads N]
"""

from __future__ import annotations

import argparse
import asyncio
import json
import statistics
import sys
import time
from pathlib import Path

import httpx

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from agent_code.engines.base import Piece  # noqa: E402
from agent_code.engines.llamacpp import LlamaCppEngine  # noqa: E402
from agent_code.gateway.app import create_app  # noqa: E402
from agent_code.gateway.pipeline import Gateway  # noqa: E402
from agent_code.gateway.server import BackgroundServer  # noqa: E402
from agent_code.protocols.canonical import SamplingParams  # noqa: E402
from agent_code.render.template import load_renderer  # noqa: E402

SYSTEM = "You are a terse assistant. Answer with one short word."
MAX_TOKENS = 3


def user_text(nonce: str) -> str:
    return f"Request {nonce}. Reply with the word Hello and nothing else."


def engine_ttft(engine: LlamaCppEngine, prompt_ids: list[int]) -> tuple[float, int]:
    """Seconds to the engine's first piece (the whole short reply is read), and its first id."""
    async def go() -> tuple[float, int]:
        start, first, first_id = time.perf_counter(), None, -1
        async for item in engine.stream(prompt_ids, SamplingParams(max_new_tokens=MAX_TOKENS, temperature=0.0)):
            if first is None and isinstance(item, Piece) and item.output_ids:
                first, first_id = time.perf_counter() - start, item.output_ids[0]
        assert first is not None, "the engine streamed no token"
        return first, first_id
    return asyncio.run(go())


def gateway_ttft(client: httpx.Client, nonce: str, key: str) -> tuple[float, str]:
    """Seconds from sending the request to the first text delta's line (the reply is read whole)."""
    body = {"model": "bench", "max_tokens": MAX_TOKENS, "temperature": 0, "stream": True, "system": SYSTEM,
            "messages": [{"role": "user", "content": user_text(nonce)}]}
    start, first, text = time.perf_counter(), None, ""
    with client.stream("POST", "/v1/messages", json=body, headers={"x-api-key": key}) as response:
        assert response.status_code == 200, response.read()
        for line in response.iter_lines():
            if first is None and line.startswith("data: ") and '"text_delta"' in line:
                first = time.perf_counter() - start
                text = json.loads(line[6:])["delta"]["text"]
    assert first is not None, "the gateway streamed no text"
    return first, text


def summary(values: list[float]) -> str:
    ordered = sorted(values)
    p90 = ordered[min(len(ordered) - 1, int(round(0.9 * (len(ordered) - 1))))]
    return f"median {statistics.median(values) * 1000:7.1f} ms   p90 {p90 * 1000:7.1f} ms"


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--reps", type=int, default=15)
    ap.add_argument("--threads", type=int, default=None, help="llama.cpp threads (default: the machine's)")
    args = ap.parse_args()

    renderer = load_renderer(None)
    engine = LlamaCppEngine(None, n_ctx=4096, n_threads=args.threads)
    gateway = Gateway(engine, renderer, model_name="bench")
    print(f"embedded llama.cpp, default model, {engine.n_threads} threads; {args.reps} alternating reps a case; "
          f"reply of {MAX_TOKENS} tokens at temperature 0")
    ok = True
    with BackgroundServer(create_app(gateway)) as server, httpx.Client(base_url=server.url, timeout=120) as client:
        # warm up, and check that the direct prompt is the gateway's prompt, token for token
        gateway_ttft(client, "same", "warm")
        recorded = list(gateway.store.get("warm").turns[0].prompt_ids)
        direct = renderer.render([{"role": "system", "content": SYSTEM},
                                  {"role": "user", "content": user_text("same")}])
        if list(direct) != recorded:
            raise SystemExit("the direct prompt differs from the gateway's: the comparison would be unfair")
        engine_ttft(engine, recorded)
        for case in ("same prompt", "fresh tail"):
            engine_times, gateway_times = [], []
            for rep in range(args.reps):
                if case == "same prompt":
                    engine_nonce = gateway_nonce = "same"
                else:
                    engine_nonce, gateway_nonce = f"e{rep:04d}", f"g{rep:04d}"
                prompt = renderer.render([{"role": "system", "content": SYSTEM},
                                          {"role": "user", "content": user_text(engine_nonce)}])
                e, first_id = engine_ttft(engine, list(prompt))
                g, first_text = gateway_ttft(client, gateway_nonce, f"{case[:4]}-{rep}")
                engine_times.append(e)
                gateway_times.append(g)
            extra = statistics.median(gateway_times) - statistics.median(engine_times)
            met = extra <= 0.050
            ok &= met
            print(f"\n{case}: first token {renderer.decode([first_id])!r} (engine), {first_text!r} (gateway)")
            print(f"  engine  TTFT  {summary(engine_times)}")
            print(f"  gateway TTFT  {summary(gateway_times)}")
            print(f"  gateway - engine (medians): {extra * 1000:+.1f} ms   target <= +50 ms: {'met' if met else 'NOT met'}")
    asyncio.run(engine.close())
    print("\nall targets met" if ok else "\nsome targets NOT met")


if __name__ == "__main__":
    main()
