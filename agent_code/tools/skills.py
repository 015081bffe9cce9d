"""Skills: instructions the agent loads on demand, one ``SKILL.md`` per directory.

Where they are found (a project skill wins over a user skill of the same name)::

    <project>/.agents/skills/<dir>/SKILL.md     only in a folder the user trusts (agent/trust.py)
    ~/.agent-code/skills/<dir>/SKILL.md

A ``SKILL.md`` starts with a small front matter, then the instructions::

    ---
    name: release-notes
    description: Write release notes from the git log since the last tag.
    ---
    1. Run `git describe --tags --abbrev=0` ...

The front matter is read as ``key: value`` lines (values may be quoted; an indented
line continues the previous value; ``>``/``|`` block markers are accepted). ``name``
defaults to the directory's name and ``description`` to the body's first line. Only
names and descriptions go into the system prompt (``skills_prompt`` in
``agent/prompt.py``); the body is read when the model calls the ``skill`` tool
(``tools/skill.py``), so a large skill costs nothing until it is used.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from pathlib import Path

SKILL_FILE = "SKILL.md"
PROJECT_SKILLS = Path(".agents") / "skills"
USER_SKILLS = Path(".agent-code") / "skills"
MAX_DESCRIPTION = 300
_NAME = re.compile(r"^[A-Za-z0-9][A-Za-z0-9_.:-]*$")


@dataclass(frozen=True)
class Skill:
    name: str
    description: str
    path: Path          # the SKILL.md
    source: str         # "project" or "user"

    def body(self) -> str:
        """The instructions (the file without its front matter), read now."""
        return split_front_matter(self.path.read_text(encoding="utf-8"))[1].strip()


def split_front_matter(text: str) -> tuple[dict[str, str], str]:
    """``(fields, body)`` of a Markdown file with an optional ``---`` front matter; pure."""
    lines = text.lstrip("\ufeff").splitlines()
    if not lines or lines[0].strip() != "---":
        return {}, text
    try:
        end = next(i for i in range(1, len(lines)) if lines[i].strip() in ("---", "..."))
    except StopIteration:
        return {}, text
    fields: dict[str, str] = {}
    key: str | None = None
    for line in lines[1:end]:
        if not line.strip() or line.lstrip().startswith("#"):
            continue
        m = re.match(r"^([A-Za-z_][\w-]*)\s*:\s*(.*)$", line)
        if m and not line[0].isspace():
            key, value = m.group(1), m.group(2).strip()
            if value in (">", "|", ">-", "|-"):
                value = ""
            fields[key] = _unquote(value)
        elif key is not None:  # a continuation line
            fields[key] = (fields[key] + " " + line.strip()).strip()
    return fields, "\n".join(lines[end + 1:])


def _unquote(value: str) -> str:
    if len(value) >= 2 and value[0] == value[-1] and value[0] in "\"'":
        return value[1:-1]
    return value


def read_skill(path: Path, source: str) -> Skill:
    """The skill in ``path`` (a SKILL.md); raises OSError/UnicodeDecodeError if unreadable."""
    fields, body = split_front_matter(path.read_text(encoding="utf-8"))
    name = fields.get("name") or path.parent.name
    description = fields.get("description") or next(
        (line.strip().lstrip("#").strip() for line in body.splitlines() if line.strip()), "")
    if len(description) > MAX_DESCRIPTION:
        description = description[:MAX_DESCRIPTION - 1] + "…"
    return Skill(name, " ".join(description.split()), path, source)


def skill_dirs(root: Path, home: Path | None = None, project: bool = True) -> list[tuple[Path, str]]:
    user = [((home or Path.home()) / USER_SKILLS, "user")]
    return [(Path(root) / PROJECT_SKILLS, "project"), *user] if project else user


def project_skills(root: Path) -> list[Skill]:
    """The project's own skills (``.agents/skills``), as :func:`find_skills` would read them."""
    return _read_dirs([(Path(root) / PROJECT_SKILLS, "project")])


def find_skills(root: Path, home: Path | None = None, project: bool = True) -> list[Skill]:
    """Installed skills, sorted by name; unreadable or badly named ones are skipped.
    ``project``: the project's too (a folder the user trusts: ``agent/trust.py``)."""
    return _read_dirs(skill_dirs(root, home, project))


def _read_dirs(dirs: list[tuple[Path, str]]) -> list[Skill]:
    found: dict[str, Skill] = {}
    for base, source in dirs:
        if not base.is_dir():
            continue
        for path in sorted(base.glob(f"*/{SKILL_FILE}")):
            try:
                skill = read_skill(path, source)
            except (OSError, UnicodeDecodeError):
                continue
            if _NAME.match(skill.name) and skill.name not in found:
                found[skill.name] = skill
    return sorted(found.values(), key=lambda s: s.name)
