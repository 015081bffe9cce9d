"""Issue 16, item 1: agent-code's prompt holds nothing per rollout before the task, so an
engine's prefix cache serves the system prompt and the tool list of every rollout after the
first. Checked on the rendered token ids (every profile, two sandboxes) and on the real
embedded llama.cpp engine, whose reported cached tokens reach the turn record, the sample's
metadata and the rollout's token counts."""

from __future__ import annotations

import importlib.util
from pathlib import Path

import anthropic
import pytest

from agent_code.agent.prompt import system_prompt
from agent_code.render import models
from agent_code.render.template import load_renderer
from agent_code.tools import SMALL_PROFILE, default_tools

SANDBOXES = (Path("/tmp/agent-code-sandbox-k3j2x9/workspace"), Path("/tmp/agent-code-sandbox-q81zzw/workspace"))


def _canonical(system: str, task: str) -> list[dict]:
    return [{"role": "system", "content": system}, {"role": "user", "content": task}]


def _common(a: list[int], b: list[int]) -> int:
    n = 0
    for x, y in zip(a, b):
        if x != y:
            break
        n += 1
    return n


def _schemas(profile: str) -> list[dict]:
    return [{"type": "function", "function": {"name": s["name"], "description": s["description"],
                                              "parameters": s["input_schema"]}}
            for s in default_tools(profile).schemas()]


@pytest.mark.parametrize("profile", ["full", "small"])
def test_two_sandboxes_render_the_same_prefix_up_to_the_task(profile):
    renderer = load_renderer(None)
    tools = _schemas(profile)
    a, b = (renderer.render(_canonical(system_prompt(box, "bypassPermissions", "", profile), task), tools)
            for box, task in zip(SANDBOXES, ("Fix the failing test in calc.py.", "Make tests/test_text.py pass.")))
    shared = _common(a, b)
    task_start = len(renderer.render(_canonical(system_prompt(SANDBOXES[0], "bypassPermissions", "", profile), ""),
                                     tools)) - 4  # the user turn's own markers and the generation prompt
    assert shared >= task_start - 8, f"the prompts part at token {shared} of the ~{task_start} before the task"
    assert shared / len(a) > 0.8


def test_the_old_first_line_defeated_the_cache():
    """The control: with the sandbox path on the first line (as before issue 16) two rollouts
    share only the first few tokens, so a cache could reuse nothing."""
    renderer = load_renderer(None)
    tools = _schemas("full")
    a, b = (renderer.render(_canonical(system_prompt(box, "bypassPermissions").replace(
        "the project workspace", f"the project at {box}"), "Fix it."), tools) for box in SANDBOXES)
    assert _common(a, b) < 30 < len(a) // 10


def test_small_profile_is_four_short_tools_and_the_working_pattern():
    tools = default_tools("small")
    assert [t.name for t in tools.list()] == ["read_file", "list_files", "write_file", "bash"]
    full = {t.name: t for t in default_tools().list()}
    for t in tools.list():
        description, keep = SMALL_PROFILE[t.name]
        assert t.description == description and t.fn is full[t.name].fn
        wide = full[t.name].input_schema
        assert t.input_schema["properties"] == {k: v for k, v in wide["properties"].items() if k in keep}
        assert set(t.input_schema["required"]) == set(wide["required"]) <= set(keep)  # nothing required is hidden
    assert list(tools.get("read_file").input_schema["properties"]) == ["path"]
    text = system_prompt(SANDBOXES[0], "bypassPermissions", "", "small")
    for step in ("list_files", "python -m pytest", "whole corrected file in one code block", "repeat 3"):
        assert step in text
    assert len(text) < len(system_prompt(SANDBOXES[0], "bypassPermissions"))
    with pytest.raises(ValueError, match="unknown tool profile"):
        default_tools("tiny")
    with pytest.raises(ValueError, match="unknown tool profile"):
        system_prompt(SANDBOXES[0], profile="tiny")


@pytest.mark.slow
@pytest.mark.skipif(importlib.util.find_spec("xllamacpp") is None or not models.default_gguf_available(),
                    reason="xllamacpp or the default model's GGUF parts are not installed")
def test_the_engine_serves_the_second_rollouts_prefix_from_its_cache():
    from agent_code.engines.llamacpp import LlamaCppEngine
    from agent_code.gateway.app import create_app
    from agent_code.gateway.pipeline import Gateway
    from agent_code.gateway.server import BackgroundServer
    from agent_code.rollout.runner import RolloutResult, _finish

    renderer = load_renderer(None)
    gateway = Gateway(LlamaCppEngine(n_ctx=4096), renderer, model_name="qwen2.5-coder-0.5b")
    tools = default_tools("small").schemas()
    with BackgroundServer(create_app(gateway)) as server:
        for n, (box, task) in enumerate(zip(SANDBOXES, ("Fix the failing test in calc.py.",
                                                         "Make tests/test_text.py pass."))):
            client = anthropic.Anthropic(base_url=server.url, api_key=f"rollout-{n}", max_retries=0)
            client.messages.create(model="qwen2.5-coder-0.5b", max_tokens=1, tools=tools,
                                   system=system_prompt(box, "bypassPermissions", "", "small"),
                                   messages=[{"role": "user", "content": task}])
        first, second = (gateway.store.get(f"rollout-{n}").turns[0] for n in range(2))
        shared = _common(first.prompt_ids.tolist(), second.prompt_ids.tolist())
        assert first.cached_tokens is not None and second.cached_tokens is not None
        assert second.cached_tokens >= shared - 2 > 0.8 * len(second.prompt_ids), (second.cached_tokens, shared)
        assert first.to_dict()["cached_tokens"] == first.cached_tokens

        # and on to the rollout's counts, each turn once
        import asyncio

        class Client:
            async def finish(self, session_id, **kw):
                return gateway.finish_session(session_id, reward=kw.get("reward"), metadata=kw.get("metadata"),
                                              rollout_id=kw.get("rollout_id"), status=kw.get("status"))

        result = RolloutResult("t/1", "t", 1, "rollout-1", "agent-code", reward=0.0)
        asyncio.run(_finish(Client(), result))
        assert result.tokens["engine_prompt"] == len(second.prompt_ids)
        assert result.tokens["cached"] == second.cached_tokens


def test_cli_and_rollout_harness_take_the_profile(tmp_path):
    import json
    import subprocess
    import sys

    from agent_code.harness.agent_code import AgentCodeHarness
    from agent_code.harness.base import Launch

    def init_tools(*flags: str) -> list[str]:
        run = subprocess.run([sys.executable, "-m", "agent_code", "-p", "hi", "--provider", "scripted",
                              "--output-format", "stream-json", "--no-session-persistence", "-C", str(tmp_path),
                              *flags], capture_output=True, text=True, timeout=120)
        return json.loads(run.stdout.splitlines()[0])["tools"]

    assert init_tools("--tool-profile", "small") == [t.name for t in default_tools("small").list()]
    full = init_tools()
    assert {"task", "todo_write", "glob", "project_tree"} <= set(full) and len(full) > 6
    bad = subprocess.run([sys.executable, "-m", "agent_code", "-p", "hi", "--provider", "scripted",
                          "--tool-profile", "tiny"], capture_output=True, text=True, timeout=120)
    assert bad.returncode == 2 and "--tool-profile tiny: choose full or small" in bad.stderr

    launch = Launch(base_url="http://127.0.0.1:1", session_id="s", model="m", prompt="p", workdir="/w", home="/h",
                    tool_profile="small")
    assert "--tool-profile small" in AgentCodeHarness().command(launch)
