"""Issue 16, item 4: a task's rollouts are a group; the summary says pass@k, how many tasks
were solved at least once, and how many groups carry a learning signal (rewards that differ)."""

from __future__ import annotations

import math

import pytest

from agent_code.rollout.export import cache_text, groups_text, pass_at_k, render_report, summarize
from agent_code.rollout.runner import RolloutResult


def _result(task: str, k: int, reward: float | None, abort: str | None = None, **tokens: int) -> RolloutResult:
    r = RolloutResult(f"{task}/{k}", task, k, f"{task}.{k}.x", "agent-code", reward=reward)
    if abort:
        r.abort(abort)
    r.tokens.update(tokens)
    return r


def test_pass_at_k_is_the_unbiased_estimate():
    # by enumeration: the share of k-subsets of n samples (c passing) with at least one pass
    import itertools

    for n in range(1, 7):
        for c in range(n + 1):
            for k in range(1, n + 1):
                subsets = list(itertools.combinations([True] * c + [False] * (n - c), k))
                assert pass_at_k(n, c, k) == pytest.approx(sum(any(s) for s in subsets) / len(subsets))
    assert pass_at_k(10, 3, 1) == pytest.approx(0.3)
    assert pass_at_k(4, 1, 2) == pytest.approx(1 - math.comb(3, 2) / math.comb(4, 2))
    with pytest.raises(ValueError):
        pass_at_k(2, 1, 3)


def test_groups_spread_and_pass_at_k_in_the_summary():
    results = [
        _result("a", 0, 1.0), _result("a", 1, 0.0),            # solved once: spread
        _result("b", 0, 0.0), _result("b", 1, 0.0),            # all zero: no signal
        _result("c", 0, 1.0), _result("c", 1, 1.0),            # all solved: no signal either
        _result("d", 0, None, "budget"), _result("d", 1, 0.0),  # one never graded: no spread
    ]
    s = summarize(results)
    assert (s["groups"], s["groups_solved"], s["groups_with_spread"]) == (4, 2, 1)
    assert [t["spread"] for t in s["tasks"].values()] == [True, False, False, False]
    assert s["pass_at"] == {1: pytest.approx((0.5 + 0 + 1 + 0) / 4), 2: pytest.approx((1 + 0 + 1 + 0) / 4)}
    line = groups_text(s)
    assert line == "groups: 2/4 tasks solved at least once · pass@1 38% · pass@2 50% · 1/4 groups with a reward spread"
    assert line in render_report(results)
    assert groups_text(summarize([])) == "groups: none"


def test_uneven_groups_report_pass_at_k_up_to_the_smallest():
    s = summarize([_result("a", 0, 1.0), _result("a", 1, 0.0), _result("a", 2, 0.0), _result("b", 0, 0.0)])
    assert sorted(s["pass_at"]) == [1]


def test_engine_cache_line_only_when_the_engine_reports_it():
    plain = summarize([_result("a", 0, 1.0)])
    assert plain["cached_prompt_tokens"] is None and cache_text(plain) is None
    s = summarize([_result("a", 0, 1.0, engine_prompt=4000, cached=3000),
                   _result("a", 1, 0.0, engine_prompt=1000, cached=0)])
    assert cache_text(s) == "engine prefix cache: 3,000 of 5,000 prompt tokens reused (60%)"


def test_the_rollouts_sampling_opens_each_session(monkeypatch):
    """--temperature/--top-p/--top-k reach the gateway as the session's sampling, --max-tokens and
    --max-context-tokens as its caps."""
    import asyncio

    from typer.testing import CliRunner

    from agent_code.cli import rollout as cli_rollout
    from agent_code.rollout.client import GatewayClientError
    from agent_code.rollout.runner import RolloutConfig, run_rollout

    opened = []

    class Client:
        base_url = "http://127.0.0.1:9"

        async def open_session(self, session_id, **options):
            opened.append(options)
            raise GatewayClientError("stop here")

    class Task:
        id = "t"

    config = RolloutConfig(sampling={"temperature": 0.7}, max_new_tokens=1024, max_context_tokens=32768)
    result, samples = asyncio.run(run_rollout(Task(), 0, config, Client()))
    assert opened == [{"max_turns": None, "sampling": {"temperature": 0.7}, "max_new_tokens": 1024,
                       "max_context_tokens": 32768}]
    assert result.abort_reason == "gateway" and samples == []

    seen = {}

    async def fake_run(tasks, config, *a, **k):
        seen["config"] = config
        return 0
    monkeypatch.setattr(cli_rollout, "_run", fake_run)
    out = CliRunner().invoke(cli_rollout.app, ["bundled", "--engine", "scripted:x.jsonl", "--temperature", "0.7",
                                               "--top-p", "0.8", "--top-k", "20", "--max-tokens", "64",
                                               "--max-context-tokens", "4096",
                                               "--out", str(__import__("tempfile").mkdtemp())])
    assert out.exit_code == 0, out.output
    assert seen["config"].sampling == {"temperature": 0.7, "top_p": 0.8, "top_k": 20}
    assert (seen["config"].max_new_tokens, seen["config"].max_context_tokens) == (64, 4096)
    assert seen["config"].tool_profile == "full"  # auto: full on a scripted engine
