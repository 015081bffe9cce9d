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
    untracked: frozenset[str] = frozenset()             # what the task's setup left untracked (``deps/``)

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


RULES: tuple[Rule, ...] = (
    Rule("odd path", "a control character (a newline, an escape) or bytes that are not UTF-8 in a name slip past "
         "path patterns and hide in listings", lambda c, x: bool(_ODD.search(c.path))),
    Rule("test file", "the task's tests are graded as the task wrote them",
         lambda c, x: matches_any(c.path, x.test_files) or c.path in x.test_patch_paths),
    Rule("test data", "a file the tests name (expected values, fixtures, golden files) decides what they check",
         lambda c, x: c.path in x.test_data),
    Rule("test support", "a file beside the tests (a helper, an __init__.py) runs inside the test process",
         _in_test_dir),
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
         or c.path in x.untracked or any(c.path.startswith(d.rstrip("/") + "/") for d in x.untracked)),
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


# --- building the context ---------------------------------------------------------------------

def _words(command: str) -> list[str]:
    """The shell words of ``command``, and those of every word that is itself a command line
    (``bash -c 'sh ci/run.sh -x'``), depth first."""
    try:
        words = shlex.split(command, comments=True)
    except ValueError:
        words = [w for w in command.split() if not w.startswith("#")]
    out: list[str] = []
    for word in words:
        out.append(word)
        if any(c.isspace() for c in word) and word != command:
            out.extend(_words(word))
    return out


def command_paths(command: str, ids: Iterable[str] = ()) -> frozenset[str]:
    """Repository-relative paths a grading command names: each word that looks like a file
    (``bash run_tests.sh``, ``python check.py``, ``tests/test_x.py::test_y``, those inside a
    ``bash -c '…'`` script), and the files of ``ids`` (FAIL_TO_PASS / PASS_TO_PASS test ids)."""
    found: set[str] = set()
    for word in [*_words(command), *ids]:
        word = word.split("::", 1)[0].split("=", 1)[-1]
        if not word or word.startswith("-") or word.startswith("/") or "$" in word or any(c.isspace() for c in word):
            continue
        path = posixpath.normpath(word.removeprefix("./"))
        if path.startswith("..") or path == ".":
            continue
        if "." in posixpath.basename(path) or "/" in path or path.lower() in {"makefile", "gnumakefile"}:
            found.add(path)
    return frozenset(found)


SCRIPT_SUFFIXES = ("", ".sh", ".bash", ".zsh", ".ksh", ".fish")


def shell_scripts(paths: Iterable[str]) -> list[str]:
    """The paths among ``paths`` that may be shell scripts (``.sh``, no suffix, …)."""
    return sorted(p for p in paths if posixpath.splitext(p)[1] in SCRIPT_SUFFIXES)


def grader_paths(command: str, ids: Iterable[str], scripts: dict[str, str | None]) -> frozenset[str]:
    """:func:`command_paths`, and the paths that each shell script among them names in turn
    (``run_tests.sh`` calling ``ci/helper.sh``), as far as ``scripts`` (``{path: the baseline's
    text, or None}``) has read them."""
    found = set(command_paths(command, ids))
    todo = shell_scripts(found)
    while todo:
        named: set[str] = set()
        for path in todo:
            named |= command_paths(scripts.get(path) or "")
        todo = shell_scripts(named - found)
        found |= named
    return frozenset(found)


PYTEST_CONFIGS = {"pytest.toml": "pytest", ".pytest.toml": "pytest", "pytest.ini": "pytest", ".pytest.ini": "pytest",
                  "pyproject.toml": "tool.pytest", "tox.ini": "pytest", "setup.cfg": "tool:pytest"}


def _pytest_option(path: str, text: str, option: str) -> list[str]:
    """The words of ``option`` (``python_files``, ``addopts``) in one pytest config file (by its
    name; another name is read as a ``[pytest]`` ini file, or as TOML for ``.toml``)."""
    import configparser
    import tomllib

    name = posixpath.basename(path)
    value: object = None
    try:
        if name.endswith(".toml"):
            table = tomllib.loads(text)
            if name == "pyproject.toml":
                table = table.get("tool", {}).get("pytest", {})
                table = table.get("ini_options", table)
            else:
                table = table.get("pytest", table)
            value = table.get(option)
        else:
            parser = configparser.ConfigParser(interpolation=None)
            parser.read_string(text)
            section = PYTEST_CONFIGS.get(name) or next((s for s in ("pytest", "tool:pytest") if parser.has_section(s)),
                                                       "pytest")
            value = parser.get(section, option, fallback=None)
    except (ValueError, configparser.Error, AttributeError):
        return []
    if isinstance(value, str):
        return _words(value) if option == "addopts" else value.split()
    if isinstance(value, list):
        return [w for w in value if isinstance(w, str)]
    return []


def _collecting_options(words: list[str]) -> list[str]:
    """What pytest options among ``words`` make it collect as tests: ``--doctest-glob``'s
    patterns, every ``.py`` file for ``--doctest-modules``, ``-o python_files=…`` (and the same
    inside ``-o addopts=…``)."""
    found: list[str] = []
    for i, word in enumerate(words):
        following = words[i + 1] if i + 1 < len(words) else ""
        if word == "--doctest-modules":
            found.append("*.py")
        elif word == "--doctest-glob":
            found.append(following)
        elif word.startswith("--doctest-glob="):
            found.append(word.split("=", 1)[1])
        elif word in ("-o", "--override-ini") or word.startswith(("--override-ini=", "-o")):
            value = following if word in ("-o", "--override-ini") else word.split("=", 1)[1] if word.startswith(
                "--override-ini=") else word[2:]
            key, _, setting = value.partition("=")
            if key.strip() == "python_files":
                found += setting.split()
            elif key.strip() == "addopts":
                found += _collecting_options(_words(setting))
    return found


def _anywhere(patterns: Iterable[str]) -> tuple[str, ...]:
    return tuple(p if p.startswith("**/") else "**/" + p.lstrip("/") for p in patterns if p)


def config_files(tracked: Iterable[str], command: str) -> list[str]:
    """The pytest config files pytest may read: every file named like one, at any depth (the
    rootdir is where the command's arguments lead), and those the command names with
    ``-c``/``--config-file``."""
    words = _words(command)
    named = [words[i + 1] for i, w in enumerate(words[:-1]) if w in ("-c", "--config-file")]
    named += [w.split("=", 1)[1] for w in words if w.startswith("--config-file=")]
    return sorted({p for p in tracked if posixpath.basename(p) in PYTEST_CONFIGS}
                  | {posixpath.normpath(p.removeprefix("./")) for p in named if p and not p.startswith("/")})


def configured_test_globs(configs: dict[str, str]) -> tuple[str, ...]:
    """The files the project's pytest configuration (``{path: text}`` of its config files) makes
    pytest collect (import) as tests beside its defaults: ``python_files``, and
    ``--doctest-glob``/``--doctest-modules`` (every module) in ``addopts``; as globs at any depth."""
    found: list[str] = []
    for path, text in sorted(configs.items()):
        found += _pytest_option(path, text, "python_files")
        found += _collecting_options(_pytest_option(path, text, "addopts"))
    return _anywhere(found)


def command_test_globs(command: str) -> tuple[str, ...]:
    """The same for a grading command: ``unittest discover -p PATTERN`` (``--pattern``) and
    pytest's options (doctests, ``-o python_files=…``), as globs at any depth."""
    words = _words(command)
    found = _collecting_options(words)
    if any("unittest" in w for w in words):
        for i, word in enumerate(words):
            if word in ("-p", "--pattern") and i + 1 < len(words):
                found.append(words[i + 1])
            elif word.startswith("--pattern="):
                found.append(word.split("=", 1)[1])
    return _anywhere(found)


# Words after which a command runs what no word of it names: build tools and task runners (their
# recipes), finders, and what loops over a directory.
RUNNING_WORDS = frozenset({"cd", "pushd", "popd", "find", "xargs", "-exec", "-execdir", "run-parts", "make", "gmake",
                           "tox", "nox", "npm", "npx", "yarn", "pnpm", "just", "task", "hatch", "invoke", "inv", "poe",
                           "pdm", "pixi", "rye", "uv", "poetry", "for", "eval", "parallel", "ls"})


def opaque(command: str) -> bool:
    """Whether a grading command (or a script it runs) may run files its words do not name: a
    word with an expansion (``$HERE/ci/local.sh``, ``$(…)``, backticks) or a glob (``ci/*.sh``),
    an absolute path, a change of directory, or a tool that runs what its own files or a search
    say (``make test``, ``tox``, ``find … -exec``, ``xargs``)."""
    return any("$" in w or "`" in w or w.startswith("/") or w in RUNNING_WORDS or any(c in w for c in "*?[")
               for w in _words(command))


def script_like(change: Change) -> bool:
    """A file a shell may run or source: a shell suffix, no suffix at all, or the executable bit."""
    suffix = posixpath.splitext(change.name)[1]
    return suffix in SCRIPT_SUFFIXES or "." not in change.name.lstrip(".") or "100755" in (change.old_mode,
                                                                                           change.new_mode)


CONFIG_SUFFIXES = (".cfg", ".ini", ".toml", ".json", ".yaml", ".yml", ".conf", ".env", ".properties")


def imported_names(lines: Iterable[str | tuple[str, str]], names: Iterable[str]) -> frozenset[str]:
    """Which of ``names`` the baseline's ``lines`` (text, or ``(path, text)``) ask python for: as
    a top-level name on a line that imports (``import simplejson``, ``from yaml import x``,
    ``import_module("ujson")``), quoted anywhere (``INSTALLED_APPS = ["myapp"]``,
    ``"plugin:main"``), or as a bare word in a config file (``enabled = calc_extra`` in a
    ``.cfg``), which is how names reach an import by string."""
    pairs = [(None, line) if isinstance(line, str) else line for line in lines]
    importing = "\n".join(line for _, line in pairs if "import" in line)
    text = "\n".join(line for _, line in pairs)
    configs = "\n".join(line for path, line in pairs if path and path.lower().endswith(CONFIG_SUFFIXES)
                        and not line.lstrip().startswith(("#", ";")))
    return frozenset(n for n in names
                     if re.search(rf"(?<![\w.]){re.escape(n)}(?!\w)", importing)
                     or re.search(rf"[\"']{re.escape(n)}[\"'.:]", text)
                     or re.search(rf"(?<![\w.-]){re.escape(n)}(?![\w-])", configs))


def new_names(changes: Iterable[Change], ctx: Context) -> frozenset[str]:
    """The top-level names the change's added modules would bring that the baseline lacked."""
    changes = list(changes)
    deleted = ctx.deleted | {c.path for c in changes if c.status == "D"}
    ctx = replace(ctx, deleted=deleted)
    return frozenset(name for c in changes if c.status == "A" for name, new in importable_names(c, ctx) if new)


def submodule_mentions(changes: Iterable[Change], ctx: Context) -> frozenset[str]:
    """The last names of the change's added modules that :func:`dotted_names` can name (what to
    look for in the baseline before :func:`asked_for`)."""
    return frozenset(name.rsplit(".", 1)[1] for c in changes if c.status == "A" for name in dotted_names(c, ctx))


def asked_for(changes: Iterable[Change], ctx: Context, mentions: Iterable[tuple[str, str]]) -> frozenset[str]:
    """Paths of the change's added modules that the baseline's own code (its tests aside: a
    module a test asks for is one the task wants) imports: by a dotted name on an import line or
    in quotes (``import pkg._speedups``, ``from pkg import _speedups``, ``"pkg._speedups"``), or
    relatively from beside it (``from ._speedups import x``, ``from . import _speedups``).
    ``mentions`` are the baseline's ``(path, line)`` lines that name a
    :func:`submodule_mentions` name."""
    lines = [(p, line) for p, line in mentions
             if not (matches_any(p, ctx.test_files) or p in ctx.test_patch_paths or line.lstrip().startswith("#"))]
    found: set[str] = set()
    for change in changes:
        names = dotted_names(change, ctx) if change.status == "A" else []
        if not names:
            continue
        comps = _components(change) or []
        here, last = "/".join(comps[:-1]), comps[-1]
        relative = re.compile(rf"from\s+\.\s*import\s+[^#\n]*(?<![\w.]){re.escape(last)}(?!\w)"
                              rf"|from\s+\.{re.escape(last)}(?!\w)")
        dotted = [re.compile(rf"(?<![\w.]){re.escape(n)}(?!\w)|from\s+{re.escape(n.rsplit('.', 1)[0])}\s+import\s+"
                             rf"[^#\n]*(?<![\w.]){re.escape(last)}(?!\w)|[\"']{re.escape(n)}[\"'.:]") for n in names]
        for path, line in lines:
            if (posixpath.dirname(path) == here and relative.search(line)) or (
                    any(rx.search(line) for rx in dotted) and ("import" in line or "'" in line or '"' in line)):
                found.add(change.path)
                break
    return frozenset(found)


def data_changes(changes: Iterable[Change]) -> list[Change]:
    """The changes to files that are not python modules (data a test may read)."""
    return [c for c in changes if _components(c) is None]


def data_names(changes: Iterable[Change]) -> frozenset[str]:
    """What a test would quote to read a changed data file (its name and its directories'
    names), or import to read a module of expected values (its name)."""
    changes = list(changes)
    names = {part for c in data_changes(changes) for part in c.parts if part}
    return frozenset(names | {comps[-1] for c in changes if (comps := _components(c)) and _DATA_MODULE.search(comps[-1])})


def test_lines(mentions: Iterable[tuple[str, str]], ctx: Context, patch: str | None = None) -> list[str]:
    """The lines of ``mentions`` (``(path, line)`` of the baseline) that are in test files, and
    the lines the hidden tests (``patch``) add."""
    lines = [line for path, line in mentions if matches_any(path, ctx.test_files) or path in ctx.test_patch_paths
             or any(path.startswith(d + "/") for d in ctx.test_dirs)]
    return lines + [line[1:] for line in (patch or "").splitlines() if line.startswith("+") and not line.startswith("+++")]


# Names that say "expected values": a data file so named is the tests' whatever quotes it, and so
# is a module so named that a test imports (the stricter list: no project module is "golden").
_DATA_NAME = re.compile(r"(?:^|[^a-z])(?:expected|cases|golden|fixtures?|testdata|samples|snapshots?)(?:[^a-z]|$)",
                        re.IGNORECASE)
_DATA_MODULE = re.compile(r"(?:^|[^a-z])(?:expected|golden|fixtures|testdata|snapshots?)(?:[^a-z]|$)", re.IGNORECASE)


def named_by_tests(changes: Iterable[Change], lines: Iterable[str]) -> frozenset[str]:
    """Paths of the changed data files whose name a test quotes (``"cases.json"``,
    ``"data/cases.json"``, ``HERE / "golden" / "out.txt"``), or the name of a directory they are
    in, quoted whole (``(ROOT / "golden").glob("*.txt")``)."""
    text = "\n".join(line for line in lines if "'" in line or '"' in line)

    def quoted(c: Change) -> bool:
        if re.search(rf"(?<![\w.-]){re.escape(c.name)}(?![\w-])", text):
            return True
        return any(re.search(rf"[\"'/]{re.escape(d)}[\"'/]", text) for d in c.parts[:-1] if d)

    changes = list(changes)
    data = {c.path for c in data_changes(changes) if quoted(c) or _DATA_NAME.search(c.name)}
    imports = "\n".join(lines)   # a module of expected values that a test imports
    data |= {c.path for c in changes if (comps := _components(c)) and _DATA_MODULE.search(comps[-1])
             and re.search(rf"(?<!\w){re.escape(comps[-1])}(?!\w)", imports)}
    return frozenset(data)


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
    """Directories named like test directories (``tests``, ``testing``, ``spec``, ...) that hold
    a test file at any depth, each of them (``pkg/testing/`` above ``pkg/testing/tests/``): what
    is beside the tests there is the tests' own support code."""
    globs = tuple(ctx_test_files)
    dirs: set[str] = set()
    for path in [*tracked, *extra]:
        if not (matches_any(path, globs) or path in extra):
            continue
        parts = path.split("/")[:-1]
        dirs.update("/".join(parts[:depth]) for depth in range(len(parts), 0, -1)
                    if parts[depth - 1].lower() in TEST_DIR_NAMES)
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
