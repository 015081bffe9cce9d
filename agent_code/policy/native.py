"""The policy's compiled form: which modules ``scripts/build_native.py`` compiles with mypyc,
and whether this process uses them.

:func:`enable` puts ``_native/`` first on the package's ``__path__`` when the build there was
made from exactly the sources beside it (``STAMP.json``: a SHA-256 per source, the
interpreter's ABI), so ``import agent_code.policy.shell_syntax`` loads the compiled module;
any difference, or ``AGENT_CODE_PURE_PYTHON`` set, and every module stays pure Python (never
a mix of old compiled code and edited sources). Both forms run the same code.
"""

from __future__ import annotations

import hashlib
import json
import os
import sysconfig
from pathlib import Path
from typing import MutableSequence

# the modules on the path of every check (parsing, the analysis, the deny list, the rules,
# self-protection); the rest of the package stays Python
COMPILED = ("shell_syntax", "misreads", "evaluated", "runners", "commands", "denylist", "rules", "self_protection")
NATIVE_DIR = Path(__file__).with_name("_native")
STAMP = "STAMP.json"


def source_digests(directory: Path | None = None) -> dict[str, str]:
    """SHA-256 of each compiled module's source in ``directory`` (default: this package)."""
    directory = directory or Path(__file__).parent
    return {name: hashlib.sha256((directory / f"{name}.py").read_bytes()).hexdigest() for name in COMPILED}


def enable(path: MutableSequence[str]) -> bool:
    """Put the compiled build first on ``path`` (the package's ``__path__``) when it matches
    the sources; whether it did."""
    if os.environ.get("AGENT_CODE_PURE_PYTHON"):
        return False
    try:
        recorded = json.loads((NATIVE_DIR / STAMP).read_text())
        fresh = recorded == {"soabi": sysconfig.get_config_var("SOABI"), "sources": source_digests()}
    except (OSError, ValueError):
        return False
    if fresh:
        path.insert(0, str(NATIVE_DIR))
    return fresh
