"""The interactive shell: every slash command works, asking y/n/always with a diff, /undo,
Ctrl-C dropping a turn, plan approval — driven through piped input — and the real
``agent-code`` in a tmux pane (prompt_toolkit on a terminal), skipped without tmux."""

from __future__ import annotations

import io
import json
import os
import shutil
import subprocess
import sys
import time
from pathlib import Path

import pytest

from agent_code.agent import Agent
from agent_code.agent.agent_tools import install_agent_tools
from agent_code.agent.compaction import check_tool_pairing
from agent_code.agent.prompt import system_prompt
from agent_code.agent.undo import undo_last
from agent_code.cli.render import TextRenderer
from agent_code.cli.repl import COMMANDS, Repl, interactive_system
from agent_code.policy import PermissionMode
from agent_code.providers.scripted import ScriptedProvider
from agent_code.tools import ToolContext, default_tools
from agent_code.types import ToolCall
from conftest import cli_env


def use(id_, name, **input_):
    return {"type": "tool_use", "id": id_, "name": name, "input": input_}


def text(t):
    return [{"type": "text", "text": t}]


def write_script(path: Path, *turns) -> Path:
    path.write_text("\n".join(json.dumps(t) for t in turns) + "\n")
    return path


def make_repl(tmp_path: Path, lines: list[str], *turns, mode: str = "default"):
    project = tmp_path / "project"
    project.mkdir(parents=True, exist_ok=True)
    turns = turns or (text("unused"),)
    out = io.StringIO()
    agent = Agent(ScriptedProvider(write_script(tmp_path / "script.jsonl", *turns)), default_tools(),
                  ToolContext(project), system=system_prompt(project, mode), permissions=mode,
                  on_event=TextRenderer(out=out))
    agent.system_for_mode = lambda m: system_prompt(project, m)
    install_agent_tools(agent)
    repl = Repl(agent, stdin=io.StringIO("".join(line + "\n" for line in lines)), stdout=out,
                stderr=out, interactive=False)
    return repl, agent, out, project


# --- slash commands -----------------------------------------------------------------

def test_every_listed_command_works(tmp_path):
    repl, agent, out, _ = make_repl(tmp_path, ["/help"], text("summary"))
    assert repl.run() == 0
    shown = out.getvalue()
    for c in COMMANDS:
        assert c.usage in shown
        assert callable(getattr(repl, c.handler)), c.name
    for c in COMMANDS:
        if c.name != "/exit":
            before = len(out.getvalue())
            repl.command(c.name)  # none raises, each prints something
            assert len(out.getvalue()) > before, c.name
    for alias in ("/exit", "/quit", "/EXIT"):
        r, *_ = make_repl(tmp_path / alias.strip("/"), [alias, "never sent"])
        assert r.run() == 0


def test_unknown_commands_and_empty_lines(tmp_path):
    repl, _, out, _ = make_repl(tmp_path, ["", "/bogus", "/exit"])
    assert repl.run() == 0
    assert "unknown command /bogus; /help lists them" in out.getvalue()


def test_permissions_shows_and_switches_the_mode(tmp_path):
    repl, agent, out, _ = make_repl(tmp_path, ["/permissions", "/permissions plan", "/permissions",
                                               "/permissions yolo", "/permissions acceptedits"])
    repl.run()
    shown = out.getvalue()
    assert "permission mode: default" in shown and "[plan] > " in shown and "permission mode: plan" in shown
    assert "unknown mode 'yolo'" in shown
    assert agent.permissions.mode is PermissionMode.ACCEPT_EDITS
    assert "Permission mode: acceptEdits" in agent.system and "shown to the user" in agent.system


def test_model_shows_and_switches(tmp_path):
    repl, agent, out, _ = make_repl(tmp_path, ["/model", "/model other-model", "/model"])
    repl.run()
    assert agent.provider.model == "other-model"
    assert out.getvalue().count("model: other-model") == 2


def test_compact_replaces_older_turns(tmp_path):
    repl, agent, out, _ = make_repl(tmp_path, ["one", "two", "three", "/compact"],
                                    text("a1"), text("a2"), text("a3"), text("the summary"))
    repl.run()
    assert "compact: compacted" in out.getvalue()
    assert len(agent.messages) < 6 and check_tool_pairing(agent.messages) == []
    assert "the summary" in json.dumps(agent.messages[0])


def test_system_prompt_says_the_user_is_asked():
    prompt = interactive_system(system_prompt(Path("/p"), "default"))
    assert "will be refused in this run" not in prompt and "approves or declines" in prompt


# --- asking -------------------------------------------------------------------------

EDIT_TURNS = ([use("r1", "read_file", path="a.py")],
              [use("e1", "edit_file", path="a.py", old_string="x = 1", new_string="x = 2")],
              text("done"))


def test_ask_yes_applies_the_edit_after_showing_its_diff(tmp_path):
    repl, agent, out, project = make_repl(tmp_path, ["fix it", "y"], *EDIT_TURNS)
    (project / "a.py").write_text("x = 1\n")
    repl.run()
    shown = out.getvalue()
    assert "edit_file wants to change a.py" in shown and "-x = 1" in shown and "+x = 2" in shown
    assert "allow? [y]es / [n]o / [a]lways allow Edit this session" in shown
    assert (project / "a.py").read_text() == "x = 2\n"


def test_ask_no_tells_the_model_the_user_declined(tmp_path):
    repl, agent, out, project = make_repl(tmp_path, ["fix it", "n"], *EDIT_TURNS)
    (project / "a.py").write_text("x = 1\n")
    repl.run()
    assert (project / "a.py").read_text() == "x = 1\n"
    result = agent.messages[4]["content"][0]
    assert result["is_error"] and "the user declined" in result["content"]


def test_ask_always_adds_a_session_rule(tmp_path):
    turns = ([use("b1", "bash", command="git --version")], [use("b2", "bash", command="git --version 2>&1")],
             text("done"))
    repl, agent, out, _ = make_repl(tmp_path, ["go", "a"], *turns)
    repl.run()
    assert out.getvalue().count("allow? ") == 1  # the second call was not asked
    assert [r.text for r in agent.permissions.rules.of("allow")] == ["bash(git:*)"]
    assert "git version" in out.getvalue()
    repl.command("/permissions")
    assert "allow  bash(git:*)  (session)" in out.getvalue()


def test_piped_input_that_is_not_an_answer_is_a_no_and_is_not_eaten(tmp_path):
    repl, agent, out, project = make_repl(tmp_path, ["fix it", "maybe", "/model"], *EDIT_TURNS)
    (project / "a.py").write_text("x = 1\n")
    repl.run()
    assert "(not an answer: 'maybe'; taken as no)" in out.getvalue()
    assert (project / "a.py").read_text() == "x = 1\n" and "model: scripted" in out.getvalue()


def test_end_of_input_while_asking_is_a_no(tmp_path):
    repl, agent, out, project = make_repl(tmp_path, ["fix it"], *EDIT_TURNS)
    (project / "a.py").write_text("x = 1\n")
    assert repl.run() == 0
    assert (project / "a.py").read_text() == "x = 1\n"


# --- /undo --------------------------------------------------------------------------

def run_tool(ctx, name, **args):
    result = default_tools().run(ToolCall("t", name, args), ctx)
    assert not result.is_error, result.content
    return result


def test_undo_restores_one_change_at_a_time_and_deletes_created_files(tmp_path):
    ctx = ToolContext(tmp_path)
    (tmp_path / "a.py").write_text("v1\n")
    run_tool(ctx, "read_file", path="a.py")
    run_tool(ctx, "edit_file", path="a.py", old_string="v1", new_string="v2")
    run_tool(ctx, "edit_file", path="a.py", old_string="v2", new_string="v3")
    run_tool(ctx, "write_file", path="new/b.txt", content="b")
    first = undo_last(ctx)
    assert first.done and "deleted new/b.txt (created by write_file)" in first.message
    assert not (tmp_path / "new/b.txt").exists() and "deleted" in first.note
    second = undo_last(ctx)
    assert "restored a.py" in second.message and "-v3" in second.message and "+v2" in second.message
    assert (tmp_path / "a.py").read_text() == "v2\n"
    assert undo_last(ctx).done and (tmp_path / "a.py").read_text() == "v1\n"
    assert not undo_last(ctx).done
    run_tool(ctx, "edit_file", path="a.py", old_string="v1", new_string="v4")  # the stamp is current again


def test_undo_refuses_to_overwrite_changes_made_since_unless_forced(tmp_path):
    ctx = ToolContext(tmp_path)
    (tmp_path / "a.py").write_text("v1\n")
    run_tool(ctx, "read_file", path="a.py")
    run_tool(ctx, "edit_file", path="a.py", old_string="v1", new_string="v2")
    (tmp_path / "a.py").write_text("user's own change\n")
    refused = undo_last(ctx)
    assert not refused.done and "changed on disk" in refused.message and "--force" in refused.message
    assert (tmp_path / "a.py").read_text() == "user's own change\n"
    assert undo_last(ctx, force=True).done and (tmp_path / "a.py").read_text() == "v1\n"


def test_undo_command_tells_the_model_with_the_next_prompt(tmp_path):
    turns = (*EDIT_TURNS[:2], text("edited"), text("noted"))
    repl, agent, out, project = make_repl(tmp_path, ["fix it", "y", "/undo", "what now?"], *turns)
    (project / "a.py").write_text("x = 1\n")
    repl.run()
    assert "undo: restored a.py to its content before edit_file" in out.getvalue()
    assert (project / "a.py").read_text() == "x = 1\n"
    last_prompt = agent.messages[-2]["content"][-1]["text"]
    assert last_prompt.startswith("[the user ran /undo: a.py is back") and last_prompt.endswith("what now?")


# --- Ctrl-C and plans ----------------------------------------------------------------

class InterruptOnce:
    """A provider whose first call is interrupted (as Ctrl-C would), then answers."""

    name, model = "interrupt", "interrupt"

    def __init__(self):
        self.calls = 0

    def complete(self, messages, tools=None, system=None):
        from agent_code.types import ModelResponse

        self.calls += 1
        if self.calls == 1:
            raise KeyboardInterrupt
        return ModelResponse(content=text(f"answer {self.calls}"))


def test_ctrl_c_drops_the_turn_and_keeps_the_repl(tmp_path):
    repl, agent, out, _ = make_repl(tmp_path, ["first", "second"], text("unused"))
    agent.provider = InterruptOnce()
    assert repl.run() == 0
    assert "(interrupted; the turn was dropped)" in out.getvalue() and "answer 2" in out.getvalue()
    assert [m["role"] for m in agent.messages] == ["user", "assistant"]
    assert agent.messages[0]["content"][0]["text"] == "second"


def test_plan_approval_switches_to_accept_edits(tmp_path):
    turns = ([use("p1", "exit_plan_mode", plan="1. change a.py")], text("carrying it out"))
    repl, agent, out, _ = make_repl(tmp_path, ["plan it", "y"], *turns, mode="plan")
    repl.run()
    assert "plan:\n1. change a.py" in out.getvalue()
    assert agent.permissions.mode is PermissionMode.ACCEPT_EDITS
    assert "The user approved the plan" in agent.messages[2]["content"][0]["content"]


def test_plan_feedback_keeps_planning(tmp_path):
    turns = ([use("p1", "exit_plan_mode", plan="1. rewrite everything")], text("revised"))
    repl, agent, out, _ = make_repl(tmp_path, ["plan it", "n", "smaller, please"], *turns, mode="plan")
    repl.run()
    assert agent.permissions.mode is PermissionMode.PLAN
    assert "smaller, please" in agent.messages[2]["content"][0]["content"]


# --- the real thing in tmux -------------------------------------------------------------

class Pane:
    """A tmux session running ``argv`` in ``cwd`` with exactly ``env``."""

    def __init__(self, name: str, argv: list[str], cwd: Path, env: dict[str, str]):
        self.name = name
        exports = " ".join(shlex_quote(f"{k}={v}") for k, v in env.items())
        command = " ".join(shlex_quote(a) for a in argv)
        subprocess.run(["tmux", "new-session", "-d", "-s", name, "-x", "200", "-y", "60",
                        f"cd {shlex_quote(str(cwd))} && env -i {exports} {command}; echo REPL-EXITED-$?; sleep 60"],
                       check=True)

    def send(self, *keys: str) -> None:
        subprocess.run(["tmux", "send-keys", "-t", self.name, *keys], check=True)

    def type(self, line: str) -> None:
        self.send("-l", line)
        self.send("Enter")

    def screen(self) -> str:
        return subprocess.run(["tmux", "capture-pane", "-p", "-J", "-S", "-200", "-t", self.name],
                              capture_output=True, text=True, check=True).stdout

    def wait_for(self, needle: str, count: int = 1, timeout: float = 30) -> str:
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            screen = self.screen()
            if "\n".join(line.rstrip() for line in screen.splitlines()).count(needle) >= count:
                return screen
            time.sleep(0.1)
        raise AssertionError(f"{needle!r} (x{count}) did not appear; the pane shows:\n{self.screen()}")

    def close(self) -> None:
        subprocess.run(["tmux", "kill-session", "-t", self.name], capture_output=True, check=False)


def shlex_quote(value: str) -> str:
    import shlex

    return shlex.quote(value)


@pytest.mark.skipif(shutil.which("tmux") is None, reason="tmux is not installed (apt-get install tmux)")
def test_repl_in_tmux(tmp_path):
    project, home = tmp_path / "project", tmp_path / "home"
    project.mkdir()
    home.mkdir()
    script = write_script(tmp_path / "script.jsonl",
                          text("Hello from the scripted model."),
                          text("Summary: the user greeted the agent."),
                          [use("s1", "bash", command="sleep 30 && touch finished.txt")],
                          text("Answer after the interrupt."))
    env = {k: v for k, v in cli_env(HOME=str(home)).items() if k in ("PATH", "HOME", "PYTHONPATH", "NO_COLOR", "LANG")}
    env["TERM"] = "xterm-256color"
    env["AGENT_CODE_SANDBOX"] = "0"   # the REPL's question about a command: with the wall, it runs unasked
    name = f"agent-code-test-{os.getpid()}"
    pane = Pane(name, [sys.executable, "-m", "agent_code", "--provider", "scripted", "--script", str(script)],
                project, env)
    try:
        pane.wait_for("[default] >")  # (capture-pane drops trailing blanks)
        pane.type("hi there")
        pane.wait_for("final: Hello from the scripted model.")
        pane.type("/permissions")
        pane.wait_for("permission mode: default")
        pane.type("/compact")
        pane.wait_for("compact: compacted")  # the history was replaced by a summary
        pane.type("/permissions plan")
        pane.wait_for("[plan] >")
        pane.type("/permissions")
        pane.wait_for("permission mode: plan")
        pane.type("/permissions default")
        pane.wait_for("permission mode: default", count=2)
        pane.type("a slow one")
        pane.wait_for("bash wants to run: sleep 30 && touch finished.txt")
        pane.type("y")
        pane.wait_for("this session: y")
        time.sleep(1.0)
        started = time.monotonic()
        pane.send("C-c")
        pane.wait_for("(interrupted; the turn was dropped)", timeout=10)
        assert time.monotonic() - started < 10
        pane.wait_for("(interrupted; the turn was dropped)\n[default] >")
        pane.type("and now?")
        pane.wait_for("final: Answer after the interrupt.")
        pane.send("C-d")
        pane.wait_for("REPL-EXITED-0")
        assert not (project / "finished.txt").exists()
        assert (home / ".agent-code" / "history").read_text().count("+hi there") == 1
    finally:
        pane.close()
        kill_processes_in(project)


def kill_processes_in(directory: Path) -> None:
    """Kill (by pid) what the test's agent left running in ``directory``: the bash tool
    starts commands in their own session, so closing the pane does not reach them."""
    import signal

    for proc in Path("/proc").iterdir():
        if not proc.name.isdigit():
            continue
        try:
            if Path(os.readlink(proc / "cwd")) == directory.resolve():
                os.kill(int(proc.name), signal.SIGKILL)
        except OSError:
            continue
