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



@pytest.mark.skipif(sys.platform != "linux", reason="the local sandbox")
def test_the_agents_pythonpath_is_nothing_the_agent_can_write():
    """The next variant: PYTHONPATH is searched before the installed package, so a directory on it
    that the agent can write would let the model plant a module (an ``agent_code`` of its own,
    a ``sitecustomize``) that the next agent process imports."""
    async def run() -> tuple[str, str]:
        harness = AgentCodeHarness()
        async with LocalSandbox() as box:
            await harness.install(box)
            launch = Launch(base_url="http://127.0.0.1:1", session_id="s", model="m", prompt="p",
                            workdir=box.workdir, home=box.home)
            env = harness.env(launch)
            for path in env["PYTHONPATH"].split(":"):
                assert not path.startswith((box.workdir, box.home)), path
            probe = await box.exec(["sh", "-c", 'for d in $(echo "$PYTHONPATH" | tr : " "); do '
                                    'touch "$d/sitecustomize.py" 2>/dev/null && echo "WROTE $d"; done; true'],
                                   user="agent", env=env, cwd=box.workdir, timeout=60)
            return probe.stdout, env["PYTHONPATH"]

    out, path = asyncio.run(run())
    assert "WROTE" not in out, out
    assert path   # the local sandbox sets it
