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
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, ClassVar, Iterable

from agent_code.sandbox.base import Sandbox, SandboxError


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

    @property
    def prompt_path(self) -> str:
        return f"{self.home}/PROBLEM.md"


@dataclass
class AgentRun:
    exit_code: int | None    # None: killed at the budget
    timed_out: bool
    duration: float
    log: str                 # the CLI's stdout+stderr (for agent-code and Claude Code: stream-json)
    error: str | None = None
    meta: dict[str, Any] = field(default_factory=dict)


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
            job = await box.start(self.command(launch), user="agent", env=self.env(launch), cwd=launch.workdir)
        except (HarnessError, SandboxError, OSError) as exc:
            return AgentRun(None, False, time.monotonic() - start, "", error=f"launch failed: {exc}")
        result = await box.wait(job, budget=budget)
        return AgentRun(result.exit_code, result.timed_out, time.monotonic() - start, result.stdout + result.stderr)


def cat_prompt(launch: Launch) -> str:
    """A shell word that expands to the problem statement (read from the file in the sandbox)."""
    return f'"$(cat {shlex.quote(launch.prompt_path)})"'
