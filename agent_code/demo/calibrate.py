"""How fast the embedded model runs on this machine right now, and budgets to match.

The demo's rollouts are bounded by turns (``--max-steps``); the wall-clock budget is only a
safety net. A fixed one (180 s) aborted every rollout on a busy 2-core machine, so it is
computed here from a short measurement instead: the engine prefills the demo's system prompt
(~250 tokens) and samples 32 tokens, and llama.cpp's own timings give the
prefill and generation speeds. The budget is what ``max_steps`` turns take at those speeds
(:data:`TURN_PROMPT_TOKENS` new prompt tokens and :data:`TURN_OUTPUT_TOKENS` sampled ones per
turn, plus :data:`TURN_TOOL_SECONDS` for the tools), times :data:`SAFETY`.
"""

from __future__ import annotations

import asyncio
import os
import time
from pathlib import Path
from dataclasses import dataclass

# what a demo turn is on average (measured on the bundled tasks: the engine reuses the cached
# prompt, so a turn prefills only what is new)
TURN_PROMPT_TOKENS = 500    # the task with its file and failing tests, or the fix's test run
TURN_OUTPUT_TOKENS = 150    # a bundled file written whole (~250 tokens), or a short answer
TURN_TOOL_SECONDS = 2.0     # the tools themselves (a test run)
SAFETY = 3.0
MIN_BUDGET = 180.0
BUSY_CPUS = 0.75            # other processes using this much CPU make the machine "slow"


@dataclass
class Calibration:
    prefill_tps: float       # prompt tokens per second
    generate_tps: float      # sampled tokens per second
    threads: int
    seconds: float           # the measurement itself, model load included
    busy: float | None = None  # CPUs other processes kept busy just before (None: unknown)

    def turn_seconds(self) -> float:
        return (TURN_PROMPT_TOKENS / self.prefill_tps + TURN_OUTPUT_TOKENS / self.generate_tps
                + TURN_TOOL_SECONDS)

    def budget(self, max_steps: int) -> float:
        return max(MIN_BUDGET, round(SAFETY * max_steps * self.turn_seconds()))

    @property
    def slow(self) -> bool:
        """Other processes compete for the CPUs: turns take longer than they would here idle."""
        return self.busy is not None and self.busy >= BUSY_CPUS

    def describe(self, max_steps: int) -> str:
        line = (f"calibration: prefill {self.prefill_tps:.0f} tok/s, generation {self.generate_tps:.1f} tok/s on "
                f"{self.threads} thread(s): ~{self.turn_seconds():.0f} s a turn, budget {self.budget(max_steps):.0f} s "
                f"for {max_steps} turns")
        if self.slow:
            line += (f" — this machine is slow right now: other processes keep {self.busy:.1f} of "
                     f"{os.cpu_count()} CPUs busy; the rollouts get the time they need, the run takes longer")
        return line


def calibrate(engine_spec: str = "llamacpp") -> Calibration:
    """Load the engine of ``engine_spec`` (a ``llamacpp[:PATH]`` spec), time one short
    generation on the demo's real prompt prefix, and close it."""
    from agent_code.agent.prompt import system_prompt
    from agent_code.engines import create_engine
    from agent_code.protocols.canonical import SamplingParams
    from agent_code.render.template import load_renderer

    from agent_code.engines.llamacpp import busy_cpus

    busy = busy_cpus(0.5)
    started = time.perf_counter()
    from agent_code.render.models import resolve_gguf

    model = engine_spec.partition(":")[2].strip()
    renderer = load_renderer(resolve_gguf(model) if model else None)  # the model's own tokenizer
    engine = create_engine(engine_spec, renderer, n_ctx=4096)
    messages = [{"role": "system", "content": system_prompt(Path("calibration"), "bypassPermissions", "", "small")},
                {"role": "user", "content": "Count from one to forty in words, separated by commas."}]
    ids = renderer.render(messages)  # ~250 tokens: one prompt batch, a second or two

    async def run():
        try:
            return await engine.generate(ids, SamplingParams(max_new_tokens=32, temperature=0.0))
        finally:
            await engine.close()

    generation = asyncio.run(run())
    timings = generation.meta.get("timings") or {}
    prefill = float(timings.get("prompt_per_second") or 0) or len(ids) / max(1e-3, time.perf_counter() - started)
    generate = float(timings.get("predicted_per_second") or 0) or 1.0
    return Calibration(prefill, generate, getattr(engine, "n_threads", 0), time.perf_counter() - started, busy)
