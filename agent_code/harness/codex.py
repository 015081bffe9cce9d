"""Codex CLI (npm ``@openai/codex``) headless against the gateway's Responses endpoint.

``codex exec --json --skip-git-repo-check -C WORKDIR -m MODEL - < PROBLEM.md`` with
``CODEX_HOME`` in the agent's home holding a ``config.toml`` that defines one model provider
with the gateway inline (``base_url = <gateway>/v1``, ``wire_api = "responses"``,
``env_key`` naming the variable that holds the session id), ``approval_policy = "never"`` and
``sandbox_mode = "danger-full-access"`` (our sandbox is the isolation), web search, plugins,
analytics and the update check off, and no login shells for its commands (a login ``sh``
reads ``/etc/profile``, which resets ``PATH`` and loses the task's interpreter). ``--json`` prints the run log as JSONL events
(``thread.started``, ``turn.started``, ``item.started``/``item.completed`` with
``command_execution``, ``file_change``, ``agent_message`` items, ``turn.completed``).
Exit codes: 0 done, 1 failed (e.g. the endpoint answered an error).

What Codex 0.171 sends (seen against a logging server):

* ``POST {base_url}/responses`` only (no ``/models`` look-up), ``Authorization: Bearer
  <the env_key's value>`` — the session id — plus ``session-id``/``thread-id``/
  ``x-client-request-id`` headers carrying Codex's own thread UUID, ``originator:
  codex_exec``, ``x-codex-turn-metadata`` and ``x-codex-window-id``; a plain JSON body
  (``accept-encoding: zstd,gzip`` for the reply).
* Body: ``model``, ``stream: true``, ``store: false`` (the full history is resent every
  turn), ``instructions`` absent — the system prompt is the first ``input`` item, a
  ``developer`` message, followed by more ``developer``/``user`` context messages and the
  prompt; ``tools`` (``function`` tools ``exec_command``, ``write_stdin``,
  ``request_user_input``, ``view_image``, the goal tools, and a ``namespace`` tool
  ``multi_agent_v1`` holding the sub-agent functions), ``tool_choice: "auto"``,
  ``parallel_tool_calls: true``, ``reasoning: {"summary": "auto"}``, ``include:
  ["reasoning.encrypted_content"]``, ``prompt_cache_key`` and ``client_metadata`` (thread
  and turn ids). Later turns append ``function_call`` / ``function_call_output`` items.
* It needs the SSE events through ``response.completed`` (``response.output_item.done``
  carries each output item); a 400 is not retried and ends the run with exit code 1.
* For a model name it has no metadata for (ours), Codex warns and uses fallback metadata:
  its stock prompt, and edits go through the shell tool as ``apply_patch <<'EOF' ...`` —
  Codex intercepts that command and applies the patch itself (a ``file_change`` event).
  With a model catalog entry (``model_catalog_json``; here ``CODEX_MODEL_CATALOG`` names a
  JSON file ``{"models": [...]}`` with an entry for the served model, see
  :func:`model_catalog`) that says ``"apply_patch_tool_type": "freeform"``, Codex instead
  offers ``apply_patch`` as a ``custom`` tool (a Lark grammar) and expects
  ``custom_tool_call`` items back; such an entry must carry its own ``base_instructions``.
* Without ``features.plugins = false`` it contacts github.com, api.github.com and
  chatgpt.com at start-up; with the settings below it talks to nothing but the gateway.

On the local sandbox the Codex installed on this machine is used (``AGENT_CODE_CODEX``, the
test peers in ``.cache/node``, or ``codex`` on PATH), run as its native binary (the npm
package's ``@openai/codex-<platform>`` optional dependency) so no Node is needed; elsewhere
``npm install -g`` puts ``CODEX_NPM_SPEC`` (default: the version the tests pin) there.
"""

from __future__ import annotations

import json
import os
import platform
import shlex
from pathlib import Path

from agent_code.harness.base import CliHarness, HarnessError, Launch, ensure_npm_cli, find_host_binary
from agent_code.sandbox.base import Sandbox

NPM_SPEC = "@openai/codex@0.171.0"
REPO = Path(__file__).resolve().parents[2]
KEY_VAR = "AGENT_CODE_GATEWAY_KEY"          # config.toml's env_key: holds the session id
PROVIDER = "agent-code-gateway"
TRIPLES = {("Linux", "x86_64"): ("linux-x64", "x86_64-unknown-linux-musl"),
           ("Linux", "aarch64"): ("linux-arm64", "aarch64-unknown-linux-musl"),
           ("Darwin", "x86_64"): ("darwin-x64", "x86_64-apple-darwin"),
           ("Darwin", "arm64"): ("darwin-arm64", "aarch64-apple-darwin")}


def host_codex() -> str | None:
    return find_host_binary("codex", (os.environ.get("AGENT_CODE_CODEX"),
                                      REPO / ".cache/node/node_modules/.bin/codex"))


def native_codex(found: str | os.PathLike) -> Path:
    """The native Codex binary behind ``found`` (itself, or the npm package's JS launcher)."""
    path = Path(found).resolve()
    with open(path, "rb") as fh:
        if fh.read(4) in (b"\x7fELF", b"\xcf\xfa\xed\xfe"):
            return path
    package = path.parent.parent                       # .../node_modules/@openai/codex
    key = TRIPLES.get((platform.system(), platform.machine()))
    if key is None:
        raise HarnessError(f"Codex has no native binary for {platform.system()} {platform.machine()}")
    suffix, triple = key
    for root in (package / "node_modules/@openai" / f"codex-{suffix}", package.parent / f"codex-{suffix}", package):
        binary = root / "vendor" / triple / "bin" / "codex"
        if binary.exists():
            return binary.resolve()
    raise HarnessError(f"the native Codex binary for {triple} is missing next to {path} (npm installs it as the "
                       f"optional dependency @openai/codex-{suffix}; reinstall without --omit=optional)")


def model_catalog(slug: str, base_instructions: str, *, context_window: int = 32768) -> dict:
    """A one-model catalog for ``model_catalog_json`` (the fields Codex 0.171 requires) that
    makes Codex offer ``apply_patch`` as a freeform ``custom`` tool; ``base_instructions``
    replaces Codex's stock system prompt."""
    return {"models": [{
        "slug": slug, "display_name": slug, "base_instructions": base_instructions,
        "apply_patch_tool_type": "freeform", "shell_type": "shell_command", "context_window": context_window,
        "supported_reasoning_levels": [], "visibility": "list", "supported_in_api": True, "priority": 1,
        "support_verbosity": False, "truncation_policy": {"mode": "tokens", "limit": 10000},
        "experimental_supported_tools": []}]}


def config_toml(launch: Launch, catalog: str | None = None) -> str:
    """Codex's config: the gateway as the only provider, no approvals, no traffic elsewhere."""
    q = json.dumps  # a JSON string is a valid TOML basic string
    lines = [f"model = {q(launch.model)}", f"model_provider = {q(PROVIDER)}", 'approval_policy = "never"',
             'sandbox_mode = "danger-full-access"', 'web_search = "disabled"', "check_for_update_on_startup = false",
             "allow_login_shell = false"]
    if catalog:
        lines.append(f"model_catalog_json = {q(catalog)}")
    lines += ["", f"[model_providers.{PROVIDER}]", 'name = "agent-code gateway"',
              f"base_url = {q(launch.base_url.rstrip('/') + '/v1')}", f"env_key = {q(KEY_VAR)}",
              'wire_api = "responses"', "", "[features]", "plugins = false", "", "[analytics]", "enabled = false", ""]
    return "\n".join(lines)


class CodexHarness(CliHarness):
    name = "codex"
    protocol = "openai-responses"

    def __init__(self) -> None:
        self.launcher = ["codex"]

    async def install(self, box: Sandbox) -> None:
        if box.name == "local":
            found = host_codex()
            if found is None:
                raise HarnessError("Codex is not installed here: `npm install -g @openai/codex` "
                                   "or set AGENT_CODE_CODEX to its binary")
            native = native_codex(found)
            box.provide(native.parent.parent)  # type: ignore[attr-defined]  # bin/ and codex-resources/
            self.launcher = [str(native)]
            return
        argv = await ensure_npm_cli(box, "codex", os.environ.get("CODEX_NPM_SPEC", NPM_SPEC), host_codex())
        self.launcher = argv

    async def configure(self, box: Sandbox, launch: Launch) -> None:
        codex_home = f"{launch.home}/.codex"
        catalog = None
        if os.environ.get("CODEX_MODEL_CATALOG"):
            catalog = f"{codex_home}/models.json"
            await box.upload(os.environ["CODEX_MODEL_CATALOG"], catalog, user="agent")
        await box.write_file(f"{codex_home}/config.toml", config_toml(launch, catalog), user="agent")
        await box.give_to_agent(codex_home)

    def command(self, launch: Launch) -> str:
        argv = [*self.launcher, "exec", "--json", "--skip-git-repo-check", "--color", "never",
                "-C", launch.workdir, "-m", launch.model, "-"]
        return f"{shlex.join(argv)} < {shlex.quote(launch.prompt_path)}"

    def env(self, launch: Launch) -> dict[str, str]:
        return {"CODEX_HOME": f"{launch.home}/.codex", KEY_VAR: launch.session_id}
