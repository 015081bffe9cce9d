"""build_samples: chains, loss masks, realignment, branches, rewards, status."""

from __future__ import annotations

from typing import Any

import pytest

from agent_code.trajectory.records import TurnRecord
from agent_code.trajectory.samples import REWARD_POLICIES, Sample, build_samples

SYS_MAIN = {"role": "system", "content": "You are the main agent."}
SYS_SUB = {"role": "system", "content": "You are a search sub-agent."}


def lp(ids: list[int]) -> list[float]:
    """Distinct, float32-exact logprobs per sampled id."""
    return [-(i % 97) / 64 for i in ids]


def rec(index: int, prompt: list[int], output: list[int], *, parent: int | None = None,
        system: dict | None = SYS_MAIN, finish: str = "stop", tool_calls: bool = False,
        **kw: Any) -> TurnRecord:
    reply: dict[str, Any] = {"role": "assistant", "content": "x"}
    if tool_calls:
        reply["tool_calls"] = [{"id": "t1", "name": "Bash", "input": {}}]
    messages = ([system] if system else []) + [{"role": "user", "content": "hi"}]
    return TurnRecord.build(session_id=kw.pop("session_id", "s1"), index=index, messages=messages, tools=None,
                            prompt_ids=prompt, output_ids=output, logprobs=kw.pop("logprobs", lp(output)),
                            finish_reason=finish, reply=reply, parent=parent, **kw)


def check_invariants(records: list[TurnRecord], samples: list[Sample]) -> None:
    """Every mask-1 position holds the engine's id + logprob for a unique (turn, offset)."""
    by_index = {r.index: r for r in records}
    seen: set[tuple[int, int]] = set()
    for s in samples:
        P = s.prompt_length
        assert len(s.loss_mask) == len(s.rollout_log_probs) == s.response_length == len(s.tokens) - P
        chain = [by_index[i] for i in s.metadata["turn_indices"]]
        for r, m in enumerate(s.loss_mask):
            pos = P + r
            if not m:
                assert s.rollout_log_probs[r] == 0.0
                continue
            owners = [u for u in chain if len(u.prompt_ids) <= pos < len(u.prompt_ids) + len(u.output_ids)]
            assert owners, f"trained position {pos} lies in no turn's output span"
            u = max(owners, key=lambda t: len(t.prompt_ids))
            off = pos - len(u.prompt_ids)
            assert s.tokens[pos] == u.output_ids[off]
            assert s.rollout_log_probs[r] == pytest.approx(u.logprobs[off])
            assert (u.index, off) not in seen, f"turn {u.index} offset {off} trained twice"
            seen.add((u.index, off))


def three_turn_chain() -> list[TurnRecord]:
    p0 = [1, 2, 3, 4]
    o0 = [10, 11, 12]
    p1 = p0 + o0 + [50, 51]             # tool result suffix
    o1 = [13, 14]
    p2 = p1 + o1 + [52, 53, 54]
    o2 = [15, 16, 17, 18]
    return [rec(0, p0, o0, tool_calls=True), rec(1, p1, o1, parent=0, tool_calls=True),
            rec(2, p2, o2, parent=1)]


def test_token_policy_main_chain() -> None:
    records = three_turn_chain()
    [s] = build_samples(records, reward=1.0, rollout_id="r1")
    assert s.branch == "main" and s.index == 0 and s.session_id == "s1" and s.rollout_id == "r1"
    assert s.tokens == list(records[2].prompt_ids) + list(records[2].output_ids)
    assert s.prompt_length == 4 and s.response_length == len(s.tokens) - 4
    #                 o0          suffix  o1      suffix     o2
    assert s.loss_mask == [1, 1, 1, 0, 0, 1, 1, 0, 0, 0, 1, 1, 1, 1]
    expected_lp = lp([10, 11, 12]) + [0.0, 0.0] + lp([13, 14]) + [0.0] * 3 + lp([15, 16, 17, 18])
    assert s.rollout_log_probs == pytest.approx(expected_lp)
    assert s.reward == 1.0 and s.status == "completed"
    meta = s.metadata
    assert meta["turns"] == 3 and meta["turn_indices"] == [0, 1, 2]
    assert meta["use_tool"] is True and meta["truncated"] is False
    assert meta["drift"] == [] and meta["shared_turns"] == [] and meta["ill_formed"] == []
    check_invariants(records, [s])


def test_decode_and_caller_metadata() -> None:
    records = three_turn_chain()
    [s] = build_samples(records, reward=None, metadata={"task": "t-7"},
                        decode=lambda ids: " ".join(map(str, ids)))
    assert s.response == " ".join(map(str, s.tokens[4:]))
    assert s.metadata["task"] == "t-7" and s.reward is None
    assert build_samples(records, reward=None)[0].response == ""


def test_template_divergence_realigned() -> None:
    # turn 0 sampled <think> 20 21 </think> 30 31 <eos>; the re-rendered prompt of turn 1 dropped the think
    p0 = [1, 2, 3]
    o0 = [100, 20, 21, 101, 30, 31, 9]
    p1 = p0 + [30, 31, 9] + [50, 51]
    o1 = [40, 41, 9]
    records = [rec(0, p0, o0), rec(1, p1, o1, parent=0, policy="template",
                                   drift=[{"kind": "template", "cause": "think stripped", "masked": 0}])]
    [s] = build_samples(records, reward=0.5)
    assert s.loss_mask == [0, 0, 0, 0, 0, 1, 1, 1]
    realigned = [e for e in s.metadata["drift"] if e["kind"] == "realigned"]
    assert realigned == [{"turn": 0, "kind": "realigned", "cause": realigned[0]["cause"], "masked": 7, "at": 0}]
    assert "template" in realigned[0]["cause"]
    assert {"turn": 1, "kind": "template", "cause": "think stripped", "masked": 0} in s.metadata["drift"]
    check_invariants(records, [s])


def test_template_divergence_midway() -> None:
    # the first two sampled tokens survive the re-render, then it differs
    p0 = [1, 2]
    o0 = [10, 11, 12, 13, 9]
    p1 = p0 + [10, 11, 77, 9, 60]
    o1 = [14, 9]
    records = [rec(0, p0, o0), rec(1, p1, o1, parent=0, policy="template")]
    [s] = build_samples(records, reward=1.0)
    assert s.loss_mask == [1, 1, 0, 0, 0, 1, 1]
    [event] = s.metadata["drift"]
    assert event["turn"] == 0 and event["masked"] == 3 and event["at"] == 2
    check_invariants(records, [s])


def test_template_prompt_shorter_than_output() -> None:
    # the next prompt ends before turn 0's output would: no position is claimed twice
    p0 = [1]
    o0 = [10, 11, 12, 13]
    p1 = p0 + [10, 11]
    o1 = [12, 13, 14]       # happens to equal the rest of turn 0's output
    records = [rec(0, p0, o0), rec(1, p1, o1, parent=0, policy="template")]
    [s] = build_samples(records, reward=1.0)
    assert s.loss_mask == [1, 1, 1, 1, 1]
    assert s.metadata["drift"][0]["masked"] == 2
    check_invariants(records, [s])


def test_sub_agent_interleaved() -> None:
    main0 = rec(0, [1, 2, 3], [10, 11, 12], tool_calls=True)
    sub0 = rec(1, [5, 6], [20, 21], system=SYS_SUB)
    main1 = rec(2, [1, 2, 3, 10, 11, 12, 50], [13, 14], parent=0)
    sub1 = rec(3, [5, 6, 20, 21, 51, 52], [22, 23, 24], parent=1, system=SYS_SUB)
    records = [main0, sub0, main1, sub1]
    samples = build_samples(records, reward=1.0)
    assert [s.branch for s in samples] == ["main", "sub-agent"]
    assert [s.metadata["turn_indices"] for s in samples] == [[0, 2], [1, 3]]
    assert samples[0].loss_mask == [1, 1, 1, 0, 1, 1]
    assert samples[1].loss_mask == [1, 1, 0, 0, 1, 1, 1]
    assert [s.index for s in samples] == [0, 1]
    assert samples[0].metadata["use_tool"] and not samples[1].metadata["use_tool"]
    check_invariants(records, samples)


def test_second_root_same_system_is_compaction_and_hint_wins() -> None:
    a = rec(0, [1, 2], [10])
    b = rec(1, [1, 3], [11])                                # same system, new root: compaction
    c = rec(2, [7], [12], system=SYS_SUB, branch_hint="compaction")  # hint beats the system check
    samples = build_samples([a, b, c], reward=1.0)
    assert [s.branch for s in samples] == ["main", "compaction", "compaction"]
    d = rec(1, [1, 3], [11], branch_hint="sub-agent")
    assert [s.branch for s in build_samples([a, d], reward=1.0)] == ["main", "sub-agent"]


def test_retry_shared_parent_trained_once() -> None:
    p0 = [1, 2]
    o0 = [10, 11, 12]
    t0 = rec(0, p0, o0)
    t1 = rec(1, p0 + o0 + [50], [13, 14], parent=0, finish="length")      # cut off ...
    t2 = rec(2, p0 + o0 + [50], [15, 16, 17], parent=0)                   # ... retried
    records = [t0, t1, t2]
    samples = build_samples(records, reward=2.0)
    assert [s.branch for s in samples] == ["main", "retry"]
    # chains as long: main is the latest leaf (the retry's answer is the one the client went on with)
    first, second = samples
    assert [first.metadata["turn_indices"], second.metadata["turn_indices"]] == [[0, 2], [0, 1]]
    assert first.loss_mask == [1, 1, 1, 0, 1, 1, 1]
    assert second.loss_mask == [0, 0, 0, 0, 1, 1]
    assert first.metadata["shared_turns"] == [] and second.metadata["shared_turns"] == [0]
    assert second.metadata["drift"] == []
    assert second.status == "truncated" and second.metadata["truncated"] is True
    assert first.status == "completed"
    check_invariants(records, samples)


def test_retry_deeper_in_tree_with_hint() -> None:
    t0 = rec(0, [1], [10])
    t1 = rec(1, [1, 10, 50], [11], parent=0)
    t2 = rec(2, [1, 10, 50, 11, 51], [12], parent=1)
    t3 = rec(3, [1, 10, 50, 11, 51], [13], parent=1, branch_hint="fork")
    t4 = rec(4, [1, 10, 50], [14], parent=0)
    records = [t0, t1, t2, t3, t4]
    samples = build_samples(records, reward=1.0)
    # main: the chain to the latest turn (the client went back to turn 0 and on from turn 4)
    assert [s.metadata["turn_indices"] for s in samples] == [[0, 4], [0, 1, 2], [0, 1, 3]]
    assert [s.branch for s in samples] == ["main", "retry", "fork"]
    assert samples[2].metadata["shared_turns"] == [0, 1]
    # a chain whose own turn carries a hint is never main, however late its leaf
    t5 = rec(5, [1, 10, 50], [15], parent=0, branch_hint="fork")
    assert [s.metadata["turn_indices"][-1] for s in build_samples([*records, t5], reward=1.0)][0] == 4
    check_invariants(records, samples)


def test_reward_policies() -> None:
    records = [rec(0, [1], [10]), rec(1, [1, 10, 5], [11], parent=0), rec(2, [1, 10, 5], [12], parent=0),
               rec(3, [2], [13], system=SYS_SUB)]
    assert set(REWARD_POLICIES) >= {"full", "split"}
    full = build_samples(records, reward=1.5)
    assert [s.reward for s in full] == [1.5, 1.5, 1.5]
    split = build_samples(records, reward=1.5, reward_policy="split")
    assert [s.reward for s in split] == pytest.approx([0.5, 0.5, 0.5])
    assert sum(s.reward for s in split) == pytest.approx(1.5)
    assert [s.reward for s in build_samples(records, reward=None, reward_policy="split")] == [None] * 3
    with pytest.raises(ValueError):
        build_samples(records, reward=1.0, reward_policy="nope")


def test_status_and_ill_formed() -> None:
    t0 = rec(0, [1], [10, 11], finish="length", ill_formed=["unclosed <tool_call>"])
    [s] = build_samples([t0], reward=0.0)
    assert s.status == "truncated" and s.metadata["truncated"]
    assert s.metadata["ill_formed"] == [{"turn": 0, "issue": "unclosed <tool_call>"}]
    [s] = build_samples([rec(0, [1], [10], finish="abort")], reward=0.0)
    assert s.status == "aborted"
    [s] = build_samples([rec(0, [1], [10])], reward=0.0, status_override="aborted")
    assert s.status == "aborted"


def test_edge_cases() -> None:
    assert build_samples([], reward=1.0) == []
    with pytest.raises(ValueError):
        build_samples([rec(0, [1], [2]), rec(1, [3], [4], session_id="other")], reward=1.0)
    # a parent that was never recorded: the turn is a root of its own
    [s] = build_samples([rec(5, [1, 2, 3], [4], parent=2)], reward=1.0)
    assert s.branch == "main" and s.loss_mask == [1]


def test_sample_dict_round_trip() -> None:
    samples = build_samples(three_turn_chain(), reward=1.0, rollout_id="r")
    for s in samples:
        d = s.to_dict()
        assert set(d) >= {"session_id", "rollout_id", "index", "branch", "tokens", "response_length",
                          "loss_mask", "rollout_log_probs", "reward", "status", "response", "metadata"}
        assert Sample.from_dict(d) == s
        d["tokens"].append(-1)
        d["metadata"]["drift"].append({"turn": 99})
        assert -1 not in s.tokens and {"turn": 99} not in s.metadata["drift"]   # a copy
        view = s.to_dict(copy_data=False)   # for a caller that serializes it at once
        assert view == s.to_dict() and view["tokens"] is s.tokens and view["metadata"] is s.metadata


def _reference_masks(records: list[TurnRecord], sample: Sample) -> tuple[list[int], list[float]]:
    """The loss mask and logprobs by the rule, one position at a time: each chain turn trains
    the ids of its output that the sequence repeats from its prompt's end on, up to the first
    that differs, the next chain turn's prompt end, or a position an earlier turn took."""
    by_index = {r.index: r for r in records}
    chain = [by_index[i] for i in sample.metadata["turn_indices"]]
    tokens, P = sample.tokens, sample.prompt_length
    mask, logprobs, taken = [0] * (len(tokens) - P), [0.0] * (len(tokens) - P), set()
    for pos, u in enumerate(chain):
        limit = len(tokens) if pos + 1 == len(chain) else min(len(chain[pos + 1].prompt_ids), len(tokens))
        start = len(u.prompt_ids)
        for k, token in enumerate(u.output_ids):
            at = start + k
            if not (P <= at < limit) or tokens[at] != token or at in taken:
                break
            taken.add(at)
            if u.index not in sample.metadata["shared_turns"]:
                mask[at - P] = 1
                logprobs[at - P] = float(u.logprobs[k]) if k < len(u.logprobs) else 0.0
    return mask, logprobs


@pytest.mark.parametrize("seed", range(40))
def test_masks_follow_the_rule_on_random_trees(seed: int) -> None:
    """Random sessions (drifted re-renders, retries that share a parent, prompts that end inside
    an output, logprobs shorter than the output): every sample's mask is the rule's."""
    import random

    rng = random.Random(seed)
    records: list[TurnRecord] = []
    for index in range(rng.randint(1, 8)):
        parent = rng.choice([None, *range(index)]) if index and rng.random() < 0.9 else None
        if parent is None:
            prompt = [rng.randint(1, 9) for _ in range(rng.randint(1, 6))]
        else:
            held = list(records[parent].prompt_ids) + list(records[parent].output_ids)
            if rng.random() < 0.3 and len(held) > 1:   # a re-render that differs somewhere in the reply
                cut = rng.randint(0 if rng.random() < 0.3 else len(records[parent].prompt_ids), len(held) - 1)
                held = held[:cut] + [rng.randint(1, 9)] + held[cut + 1:] if rng.random() < 0.5 else held[:cut]
            prompt = held + [rng.randint(50, 60) for _ in range(rng.randint(0, 4))]
        output = [rng.randint(1, 20) for _ in range(rng.randint(1, 7))]
        scores = lp(output)[:rng.randint(0, len(output))] if rng.random() < 0.2 else lp(output)
        records.append(rec(index, prompt, output, parent=parent, logprobs=scores, tool_calls=True))
    for sample in build_samples(records, reward=1.0):
        mask, logprobs = _reference_masks(records, sample)
        assert sample.loss_mask == mask
        assert sample.rollout_log_probs == logprobs
