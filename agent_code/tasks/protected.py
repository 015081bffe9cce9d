"""What the grader refuses to take from an agent's change: the rules of the reward's threat model.

The grader (``grading.py``) applies the agent's whole diff to a scratch index over a pristine
checkout and lists every path it touches, ignored files included (nothing is staged with
``git add``, so no ``.gitignore`` can hide a file). Each touched path is checked against
:data:`RULES`; a path any rule matches is put back to its baseline state (an added file is
dropped) and reported in ``rejected_paths``. Everything else is applied and graded.

Each rule is one class of reward hack: a way to make the tests pass, or make the grader believe
they passed, without fixing the code. A new class is one more line in :data:`RULES`; what a rule
needs to know of the task, the baseline and the change is in :class:`Context`, which
``evidence.py`` (and ``support.py``, the tests' import graph) helps ``grading.py`` fill. The
rules inferred from evidence rather than from a path's name (a test helper, a configured test
file) never refuse a file the task's reference ``patch`` touches. Rejecting a
path never zeroes a reward by itself: an honest fix that also touched, say, ``pyproject.toml``
is graded on the rest of its change.

What this does not defend: code under test that subverts its own test process (``os._exit(0)``
at import, patching pytest from the module under test, special-casing the tested inputs). Those
need the hidden tests of ``test_patch`` and review of the diff; see docs/security.md (the grader's threat model).
"""

from __future__ import annotations

import posixpath
import re
import sys
from dataclasses import dataclass, field, replace
from functools import lru_cache
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
                            "conftest.py", ".env", "package.json", ".npmrc", "justfile", "taskfile.yml",
                            "taskfile.yaml", "hatch.toml", "pixi.toml", "pdm.toml"})
PACKAGING_FILES = frozenset({"setup.py", "entry_points.txt", "top_level.txt", "record", "metadata",
                             "pkg-info", "direct_url.json"})
GIT_FILES = frozenset({".gitattributes", ".gitmodules", ".gitignore", ".mailmap"})
ENVIRONMENT_DIRS = frozenset({"site-packages", "dist-packages", ".venv", "venv", ".tox", ".nox",
                              "__pypackages__", ".eggs"})
# Files a test runner collects (imports) as test modules wherever they are: pytest's defaults and
# unittest discovery's ``test*.py``. A new one is a test module the task never had.
# (pytest collects ``test*.txt`` as doctests by default: any new ``test*`` file is refused)
RUNNER_TEST_FILES: tuple[str, ...] = ("**/test*", "**/*_test.py")
TEST_DIR_NAMES = frozenset({"tests", "test", "testing", "_testing", "spec", "specs"})
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
    collected: tuple[str, ...] = RUNNER_TEST_FILES      # what the runner imports as tests (new files)
    test_patch_paths: frozenset[str] = frozenset()      # files the hidden tests add or change
    grader_paths: frozenset[str] = frozenset()          # files the grader command names
    opaque_grader: bool = False                         # and it may run others (``$HERE/x.sh``, ``cd``)
    test_data: frozenset[str] = frozenset()             # files the tests name (``"data/cases.json"``)
    test_dirs: frozenset[str] = frozenset()             # directories holding the task's tests
    test_ancestors: frozenset[str] = frozenset()        # every directory above a test file ('' the root)
    packages: frozenset[str] = frozenset()              # directories with an __init__.py at the baseline
    path_dirs: frozenset[str] = frozenset({""})         # workspace directories on the grader's sys.path
    shadowable: frozenset[str] = field(default_factory=lambda: default_shadowable())
    tracked: frozenset[str] = frozenset()               # every file of the baseline
    baseline_imports: frozenset[str] = frozenset()      # names the baseline imports (it may lack them)
    asked_for: frozenset[str] = frozenset()             # added modules the baseline's code imports by name
    enumerating: frozenset[str] = frozenset()           # packages whose code lists and imports their modules
    deleted: frozenset[str] = frozenset()               # files the change deletes (check() fills it)
    untracked: frozenset[str] = frozenset()             # what the task's setup wrote (files; ``deps/`` dirs)
    support: frozenset[str] = frozenset()               # modules only the tests load (``pkg/testing``: support.py)
    runner_tests: frozenset[str] = frozenset()          # files the runner's own collection settings make tests
    reference: frozenset[str] = frozenset()             # files the task's reference patch touches (code to fix)

    @property
    def live_packages(self) -> frozenset[str]:
        """The baseline's packages that keep their ``__init__.py`` after the change."""
        gone = {posixpath.dirname(p) for p in self.deleted if posixpath.basename(p) == "__init__.py"}
        return self.packages - gone

    def existed(self, path: str) -> bool:
        """Whether the baseline had ``path`` as a directory, or a module ``path.py`` (``.so``, ...)."""
        return path in _dirs_of(self.tracked) or any(path + s in self.tracked for s in MODULE_SUFFIXES)


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
    """Whether ``path`` or one of its parent directories matches a glob (a name's newline too:
    ``**`` and ``*`` match every character but ``/``)."""
    parts = path.split("/")
    candidates = ["/".join(parts[:n]) for n in range(len(parts), 0, -1)]
    for pattern in globs:
        rx = re.compile(glob_regex(pattern.lstrip("/").removeprefix("./").rstrip("/")) + r"\Z", re.DOTALL)
        if any(rx.match(c) for c in candidates):
            return True
    return False


@lru_cache(maxsize=8)
def _dirs_of(tracked: frozenset[str]) -> frozenset[str]:
    return ancestors(tracked)


def _components(change: Change) -> list[str] | None:
    """The module path of ``change.path`` (``a/b/c.py`` and ``a/b/c/__init__.py``: a, b, c), or
    None for a file python does not import."""
    parts = change.path.split("/")
    if change.name == "__init__.py":
        return parts[:-1] or None
    if change.name.endswith(MODULE_SUFFIXES):
        return [*parts[:-1], change.name.split(".", 1)[0]]
    return None


def _entries(change: Change, ctx: Context, comps: list[str]) -> list[int]:
    """The depths ``i`` at which the directory of ``comps[:i]`` may be a ``sys.path`` entry."""
    packages = ctx.live_packages
    return [i for i in range(len(comps)) if "/".join(comps[:i]) not in packages or "/".join(comps[:i]) in ctx.path_dirs]


def importable_names(change: Change, ctx: Context) -> list[tuple[str, bool]]:
    """The top-level names under which python may import ``change.path`` or the package it
    extends, each with whether the baseline lacked it there (a new name): ``[("json", True)]``.

    Any directory may be an entry of the grader's ``sys.path`` — ``path_dirs`` (the root, a
    ``PYTHONPATH`` entry) and every directory that is not a package after the change (pytest
    puts a test file's first non-package directory there; deleting an ``__init__.py`` makes one)
    — and from each such entry ``D`` the file is reached through the first component below it.
    That component is skipped when it is a package of the baseline that keeps its
    ``__init__.py`` (``pkg/json.py`` is ``pkg.json``); a directory without one is a namespace
    package whose portions merge with an installed one (``opentelemetry/context/__init__.py``
    extends the installed ``opentelemetry``). A package the change itself adds counts for
    nothing: an ``__init__.py`` does not take a directory off ``sys.path``."""
    comps = _components(change)
    if comps is None:
        return []
    packages = ctx.live_packages
    names: list[tuple[str, bool]] = []
    for i in _entries(change, ctx, comps):
        target = "/".join(comps[:i + 1])
        if i < len(comps) - 1 and target in packages:
            continue                                     # a submodule of the project's own package
        names.append((comps[i], not ctx.existed(target)))
    return names


def dotted_names(change: Change, ctx: Context) -> list[str]:
    """The dotted names (two components or more) under which python may import the module
    ``change.path``: ``pkg/_speedups.py`` is ``pkg._speedups`` (and ``_speedups`` from a
    ``sys.path`` entry at ``pkg/``, which :func:`importable_names` covers)."""
    comps = _components(change)
    if comps is None:
        return []
    return [".".join(comps[i:]) for i in _entries(change, ctx, comps) if len(comps) - i >= 2]


def _autoloaded(change: Change, ctx: Context) -> bool:
    if change.status != "A" or _components(change) is None:
        return False
    if change.path in ctx.asked_for:
        return True
    return any(change.path.startswith(d + "/") for d in ctx.enumerating)


def _shadows(change: Change, ctx: Context) -> bool:
    return change.status == "A" and any(
        name in ctx.shadowable or (new and name in ctx.baseline_imports) for name, new in importable_names(change, ctx))


_ODD = re.compile(r"[\x00-\x1f\x7f\ufffd\ud800-\udfff]")


def _in_test_dir(change: Change, ctx: Context) -> bool:
    return any(change.path.startswith(d + "/") for d in ctx.test_dirs)


def _test_helper(change: Change, ctx: Context) -> bool:
    """The module (or a file that would be imported in its place: ``pkg/testing/__init__.py``
    beside ``pkg/testing.py``) is test support by the tests' import graph (``support.py``)."""
    comps = _components(change)
    return comps is not None and "/".join(comps) in ctx.support and change.path not in ctx.reference


RULES: tuple[Rule, ...] = (
    Rule("odd path", "a control character (a newline, an escape) or bytes that are not UTF-8 in a name slip past "
         "path patterns and hide in listings", lambda c, x: bool(_ODD.search(c.path))),
    Rule("test file", "the task's tests are graded as the task wrote them",
         lambda c, x: matches_any(c.path, x.test_files) or c.path in x.test_patch_paths),
    Rule("test data", "a file the tests name (expected values, fixtures, golden files) decides what they check",
         lambda c, x: c.path in x.test_data),
    Rule("test support", "a file beside the tests (a helper, an __init__.py) runs inside the test process",
         _in_test_dir),
    Rule("test helper", "a module only the tests (or other test helpers) load that imports a test framework, "
         "defines assert* helpers, raises AssertionError, defines tests or has a test-like name — or that only test "
         "helpers load — decides what the tests check, wherever it lives (pkg/utils/_testing.py); the files of the "
         "task's reference patch excepted", _test_helper),
    Rule("configured test file", "a file the runner's own collection settings name (python_files under testpaths, "
         "in any pytest config file) is a test module, changed as much as new; the files of the task's reference "
         "patch excepted", lambda c, x: c.path in x.runner_tests and c.path not in x.reference),
    Rule("new test module", "a new file the runner collects as tests (test*, the project's python_files and "
         "doctest options, a discover pattern) runs in the test process",
         lambda c, x: c.status == "A" and matches_any(c.path, x.collected)),
    Rule("package above the tests", "an __init__.py added above a test file (the root's included) is imported "
         "by pytest before the tests; one deleted there puts its directory on sys.path",
         lambda c, x: c.name == "__init__.py" and c.status != "M"
         and posixpath.dirname(c.path) in x.test_ancestors),
    Rule("grader file", "a file the grading command names (a script, a test module) runs the grading; when it "
         "computes paths or changes directory, any script, and any file but a python module, may be run or sourced",
         lambda c, x: c.path in x.grader_paths or (x.opaque_grader and (script_like(c) or _components(c) is None))),
    Rule("runner config", "test-runner configuration (any of its homes, anywhere) can add plugins and options",
         lambda c, x: c.name.lower() in RUNNER_CONFIGS),
    Rule("packaging", "packaging metadata can register plugins (entry points) or rewrite imports",
         lambda c, x: c.name.lower() in PACKAGING_FILES or c.name.endswith((".egg-link", ".pth"))
         or c.name.startswith("__editable__")
         or any(p.endswith((".egg-info", ".dist-info", ".egg")) for p in c.parts[:-1])),
    Rule("startup hook", "sitecustomize/usercustomize run in every python that starts",
         lambda c, x: c.name.split(".", 1)[0] in {"sitecustomize", "usercustomize"}),
    Rule("environment", "an interpreter's environment (a venv, site-packages, what the task's setup installed into "
         "the workspace) is the machine's, not the code's",
         lambda c, x: c.name == "pyvenv.cfg" or any(p in ENVIRONMENT_DIRS for p in c.parts[:-1])
         or under(c.path, x.untracked)),
    Rule("bytecode or binary module", "compiled modules run without their source (unchecked .pyc, a .so "
         "that outranks the .py beside it)",
         lambda c, x: "__pycache__" in c.parts or c.name.endswith(BINARY_MODULE_SUFFIXES)),
    Rule("shadowing module", "a new module reachable as a top-level name of the runner, the standard library, an "
         "installed package, or a module the project imports but lacks is imported in its place", _shadows),
    Rule("module the project loads", "a new module in a package that the project's code imports by name but lacks "
         "(try: from ._speedups import …), or in a package whose code imports every module of its directory, "
         "runs without the change naming it", _autoloaded),
    Rule("symlink or submodule", "a link can point the grader at other content; a submodule at another repo",
         lambda c, x: c.new_mode in (SYMLINK_MODE, SUBMODULE_MODE) or c.old_mode == SUBMODULE_MODE),
    Rule("git metadata", "attributes, ignores and module maps change what git applies and restores",
         lambda c, x: c.name in GIT_FILES),
)


def check(changes: Iterable[Change], ctx: Context, rules: Iterable[Rule] = RULES) -> dict[str, str]:
    """``{path: rule name}`` for every change some rule refuses (the first rule that matches)."""
    refused: dict[str, str] = {}
    rules = tuple(rules)
    changes = list(changes)
    ctx = replace(ctx, deleted=ctx.deleted | {c.path for c in changes if c.status == "D"})
    for change in changes:
        for rule in rules:
            if rule.matches(change, ctx):
                refused[change.path] = rule.name
                break
    return refused


SCRIPT_SUFFIXES = ("", ".sh", ".bash", ".zsh", ".ksh", ".fish")


def script_like(change: Change) -> bool:
    """A file a shell may run or source: a shell suffix, no suffix at all, or the executable bit."""
    suffix = posixpath.splitext(change.name)[1]
    return suffix in SCRIPT_SUFFIXES or "." not in change.name.lstrip(".") or "100755" in (change.old_mode,
                                                                                           change.new_mode)


def under(path: str, entries: frozenset[str]) -> bool:
    """Whether ``path`` is one of ``entries`` or inside a directory among them (``deps/``, with
    its trailing ``/``): a look at each of its directories, not at each entry."""
    if path in entries:
        return True
    parent = posixpath.dirname(path)
    while parent:
        if parent + "/" in entries:
            return True
        parent = posixpath.dirname(parent)
    return False


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
