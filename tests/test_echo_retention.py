"""Clients that drop the model's reasoning when they echo its replies (trajectory/echo.py: the
thinking-retention policy): a conversation stays ONE token-exact sample, the held reasoning ids
are kept and the drop is noted; only the exact drop is tolerated. The official SDKs against a
real gateway on 127.0.0.1 (scripted engine, Qwen2.5's template, the ``think`` reasoning parser)."""

from __future__ import annotations

import json
from typing import Any, Callable

import anthropic
import httpx
import openai
import pytest

from agent_code.trajectory import echo
from agent_code.trajectory.history import SessionHistory
from agent_code.trajectory.records import TurnRecord
from agent_code.trajectory.samples import Sample
from gateway_fixtures import check_token_exact, qwen25_renderer, scripted_gateway

TURNS = 12
CHAT_TOOLS = [{"type": "function", "function": {
    "name": "echo", "description": "Echo text.",
    "parameters": {"type": "object", "properties": {"text": {"type": "string"}}, "required": ["text"]}}}]
ANTHROPIC_TOOLS = [{"name": "echo", "description": "Echo text.", "input_schema": CHAT_TOOLS[0]["function"]["parameters"]}]


def hermes(name: str, arguments: dict) -> str:
    return f"<tool_call>\n{json.dumps({'name': name, 'arguments': arguments})}\n</tool_call>"


def script(turns: int = TURNS, plain: frozenset[int] = frozenset()) -> list[dict[str, Any]]:
    """Turns with reasoning, text and a tool call, the last one the answer; ``plain``: turns
    without reasoning."""
    lines = []
    for i in range(turns):
        think = "" if i in plain else f"<think>Step {i}: the file needs a look, then an echo.</think>"
        body = f"Calling {i}.\n" + hermes("echo", {"text": f"t{i}"}) if i < turns - 1 else "All done."
        lines.append({"text": think + body})
    return lines


def finish(url: str, key: str, gateway) -> tuple[list[Sample], list[TurnRecord]]:
    r = httpx.post(f"{url}/v1/sessions/{key}/finish", json={"reward": 1.0})
    assert r.status_code == 200, r.text
    return [Sample.from_dict(s) for s in r.json()["samples"]], gateway.store.get(key).turns


# -- Chat Completions --------------------------------------------------------------------------

ChatEcho = Callable[[int, Any], dict[str, Any]]


def dropping(i: int, message: Any) -> dict[str, Any]:
    """What most Chat Completions clients resend: content and tool calls, no reasoning."""
    out: dict[str, Any] = {"role": "assistant", "content": message.content}
    if message.tool_calls:
        out["tool_calls"] = [{"id": c.id, "type": "function", "function": {
            "name": c.function.name, "arguments": c.function.arguments}} for c in message.tool_calls]
    return out


def keeping(i: int, message: Any) -> dict[str, Any]:
    reasoning = getattr(message, "reasoning_content", None)
    return {**dropping(i, message), **({"reasoning_content": reasoning} if reasoning else {})}


def chat(url: str, key: str, echoes: ChatEcho, turns: int = TURNS, stream: bool = False) -> list[Any]:
    client = openai.OpenAI(base_url=f"{url}/v1", api_key=key, max_retries=0)
    messages: list[Any] = [{"role": "system", "content": "You are terse."}, {"role": "user", "content": "Echo."}]
    replies = []
    for i in range(turns):
        kwargs = dict(model="served", max_completion_tokens=256, tools=CHAT_TOOLS, messages=messages)
        if stream:
            with client.chat.completions.stream(**kwargs) as s:
                message = s.get_final_completion().choices[0].message
        else:
            message = client.chat.completions.create(**kwargs).choices[0].message
        replies.append(message)
        messages.append(echoes(i, message))
        if not message.tool_calls:
            break
        messages += [{"role": "tool", "tool_call_id": c.id, "content": "ok"} for c in message.tool_calls]
    return replies


def check_one_sample(samples: list[Sample], turns: list[TurnRecord], dropped: int) -> None:
    assert len(turns) == TURNS and [t.parent for t in turns] == [None, *range(TURNS - 1)]
    assert len(samples) == 1 and samples[0].branch == "main"
    check_token_exact(samples, turns)
    assert sum(samples[0].loss_mask) == sum(len(t.output_ids) for t in turns)
    # the next prompt extends the recorded prompt + output exactly: the reasoning ids are held
    for parent, child in zip(turns, turns[1:]):
        held = parent.prompt_ids.tolist() + parent.output_ids.tolist()
        assert child.prompt_ids.tolist()[:len(held)] == held
    notes = samples[0].metadata["client_rewrites"]
    reasoning = [n for n in notes if n.get("part") == "reasoning"]
    assert [n["turn"] for n in reasoning] == list(range(dropped))
    assert all(n["rewrites"] == [echo.DROPS_REASONING] and n["dropped_chars"] > 0 for n in reasoning)


@pytest.mark.parametrize("stream", [False, True], ids=["json", "sse"])
def test_chat_client_dropping_reasoning_is_one_sample(tmp_path, stream):
    renderer = qwen25_renderer()
    with scripted_gateway(tmp_path, script(), renderer, reasoning_parser="think") as (url, gateway):
        replies = chat(url, "drops", dropping, stream=stream)
        samples, turns = finish(url, "drops", gateway)
    assert replies[0].reasoning_content.startswith("Step 0")    # the client was shown the reasoning
    assert all(t.reply["reasoning_content"] for t in turns)
    check_one_sample(samples, turns, dropped=TURNS - 1)
    assert "Step 0:" in samples[0].response                     # and the model kept seeing its own


def test_chat_client_keeping_reasoning_is_one_sample_with_nothing_noted(tmp_path):
    renderer = qwen25_renderer()
    with scripted_gateway(tmp_path, script(), renderer, reasoning_parser="think") as (url, gateway):
        chat(url, "keeps", keeping)
        samples, turns = finish(url, "keeps", gateway)
    check_one_sample(samples, turns, dropped=0)
    assert samples[0].metadata["client_rewrites"] == []


def test_an_identity_less_chat_client_dropping_reasoning_stays_one_session(tmp_path):
    """No key and no body identity: the session is found by the conversation's history
    (gateway/identity.py), whose keys leave the dropped reasoning out as well."""
    renderer = qwen25_renderer()
    with scripted_gateway(tmp_path, script(turns=4), renderer, reasoning_parser="think") as (url, gateway):
        messages: list[Any] = [{"role": "user", "content": "Echo."}]
        sessions = set()
        for _ in range(4):
            r = httpx.post(f"{url}/v1/chat/completions", json={"model": "m", "tools": CHAT_TOOLS, "messages": messages})
            assert r.status_code == 200, r.text
            sessions.add(r.headers["x-agent-code-session"])
            message = r.json()["choices"][0]["message"]
            assert message["reasoning_content"]
            messages.append({"role": "assistant", "content": message["content"],
                             **({"tool_calls": message["tool_calls"]} if message.get("tool_calls") else {})})
            messages += [{"role": "tool", "tool_call_id": c["id"], "content": "ok"} for c in message.get("tool_calls") or []]
        (session,) = sessions
        assert [t.parent for t in gateway.store.get(session).turns] == [None, 0, 1, 2]


def rewriting(at: int, change: Callable[[dict[str, Any]], dict[str, Any]], base: ChatEcho = dropping) -> ChatEcho:
    return lambda i, message: change(base(i, message)) if i == at else base(i, message)


AT = 4
ATTACKS: dict[str, tuple[ChatEcho, frozenset[int]]] = {
    # drops the reasoning AND changes the visible text: not the held reply
    "dropped-and-text-changed": (rewriting(AT, lambda m: {**m, "content": m["content"] + " (edited)"}), frozenset()),
    # drops the reasoning and puts it in the text instead
    "reasoning-moved-into-text": (rewriting(AT, lambda m: {**m, "content": "<think>Step 4</think>" + m["content"]}),
                                  frozenset()),
    # keeps a reasoning, but another one
    "reasoning-rewritten": (rewriting(AT, lambda m: {**m, "reasoning_content": "I should cheat."}, keeping),
                            frozenset()),
    # shows reasoning for a reply that had none
    "reasoning-invented": (rewriting(AT, lambda m: {**m, "reasoning_content": "Invented."}), frozenset({AT})),
    # the drop, but with the reasoning's first characters kept
    "reasoning-truncated": (rewriting(AT, lambda m: {**m, "reasoning_content": "Step 4:"}, keeping), frozenset()),
}


@pytest.mark.parametrize("attack", sorted(ATTACKS))
def test_a_client_that_does_more_than_drop_the_reasoning_is_not_merged(tmp_path, attack):
    echoes, plain = ATTACKS[attack]
    renderer = qwen25_renderer()
    with scripted_gateway(tmp_path, script(plain=plain), renderer, reasoning_parser="think") as (url, gateway):
        chat(url, "attack", echoes)
        samples, turns = finish(url, "attack", gateway)
    assert len(turns) == TURNS
    # the turn after the rewritten echo does not continue the rewritten reply ...
    assert turns[AT + 1].parent != AT
    assert len(samples) == 2
    # ... and the rest is as for a clean drop: every sampled token trained once, in its own context
    check_token_exact(samples, turns)
    assert [t.parent for t in turns[AT + 2:]] == list(range(AT + 1, TURNS - 1))


def test_an_earlier_reasoning_rewritten_later_is_not_merged(tmp_path):
    """A client that echoed the reasoning faithfully (the history's fast path holds its view)
    and later rewrites an old reply's reasoning: the request extends only what precedes it."""
    renderer = qwen25_renderer()
    altered: dict[str, Any] = {}

    def echoes(i: int, message: Any) -> dict[str, Any]:
        out = keeping(i, message)
        altered[i] = out
        if i == 6:   # now rewrite turn 1's echo in place: the next request shows it changed
            altered[1]["reasoning_content"] = "Something else."
        return out

    with scripted_gateway(tmp_path, script(turns=8), renderer, reasoning_parser="think") as (url, gateway):
        chat(url, "late", echoes, turns=8)
        samples, turns = finish(url, "late", gateway)
    assert [t.parent for t in turns] == [None, 0, 1, 2, 3, 4, 5, 0]
    check_token_exact(samples, turns)


# -- Anthropic Messages ------------------------------------------------------------------------


def anthropic_chat(url: str, key: str, thinking: bool, change: Callable[[int, list], list] | None = None) -> list:
    client = anthropic.Anthropic(base_url=url, api_key=key, max_retries=0)
    messages: list[Any] = [{"role": "user", "content": "Echo."}]
    replies = []
    extra = {"thinking": {"type": "enabled", "budget_tokens": 1024}} if thinking else {}
    for i in range(TURNS):
        reply = client.messages.create(model="served", max_tokens=2048, system="You are terse.",
                                       tools=ANTHROPIC_TOOLS, messages=messages, **extra)
        replies.append(reply)
        blocks = [b.model_dump(exclude_none=True) for b in reply.content if b.type != "thinking"]
        messages.append({"role": "assistant", "content": change(i, blocks) if change else blocks})
        uses = [b for b in reply.content if b.type == "tool_use"]
        if not uses:
            break
        messages.append({"role": "user", "content": [
            {"type": "tool_result", "tool_use_id": u.id, "content": "ok"} for u in uses]})
    return replies


@pytest.mark.parametrize("thinking", [True, False], ids=["thinking-shown", "thinking-not-asked"])
def test_anthropic_client_dropping_thinking_is_one_sample(tmp_path, thinking):
    renderer = qwen25_renderer()
    with scripted_gateway(tmp_path, script(), renderer, reasoning_parser="think") as (url, gateway):
        replies = anthropic_chat(url, "drops", thinking)
        samples, turns = finish(url, "drops", gateway)
    assert [b.type for b in replies[0].content] == (["thinking"] if thinking else []) + ["text", "tool_use"]
    check_one_sample(samples, turns, dropped=TURNS - 1)


def test_anthropic_client_rewriting_thinking_is_not_merged(tmp_path):
    renderer = qwen25_renderer()

    def change(i: int, blocks: list) -> list:
        return [{"type": "thinking", "thinking": "Another thought.", "signature": ""}, *blocks] if i == AT else blocks

    with scripted_gateway(tmp_path, script(), renderer, reasoning_parser="think") as (url, gateway):
        anthropic_chat(url, "rewrites", True, change)
        samples, turns = finish(url, "rewrites", gateway)
    assert turns[AT + 1].parent != AT and len(samples) == 2
    check_token_exact(samples, turns)


# -- the history index, directly ---------------------------------------------------------------


def reply(reasoning: str | None) -> dict[str, Any]:
    out: dict[str, Any] = {"role": "assistant", "content": "Calling.", "tool_calls": [
        {"type": "function", "function": {"name": "echo", "arguments": {"text": "x"}}}]}
    return {**out, "reasoning_content": reasoning} if reasoning else out


def test_replies_that_differ_in_their_reasoning_alone_are_told_apart_by_an_echo_that_shows_it():
    """Two samples of one prompt with the same visible reply: an echo that shows a reasoning
    continues the reply that had it; one that drops it, the latest; another reasoning, neither."""
    history = SessionHistory()
    user = [{"role": "user", "content": "go"}]
    turns = [TurnRecord.build(session_id="s", index=i, messages=user, tools=CHAT_TOOLS, prompt_ids=[1],
                              output_ids=[2 + i], logprobs=[-0.1], finish_reason="stop", reply=reply(r))
             for i, r in enumerate(["first thought", "second thought"])]
    for turn in turns:
        history.add(turn)
    result = {"role": "tool", "content": "ok"}

    def parent(echoed: dict[str, Any]) -> Any:
        found, _ = history.lookup([*user, echoed, result], CHAT_TOOLS, turns)
        return found

    assert parent(reply("first thought")) == (0, 2)
    assert parent(reply("second thought")) == (1, 2)
    assert parent(reply(None)) == (1, 2)
    assert parent(reply("a third thought")) is None


def test_the_echo_form_leaves_reasoning_out_and_the_note_names_the_drop():
    held = reply("thinking")
    assert echo.echo_form(held, {}) == reply(None)
    assert echo.reasoning_echo_ok(reply(None), held) and echo.reasoning_echo_ok(held, held)
    assert not echo.reasoning_echo_ok(reply("other"), held) and not echo.reasoning_echo_ok(held, reply(None))
    assert echo.differences(held, reply(None), echo.schemas(CHAT_TOOLS), 3) == [
        {"kind": "client-rewrite", "turn": 3, "part": "reasoning", "rewrites": [echo.DROPS_REASONING],
         "dropped_chars": len("thinking")}]
    assert echo.differences(held, held, echo.schemas(CHAT_TOOLS), 3) == []


def test_a_chain_of_dropped_reasoning_takes_the_fast_path_and_keeps_each_rewrite_once():
    """Each turn of a client that drops the reasoning has its parent's reply echoed rewritten:
    the history keeps each such echo once (not the whole chain's list per turn) and still
    finds the parent without hashing the history (``SessionHistory._extends``)."""
    history = SessionHistory()
    messages: list[dict[str, Any]] = [{"role": "user", "content": "go"}]
    turns: list[TurnRecord] = []
    for i in range(6):
        held = {**reply(f"thought {i}"), "content": f"Calling {i}."}
        canonical = [*turns[-1].messages, turns[-1].reply, *messages[len(turns[-1].messages) + 1:]] if turns \
            else list(messages)
        turn = TurnRecord.build(session_id="s", index=i, messages=canonical, tools=CHAT_TOOLS, prompt_ids=[1],
                                output_ids=[2], logprobs=[-0.1], finish_reason="stop", reply=held,
                                parent=i - 1 if i else None)
        echoed = (len(turns[-1].messages), messages[len(turns[-1].messages)]) if turns else None
        history.add(turn, None, echoed)
        turns.append(turn)
        messages += [echo.echo_form(held, {}), {"role": "tool", "content": f"r{i}"}]
        found = history._extends(messages, CHAT_TOOLS, turns)
        assert found is not None and found[0] == (i, len(messages) - 1)
        assert history.lookup(messages, CHAT_TOOLS) == found   # the digest path: the same answer and key
    assert all(own is not None and len(own) == 2 for own, _ in history.echoes.values())
    assert sorted(history.echoes) == [1, 2, 3, 4, 5] and history.echoes[5][1] == 4
