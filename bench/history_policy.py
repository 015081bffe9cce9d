"""Per-turn prompt cost: the ``tokens`` history policy against a full re-render.

For sessions whose history reaches ~8k, ~32k and ~128k tokens (tool calls with ~1k-token
tool results, Claude-Code style), it measures the cost of building the next turn's
prompt ids both ways, in the same run, on the same session:

* tokens   — find the held prefix, render and tokenize only the new suffix (default)
* template — render the whole conversation with the chat template and tokenize it all
             (the known design; the baseline)

and prints the ratio. The target at 128k is at least 10x less overhead.

Run: .venv/bin/python bench/history_policy.py [--tokenizer DIR] [--sizes 8000,32000,128000]
"""

from __future__ import annotations

import argparse
import statistics
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from agent_code.render.template import load_renderer, qwen3_tokenizer_dir  # noqa: E402
from agent_code.trajectory.history import SessionHistory, plan_prompt  # noqa: E402
from agent_code.trajectory.records import TurnRecord  # noqa: E402

WORDS = "def class return import self value error test file path line result the a of to in".split()
TOOLS = [{"type": "function", "function": {"name": "read_file", "description": "Read a file.",
                                           "parameters": {"type": "object", "properties": {"path": {"type": "string"}},
                                                          "required": ["path"]}}}]


def tool_output(i: int, words: int = 700) -> str:
    return "\n".join(" ".join(WORDS[(i + j + k) % len(WORDS)] for k in range(10)) for j in range(words // 10))


def timed(fn, repeats: int) -> float:
    times = []
    for _ in range(repeats):
        start = time.perf_counter()
        fn()
        times.append(time.perf_counter() - start)
    return statistics.median(times)


def grow_session(renderer, target_tokens: int):
    """Build a session turn by turn (as the gateway would) until its prompt reaches the target."""
    messages: list[dict] = [{"role": "system", "content": "You are a coding agent."},
                            {"role": "user", "content": "Find the bug."}]
    turns: list[TurnRecord] = []
    history = SessionHistory()
    i = 0
    while True:
        plan = plan_prompt(renderer, turns, history, messages, TOOLS, "tokens")
        if len(plan.prompt_ids) >= target_tokens:
            return turns, history, messages, len(plan.prompt_ids)
        reply = {"role": "assistant", "content": "",
                 "tool_calls": [{"type": "function", "function": {"name": "read_file",
                                                                  "arguments": {"path": f"src/m{i}.py"}}}]}
        output = renderer.encode('<tool_call>\n{"name": "read_file", "arguments": {"path": "src/m%d.py"}}\n</tool_call>'
                                 % i) + renderer.end_of_turn_ids[:1]
        turn = TurnRecord.build(session_id="bench", index=len(turns), messages=list(messages), tools=TOOLS,
                                prompt_ids=plan.prompt_ids, output_ids=output, logprobs=[-0.1] * len(output),
                                finish_reason="stop", reply=reply, parent=plan.parent)
        turns.append(turn)
        history.add(turn)
        messages = [*messages, reply, {"role": "tool", "content": tool_output(i)}]
        i += 1


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--tokenizer", default=None)
    ap.add_argument("--sizes", default="8000,32000,128000")
    args = ap.parse_args()
    source = args.tokenizer or (str(qwen3_tokenizer_dir()) if qwen3_tokenizer_dir() else None)
    renderer = load_renderer(source)
    print(f"tokenizer: {renderer.name or source}")
    print(f"{'history':>9} {'turns':>6} {'tokens policy':>14} {'full re-render':>15} {'ratio':>8}")
    for size in (int(s) for s in args.sizes.split(",")):
        turns, history, messages, n_tokens = grow_session(renderer, size)
        token_plan = plan_prompt(renderer, turns, history, messages, TOOLS, "tokens")
        full = renderer.render(messages, TOOLS)
        assert token_plan.prompt_ids.tolist() == full, "the token policy must equal the clean full render here"
        repeats = 5 if size <= 32000 else 3
        t_tokens = timed(lambda: plan_prompt(renderer, turns, history, messages, TOOLS, "tokens"), repeats)
        t_full = timed(lambda: renderer.render(messages, TOOLS, cached=False), repeats)
        print(f"{n_tokens:>9} {len(turns):>6} {t_tokens * 1000:>11.2f} ms {t_full * 1000:>12.2f} ms "
              f"{t_full / t_tokens:>7.1f}x")


if __name__ == "__main__":
    main()
