"""The grader's import guard: a module the agent's change adds under a new top-level name is
imported by the project's own code only, never in place of a module that installed code asks
for.

The rules of ``protected.py`` refuse a new module named like anything the grading machine can
import, or like a name the project imports but lacks. What they cannot know is which absent
names the machine's installed packages try (``try: import simplejson`` inside a library, a
plugin looked up by name): a module planted under such a name would run inside the test
process without the project ever importing it. So every python the grader starts loads this
guard first (a ``sitecustomize`` on ``PYTHONPATH``, which then runs the machine's own
``sitecustomize``, if it has one): for each new top-level name the change brings, an import
asked for by code outside the workspace (the standard library, site-packages, a virtualenv in
the workspace) finds nothing, as it would have before the change; an import from the project's
code, its tests or the new modules themselves works as usual.
"""

from __future__ import annotations

import json
import posixpath
from typing import Iterable

from agent_code.tasks.protected import ENVIRONMENT_DIRS

MODULE_NAME = "sitecustomize"

_SOURCE = '''"""agent-code's grader: new top-level modules of the change, for the project's code only."""
import importlib.machinery as _machinery
import importlib.util as _util
import os as _os
import sys as _sys

_NAMES = frozenset({names!r})
_WORKSPACE = {workspace!r}.rstrip("/") + "/"
_ENVIRONMENTS = frozenset({environments!r})
_PROJECT_DIRS = None    # the project's directories (tracked, or holding the change's files): read when needed
_IMPORTLIB = _os.path.dirname(_os.path.dirname(_machinery.__file__)) + "/importlib/"


def _importer():
    frame = _sys._getframe(2)
    while frame is not None:
        name = frame.f_code.co_filename
        if not (name.startswith("<frozen importlib") or name.startswith(_IMPORTLIB)):
            return name
        frame = frame.f_back
    return ""


def _in_project(path):
    global _PROJECT_DIRS
    path = _os.path.realpath(path) if path.startswith("/") else ""
    if not path.startswith(_WORKSPACE):
        return False
    parts = path[len(_WORKSPACE):].split("/")[:-1]
    if any(part in _ENVIRONMENTS for part in parts):
        return False
    if _PROJECT_DIRS is None:
        import json
        with open(_os.path.join(_os.path.dirname(_os.path.realpath(__file__)), {dirs_file!r})) as f:
            _PROJECT_DIRS = frozenset(json.load(f))
    return "/".join(parts) in _PROJECT_DIRS


class _Guard:
    @staticmethod
    def find_spec(name, path=None, target=None):
        if path is None and name in _NAMES and not _in_project(_importer()):
            raise ModuleNotFoundError("No module named %r" % name, name=name)
        return None


_sys.meta_path.insert(0, _Guard)

# the machine's own sitecustomize, which this one hides on sys.path
_here = _os.path.dirname(_os.path.realpath(__file__))
_rest = [p for p in _sys.path if p and _os.path.realpath(p) != _here
         and not (_os.path.realpath(p) + "/").startswith(_WORKSPACE)]
_spec = _machinery.PathFinder.find_spec(__name__, _rest)
if _spec is not None and _spec.loader is not None:
    _spec.loader.exec_module(_util.module_from_spec(_spec))
'''


DIRS_FILE = "agent_code_grader_project.json"


def guard_files(names: Iterable[str], workspace: str, project_files: Iterable[str]) -> dict[str, str]:
    """``{file name: text}`` of the guard, for a directory on ``PYTHONPATH``: the
    ``sitecustomize.py`` that guards ``names`` for the project at ``workspace``, and the list of
    the project's directories (those of ``project_files``: the baseline's tracked files and the
    change's), beside which anything in the workspace — dependencies installed into it with
    ``pip --target``, a build's copies — is not the project."""
    dirs = sorted({posixpath.dirname(p) for p in project_files})
    return {f"{MODULE_NAME}.py": _SOURCE.format(names=sorted(names), workspace=workspace,
                                                environments=sorted(ENVIRONMENT_DIRS), dirs_file=DIRS_FILE),
            DIRS_FILE: json.dumps(dirs)}
