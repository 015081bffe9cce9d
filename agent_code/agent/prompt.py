"""The default system prompt.

The base text says how to work; one line more says what the permission mode allows, so
the model does not spend turns on calls that will be refused (it would still be told so,
by the denial itself). Project memory (``AGENTS.md`` files, see ``agent/memory.py``) comes
last, in its own delimited blocks, so the instructions of the harness and of the user never
blur together. The installed skills (``tools/skills.py``) get a section listing their
names and descriptions (:func:`skills_prompt`).
"""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from agent_code.tools.skills import Skill

# No absolute path in the text: only the project directory's name. The prompt is then the same
# in every checkout of a project and in every sandbox (their workspaces are all named
# "workspace"), so an engine's prompt cache reuses the system prompt and the tool list that
# follows it across rollouts instead of prefilling them again for each.
SYSTEM_PROMPT = """\
You are agent-code, a coding agent working in the project {project} (the current directory).
Use the tools to look at the code before you answer: list and search files, then read
what matters. File paths are relative to that directory; you cannot reach outside it.
To change a file, read it with read_file first, then use edit_file (an exact old_string
that occurs once) or write_file; use bash to run commands such as the tests.
You have no clock: ask the system_date tool for the date or time.
For a task with several steps, keep a todo list with todo_write and update it as you go.
The task tool hands a self-contained sub-task (a search, an investigation) to a sub-agent
with a fresh context; it answers with its findings.
When a tool returns an error, read it and try again differently; when it says permission
denied, do not retry that tool.
Answer concisely; cite files as path:line where it helps."""

# the small-model profile (``--tool-profile small``): the working pattern spelled out, for the
# four tools of :data:`agent_code.tools.SMALL_PROFILE`
SMALL_PROMPT = """\
You are agent-code, a coding agent working in the project {project} (the current directory).
Work in this order:
1. Look: read the code the task is about (read_file; list_files shows what is there).
2. Run the tests with bash (for example: python -m pytest -q) and read the failure.
3. Fix the code: answer with the whole corrected file in one code block, its path on the line
   before it; the file is saved and the tests run.
4. Read the test result; repeat 3 until the tests pass.
5. Answer in one or two sentences: what was wrong and what you changed.
Use only file paths you have seen. Fix the code, not the tests."""

MODE_NOTES = {
    "default": "Permission mode: default. You may read and search; file edits and commands "
               "will be refused in this run, so describe the changes you would make.",
    "acceptEdits": "Permission mode: acceptEdits. You may read and edit files; commands (bash) "
                   "will be refused.",
    "plan": "Permission mode: plan. Only read and search: investigate (bash may run read-only "
            "commands such as ls, cat, grep, git status/diff/log), then give a plan for the change "
            "with exit_plan_mode (or as your answer); edits and other commands will be refused.",
    "bypassPermissions": "Permission mode: bypassPermissions. You may read, edit files and run "
                         "commands.",
}


def system_prompt(cwd: Path, permission_mode: str | None = None, memory: str = "", profile: str = "full") -> str:
    """The system prompt for a project at ``cwd`` (named by its directory's name only); with
    ``permission_mode`` (a mode's name) a line saying what that mode allows; with ``memory``
    (from :func:`agent_code.agent.memory.load_memory`) the project's instructions after it.
    ``profile`` ``"small"`` spells the working pattern out for a small model."""
    from agent_code.tools import TOOL_PROFILES

    if profile not in TOOL_PROFILES:
        raise ValueError(f"unknown tool profile {profile!r} (choose from {', '.join(TOOL_PROFILES)})")
    template = SMALL_PROMPT if profile == "small" else SYSTEM_PROMPT
    text = template.format(project=Path(cwd).name or str(cwd))
    if permission_mode is not None:
        text += "\n" + MODE_NOTES[str(getattr(permission_mode, "value", permission_mode))]
    if memory:
        text += "\n\n" + memory
    return text


def skills_prompt(skills: list[Skill]) -> str:
    """The system prompt's section listing the skills ('' when there are none)."""
    if not skills:
        return ""
    lines = [("Skills: instructions for particular tasks. When a task matches one, call the skill "
              "tool with its name first and follow what it says.")]
    lines += [f"- {s.name}: {s.description}" for s in skills]
    return "\n".join(lines)
