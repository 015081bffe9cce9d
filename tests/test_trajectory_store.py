"""TurnLog durability, crash recovery, and the jsonl/parquet sample export."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from agent_code.trajectory.records import TurnRecord
from agent_code.trajectory.samples import build_samples
from agent_code.trajectory.store import TurnLog, read_samples, recover, safe_name, write_samples


def rec(session: str, index: int, prompt: list[int], output: list[int], parent: int | None = None,
        finish: str = "stop") -> TurnRecord:
    return TurnRecord.build(session_id=session, index=index, messages=[{"role": "user", "content": "hi"}],
                            tools=None, prompt_ids=prompt, output_ids=output,
                            logprobs=[-0.25 * (k + 1) for k in range(len(output))], finish_reason=finish,
                            reply={"role": "assistant", "content": "ok"}, parent=parent)


def session(sid: str) -> list[TurnRecord]:
    return [rec(sid, 0, [1, 2], [10, 11]), rec(sid, 1, [1, 2, 10, 11, 50], [12, 13], parent=0)]


def test_safe_name() -> None:
    names = {safe_name(s) for s in ["a/b", "a_b", "../../etc/passwd", "x" * 500, "", "ümlaut id", "a b"]}
    assert len(names) == 7
    for n in names:
        assert "/" not in n and ".." not in n and len(n) <= 80 and n


def test_turn_log_append_and_recover_with_torn_line(tmp_path: Path) -> None:
    log = TurnLog(tmp_path)
    turns = session("sess/1")
    for r in turns:
        path = log.append(r)
    log.append(rec("other", 0, [7], [8, 9], finish="length"))
    assert path.parent == tmp_path / "sessions" and path.name.endswith(".turns.jsonl")
    assert len(path.read_text().splitlines()) == 2
    assert [r.to_dict() for r in log.read("sess/1")] == [r.to_dict() for r in turns]
    # a crash mid-write: half a JSON line at the end
    third = json.dumps(rec("sess/1", 2, [1, 2, 10, 11, 50, 12, 13, 51], [14]).to_dict())
    with open(path, "a") as fh:
        fh.write(third[: len(third) // 2])
    samples = recover(tmp_path)
    assert [s.session_id for s in samples] == ["other", "sess/1"]
    other, main = samples
    assert main.metadata["turn_indices"] == [0, 1]
    assert main.status == "aborted" and main.reward is None and main.metadata["recovered"] is True
    assert main.loss_mask == [1, 1, 0, 1, 1]
    assert other.status == "aborted"
    scored = recover(tmp_path, reward=1.0, status=None)
    assert [s.reward for s in scored] == [1.0, 1.0]
    assert [s.status for s in scored] == ["truncated", "completed"]
    # the session goes on after a restart: the new turn is not glued onto the torn fragment
    log.append(rec("sess/1", 2, [1, 2, 10, 11, 50, 12, 13, 51], [15]))
    assert [r.index for r in log.read("sess/1")] == [0, 1, 2]
    assert [r.output_ids.tolist() for r in log.read("sess/1")][-1] == [15]


def test_recover_empty(tmp_path: Path) -> None:
    assert recover(tmp_path) == []


def test_write_samples_jsonl_and_parquet_round_trip(tmp_path: Path) -> None:
    pytest.importorskip("pyarrow")
    a = build_samples(session("A"), reward=1.0, rollout_id="r0", metadata={"task": "x"})
    b = build_samples(session("B"), reward=None)
    written = write_samples(a, tmp_path)
    written += write_samples(b, tmp_path)
    assert [p.name for p in written] == [safe_name("A") + ".parquet", safe_name("B") + ".parquet"]
    assert len((tmp_path / "samples.jsonl").read_text().splitlines()) == 2
    from_jsonl = read_samples(tmp_path / "samples.jsonl")
    assert from_jsonl == a + b
    assert read_samples(written[0]) == a
    assert read_samples(tmp_path) == a + b            # the directory of per-session parquet files

    import pyarrow.parquet as pq
    table = pq.read_table(tmp_path / "samples")
    assert table.num_rows == 2
    row = table.to_pylist()[0]
    assert row["tokens"] == a[0].tokens and row["loss_mask"] == a[0].loss_mask
    assert json.loads(row["metadata"])["task"] == "x"
    # exporting a session again replaces its parquet file
    write_samples(a, tmp_path)
    assert read_samples(tmp_path) == a + b
    assert len(read_samples(tmp_path / "samples.jsonl")) == 3
