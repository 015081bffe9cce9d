"""The verl adapter (agent_code/trainers/verl.py): agent-code rollouts as verl 0.9 agent loops.

The pure parts (verl's fixed lengths, its TokenOutput as our Generation, the sampling it is
handed) and the loop bridge run here, without verl. The acceptance test runs verl's own code in
.venv-verl (scripts/setup_verl.sh; verl needs transformers<5.11): verl's AgentLoopWorker runs our
agent loop (registered by our YAML) on real rollouts of a bundled task, generating through a
server manager with verl's contract over the scripted engine; the batch goes through verl's GRPO
advantage and policy loss, and one optimizer step of a tiny random Qwen2 over the real Qwen
tokenizer (tests/verl_step.py)."""

from __future__ import annotations

import asyncio
import json
import os
import subprocess
import sys
import threading
from pathlib import Path
from types import SimpleNamespace

import pytest

from agent_code.engines.base import EngineError
from agent_code.protocols.canonical import SamplingParams
from agent_code.rollout.runner import RolloutResult
from agent_code.tasks import bundled_tasks_path, load_tasks
from agent_code.trainers.core import LoopThread, SlotRecord
from agent_code.trainers.verl import (YAML_PATH, VerlEngine, dataset_rows, fit_lengths, generation_of, on_loop,
                                      output_fields, task_id_of, verl_sampling)

REPO = Path(__file__).resolve().parents[1]
VERL_PYTHON = REPO / ".venv-verl" / "bin" / "python"
STEP = REPO / "tests" / "verl_step.py"
TASK = "thermo-fahrenheit"


def record(prompt: list[int], response: list[int], mask: list[int], *, reward: float = 1.0,
           placeholder: bool = False, versions: list | None = None) -> SlotRecord:
    result = RolloutResult("t/0", "t", 0, "t.0.x", "agent-code", reward=reward, turns=2)
    return SlotRecord("t", 0, 0, prompt, response, mask, [-(i + 1) / 8 for i in range(len(response))], reward,
                      "completed", placeholder=placeholder, versions=versions or [], result=result)


# --- verl's fixed lengths -------------------------------------------------------------------------

def test_a_prompt_over_prompt_length_moves_masked_into_the_response_token_exact():
    rec = record([1, 2, 3, 4, 5], [6, 7], [1, 1])
    fitted = fit_lengths(rec, prompt_length=3, response_length=10)
    assert fitted.prompt_ids == [1, 2, 3] and fitted.response_ids == [4, 5, 6, 7]
    assert fitted.prompt_ids + fitted.response_ids == rec.prompt_ids + rec.response_ids   # the same sequence
    assert fitted.response_mask == [0, 0, 1, 1] and fitted.response_logprobs == [0.0, 0.0, -0.125, -0.25]
    assert (fitted.shifted, fitted.cut, fitted.cut_trained) == (2, 0, 0)


def test_a_response_over_response_length_is_cut_off_its_end_and_counted():
    rec = record([1], [6, 7, 8, 9], [1, 0, 1, 1])
    fitted = fit_lengths(rec, prompt_length=4, response_length=2)
    assert fitted.response_ids == [6, 7] and fitted.response_mask == [1, 0] and len(fitted.response_logprobs) == 2
    assert (fitted.shifted, fitted.cut, fitted.cut_trained) == (0, 2, 2)
    fields = output_fields(rec, fitted)
    assert fields["extra_fields"]["agent_code_status"] == "truncated"
    assert fields["extra_fields"]["agent_code_cut_tokens"] == 2


def test_shift_and_cut_together_never_exceed_either_length():
    for p_len in range(0, 7):
        for r_len in range(1, 7):
            rec = record(list(range(p_len)), list(range(10, 10 + r_len)), [1] * r_len)
            for pl in (1, 3, 6):
                for rl in (1, 4, 9):
                    f = fit_lengths(rec, pl, rl)
                    assert len(f.prompt_ids) <= pl and len(f.response_ids) <= rl
                    assert len(f.response_ids) == len(f.response_mask) == len(f.response_logprobs)
                    assert f.prompt_ids + f.response_ids == (rec.prompt_ids + rec.response_ids)[:pl + rl][
                        :len(f.prompt_ids) + len(f.response_ids)]


def test_output_fields_carry_our_mask_logprobs_reward_and_weight_versions():
    versions = [{"turn": 0, "version": "3", "start": 0, "end": 1}, {"turn": 1, "version": "5", "start": 2, "end": 3}]
    rec = record([1, 2], [6, 7, 8], [1, 0, 1], reward=1.0, versions=versions)
    fields = output_fields(rec, fit_lengths(rec, 8, 8), elapsed=1.5)
    assert fields["prompt_ids"] == [1, 2] and fields["response_ids"] == [6, 7, 8]
    assert fields["response_mask"] == [1, 0, 1] and fields["response_logprobs"] == rec.logprobs
    assert fields["reward_score"] == 1.0 and fields["metrics"]["generate_sequences"] == 1.5
    extra = fields["extra_fields"]
    assert (extra["min_global_steps"], extra["max_global_steps"]) == (3, 5)   # verl's staleness fields
    assert extra["agent_code_weight_versions"] == versions and extra["agent_code_counted"]
    assert extra["agent_code_rollout_id"] == "t/0"


def test_a_placeholder_trains_nothing_and_says_so():
    rec = record([1, 2], [6, 7], [0, 0], reward=0.0, placeholder=True)
    extra = output_fields(rec, fit_lengths(rec, 8, 8))["extra_fields"]
    assert extra["agent_code_counted"] is False
    assert output_fields(rec, fit_lengths(rec, 8, 8))["response_mask"] == [0, 0]


def test_every_row_has_the_same_extra_keys():
    """verl stacks extra_fields into the batch by key: a key on some rows only would be None elsewhere."""
    plain = output_fields(record([1], [2], [1]), fit_lengths(record([1], [2], [1]), 4, 4))
    other = output_fields(record([1] * 9, [2], [1], placeholder=True), fit_lengths(record([1] * 9, [2], [1]), 4, 4))
    assert set(plain["extra_fields"]) == set(other["extra_fields"])


# --- verl's TokenOutput, sampling and rows ----------------------------------------------------------

def token_output(ids, logprobs, steps=None, stop="completed"):
    return SimpleNamespace(token_ids=ids, log_probs=logprobs, stop_reason=stop,
                           extra_fields={} if steps is None else {"global_steps": steps})


def test_global_steps_become_the_generations_weight_version():
    gen = generation_of(token_output([5, 6, 99], [-0.1, -0.2, -0.3], steps=12), max_tokens=10, end_ids=[99])
    assert gen.output_ids == [5, 6, 99] and gen.logprobs == [-0.1, -0.2, -0.3] and gen.finish_reason == "stop"
    assert gen.meta == {"weight_version": "12"}
    assert generation_of(token_output([5], [-0.1]), max_tokens=10, end_ids=[99]).meta == {}   # the gateway's own


def test_finish_reason_length_only_when_cut_before_the_end_of_turn():
    assert generation_of(token_output([5, 6], [-1, -1]), max_tokens=2, end_ids=[99]).finish_reason == "length"
    assert generation_of(token_output([5, 99], [-1, -1]), max_tokens=2, end_ids=[99]).finish_reason == "stop"


@pytest.mark.parametrize("logprobs", [None, [-0.1], [-0.1, -0.2, -0.3]])
def test_an_output_whose_logprobs_do_not_match_its_ids_is_refused(logprobs):
    with pytest.raises(EngineError, match="log probs"):
        generation_of(token_output([5, 6], logprobs), max_tokens=10, end_ids=[])


def test_an_aborted_output_is_an_engine_error_not_an_empty_turn():
    with pytest.raises(EngineError, match="aborted"):
        generation_of(token_output([], None, stop="aborted"), max_tokens=10, end_ids=[])


def test_sampling_in_the_keys_verls_servers_read():
    s = SamplingParams(max_new_tokens=50, temperature=0.0, top_p=0.9, top_k=0, stop=["</x>"], seed=4)
    vllm = verl_sampling(s, backend="vllm", max_tokens=7)
    assert vllm == {"temperature": 0.0, "top_p": 0.9, "top_k": -1, "min_p": 0.0, "max_tokens": 7, "logprobs": True,
                    "stop": ["</x>"], "seed": 4}
    assert verl_sampling(s, backend="sglang", max_tokens=7)["sampling_seed"] == 4


def test_dataset_rows_name_the_agent_loop_and_the_task():
    tasks = load_tasks(bundled_tasks_path())
    rows = dataset_rows(tasks)
    assert [r["task_id"] for r in rows] == [t.id for t in tasks]
    assert all(r["agent_name"] == "agent_code" and task_id_of(r) == r["extra_info"]["task_id"] for r in rows)
    assert task_id_of({"extra_info": {"task_id": "x"}}) == "x"
    with pytest.raises(ValueError, match="task_id"):
        task_id_of({"prompt": "fix it"})
    assert "agent_code.trainers.verl.AgentCodeAgentLoop" in YAML_PATH.read_text()


def test_the_example_writes_verls_dataset_and_prints_verls_command(tmp_path):
    pq = pytest.importorskip("pyarrow.parquet")
    out = tmp_path / "tasks.parquet"
    done = subprocess.run([sys.executable, str(REPO / "examples" / "verl_dataset.py"), "--out", str(out), "--n", "8"],
                          capture_output=True, text=True, timeout=120, cwd=REPO)
    assert done.returncode == 0, done.stderr
    rows = pq.read_table(out).to_pylist()
    assert [r["task_id"] for r in rows] == [t.id for t in load_tasks(bundled_tasks_path())]
    assert rows[0]["prompt"][0]["role"] == "user" and rows[0]["agent_name"] == "agent_code"
    assert f"agent_loop_config_path={YAML_PATH}" in done.stdout and "actor_rollout_ref.rollout.n=8" in done.stdout


# --- the loop bridge ----------------------------------------------------------------------------

class LoopServerManager:
    """verl's server manager shape on verl's loop (here: a LoopThread standing in for it)."""

    def __init__(self, steps: int = 7, delay: float = 0.0) -> None:
        self.steps, self.delay = steps, delay
        self.threads: list[str] = []
        self.cancelled = threading.Event()
        self.calls: list[dict] = []

    async def generate(self, request_id, *, prompt_ids, sampling_params):
        self.threads.append(threading.current_thread().name)
        self.calls.append({"request_id": request_id, "prompt_ids": prompt_ids, **sampling_params})
        try:
            await asyncio.sleep(self.delay)
        except asyncio.CancelledError:
            self.cancelled.set()
            raise
        return token_output([11, 12, 99], [-0.5, -0.25, -0.125], steps=self.steps)


def test_the_engine_calls_verls_server_manager_on_verls_loop():
    with LoopThread("verl-loop") as verl, LoopThread("gateway-loop") as gateway:
        manager = LoopServerManager(steps=7)
        engine = VerlEngine(manager, verl.loop, end_ids=[99])
        sampling = SamplingParams(max_new_tokens=64, temperature=1.0)
        gen = gateway.call(engine.generate([1, 2, 3], sampling, session_id="task.0.abc"))
    assert manager.threads == ["verl-loop"]                  # not the gateway's thread
    assert gen.output_ids == [11, 12, 99] and gen.meta["weight_version"] == "7" and gen.prompt_tokens == 3
    call = manager.calls[0]
    assert call["request_id"] == "task.0.abc" and call["prompt_ids"] == [1, 2, 3]   # sticky: the session
    assert call["max_tokens"] == 64 and call["logprobs"] is True


def test_cancelling_the_gateways_turn_cancels_verls_request():
    with LoopThread("verl-loop") as verl, LoopThread("gateway-loop") as gateway:
        manager = LoopServerManager(delay=30)
        engine = VerlEngine(manager, verl.loop, end_ids=[99])
        with pytest.raises(TimeoutError):
            gateway.call(engine.generate([1], SamplingParams()), timeout=0.3)
        assert manager.cancelled.wait(5)


def test_the_process_runtime_gates_its_rollouts_and_shuts_down():
    """verl starts every row of a batch at once: the worker's runtime lets `concurrency` run."""
    from agent_code.render.template import load_renderer
    from agent_code.trainers import verl as adapter

    running, peak = [0], [0]

    async def rollout():
        running[0] += 1
        peak[0] = max(peak[0], running[0])
        await asyncio.sleep(0.05)
        running[0] -= 1
        return 1

    async def rows(rt):
        return await asyncio.gather(*(on_loop(rt.gated(rollout()), rt.thread.loop) for _ in range(5)))

    tokenizer = load_renderer(None).tokenizer.name_or_path
    manager = LoopServerManager()
    with LoopThread("verl-loop") as verl:
        rt = adapter.runtime(manager, verl.loop, tokenizer=tokenizer, max_context_tokens=64,
                             backend="vllm", trajectory_dir=None, concurrency=2)
        try:
            assert adapter.runtime(manager, verl.loop, tokenizer=tokenizer, max_context_tokens=64, backend="vllm",
                                   trajectory_dir=None, concurrency=2) is rt      # one per process
            assert verl.call(rows(rt)) == [1] * 5 and peak[0] == 2
            assert rt.gateway.url.startswith("http://127.0.0.1:")
        finally:
            adapter.shutdown()
    assert rt.thread.loop.is_closed() and adapter._runtime is None


def test_on_loop_on_the_same_loop_just_awaits():
    async def main():
        return await on_loop(asyncio.sleep(0, result=3), asyncio.get_running_loop())
    assert asyncio.run(main()) == 3


def test_agent_code_imports_without_verl():
    code = ("import sys; import agent_code.trainers.verl as v; "
            "assert 'verl' not in sys.modules and 'torch' not in sys.modules, sorted(sys.modules)[:5]; print('ok')")
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=60, cwd=REPO,
                          env={**os.environ, "PYTHONPATH": str(REPO)})
    assert done.returncode == 0 and "ok" in done.stdout, done.stderr


# --- verl's own code, in .venv-verl ---------------------------------------------------------------

def scripted_group(out: Path) -> Path:
    """The demo's reference fix as sample 0 of TASK; sample 1 gives up (a GRPO group with spread)."""
    from agent_code.demo.rollout import ROLLOUT_SCRIPT

    lines = [json.loads(line) for line in ROLLOUT_SCRIPT.read_text().splitlines() if line.strip()]
    script = [line for line in lines if line["session"] == f"{TASK}.0"]
    script.append({"session": f"{TASK}.1", "text": "I could not find the bug, so I changed nothing."})
    path = out / "script.jsonl"
    path.write_text("".join(json.dumps(line) + "\n" for line in script))
    return path


PROMPT_LENGTH, RESPONSE_LENGTH = 1024, 4096


@pytest.fixture(scope="module")
def verl_step(tmp_path_factory):
    if not VERL_PYTHON.exists():
        pytest.skip("VERL NOT TESTED: .venv-verl is absent; run `bash scripts/setup_verl.sh` (about a minute) to "
                    "test the verl adapter against verl's own code")
    from agent_code.render.template import load_renderer

    tmp = tmp_path_factory.mktemp("verl")
    args = {"model_dir": str(tmp / "model"), "tokenizer_dir": load_renderer(None).tokenizer.name_or_path,
            "script": str(scripted_group(tmp)), "tasks": [TASK], "group": 2, "prompt_length": PROMPT_LENGTH,
            "response_length": RESPONSE_LENGTH, "global_steps": 7}
    done = subprocess.run([str(VERL_PYTHON), str(STEP), json.dumps(args)], capture_output=True, text=True,
                          timeout=300, cwd=REPO, env={**os.environ, "PYTHONPATH": str(REPO)})
    facts = [line for line in done.stdout.splitlines() if line.startswith("VERL_STEP ")]
    assert done.returncode == 0 and facts, done.stdout[-3000:] + done.stderr[-6000:]
    return json.loads(facts[-1].removeprefix("VERL_STEP "))


def test_verl_runs_our_agent_loop_one_row_per_rollout_grouped_by_uid(verl_step):
    assert verl_step["rows"] == 2 and verl_step["task_ids"] == [TASK, TASK]
    assert verl_step["rollout_ids"] == [f"{TASK}/0", f"{TASK}/1"]        # k from the row's place in its uid
    assert verl_step["uids"][0] == verl_step["uids"][1]
    assert verl_step["rewards"] == [1.0, 0.0]                            # graded by the task's tests
    assert verl_step["counted"] == [True, True] and verl_step["status"] == ["completed", "completed"]
    assert verl_step["prompt_width"] == PROMPT_LENGTH and verl_step["response_width"] == RESPONSE_LENGTH


def test_verls_batch_trains_exactly_the_sampled_tokens(verl_step):
    fix, give_up = verl_step["trained_text"]
    assert "edit_file" in fix and "5 / 9" in fix and "I could not find the bug" in give_up
    full = verl_step["full_text"][0]
    assert full.startswith("<|im_start|>system") and "def fahrenheit_to_celsius" in full   # the tool's output...
    assert "def fahrenheit_to_celsius" not in fix                                          # ...is not trained
    assert verl_step["logprobs_at_trained"]               # the engine's logprobs sit on the trained tokens
    assert all(n > 0 for n in verl_step["trained"])


def test_the_agents_long_prompt_moves_into_the_response_instead_of_being_cut(verl_step):
    """Claude-Code-style prompts exceed prompt_length: verl would cut their head off; ours keeps it."""
    assert all(n > 0 for n in verl_step["shifted"]) and verl_step["cut"] == [0, 0]
    assert verl_step["sequence_fits"]


def test_each_turns_global_steps_is_its_weight_version(verl_step):
    assert verl_step["versions"][0] and all(v == "7" for vs in verl_step["versions"] for v in vs)
    assert verl_step["min_global_steps"] == [7, 7]
    assert verl_step["engine_threads"] == [verl_step["verl_thread"]]     # verl's server manager on verl's loop
    seen = verl_step["sampling_seen"]
    assert seen["logprobs"] is True and seen["temperature"] == 1.0       # verl's rollout sampling
    # every turn verl's server was asked for fits verl's lengths: prompt + max_tokens <= both lengths
    assert verl_step["turn_budgets"] and max(verl_step["turn_budgets"]) <= PROMPT_LENGTH + RESPONSE_LENGTH


def test_grpo_and_the_policy_loss_take_one_optimizer_step(verl_step):
    assert verl_step["advantages"][0] > 0 > verl_step["advantages"][1]  # verl's GRPO over the uid group
    assert verl_step["loss_finite"] and verl_step["loss"] != 0.0
    assert {"model.embed_tokens.weight", "model.layers.0.self_attn.q_proj.weight"} <= set(verl_step["changed"])


def test_verls_own_padding_breaks_on_an_overlong_record_and_takes_it_fitted(verl_step):
    """The attack: a policy that runs past verl's fixed lengths. As it is, verl's padding cuts
    nothing and the batch cannot be stacked (the whole step fails); fitted, it stacks."""
    raw, fitted = verl_step["overflow"]["fit=False"], verl_step["overflow"]["fit=True"]
    assert "error" in raw and raw["widths"][1] > raw["widths"][0], raw
    assert fitted["shape"] == [2, PROMPT_LENGTH + RESPONSE_LENGTH], fitted
    assert fitted["long_sequence_kept"] and fitted["trained"][1] == RESPONSE_LENGTH - 7
