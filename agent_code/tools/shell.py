"""bash: run a shell command in the project (kind ``execute``).

The permission mode decides whether a command may run at all. Where it runs is the OS
sandbox when ``ctx.wall`` is set (:class:`agent_code.confine.Wall`, bubblewrap: the host
read-only except the project and a private temp dir, git's hooks and config and ``.agent/``
read-only even there, credentials hidden, no network; the CLI opens it at start-up unless
``--no-sandbox``) — plan mode's read-only runs too, in the same wall. Without a wall a
command can do anything the user running agent-code can do (a rollout's sandbox,
``agent_code.sandbox``, confines agent-code as a whole). Within that, each run is kept tidy
and bounded:

* ``bash -c COMMAND`` (through :meth:`Wall.wrap` when there is a wall) in the project root, stdin from ``/dev/null`` (nothing can wait
  for input), in a **new process group**.
* A **scrubbed environment** (:func:`scrubbed_env`): the parent's variables minus
  anything that looks like a credential (names containing KEY, TOKEN, SECRET, PASSWORD,
  PASSWD, CREDENTIAL, AUTH), with PATH, HOME and LANG always set, ``TERM=dumb``, pagers off
  and Python unbuffered (so output printed before a timeout is not lost in a buffer).
* stdout and stderr share one pipe, so the output is interleaved as a terminal shows
  it. It is read as it comes and **capped** (:class:`CappedOutput`): the head and the
  tail are kept, the middle is dropped with a note, memory stays bounded.
* At the **timeout** the whole process group is killed (SIGKILL) and the result says
  so. When the command ends, whatever it left running in its group (``cmd &``) is
  killed too: nothing outlives the call.
* The **exit code** is always reported; a non-zero exit is a normal result (failing
  tests are information), a timeout is an error.

A command allowed only because it is read-only (plan mode: ``ctx.read_only_commands``) runs
in :func:`read_only_env`: the programs that config and environment can name are neutralised.
``git`` is a shim (``tools/readonly_git.py``) that overrides every config key of the repository
that names a program (fsmonitor, textconv, external diff, filters, pagers, hooks, gpg, ssh,
credential helpers) or refuses to run; git's optional index writes are off, no transport
protocol is allowed; ``GIT_CONFIG_PARAMETERS``, ``GIT_EXTERNAL_DIFF``, ``GIT_SSH*``, askpass,
editors, ``BASH_ENV``/``ENV``, exported bash functions, ``SHELLOPTS``/``PS4`` and
``RIPGREP_CONFIG_PATH`` are removed, and so are ``PATH`` entries that are relative or inside
the project. In the other modes a command that runs was allowed as a command, and git behaves
as the user's own.
"""

from __future__ import annotations

import atexit
import os
import re
import selectors
import shlex
import shutil
import signal
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import TYPE_CHECKING, Annotated, Mapping

from agent_code.tools import readonly_git
from agent_code.tools.base import ToolContext, ToolError, tool

if TYPE_CHECKING:
    from agent_code.confine import Wall

DEFAULT_TIMEOUT_S = 120
MAX_TIMEOUT_S = 600
HEAD_BYTES = 10_000   # kept from the start of the output
TAIL_BYTES = 15_000   # kept from the end (where test summaries and tracebacks are)
DRAIN_GRACE_S = 0.5   # after the command ends, how long to wait for the pipe to close
SECRET_NAME = re.compile(r"KEY|TOKEN|SECRET|PASSWORD|PASSWD|CREDENTIAL|AUTH", re.IGNORECASE)
DEFAULT_PATH = "/usr/local/bin:/usr/bin:/bin"


def scrubbed_env(environ: Mapping[str, str]) -> dict[str, str]:
    """The child's environment: ``environ`` without credential-like names, plus fixed basics."""
    env = {k: v for k, v in environ.items() if not SECRET_NAME.search(k)}
    env.setdefault("PATH", DEFAULT_PATH)
    env.setdefault("HOME", os.path.expanduser("~"))
    env.setdefault("LANG", "C.UTF-8")
    env.update(TERM="dumb", PAGER="cat", GIT_PAGER="cat", GIT_TERMINAL_PROMPT="0",
               PYTHONUNBUFFERED="1")
    return env


# removed from a read-only command's environment: each can make a reader run a program
# (git -c, external diff, ssh, askpass, editors, a script bash sources, rg's config file,
# xtrace with a PS4 that substitutes a command)
READ_ONLY_DROPPED = ("GIT_CONFIG_PARAMETERS", "GIT_CONFIG_COUNT", "GIT_CONFIG", "GIT_EXTERNAL_DIFF", "GIT_SSH",
                     "GIT_SSH_COMMAND", "GIT_SSH_VARIANT", "GIT_ASKPASS", "SSH_ASKPASS", "GIT_PROXY_COMMAND",
                     "EDITOR", "VISUAL", "BASH_ENV", "ENV", "RIPGREP_CONFIG_PATH", "GREP_OPTIONS", "LESSOPEN",
                     "LESSCLOSE", "GIT_EXEC_PATH", "GIT_TRACE2", "GIT_TRACE2_EVENT", "GIT_TRACE2_PERF",
                     "SHELLOPTS", "BASHOPTS", "PS4")
# exported bash functions (BASH_FUNC_git%%=() { …; }) would stand in for git or ls
READ_ONLY_DROPPED_PREFIXES = ("GIT_CONFIG_KEY_", "GIT_CONFIG_VALUE_", "BASH_FUNC_")
_shims: dict[tuple[str, str], Path] = {}


def _exec_dir() -> str | None:
    """Where the shim can be executed: the temp dir, unless it is mounted noexec (then the
    runtime dir or ~/.cache); None: the temp dir."""
    noexec = getattr(os, "ST_NOEXEC", 0)
    for candidate in (tempfile.gettempdir(), os.environ.get("XDG_RUNTIME_DIR"), os.path.expanduser("~/.cache")):
        try:
            if candidate and os.path.isdir(candidate) and not os.statvfs(candidate).f_flag & noexec:
                return candidate
        except OSError:
            continue
    return None


def _git_shim(real_git: str) -> Path:
    """A directory (one per process) holding ``git``: the shim that runs
    ``tools/readonly_git.py`` with this Python in isolated mode."""
    key = (sys.executable, real_git)
    shim = _shims.get(key)
    if shim is not None and (shim / "git").is_file():
        return shim
    shim = Path(tempfile.mkdtemp(prefix="agent-code-git-", dir=_exec_dir()))
    atexit.register(shutil.rmtree, shim, True)
    script = (f"#!/bin/sh\nexec {shlex.quote(sys.executable)} -I -S "
              f"{shlex.quote(os.path.abspath(readonly_git.__file__))} \"$@\"\n")
    (shim / "git").write_text(script)
    (shim / "git").chmod(0o755)
    _shims[key] = shim
    return shim


def _outside(directory: str, root: Path | None) -> bool:
    if root is None:
        return True
    real = Path(os.path.realpath(directory))
    return real != root and root not in real.parents


def read_only_env(environ: Mapping[str, str], root: Path | None = None) -> dict[str, str]:
    """The environment of a command allowed only because it is read-only: :func:`scrubbed_env`
    without what can name a program, with git's executable config neutralised by the shim.
    ``root`` is the project: no program on PATH comes from inside it."""
    real_git = environ.get(readonly_git.REAL_GIT_VAR)  # already under a shim: keep the real one
    env = {k: v for k, v in scrubbed_env(environ).items()
           if k not in READ_ONLY_DROPPED and not k.startswith(READ_ONLY_DROPPED_PREFIXES)}
    env.update(GIT_PAGER="cat", PAGER="cat", MANPAGER="cat", GIT_EDITOR="false", GIT_SEQUENCE_EDITOR="false",
               GIT_OPTIONAL_LOCKS="0", GIT_ALLOW_PROTOCOL="none", GIT_NO_LAZY_FETCH="1", GIT_TERMINAL_PROMPT="0")
    # only absolute PATH entries outside the project: an empty or relative one, or one in the
    # project (a bin/ that direnv or a venv put there), would run the project's own programs
    root = Path(os.path.realpath(root)) if root is not None else None
    env["PATH"] = os.pathsep.join(d for d in env["PATH"].split(os.pathsep)
                                  if os.path.isabs(d) and _outside(d, root)) or DEFAULT_PATH
    real_git = real_git or shutil.which("git", path=env["PATH"])
    if real_git:
        shim = _git_shim(os.path.realpath(real_git))
        env["PATH"] = f"{shim}{os.pathsep}{env['PATH']}"
        env["GIT_EXEC_PATH"] = str(shim)  # a git started by git goes through the shim too
        env[readonly_git.REAL_GIT_VAR] = os.path.realpath(real_git)
    return env


class CappedOutput:
    """Collects a byte stream, keeping at most ``head`` bytes from the start and ``tail``
    bytes from the end; :meth:`text` decodes it with a note where bytes were dropped."""

    def __init__(self, head: int = HEAD_BYTES, tail: int = TAIL_BYTES) -> None:
        self.head_limit, self.tail_limit = head, tail
        self.head = bytearray()
        self.tail = bytearray()
        self.total = 0

    def add(self, chunk: bytes) -> None:
        self.total += len(chunk)
        room = self.head_limit - len(self.head)
        if room > 0:
            self.head += chunk[:room]
            chunk = chunk[room:]
        self.tail += chunk
        if len(self.tail) > self.tail_limit:
            del self.tail[:len(self.tail) - self.tail_limit]

    def text(self) -> str:
        head = self.head.decode("utf-8", errors="replace")
        tail = self.tail.decode("utf-8", errors="replace")
        dropped = self.total - len(self.head) - len(self.tail)
        if dropped <= 0:
            return head + tail
        return f"{head}\n… [{dropped} bytes of output omitted] …\n{tail}"


def _kill_group(pgid: int) -> None:
    try:
        os.killpg(pgid, signal.SIGKILL)
    except (ProcessLookupError, PermissionError):
        pass  # already gone


def run_command(command: str, cwd: Path, timeout: float, env: Mapping[str, str],
                wall: Wall | None = None) -> tuple[str, int | None]:
    """Run ``bash -c command`` (inside ``wall`` when given); return (capped output, exit status
    or None on timeout).

    A negative status is a signal number, as in :mod:`subprocess`."""
    argv, env = wall.wrap(["bash", "-c", command], env) if wall is not None else (["bash", "-c", command], dict(env))
    proc = subprocess.Popen(argv, cwd=cwd, env=env, stdin=subprocess.DEVNULL,
                            stdout=subprocess.PIPE, stderr=subprocess.STDOUT, start_new_session=True)
    assert proc.stdout is not None
    fd = proc.stdout.fileno()
    out = CappedOutput()
    deadline = time.monotonic() + timeout
    try:
        timed_out = _pump(proc, fd, out, deadline)
    except BaseException:  # Ctrl-C (KeyboardInterrupt) mid-command: the command goes with the turn
        _kill_group(proc.pid)
        proc.stdout.close()
        proc.wait()
        raise
    if not timed_out and proc.poll() is None:
        # the pipe closed before the command ended (a program closes its output on the way out,
        # or `exec >&-`): the command still runs until it exits or the deadline, and is not
        # killed mid-exit (which reported a finished `ls` as killed by SIGKILL)
        try:
            proc.wait(timeout=max(deadline - time.monotonic(), 0))
        except subprocess.TimeoutExpired:
            timed_out = True
    _kill_group(proc.pid)  # leftovers (`cmd &`) do not outlive the call
    proc.stdout.close()
    status = proc.wait()
    return out.text(), None if timed_out else status


def _pump(proc: subprocess.Popen, fd: int, out: CappedOutput, deadline: float) -> bool:
    """Read the command's output until it ends (or the deadline kills it); True if it timed out."""
    timed_out = False
    with selectors.DefaultSelector() as sel:
        sel.register(fd, selectors.EVENT_READ)
        drain_until: float | None = None  # set once the command has ended (or been killed)
        while True:
            now = time.monotonic()
            if drain_until is None:
                if proc.poll() is not None:
                    drain_until = now + DRAIN_GRACE_S
                elif now >= deadline:
                    timed_out = True
                    _kill_group(proc.pid)
                    drain_until = now + DRAIN_GRACE_S
            limit = drain_until if drain_until is not None else deadline
            if drain_until is not None and now >= drain_until:
                break  # something that escaped the group still holds the pipe
            if not sel.select(timeout=min(0.05, max(limit - now, 0))):
                continue
            chunk = os.read(fd, 65536)
            if not chunk:
                break  # every writer is gone
            out.add(chunk)
    return timed_out


def _status_line(status: int) -> str:
    if status < 0:
        try:
            name = signal.Signals(-status).name
        except ValueError:
            name = f"signal {-status}"
        return f"[killed by {name}]"
    return f"[exit code: {status}]"


@tool(kind="execute")
def bash(
    ctx: ToolContext,
    command: Annotated[str, "The shell command to run (bash syntax: pipes, &&, redirections)."],
    timeout: Annotated[int, "Seconds before the command and every process it started are "
                            "killed (1-600)."] = DEFAULT_TIMEOUT_S,
) -> str:
    """Run a bash command in the working directory (e.g. run tests, git status, a build)
    and return its output (stdout and stderr interleaved) followed by the exit code.
    Long output keeps its first 10,000 and last 15,000 bytes. Input is /dev/null, so
    interactive commands get no input; processes left running in the background are
    stopped when the command ends. Prefer read_file, grep and glob to look at files, and
    edit_file/write_file to change them."""
    if not command.strip():
        raise ToolError("command is empty")
    if not 1 <= timeout <= MAX_TIMEOUT_S:
        raise ToolError(f"timeout must be between 1 and {MAX_TIMEOUT_S} seconds, got {timeout}")
    try:
        env = read_only_env(os.environ, ctx.root) if ctx.read_only_commands else scrubbed_env(os.environ)
        output, status = run_command(command, ctx.root, timeout, env, ctx.wall)
    except OSError as exc:
        raise ToolError(f"cannot run bash: {exc.strerror or exc}") from None
    body = output.rstrip("\n") or "(no output)"
    if status is None:
        raise ToolError(f"{body}\n[timed out after {timeout} s: the command and every process in its "
                        "group were killed; use a longer timeout or a quicker command]")
    return f"{body}\n{_status_line(status)}"
