"""Qwen Code (npm ``@qwen-code/qwen-code``) headless against the gateway's Chat Completions.

``qwen --yolo --output-format stream-json --max-session-turns N -m MODEL < PROBLEM.md``
with ``OPENAI_BASE_URL`` = ``<gateway>/v1``, ``OPENAI_API_KEY`` = the session id and
``OPENAI_MODEL``. ``~/.qwen/settings.json`` selects the ``openai`` auth type (no auth
prompt) and turns off what would talk to anything else or add model calls of its own:
usage statistics (which go to an Alibaba RUM endpoint otherwise), telemetry, the update
check, managed auto-memory/dream/auto-skill (a background "memory extraction" sub-agent
that makes a second chat request after the answer), follow-up suggestions and the
next-speaker check. The prompt comes on stdin (a prompt that starts with ``-`` would be
read as an option). stream-json is the run log: ``system/init``, ``assistant``, ``user``
(tool results), ``result``, like Claude Code's. Exit codes: 0 done, 1 an API error (e.g.
a 4xx, not retried), 53 the ``--max-session-turns`` cap (an answer, not a crash), 55 a
run budget.

What Qwen Code 0.24.4 sends (seen against a logging server): ``POST {base}/chat/completions``
through the OpenAI SDK (``x-stainless-*`` headers, ``user-agent: QwenCode/<version>``),
``Authorization: Bearer <OPENAI_API_KEY>`` and nothing else that identifies the session —
no session header, no ``user`` or ``metadata`` in the body; so the session id reaches the
gateway only as the API key. The body: ``model``, ``messages`` (a ``system`` string, then
``user`` content as a list of ``text`` parts: system reminders, the workspace context and
the prompt), ``tools`` (~14 ``function`` tools: ``run_shell_command``, ``read_file``,
``write_file``, ``edit``, ``glob``, ``grep_search``, ``agent``, ...), ``max_tokens: 32000``,
``stream: true`` with ``stream_options: {"include_usage": true}``. Later turns resend the
history: ``assistant`` messages with ``content: null`` and ``tool_calls`` (arguments
re-serialised as compact JSON), ``tool`` messages whose content is a list of ``text`` parts.

On the local sandbox the Qwen Code installed on this machine is used (``AGENT_CODE_QWEN``,
the test peers in ``.cache/node``, or ``qwen`` on PATH), run by this machine's ``node``
(the ``node_modules`` holding it and the node binary are made reachable to the agent
user); elsewhere ``npm install -g`` puts ``QWEN_CODE_NPM_SPEC`` (default: the version the
tests pin) there. It declares Node >= 22 but runs on Node 20.
"""

from __future__ import annotations

import json
import os
import shlex
import shutil
from pathlib import Path

from agent_code.harness.base import CliHarness, HarnessError, Launch, ensure_npm_cli, find_host_binary
from agent_code.sandbox.base import Sandbox

NPM_SPEC = "@qwen-code/qwen-code@0.24.4"
REPO = Path(__file__).resolve().parents[2]
SETTINGS = {
    "security": {"auth": {"selectedType": "openai"}},
    "general": {"enableAutoUpdate": False},
    "privacy": {"usageStatisticsEnabled": False},
    "telemetry": {"enabled": False},
    "memory": {"enableManagedAutoMemory": False, "enableManagedAutoDream": False, "enableAutoSkill": False},
    "ui": {"enableFollowupSuggestions": False},
    "model": {"skipNextSpeakerCheck": True},
}


def host_qwen() -> str | None:
    return find_host_binary("qwen", (os.environ.get("AGENT_CODE_QWEN"),
                                     REPO / ".cache/node/node_modules/.bin/qwen"))


class QwenCodeHarness(CliHarness):
    name = "qwen-code"
    protocol = "openai-chat"

    def __init__(self) -> None:
        self.argv = ["qwen"]

    async def install(self, box: Sandbox) -> None:
        if box.name == "local":
            found, node = host_qwen(), shutil.which("node")
            if found is None:
                raise HarnessError("Qwen Code is not installed here: `npm install -g @qwen-code/qwen-code` "
                                   "or set AGENT_CODE_QWEN to its binary")
            if node is None:
                raise HarnessError("Qwen Code needs Node.js, and `node` is not on PATH")
            entry, node_path = Path(found).resolve(), Path(node).resolve()
            modules = next((p for p in entry.parents if p.name == "node_modules"), entry.parent)
            box.provide(modules)  # type: ignore[attr-defined]  # the package and its optional natives
            box.provide(node_path)  # type: ignore[attr-defined]
            self.argv = [str(node_path), str(entry)]
            return
        self.argv = await ensure_npm_cli(box, "qwen", os.environ.get("QWEN_CODE_NPM_SPEC", NPM_SPEC), host_qwen())

    async def configure(self, box: Sandbox, launch: Launch) -> None:
        await box.write_file(f"{launch.home}/.qwen/settings.json", json.dumps(SETTINGS, indent=2), user="agent")
        await box.give_to_agent(f"{launch.home}/.qwen")

    def command(self, launch: Launch) -> str:
        argv = [*self.argv, "--yolo", "--output-format", "stream-json", "--max-session-turns", str(launch.max_steps),
                "-m", launch.model]
        return f"{shlex.join(argv)} < {shlex.quote(launch.prompt_path)}"

    def env(self, launch: Launch) -> dict[str, str]:
        return {"OPENAI_BASE_URL": launch.base_url.rstrip("/") + "/v1", "OPENAI_API_KEY": launch.session_id,
                "OPENAI_MODEL": launch.model, "QWEN_CODE_SUPPRESS_YOLO_WARNING": "1"}
