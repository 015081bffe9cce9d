"""The scripted engine (``--engine scripted:FILE``) also reads the scripted provider's line
format (``--provider scripted --script FILE``: Anthropic assistant turns), written as completion
text by the served chat template (issue 20, part 4): one script file works with both."""

from __future__ import annotations

import json

import anthropic
import pytest

from agent_code.engines.scripted import ScriptedEngine, ScriptError
from agent_code.providers.scripted import load_script
from agent_code.render import models
from conftest import REPO, run_cli
from gateway_fixtures import qwen3_renderer, qwen25_renderer, scripted_gateway

ECHO = [{"name": "echo", "description": "Echo.", "input_schema": {
    "type": "object", "properties": {"text": {"type": "string"}}, "required": ["text"]}}]


@pytest.mark.parametrize("which", ["qwen3", "qwen2.5"])
def test_provider_turns_come_back_as_the_same_blocks(tmp_path, which):
    renderer = qwen3_renderer() if which == "qwen3" else qwen25_renderer()
    lines = [
        [{"type": "text", "text": "Let me echo it."},
         {"type": "tool_use", "id": "toolu_ignored", "name": "echo", "input": {"text": "hi ü"}}],
        {"content": [{"type": "thinking", "thinking": "It worked.", "signature": "s"},
                     {"type": "text", "text": "Done: hi ü."}], "stop_reason": "end_turn", "delay": 0},
    ]
    with scripted_gateway(tmp_path, lines, renderer) as (url, gateway):
        client = anthropic.Anthropic(base_url=url, api_key="p", max_retries=0)
        first = client.messages.create(model="m", max_tokens=256, tools=ECHO,
                                       messages=[{"role": "user", "content": "echo hi"}])
        assert first.stop_reason == "tool_use"
        assert [b.type for b in first.content] == ["text", "tool_use"]
        assert first.content[0].text == "Let me echo it."
        use = first.content[1]
        assert (use.name, use.input) == ("echo", {"text": "hi ü"})
        second = client.messages.create(model="m", max_tokens=256, tools=ECHO, messages=[
            {"role": "user", "content": "echo hi"},
            {"role": "assistant", "content": [b.model_dump(exclude_none=True) for b in first.content]},
            {"role": "user", "content": [{"type": "tool_result", "tool_use_id": use.id, "content": "hi ü"}]}])
        assert second.stop_reason == "end_turn"
        assert [b.text for b in second.content if b.type == "text"] == ["Done: hi ü."]
        turns = gateway.store.get("p").turns
    assert [t.reply.get("tool_calls") is not None for t in turns] == [True, False]
    assert turns[1].parent == 0          # the second turn extends the first, token for token


def test_every_provider_script_loads_as_an_engine_script():
    renderer = qwen3_renderer()
    for name in ("demo_script.jsonl",):
        path = REPO / "agent_code" / "demo" / name
        engine = ScriptedEngine(path, renderer)
        assert len(engine.replies) == len(load_script(path)) > 0
        assert all(reply.text and reply.finish_reason == "stop" for reply in engine.replies)


def test_turn_lines_are_checked(tmp_path):
    renderer = qwen3_renderer()

    def load(*lines: object) -> ScriptedEngine:
        path = tmp_path / "s.jsonl"
        path.write_text("".join(json.dumps(line) + "\n" for line in lines))
        return ScriptedEngine(path, renderer)

    assert load({"content": [{"type": "text", "text": "cut"}], "stop_reason": "max_tokens"}).replies[0].finish_reason \
        == "length"
    with pytest.raises(ScriptError, match=r's\.jsonl:1: .*either "text".*or "content"'):
        load({"text": "x", "content": [{"type": "text", "text": "x"}]})
    with pytest.raises(ScriptError, match=r"s\.jsonl:1: unsupported block 'image'"):
        load([{"type": "image"}])
    with pytest.raises(ScriptError, match=r"s\.jsonl:2: a tool_use block needs a 'name'"):
        load({"text": "ok"}, [{"type": "tool_use", "input": {}}])
    with pytest.raises(ScriptError, match=r"s\.jsonl:1: unknown field\(s\) \['finish_reason'\]"):
        load({"content": [{"type": "text", "text": "x"}], "finish_reason": "stop"})
    with pytest.raises(ScriptError, match=r'"stop_reason" must be one of'):
        load({"content": [{"type": "text", "text": "x"}], "stop_reason": "pause_turn"})


@pytest.mark.skipif(not models.default_gguf_available(), reason="the default model's GGUF parts are not installed")
def test_one_script_drives_the_provider_and_the_engine_alike(tmp_path):
    """The same provider-format file: ``--provider scripted --script F`` and ``--local --engine
    scripted:F`` make the same tool calls with the same inputs and end with the same answer."""
    script = tmp_path / "turns.jsonl"
    script.write_text("\n".join(json.dumps(line) for line in [
        [{"type": "text", "text": "Searching."}, {"type": "tool_use", "id": "t1", "name": "grep",
                                                  "input": {"pattern": "beta"}}],
        {"content": [{"type": "tool_use", "id": "t2", "name": "read_file", "input": {"path": "notes.txt"}}]},
        [{"type": "text", "text": "beta is on line 2 of notes.txt."}],
    ]) + "\n")
    runs = {}
    for how, args in (("provider", ["--provider", "scripted", "--script", str(script)]),
                      ("engine", ["--local", "--engine", f"scripted:{script}"])):
        project = tmp_path / how
        project.mkdir()
        (project / "notes.txt").write_text("alpha\nbeta\n")
        proc = run_cli(*args, "--output-format", "stream-json", "-C", str(project), "Where is beta?", timeout=120)
        assert proc.returncode == 0, (how, proc.stderr[-2000:])
        events = [json.loads(line) for line in proc.stdout.splitlines()]
        runs[how] = ([(e["name"], e["input"]) for e in events if e["type"] == "tool_use"],
                     [e["content"] for e in events if e["type"] == "tool_result"], events[-1]["result"])
    assert runs["engine"] == runs["provider"]
    assert runs["engine"][0] == [("grep", {"pattern": "beta"}), ("read_file", {"path": "notes.txt"})]
    assert runs["engine"][2] == "beta is on line 2 of notes.txt."
