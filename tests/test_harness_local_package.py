"""On the local sandbox the agent runs the caller's own agent_code (a checkout, a git worktree),
not whatever package the interpreter's environment would find (agent_code/harness/agent_code.py):
for real, in a sandbox (tests/test_small_one_sample.py checks the environment it is given)."""

from __future__ import annotations

import asyncio
import sys

import pytest

import agent_code
from agent_code.harness.agent_code import AgentCodeHarness
from agent_code.harness.base import Launch
from agent_code.sandbox.local import LocalSandbox


@pytest.mark.skipif(sys.platform != "linux", reason="the local sandbox")
def test_the_local_agent_imports_the_callers_agent_code():
    async def run() -> str:
        harness = AgentCodeHarness()
        async with LocalSandbox() as box:
            await harness.install(box)
            launch = Launch(base_url="http://127.0.0.1:1", session_id="s", model="m", prompt="p",
                            workdir=box.workdir, home=box.home)
            done = await box.exec([harness.python, "-c", "import agent_code; print(agent_code.__file__)"],
                                  user="agent", env=harness.env(launch), cwd=box.workdir, timeout=60)
            assert done.ok, done.output()
            return done.stdout.strip()

    assert asyncio.run(run()) == agent_code.__file__

