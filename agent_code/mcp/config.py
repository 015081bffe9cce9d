"""Which MCP servers a session knows about, read in Claude Code's format.

Three places, each an object with ``mcpServers`` (the same shape in all three)::

    <project>/.mcp.json                    the project's servers (scope "project"), committed with it
    ~/.agent-code/settings.json            the user's own servers (scope "user"), every project
    --mcp-config FILE (or a JSON string)   servers for this run (scope "cli"), may be repeated

    {"mcpServers": {
       "everything": {"command": "npx", "args": ["-y", "@modelcontextprotocol/server-everything"],
                      "env": {"LOG": "1"}},
       "tracker":    {"type": "http", "url": "https://mcp.example.com/mcp",
                      "headers": {"Authorization": "Bearer ${TRACKER_TOKEN}"}}}}

A server with ``command`` (``type`` absent or ``stdio``) is started as a subprocess in the
project directory and spoken to over stdin/stdout; ``type: http`` (or ``streamable-http``,
or a ``url`` without a type) is a Streamable HTTP endpoint. ``${VAR}`` and
``${VAR:-default}`` in ``command``, ``args``, ``env``, ``url`` and ``headers`` are filled in
from the environment, as Claude Code does. ``timeout`` (milliseconds, optional) bounds each
tool call of that server. Other keys are ignored; an entry that cannot be used (no command
or url, the deprecated ``sse`` transport, an unset variable) is listed with its reason and
not started — it never stops the session.

A later place wins for a name given twice (cli over user over project). Whether a server
*starts* is not decided here (see ``agent_code.mcp``: project servers need the user's
approval).
"""

from __future__ import annotations

import hashlib
import json
import os
import re
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Literal

PROJECT_FILE = ".mcp.json"
Scope = Literal["project", "user", "cli"]
_VAR = re.compile(r"\$\{([A-Za-z_][A-Za-z0-9_]*)(?::-([^}]*))?\}")
HTTP_TYPES = ("http", "streamable-http", "streamable_http", "streamableHttp")


class McpConfigError(ValueError):
    """A servers file that cannot be read at all (not JSON, no object); names the file."""


@dataclass(frozen=True)
class ServerConfig:
    """One server entry, as written (``entry``) and as used (variables filled in)."""

    name: str
    scope: Scope
    source: str                       # where it was read: ".mcp.json", "--mcp-config x.json", ...
    entry: dict[str, Any] = field(compare=False, repr=False)
    transport: Literal["stdio", "http"] | None = None   # None: invalid (see ``problem``)
    command: str = ""
    args: tuple[str, ...] = ()
    env: tuple[tuple[str, str], ...] = ()
    url: str = ""
    headers: tuple[tuple[str, str], ...] = ()
    timeout_s: float | None = None    # each tool call (the entry's "timeout", in ms)
    problem: str | None = None        # why it cannot start

    def digest(self) -> str:
        """What the user approves: the entry exactly as written (any change asks again)."""
        text = json.dumps({"name": self.name, "entry": self.entry}, sort_keys=True, ensure_ascii=False)
        return "sha256:" + hashlib.sha256(text.encode("utf-8")).hexdigest()

    def describe(self) -> str:
        """One line: what would run, for a person deciding whether to approve it."""
        if self.transport == "http":
            return f"http {self.url}"
        if self.transport == "stdio":
            import shlex

            words = " ".join(shlex.quote(w) for w in (self.command, *self.args))
            env = " ".join(f"{k}=…" for k, _ in self.env)
            return f"stdio: {env + ' ' if env else ''}{words}"
        return f"unusable: {self.problem}"


def _expand(value: str, where: str) -> str:
    def fill(m: re.Match[str]) -> str:
        name, default = m.group(1), m.group(2)
        if name in os.environ:
            return os.environ[name]
        if default is not None:
            return default
        raise ValueError(f"{where} uses ${{{name}}}, which is not set (write ${{{name}:-default}} for a default)")

    return _VAR.sub(fill, value)


def _strings(value: object, what: str) -> list[str]:
    if not isinstance(value, list) or not all(isinstance(v, (str, int, float)) for v in value):
        raise ValueError(f"'{what}' must be a list of strings")
    return [str(v) for v in value]


def _mapping(value: object, what: str) -> dict[str, str]:
    if not isinstance(value, dict) or not all(isinstance(v, (str, int, float, bool)) for v in value.values()):
        raise ValueError(f"'{what}' must be an object of strings")
    return {str(k): str(v) for k, v in value.items()}


def parse_server(name: str, entry: object, scope: Scope, source: str) -> ServerConfig:
    """One ``mcpServers`` entry; a problem is kept in ``problem``, never raised."""
    raw = entry if isinstance(entry, dict) else {"_invalid": entry}
    base: dict[str, Any] = {"name": name, "scope": scope, "source": source, "entry": raw}
    try:
        if not isinstance(entry, dict):
            raise ValueError("the entry must be an object")
        if not name or len(name) > 100:
            raise ValueError("the server needs a name of 1 to 100 characters")
        kind = entry.get("type")
        if kind is not None and not isinstance(kind, str):
            raise ValueError("'type' must be a string")
        timeout = entry.get("timeout")
        if timeout is not None:
            if isinstance(timeout, bool) or not isinstance(timeout, (int, float)) or timeout <= 0:
                raise ValueError("'timeout' must be a positive number of milliseconds")
            base["timeout_s"] = timeout / 1000
        if kind == "sse":
            raise ValueError("the sse transport is deprecated and not supported; use \"type\": \"http\" "
                             "(Streamable HTTP)")
        if kind in HTTP_TYPES or (kind is None and "url" in entry and "command" not in entry):
            url = entry.get("url")
            if not isinstance(url, str) or not url.strip():
                raise ValueError("an http server needs a 'url'")
            url = _expand(url, "'url'")
            if not url.startswith(("http://", "https://")):
                raise ValueError(f"'url' must start with http:// or https://, not {url[:40]!r}")
            headers = _mapping(entry.get("headers", {}), "headers")
            return ServerConfig(**base, transport="http", url=url,
                                headers=tuple((k, _expand(v, f"header {k}")) for k, v in headers.items()))
        if kind not in (None, "stdio"):
            raise ValueError(f"unknown transport type {kind!r} (stdio or http)")
        command = entry.get("command")
        if not isinstance(command, str) or not command.strip():
            raise ValueError("a stdio server needs a 'command' (or \"type\": \"http\" and a 'url')")
        args = _strings(entry.get("args", []), "args")
        env = _mapping(entry.get("env", {}), "env")
        return ServerConfig(**base, transport="stdio", command=_expand(command, "'command'"),
                            args=tuple(_expand(a, "'args'") for a in args),
                            env=tuple((k, _expand(v, f"env {k}")) for k, v in env.items()))
    except ValueError as exc:
        return ServerConfig(**base, problem=str(exc))


def parse_servers(data: object, scope: Scope, source: str) -> list[ServerConfig]:
    """The servers of one parsed file (``{"mcpServers": {...}}``); raises :class:`McpConfigError`
    when it is not that shape."""
    if not isinstance(data, dict):
        raise McpConfigError(f"{source} must hold a JSON object with \"mcpServers\"")
    servers = data.get("mcpServers", {})
    if not isinstance(servers, dict):
        raise McpConfigError(f"{source}: \"mcpServers\" must be an object of servers by name")
    return [parse_server(str(name), entry, scope, source) for name, entry in servers.items()]


def read_servers_file(path: Path, scope: Scope, source: str) -> list[ServerConfig]:
    """The servers of a file; [] when it does not exist; raises :class:`McpConfigError`."""
    try:
        text = Path(path).read_text(encoding="utf-8")
    except FileNotFoundError:
        return []
    except (OSError, UnicodeDecodeError) as exc:
        raise McpConfigError(f"cannot read {source}: {getattr(exc, 'strerror', None) or exc}") from None
    try:
        data = json.loads(text) if text.strip() else {}
    except json.JSONDecodeError as exc:
        raise McpConfigError(f"{source} is not valid JSON: {exc.msg} (line {exc.lineno}, column {exc.colno})") from None
    return parse_servers(data, scope, source)


def project_servers(root: Path) -> list[ServerConfig]:
    """``<root>/.mcp.json``; raises :class:`McpConfigError`."""
    return read_servers_file(Path(root) / PROJECT_FILE, "project", PROJECT_FILE)


def cli_servers(value: str, cwd: Path | None = None) -> list[ServerConfig]:
    """``--mcp-config VALUE``: a file, or (starting with ``{``) the JSON itself."""
    if value.lstrip().startswith("{"):
        try:
            data = json.loads(value)
        except json.JSONDecodeError as exc:
            raise McpConfigError(f"--mcp-config is not valid JSON: {exc.msg}") from None
        return parse_servers(data, "cli", "--mcp-config (JSON)")
    path = Path(value).expanduser()
    if not path.is_absolute() and cwd is not None:
        path = Path(cwd) / path
    if not path.is_file():
        raise McpConfigError(f"--mcp-config {value}: no such file")
    return read_servers_file(path, "cli", f"--mcp-config {value}")


def merge(*groups: list[ServerConfig]) -> list[ServerConfig]:
    """One server per name, a later group's winning; in first-seen order."""
    out: dict[str, ServerConfig] = {}
    for group in groups:
        for server in group:
            out[server.name] = server
    return list(out.values())
