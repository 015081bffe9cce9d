"""What the grader learns for the rules of ``protected.py``: from the task (its grading command
and test files), the baseline (its config, scripts, imports, the tests' data) and the change
(what it adds and deletes). Pure functions of text; ``grading.py`` reads the text from the
grading sandbox and builds the :class:`~agent_code.tasks.protected.Context` with them."""

from __future__ import annotations

import fnmatch
import posixpath
import re
import shlex
from dataclasses import dataclass, replace
from typing import Any, Iterable, Mapping

from agent_code.tasks.protected import (SCRIPT_SUFFIXES, TEST_DIR_NAMES, Change, Context, _components, ancestors,
                                        dotted_names, importable_names, matches_any)
from agent_code.tasks.support import collects


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
    words = _words(command)
    for i, word in enumerate(words[1:], 1):          # python -m ci.check: ci/check.py, ci/check/__main__.py …
        if words[i - 1] == "-m" and word not in RUNNERS and re.fullmatch(r"[A-Za-z_][\w.]*", word):
            base = word.replace(".", "/")
            found.update((base + ".py", base + "/__init__.py", base + "/__main__.py"))
    named = [w for i, w in enumerate(words) if not (i and words[i - 1] == "-m")]   # (a module name, above)
    for word in [*named, *ids]:
        word = word.split("::", 1)[0].split("=", 1)[-1]
        if not word or word.startswith("-") or word.startswith("/") or "$" in word or any(c.isspace() for c in word):
            continue
        path = posixpath.normpath(word.removeprefix("./"))
        if path.startswith("..") or path == ".":
            continue
        if "." in posixpath.basename(path) or "/" in path or path.lower() in {"makefile", "gnumakefile"}:
            found.add(path)
    return frozenset(found)


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
    name; another name is read as a ``[pytest]`` ini file, or as TOML for ``.toml``); in a
    ``pyproject.toml``, from ``[tool.pytest.ini_options]`` and ``[tool.pytest]`` both."""
    import configparser
    import tomllib

    name = posixpath.basename(path)
    values: list[object] = []
    try:
        if name.endswith(".toml"):
            table = tomllib.loads(text)
            if name == "pyproject.toml":
                table = table.get("tool", {}).get("pytest", {})
                values = [table.get("ini_options", {}).get(option), table.get(option)]
            else:
                values = [table.get("pytest", table).get(option)]
        else:
            parser = configparser.ConfigParser(interpolation=None)
            parser.read_string(text)
            section = PYTEST_CONFIGS.get(name) or next((s for s in ("pytest", "tool:pytest") if parser.has_section(s)),
                                                       "pytest")
            values = [parser.get(section, option, fallback=None)]
    except (ValueError, configparser.Error, AttributeError):
        return []
    out: list[str] = []
    for value in values:
        if isinstance(value, str):
            out += _words(value) if option == "addopts" else value.split()
        elif isinstance(value, list):
            out += [w for w in value if isinstance(w, str)]
    return out


def _option_values(words: list[str], *names: str) -> list[str]:
    """The values given to the options ``names`` among ``words``, in order, in every spelling:
    ``-o VALUE``, ``-oVALUE``, ``--override-ini VALUE``, ``--override-ini=VALUE``."""
    out: list[str] = []
    for i, word in enumerate(words):
        for name in names:
            if word == name:
                if i + 1 < len(words):
                    out.append(words[i + 1])
            elif name.startswith("--") and word.startswith(name + "="):
                out.append(word[len(name) + 1:])
            elif len(name) == 2 and word.startswith(name) and not word.startswith("--"):
                out.append(word[2:])
    return out


def _collecting_options(words: list[str]) -> list[str]:
    """What pytest options among ``words`` make it collect as tests: ``--doctest-glob``'s
    patterns, every ``.py`` file for ``--doctest-modules``, ``-o python_files=…`` (and the same
    inside ``-o addopts=…``)."""
    found = ["*.py" for w in words if w == "--doctest-modules"] + _option_values(words, "--doctest-glob")
    for value in _option_values(words, "-o", "--override-ini"):
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
    named = _option_values(_words(command), "-c", "--config-file")
    return sorted({p for p in tracked if posixpath.basename(p) in PYTEST_CONFIGS}
                  | {posixpath.normpath(p.removeprefix("./")) for p in named if p and not p.startswith("/")})


PYTEST_FILES = ("test_*.py", "*_test.py")      # pytest's default python_files


@dataclass(frozen=True)
class Collection:
    """What the project's pytest configuration makes pytest collect (import) as tests, read from
    EVERY config file pytest may read (it uses only the first it finds on its way up from the
    rootdir, but which that is depends on where the command points it: each is evidence)."""
    new: tuple[str, ...] = ()          # a new file matching one of these globs is a test module
    files: tuple[str, ...] = ()        # an existing file matching one is a test file: python_files
    broad: tuple[str, ...] = ()        # python_files that match any module (``*.py``), under testpaths
    functions: tuple[str, ...] = ("test",)     # python_functions (pytest's default: the prefix test)
    classes: tuple[str, ...] = ("Test",)       # python_classes


def _catch_all(pattern: str) -> bool:
    """Whether a python_files pattern matches any module name (``*.py``, ``*``): no evidence."""
    return fnmatch.fnmatchcase("q7zx.py", posixpath.basename(pattern))


def collection(configs: dict[str, str]) -> Collection:
    """The :class:`Collection` of the config files ``configs`` (``{path: text}``): new test
    modules are what ``python_files`` and the doctest options of ``addopts`` name, anywhere
    (``--doctest-modules``: every module); existing test files are what ``python_files`` names
    (pytest's ``test_*.py``/``*_test.py`` when a config sets ``testpaths`` but not it), under
    the config's ``testpaths`` when it sets them (at any depth: the rootdir may be anywhere),
    else anywhere; a pattern that matches any module counts only under ``testpaths`` (``broad``)."""
    new: list[str] = []
    files: list[str] = []
    broad: list[str] = []
    functions, classes = ["test"], ["Test"]
    for path, text in sorted(configs.items()):
        named = _pytest_option(path, text, "python_files")
        new += named + _collecting_options(_pytest_option(path, text, "addopts"))
        functions += _pytest_option(path, text, "python_functions")
        classes += _pytest_option(path, text, "python_classes")
        testpaths = [posixpath.normpath(p.removeprefix("./")) for p in _pytest_option(path, text, "testpaths")
                     if not p.startswith(("/", "../"))]
        doctests = _option_values(_pytest_option(path, text, "addopts"), "--doctest-glob")
        files += doctests
        if not testpaths:
            files += [p for p in named if not _catch_all(p)]
            continue
        for pattern in named or list(PYTEST_FILES):
            under = [pattern if d == "." else f"{d}/**/{pattern.lstrip('/')}" for d in testpaths]
            (broad if _catch_all(pattern) else files).extend(under)
    return Collection(_anywhere(new), _anywhere(files), _anywhere(broad), tuple(dict.fromkeys(functions)),
                      tuple(dict.fromkeys(classes)))


def configured_test_globs(configs: dict[str, str]) -> tuple[str, ...]:
    """The files the project's pytest configuration (``{path: text}`` of its config files) makes
    pytest collect (import) as tests beside its defaults: ``python_files``, and
    ``--doctest-glob``/``--doctest-modules`` (every module) in ``addopts``; as globs at any depth
    (a new file matching one is a new test module; :func:`collection` has the rest)."""
    return collection(configs).new


def runner_test_files(tracked: Iterable[str], found: Collection, scans: Mapping[str, Mapping[str, Any]],
                      imported: frozenset[str]) -> frozenset[str]:
    """The baseline's files that the runner's own collection settings make test files: those
    ``found.files`` match, and those ``found.broad`` match that define a test (a function or a
    class pytest collects, a ``TestCase``) and that no module of the repository imports."""
    out = {p for p in tracked if matches_any(p, found.files)}
    out |= {p for p in tracked if p not in imported and p in scans and matches_any(p, found.broad)
            and collects(scans[p], found.functions, found.classes)}
    return frozenset(out)


def command_test_globs(command: str) -> tuple[str, ...]:
    """The same for a grading command: ``unittest discover -p PATTERN`` (``--pattern``) and
    pytest's options (doctests, ``-o python_files=…``), as globs at any depth."""
    words = _words(command)
    found = _collecting_options(words)
    if any("unittest" in w for w in words):
        found += _option_values(words, "-p", "--pattern")
    return _anywhere(found)


# Words after which a command runs what no word of it names: build tools and task runners (their
# recipes), finders, and what loops over a directory.
RUNNING_WORDS = frozenset({"cd", "pushd", "popd", "find", "xargs", "-exec", "-execdir", "run-parts", "make", "gmake",
                           "tox", "nox", "npm", "npx", "yarn", "pnpm", "just", "task", "hatch", "invoke", "inv", "poe",
                           "pdm", "pixi", "rye", "uv", "poetry", "for", "eval", "parallel", "ls"})


_PYTHON = re.compile(r"(?:\S*/)?python[0-9.]*")
RUNNERS = frozenset({"pytest", "unittest", "py.test"})       # python -m X that runs only tests


def opaque(command: str) -> bool:
    """Whether a grading command (or a script it runs) may run files its words do not name: a
    word with an expansion (``$HERE/ci/local.sh``, ``$(…)``, backticks) or a glob (``ci/*.sh``),
    an absolute path, a change of directory, a tool that runs what its own files or a search say
    (``make test``, ``tox``, ``find … -exec``, ``xargs``), or python running something that is not
    a test runner (``python ci/check.py``, ``python -m ci.check``, ``python -c …``)."""
    words = _words(command)
    for i, w in enumerate(words):
        if "$" in w or "`" in w or w.startswith("/") or w in RUNNING_WORDS or any(c in w for c in "*?["):
            return True
        before = words[i - 1] if i else ""
        if _PYTHON.fullmatch(before) and not w.startswith("-"):
            return True                                          # python SCRIPT
        if (before == "-m" and w not in RUNNERS) or (before == "-c" and i >= 2 and _PYTHON.fullmatch(words[i - 2])):
            return True                                          # python -m ci.check, python -c CODE
    return False


# Files where a bare word is prose or code, not a list of names to import (``.txt``, ``.cfg``, a
# file with no suffix: each may be a list of plugins the project reads).
PROSE_OR_CODE = (".py", ".pyi", ".pyx", ".md", ".rst", ".html", ".htm", ".ipynb", ".c", ".h", ".js", ".ts")


def imported_names(lines: Iterable[str | tuple[str, str]], names: Iterable[str]) -> frozenset[str]:
    """Which of ``names`` the baseline's ``lines`` (text, or ``(path, text)``) ask python for: as
    a top-level name on a line that imports (``import simplejson``, ``from yaml import x``,
    ``import_module("ujson")``), quoted anywhere (``INSTALLED_APPS = ["myapp"]``,
    ``"plugin:main"``), or as a bare word in a file that is neither code nor prose
    (``enabled = calc_extra`` in a ``.cfg``, a ``plugins.txt``), which is how names reach an
    import by string."""
    pairs = [(None, line) if isinstance(line, str) else line for line in lines]
    importing = "\n".join(line for _, line in pairs if "import" in line)
    text = "\n".join(line for _, line in pairs)
    configs = "\n".join(line for path, line in pairs if path and not path.lower().endswith(PROSE_OR_CODE)
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


def setup_outputs(changed: Iterable[str], before: Iterable[str]) -> frozenset[str]:
    """What the task's setup wrote into the workspace (``changed``: the files its run added or
    changed; ``before``: the repository's files before it): those files, and each directory it
    created (``deps/``, with a trailing ``/``)."""
    had = ancestors(before)
    out: set[str] = set()
    for path in changed:
        out.add(path)
        parent = posixpath.dirname(path)
        while parent and parent not in had:
            out.add(parent + "/")
            parent = posixpath.dirname(parent)
    return frozenset(out)


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
