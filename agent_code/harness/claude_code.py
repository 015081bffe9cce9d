"""Claude Code (npm ``@anthropic-ai/claude-code``) headless against the gateway.

``claude -p PROMPT --output-format stream-json --verbose --permission-mode bypassPermissions``
with ``ANTHROPIC_BASE_URL`` = the gateway and ``ANTHROPIC_AUTH_TOKEN`` = the session id.
Settings written to the agent's home pre-acknowledge bypass mode and the onboarding, and
non-essential traffic (telemetry, auto-update, error reports) is off, so the CLI talks to
nothing but the gateway. ``IS_SANDBOX=1`` lets bypass mode run where the agent is root (a
sandbox without user isolation).

On the local sandbox the CLI installed on this machine is used (``AGENT_CODE_CLAUDE``, the
test peers in ``.cache/node``, or ``claude`` on PATH); elsewhere ``npm install -g`` puts
``CLAUDE_CODE_NPM_SPEC`` (default: the version the tests pin) into the sandbox.
"""

from __future__ import annotations

import json
import os
import shlex
from pathlib import Path

from agent_code.harness.base import CliHarness, HarnessError, Launch, ensure_npm_cli, cat_prompt, find_host_binary
from agent_code.sandbox.base import Sandbox

NPM_SPEC = "@anthropic-ai/claude-code@2.1.197"
REPO = Path(__file__).resolve().parents[2]


def host_claude() -> str | None:
    return find_host_binary("claude", (os.environ.get("AGENT_CODE_CLAUDE"),
                                       REPO / ".cache/node/node_modules/.bin/claude"))


class ClaudeCodeHarness(CliHarness):
    name = "claude-code"

    def __init__(self) -> None:
        self.launcher = ["claude"]

    async def install(self, box: Sandbox) -> None:
        if box.name == "local":
            found = host_claude()
            if found is None:
                raise HarnessError("Claude Code is not installed here: `npm install -g @anthropic-ai/claude-code` "
                                   "or set AGENT_CODE_CLAUDE to its binary")
            real = Path(found).resolve()
            box.provide(real.parent)  # type: ignore[attr-defined]
            self.launcher = [str(real)]
            return
        argv = await ensure_npm_cli(box, "claude", os.environ.get("CLAUDE_CODE_NPM_SPEC", NPM_SPEC), host_claude())
        self.launcher = argv

    async def configure(self, box: Sandbox, launch: Launch) -> None:
        settings = {"permissions": {"defaultMode": "bypassPermissions"}, "skipDangerousModePermissionPrompt": True,
                    "includeCoAuthoredBy": False, "env": {"CLAUDE_CODE_DISABLE_NONESSENTIAL_TRAFFIC": "1"}}
        state = {"hasCompletedOnboarding": True, "bypassPermissionsModeAccepted": True,
                 "projects": {launch.workdir: {"hasTrustDialogAccepted": True}}}
        await box.write_file(f"{launch.home}/.claude/settings.json", json.dumps(settings, indent=2), user="agent")
        await box.write_file(f"{launch.home}/.claude.json", json.dumps(state, indent=2), user="agent")
        await box.give_to_agent(f"{launch.home}/.claude")

    def command(self, launch: Launch) -> str:
        argv = [*self.launcher, "-p", "--output-format", "stream-json", "--verbose",
                "--permission-mode", "bypassPermissions", "--model", launch.model]
        return f"{shlex.join(argv)} {cat_prompt(launch)}"

    def env(self, launch: Launch) -> dict[str, str]:
        return {"ANTHROPIC_BASE_URL": launch.base_url, "ANTHROPIC_AUTH_TOKEN": launch.session_id,
                "CLAUDE_CODE_DISABLE_NONESSENTIAL_TRAFFIC": "1", "DISABLE_AUTOUPDATER": "1",
                "DISABLE_TELEMETRY": "1", "DISABLE_ERROR_REPORTING": "1", "IS_SANDBOX": "1"}
