"""The tools the agent can call, and :func:`default_tools` to get them registered."""

from __future__ import annotations

from agent_code.tools import builtin as _builtin
from agent_code.tools import files as _files
from agent_code.tools import grep as _grep  # the module; `_grep.grep` is the tool
from agent_code.tools.base import Tool, ToolContext, ToolError, ToolRegistry, tool

__all__ = ["Tool", "ToolContext", "ToolError", "ToolRegistry", "tool", "default_tools"]


def default_tools() -> ToolRegistry:
    """A fresh registry with the built-in read-only tools."""
    registry = ToolRegistry()
    for t in (_builtin.echo, _builtin.system_date, _files.read_file, _files.list_files,
              _files.glob, _grep.grep, _files.project_tree):
        registry.register(t)
    return registry
