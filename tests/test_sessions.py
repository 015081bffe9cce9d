"""Sessions (every change to the history appended to .agent/sessions/<id>.jsonl as it
happens; -c / --resume) and memory (AGENTS.md and friends in the system prompt)."""

from __future__ import annotations

import json
import os
import subprocess
from pathlib import Path

import pytest
from conftest import cli_env, run_cli

from agent_code.agent import Agent
from agent_code.agent.agent_tools import install_agent_tools
from agent_code.agent.memory import find_memory_files, format_memory, load_memory
from agent_code.agent.prompt import system_prompt
from agent_code.agent.sessions import (
    SessionError,
    SessionLog,
    find_session,
    latest_session,
    list_sessions,
    load_session,
    replay,
    sessions_dir,
)
from agent_code.providers.scripted import ScriptedProvider
from agent_code.tools import ToolContext, default_tools
from agent_code.types import ModelResponse


def use(id_, name, **input_):
    return {"type": "tool_use", "id": id_, "name": name, "input": input_}


def text(t):
    return {"type": "text", "text": t}


def write_script(path: Path, *turns) -> Path:
    path.write_text("\n".join(json.dumps(t) for t in turns) + "\n")
    return path


def script(tmp_path, *turns) -> ScriptedProvider:
    return ScriptedProvider(write_script(tmp_path / "script.jsonl", *turns))


def records(path: Path) -> list[dict]:
    return [json.loads(line) for line in path.read_text().splitlines()]


# --- the log --------------------------------------------------------------------------------

def test_every_turn_is_on_disk_as_it_happens(tmp_path):
    project = tmp_path / "p"
    project.mkdir()
    log = SessionLog.create(project, model="m")
    seen_on_disk = []

    class Watching:
        """Looks at the session file each time the model is called."""
        name, model = "w", "w"

        def __init__(self):
            self.inner = script(tmp_path, [use("a", "echo", text="one")], [text("done")])

        def complete(self, messages, tools=None, system=None):
            seen_on_disk.append([r["message"]["role"] for r in records(log.path) if r["type"] == "message"])
            return self.inner.complete(messages, tools, system)

    agent = Agent(Watching(), default_tools(), ToolContext(project), session=log)
    result = agent.run("hi")
    assert result.final == "done"
    # before the 1st call the prompt was written; before the 2nd, the assistant turn and the results
    assert seen_on_disk == [["user"], ["user", "assistant", "user"]]
    lines = records(log.path)
    assert lines[0]["type"] == "session" and lines[0]["id"] == log.id and lines[0]["model"] == "m"
    assert replay(log.path).messages == agent.messages
    assert log.path.parent == sessions_dir(project)


def test_folded_prompts_interrupts_and_todos_replay_exactly(tmp_path):
    log = SessionLog.create(tmp_path)
    provider = script(tmp_path, [use("a", "echo", text="x")], [text("answer")])
    agent = Agent(provider, default_tools(), ToolContext(tmp_path), session=log, max_steps=1)
    install_agent_tools(agent)
    assert agent.run("first").status == "max_steps"
    agent.run("and now?")  # folded into the user message of tool results: rewind + message
    assert replay(log.path).messages == agent.messages
    assert agent.messages[2]["content"][-1] == text("and now?")

    class Interrupting:
        name, model = "x", "x"

        def complete(self, messages, tools=None, system=None):
            raise KeyboardInterrupt

    agent.provider = Interrupting()
    before = [dict(m) for m in agent.messages]
    with pytest.raises(KeyboardInterrupt):
        agent.run("this turn is dropped")
    assert agent.messages == before and replay(log.path).messages == before

    agent.provider = script(tmp_path, [use("t", "todo_write", todos=[{"content": "read", "status": "completed"},
                                                                      {"content": "fix", "status": "pending"}])],
                            [text("ok")])
    agent.max_steps = 5
    agent.run("plan")
    assert replay(log.path).todos == [{"content": "read", "status": "completed"},
                                      {"content": "fix", "status": "pending"}]


def test_sessions_are_ignored_by_git(tmp_path):
    subprocess.run(["git", "init", "-q"], cwd=tmp_path, check=True)
    SessionLog.create(tmp_path).message({"role": "user", "content": [text("secret")]})
    status = subprocess.run(["git", "status", "--porcelain", "--untracked-files=all"], cwd=tmp_path,
                            capture_output=True, text=True, check=True).stdout
    assert status == ""


# --- resuming -------------------------------------------------------------------------------

def write_log(root: Path, session_id: str, messages: list[dict], mtime: float | None = None) -> Path:
    log = SessionLog.create(root, session_id)
    for m in messages:
        log.message(m)
    log.close()
    if mtime is not None:
        os.utime(log.path, (mtime, mtime))
    return log.path


HISTORY = [{"role": "user", "content": [text("fix the bug")]},
           {"role": "assistant", "content": [use("r1", "read_file", path="a.py")]},
           {"role": "user", "content": [{"type": "tool_result", "tool_use_id": "r1", "content": "x"}]},
           {"role": "assistant", "content": [text("fixed")]}]


def test_find_latest_and_unknown_sessions(tmp_path):
    with pytest.raises(SessionError, match="no session to continue"):
        latest_session(tmp_path)
    write_log(tmp_path, "20260101-000000-aaaa", HISTORY, mtime=1_000_000)
    write_log(tmp_path, "20260102-000000-bbbb", HISTORY[:1], mtime=2_000_000)
    assert latest_session(tmp_path).stem == "20260102-000000-bbbb"
    assert [s.id for s in list_sessions(tmp_path)] == ["20260102-000000-bbbb", "20260101-000000-aaaa"]
    assert find_session(tmp_path, "20260101").stem == "20260101-000000-aaaa"  # a unique prefix
    with pytest.raises(SessionError, match="matches 2 sessions"):
        find_session(tmp_path, "2026")
    with pytest.raises(SessionError) as info:
        find_session(tmp_path, "nope")
    message = str(info.value)
    assert "no session 'nope'" in message and "recent sessions" in message
    assert "20260102-000000-bbbb" in message and "fix the bug" in message
    with pytest.raises(SessionError, match="not a session id"):
        find_session(tmp_path, "../../etc/passwd")


def test_resume_drops_an_unfinished_last_turn_and_refuses_a_broken_history(tmp_path):
    unfinished = HISTORY[:2]  # the process died while read_file ran
    loaded = load_session(write_log(tmp_path, "s1", unfinished))
    assert loaded.messages == HISTORY[:1] and "dropped" in loaded.notes[0]
    broken = [HISTORY[0], HISTORY[1], {"role": "user", "content": [text("no result")]}, HISTORY[3]]
    with pytest.raises(SessionError, match="tool_use r1 has no tool_result"):
        load_session(write_log(tmp_path, "s2", broken))
    path = write_log(tmp_path, "s3", HISTORY)
    with path.open("a") as f:
        f.write('{"type": "message", "mess')  # torn by a crash
    assert load_session(path).messages == HISTORY


class Recording:
    """Answers with a fixed text and keeps the messages of each request."""
    name, model = "rec", "rec"

    def __init__(self):
        self.requests = []

    def complete(self, messages, tools=None, system=None):
        self.requests.append(json.loads(json.dumps(messages)))
        return ModelResponse(content=[text(f"answer {len(self.requests)}")])


def test_a_resumed_agent_sends_the_earlier_turns(tmp_path):
    path = write_log(tmp_path, "s1", HISTORY)
    loaded = load_session(path)
    provider = Recording()
    agent = Agent(provider, default_tools(), ToolContext(tmp_path), session=SessionLog.reopen(path, loaded.id))
    agent.restore(loaded.messages)
    agent.run("and the docs?")
    assert provider.requests[0][:4] == HISTORY
    assert provider.requests[0][4] == {"role": "user", "content": [text("and the docs?")]}
    assert replay(path).messages == agent.messages and len(agent.messages) == 6


def test_cli_sessions_continue_and_resume(tmp_path):
    project = tmp_path / "project"
    project.mkdir()
    first = write_script(tmp_path / "one.jsonl", [use("e", "echo", text="hello")], [text("first answer")])
    args = ["--provider", "scripted", "-C", str(project), "--output-format", "stream-json"]
    proc = run_cli(*args, "--script", str(first), "say hello")
    assert proc.returncode == 0, proc.stderr
    events = [json.loads(line) for line in proc.stdout.splitlines()]
    session_id = events[0]["session_id"]
    assert events[0]["resumed"] is False and events[-1]["session_id"] == session_id
    path = sessions_dir(project) / f"{session_id}.jsonl"
    assert [m["role"] for m in replay(path).messages] == ["user", "assistant", "user", "assistant"]

    second = write_script(tmp_path / "two.jsonl", [text("second answer")])
    for how in (["-c"], ["--resume", session_id], ["--resume", session_id[:17]]):
        proc = run_cli(*args, "--script", str(second), *how, "again")
        assert proc.returncode == 0, proc.stderr
        init = json.loads(proc.stdout.splitlines()[0])
        assert init["session_id"] == session_id and init["resumed"] is True and init["messages"] >= 4
    messages = replay(path).messages
    assert len(messages) == 4 + 3 * 2 and messages[4] == {"role": "user", "content": [text("again")]}

    text_run = run_cli("--provider", "scripted", "-C", str(project), "--script", str(second), "-c", "more")
    assert f"session: {session_id} (resumed, 10 messages; continue it with --resume {session_id})" in text_run.stdout


def test_cli_session_errors(tmp_path):
    project = tmp_path / "project"
    project.mkdir()
    base = ["--provider", "mock", "-C", str(project)]
    proc = run_cli(*base, "-c", "hi")
    assert proc.returncode == 1 and "no session to continue" in proc.stderr
    proc = run_cli(*base, "hi")  # makes one session
    assert proc.returncode == 0
    proc = run_cli(*base, "--resume", "deadbeef", "hi")
    assert proc.returncode == 1
    assert "no session 'deadbeef'" in proc.stderr and "recent sessions" in proc.stderr
    assert run_cli(*base, "-c", "--resume", "x", "hi").returncode == 2
    before = len(list_sessions(project))
    assert run_cli(*base, "--no-session-persistence", "hi").returncode == 0
    assert len(list_sessions(project)) == before


# --- memory ---------------------------------------------------------------------------------

def test_memory_files_are_found_deduplicated_and_delimited(tmp_path):
    home, project = tmp_path / "home", tmp_path / "project"
    (home / ".agent-code").mkdir(parents=True)
    project.mkdir()
    (home / ".agent-code" / "AGENTS.md").write_text("Answer in English.\n")
    (project / "AGENTS.md").write_text("Run tests with `make test`.\n")
    (project / "CLAUDE.md").symlink_to("AGENTS.md")       # the same file: loaded once
    (project / "AGENT.md").write_text("Never touch vendor/.\n")
    files = find_memory_files(project, home=home)
    assert [f.source for f in files] == ["~/.agent-code/AGENTS.md", "AGENTS.md", "AGENT.md"]
    block, _ = load_memory(project, home=home)
    assert '<project-instructions source="AGENTS.md">\nRun tests with `make test`.\n</project-instructions>' in block
    assert block.count("<project-instructions") == 3 and block.count("</project-instructions>") == 3
    prompt = system_prompt(project, "plan", block)
    assert prompt.index("Permission mode: plan.") < prompt.index("Never touch vendor/")
    assert load_memory(tmp_path / "nothing", home=tmp_path / "nohome") == ("", [])


def test_memory_is_capped(tmp_path):
    (tmp_path / "AGENTS.md").write_text("a" * 30_000)
    (tmp_path / "CLAUDE.md").write_text("b" * 30_000)
    files = find_memory_files(tmp_path, home=tmp_path / "nohome")
    block = format_memory(files, max_file_chars=20_000, max_total_chars=25_000)
    assert block.count("a") >= 20_000 and block.count("a") < 20_100
    assert "10000 more characters not loaded" in block
    assert 4_900 <= block.count("b") <= 5_100 and len(block) < 26_000


def test_cli_loads_memory(tmp_path):
    project, home = tmp_path / "project", tmp_path / "home"
    project.mkdir()
    home.mkdir()
    (project / "AGENTS.md").write_text("Use tabs.\n")
    proc = run_cli("--provider", "mock", "-C", str(project), "--output-format", "stream-json", "hi",
                   env=cli_env(HOME=str(home)))
    assert proc.returncode == 0, proc.stderr
    assert json.loads(proc.stdout.splitlines()[0])["memory"] == ["AGENTS.md"]
