"""Fuzzing in CI: ``bench/fuzz.py`` at ~300 inputs per endpoint (a fixed hypothesis seed, so the
same inputs every run) against a real gateway process: 0 crashes (connection errors), 0
unexpected 5xx, every error in its protocol's format, the slow-loris uploads answered 408, and
afterwards ``/healthz`` OK, a valid request answered, no traceback in the server's log. The
acceptance run (10,000 inputs per endpoint) is ``bench/fuzz.py`` itself; see docs/performance.md."""

from __future__ import annotations

import sys
from pathlib import Path

import httpx
import pytest

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "bench"))

pytest.importorskip("hypothesis")
import fuzz  # noqa: E402

INPUTS = 300


def test_fuzz_every_endpoint():
    report = fuzz.run(INPUTS, seed_value=0, loris_connections=2, jobs=1, corpus_size=60)
    print(report.text())
    assert report.ok, report.text()
    assert [t.endpoint for t in report.tallies] == list(fuzz.ENDPOINTS)
    for tally in report.tallies:
        assert tally.inputs >= INPUTS * 0.9, (tally.endpoint, tally.inputs)
        assert len(tally.kinds) >= (1 if tally.endpoint == "get" else 3), tally.kinds  # every kind of input
    # the fuzzing reached past validation: valid requests were answered on every turn endpoint
    statuses = {t.endpoint: t.statuses for t in report.tallies}
    for name in ("messages", "count_tokens", "chat", "responses", "finish"):
        assert statuses[name][200] > 0, (name, statuses[name])
    assert statuses["sessions"][201] > 0


def test_the_checks_can_fail():
    """A 500, an error in the wrong format, a dropped connection and an internal error inside a
    stream are each counted as failures."""
    tally, fuzzer = fuzz.Tally("messages"), fuzz.Fuzzer("http://127.0.0.1:9")
    request = httpx.Request("POST", "http://x/v1/messages")
    answers = [
        httpx.Response(500, json={"type": "error", "error": {"type": "api_error", "message": "boom"}}, request=request),
        httpx.Response(400, json={"error": "flat"}, request=request),
        httpx.Response(200, text='event: error\ndata: {"type": "error", "error": {"type": "api_error", '
                                 '"message": "internal error: KeyError"}}\n\n',
                       headers={"content-type": "text/event-stream"}, request=request),
    ]
    for response in answers:
        fuzzer.check(tally, "POST", "/v1/messages", b"{}", response)
    fuzzer.request(tally, "POST", "/v1/messages", b"{}", {})  # nothing listens on port 9
    fuzzer.close()
    assert [what for what, _ in tally.failures] == ["unexpected 5xx", "error not in the protocol's format",
                                                   "internal error in a stream", "connection error"]
    # and a 529 engine overload is documented, not a failure
    fuzzer.check(tally, "POST", "/v1/messages", b"{}", httpx.Response(
        529, json={"type": "error", "error": {"type": "overloaded_error", "message": "engine error: x"}}, request=request))
    assert len(tally.failures) == 4
