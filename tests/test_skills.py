"""Skills: SKILL.md front matter, discovery (project over user), the system prompt's list,
and the ``skill`` tool loading a body on demand (kind read: allowed in plan mode)."""

from __future__ import annotations

import json
from pathlib import Path

from agent_code.agent import Agent
from agent_code.agent.prompt import skills_prompt
from agent_code.agent.settings import Settings, configure_agent
from agent_code.policy import PermissionPolicy
from agent_code.providers.scripted import ScriptedProvider
from agent_code.tools import ToolContext, default_tools
from agent_code.tools.skills import find_skills, split_front_matter
from agent_code.types import ToolCall


def write_skill(base: Path, directory: str, text: str) -> Path:
    path = base / directory / "SKILL.md"
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(text)
    return path


def test_front_matter():
    fields, body = split_front_matter('---\nname: "release"\ndescription: >\n  Write release notes\n  from git.\n'
                                      '# a comment\nother: x\n---\nStep 1.\n')
    assert fields == {"name": "release", "description": "Write release notes from git.", "other": "x"}
    assert body == "Step 1."
    assert split_front_matter("no front matter\n---\n") == ({}, "no front matter\n---\n")
    assert split_front_matter("---\nname: x\n(never closed)")[0] == {}


def test_discovery_project_wins_and_defaults(tmp_path):
    root, home = tmp_path / "p", tmp_path / "home"
    write_skill(root / ".agents/skills", "release", "---\nname: release\ndescription: project version\n---\nP")
    write_skill(home / ".agent-code/skills", "release", "---\nname: release\ndescription: user version\n---\nU")
    write_skill(home / ".agent-code/skills", "review", "# Review a pull request\n\nRead the diff first.")
    write_skill(root / ".agents/skills", "bad", "---\nname: has spaces\n---\nx")
    (root / ".agents/skills/empty-dir").mkdir()
    skills = find_skills(root, home)
    assert [(s.name, s.description, s.source) for s in skills] == [
        ("release", "project version", "project"), ("review", "Review a pull request", "user")]
    assert skills[1].body() == "# Review a pull request\n\nRead the diff first."
    prompt = skills_prompt(skills)
    assert "- release: project version" in prompt and "- review: Review a pull request" in prompt
    assert skills_prompt([]) == ""


def test_skill_tool_loads_the_body_on_demand(tmp_path, monkeypatch):
    monkeypatch.setenv("HOME", str(tmp_path / "home"))
    root = tmp_path / "p"
    write_skill(root / ".agents/skills", "deploy", "---\nname: deploy\ndescription: Ship it.\n---\n1. Run make.\n")
    registry = default_tools()
    ctx = ToolContext(root)
    out = registry.run(ToolCall("s1", "skill", {"name": "deploy"}), ctx)
    assert not out.is_error and "1. Run make." in out.content and ".agents/skills/deploy/" in out.content
    missing = registry.run(ToolCall("s2", "skill", {"name": "nope"}), ctx)
    assert missing.is_error and "available: deploy" in missing.content
    assert registry.get("skill").kind == "read"
    assert PermissionPolicy("plan").check(registry.get("skill"), {"name": "deploy"}).allowed


def test_configure_agent_lists_skills_in_the_system_prompt_and_keeps_them_on_mode_switch(tmp_path):
    root, home = tmp_path / "p", tmp_path / "home"
    write_skill(root / ".agents/skills", "deploy", "---\nname: deploy\ndescription: Ship it.\n---\nbody")
    script = tmp_path / "s.jsonl"
    script.write_text(json.dumps([{"type": "text", "text": "ok"}]) + "\n")
    agent = Agent(ScriptedProvider(script), default_tools(), ToolContext(root), system="BASE")
    agent.system_for_mode = lambda mode: f"BASE {mode}"
    configure_agent(agent, Settings(), root, home=home)
    assert agent.system.startswith("BASE") and "- deploy: Ship it." in agent.system
    agent.set_permission_mode("plan")
    assert agent.system.startswith("BASE plan") and "- deploy: Ship it." in agent.system
    assert "body" not in agent.system  # only the list; the body comes through the tool
