"""TRL's GRPOTrainer on agent-code rollouts: a real optimizer step or two, on the CPU.

The bundled bug-fix tasks are the dataset (each prompt is a task id); every training step TRL asks
for G=2 completions of 2 prompts, the rollout_func runs those 4 rollouts (agent-code in local
sandboxes, against an in-process gateway, graded by the tasks' tests) and hands TRL their token
ids, loss masks, logprobs and rewards. The policy is a tiny random-weight Qwen2 over the real Qwen
tokenizer, so this runs anywhere; the rollouts come from the scripted engine (sample 0 of every
task replays the reference fix, sample 1 gives up), so the groups have a reward spread.

    .venv/bin/python examples/train_trl.py               # 2 steps, scripted engine, ~1-2 min on 2 cores
    .venv/bin/python examples/train_trl.py --steps 1

For a real run, pass your model and an engine that serves it (``--engine vllm:URL`` …) and a
``tokenizer=`` for the gateway; keeping the engine's weights in step with the trained policy is
the engine's side (TRL syncs its own vLLM before each rollout_func call when ``use_vllm``).
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import tempfile
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from agent_code.demo.rollout import ROLLOUT_SCRIPT  # noqa: E402
from agent_code.rollout.runner import RolloutConfig  # noqa: E402
from agent_code.tasks import bundled_tasks_path, load_tasks  # noqa: E402
from agent_code.trainers.trl import agent_rollout_func, reward_from_rollouts, task_dataset  # noqa: E402


def groups_script(out: Path, task_ids: list[str]) -> Path:
    """The scripted engine's replies: the demo's reference fix as sample 0 of each task (reward 1),
    sample 1 gives up without editing (reward 0)."""
    lines = [json.loads(line) for line in ROLLOUT_SCRIPT.read_text().splitlines() if line.strip()]
    script = [line for line in lines if line["session"].rsplit(".", 1)[0] in task_ids]
    script += [{"session": f"{t}.1", "text": "I could not find the bug, so I changed nothing."} for t in task_ids]
    path = out / "script.jsonl"
    path.write_text("".join(json.dumps(line) + "\n" for line in script))
    return path


def tiny_qwen(vocab_size: int) -> Any:
    """A random-weight one-layer Qwen2 (no download)."""
    import torch
    from transformers import Qwen2Config, Qwen2ForCausalLM
    torch.manual_seed(0)
    return Qwen2ForCausalLM(Qwen2Config(vocab_size=vocab_size, hidden_size=32, intermediate_size=64,
                                        num_hidden_layers=1, num_attention_heads=2, num_key_value_heads=1,
                                        max_position_embeddings=32768, tie_word_embeddings=True))


def cpu_fast_lm_head() -> None:
    """On a device without Triton, TRL's fused LM head scores every position of every row (the long
    agent prompts too: minutes here); on Triton devices only the completion positions. Take that
    path on the CPU: the same numbers, ~10x faster. (A private switch of TRL 1.16: skipped if gone.)"""
    import trl.trainer.utils as trl_utils
    if hasattr(trl_utils, "_use_triton"):
        trl_utils._use_triton = lambda device: True


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--steps", type=int, default=2, help="optimizer steps (each: 2 tasks x 2 rollouts)")
    args = ap.parse_args()
    os.environ.setdefault("TRL_EXPERIMENTAL_SILENCE", "1")   # rollout_func is experimental in TRL 1.16
    import torch
    from trl import GRPOConfig, GRPOTrainer

    from agent_code.render.template import load_renderer

    cpu_fast_lm_head()
    tokenizer = load_renderer(None).tokenizer          # the default local model's (Qwen) tokenizer
    tasks = load_tasks(bundled_tasks_path())
    model = tiny_qwen(len(tokenizer))
    before = [p.detach().clone() for p in model.parameters()]
    with tempfile.TemporaryDirectory(prefix="train-trl-") as tmp:
        config = RolloutConfig(samples_per_task=2, concurrency=4, max_steps=8, budget=120)
        trl_args = GRPOConfig(output_dir=str(Path(tmp) / "out"), use_cpu=True, bf16=False, max_steps=args.steps,
                              per_device_train_batch_size=4, num_generations=2, learning_rate=1e-2, beta=0.0,
                              max_completion_length=4096, report_to=[], save_strategy="no", logging_steps=1,
                              seed=0, disable_tqdm=True)
        with agent_rollout_func(tasks, config, engine=f"scripted:{groups_script(Path(tmp), [t.id for t in tasks])}",
                                trajectory_dir=str(Path(tmp) / "trajectories")) as rollouts:
            trainer = GRPOTrainer(model=model, reward_funcs=reward_from_rollouts, args=trl_args,
                                  train_dataset=task_dataset(tasks), processing_class=tokenizer, rollout_func=rollouts)
            trainer.train()
    for entry in trainer.state.log_history:
        if "loss" in entry:
            print(f"step {entry['step']}: loss {float(entry['loss']):.4f}, reward {float(entry['reward']):.3f}, "
                  f"completion tokens {float(entry['completions/mean_length']):.0f} (mean, trained)")
    changed = any(not torch.equal(p.detach(), b) for p, b in zip(model.parameters(), before))
    print(f"parameters changed: {changed}")
    return 0 if changed else 1


if __name__ == "__main__":
    sys.exit(main())
