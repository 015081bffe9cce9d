"""agent-code itself as the rollout agent: ``python -m agent_code -p`` with stream-json output.

On the local sandbox it runs on this machine's interpreter and package (made reachable to the
agent user, the package put first on its ``PYTHONPATH``: the code that runs the rollout is the
code the agent runs, from a worktree too). Elsewhere (docker, e2b) this checkout is built as a wheel once per process
(:func:`~agent_code.harness.base.project_wheel`), uploaded and installed with ``pip install
--no-deps --no-index`` into the sandbox's ``python3``: no download there (a docker sandbox has
no network); the client's own dependencies (anthropic, typer, rich, httpx, prompt_toolkit) come
with the image (``scripts/docker-setup.sh`` puts them in the project's image), and a docker
image without them is a clear launch error; a sandbox that can download (E2B) gets them from
PyPI (``CLIENT_DEPS``, the image's pins). ``AGENT_CODE_PIP_SPEC`` installs that pip spec instead
(with its dependencies: a sandbox with network only). It runs with ``--no-trust-project``: a
task repository's own settings, hooks, skills and MCP servers are not used. Its stream-json output (one event per line: ``system/init``,
``assistant``, ``tool_use``, ``tool_result``, ``result``) is the run log.

It runs with ``--no-sandbox``: the rollout's sandbox is the wall there (own root, own network,
a seccomp filter that refuses the user namespaces bubblewrap would need to nest inside it).
"""

from __future__ import annotations

import asyncio
import os
import shlex
import sys
from pathlib import Path

import agent_code
from agent_code.harness.base import CliHarness, HarnessError, Launch, project_wheel
from agent_code.sandbox.base import Sandbox


# what `python3 -m agent_code -p --provider anthropic` needs to start, checked as the agent
CLIENT_CHECK = ("python3 -c 'import agent_code.cli, anthropic, typer, rich, httpx, prompt_toolkit, "
                "tree_sitter, tree_sitter_bash'")
# the same pins as the project's docker image (scripts/docker-setup.sh, PIP_PKGS)
CLIENT_DEPS = ("anthropic==2.16.0", "typer==0.29.2", "rich==15.0.0", "prompt_toolkit==3.0.52", "httpx==0.29.0",
               "tzdata==2026.6", "tree-sitter==0.26.1", "tree-sitter-bash==0.25.1")


class AgentCodeHarness(CliHarness):
    name = "agent-code"

    def __init__(self) -> None:
        self.python = "python3"
        self.package_root: str | None = None

    async def install(self, box: Sandbox) -> None:
        if box.name == "local":
            package = Path(agent_code.__file__).resolve().parent
            for path in {sys.prefix, sys.base_prefix, str(package)}:
                box.provide(path)  # type: ignore[attr-defined]
            # the caller's own agent_code, the one provided (a checkout on PYTHONPATH, say), not the
            # interpreter's installed one: that may be another checkout, which the sandbox cannot see
            self.python, self.package_root = sys.executable, str(package.parent)
            return
        self.python, self.package_root = "python3", None
        spec = os.environ.get("AGENT_CODE_PIP_SPEC")
        if spec:
            install = f"python3 -m pip install -q {shlex.quote(spec)}"
        else:
            wheel = await asyncio.to_thread(project_wheel)
            target = f"/tmp/agent-code-wheel/{wheel.name}"
            await box.upload(str(wheel), target)
            install = f"python3 -m pip install -q --no-deps --no-index --force-reinstall {shlex.quote(target)}"
            spec = f"this checkout's wheel ({wheel.name})"
        env = {"PIP_BREAK_SYSTEM_PACKAGES": "1", "PIP_DISABLE_PIP_VERSION_CHECK": "1",
               "PIP_ROOT_USER_ACTION": "ignore", "PIP_NO_WARN_SCRIPT_LOCATION": "1"}
        result = await box.exec(install, env=env, cwd="/", timeout=900)
        if not result.ok:
            raise HarnessError(f"pip install of {spec} failed in the sandbox: {result.output()}")
        check = await box.exec(CLIENT_CHECK, user="agent", cwd="/", timeout=120)
        if not check.ok and box.name != "docker":   # a sandbox that can download (E2B): the client's deps
            deps = await box.exec(f"python3 -m pip install -q {' '.join(CLIENT_DEPS)}", env=env, cwd="/", timeout=900)
            check = await box.exec(CLIENT_CHECK, user="agent", cwd="/", timeout=120) if deps.ok else deps
        if not check.ok:
            raise HarnessError("agent-code is installed in the sandbox but its client cannot start there; the image "
                               "needs its dependencies (anthropic, typer, rich, httpx, prompt_toolkit), which a docker "
                               "sandbox cannot download: use the project's image (bash scripts/docker-setup.sh) or "
                               f"one built on it: {check.output()}")

    def command(self, launch: Launch) -> str:
        argv = [self.python, "-m", "agent_code", "-p", "--provider", "anthropic", "--base-url", launch.base_url,
                "--model", launch.model, "--output-format", "stream-json", "--max-steps", str(launch.max_steps),
                "--no-sandbox",
                "--permission-mode", "bypassPermissions", "--no-session-persistence", "-C", launch.workdir,
                "--tool-profile", launch.tool_profile,
                # the task's own .agent/, .agents/skills and .mcp.json configure nothing: the run is
                # what these flags say, whatever the task's repository carries (cli/trust.py)
                "--no-trust-project"]
        return f"{shlex.join(argv)} < {shlex.quote(launch.prompt_path)}"

    def env(self, launch: Launch) -> dict[str, str]:
        env = {"ANTHROPIC_AUTH_TOKEN": launch.session_id, "ANTHROPIC_BASE_URL": launch.base_url,
               "PYTHONUNBUFFERED": "1"}
        if os.path.isabs(self.python):   # this machine's interpreter (local): its bin dir only
            env["PATH"] = str(Path(self.python).parent)
        if self.package_root is not None:
            # the package this process runs: an editable install's finder points at the checkout
            # it was installed from, which the sandbox does not show (a worktree's run would find
            # no agent_code); PYTHONPATH goes before that finder
            env["PYTHONPATH"] = self.package_root
        return env
