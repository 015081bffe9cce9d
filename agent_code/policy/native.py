"""The policy's compiled form: which modules ``scripts/build_native.py`` compiles with mypyc,
and whether this process uses them.

:func:`enable` puts ``_native/`` first on the package's ``__path__`` when the build there is
whole and was made from exactly these sources (``STAMP.json``: a SHA-256 per source, the
modules the compiled ones import included, the interpreter's ABI, each library's size) and
its library loads, so ``import agent_code.policy.shell_syntax`` loads the compiled module; any
difference, or ``AGENT_CODE_PURE_PYTHON`` set, and every module stays pure Python (never a mix
of old compiled code and edited sources, or of compiled and Python modules). Both forms run
the same code.

A compiled module calls its own functions directly, reads its ``Final`` names from C statics
(the policy's modules mark their constants so; a name tests replace stays plain) and checks
the declared types of its names at run time. Its classes are native (fields in C slots: no
``__dict__``) unless ``mypyc_attr(native_class=False)`` keeps one a Python class, as for
those whose instances the pure form builds through ``__dict__``; ``commands.Command`` and
``Invocation`` are native, and set their fields by the form that runs (``commands.NATIVE_FORM``).
"""

from __future__ import annotations

import hashlib
import importlib
import json
import os
import sysconfig
from pathlib import Path
from typing import Callable, MutableSequence, TypeVar

_T = TypeVar("_T")

try:  # (mypyc reads the decorator where a class is defined; at run time it does nothing)
    from mypy_extensions import mypyc_attr
except ImportError:  # where only the runtime dependencies are (a sandbox's copy of agent-code)
    def mypyc_attr(*attrs: str, **kwattrs: object) -> Callable[[_T], _T]:
        return lambda cls: cls

# the modules on the path of every check (parsing, the analysis, the deny list, the rules,
# self-protection); the rest of the package stays Python
COMPILED = ("shell_syntax", "misreads", "evaluated", "runners", "commands", "denylist", "rules", "self_protection")
PACKAGE_DIR = Path(__file__).parents[1]
NATIVE_DIR = Path(__file__).with_name("_native")
# what a build is made from (paths in the package): the compiled modules and the modules they
# import, whose types the compiled code was checked against (tests/test_policy_native.py
# keeps the list whole)
SOURCES = tuple(f"policy/{name}.py" for name in COMPILED) + (
    "policy/grammar.py", "policy/native.py", "globs.py", "tools/base.py")
STAMP = "STAMP.json"
# the shared library every compiled module loads first (scripts/build_native.py names the group)
GROUP = "agent_code.policy._native_group__mypyc"
PURE_VARIABLE = "AGENT_CODE_PURE_PYTHON"


def source_digests(package: Path = PACKAGE_DIR) -> dict[str, str]:
    """SHA-256 of each of :data:`SOURCES` in ``package`` (an ``agent_code`` directory)."""
    return {name: hashlib.sha256((package / name).read_bytes()).hexdigest() for name in SOURCES}


def libraries(native_dir: Path = NATIVE_DIR) -> dict[str, int]:
    """The build's extension files and their sizes."""
    return {path.name: path.stat().st_size for path in native_dir.glob("*.so")}


def stamp_for(package: Path = PACKAGE_DIR, native_dir: Path = NATIVE_DIR) -> dict[str, object]:
    """What ``STAMP.json`` holds for the libraries in ``native_dir``, built from the sources in
    ``package`` by this interpreter."""
    return {"soabi": sysconfig.get_config_var("SOABI"), "sources": source_digests(package),
            "libraries": libraries(native_dir)}


def build_matches(native_dir: Path = NATIVE_DIR, package: Path = PACKAGE_DIR) -> bool:
    """Whether ``native_dir`` holds a whole build (every library it made, as it made them)
    of exactly the sources in ``package`` for this interpreter (no readable stamp: no)."""
    try:
        recorded = json.loads((native_dir / STAMP).read_text())
        return bool(recorded == stamp_for(package, native_dir))
    except (OSError, ValueError):
        return False


def enable(path: MutableSequence[str]) -> bool:
    """Put the compiled build first on ``path`` (the package's ``__path__``) when it matches
    the sources, loads here (a tree copied to another machine: another C library) and
    ``AGENT_CODE_PURE_PYTHON`` is not set; whether it did."""
    if os.environ.get(PURE_VARIABLE) or not build_matches():
        return False
    path.insert(0, str(NATIVE_DIR))
    try:
        importlib.import_module(GROUP)
    except ImportError:  # (an extension that cannot load raises ImportError)
        path.remove(str(NATIVE_DIR))
        return False
    return True
