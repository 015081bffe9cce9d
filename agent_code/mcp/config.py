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

What a person is shown (:meth:`ServerConfig.describe`: the approval question, ``agent-code mcp
list``, ``/mcp``) never holds a secret: a header's value is shown as written with each
``${VAR}`` filled in masked and named (``Authorization: Bearer ****…abcd (from
${TRACKER_TOKEN})``), and a header whose name says it carries a credential (``Authorization``,
``Cookie``, ``*Key*``, ``*Token*``, ``*Secret*``…) has its written value masked too (all but a
leading scheme word such as ``Bearer``); in the URL and the arguments a variable whose name
says so (``*TOKEN*``, ``*KEY*``, ``*SECRET*``, ``*PASS*``…), or one in the URL's query, is
masked the same way; ``env`` values are not shown at all (their names are).

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
from typing import Any, Callable, Literal

PROJECT_FILE = ".mcp.json"
Scope = Literal["project", "user", "cli"]
_VAR = re.compile(r"\$\{([A-Za-z_][A-Za-z0-9_]*)(?::-([^}]*))?\}")
_SECRET = re.compile(r"auth|token|key|secret|pass|pwd|cookie|session|credential|signature|bearer|private",
                     re.IGNORECASE)
_SCHEME = re.compile(r"^([A-Za-z][A-Za-z0-9_-]{0,15}) +(?=\S)")
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
        """One line: what would run, for a person deciding whether to approve it (secrets
        masked: the module doc; control and format characters — a newline, an escape
        sequence that would redraw the terminal, a bidi override — shown as escapes)."""
        return printable(self._describe())

    def _describe(self) -> str:
        if self.transport == "http":
            url = _shown(self.entry.get("url"), self.url, lambda name, before: bool(_SECRET.search(name))
                         or "?" in before or "#" in before)
            if not self.headers:
                return f"http {url}"
            headers = self.entry.get("headers")
            written: dict[str, Any] = headers if isinstance(headers, dict) else {}
            return f"http {url}  headers: " + "; ".join(
                f"{k}: {_header_shown(k, written.get(k), v)}" for k, v in self.headers)
        if self.transport == "stdio":
            import shlex

            given = self.entry.get("args")
            written_args: list[Any] = given if isinstance(given, list) else []
            args = []
            for i, arg in enumerate(self.args):   # ${X} of a secret's name, after --token, in --api-key=${X}
                flag = i > 0 and self.args[i - 1].startswith("-") and bool(_SECRET.search(self.args[i - 1]))

                def secret(name: str, before: str, flag: bool = flag) -> bool:
                    return flag or bool(_SECRET.search(name + " " + before))

                args.append(_shown(written_args[i] if i < len(written_args) else None, arg, secret))
            words = " ".join(shlex.quote(w) for w in (self.command, *args))
            env = " ".join(f"{k}=…" for k, _ in self.env)
            return f"stdio: {env + ' ' if env else ''}{words}"
        return f"unusable: {self.problem}"


def printable(text: str) -> str:
    """``text`` with its control and format characters written as ``\\n``/``\\xNN``/``\\uNNNN``:
    what a terminal shows is what the text says."""
    import unicodedata

    def escape(ch: str) -> str:
        if ch == "\n":
            return "\\n"
        return f"\\x{ord(ch):02x}" if ord(ch) < 0x100 else f"\\u{ord(ch):04x}"

    return "".join(escape(ch) if unicodedata.category(ch) in ("Cc", "Cf", "Zl", "Zp") else ch for ch in text)


def mask(secret: str) -> str:
    """A secret as a person may see it: ``****``, and its last 4 characters when it is long
    enough (16 or more) for them to say which one it is without giving it away."""
    return "****…" + secret[-4:] if len(secret) >= 16 else "****"


def _shown(written: object, value: str, secret: Callable[[str, str], bool], everything: bool = False) -> str:
    """``value`` for a person: the written form with each ``${VAR}`` filled in — masked and
    named when ``secret(name, written text before it)`` or ``everything``; the value itself
    when the written form is unknown (masked if ``everything``)."""
    if not isinstance(written, str):
        return mask(value) if everything else value
    names: list[str] = []

    def fill(m: re.Match[str]) -> str:
        name, default = m.group(1), m.group(2)
        filled = os.environ.get(name, default if default is not None else "")
        if everything or secret(name, written[:m.start()]):
            names.append(f"${{{name}}}")
            return mask(filled)
        return filled

    shown = _VAR.sub(fill, written)
    return shown + (f" (from {', '.join(names)})" if names else "")


def _header_shown(name: str, written: object, value: str) -> str:
    if isinstance(written, str) and _VAR.search(written):
        if not _SECRET.search(name):
            return _shown(written, value, lambda _n, _a: True)
        scheme = _SCHEME.match(written)
        head = scheme.group(0) if scheme and not _VAR.search(scheme.group(0)) else ""
        return head + _shown(written[len(head):], value[len(head):], lambda _n, _a: True, everything=True)
    if not _SECRET.search(name):
        return value
    scheme = _SCHEME.match(value)
    head = scheme.group(0) if scheme else ""
    return head + mask(value[len(head):])


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
