"""Harnesses: how to install, configure and launch one CLI agent headless inside a sandbox.

A harness is a small class (one file per agent) that says four things:

* ``install(box)``: make the CLI runnable inside the sandbox. On the ``local`` sandbox the
  CLI installed on this machine is used (and made reachable to the agent user with
  ``box.provide``); on a remote sandbox it is installed there (npm / pip).
* ``configure(box, launch)``: write its settings files into the agent's home.
* ``command(launch)`` and ``env(launch)``: the headless command line and its environment —
  base URL = the gateway, API key = the session id, non-essential traffic off.

:meth:`CliHarness.run` does the rest the same way for every agent: install, configure, start
the command detached as the unprivileged ``agent`` user in the repository, wait for it with a
time budget (killed as a group at the budget), and return an :class:`AgentRun`.
"""

from __future__ import annotations

import os
import shlex
import shutil
import threading
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, ClassVar, Iterable

from agent_code.sandbox.base import Sandbox, SandboxError
from agent_code.sandbox.untrusted import STDERR_LIMIT, shown


class HarnessError(Exception):
    """The agent could not be installed, configured or launched."""


@dataclass
class Launch:
    """Everything a harness needs to start one rollout's agent."""
    base_url: str            # the gateway, as reachable from inside the sandbox
    session_id: str          # sent as the API key: the gateway files every turn under it
    model: str               # the model name the CLI sends (the gateway serves one model)
    prompt: str              # the problem statement
    workdir: str             # the repository inside the sandbox
    home: str                # the agent user's home inside the sandbox
    max_steps: int = 50      # for agents that take a step cap
    tool_profile: str = "full"  # agent-code's --tool-profile (full or small); other agents ignore it

    @property
    def prompt_path(self) -> str:
        return f"{self.home}/PROBLEM.md"

    @property
    def stderr_path(self) -> str:
        return f"{self.home}/.agent-stderr.log"


@dataclass
class AgentRun:
    exit_code: int | None    # None: killed at the budget
    timed_out: bool
    duration: float
    log: str                 # the CLI's stdout only: stream-json (agent-code, Claude Code, Qwen Code) or
                             # JSONL (Codex), machine-readable line by line
    error: str | None = None
    meta: dict[str, Any] = field(default_factory=dict)
    stderr: str = ""         # the CLI's stderr (its plain-text messages), kept out of the log
    log_truncated: bool = False   # the log is the tail of a longer one (the sandbox's log cap), from a line start


def find_host_binary(name: str, candidates: Iterable[str | os.PathLike | None] = ()) -> str | None:
    """The first existing candidate path, else ``name`` on PATH, else None."""
    for candidate in candidates:
        if candidate and Path(candidate).exists():
            return str(candidate)
    return shutil.which(name)


class CliHarness:
    """Base class: subclasses set ``name`` and implement the four hooks below."""

    name: ClassVar[str] = ""
    protocol: ClassVar[str] = "anthropic"    # the wire protocol the CLI speaks to the gateway

    async def install(self, box: Sandbox) -> None:
        raise NotImplementedError

    async def configure(self, box: Sandbox, launch: Launch) -> None:
        """Write settings files; the default writes nothing."""

    def command(self, launch: Launch) -> str:
        raise NotImplementedError

    def env(self, launch: Launch) -> dict[str, str]:
        raise NotImplementedError

    async def run(self, box: Sandbox, launch: Launch, *, budget: float) -> AgentRun:
        start = time.monotonic()
        try:
            await self.install(box)
            await box.write_file(launch.prompt_path, launch.prompt, user="agent")
            await self.configure(box, launch)
            # the CLI's stderr goes to a file of its own (in the home, outside the diffed repository),
            # so the job's log is its stdout alone: stream-json / JSONL, every line machine-readable
            command = f"( {self.command(launch)} ) 2>{shlex.quote(launch.stderr_path)}"
            job = await box.start(command, user="agent", env=self.env(launch), cwd=launch.workdir)
        except (HarnessError, SandboxError, OSError) as exc:
            return AgentRun(None, False, time.monotonic() - start, "", error=f"launch failed: {exc}")
        result = await box.wait(job, budget=budget)
        # the stderr file lies in the agent's home: the agent may have made it anything (a FIFO, a
        # symlink, a sparse 100 GB file); its tail is read as the agent, as a regular file only
        try:
            stderr = shown(await box.read_tail(launch.stderr_path, STDERR_LIMIT, user="agent")).decode(errors="replace")
        except FileNotFoundError:   # never written (killed before the shell opened it)
            stderr = ""
        except (SandboxError, OSError) as exc:
            stderr = f"[agent-code: the agent's stderr file was not read: {exc}]\n"
        return AgentRun(result.exit_code, result.timed_out, time.monotonic() - start, result.stdout,
                        stderr=result.stderr + stderr, log_truncated=result.truncated)


def cat_prompt(launch: Launch) -> str:
    """A shell word that expands to the problem statement (read from the file in the sandbox)."""
    return f'"$(cat {shlex.quote(launch.prompt_path)})"'


# --- provisioning a CLI in a sandbox other than ``local`` -------------------------------------
#
# A docker sandbox has no network (``--network none``): nothing can be downloaded inside it. So
# the project's image carries the npm CLIs (scripts/docker-setup.sh installs the pinned versions
# globally) and agent-code comes from this checkout's own wheel, uploaded. An image without a
# CLI (a task's own image) gets this machine's copy uploaded: the npm package from the test
# peers' ``node_modules`` (and this machine's ``node`` when the image has no node >= 20).

UPLOAD_ROOT = "/opt/agent-code"


async def has_command(box: Sandbox, name: str) -> bool:
    return (await box.exec(f"command -v {shlex.quote(name)} >/dev/null", timeout=60)).ok


async def ensure_node(box: Sandbox) -> str:
    """A node >= 20 in the sandbox: the image's, else this machine's uploaded. Its path."""
    probe = await box.exec("node -p 'process.versions.node.split(\".\")[0]' 2>/dev/null", timeout=60)
    if probe.ok and probe.stdout.strip().isdigit() and int(probe.stdout.strip()) >= 20:
        return "node"
    host = shutil.which("node")
    if host is None:
        raise HarnessError("the sandbox has no node >= 20 and this machine has no node to upload")
    target = f"{UPLOAD_ROOT}/bin/node"
    await box.upload(str(Path(host).resolve()), target)
    check = await box.exec(f"{target} -p 'process.versions.node'", timeout=60)
    if not check.ok:
        raise HarnessError(f"this machine's node does not run in the sandbox's image: {check.output()}")
    return target


async def ensure_npm_cli(box: Sandbox, binary: str, spec: str, host_binary: str | None) -> list[str]:
    """The argv that runs the npm CLI ``binary`` (pinned ``spec``, e.g. ``@openai/codex@0.171.0``)
    inside a sandbox that is not ``local``: the image's own when it has one on PATH; else, where
    the sandbox can download (E2B), ``npm install -g``; else this machine's npm install
    (``host_binary``: its ``node_modules/.bin`` entry) uploaded, with its package scope."""
    if await has_command(box, binary):
        return [binary]
    if box.name != "docker" and await has_command(box, "npm"):
        result = await box.exec(f"npm install -g --no-audit --no-fund {shlex.quote(spec)}", timeout=900)
        if not result.ok:
            raise HarnessError(f"npm install {spec} failed in the sandbox: {result.output()}")
        return [binary]
    if host_binary is None:
        raise HarnessError(f"the sandbox's image has no `{binary}` and it cannot be downloaded there (no network); "
                           f"build the image with `bash scripts/docker-setup.sh` (it installs {spec}), or install "
                           f"{spec} on this machine (scripts/test.sh puts it in .cache/node) to have it uploaded")
    entry = Path(host_binary).resolve()
    modules = next((p for p in entry.parents if p.name == "node_modules"), None)
    if modules is None:
        raise HarnessError(f"{host_binary} is not inside a node_modules directory: cannot upload it")
    package_dir = entry.relative_to(modules).parts
    scope = package_dir[0]   # "@openai": the package and its platform-specific optional packages
    node = await ensure_node(box)
    await box.upload(str(modules / scope), f"{UPLOAD_ROOT}/node_modules/{scope}")
    return [node, f"{UPLOAD_ROOT}/node_modules/{entry.relative_to(modules).as_posix()}"]


_wheel_lock = threading.Lock()
_wheels: dict[str, Path] = {}


def project_wheel(repo: Path | None = None) -> Path:
    """This checkout of agent-code built as a wheel, once per process (cached under
    ``.cache/wheels``): from a clean copy of the sources, so no stale ``build/`` leaks in, with
    ``pip wheel --no-deps --no-build-isolation`` (offline: setuptools from this environment)."""
    import subprocess
    import sys
    import tempfile

    repo = (repo or Path(__file__).resolve().parents[2]).resolve()
    key = str(repo)
    with _wheel_lock:
        if key in _wheels and _wheels[key].exists():
            return _wheels[key]
        out = repo / ".cache" / "wheels"
        out.mkdir(parents=True, exist_ok=True)
        with tempfile.TemporaryDirectory(prefix="agent-code-wheel-") as tmp:
            src = Path(tmp) / "src"
            src.mkdir()
            for name in ("pyproject.toml", "README.md", "LICENSE", "setup.cfg", "MANIFEST.in"):
                if (repo / name).exists():
                    shutil.copy2(repo / name, src / name)
            shutil.copytree(repo / "agent_code", src / "agent_code",
                            ignore=shutil.ignore_patterns("__pycache__", "*.pyc", "*.egg-info"))
            import hashlib

            digest = hashlib.sha256()
            for path in sorted(p for p in src.rglob("*") if p.is_file()):
                digest.update(path.relative_to(src).as_posix().encode() + b"\0" + path.read_bytes() + b"\0")
            cached = sorted((out / digest.hexdigest()[:16]).glob("agent_code-*.whl"))
            if cached:   # the same sources were built before (another process)
                _wheels[key] = cached[0]
                return cached[0]
            built = Path(tmp) / "dist"
            proc = subprocess.run([sys.executable, "-m", "pip", "wheel", "--no-deps", "--no-build-isolation",
                                   "--no-index", "-q", "-w", str(built), str(src)],
                                  capture_output=True, text=True, timeout=600)
            wheels = sorted(built.glob("agent_code-*.whl"))
            if proc.returncode != 0 or not wheels:
                raise HarnessError(f"building agent-code's wheel failed: {(proc.stdout + proc.stderr)[-2000:]}")
            (out / digest.hexdigest()[:16]).mkdir(exist_ok=True)
            target = out / digest.hexdigest()[:16] / wheels[0].name
            shutil.move(str(wheels[0]), target)
        _wheels[key] = target
        return target
