"""The tolerated client rewrites (trajectory/echo.py) and side requests (trajectory/side.py), as
pure functions and through the history index; the real clients: tests/test_client_conformance*.py."""

from __future__ import annotations


from agent_code.trajectory import echo, side
from agent_code.trajectory.history import SessionHistory
from agent_code.trajectory.records import TurnRecord

TOOLS = [{"type": "function", "function": {"name": "Edit", "parameters": {"type": "object", "properties": {
    "file_path": {"type": "string"}, "old_string": {"type": "string"}, "new_string": {"type": "string"},
    "replace_all": {"type": "boolean", "default": False}}}}},
    {"type": "function", "function": {"name": "Bash", "parameters": {"type": "object", "properties": {
        "command": {"type": "string"}}}}}]
SCHEMAS = echo.schemas(TOOLS)


def assistant(name: str, args: dict) -> dict:
    return {"role": "assistant", "content": "", "tool_calls": [{"type": "function", "function": {
        "name": name, "arguments": args}}]}


EDIT = {"file_path": "a.py", "old_string": "x", "new_string": "y"}


def test_a_filled_default_and_a_dropped_cd_are_the_same_call():
    assert echo.echo_form(assistant("Edit", EDIT), SCHEMAS) == echo.echo_form(
        assistant("Edit", {**EDIT, "replace_all": False}), SCHEMAS)
    assert echo.echo_form(assistant("Bash", {"command": "cd /w && pytest -q"}), SCHEMAS) == echo.echo_form(
        assistant("Bash", {"command": "pytest -q"}), SCHEMAS)
    assert echo.echo_form(assistant("Bash", {"command": "cd '/a b' && ls"}), SCHEMAS) == echo.echo_form(
        assistant("Bash", {"command": "ls"}), SCHEMAS)


def test_other_differences_are_not_tolerated():
    form = lambda name, args: echo.echo_form(assistant(name, args), SCHEMAS)  # noqa: E731
    assert form("Edit", {**EDIT, "replace_all": True}) != form("Edit", EDIT)       # not the default
    assert form("Edit", {**EDIT, "new_string": "z"}) != form("Edit", EDIT)
    assert form("Bash", {"command": "cd /w; rm x"}) != form("Bash", {"command": "rm x"})   # not `cd … &&`
    assert form("Bash", {"command": "cd /w && "}) != form("Bash", {"command": ""})
    assert form("Edit", {"command": "cd /w && ls"}) != form("Edit", {"command": "ls"})  # cd rule: Bash only
    # a message without tool calls, or a tool the request does not list, is left as it is
    plain = {"role": "assistant", "content": "hi"}
    assert echo.echo_form(plain, SCHEMAS) is plain
    assert form("Unknown", {"a": 1}) == assistant("Unknown", {"a": 1})


def test_differences_name_the_rewrites():
    notes = echo.differences(assistant("Edit", EDIT), assistant("Edit", {**EDIT, "replace_all": False}), SCHEMAS, 4)
    assert notes == [{"kind": "client-rewrite", "turn": 4, "call": 0, "tool": "Edit",
                      "rewrites": ["Claude Code: fills in arguments whose schema has a default"],
                      "generated": EDIT, "echoed": {**EDIT, "replace_all": False}}]
    assert echo.differences(assistant("Edit", EDIT), assistant("Edit", EDIT), SCHEMAS, 4) == []


def record(index: int, messages: list, reply: dict, tools=TOOLS, parent=None) -> TurnRecord:
    return TurnRecord.build(session_id="s", index=index, messages=messages, tools=tools, prompt_ids=[1, 2],
                            output_ids=[3], logprobs=[-0.1], finish_reason="stop", reply=reply, parent=parent)


def test_the_history_finds_the_parent_through_a_rewritten_echo_but_not_through_another_change():
    history = SessionHistory()
    user = [{"role": "user", "content": "fix"}]
    turn = record(0, user, assistant("Edit", EDIT))
    history.add(turn)
    result = {"role": "tool", "content": "ok"}
    echoed = [*user, assistant("Edit", {**EDIT, "replace_all": False}), result]
    assert history.find_parent(echoed, TOOLS) == (0, 2)
    changed = [*user, assistant("Edit", {**EDIT, "new_string": "other"}), result]
    assert history.find_parent(changed, TOOLS) is None


def test_side_requests():
    tools_root = record(1, [{"role": "system", "content": "You are an agent"}, {"role": "user", "content": "go"}],
                        {"role": "assistant", "content": "ok"})
    title = record(0, [{"role": "system", "content": "Generate a concise, sentence-case title for it"},
                       {"role": "user", "content": "x"}], {"role": "assistant", "content": "T"}, tools=None)
    bare = record(2, [{"role": "user", "content": "quota"}], {"role": "assistant", "content": "q"}, tools=None)
    assert side.marked(title.messages) == "Claude Code: session title"
    assert side.side_roots([title, tools_root, bare]) == {0, 2}
    # a conversation that never offers tools has no side requests but marked ones
    assert side.side_roots([bare]) == set()
    assert side.side_roots([title]) == {0}
