"""agent_code.jsonl: hand-written JSONL read with errors at file:line; JSON files written whole."""

from __future__ import annotations

import json

import pytest

from agent_code.jsonl import read_jsonl, write_json_atomic


def test_read_jsonl_skips_blanks_and_comments_and_points_at_the_line(tmp_path):
    path = tmp_path / "s.jsonl"
    path.write_text('{"a": 1}\n\n# a comment\n  [2]\n')
    assert [(n, obj) for n, _, obj in read_jsonl(path, ValueError, "script")] == [(1, {"a": 1}), (4, [2])]
    path.write_text('{"a": 1}\n{"a": \n')
    with pytest.raises(ValueError, match=r"s\.jsonl:2: invalid JSON"):
        list(read_jsonl(path, ValueError, "script"))
    with pytest.raises(ValueError, match="cannot read script"):
        list(read_jsonl(tmp_path / "missing.jsonl", ValueError, "script"))


def test_write_json_atomic_replaces_whole_or_leaves_the_old_file(tmp_path):
    path = tmp_path / "state.json"
    write_json_atomic(path, {"n": 1, "text": "é"}, indent=2)
    assert json.loads(path.read_text(encoding="utf-8")) == {"n": 1, "text": "é"}
    assert path.read_text(encoding="utf-8").endswith("}\n") and "é" in path.read_text(encoding="utf-8")
    # a value JSON cannot hold fails half-way through the dump: the old file stays, no temp file is left
    with pytest.raises(TypeError):
        write_json_atomic(path, {"n": 2, "bad": object()})
    assert json.loads(path.read_text(encoding="utf-8")) == {"n": 1, "text": "é"}
    assert sorted(p.name for p in tmp_path.iterdir()) == ["state.json"]
    with pytest.raises(OSError):
        write_json_atomic(tmp_path / "no-such-dir" / "x.json", {})
