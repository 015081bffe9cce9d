"""Turn records by reference: a turn stores only the ids and messages that are new, in
memory (a TokenSeq over its parent's held sequence) and in the turn log (``prompt_ref`` /
``messages_ref``), and everything rebuilt from them (records, samples) is what it was."""

from __future__ import annotations

import json
import logging
import random
from array import array
from pathlib import Path

import anthropic
import pytest

from agent_code.engines.scripted import ScriptedEngine
from agent_code.gateway.app import create_app
from agent_code.gateway.pipeline import Gateway
from agent_code.gateway.server import BackgroundServer
from agent_code.trajectory.records import TurnRecord
from agent_code.trajectory.samples import build_samples
from agent_code.trajectory.store import TurnLog, read_turn_log
from agent_code.trajectory.tokens import TokenSeq, as_ids
from gateway_fixtures import check_token_exact, qwen3_renderer, write_script


def test_a_token_seq_reads_like_the_list_it_stands_for():
    rng = random.Random(7)
    model: dict[int, list[int]] = {0: [rng.randrange(1000) for _ in range(50)]}
    seqs = {0: TokenSeq(model[0])}
    for n in range(1, 200):
        base = rng.randrange(n)
        keep = rng.randrange(len(model[base]) + 1)
        own = [rng.randrange(1000) for _ in range(rng.randrange(30))]
        model[n] = model[base][:keep] + own
        seqs[n] = seqs[base].extend(own, keep)
    for n, seq in seqs.items():
        want = model[n]
        assert len(seq) == len(want) and seq.tolist() == want and list(seq) == want
        assert seq.array() == array("i", want) and seq == array("i", want) and array("i", want) == seq
        assert as_ids(seq) == array("i", want)
        for i in [0, len(want) // 2, len(want) - 1, -1, -len(want)] if want else []:
            assert seq[i] == want[i]
        for a, b in [(0, 10), (5, 40), (0, len(want)), (len(want) - 3, len(want) + 5), (3, 3)]:
            assert seq[a:b].tolist() == want[a:b]
        assert seq[::2].tolist() == want[::2]
        with pytest.raises(IndexError):
            seq[len(want)]
    different = seqs[5].extend([1])
    assert different != seqs[5] and seqs[5] == TokenSeq(model[5])
    with pytest.raises(ValueError):
        seqs[3].extend([1], keep=len(seqs[3]) + 1)


TOOLS = [{"name": "echo", "description": "Echo the text. " * 40, "input_schema": {
    "type": "object", "properties": {"text": {"type": "string"}}, "required": ["text"]}}]


def call(text: str) -> str:
    return "<tool_call>\n" + json.dumps({"name": "echo", "arguments": {"text": text}}) + "\n</tool_call>"


def run_session(tmp_path: Path, turns: int = 6) -> tuple[Gateway, TurnLog]:
    """A real gateway with a turn log: one agent session of ``turns`` tool-call turns, a retry
    of its second request (a branch off turn 0), and a sub-agent with its own system prompt."""
    renderer = qwen3_renderer()
    lines = [{"text": call(f"step {k}")} for k in range(turns + 2)]
    engine = ScriptedEngine(write_script(tmp_path, lines), renderer)
    log = TurnLog(tmp_path / "trajectories")
    gateway = Gateway(engine, renderer, model_name="m", turn_log=log)
    with BackgroundServer(create_app(gateway)) as server:
        client = anthropic.Anthropic(base_url=server.url, api_key="refs", max_retries=0)
        messages: list = [{"role": "user", "content": "Go."}]
        sent: list = []
        for k in range(turns):
            reply = client.messages.create(model="m", max_tokens=64, system="Be brief. " * 50, tools=TOOLS,
                                           messages=messages)
            sent.append(json.loads(json.dumps(messages)))
            messages.append({"role": "assistant", "content": [b.model_dump(exclude_none=True) for b in reply.content]})
            use = next(b for b in reply.content if b.type == "tool_use")
            messages.append({"role": "user", "content": [
                {"type": "tool_result", "tool_use_id": use.id, "content": f"result {k} " * (20 + 10 * k)}]})
        client.messages.create(model="m", max_tokens=64, system="Be brief. " * 50, tools=TOOLS, messages=sent[1])
        client.messages.create(model="m", max_tokens=64, system="You are a sub-agent.", tools=TOOLS,
                               messages=[{"role": "user", "content": "Look around."}])
    return gateway, log


def test_the_turn_log_stores_each_turn_by_reference_and_reads_back_the_same(tmp_path):
    gateway, log = run_session(tmp_path)
    turns = gateway.store.get("refs").turns
    assert [t.parent for t in turns] == [None, 0, 1, 2, 3, 4, 0, None]
    lines = [json.loads(x) for x in log.path_for("refs").read_text().splitlines()]
    for line, turn in zip(lines, turns):
        if turn.parent is None:  # a root is written whole
            assert "prompt_ids" in line and "prompt_ref" not in line and "messages" in line
        else:
            assert "prompt_ids" not in line and line["prompt_ref"] == [turn.parent, turn.prefix_reused]
            assert len(line["prompt_suffix"]) == len(turn.prompt_ids) - turn.prefix_reused
            assert "messages" not in line and line["messages_ref"][0] == turn.parent
            assert "tools" not in line and line["tools_ref"] == turn.parent
    # in memory, a turn's prompt is its parent's held sequence plus its own new ids
    for turn in turns:
        if turn.parent is not None:
            assert turn.prompt_ids.base is turns[turn.parent].held()
            assert turn.prompt_ids.stored() == len(turn.prompt_ids) - turn.prefix_reused
    read = read_turn_log(log.path_for("refs"))
    assert [r.to_dict() for r in read] == [t.to_dict() for t in turns]
    assert [s.to_dict() for s in build_samples(read, reward=1.0)] == \
        [s.to_dict() for s in build_samples(turns, reward=1.0)]
    check_token_exact(build_samples(read, reward=1.0), read)
    # the whole log is smaller than the prompts written whole (the format before)
    whole = sum(len(json.dumps(t.to_dict(), separators=(",", ":"))) for t in turns)
    assert log.path_for("refs").stat().st_size < 0.6 * whole


def test_a_turn_log_written_whole_stays_readable(tmp_path):
    gateway, _ = run_session(tmp_path, turns=3)
    turns = gateway.store.get("refs").turns
    old = tmp_path / "old.turns.jsonl"
    old.write_text("".join(json.dumps(t.to_dict()) + "\n" for t in turns))  # the format before references
    read = read_turn_log(old)
    assert [r.to_dict() for r in read] == [t.to_dict() for t in turns]


def rec(index: int, prompt: list[int], output: list[int], parent: int | None = None) -> TurnRecord:
    return TurnRecord.build(session_id="s", index=index, messages=[{"role": "user", "content": "hi"}], tools=None,
                            prompt_ids=prompt, output_ids=output, logprobs=[-0.5] * len(output),
                            finish_reason="stop", reply={"role": "assistant", "content": "ok"}, parent=parent)


@pytest.mark.parametrize("bad", [
    {"prompt_ref": [5, 2]},                 # a turn that is not in the log
    {"prompt_ref": [0, 99]},                # more ids than turn 0 holds
    {"prompt_ref": [0, -1]},
    {"prompt_ref": [0]}, {"prompt_ref": "0,2"}, {"prompt_ref": [0, 1.5]}, {"prompt_ref": [True, 1]},
    {"messages_ref": [0, 9]}, {"messages_ref": [7, 1]}, {"messages_suffix": "x", "messages_ref": [0, 1]},
    {"tools_ref": 4}, {"prompt_suffix": ["a"], "prompt_ref": [0, 2]},
])
def test_a_bad_reference_skips_that_record_and_keeps_the_rest(tmp_path, caplog, bad):
    root = rec(0, [1, 2], [3, 4])
    child = rec(1, [1, 2, 3, 4, 5], [6], parent=0)
    child.prompt_ids = root.held().extend([5])
    good = child.to_log(root)
    assert good["prompt_ref"] == [0, 4]
    broken = {k: v for k, v in good.items() if k not in ("prompt_ref", "prompt_suffix", "messages_ref",
                                                          "messages_suffix", "tools_ref")}
    broken.update(prompt_ids=[1, 2, 3, 4, 5], index=2)
    broken.update(bad)
    if "prompt_ref" in bad:
        broken.pop("prompt_ids")
    grandchild = rec(3, [1, 2, 3, 4, 5, 6, 7], [8], parent=1)
    grandchild.prompt_ids = child.held().extend([7])
    path = tmp_path / "s.turns.jsonl"
    path.write_text("".join(json.dumps(x) + "\n" for x in [root.to_log(), good, broken, grandchild.to_log(child)]))
    with caplog.at_level(logging.WARNING):
        read = read_turn_log(path)
    assert [r.index for r in read] == [0, 1, 3], bad
    assert read[2].prompt_ids.tolist() == [1, 2, 3, 4, 5, 6, 7]
    assert "malformed turn record" in caplog.text
