"""The tools the agent can call, and :func:`default_tools` to get them registered."""

from __future__ import annotations

from agent_code.tools import builtin as _builtin
from agent_code.tools import edit as _edit
from agent_code.tools import files as _files
from agent_code.tools import grep as _grep  # the module; `_grep.grep` is the tool
from agent_code.tools import shell as _shell
from agent_code.tools import skill as _skill
from agent_code.tools.base import Tool, ToolContext, ToolError, ToolKind, ToolRegistry, tool

__all__ = ["Tool", "ToolContext", "ToolError", "ToolKind", "ToolRegistry", "tool", "default_tools"]


def default_tools() -> ToolRegistry:
    """A fresh registry with every built-in tool: read tools first, then edit_file,
    write_file and bash. Registering a tool does not let it run: the permission mode
    decides per call from its ``kind`` (see ``agent_code.policy``)."""
    registry = ToolRegistry()
    for t in (_builtin.echo, _builtin.system_date, _files.read_file, _files.list_files,
              _files.glob, _grep.grep, _files.project_tree, _edit.edit_file, _edit.write_file,
              _shell.bash, _skill.skill):
        registry.register(t)
    return registry
