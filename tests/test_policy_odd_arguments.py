"""What a model may send instead of the schema's strings, and what a settings file may hold
instead of a rule: the policy decides (never raises), and never allows a command or an edit
in the modes that ask for them.

The tool schema is advice to the model, not a check: arguments arrive as any JSON value
(a number, a list, an object, null, no object at all), and a rule in settings.json may be
any JSON value too. Each tool is judged with each such value under each argument name the
tools read, in every mode."""

from __future__ import annotations

from pathlib import Path

import pytest

from agent_code.policy.permissions import PermissionPolicy
from agent_code.policy.rules import RuleError, RuleSet, parse_rule
from agent_code.tools import default_tools

ODD = [None, 42, 1.5, True, [], ["rm", "-rf", "/"], [".git/config", 7], {"command": "rm -rf /"}, "", "\x00",
       ".git/config", "../../.agent/settings.json", "~/.ssh/id_rsa", "/etc/passwd", "rm -rf /"]
KEYS = ["command", "path", "file_path", "paths", "content", "old_string", "pattern", "source", "destination"]
NOT_AN_OBJECT = [None, "rm -rf /", [1], 3]
# the tools that change something: in default and plan mode none of them runs unasked
CHANGING = ("bash", "write_file", "edit_file")


@pytest.fixture
def places(tmp_path: Path) -> Path:
    for place in ("project/.git", "project/.agent", "project/src", "home/.ssh"):
        (tmp_path / place).mkdir(parents=True)
    return tmp_path


@pytest.mark.parametrize("mode", ["bypassPermissions", "default", "acceptEdits", "plan"])
def test_every_tool_with_arguments_of_any_type_gets_a_decision(places, mode):
    rules = RuleSet.from_lists(allow=["bash(git:*)", "bash(cat:*)", "bash(rm:*)"], deny=["bash(curl:*)"])
    rules.home = str(places / "home")
    policy = PermissionPolicy(mode, rules=rules, root=places / "project")
    seen = set()
    for tool in default_tools().list():
        calls: list[object] = [{key: value} for key in KEYS for value in ODD] + [{}, *NOT_AN_OBJECT]
        for arguments in calls:
            explained = policy.explain(tool, arguments)  # type: ignore[arg-type]
            assert explained.behavior in ("allow", "ask", "deny"), (tool.name, arguments, explained)
            seen.add(explained.behavior)
            if mode in ("default", "plan") and tool.name in CHANGING and not (
                    isinstance(arguments, dict) and all(isinstance(v, str) for v in arguments.values())):
                assert explained.behavior != "allow", (tool.name, arguments, explained)
    assert "allow" in seen  # (the reading tools run in every mode)


@pytest.mark.parametrize("text", [42, None, 1.5, True, [], ["bash(ls)"], {"bash": "ls"}])
def test_a_rule_that_is_not_a_string_is_a_rule_error_that_names_it(text):
    with pytest.raises(RuleError, match=r"allow rule .* \(in settings.json\) is not a string"):
        parse_rule(text, "allow", "settings.json")  # type: ignore[arg-type]


@pytest.mark.parametrize("text", ["", "bash(", "bash()"])
def test_a_malformed_rule_is_a_rule_error(text):
    with pytest.raises(RuleError, match=r"\(in settings.json\)"):
        parse_rule(text, "allow", "settings.json")
