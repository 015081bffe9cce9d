"""A trainer's side of a rollout step: read finished groups, compute group-normalised advantages.

Runs the bundled bug-fix tasks, two rollouts each (a GRPO group), against an in-process gateway,
takes each group as it finishes (:func:`agent_code.rollout.groups.stream_groups`), drops the
groups whose rewards are all equal (dynamic sampling), and lays the kept samples out as padded
arrays with their advantages (:func:`agent_code.trajectory.batch.pad_batch`): what a
policy-gradient step would consume. No model step is taken here.

    .venv/bin/python examples/trainer_groups.py              # scripted engine: instant, offline
    .venv/bin/python examples/trainer_groups.py --engine llamacpp --samples 4

With the scripted engine the outcome is made up front: sample 0 of every task replays the
reference fix, sample 1 gives up without editing (reward 0), except on one task where it fixes
it too — that group has no reward spread and is dropped.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import sys
import tempfile
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from agent_code.demo.rollout import ROLLOUT_SCRIPT  # noqa: E402
from agent_code.rollout.groups import Group, local_gateway, stream_groups  # noqa: E402
from agent_code.rollout.runner import RolloutConfig  # noqa: E402
from agent_code.tasks import bundled_tasks_path, load_tasks  # noqa: E402
from agent_code.trajectory.batch import as_slime, pad_batch  # noqa: E402

FLAT_TASK = "wordcount-whitespace"   # its two scripted samples both fix the bug


def scripted_groups_script(out: Path) -> Path:
    """The demo's reference fixes as sample 0 of each task; sample 1 gives up, but for FLAT_TASK."""
    lines = [json.loads(line) for line in ROLLOUT_SCRIPT.read_text().splitlines() if line.strip()]
    tasks = sorted({line["session"].rsplit(".", 1)[0] for line in lines})
    script = list(lines)
    for task in tasks:
        if task == FLAT_TASK:
            script += [{**line, "session": f"{task}.1"} for line in lines if line["session"] == f"{task}.0"]
        else:
            script.append({"session": f"{task}.1", "text": "I could not find the bug, so I changed nothing."})
    path = out / "groups_script.jsonl"
    path.write_text("".join(json.dumps(line) + "\n" for line in script))
    return path


async def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--engine", default=None, help="an --engine spec (default: the scripted groups above)")
    ap.add_argument("--samples", type=int, default=2, help="rollouts per task (the group size)")
    ap.add_argument("--want", type=int, default=None, help="stop after this many kept groups")
    args = ap.parse_args()

    tasks = load_tasks(bundled_tasks_path())
    with tempfile.TemporaryDirectory(prefix="trainer-groups-") as tmp:
        engine = args.engine or f"scripted:{scripted_groups_script(Path(tmp))}"
        config = RolloutConfig(samples_per_task=args.samples, concurrency=2, budget=300.0, max_steps=8)
        kept_samples, kept_advantages = [], []

        def dropped(group: Group) -> None:
            print(f"dropped {group.task_id}: rewards {group.rewards}, no spread (no learning signal)")
        async with local_gateway(engine, trajectory_dir=str(Path(tmp) / "trajectories")) as gateway:
            async for group in stream_groups(tasks, config, gateway.url, admin_token=gateway.admin_token,
                                             want=args.want, on_dropped=dropped):
                advantages = group.sample_advantages()
                print(f"group {group.task_id}: rewards {group.rewards} -> advantages "
                      f"{[round(a, 3) for a in group.advantages()]}; {len(group.samples)} samples, "
                      f"{sum(s.trained_tokens for s in group.samples)} trained tokens")
                kept_samples += group.samples
                kept_advantages += advantages
        if not kept_samples:
            print("no group with a reward spread: nothing to train on")
            return 1
        batch = pad_batch(kept_samples, advantages=kept_advantages)
        shapes = {k: tuple(getattr(v, "shape", (len(v),))) for k, v in batch.items()}
        print(f"batch: {len(kept_samples)} samples; " + ", ".join(f"{k} {list(v)}" for k, v in shapes.items()))
        first = as_slime(kept_samples[0], group_index=0, index=0)
        print(f"first sample as slime's Sample: {sorted(first)}; response_length {first['response_length']}, "
              f"reward {first['reward']}, status {first['status']}")
    return 0


if __name__ == "__main__":
    sys.exit(asyncio.run(main()))
