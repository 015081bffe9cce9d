"""Project memory: standing instructions from ``AGENTS.md`` files, put into the system prompt.

Where they come from, in the order they are shown (later, more specific, text can refine
earlier text):

1. the user's own ``~/.agent-code/AGENTS.md`` (preferences for every project);
2. the project root's ``AGENTS.md``, ``AGENT.md`` and ``CLAUDE.md`` — all that exist, since
   repositories written for other agents keep their instructions under those names. A
   file that is a symlink to one already loaded (a common ``CLAUDE.md -> AGENTS.md``
   set-up) or has the same text is loaded once.

Each file is delimited in the prompt by ``<project-instructions source="...">`` tags so the
model can tell instructions from the rest of the prompt and cite where a rule came from.
Memory is capped (:data:`MAX_FILE_CHARS` per file, :data:`MAX_TOTAL_CHARS` in all): a huge
file must not eat the context window; what is cut is said to be cut.

:func:`find_memory_files` touches the disk; :func:`format_memory` is pure.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

PROJECT_FILES = ("AGENTS.md", "AGENT.md", "CLAUDE.md")
USER_DIR = ".agent-code"
USER_FILE = "AGENTS.md"
MAX_FILE_CHARS = 20_000
MAX_TOTAL_CHARS = 40_000


@dataclass(frozen=True)
class MemoryFile:
    source: str   # how it is named in the prompt: "~/.agent-code/AGENTS.md" or "AGENTS.md"
    path: Path
    text: str


def user_memory_path(home: Path | None = None) -> Path:
    return (home or Path.home()) / USER_DIR / USER_FILE


def _read(path: Path) -> str | None:
    try:
        return path.read_text(encoding="utf-8", errors="replace")
    except OSError:  # missing, a directory, unreadable: no memory from it
        return None


def find_memory_files(root: Path, home: Path | None = None) -> list[MemoryFile]:
    """The memory files that exist for the project at ``root``, user-level first."""
    candidates = [("~/" + f"{USER_DIR}/{USER_FILE}", user_memory_path(home))]
    candidates += [(name, Path(root) / name) for name in PROJECT_FILES]
    found: list[MemoryFile] = []
    seen_paths: set[Path] = set()
    seen_texts: set[str] = set()
    for source, path in candidates:
        if not path.is_file():
            continue
        real = path.resolve()
        text = _read(path)
        if text is None or real in seen_paths or text.strip() in seen_texts or not text.strip():
            continue
        seen_paths.add(real)
        seen_texts.add(text.strip())
        found.append(MemoryFile(source, path, text))
    return found


def _cut(text: str, limit: int) -> str:
    if len(text) <= limit:
        return text
    return text[:limit].rstrip() + f"\n[... {len(text) - limit} more characters not loaded: the file is over the limit]"


def format_memory(files: list[MemoryFile], max_file_chars: int = MAX_FILE_CHARS,
                  max_total_chars: int = MAX_TOTAL_CHARS) -> str:
    """The memory block for the system prompt ("" when there is none)."""
    if not files:
        return ""
    parts = [("The user's standing instructions follow, one block per file. Follow them; when "
              "they conflict, the project's files win over the user-level file.")]
    room = max_total_chars
    for f in files:
        if room <= 0:
            parts.append(f'<project-instructions source="{f.source}">[not loaded: the memory limit of '
                         f'{max_total_chars} characters is reached]</project-instructions>')
            continue
        body = _cut(f.text.strip(), min(max_file_chars, room))
        room -= len(body)
        parts.append(f'<project-instructions source="{f.source}">\n{body}\n</project-instructions>')
    return "\n".join(parts)


def load_memory(root: Path, home: Path | None = None) -> tuple[str, list[MemoryFile]]:
    """(the memory block, the files it came from) for the project at ``root``."""
    files = find_memory_files(root, home)
    return format_memory(files), files
