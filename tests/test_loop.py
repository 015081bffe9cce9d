"""The agent loop with scripted turns: ordering, errors as results, step cap, history."""

from __future__ import annotations

import json

import pytest

from agent_code.agent import Agent
from agent_code.providers.scripted import ScriptedProvider, load_script
from agent_code.providers import ProviderError
from agent_code.tools import ToolContext, default_tools


def script(tmp_path, *turns) -> ScriptedProvider:
    path = tmp_path / "script.jsonl"
    path.write_text("\n".join(json.dumps(t) for t in turns) + "\n")
    return ScriptedProvider(path)


def use(id_, name, **input_):
    return {"type": "tool_use", "id": id_, "name": name, "input": input_}


def text(t):
    return {"type": "text", "text": t}


def run(tmp_path, provider, prompt="go", **kw):
    events = []
    agent = Agent(provider, default_tools(), ToolContext(tmp_path), on_event=events.append, **kw)
    return agent, agent.run(prompt), events


def test_parallel_tool_uses_get_results_in_one_user_message_in_order(tmp_path):
    provider = script(tmp_path, [use("a", "echo", text="one"), use("b", "echo", text="two"),
                                 use("c", "echo", text="three")], [text("done")])
    agent, result, events = run(tmp_path, provider)
    assert result.status == "success" and result.final == "done" and result.steps == 2
    msgs = result.messages
    assert [m["role"] for m in msgs] == ["user", "assistant", "user", "assistant"]
    assert msgs[2]["content"] == [
        {"type": "tool_result", "tool_use_id": "a", "content": "one", "is_error": False},
        {"type": "tool_result", "tool_use_id": "b", "content": "two", "is_error": False},
        {"type": "tool_result", "tool_use_id": "c", "content": "three", "is_error": False},
    ]
    kinds = [e["type"] for e in events]
    assert kinds == ["assistant"] + ["tool_use", "tool_result"] * 3 + ["assistant", "result"]


def test_unknown_tool_and_bad_arguments_are_recoverable_errors(tmp_path):
    provider = script(tmp_path,
                      [use("u1", "rm_rf", path="/")],
                      [use("u2", "echo", txt="typo"), use("u3", "read_file")],
                      [use("u4", "echo", text="recovered")],
                      [text("ok")])
    _, result, events = run(tmp_path, provider)
    assert result.status == "success" and result.final == "ok"
    results = [e for e in events if e["type"] == "tool_result"]
    assert [r["is_error"] for r in results] == [True, True, True, False]
    assert results[0]["content"].startswith("unknown tool 'rm_rf'; available tools: echo")
    assert "unknown argument 'txt'" in results[1]["content"]
    assert "missing required argument 'text'" in results[1]["content"]
    assert "missing required argument 'path'" in results[2]["content"]
    assert results[3]["content"] == "recovered"
    # the error flags reached the model too
    assert [b["is_error"] for b in result.messages[4]["content"]] == [True, True]


def test_max_steps_stops_the_loop(tmp_path):
    provider = script(tmp_path, *[[use(f"t{i}", "echo", text=str(i))] for i in range(5)])
    _, result, events = run(tmp_path, provider, max_steps=3)
    assert result.status == "max_steps" and result.steps == 3
    assert provider.position == 3
    assert events[-1]["type"] == "result" and events[-1]["is_error"] is True
    # every tool_use still has its tool_result
    assert result.messages[-1]["content"][0]["tool_use_id"] == "t2"


def test_next_prompt_after_max_steps_keeps_roles_alternating(tmp_path):
    provider = script(tmp_path, [use("t0", "echo", text="x")], [text("answer")])
    agent, first, _ = run(tmp_path, provider, max_steps=1)
    assert first.status == "max_steps"
    second = agent.run("and now?")
    assert second.final == "answer"
    roles = [m["role"] for m in agent.messages]
    assert roles == ["user", "assistant", "user", "assistant"]
    assert agent.messages[2]["content"][-1] == {"type": "text", "text": "and now?"}


def test_provider_error_ends_the_run_cleanly(tmp_path):
    provider = script(tmp_path, [use("t0", "echo", text="x")])
    _, result, events = run(tmp_path, provider)
    assert result.status == "error" and "exhausted after 1 turns" in result.error
    assert events[-1]["subtype"] == "error"


def test_interrupt_rolls_back_the_turn(tmp_path):
    class Interrupting:
        name, model = "x", "x"

        def complete(self, messages, tools=None, system=None):
            raise KeyboardInterrupt

    agent = Agent(Interrupting(), default_tools(), ToolContext(tmp_path))
    with pytest.raises(KeyboardInterrupt):
        agent.run("hello")
    assert agent.messages == []


@pytest.mark.parametrize("line, message", [
    ("{not json", "invalid JSON"),
    ('{"content": [{"type": "image"}]}', "unsupported block 'image'"),
    ('{"content": [{"type": "tool_use", "name": "echo"}]}', "need an 'id' and a 'name'"),
    ('"just a string"', "a turn must be"),
])
def test_bad_scripts_fail_early_with_the_line(tmp_path, line, message):
    path = tmp_path / "s.jsonl"
    path.write_text('[{"type": "text", "text": "fine"}]\n' + line + "\n")
    with pytest.raises(ProviderError, match=message) as info:
        load_script(path)
    assert f"{path}:2" in str(info.value)


def test_an_exact_repeat_of_a_call_is_flagged(tmp_path):
    provider = script(tmp_path, [use("a", "echo", text="x")], [use("b", "echo", text="x")],
                      [use("c", "echo", text="y")], [text("ok")])
    _, result, events = run(tmp_path, provider)
    contents = [e["content"] for e in events if e["type"] == "tool_result"]
    assert contents[0] == "x" and contents[2] == "y"
    assert contents[1].startswith("x\n\n[note: this exact call was already made")
