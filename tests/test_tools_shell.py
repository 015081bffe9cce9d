"""The bash tool: output and exit codes, timeouts that kill the whole process group,
leftover background processes, the scrubbed environment and the output cap."""

from __future__ import annotations

import os
import time
from pathlib import Path

import pytest

from agent_code.tools import ToolContext, default_tools
from agent_code.tools.shell import CappedOutput, scrubbed_env
from agent_code.types import ToolCall, ToolResult


@pytest.fixture
def bash(tmp_path: Path):
    registry = default_tools()
    ctx = ToolContext(tmp_path)

    def run(command: str, **args) -> ToolResult:
        return registry.run(ToolCall("call_1", "bash", {"command": command, **args}), ctx)

    return run


def alive(pid: int) -> bool:
    """True while ``pid`` exists and is not a zombie (a reaped or dead child is gone)."""
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    try:
        state = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0]
    except OSError:
        return False
    return state != "Z"


def wait_gone(pid: int, seconds: float = 5.0) -> bool:
    end = time.monotonic() + seconds
    while time.monotonic() < end:
        if not alive(pid):
            return True
        time.sleep(0.05)
    return False


def test_output_is_interleaved_and_the_exit_code_reported(bash, tmp_path):
    result = bash("echo one; echo two >&2; echo three; pwd; exit 3")
    assert not result.is_error  # a failing command is information, not a tool error
    assert result.content == f"one\ntwo\nthree\n{tmp_path.resolve()}\n[exit code: 3]"
    assert bash("true").content == "(no output)\n[exit code: 0]"


def test_stdin_is_empty_and_signals_are_named(bash):
    assert bash("cat; echo done").content == "done\n[exit code: 0]"
    assert bash("kill -SEGV $$").content.endswith("[killed by SIGSEGV]")


def test_a_command_that_closes_its_output_before_it_ends_is_not_reported_killed(bash):
    # the pipe's end of file is not the command's end: programs close stdout and stderr on
    # their way out (coreutils' close_stdout), and a SIGKILL sent to the group in that window
    # reported a finished `ls` as "[killed by SIGKILL]"; widened here to half a second
    result = bash("echo done; exec >&- 2>&-; sleep 0.5; exit 4")
    assert result.content == "done\n[exit code: 4]"
    assert bash("exec >&- 2>&-; sleep 0.3").content == "(no output)\n[exit code: 0]"


def test_a_command_that_sends_its_output_elsewhere_is_waited_for_too(bash, tmp_path):
    # the next spelling: the pipe's writers redirected away (not closed), and a background job
    # started after it: the command's own status is reported, and the job goes with the call
    pidfile = tmp_path / "child.pid"
    result = bash(f"echo first; exec >/dev/null 2>&1; sleep 60 & echo $! > {pidfile}; sleep 0.4; exit 5")
    assert result.content == "first\n[exit code: 5]"
    assert wait_gone(int(pidfile.read_text())), "the background job outlived the call"


def test_a_command_that_closes_its_output_still_times_out(bash):
    started = time.monotonic()
    result = bash("echo before; exec >&- 2>&-; sleep 60", timeout=1)
    assert result.is_error and result.content.startswith("before\n")
    assert "[timed out after 1 s" in result.content
    assert time.monotonic() - started < 10


def test_timeout_kills_the_whole_group(bash, tmp_path):
    pidfile = tmp_path / "child.pid"
    started = time.monotonic()
    result = bash(f"sleep 60 & echo $! > {pidfile}; echo waiting; sleep 60", timeout=1)
    elapsed = time.monotonic() - started
    assert result.is_error
    assert result.content.startswith("waiting\n")
    assert "[timed out after 1 s" in result.content and "killed" in result.content
    assert elapsed < 10
    child = int(pidfile.read_text())
    assert wait_gone(child), f"background child {child} survived the timeout"


def test_background_processes_do_not_outlive_the_command(bash, tmp_path):
    pidfile = tmp_path / "child.pid"
    started = time.monotonic()
    result = bash(f"sleep 60 > /dev/null 2>&1 & echo $! > {pidfile}; echo started")
    assert result.content == "started\n[exit code: 0]"
    assert time.monotonic() - started < 10
    assert wait_gone(int(pidfile.read_text()))


def test_environment_is_scrubbed(bash, monkeypatch):
    monkeypatch.setenv("ANTHROPIC_API_KEY", "sk-leak-1")
    monkeypatch.setenv("GITHUB_TOKEN", "ghp-leak-2")
    monkeypatch.setenv("MY_SECRET_THING", "leak-3")
    monkeypatch.setenv("db_password", "leak-4")
    monkeypatch.setenv("HARMLESS_SETTING", "kept")
    monkeypatch.setenv("TERM", "xterm-256color")
    out = bash("env").content
    assert "leak" not in out
    assert "HARMLESS_SETTING=kept" in out and "TERM=dumb" in out
    for name in ("PATH=", "HOME=", "LANG="):
        assert f"\n{name}" in "\n" + out


def test_scrubbed_env_fills_in_the_basics():
    env = scrubbed_env({"AWS_SECRET_ACCESS_KEY": "x", "Api_Key": "y", "USER": "me"})
    assert env["USER"] == "me" and "AWS_SECRET_ACCESS_KEY" not in env and "Api_Key" not in env
    assert env["PATH"] and env["HOME"] and env["LANG"] and env["TERM"] == "dumb"


def test_long_output_keeps_head_and_tail(bash):
    result = bash("seq 1 200000; echo LAST")
    out = result.content
    assert not result.is_error and len(out) < 30_000
    assert out.startswith("1\n2\n3\n")
    assert out.endswith("199999\n200000\nLAST\n[exit code: 0]")
    assert "bytes of output omitted" in out and "\n100000\n" not in out


def test_capped_output_counts_what_it_drops():
    cap = CappedOutput(head=4, tail=4)
    for chunk in (b"abc", b"defgh", b"ijkl"):
        cap.add(chunk)
    assert cap.text() == "abcd\n… [4 bytes of output omitted] …\nijkl"
    small = CappedOutput(head=4, tail=4)
    small.add(b"abcdef")
    assert small.text() == "abcdef"


def test_bad_arguments_are_refused(bash):
    assert "timeout must be between 1 and 600" in bash("true", timeout=0).content
    assert "timeout must be between" in bash("true", timeout=601).content
    assert bash("   ").is_error


def test_a_background_process_holding_the_pipe_is_stopped_too(bash, tmp_path):
    pidfile = tmp_path / "child.pid"
    started = time.monotonic()
    result = bash(f"sleep 60 & echo $! > {pidfile}; echo started")
    assert result.content == "started\n[exit code: 0]"
    assert time.monotonic() - started < 5
    assert wait_gone(int(pidfile.read_text()))


def test_ctrl_c_mid_command_kills_the_command(tmp_path):
    """KeyboardInterrupt while a command runs (the REPL's Ctrl-C): its whole group goes too."""
    import signal

    from agent_code.tools.shell import run_command

    pidfile = tmp_path / "pid"

    def interrupt(signum, frame):   # once the background command is known to run (a loaded machine is slow)
        if pidfile.exists() and pidfile.read_text().strip():
            raise KeyboardInterrupt

    previous = signal.signal(signal.SIGALRM, interrupt)
    signal.setitimer(signal.ITIMER_REAL, 0.5, 0.1)
    try:
        with pytest.raises(KeyboardInterrupt):
            run_command(f"sleep 60 & echo $! > {pidfile}; wait", tmp_path, 30, {"PATH": "/usr/bin:/bin"})
    finally:
        signal.setitimer(signal.ITIMER_REAL, 0)
        signal.signal(signal.SIGALRM, previous)
    import time

    pid = int(pidfile.read_text())
    state = Path(f"/proc/{pid}/stat")

    def gone() -> bool:   # gone, or a zombie awaiting reaping
        try:
            return state.read_text().split()[2] == "Z"
        except FileNotFoundError:
            return True

    # (the group's SIGKILL is sent before run_command returns, but a loaded machine may not have
    # scheduled the orphaned `sleep` to die yet: it was seen still "R" right after)
    deadline = time.monotonic() + 5
    while not gone() and time.monotonic() < deadline:
        time.sleep(0.05)
    assert gone()
