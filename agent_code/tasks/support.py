"""Which modules of the baseline are the tests' own support code: decided from what the tests
load (the import graph of the pristine baseline, scanned by ``imports.py``), not from path
names alone. Pure functions; ``grading.py`` gathers the scans in the grading sandbox.

Definitions (every file is a tracked ``.py`` file of the baseline, or a file of the hidden tests):

* **tests** (the roots): test modules — files the runner collects (pytest's ``test_*.py`` and
  ``*_test.py``, the project's ``python_files``), the files the grading command and the test ids
  name, the hidden tests, every ``conftest.py``.
* **protected**: the other files the task's test globs or test directories cover (``tests/helpers.py``);
  the rules refuse them already, and here they count as test support.
* **imports**: ``import a.b`` loads ``a``, ``a.b``; ``from a.b import c`` loads those and ``a.b.c``
  where it is a module; relative imports from the file's package; names in quotes that resolve to
  a module of the repository (``importlib.import_module("pkg.testing")``, ``pytest_plugins =
  [...]``, ``mock.patch("pkg.core.f")``); a module is resolved from every directory that may be on
  ``sys.path`` (as ``protected.importable_names`` does). The body of ``if __name__ == "__main__"``
  loads nothing.
* **evidence of test support**: the module imports a test framework (pytest, _pytest, unittest,
  unittest.mock, mock, hypothesis, nose, nose2, doctest, or any module with a test-like name such
  as numpy.testing, pandas._testing, django.test), defines an ``assert*`` function or method,
  raises ``AssertionError``, defines a function or class the runner would collect
  (``python_functions`` / ``python_classes``: ``test*`` / ``Test*`` by default), or has a
  test-like name: a word of its path (split at ``_ - .``) is one of ``TEST_WORDS``.
* **test support**: the largest set S of modules reachable from the tests through imports such
  that every module m in S has no *production importer* (an importer that is neither a test, nor
  protected, nor in S), and, when a test imports m directly, m has evidence of test support. So a
  module only test support loads is test support whatever it looks like (the helper's helper),
  and one a test loads needs evidence: a library's core that only its tests import has none and
  stays code under test.
* **never test support**: a top-level module of the project (directly in the repository's root,
  in a ``sys.path`` directory of the grader, or in a directory that holds no test: ``calc.py``,
  ``src/pkg/__init__.py``) unless its own name is test-like — the project's own modules and
  packages, a pytest plugin's module; and whatever a package ``__init__.py`` or any other
  production module imports (a re-export is code under test).

What this gives up: a module of the project that only a test helper loads (no test imports it,
no production module does) is test support by definition — the helper's helper cannot be told
from code only reachable through a helper. Its fix is refused unless the task's reference
``patch`` names it. A top-level helper module with a name that is not test-like
(``helpers.py`` at the root) is taken as the project's own module and left editable.
"""

from __future__ import annotations

import fnmatch
import posixpath
import re
from typing import Any, Iterable, Mapping

from agent_code.tasks.protected import Change, Context, _components, _entries

Scan = Mapping[str, Any]

TEST_WORDS = frozenset({"test", "tests", "testing", "testutil", "testutils", "testlib", "testcase", "testcases",
                        "testsupport", "testhelper", "testhelpers", "fixture", "fixtures", "conftest", "mock", "mocks", "fake", "fakes", "stub",
                        "stubs", "spec", "specs"})
FRAMEWORKS = frozenset({"pytest", "_pytest", "unittest", "mock", "hypothesis", "nose", "nose2", "doctest"})


def test_like(path: str) -> bool:
    """Whether a word of ``path`` (its directories and its name without the suffix) is a test word."""
    stem = path[:-3] if path.endswith(".py") else path
    return any(word in TEST_WORDS for word in re.split(r"[/_.\-]+", stem.lower()))


def _collectible(name: str, patterns: Iterable[str]) -> bool:
    """pytest's test for a function or class name: a prefix, or a glob."""
    return any(name.startswith(p) or (any(c in p for c in "*?[") and fnmatch.fnmatchcase(name, p)) for p in patterns)


def evidence(path: str, scan: Scan, functions: Iterable[str] = ("test",), classes: Iterable[str] = ("Test",)) -> bool:
    """Whether the module at ``path`` (its ``scan``) shows it is test support (see the module docstring)."""
    if test_like(path) or scan.get("asserts"):
        return True
    for module, level, names in scan.get("imports", []):
        full = [module] + [f"{module}.{n}" for n in names] if not level else []
        if any(m.split(".")[0] in FRAMEWORKS or test_like(m.replace(".", "/")) for m in full if m):
            return True
    return collects(scan, functions, classes)


def collects(scan: Scan, functions: Iterable[str] = ("test",), classes: Iterable[str] = ("Test",)) -> bool:
    """Whether a module defines what pytest collects from a test module: a top-level function
    ``python_functions`` matches, a class ``python_classes`` matches, a ``TestCase``."""
    functions, classes = tuple(functions), tuple(classes)
    return any(_collectible(f, functions) for f in scan.get("functions", [])) or any(
        _collectible(c, classes) or any(b.endswith("TestCase") for b in bases) for c, bases in scan.get("classes", []))


def module_index(files: Iterable[str], packages: frozenset[str], path_dirs: frozenset[str]) -> dict[str, set[str]]:
    """``{dotted name: files}``: every name under which python may import each file."""
    ctx = Context(packages=packages, path_dirs=path_dirs)
    index: dict[str, set[str]] = {}
    for path in files:
        comps = _components(Change(path, "M"))
        if comps is None:
            continue
        for i in _entries(Change(path, "M"), ctx, comps):
            index.setdefault(".".join(comps[i:]), set()).add(path)
    return index


def _absolute(name: str, index: Mapping[str, set[str]]) -> set[str]:
    parts = name.split(".")
    return {f for n in range(1, len(parts) + 1) for f in index.get(".".join(parts[:n]), ())}


def _at(base: str, files: frozenset[str]) -> set[str]:
    return {p for p in (f"{base}.py", f"{base}/__init__.py") if p in files}


def imported(path: str, scan: Scan, index: Mapping[str, set[str]], files: frozenset[str]) -> set[str]:
    """The files of the repository the module at ``path`` loads (see the module docstring)."""
    out: set[str] = set()
    for module, level, names in scan.get("imports", []):
        if not level:
            out |= _absolute(module, index)
            for name in names:
                out |= index.get(f"{module}.{name}", set())
            continue
        base = posixpath.dirname(path)
        for _ in range(level - 1):
            base = posixpath.dirname(base)
        out |= _at(base, files)
        for part in [p for p in module.split(".") if p]:
            base = posixpath.join(base, part)
            out |= _at(base, files)
        for name in names:
            out |= _at(posixpath.join(base, name), files)
    for text in scan.get("strings", []):
        out |= _absolute(text, index)
    out.discard(path)
    return out


def project_module(path: str, path_dirs: frozenset[str]) -> bool:
    """Whether ``path`` is a top-level module of the project (in the root or a ``sys.path``
    directory of the grader: ``calc.py``, ``src/pkg/__init__.py``) whose own name is not test-like."""
    comps = _components(Change(path, "M")) or [""]
    return "/".join(comps[:-1]) in path_dirs | {""} and not test_like(comps[-1])


def import_graph(scans: Mapping[str, Scan], packages: frozenset[str] = frozenset(),
                 path_dirs: frozenset[str] = frozenset({""})) -> dict[str, set[str]]:
    """``{path: the files it loads}`` for every file of ``scans``."""
    files = frozenset(scans)
    index = module_index(files, packages, path_dirs)
    return {path: imported(path, scan, index, files) for path, scan in scans.items()}


def patch_scans(patch: str | None) -> dict[str, Scan]:
    """The scans of the files a unified diff (the hidden tests) adds or changes, from the lines it
    adds (a changed file's fragment is read line by line when it does not parse)."""
    from agent_code.tasks.imports import scan

    added: dict[str, list[str]] = {}
    path = None
    for line in (patch or "").splitlines():
        if line.startswith("+++ "):
            target = line[4:].split("\t", 1)[0].strip()
            path = target[2:] if target[:2] == "b/" else None
        elif path and line.startswith("+"):
            added.setdefault(path, []).append(line[1:])
    return {p: scan("\n".join(lines)) for p, lines in added.items()}


def merged(scans: Mapping[str, Scan], more: Mapping[str, Scan]) -> dict[str, Scan]:
    """``scans`` with ``more`` (the hidden tests' scans) added: a file in both loads what either says."""
    out = dict(scans)
    for path, scan in more.items():
        old = out.get(path, {})
        out[path] = {**old, **scan, "imports": [*old.get("imports", []), *scan.get("imports", [])],
                     "strings": [*old.get("strings", []), *scan.get("strings", [])]}
    return out


def test_support(scans: Mapping[str, Scan], loads: Mapping[str, set[str]], tests: Iterable[str],
                 protected: Iterable[str], *, path_dirs: frozenset[str] = frozenset({""}),
                 functions: Iterable[str] = ("test",), classes: Iterable[str] = ("Test",)) -> frozenset[str]:
    """The module paths (``pkg/testing`` for ``pkg/testing.py`` or ``pkg/testing/__init__.py``)
    of the files of ``scans`` that are test support, given the import graph ``loads``
    (:func:`import_graph`), the ``tests`` and the ``protected`` files (see the module docstring)."""
    tests, protected = frozenset(tests), frozenset(protected) - frozenset(tests)
    importers: dict[str, set[str]] = {}
    for path, targets in loads.items():
        for target in targets:
            importers.setdefault(target, set()).add(path)
    reached: set[str] = set()
    todo = [t for t in tests | protected if t in loads]
    while todo:
        for target in loads.get(todo.pop(), ()):
            if target not in reached:
                reached.add(target)
                todo.append(target)
    support = {m for m in reached - tests - protected if m in scans and not project_module(m, path_dirs)}
    changed = True
    while changed:
        changed = False
        for module in sorted(support):
            by = importers.get(module, set())
            if by - tests - protected - support or (by & tests and not evidence(module, scans[module], functions,
                                                                                  classes)):
                support.discard(module)
                changed = True
    return frozenset("/".join(_components(Change(m, "M")) or [m]) for m in support)
