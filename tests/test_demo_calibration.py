"""The demo's budgets follow a measurement of the machine (issue 16, item 3), its group size
follows the time it has, and a busy machine is said; registered local models resolve by name."""

from __future__ import annotations

import pytest

from agent_code.demo import calibrate as cal
from agent_code.demo.rollout import DEMO_ENGINE, EXPECTED_TURNS, TARGET_SECONDS, calibrated_args, rollout_argv
from agent_code.render import models


def test_budget_follows_the_measured_speed():
    fast = cal.Calibration(prefill_tps=120, generate_tps=30, threads=2, seconds=3, busy=0.1)
    slow = cal.Calibration(prefill_tps=12, generate_tps=3, threads=1, seconds=9, busy=1.9)
    assert fast.turn_seconds() == pytest.approx(cal.TURN_PROMPT_TOKENS / 120 + cal.TURN_OUTPUT_TOKENS / 30
                                                + cal.TURN_TOOL_SECONDS)
    assert fast.budget(8) == round(cal.SAFETY * 8 * fast.turn_seconds())
    assert cal.Calibration(5000, 1000, 2, 1).budget(8) == cal.MIN_BUDGET  # never below the old fixed budget
    assert slow.budget(8) == round(cal.SAFETY * 8 * slow.turn_seconds()) > 5 * fast.budget(8)
    assert not fast.slow and "slow" not in fast.describe(8)
    assert slow.slow and "other processes keep 1.9 of" in slow.describe(8)
    assert not cal.Calibration(12, 3, 1, 9, busy=None).slow  # unknown load: not claimed


def test_demo_args_take_the_calibration(monkeypatch):
    monkeypatch.setattr(cal, "calibrate", lambda spec: cal.Calibration(120, 30, 2, 3, 0.0))
    args, found = calibrated_args([], tasks=4)
    assert found is not None and args[:4] == ["--budget", f"{found.budget(8):.0f}", "--samples-per-task", "2"]
    argv = rollout_argv(*args)
    assert argv[argv.index("--engine") + 1] == DEMO_ENGINE == "llamacpp:qwen2.5-coder-1.5b"
    assert rollout_argv("--engine", "llamacpp").count("--engine") == 1   # the caller's engine wins
    assert argv.count("--budget") == 1 and "--temperature" in argv and argv[argv.index("--max-steps") + 1] == "8"
    assert argv[argv.index("--max-tokens") + 1] == "1024"

    monkeypatch.setattr(cal, "calibrate", lambda spec: cal.Calibration(12, 3, 1, 9, 1.9))
    args, found = calibrated_args(["--engine", "llamacpp:qwen2.5-coder-1.5b"], tasks=4)
    group = 2 if 2 * 4 * EXPECTED_TURNS * found.turn_seconds() <= TARGET_SECONDS else 1
    assert group == 1 and args[args.index("--samples-per-task") + 1] == "1"
    assert float(args[args.index("--budget") + 1]) == found.budget(8)

    def never(spec):
        raise AssertionError("no calibration when budget and group are given, or for another engine")
    monkeypatch.setattr(cal, "calibrate", never)
    assert calibrated_args(["--budget", "50", "--samples-per-task", "3"], 4) == (["--budget", "50",
                                                                                 "--samples-per-task", "3"], None)
    assert calibrated_args(["--engine", "scripted:x.jsonl"], 4)[1] is None


def test_a_calibration_that_cannot_run_leaves_the_args(monkeypatch):
    def broken(spec):
        raise RuntimeError("no xllamacpp")
    monkeypatch.setattr(cal, "calibrate", broken)
    assert calibrated_args(["-k", "1"], 4) == (["-k", "1"], None)


def test_registered_models_resolve_by_name(monkeypatch, tmp_path):
    assert models.resolve_gguf("/some/model.gguf") == "/some/model.gguf"
    monkeypatch.setenv("AGENT_CODE_CACHE", str(tmp_path))
    monkeypatch.setattr(models, "part_paths", lambda *a: None)
    with pytest.raises(models.ModelFileError, match=r"pip install 'agent-code\[local-1-5b\]'"):
        models.model_gguf("qwen2.5-coder-1.5b")
    with pytest.raises(models.ModelFileError, match="unknown local model"):
        models.model_gguf("qwen-99b")
    parts = []
    for i, chunk in enumerate((b"GGUF", b"-part-two")):
        path = tmp_path / f"p{i}.bin"
        path.write_bytes(chunk)
        parts.append(path)
    import hashlib

    fake = models.LocalModel("fake.gguf", hashlib.sha256(b"GGUF-part-two").hexdigest(), ("a", "b"), "pip …")
    monkeypatch.setitem(models.MODELS, "fake", fake)
    monkeypatch.setattr(models, "part_paths", lambda names: parts if names == ("a", "b") else None)
    path = models.model_gguf("fake")
    assert path.read_bytes() == b"GGUF-part-two" and models.resolve_gguf("fake") == str(path)
