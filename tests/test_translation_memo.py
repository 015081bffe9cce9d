"""The Anthropic translation's memo: a request translated with its conversation's previous
request's memo gives exactly what it gives alone (messages, tools, notes, errors), reusing the
memo's objects only for what is unchanged — by value and by JSON type."""

from __future__ import annotations

import copy
import random

import pytest

from agent_code.protocols.anthropic import ProtocolError, translate_request, translate_request_memo

TOOLS = [{"name": "Bash", "description": "Run it.", "input_schema": {"type": "object", "properties": {
    "command": {"type": "string"}, "timeout": {"type": "number", "minimum": 1}}}},
    {"name": "Read", "input_schema": {"type": "object", "properties": {"file_path": {"type": "string"}}}}]


def conversation(turns: int, rng: random.Random) -> dict:
    messages: list[dict] = [{"role": "user", "content": "fix the test"}]
    for k in range(turns):
        call = {"type": "tool_use", "id": f"toolu_{k}", "name": "Bash",
                "input": {"command": f"pytest -k t{k}", "timeout": rng.choice([30, 30.5, True, None])}}
        blocks = [call] if rng.random() < 0.5 else [{"type": "text", "text": f"step {k}"}, call]
        if rng.random() < 0.2:
            blocks.insert(0, {"type": "thinking", "thinking": f"think {k}", "signature": "bogus"})
        messages.append({"role": "assistant", "content": blocks})
        result = rng.choice([f"ok {k}", [{"type": "text", "text": f"out {k}"}, {"type": "image", "source": {}}]])
        messages.append({"role": "user", "content": [{"type": "tool_result", "tool_use_id": f"toolu_{k}",
                                                      "content": result, "is_error": rng.random() < 0.3}]})
    return {"model": "m", "max_tokens": 100, "messages": messages, "tools": TOOLS,
            "system": [{"type": "text", "text": "x-anthropic-billing-header: cc=1"}, {"type": "text", "text": "Be careful."}]}


def same(a, b) -> None:
    assert (a.messages, a.tools, a.notes) == (b.messages, b.tools, b.notes)
    assert repr(a.messages) == repr(b.messages) and repr(a.tools) == repr(b.tools)   # types too (1 vs 1.0 vs True)


def test_a_growing_conversation_translates_as_it_does_alone():
    rng = random.Random(3)
    body = conversation(12, rng)
    memo = None
    for n in range(1, len(body["messages"]) + 1, 2):
        request = copy.deepcopy(dict(body, messages=body["messages"][:n]))
        chat, next_memo = translate_request_memo(request, memo=memo)
        same(chat, translate_request(copy.deepcopy(request)))
        if memo is not None:   # everything the previous request held is the memo's very objects
            reused = sum(1 for m in chat.messages if any(m is old for out in memo.out for old in out[0]))
            assert reused >= len(memo.out) - 1
            assert chat.tools is memo.tools_out[0]
        memo = next_memo


CHANGES = [
    lambda b: b["messages"][1]["content"][-1]["input"].update(timeout=30.0 if b["messages"][1]["content"][-1]["input"]["timeout"] == 30 else 30),
    lambda b: b["messages"][1]["content"][-1]["input"].update(timeout=1 if b["messages"][1]["content"][-1]["input"]["timeout"] is True else True),
    lambda b: b["messages"][2]["content"][0].update(is_error=0),                      # False -> 0: refused
    lambda b: b["messages"][2]["content"][0].update(content="changed"),
    lambda b: b["tools"][0]["input_schema"]["properties"]["timeout"].update(minimum=1.0),   # == 1
    lambda b: b["tools"][0]["input_schema"]["properties"]["timeout"].update(minimum=True),  # == 1
    lambda b: b.update(system="Be reckless."),
    lambda b: b["messages"].insert(3, {"role": "system", "content": "mid-list"}),     # folds: no memo
    lambda b: b["messages"].insert(3, {"role": "robot", "content": "?"}),
    lambda b: b["messages"][3].update(content=[{"type": "tool_use", "id": "x", "name": "Read", "input": {}}]),
    lambda b: b["messages"].__setitem__(1, "not an object"),
    lambda b: b["tools"].append(dict(TOOLS[0])),                                     # a duplicate name
]


@pytest.mark.parametrize("change", range(len(CHANGES)))
def test_a_changed_request_translates_or_fails_as_it_does_alone(change):
    rng = random.Random(change)
    body = conversation(6, rng)
    body["messages"][1]["content"][-1]["input"]["timeout"] = 30
    body["messages"][2]["content"][0]["is_error"] = False
    _, memo = translate_request_memo(copy.deepcopy(body))
    changed = copy.deepcopy(body)
    CHANGES[change](changed)
    try:
        alone = translate_request(copy.deepcopy(changed))
    except ProtocolError as exc:
        with pytest.raises(ProtocolError) as caught:
            translate_request_memo(copy.deepcopy(changed), memo=memo)
        assert str(caught.value) == str(exc)
        return
    chat, next_memo = translate_request_memo(copy.deepcopy(changed), memo=memo)
    same(chat, alone)
    if any(m.get("role") == "system" for m in changed["messages"] if isinstance(m, dict)):
        assert next_memo is None


@pytest.mark.parametrize("change", [0, 1, 3])
def test_a_memo_made_from_a_memo_after_a_change_still_translates_as_alone(change):
    """The memo's leading run is copied from the memo before it (its flat messages and their
    ends): a change in the middle of request 2, then request 3 extending request 2, with the
    memos chained, translates each as it does alone (the run's ends must follow the change)."""
    rng = random.Random(10 + change)
    body = conversation(8, rng)
    body["messages"][1]["content"][-1]["input"]["timeout"] = 30
    body["messages"][2]["content"][0]["is_error"] = False
    first = copy.deepcopy(dict(body, messages=body["messages"][:9]))
    _, memo = translate_request_memo(copy.deepcopy(first))
    second = copy.deepcopy(first)
    CHANGES[change](second)
    chat, memo = translate_request_memo(copy.deepcopy(second), memo=memo)
    same(chat, translate_request(copy.deepcopy(second)))
    third = copy.deepcopy(second)
    third["messages"] += copy.deepcopy(body["messages"][9:])
    chat, _ = translate_request_memo(copy.deepcopy(third), memo=memo)
    same(chat, translate_request(copy.deepcopy(third)))
