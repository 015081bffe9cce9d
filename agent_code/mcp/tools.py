"""MCP tools as agent-code tools: ``mcp__<server>__<tool>``, the server's JSON Schema.

Each tool a connected server lists becomes a :class:`~agent_code.tools.base.Tool` with
``origin="mcp:<server>"``. Its kind is ``read`` when the server marks it read-only
(``annotations.readOnlyHint``), else ``execute``: the permission modes, rules and hooks
treat it like any tool of that kind, by its name (``mcp__everything__*`` in a deny rule, a
hook matcher ``mcp__.*``), and plan mode offers only the read-only ones.

A result comes back as text: text blocks as they are, an embedded text resource with its
URI, images, audio and binary resources as a one-line placeholder (``[image: image/png,
1.2 kB]``), resource links as their URI, and the structured content when there is nothing
else. A result the server flags ``isError`` — and a call that timed out or whose server is
gone — is an ``is_error`` tool result; the run goes on.
"""

from __future__ import annotations

import base64
import hashlib
import json
import re
from typing import TYPE_CHECKING

from agent_code.mcp.client import McpCallError, McpManager
from agent_code.tools.base import Tool, ToolContext, ToolError

if TYPE_CHECKING:   # the SDK is imported when a server starts, not with this module
    from mcp import types as mcp_types

PREFIX = "mcp__"
MAX_NAME = 64            # the Anthropic API's limit for a tool name
MAX_DESCRIPTION = 2048
_UNSAFE = re.compile(r"[^A-Za-z0-9_-]")


def normalize(name: str) -> str:
    """A server or tool name as it may appear in a tool name (``[A-Za-z0-9_-]``)."""
    return _UNSAFE.sub("_", name) or "_"


def tool_name(server: str, tool: str) -> str:
    name = f"{PREFIX}{normalize(server)}__{normalize(tool)}"
    if len(name) > MAX_NAME:  # long names keep a digest of the whole, so two never meet
        digest = hashlib.sha256(name.encode("utf-8")).hexdigest()[:8]
        name = name[:MAX_NAME - 9] + "_" + digest
    return name


def _size(data: str) -> str:
    try:
        n = len(base64.b64decode(data, validate=False))
    except (ValueError, TypeError):
        n = len(data)
    return f"{n} bytes" if n < 1024 else f"{n / 1024:.1f} kB"


def result_text(result: mcp_types.CallToolResult) -> str:
    """The text the model reads for a ``CallToolResult`` (see the module doc)."""
    from mcp import types as mt

    parts: list[str] = []
    for block in getattr(result, "content", None) or []:
        if isinstance(block, mt.TextContent):
            parts.append(block.text)
        elif isinstance(block, (mt.ImageContent, mt.AudioContent)):
            parts.append(f"[{block.type}: {block.mime_type}, {_size(block.data)} — not shown]")
        elif isinstance(block, mt.ResourceLink):
            label = f" ({block.name})" if block.name else ""
            parts.append(f"[resource link: {block.uri}{label}]")
        elif isinstance(block, mt.EmbeddedResource):
            res = block.resource
            if isinstance(res, mt.TextResourceContents):
                parts.append(f"[resource {res.uri}]\n{res.text}")
            else:
                mime = res.mime_type or "binary"
                parts.append(f"[resource {res.uri}: {mime}, {_size(res.blob or '')} — not shown]")
        else:   # a content type of a later protocol version
            parts.append(f"[{getattr(block, 'type', None) or 'unknown'} content — not shown]")
    structured = getattr(result, "structured_content", None)
    if structured is not None and not parts:
        parts.append(json.dumps(structured, ensure_ascii=False, indent=2))
    return "\n".join(parts) if parts else "(no output)"


def make_tool(manager: McpManager, server: str, spec: mcp_types.Tool) -> Tool:
    """The agent-code tool for one listed MCP tool."""
    annotations = getattr(spec, "annotations", None)
    read_only = bool(getattr(annotations, "read_only_hint", False))
    remote = spec.name
    description = (spec.description or "").strip() or f"The {remote} tool of the MCP server {server}."
    if len(description) > MAX_DESCRIPTION:
        description = description[:MAX_DESCRIPTION] + "…"
    schema = dict(spec.input_schema or {})
    schema.setdefault("type", "object")

    def call(ctx: ToolContext, **arguments: object) -> str:
        try:
            result = manager.call(server, remote, arguments)
        except McpCallError as exc:
            raise ToolError(str(exc)) from None
        text = result_text(result)
        if getattr(result, "is_error", False):
            raise ToolError(text)
        return text

    return Tool(name=tool_name(server, remote), description=description, input_schema=schema, fn=call,
                kind="read" if read_only else "execute", origin=f"mcp:{server}")


def server_tools(manager: McpManager) -> list[Tool]:
    """The tools of every connected server, in the servers' order."""
    out: list[Tool] = []
    for state in manager.servers.values():
        if state.client is None:
            continue
        out += [make_tool(manager, state.name, spec) for spec in state.tools]
    return out
