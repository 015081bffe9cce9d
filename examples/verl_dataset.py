"""Train with verl on agent-code rollouts: write verl's dataset of tasks, print verl's command.

Each row names one task (``task_id``) and our agent loop (``agent_name: agent_code``); verl repeats
it ``rollout.n`` times (a GRPO group under one ``uid``) and runs one agent-code rollout per row
through agent_code/trainers/verl.py, generating on verl's own vLLM/SGLang servers. verl itself
needs its GPUs; this script only writes the parquet (with agent-code's own pyarrow) and prints
the command to run in verl's environment (docs/trainers.md: installing verl beside agent-code).

    .venv/bin/python examples/verl_dataset.py --out agent_code_tasks.parquet
    .venv/bin/python examples/verl_dataset.py --tasks my_tasks.jsonl --model Qwen/Qwen2.5-Coder-7B-Instruct
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from agent_code.tasks import bundled_tasks_path, load_tasks  # noqa: E402
from agent_code.trainers.verl import YAML_PATH, write_dataset  # noqa: E402


def verl_command(train: Path, *, model: str, n: int, prompt_length: int, response_length: int) -> list[str]:
    return ["python -m verl.trainer.main_ppo", "algorithm.adv_estimator=grpo",
            f"data.train_files={train}", f"data.val_files={train}", "data.return_raw_chat=True",
            f"data.max_prompt_length={prompt_length}", f"data.max_response_length={response_length}",
            f"actor_rollout_ref.model.path={model}", "actor_rollout_ref.rollout.name=vllm",
            f"actor_rollout_ref.rollout.n={n}", "actor_rollout_ref.rollout.calculate_log_probs=True",
            f"actor_rollout_ref.rollout.agent.agent_loop_config_path={YAML_PATH}"]


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--tasks", type=Path, default=None, help="a tasks JSONL (default: the bundled tasks)")
    ap.add_argument("--out", type=Path, default=Path("agent_code_tasks.parquet"))
    ap.add_argument("--model", default="Qwen/Qwen2.5-Coder-0.5B-Instruct")
    ap.add_argument("--n", type=int, default=4, help="rollouts per task (the GRPO group)")
    ap.add_argument("--prompt-length", type=int, default=4096)
    ap.add_argument("--response-length", type=int, default=28672)
    args = ap.parse_args()

    tasks = load_tasks(args.tasks or bundled_tasks_path())
    write_dataset(tasks, args.out)
    print(f"wrote {len(tasks)} rows ({', '.join(t.id for t in tasks)}) to {args.out}")
    if args.tasks:
        print(f"set tasks: {args.tasks.resolve()} in a copy of {YAML_PATH} and point agent_loop_config_path at it")
    print("run in verl's environment (agent-code installed there too):")
    print("  " + " \\\n    ".join(verl_command(args.out.resolve(), model=args.model, n=args.n,
                                               prompt_length=args.prompt_length,
                                               response_length=args.response_length)))
    return 0


if __name__ == "__main__":
    sys.exit(main())
