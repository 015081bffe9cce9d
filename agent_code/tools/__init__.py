"""The tools the agent can call, and :func:`default_tools` to get them registered."""

from __future__ import annotations

import dataclasses

from agent_code.tools import builtin as _builtin
from agent_code.tools import edit as _edit
from agent_code.tools import files as _files
from agent_code.tools import grep as _grep  # the module; `_grep.grep` is the tool
from agent_code.tools import shell as _shell
from agent_code.tools import skill as _skill
from agent_code.tools.base import Tool, ToolContext, ToolError, ToolKind, ToolRegistry, tool

__all__ = ["Tool", "ToolContext", "ToolError", "ToolKind", "ToolRegistry", "tool", "default_tools",
           "SMALL_PROFILE", "TOOL_PROFILES"]

# The small-model profile: the four tools a bug fix needs, each described in a line and offering
# only the arguments that matter (a 0.5B-1.5B model fills in every optional argument the schema
# offers, offsets and limits included, and loops on them); same names and code, a subset of the
# schemas. Edits are whole-file writes: small models copy exact old_string text badly (measured:
# edit_file calls with text that is not in the file, again and again) and rewrite a short file
# well, the finding behind Aider's "whole" edit format for weak models.
SMALL_PROFILE: dict[str, tuple[str, tuple[str, ...]]] = {
    "list_files": ("List the files and directories in a directory of the project.", ("path",)),
    "read_file": ("Read a whole text file; lines come numbered (the numbers are not part of the file).", ("path",)),
    "write_file": ("Write a whole file: every line of its new content (creates or replaces it).",
                   ("path", "content")),
    "bash": ("Run a shell command in the project directory, e.g. python -m pytest -q.", ("command",)),
}


def _small(t: Tool) -> Tool:
    description, keep = SMALL_PROFILE[t.name]
    schema = dict(t.input_schema)
    schema["properties"] = {k: v for k, v in t.input_schema.get("properties", {}).items() if k in keep}
    schema["required"] = [k for k in t.input_schema.get("required", []) if k in keep]
    return dataclasses.replace(t, description=description, input_schema=schema)


TOOL_PROFILES = ("full", "small")


def default_tools(profile: str = "full") -> ToolRegistry:
    """A fresh registry with every built-in tool: read tools first, then edit_file,
    write_file and bash. Registering a tool does not let it run: the permission mode
    decides per call from its ``kind`` (see ``agent_code.policy``). ``profile="small"``:
    only the tools of :data:`SMALL_PROFILE`, with their one-line descriptions."""
    if profile not in TOOL_PROFILES:
        raise ValueError(f"unknown tool profile {profile!r} (choose from {', '.join(TOOL_PROFILES)})")
    registry = ToolRegistry()
    for t in (_builtin.echo, _builtin.system_date, _files.read_file, _files.list_files,
              _files.glob, _grep.grep, _files.project_tree, _edit.edit_file, _edit.write_file,
              _shell.bash, _skill.skill):
        if profile == "small":
            if t.name not in SMALL_PROFILE:
                continue
            t = _small(t)
        registry.register(t)
    return registry
