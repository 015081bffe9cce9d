"""Context compaction: the pairing validator, where a history may be cut, automatic and
on-demand compaction in the loop, and a 60-turn tool-heavy history compacted through the
real gateway (whose next request must be accepted)."""

from __future__ import annotations

import json
import random

import httpx
import pytest
from gateway_fixtures import qwen25_renderer, scripted_gateway

from agent_code.agent import Agent
from agent_code.agent.compaction import (
    CompactionError,
    check_tool_pairing,
    choose_cut,
    compacted_history,
    cut_points,
    estimate_tokens,
    render_transcript,
)
from agent_code.agent.sessions import SessionLog, replay
from agent_code.providers.anthropic import AnthropicProvider
from agent_code.providers.base import ProviderError
from agent_code.tools import ToolContext, default_tools
from agent_code.types import ModelResponse, Usage


def text(t):
    return {"type": "text", "text": t}


def use(id_, name, **input_):
    return {"type": "tool_use", "id": id_, "name": name, "input": input_}


def result(id_, content="ok", is_error=False):
    return {"type": "tool_result", "tool_use_id": id_, "content": content, "is_error": is_error}


def user(*blocks):
    return {"role": "user", "content": list(blocks)}


def assistant(*blocks):
    return {"role": "assistant", "content": list(blocks)}


def tool_heavy_history(turns: int = 60, seed: int = 7, result_chars: int = 1200) -> list[dict]:
    """A user task, then ``turns`` assistant turns of 1-3 parallel tool calls with large
    results; every 15 turns the agent answers and the user asks for more."""
    rng = random.Random(seed)
    messages = [user(text("Refactor the inventory package and keep the tests green."))]
    for t in range(turns):
        if t and t % 15 == 0:
            messages.append(assistant(text(f"Part {t // 15} is done.")))
            messages.append(user(text(f"Good. Now part {t // 15 + 1}.")))
        calls = []
        for k in range(rng.choice([1, 1, 2, 3])):
            name = rng.choice(["read_file", "grep", "bash"])
            args = {"read_file": {"path": f"inventory/mod_{t}_{k}.py"}, "grep": {"pattern": f"def f{t}"},
                    "bash": {"command": f"python -m pytest -q tests/test_{t}.py"}}[name]
            calls.append(use(f"toolu_{t:02d}_{k}", name, **args))
        messages.append(assistant(text(f"Step {t}: looking further."), *calls))
        body = "".join(f"{t}:{k}: line of output {rng.random():.6f}\n" for k in range(result_chars // 32))
        messages.append(user(*(result(c["id"], body, is_error=rng.random() < 0.1) for c in calls)))
    return messages


# --- the validator ----------------------------------------------------------------------------

GOOD = [user(text("go")), assistant(use("a", "echo", text="1"), use("b", "echo", text="2")),
        user(result("a"), result("b"), text("and also")), assistant(text("done"))]


def test_a_sound_history_passes():
    assert check_tool_pairing(GOOD) == []
    assert check_tool_pairing(tool_heavy_history()) == []
    assert check_tool_pairing([]) == []


@pytest.mark.parametrize("messages, problem", [
    ([user(text("go")), assistant(use("a", "echo"))], "tool_use a has no tool_result (no user message follows)"),
    ([user(text("go")), assistant(use("a", "echo"), use("b", "echo")), user(result("a"))],
     "tool_use b has no tool_result in message 2"),
    ([user(text("go")), assistant(use("a", "echo")), user(text("x")), assistant(text("y")), user(result("a"))],
     "tool_result for a answers no tool_use of message 3"),
    ([user(result("a")), assistant(text("y"))], "tool_result for a answers no tool_use of message -1"),
    ([assistant(text("hi")), user(text("x"))], "must start with a user message"),
    ([user(text("go")), assistant(use("a", "echo"), use("a", "echo")), user(result("a"))], "duplicate tool_use"),
    ([user(text("go")), assistant(use("a", "echo")), user(text("first"), result("a"))], "must come before"),
    ([user(text("go")), assistant(use("a", "echo")), user(result("a"), result("a"))], "duplicate tool_result"),
])
def test_broken_pairings_are_reported(messages, problem):
    problems = check_tool_pairing(messages)
    assert any(problem in p for p in problems), problems


def test_a_naive_keep_the_last_n_messages_cut_is_caught():
    """The course snapshot's defect: cutting by message count can orphan tool results."""
    history = tool_heavy_history()
    naive = [user(text("summary"))] + history[-7:]  # starts with a user message of tool results
    assert any("answers no tool_use" in p for p in check_tool_pairing(naive))


# --- where to cut ------------------------------------------------------------------------------

def test_every_cut_point_gives_a_valid_history_and_no_other_index_does():
    history = tool_heavy_history(turns=30)
    points = set(cut_points(history))
    assert points and 0 not in points
    for i in range(1, len(history)):
        if i in points:
            new = compacted_history(history, i, "summary")
            assert check_tool_pairing(new) == [], i
            assert new[0]["role"] == "user" and "summary" in new[0]["content"][0]["text"]
            assert new[-(len(history) - i - 1):] == history[i + 1:] or len(history) - i - 1 == 0
        else:
            assert history[i]["role"] == "user" and any(b["type"] == "tool_result" for b in history[i]["content"])
            with pytest.raises(CompactionError, match="split a tool_use"):
                compacted_history(history, i, "summary")


def test_choose_cut_keeps_the_recent_turns_within_the_budget():
    history = tool_heavy_history()
    cut = choose_cut(history, keep_turns=6)
    kept = history[cut:]
    assert sum(m["role"] == "assistant" for m in kept) == 6 and kept[0]["role"] == "assistant"
    small = choose_cut(history, keep_turns=6, keep_tokens=estimate_tokens(history[-2:]) + 10)
    assert small == len(history) - 2  # only the last turn fits: fewer turns, never a split
    assert choose_cut([user(text("hi"))]) is None


def test_the_transcript_is_capped_and_keeps_start_and_end():
    history = tool_heavy_history()
    transcript = render_transcript(history, max_chars=6_000)
    assert len(transcript) < 6_200
    assert transcript.startswith("USER: Refactor the inventory package")
    assert "omitted" in transcript and "RESULT of" in transcript


# --- in the loop ----------------------------------------------------------------------------

class Model:
    """Summarizes when asked without tools, otherwise replays ``turns``; reports usage as
    the estimated size of what it was sent (system prompt included)."""
    name, model = "fake", "fake"

    def __init__(self, turns, fail_summary=False):
        self.turns = list(turns)
        self.requests: list[dict] = []
        self.fail_summary = fail_summary

    def complete(self, messages, tools=None, system=None):
        self.requests.append({"messages": json.loads(json.dumps(messages)), "tools": tools, "system": system})
        usage = Usage(estimate_tokens(messages) + estimate_tokens(system or ""), 10)
        if tools is None:
            if self.fail_summary:
                raise ProviderError("endpoint down")
            return ModelResponse(content=[text("The user wants a refactor; 40 files read.")], usage=usage)
        return ModelResponse(content=self.turns.pop(0), usage=usage)


def test_automatic_compaction_keeps_the_run_going(tmp_path):
    history = tool_heavy_history()
    size = estimate_tokens(history)
    model = Model([[use("z", "echo", text="again")], [text("finished")]])
    events: list[dict] = []
    log = SessionLog.create(tmp_path)
    agent = Agent(model, default_tools(), ToolContext(tmp_path), on_event=events.append,
                  context_window=int(size / 0.9), session=log)
    agent.restore(history)
    out = agent.run("carry on")
    assert out.status == "success" and out.final == "finished"
    compactions = [e for e in events if e["type"] == "compaction"]
    assert len(compactions) == 1 and compactions[0]["trigger"] == "auto" and not compactions[0]["fallback"]
    summary_request = model.requests[0]
    assert summary_request["tools"] is None and len(summary_request["messages"]) == 1
    assert "<transcript>" in summary_request["messages"][0]["content"][0]["text"]
    after = model.requests[1]["messages"]
    assert check_tool_pairing(after) == [] and "<conversation-summary>" in after[0]["content"][0]["text"]
    assert "40 files read" in after[0]["content"][0]["text"]
    assert estimate_tokens(after) < 0.5 * size
    assert after[-1]["content"][-1] == text("carry on")  # the new prompt survives, verbatim
    assert check_tool_pairing(agent.messages) == [] and replay(log.path).messages == agent.messages
    assert len(agent.turn_usage) == 2  # per model call of the run (the summary is counted in usage)
    assert out.usage.input_tokens == sum(estimate_tokens(r["messages"]) + estimate_tokens(r["system"] or "")
                                         for r in model.requests)


def test_compaction_uses_provider_usage_not_only_estimates(tmp_path):
    class Reports(Model):
        def complete(self, messages, tools=None, system=None):
            response = super().complete(messages, tools, system)
            response.usage = Usage(90_000, 100)  # the endpoint says the context is large
            return response

    model = Reports([[use("a", "echo", text="x")], [text("done")]])
    events: list[dict] = []
    agent = Agent(model, default_tools(), ToolContext(tmp_path), on_event=events.append, context_window=100_000)
    agent.restore(tool_heavy_history(turns=10))
    assert agent.run("go").final == "done"
    # the small history alone is far below 80%; the reported 90k input tokens are not
    assert [e["trigger"] for e in events if e["type"] == "compaction"] == ["auto"]


def test_no_compaction_thrash_when_the_context_stays_full(tmp_path):
    """A system prompt bigger than the window: compaction cannot help; it is tried once,
    not before every model call."""
    model = Model([[use(f"e{i}", "echo", text=str(i))] for i in range(6)] + [[text("done")]])
    events: list[dict] = []
    agent = Agent(model, default_tools(), ToolContext(tmp_path), on_event=events.append,
                  system="x" * 20_000, context_window=4_000)
    agent.restore(tool_heavy_history(turns=3, result_chars=200))
    assert agent.run("go").final == "done"
    assert len([e for e in events if e["type"] == "compaction"]) == 1
    assert sum(r["tools"] is None for r in model.requests) == 1


def test_a_failed_summary_falls_back_to_a_mechanical_one(tmp_path):
    model = Model([[text("ok")]], fail_summary=True)
    events: list[dict] = []
    agent = Agent(model, default_tools(), ToolContext(tmp_path), on_event=events.append)
    agent.restore(tool_heavy_history(turns=20))
    message = agent.compact()
    assert message.startswith("compacted") and "mechanical" in message
    event = events[-1]
    assert event["fallback"] is True and "endpoint down" in event["error"]
    first = agent.messages[0]["content"][0]["text"]
    assert "Refactor the inventory package" in first and "read_file inventory/mod_" in first
    assert check_tool_pairing(agent.messages) == []
    assert agent.run("next").final == "ok"


def test_compact_on_demand(tmp_path):
    model = Model([])
    agent = Agent(model, default_tools(), ToolContext(tmp_path))
    assert agent.compact() == "nothing to compact yet"
    agent.restore(tool_heavy_history(turns=12))
    before = len(agent.messages)
    message = agent.compact()
    assert message.startswith("compacted") and "kept the last" in message
    assert sum(m["role"] == "assistant" for m in agent.messages) == 2
    assert len(agent.messages) < before and check_tool_pairing(agent.messages) == []
    assert agent.usage.input_tokens > 0  # the summary request is counted


# --- through the gateway (acceptance: 60 turns, then the next request is accepted) --------------

def test_sixty_turn_history_compacts_and_the_gateway_accepts_the_next_request(tmp_path, monkeypatch):
    renderer = qwen25_renderer()
    history = tool_heavy_history(turns=60)
    assert sum(m["role"] == "assistant" and any(b["type"] == "tool_use" for b in m["content"])
               for m in history) == 60
    lines = [{"text": "The user asked for a refactor of the inventory package; 60 steps read and tested "
                      "modules under inventory/."},
             {"text": "Continuing from the summary: everything is done."}]
    monkeypatch.setenv("ANTHROPIC_AUTH_TOKEN", "compaction-session")
    with scripted_gateway(tmp_path, lines, renderer) as (url, gateway):
        provider = AnthropicProvider(model="served", base_url=url, max_tokens=200, max_retries=0)
        agent = Agent(provider, default_tools(), ToolContext(tmp_path))
        agent.restore(history)
        tools = agent.tools.schemas()
        full = httpx.post(f"{url}/v1/messages/count_tokens",
                          json={"model": "m", "messages": history, "tools": tools}).json()["input_tokens"]
        message = agent.compact()
        assert check_tool_pairing(agent.messages) == [], message
        compacted = httpx.post(f"{url}/v1/messages/count_tokens",
                               json={"model": "m", "messages": agent.messages, "tools": tools}).json()["input_tokens"]
        out = agent.run("Is everything done?")
        turns = gateway.store.get("compaction-session").turns
    assert out.status == "success", out.error
    assert out.final == "Continuing from the summary: everything is done."
    assert compacted < full / 5
    assert len(turns) == 2
    summary_turn, next_turn = turns
    assert summary_turn.tools is None and [m["role"] for m in summary_turn.messages] == ["system", "user"]
    assert "<transcript>" in summary_turn.messages[1]["content"]
    assert next_turn.messages[0]["role"] == "user"  # no system prompt in this agent
    assert next_turn.messages[0]["content"].startswith("<conversation-summary>")
    assert "refactor of the inventory package" in next_turn.messages[0]["content"]
    assert next_turn.messages[-1] == {"role": "user", "content": "Is everything done?"}
    assert next_turn.tools  # the real request, with the tools


def test_automatic_compaction_through_the_gateway_uses_its_token_counts(tmp_path, monkeypatch):
    renderer = qwen25_renderer()
    history = tool_heavy_history(turns=60)
    lines = [{"text": "Summary: a long refactor."}, {"text": "Done."}]
    monkeypatch.setenv("ANTHROPIC_AUTH_TOKEN", "auto-session")
    events: list[dict] = []
    with scripted_gateway(tmp_path, lines, renderer) as (url, gateway):
        provider = AnthropicProvider(model="served", base_url=url, max_tokens=200, max_retries=0)
        agent = Agent(provider, default_tools(), ToolContext(tmp_path), on_event=events.append,
                      context_window=estimate_tokens(history))
        agent.restore(history)
        out = agent.run("Done?")
        turns = gateway.store.get("auto-session").turns
    assert out.status == "success" and out.final == "Done."
    assert [e["trigger"] for e in events if e["type"] == "compaction"] == ["auto"]
    assert len(turns) == 2 and turns[0].tools is None
    # the tokens the gateway counted for the real request are what the agent now tracks
    assert agent.turn_usage[-1].input_tokens == len(turns[1].prompt_ids)
    assert len(turns[1].prompt_ids) < 0.8 * agent.context_window
