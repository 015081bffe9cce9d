"""The task tool: a sub-agent with a fresh history, a restricted tool set, the parent's
provider and permission policy; its answer is the tool result, its events come nested."""

from __future__ import annotations

import json

from agent_code.agent import Agent
from agent_code.agent.agent_tools import install_agent_tools
from agent_code.agent.compaction import check_tool_pairing
from agent_code.agent.subagent import subagent_tools
from agent_code.tools import ToolContext, default_tools
from agent_code.types import ModelResponse, Usage


def use(id_, name, **input_):
    return {"type": "tool_use", "id": id_, "name": name, "input": input_}


def text(t):
    return {"type": "text", "text": t}


class Shared:
    """One scripted model for parent and child (as one endpoint would be); keeps what each
    request carried."""
    name, model = "shared", "shared"

    def __init__(self, *turns, usage=None):
        self.turns = list(turns)
        self.requests: list[dict] = []
        self.usage = usage

    def complete(self, messages, tools=None, system=None):
        self.requests.append({"messages": json.loads(json.dumps(messages)),
                              "tools": [t["name"] for t in tools or []], "system": system})
        return ModelResponse(content=self.turns.pop(0), usage=self.usage)


def agent_with_tools(tmp_path, provider, mode="bypassPermissions", **kw):
    events: list[dict] = []
    agent = Agent(provider, default_tools(), ToolContext(tmp_path), on_event=events.append, permissions=mode,
                  system="Parent system prompt.", **kw)
    install_agent_tools(agent)
    return agent, events


def test_the_sub_agent_answers_the_task_call(tmp_path):
    (tmp_path / "calc.py").write_text("def add(a, b):\n    return a - b\n")
    provider = Shared(
        [text("Let me delegate."), use("t1", "task", description="find add", prompt="Where is add defined?")],
        [use("g1", "grep", pattern="def add")],                       # the child
        [text("add is defined at calc.py:1 and subtracts.")],          # the child's answer
        [text("The bug is in calc.py:1.")],                            # the parent again
    )
    agent, events = agent_with_tools(tmp_path, provider)
    result = agent.run("Find the bug in add")
    assert result.status == "success" and result.final == "The bug is in calc.py:1."
    # the child started fresh: only its prompt, its own system note, no task/todo/plan tools
    child_first = provider.requests[1]
    assert child_first["messages"] == [{"role": "user", "content": [text("Where is add defined?")]}]
    assert "You are a sub-agent" in child_first["system"] and "Parent system prompt." in child_first["system"]
    assert {"task", "todo_write", "exit_plan_mode"}.isdisjoint(child_first["tools"])
    assert {"read_file", "grep", "edit_file", "bash"} <= set(child_first["tools"])
    # the parent's history holds the task call and its result only, not the child's steps
    parent_last = provider.requests[3]["messages"]
    assert parent_last[2]["content"] == [{"type": "tool_result", "tool_use_id": "t1", "is_error": False,
                                          "content": "add is defined at calc.py:1 and subtracts."}]
    assert "g1" not in json.dumps(parent_last) and check_tool_pairing(agent.messages) == []
    # nested events, tagged with the call that started them
    nested = [e for e in events if e["type"] == "subagent"]
    assert {e["parent_tool_use_id"] for e in nested} == {"t1"} and {e["description"] for e in nested} == {"find add"}
    inner = [e["event"]["type"] for e in nested]
    assert inner[0] == "system" and inner[-1] == "result" and "tool_use" in inner and "tool_result" in inner
    grep = next(e["event"] for e in nested if e["event"]["type"] == "tool_result")
    assert grep["content"] == "calc.py:1:def add(a, b):"
    # and in order: the child's events come between the task call and its result
    kinds = [(e["type"], e.get("name")) for e in events]
    assert kinds.index(("tool_use", "task")) < kinds.index(("subagent", None)) < kinds.index(("tool_result", "task"))


def test_the_sub_agent_inherits_plan_mode_and_its_denials_count(tmp_path):
    (tmp_path / "a.py").write_text("x = 1\n")
    provider = Shared(
        [use("t1", "task", description="fix x", prompt="Set x to 2 in a.py")],
        [use("r", "read_file", path="a.py")],
        [use("w", "write_file", path="a.py", content="x = 2\n"), use("b", "bash", command="touch z")],
        [text("I could not change a.py: plan mode.")],
        [text("The sub-agent was refused.")],
    )
    agent, events = agent_with_tools(tmp_path, provider, mode="plan")
    result = agent.run("fix it")
    assert (tmp_path / "a.py").read_text() == "x = 1\n" and not (tmp_path / "z").exists()
    assert [d["tool_use_id"] for d in result.permission_denials] == ["w", "b"]
    child_results = [e["event"] for e in events if e["type"] == "subagent" and e["event"]["type"] == "tool_result"]
    assert [r["is_error"] for r in child_results] == [False, True, True]


def test_the_sub_agent_edits_when_the_mode_allows_and_shares_file_state(tmp_path):
    (tmp_path / "a.py").write_text("x = 1\n")
    provider = Shared(
        [use("t1", "task", description="fix x", prompt="Set x to 2 in a.py")],
        [use("r", "read_file", path="a.py")],
        [use("e", "edit_file", path="a.py", old_string="x = 1", new_string="x = 2")],
        [text("Set x = 2 in a.py.")],
        # the parent edits again without reading: the child's read and edit are on record
        [use("e2", "edit_file", path="a.py", old_string="x = 2", new_string="x = 3")],
        [text("done")],
    )
    agent, _ = agent_with_tools(tmp_path, provider, mode="acceptEdits")
    assert agent.run("fix it").final == "done"
    assert (tmp_path / "a.py").read_text() == "x = 3\n"
    assert [b.tool for b in agent.ctx.backups] == ["edit_file", "edit_file"]  # both undoable


def test_no_recursion_and_failures_are_tool_errors(tmp_path):
    provider = Shared(
        [use("t1", "task", description="loop", prompt="Dispatch another task")],
        [use("t2", "task", description="again", prompt="x")],   # the child tries to recurse
        *[[use(f"e{i}", "echo", text=str(i))] for i in range(30)],  # then never answers
        [text("The sub-agent gave up.")],
    )
    agent, events = agent_with_tools(tmp_path, provider, max_steps=30)
    result = agent.run("go")
    child = [e["event"] for e in events if e["type"] == "subagent" and e["event"]["type"] == "tool_result"]
    assert child[0]["is_error"] and child[0]["content"].startswith("unknown tool 'task'")
    task_result = next(e for e in events if e["type"] == "tool_result" and e["name"] == "task")
    assert task_result["is_error"] and "stopped after 30 steps" in task_result["content"]
    assert result.final == "The sub-agent gave up."


def test_the_sub_agent_s_tokens_count_towards_the_parent_run(tmp_path):
    provider = Shared([use("t1", "task", description="d", prompt="p")], [text("child answer")],
                      [text("parent answer")], usage=Usage(100, 10))
    agent, events = agent_with_tools(tmp_path, provider)
    result = agent.run("go")
    assert result.usage.input_tokens == 300 and result.usage.output_tokens == 30
    assert events[-1]["usage"] == {"input_tokens": 300, "output_tokens": 30}


def test_sub_agent_tools_leave_out_exactly_the_agent_bound_ones(tmp_path):
    agent, _ = agent_with_tools(tmp_path, Shared())
    names = [t.name for t in subagent_tools(agent).list()]
    assert names == [t.name for t in default_tools().list()]


def test_scripted_provider_through_the_cli_streams_nested_events(tmp_path):
    from conftest import run_cli

    project = tmp_path / "project"
    project.mkdir()
    (project / "notes.txt").write_text("alpha\nbeta\n")
    turns = [[use("t1", "task", description="find beta", prompt="Which line of notes.txt has beta?")],
             [use("g", "grep", pattern="beta")], [text("line 2")], [text("beta is on line 2.")]]
    script = tmp_path / "s.jsonl"
    script.write_text("\n".join(json.dumps(t) for t in turns) + "\n")
    proc = run_cli("--provider", "scripted", "--script", str(script), "-C", str(project), "--output-format",
                   "stream-json", "--no-session-persistence", "where is beta?")
    assert proc.returncode == 0, proc.stderr
    events = [json.loads(line) for line in proc.stdout.splitlines()]
    nested = [e for e in events if e["type"] == "subagent"]
    assert nested and all(e["parent_tool_use_id"] == "t1" for e in nested)
    assert any(e["event"]["type"] == "tool_result" and e["event"]["content"] == "notes.txt:2:beta" for e in nested)
    assert events[-1]["result"] == "beta is on line 2."
    text_run = run_cli("--provider", "scripted", "--script", str(script), "-C", str(project),
                       "--no-session-persistence", "where is beta?")
    assert "[find beta] tool_call: grep" in text_run.stdout
