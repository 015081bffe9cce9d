"""One verl training step on agent-code rollouts, run by tests/test_trainers_verl.py with
.venv-verl's Python (verl 0.9.1; not collected by pytest: it needs verl).

verl's own ``AgentLoopWorker`` (built from verl's own hydra config, our YAML registered through
``agent_loop_config_path``) runs our agent loop on a batch of rows, ``group`` rows per task sharing
a ``uid``; generation goes through a server manager with verl's ``generate`` contract over
agent-code's scripted engine (verl's real servers need a GPU). The batch it returns goes through
verl's ``core_algos`` (GRPO advantages, the vanilla PPO policy loss, ``agg_loss``) and one optimizer
step of a tiny random-weight Qwen2 over the real Qwen tokenizer. Prints one JSON line of facts.

    python tests/verl_step.py '{"model_dir": ..., "tasks": [...], "group": 2, "script": ..., ...}'
"""

from __future__ import annotations

import asyncio
import json
import os
import sys
import threading
from pathlib import Path

import numpy as np
import torch


def build_model(model_dir: Path, tokenizer_dir: Path) -> None:
    """A random 1-layer Qwen2 over the real vocabulary, saved beside the real tokenizer's files."""
    import shutil

    from transformers import Qwen2Config, Qwen2ForCausalLM

    shutil.copytree(tokenizer_dir, model_dir, dirs_exist_ok=True)
    torch.manual_seed(0)
    config = Qwen2Config(vocab_size=151936, hidden_size=32, intermediate_size=64, num_hidden_layers=1,
                         num_attention_heads=2, num_key_value_heads=1, max_position_embeddings=32768,
                         tie_word_embeddings=True)
    Qwen2ForCausalLM(config).save_pretrained(str(model_dir))


class ScriptedServerManager:
    """verl's ``LLMServerClient.generate`` contract (``request_id``, keyword ``prompt_ids`` and
    ``sampling_params`` with vLLM's keys → ``TokenOutput`` with ``extra_fields["global_steps"]``)
    over agent-code's scripted engine. Records the threads and loops it was called on."""

    def __init__(self, model_dir: Path, script: Path, global_steps: int) -> None:
        from agent_code.engines.scripted import ScriptedEngine
        from agent_code.render.template import load_renderer

        self.engine = ScriptedEngine(script, load_renderer(str(model_dir)))
        self.global_steps = global_steps
        self.threads: set[str] = set()
        self.params: list[dict] = []

    async def generate(self, request_id: str, *, prompt_ids: list[int], sampling_params: dict, **kwargs: object):
        from agent_code.protocols.canonical import SamplingParams
        from verl.workers.rollout.replica import TokenOutput

        self.threads.add(threading.current_thread().name)
        self.params.append({**sampling_params, "prompt_tokens": len(prompt_ids)})
        params = dict(sampling_params)
        sampling = SamplingParams(max_new_tokens=params.pop("max_tokens"), stop=params.pop("stop", []))
        generation = await self.engine.generate(prompt_ids, sampling, session_id=request_id)
        output = TokenOutput(token_ids=generation.output_ids,
                             log_probs=generation.logprobs if params.get("logprobs") else None,
                             stop_reason="completed", extra_fields={"global_steps": self.global_steps})
        output.extra_fields.setdefault("min_global_steps", self.global_steps)   # as LLMServerClient does
        output.extra_fields.setdefault("max_global_steps", self.global_steps)
        return output


def verl_config(model_dir: Path, prompt_length: int, response_length: int, yaml_path: str):
    import verl
    from hydra import compose, initialize_config_dir

    config_dir = os.path.join(os.path.dirname(verl.__file__), "trainer", "config")
    with initialize_config_dir(config_dir=config_dir, version_base=None):
        return compose("ppo_trainer", overrides=[
            f"actor_rollout_ref.model.path={model_dir}", "actor_rollout_ref.rollout.name=vllm",
            f"actor_rollout_ref.rollout.prompt_length={prompt_length}",
            f"actor_rollout_ref.rollout.response_length={response_length}",
            "actor_rollout_ref.rollout.calculate_log_probs=true", "actor_rollout_ref.actor.ppo_micro_batch_size_per_gpu=4",
            f"actor_rollout_ref.rollout.agent.agent_loop_config_path={yaml_path}"])


def rows(config, tokenizer, task_ids: list[str], group: int, parquet: Path):
    """The generation batch as verl's trainer makes it: our dataset (``write_dataset``) read by verl's
    own RLHFDataset and collate_fn, a ``uid`` per prompt, repeated ``group`` times interleaved."""
    import uuid

    from verl.protocol import DataProto
    from verl.utils.dataset.rl_dataset import RLHFDataset, collate_fn

    from agent_code.tasks import bundled_tasks_path, load_tasks
    from agent_code.trainers.verl import write_dataset

    tasks = {t.id: t for t in load_tasks(bundled_tasks_path())}
    write_dataset([tasks[t] for t in task_ids], parquet)
    dataset = RLHFDataset(data_files=[str(parquet)], tokenizer=tokenizer, config=config.data)
    batch = DataProto.from_single_dict(collate_fn([dataset[i] for i in range(len(dataset))]))
    batch.non_tensor_batch["uid"] = np.array([str(uuid.uuid4()) for _ in range(len(batch))], dtype=object)
    return batch.repeat(repeat_times=group, interleave=True)


def response_log_probs(model, batch) -> torch.Tensor:
    """log pi(response token) under ``model`` at every trained position of the padded batch (0
    elsewhere: the loss masks them): each row unpadded (verl's remove-padding), and the LM head
    applied only where the mask is 1 (a 151,936-wide vocabulary over thousands of positions would
    not fit on this machine)."""
    prompts, responses = batch["prompts"], batch["responses"]
    P = prompts.shape[1]
    out = torch.zeros(responses.shape, dtype=torch.float32)
    rows_out = []
    for i in range(responses.shape[0]):
        keep = batch["attention_mask"][i].bool()
        ids = batch["input_ids"][i][keep].unsqueeze(0)
        start = int((~keep[:P]).sum())                  # left padding of the prompt
        hidden = model.model(input_ids=ids).last_hidden_state[0]
        trained = batch["response_mask"][i].nonzero().flatten()
        at = trained + (P - start) - 1                   # the position that predicts response token t
        logits = model.lm_head(hidden[at])
        lp = torch.log_softmax(logits.float(), dim=-1).gather(-1, responses[i][trained].unsqueeze(-1)).squeeze(-1)
        row = torch.zeros(responses.shape[1], dtype=torch.float32).index_put((trained,), lp)
        rows_out.append(row)
    out = torch.stack(rows_out)
    return out


async def overflow(worker, prompt_length: int, response_length: int) -> dict:
    """What verl's own padding does with a record over its fixed lengths (prompt past
    ``prompt_length``, response past ``response_length``): as it is, and laid out by ``fit_lengths``."""
    from verl.experimental.agent_loop.agent_loop import AgentLoopMetrics, AgentLoopOutput

    from agent_code.trainers.core import SlotRecord
    from agent_code.trainers.verl import fit_lengths, output_fields

    def record(prompt: int, response: int) -> SlotRecord:
        return SlotRecord("t", 0, 0, list(range(100, 100 + prompt)), list(range(200, 200 + response)),
                          [1] * response, [-0.5] * response, 1.0, "completed")

    async def padded(rec: SlotRecord, fit: bool):
        if fit:
            fields = output_fields(rec, fit_lengths(rec, prompt_length, response_length))
        else:   # the record as it is
            fields = {"prompt_ids": rec.prompt_ids, "response_ids": rec.response_ids, "response_mask": rec.loss_mask,
                      "response_logprobs": rec.logprobs, "reward_score": rec.reward, "metrics": {}}
        output = AgentLoopOutput(**{**fields, "metrics": AgentLoopMetrics(**fields["metrics"])})
        return await worker._agent_loop_postprocess(output, False, raw_prompt=[])

    short, long = record(10, 20), record(prompt_length + 7, response_length + 30)
    facts: dict = {}
    for fit in (False, True):
        rows = [await padded(short, fit), await padded(long, fit)]
        try:
            out = worker._postprocess(rows)
            facts[f"fit={fit}"] = {"shape": list(out.batch["input_ids"].shape),
                                   "trained": [int(x) for x in out.batch["response_mask"].sum(-1)],
                                   "long_sequence_kept": out.batch["input_ids"][1].tolist()[:prompt_length + response_length]
                                   == (long.prompt_ids + long.response_ids)[:prompt_length + response_length]}
        except Exception as exc:   # noqa: BLE001
            facts[f"fit={fit}"] = {"error": f"{type(exc).__name__}: {str(exc)[:200]}",
                                   "widths": [int(r.input_ids.shape[1]) for r in rows]}
    return facts


async def run(args: dict) -> dict:
    from transformers import Qwen2ForCausalLM
    from verl.experimental.agent_loop.agent_loop import AgentLoopWorker
    from verl.trainer.ppo import core_algos

    from agent_code.trainers import verl as adapter

    model_dir = Path(args["model_dir"])
    build_model(model_dir, Path(args["tokenizer_dir"]))
    config = verl_config(model_dir, args["prompt_length"], args["response_length"], str(adapter.YAML_PATH))
    manager = ScriptedServerManager(model_dir, Path(args["script"]), global_steps=args["global_steps"])
    worker = AgentLoopWorker(config, llm_client=manager)
    gen = rows(config, worker.tokenizer, args["tasks"], args["group"], model_dir.parent / "train.parquet")
    gen.meta_info["global_steps"] = args["global_steps"]
    verl_thread = threading.current_thread().name
    try:
        out = await worker.generate_sequences(gen)
    finally:
        adapter.shutdown()
    batch, extra = out.batch, out.non_tensor_batch
    uid = extra["uid"]
    rewards = batch["rm_scores"].sum(-1)
    advantages, _ = core_algos.compute_grpo_outcome_advantage(
        token_level_rewards=batch["rm_scores"], response_mask=batch["response_mask"], index=uid)

    model = Qwen2ForCausalLM.from_pretrained(str(model_dir))
    before = {n: p.detach().clone() for n, p in model.named_parameters()}
    optimizer = torch.optim.AdamW(model.parameters(), lr=1e-2, weight_decay=0.0)   # moves only what has a gradient
    log_prob = response_log_probs(model, batch)
    loss_fn = core_algos.get_policy_loss_fn("vanilla")
    actor = config.actor_rollout_ref.actor
    from verl.utils.config import omega_conf_to_dataclass
    pg_loss, metrics = loss_fn(old_log_prob=batch["rollout_log_probs"], log_prob=log_prob, advantages=advantages,
                               response_mask=batch["response_mask"].float(), loss_agg_mode="token-mean",
                               config=omega_conf_to_dataclass(actor))
    pg_loss.backward()
    optimizer.step()
    changed = [n for n, p in model.named_parameters() if not torch.equal(p.detach(), before[n])]

    mask = batch["response_mask"]
    tokenizer = worker.tokenizer
    full = [tokenizer.decode(batch["input_ids"][i][batch["attention_mask"][i].bool()]) for i in range(len(mask))]
    trained = [tokenizer.decode(batch["responses"][i][mask[i].bool()]) for i in range(len(mask))]
    return {
        "overflow": await overflow(worker, args["prompt_length"], args["response_length"]),
        "full_text": full, "trained_text": trained,
        "rows": int(mask.shape[0]), "prompt_width": int(batch["prompts"].shape[1]),
        "response_width": int(batch["responses"].shape[1]),
        "trained": [int(x) for x in mask.sum(-1)], "rewards": [float(x) for x in rewards],
        "advantages": [float(advantages[i][mask[i].bool()][0]) if mask[i].any() else 0.0 for i in range(len(mask))],
        "uids": [str(u) for u in uid], "task_ids": [str(t) for t in extra["task_id"]],
        "rollout_ids": [str(r) for r in extra["agent_code_rollout_id"]],
        "status": [str(s) for s in extra["agent_code_status"]],
        "counted": [bool(c) for c in extra["agent_code_counted"]],
        "abort_reasons": [extra["agent_code_abort_reason"][i] for i in range(len(mask))],
        "shifted": [int(s) for s in extra["agent_code_shifted_tokens"]],
        "cut": [int(s) for s in extra["agent_code_cut_tokens"]],
        "min_global_steps": [extra["min_global_steps"][i] for i in range(len(mask))],
        "versions": [[s["version"] for s in v] for v in extra["agent_code_weight_versions"]],
        # the logprobs verl carries are the engine's, at every trained position
        "logprobs_at_trained": bool(((batch["rollout_log_probs"] != 0) == mask.bool()).all()),
        "sequence_fits": all(int(batch["attention_mask"][i].sum()) <= args["prompt_length"] + args["response_length"]
                             for i in range(len(mask))),
        "engine_threads": sorted(manager.threads), "verl_thread": verl_thread,
        "sampling_seen": manager.params[0] if manager.params else {},
        "turn_budgets": [p["prompt_tokens"] + p["max_tokens"] for p in manager.params],
        "loss": float(pg_loss), "loss_finite": bool(torch.isfinite(pg_loss)), "changed": changed,
        "params": len(before), "clipfrac": float(metrics.get("actor/pg_clipfrac", 0.0))
        if isinstance(metrics, dict) else 0.0,
    }


def main() -> int:
    args = json.loads(sys.argv[1])
    facts = asyncio.run(run(args))
    print("VERL_STEP " + json.dumps(facts))
    return 0


if __name__ == "__main__":
    sys.exit(main())
