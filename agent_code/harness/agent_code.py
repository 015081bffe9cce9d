"""agent-code itself as the rollout agent: ``python -m agent_code -p`` with stream-json output.

On the local sandbox it runs on this machine's interpreter and package (made reachable to the
agent user); on a remote sandbox ``pip install`` puts it there (``AGENT_CODE_PIP_SPEC``
overrides what is installed). Its stream-json output (one event per line: ``system/init``,
``assistant``, ``tool_use``, ``tool_result``, ``result``) is the run log.
"""

from __future__ import annotations

import os
import shlex
import sys
from pathlib import Path

import agent_code
from agent_code.harness.base import CliHarness, HarnessError, Launch
from agent_code.sandbox.base import Sandbox


class AgentCodeHarness(CliHarness):
    name = "agent-code"

    def __init__(self) -> None:
        self.python = "python3"

    async def install(self, box: Sandbox) -> None:
        if box.name == "local":
            for path in {sys.prefix, sys.base_prefix, str(Path(agent_code.__file__).parent)}:
                box.provide(path)  # type: ignore[attr-defined]
            self.python = sys.executable
            return
        spec = os.environ.get("AGENT_CODE_PIP_SPEC", "agent-code")
        result = await box.exec(f"python3 -c 'import agent_code' 2>/dev/null || "
                                f"python3 -m pip install -q {shlex.quote(spec)}", timeout=900)
        if not result.ok:
            raise HarnessError(f"pip install {spec} failed in the sandbox: {result.output()}")

    def command(self, launch: Launch) -> str:
        argv = [self.python, "-m", "agent_code", "-p", "--provider", "anthropic", "--base-url", launch.base_url,
                "--model", launch.model, "--output-format", "stream-json", "--max-steps", str(launch.max_steps),
                "--permission-mode", "bypassPermissions", "--no-session-persistence", "-C", launch.workdir]
        return f"{shlex.join(argv)} < {shlex.quote(launch.prompt_path)}"

    def env(self, launch: Launch) -> dict[str, str]:
        return {"ANTHROPIC_AUTH_TOKEN": launch.session_id, "ANTHROPIC_BASE_URL": launch.base_url,
                "PYTHONUNBUFFERED": "1", "PATH": str(Path(self.python).parent)}
