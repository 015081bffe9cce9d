"""Files a prompt names, attached to it (the small-model profile).

A prompt such as "``fahrenheit_to_celsius`` in thermo.py is wrong" names the file to look at;
a model of a few billion parameters or less often edits it from imagination instead of reading
it first. :func:`attach_mentioned` appends the content of each project file the prompt names
(like an ``@file`` mention) and records it as read, so the model starts from the real text and
may write the file at once. Only regular UTF-8 files inside the project, at most
:data:`MAX_FILES` of them and :data:`MAX_BYTES` each; anything else is left to the tools.
"""

from __future__ import annotations

import re

from agent_code.tools.base import ToolContext

MAX_FILES = 3
MAX_BYTES = 16_000
# a path-like word with an extension: thermo.py, src/app/main.ts, `pager.py`
_PATH = re.compile(r"(?<![\w/.-])([\w][\w./-]*\.[A-Za-z0-9]{1,6})(?![\w/-])")


def mentioned_files(prompt: str, ctx: ToolContext) -> list[tuple[str, str]]:
    """(path as written, content) of each project file ``prompt`` names, in order of mention."""
    found: list[tuple[str, str]] = []
    seen = set()
    for match in _PATH.finditer(prompt):
        name = match.group(1).rstrip(".")
        try:
            path = (ctx.root / name).resolve()
            path.relative_to(ctx.root)
        except (OSError, ValueError):
            continue
        if path in seen or not path.is_file() or path.stat().st_size > MAX_BYTES:
            continue
        try:
            data = path.read_bytes()
            text = data.decode("utf-8")
        except (OSError, UnicodeDecodeError):
            continue
        seen.add(path)
        ctx.files.record(path, data)  # seen: the edit tools may change it
        found.append((name, text))
        if len(found) == MAX_FILES:
            break
    return found


def attach_mentioned(prompt: str, ctx: ToolContext) -> str:
    """``prompt`` with the files it names appended (see the module doc); unchanged if none."""
    files = mentioned_files(prompt, ctx)
    if not files:
        return prompt
    parts = [prompt, "", "The files named above, as they are now:"]
    for name, text in files:
        fence = "```" if "```" not in text else "````"
        parts += ["", f"{name}:", fence, text.rstrip("\n"), fence]
    return "\n".join(parts)
