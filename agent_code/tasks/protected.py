"""What the grader refuses to take from an agent's change: the rules of the reward's threat model.

The grader (``grading.py``) applies the agent's whole diff to a scratch index over a pristine
checkout and lists every path it touches, ignored files included (nothing is staged with
``git add``, so no ``.gitignore`` can hide a file). Each touched path is checked against
:data:`RULES`; a path any rule matches is put back to its baseline state (an added file is
dropped) and reported in ``rejected_paths``. Everything else is applied and graded.

Each rule is one class of reward hack: a way to make the tests pass, or make the grader believe
they passed, without fixing the code. A new class is one more line in :data:`RULES`. Rejecting a
path never zeroes a reward by itself: an honest fix that also touched, say, ``pyproject.toml``
is graded on the rest of its change.

What this does not defend: code under test that subverts its own test process (``os._exit(0)``
at import, patching pytest from the module under test, special-casing the tested inputs). Those
need the hidden tests of ``test_patch`` and review of the diff; see docs/security.md (the grader's threat model).
"""

from __future__ import annotations

import posixpath
import re
import shlex
import sys
from dataclasses import dataclass, field
from typing import Callable, Iterable

from agent_code.globs import glob_regex

SYMLINK_MODE, SUBMODULE_MODE = "120000", "160000"

# Names whose import the test run depends on: a module of one of these names planted where the
# grader's python looks first replaces the runner (or a module it loads) with the agent's code.
RUNNER_MODULES = frozenset({"pytest", "_pytest", "pluggy", "py", "iniconfig", "packaging", "exceptiongroup",
                            "tomli", "tomllib", "conftest", "sitecustomize", "usercustomize", "unittest",
                            "nose", "nose2", "hypothesis", "coverage"})
RUNNER_CONFIGS = frozenset({"pytest.ini", ".pytest.ini", "pytest.toml", ".pytest.toml", "pyproject.toml",
                            "setup.cfg", "tox.ini", "noxfile.py", "makefile", "gnumakefile", ".coveragerc",
                            "conftest.py", ".env"})
PACKAGING_FILES = frozenset({"setup.py", "entry_points.txt", "top_level.txt", "record", "metadata",
                             "pkg-info", "direct_url.json"})
GIT_FILES = frozenset({".gitattributes", ".gitmodules", ".gitignore", ".mailmap"})
ENVIRONMENT_DIRS = frozenset({"site-packages", "dist-packages", ".venv", "venv", ".tox", ".nox",
                              "__pypackages__", ".eggs"})
TEST_DIR_NAMES = frozenset({"tests", "test", "testing"})
MODULE_SUFFIXES = (".py", ".pyc", ".pyo", ".pyw", ".so", ".pyd")
BINARY_MODULE_SUFFIXES = (".pyc", ".pyo", ".so", ".pyd", ".dylib")


@dataclass(frozen=True)
class Change:
    """One path the agent's diff touches (a ``git diff-index --raw`` row)."""
    path: str
    status: str          # A(dded), M(odified), D(eleted), T(ype changed)
    old_mode: str = "000000"
    new_mode: str = "100644"

    @property
    def name(self) -> str:
        return posixpath.basename(self.path)

    @property
    def parts(self) -> list[str]:
        return self.path.split("/")


@dataclass(frozen=True)
class Context:
    """What the rules know about the task and the grading machine."""
    test_files: tuple[str, ...] = ()                    # the task's test globs
    test_patch_paths: frozenset[str] = frozenset()      # files the hidden tests add or change
    grader_paths: frozenset[str] = frozenset()          # files the grader command names
    test_dirs: frozenset[str] = frozenset()             # directories holding the task's tests
    test_ancestors: frozenset[str] = frozenset()        # every directory above a test file ('' the root)
    packages: frozenset[str] = frozenset()              # directories with an __init__.py at the baseline
    path_dirs: frozenset[str] = frozenset({""})         # workspace directories on the grader's sys.path
    shadowable: frozenset[str] = field(default_factory=lambda: default_shadowable())


@dataclass(frozen=True)
class Rule:
    name: str
    why: str
    matches: Callable[[Change, Context], bool]


def default_shadowable(installed: Iterable[str] = ()) -> frozenset[str]:
    """Top-level module names no change may plant: the standard library, the runner's own
    modules and whatever else ``installed`` names (the grading machine's importable packages)."""
    return frozenset(sys.stdlib_module_names) | frozenset(sys.builtin_module_names) | RUNNER_MODULES | frozenset(
        installed)


def matches_any(path: str, globs: Iterable[str]) -> bool:
    """Whether ``path`` or one of its parent directories matches a glob."""
    parts = path.split("/")
    candidates = ["/".join(parts[:n]) for n in range(len(parts), 0, -1)]
    for pattern in globs:
        rx = re.compile(glob_regex(pattern.lstrip("/").removeprefix("./").rstrip("/")) + r"\Z")
        if any(rx.match(c) for c in candidates):
            return True
    return False


def top_level_module(change: Change, packages: frozenset[str], path_dirs: frozenset[str] = frozenset({""})
                     ) -> str | None:
    """The top-level module name ``change.path`` may define: a file or package whose directory is
    on the grader's ``sys.path`` (``path_dirs``: the root, ``src/`` on a ``PYTHONPATH``) or is not
    inside a package that existed at the baseline (pytest puts a test file's first non-package
    directory on ``sys.path``). None inside a baseline package off the path (``pkg/json.py`` is
    ``pkg.json`` and shadows nothing). A package the change itself adds counts for nothing: an
    ``__init__.py`` does not take a directory off ``sys.path``."""
    parent = posixpath.dirname(change.path)
    if change.name == "__init__.py":
        if not parent:
            return None
        grand = posixpath.dirname(parent)
        return None if grand in packages and grand not in path_dirs else posixpath.basename(parent)
    if not change.name.endswith(MODULE_SUFFIXES) or (parent in packages and parent not in path_dirs):
        return None
    return change.name.split(".", 1)[0]


def _in_test_dir(change: Change, ctx: Context) -> bool:
    return any(change.path.startswith(d + "/") for d in ctx.test_dirs)


RULES: tuple[Rule, ...] = (
    Rule("test file", "the task's tests are graded as the task wrote them",
         lambda c, x: matches_any(c.path, x.test_files) or c.path in x.test_patch_paths),
    Rule("test support", "a file beside the tests (a helper, an __init__.py) runs inside the test process",
         _in_test_dir),
    Rule("package above the tests", "a new __init__.py above a test file (the root's included) is imported "
         "by pytest before the tests",
         lambda c, x: c.name == "__init__.py" and c.status == "A"
         and posixpath.dirname(c.path) in x.test_ancestors),
    Rule("grader file", "a file the grading command names (a script, a test module) runs the grading",
         lambda c, x: c.path in x.grader_paths),
    Rule("runner config", "test-runner configuration (any of its homes, anywhere) can add plugins and options",
         lambda c, x: c.name.lower() in RUNNER_CONFIGS),
    Rule("packaging", "packaging metadata can register plugins (entry points) or rewrite imports",
         lambda c, x: c.name.lower() in PACKAGING_FILES or c.name.endswith((".egg-link", ".pth"))
         or c.name.startswith("__editable__")
         or any(p.endswith((".egg-info", ".dist-info", ".egg")) for p in c.parts[:-1])),
    Rule("startup hook", "sitecustomize/usercustomize run in every python that starts",
         lambda c, x: c.name.split(".", 1)[0] in {"sitecustomize", "usercustomize"}),
    Rule("environment", "an interpreter's environment (a venv, site-packages) is the machine's, not the code's",
         lambda c, x: c.name == "pyvenv.cfg" or any(p in ENVIRONMENT_DIRS for p in c.parts[:-1])),
    Rule("bytecode or binary module", "compiled modules run without their source (unchecked .pyc, a .so "
         "that outranks the .py beside it)",
         lambda c, x: "__pycache__" in c.parts or c.name.endswith(BINARY_MODULE_SUFFIXES)),
    Rule("shadowing module", "a new top-level module named like the runner, the standard library or an "
         "installed package is imported in its place",
         lambda c, x: c.status == "A" and (top_level_module(c, x.packages, x.path_dirs) or "") in x.shadowable),
    Rule("symlink or submodule", "a link can point the grader at other content; a submodule at another repo",
         lambda c, x: c.new_mode in (SYMLINK_MODE, SUBMODULE_MODE) or c.old_mode == SUBMODULE_MODE),
    Rule("git metadata", "attributes, ignores and module maps change what git applies and restores",
         lambda c, x: c.name in GIT_FILES),
)


def check(changes: Iterable[Change], ctx: Context, rules: Iterable[Rule] = RULES) -> dict[str, str]:
    """``{path: rule name}`` for every change some rule refuses (the first rule that matches)."""
    refused: dict[str, str] = {}
    rules = tuple(rules)
    for change in changes:
        for rule in rules:
            if rule.matches(change, ctx):
                refused[change.path] = rule.name
                break
    return refused


# --- building the context ---------------------------------------------------------------------

def command_paths(command: str, ids: Iterable[str] = ()) -> frozenset[str]:
    """Repository-relative paths a grading command names: each word that looks like a file
    (``bash run_tests.sh``, ``python check.py``, ``tests/test_x.py::test_y``), and the files of
    ``ids`` (FAIL_TO_PASS / PASS_TO_PASS test ids)."""
    try:
        words = shlex.split(command)
    except ValueError:
        words = command.split()
    found: set[str] = set()
    for word in [*words, *ids]:
        word = word.split("::", 1)[0].split("=", 1)[-1]
        if not word or word.startswith("-") or word.startswith("/") or "$" in word:
            continue
        path = posixpath.normpath(word.removeprefix("./"))
        if path.startswith("..") or path == ".":
            continue
        if "." in posixpath.basename(path) or "/" in path or path.lower() in {"makefile", "gnumakefile"}:
            found.add(path)
    return frozenset(found)


def patch_paths(patch: str | None) -> frozenset[str]:
    """Files a unified diff (a task's ``test_patch``) adds or changes."""
    found: set[str] = set()
    for line in (patch or "").splitlines():
        if line.startswith("+++ ") or line.startswith("--- "):
            target = line[4:].split("\t", 1)[0].strip()
            if target != "/dev/null" and target[:2] in ("a/", "b/"):
                found.add(target[2:])
    return frozenset(found)


def test_dirs(tracked: Iterable[str], ctx_test_files: Iterable[str], extra: Iterable[str] = ()) -> frozenset[str]:
    """Directories named like test directories (``tests``, ``test``, ``testing``) that hold a
    test file, at any depth: what is beside the tests there is the tests' own support code."""
    globs = tuple(ctx_test_files)
    dirs: set[str] = set()
    for path in [*tracked, *extra]:
        if not (matches_any(path, globs) or path in extra):
            continue
        parts = path.split("/")[:-1]
        for depth in range(len(parts), 0, -1):
            if parts[depth - 1].lower() in TEST_DIR_NAMES:
                dirs.add("/".join(parts[:depth]))
                break
    return frozenset(dirs)


def ancestors(paths: Iterable[str]) -> frozenset[str]:
    """Every directory above each of ``paths`` ('' for the root)."""
    out: set[str] = set()
    for path in paths:
        parent = posixpath.dirname(path)
        while True:
            out.add(parent)
            if not parent:
                break
            parent = posixpath.dirname(parent)
    return frozenset(out)


def package_dirs(tracked: Iterable[str]) -> frozenset[str]:
    """Directories that hold an ``__init__.py``."""
    return frozenset(posixpath.dirname(p) for p in tracked if posixpath.basename(p) == "__init__.py"
                     and posixpath.dirname(p))


def parse_raw_diff(raw: str) -> list[Change]:
    """Rows of ``git diff-index --raw -z --no-renames``: ``:old new oldsha newsha S\\0path\\0``."""
    fields = raw.split("\0")
    changes: list[Change] = []
    for meta, path in zip(fields[0::2], fields[1::2]):
        if not meta.startswith(":"):
            continue
        old_mode, new_mode, _, _, status = meta[1:].split(" ")
        changes.append(Change(path, status[:1], old_mode, new_mode))
    return changes
