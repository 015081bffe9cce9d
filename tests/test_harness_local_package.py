"""agent-code as the rollout agent on the local sandbox runs the caller's own agent_code package
(the one the sandbox is given), not whichever one the interpreter has installed: from a second
checkout (a git worktree on PYTHONPATH, the interpreter's editable install pointing at another)
the agent could not import agent_code at all ("No module named agent_code")."""

from __future__ import annotations

import asyncio
from pathlib import Path

import agent_code
from agent_code.harness import AgentCodeHarness
from agent_code.harness.base import Launch
from agent_code.sandbox import create_sandbox


def test_the_local_agent_imports_the_callers_agent_code(tmp_path):
    async def main() -> tuple[str, dict[str, str]]:
        harness = AgentCodeHarness()
        async with create_sandbox("local") as box:
            await harness.install(box)
            env = harness.env(Launch("http://127.0.0.1:1", "s", "m", "fix it", box.workdir, box.home))
            done = await box.exec([harness.python, "-c", "import agent_code; print(agent_code.__file__)"],
                                  user="agent", env=env, timeout=60)
            assert done.exit_code == 0, done.output()
            return done.stdout.strip(), env
    where, env = asyncio.run(main())
    package = Path(agent_code.__file__).resolve()
    assert Path(where).resolve() == package
    assert env["PYTHONPATH"] == str(package.parent.parent)
