"""The ``skill`` tool (kind ``read``): the full instructions of one installed skill.

Skills are found by ``agent_code.tools.skills`` (``.agents/skills/*/SKILL.md`` in the
project — in a folder the user trusts: ``ToolContext.project_skills`` — and
``~/.agent-code/skills/*/SKILL.md``); their names and descriptions are listed in
the system prompt, and this tool loads a body when the model needs it.
"""

from __future__ import annotations

from typing import Annotated

from agent_code.tools.base import ToolContext, ToolError, tool
from agent_code.tools.skills import find_skills


@tool()
def skill(
    ctx: ToolContext,
    name: Annotated[str, "The skill's name, as listed under 'Skills' in the system prompt."],
) -> str:
    """Load the full instructions of a skill listed under 'Skills' in the system prompt,
    then follow them. If the system prompt lists no skills, none are installed."""
    skills = find_skills(ctx.root, project=ctx.project_skills)
    chosen = next((s for s in skills if s.name == name), None)
    if chosen is None:
        chosen = next((s for s in skills if s.name.lower() == name.strip().lower()), None)
    if chosen is None:
        available = ", ".join(s.name for s in skills) or "none are installed"
        raise ToolError(f"no skill named {name!r}; available: {available}")
    try:
        body = chosen.body()
    except (OSError, UnicodeDecodeError) as exc:
        raise ToolError(f"cannot read skill {chosen.name!r} ({chosen.path}): {exc}") from None
    where = (f"its files are in {chosen.path.parent.relative_to(ctx.root).as_posix()}/"
             if chosen.source == "project" else f"it lives in {chosen.path.parent} (outside the project)")
    return f"Skill {chosen.name} ({where}):\n\n{body or '(the skill has no instructions)'}"
