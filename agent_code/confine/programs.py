"""Programs agent-code itself starts on the host (outside the wall): found on ``PATH`` without
the entries a command inside the wall could have written.

A project's own ``bin`` directories are often on the user's ``PATH`` (an activated
``.venv/bin``, ``node_modules/.bin`` through direnv, a relative ``.`` entry). A command the wall
contained can put a ``bwrap``, ``git`` or ``rg`` there, and the next time agent-code started
that name *on the host* — the wall itself (``bwrap``), its ``git config`` reads, the grep tool's
``rg``, ``--worktree``'s git — the planted program would run outside the wall, unasked.
:func:`host_which` is :func:`shutil.which` over the ``PATH`` entries that are absolute and lie
outside every directory in ``avoid`` (the project, the wall's writable roots).
"""

from __future__ import annotations

import os
import shutil
from pathlib import Path
from typing import Iterable


def host_path(avoid: Iterable[Path | str], path: str | None = None) -> str:
    """``path`` (default: ``$PATH``) without relative or empty entries and without those inside
    (or equal to) a directory of ``avoid``; symlinks resolved on both sides."""
    roots = [Path(os.path.realpath(a)) for a in avoid]
    kept = []
    for entry in (os.environ.get("PATH", os.defpath) if path is None else path).split(os.pathsep):
        if not entry or not os.path.isabs(entry):
            continue
        real = Path(os.path.realpath(entry))
        if any(real == r or r in real.parents for r in roots):
            continue
        kept.append(entry)
    return os.pathsep.join(kept)


def host_which(name: str, avoid: Iterable[Path | str], path: str | None = None) -> str | None:
    """The absolute path of program ``name`` for agent-code to start on the host (module doc)."""
    roots = [Path(os.path.realpath(a)) for a in avoid]
    found = shutil.which(name, path=host_path(roots, path))
    if found is None:
        return None
    real = Path(os.path.realpath(found))   # a link on PATH into the project: the same as the project's own
    if any(real == r or r in real.parents for r in roots):
        return None
    return os.path.abspath(found)
