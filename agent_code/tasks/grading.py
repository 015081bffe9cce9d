"""Grading an agent's diff in a fresh sandbox.

Steps, each in a sandbox that never saw the agent run:

1. prepare the workspace again (same snapshot, same ``setup``, same baseline commit), and ask the
   machine's python what it can import (to know which module names a change may not plant);
2. apply the agent's diff to a scratch index over the baseline — if it does not apply,
   ``applied_cleanly`` is False and the reward 0; an empty diff is graded as it is — and list every
   path it touches (nothing is staged from the tree, so no ``.gitignore`` hides a file);
3. refuse every path a rule of ``protected.py`` matches (the task's test files, new files the
   runner would collect, runner config, conftest files, packaging and entry points,
   ``.pth``/customize hooks, bytecode, modules that shadow the runner, the standard library or a
   name the project imports, package markers above the tests, symlinks, git metadata, odd names,
   modules only the tests load — test helpers, from the baseline's import graph that
   ``imports.py`` scans in the sandbox before the diff is applied —, files the project's
   pytest configuration collects, ...): those stay as they were at the baseline, are listed in ``Grade.rejected_paths``, and
   the rest is applied (reward 0 if one cannot be put back);
4. apply the task's ``test_patch`` (hidden tests the agent never saw), if any;
5. run the grader as the agent user (it runs the agent's code, which must never run as root),
   with pytest plugins only from the machine (``PYTEST_DISABLE_PLUGIN_AUTOLOAD`` and each of the
   machine's plugins named with ``-p``), no user site, bytecode cached outside the workspace, and
   for ``python -m pytest`` the working directory kept off ``sys.path`` until pytest is loaded:

   * ``eval_cmd``: reward 1 when it exits 0, else 0;
   * ``test_cmd``: the FAIL_TO_PASS and PASS_TO_PASS ids are appended to it, shell-quoted (or
     substituted for ``{tests}`` when the command contains that), and each id is decided from the
     output, read as pytest reports results: the ``-rA`` short summary (``PASSED <id>``,
     ``FAILED <id> - ...``) or ``-v`` lines (``<id> PASSED [ 50%]``). An id passes when it is
     reported PASSED, XFAIL or XPASS and never FAILED or ERROR — a FAIL_TO_PASS id not as XFAIL,
     which the unfixed code can cause; one not reported at all (not collected, skipped, the run
     crashed) fails. So a ``test_cmd`` must make pytest print those
     lines: ``python -m pytest -rA``. The reward is 1 when every id passes (0 otherwise), or with
     ``partial=True`` the fraction that pass.

What the diff certainly caused (it does not apply, a refused change cannot be put back, the
tests time out) comes back from :func:`grade` as a :class:`Grade` with reward 0 and ``error``
set. Anything else that stops grading is raised (:class:`TaskError`, ``SandboxError``, or any
other exception). :func:`grade_change` — what the rollout runner calls — then decides who
caused it, by one rule: **anything the workspace's content causes is the model's outcome**
(reward 0, counted in its group) and only what the harness, machine or task causes is an
infrastructure failure. It grades the task's baseline (the empty diff) in another fresh
sandbox as a control: when that grades, the machine and the task work and the failure was the
change's (a :class:`Grade` with reward 0, ``error`` saying what failed, ``ungradable`` set);
when the control fails too, the original error is raised, and the caller records an
infrastructure failure — so a broken task or machine is never a zero-reward sample, and a
change that breaks its own grading never escapes its zero.
"""

from __future__ import annotations

import asyncio
import json
import posixpath
import re
import shlex
import time
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any, Callable, Mapping, Sequence

from agent_code.sandbox.base import ExecResult, Sandbox
from agent_code.tasks import evidence, guard, imports, protected, support
from agent_code.tasks.protected import matches_any  # noqa: F401  (the task-glob matcher, re-exported)
from agent_code.tasks.task import Task, TaskError
from agent_code.tasks.workspace import DIFF_FLAGS, GIT_ENV, PRESETUP_REF, prepare_workspace, run_step

OUTPUT_LIMIT = 4000
PASSING = frozenset({"PASSED", "XFAIL", "XPASS"})
FAILING = frozenset({"FAILED", "ERROR"})
_STATUS = "PASSED|FAILED|ERROR|XFAIL|XPASS|SKIPPED"
_SUMMARY_LINE = re.compile(rf"^({_STATUS}) (.+?)(?: - .*)?$")             # -rA
_VERBOSE_LINE = re.compile(rf"^(\S+::.+?) ({_STATUS})(?:\s+\[\s*\d+%\])?$")  # -v
_XDIST_PREFIX = re.compile(r"^\[gw\d+\]\s+\[\s*\d+%\]\s+")
_SECTION = re.compile(r"^={3,} (.+?) ={3,}$")


@dataclass
class Grade:
    reward: float
    applied_cleanly: bool
    passed: list[str] = field(default_factory=list)   # test ids (empty for an eval_cmd grader)
    failed: list[str] = field(default_factory=list)
    output: str = ""                                   # the tail of the grader's (or failing step's) output
    duration: float = 0.0
    error: str | None = None
    rejected_paths: list[str] = field(default_factory=list)    # the agent's changes the grader refused
    rejected_rules: dict[str, str] = field(default_factory=dict)   # path -> the rule that refused it
    ungradable: bool = False     # the change could not be graded (``error`` says why): reward 0, its own outcome


# --- the agent's change, minus what it may not touch ----------------------------------------

# Lists what the grading machine can import (the standard library, every installed distribution's
# top-level names) and the pytest plugins it registers, before the agent's change is applied.
_PROBE = """
import importlib.metadata as m, json, os, pkgutil, sys
names = set(sys.stdlib_module_names) | set(sys.builtin_module_names)
here = os.getcwd()
path = [p for p in sys.path[1:] if p and not (os.path.abspath(p) + os.sep).startswith(here + os.sep)]
names.update(info.name for info in pkgutil.iter_modules(path))   # everything importable, private names too
try:
    names.update(m.packages_distributions())
except Exception:
    pass
try:
    plugins = sorted({ep.name for ep in m.entry_points(group="pytest11")})
except Exception:
    plugins = []
inside = sorted({os.path.relpath(os.path.abspath(p), here) for p in sys.path[1:] if p
                 and (os.path.abspath(p) + os.sep).startswith(here + os.sep)})
print(json.dumps({"modules": sorted(names), "pytest_plugins": plugins,
                  "path_dirs": ["" if d == "." else d for d in inside]}))
"""

# Loaded by pytest (``-p``) from outside the workspace when the grader runs ``python -m pytest``
# with ``PYTHONSAFEPATH``: pytest itself was imported from the machine's environment, never from
# the working directory; the tests may now import the project from it, as ``python -m`` allows.
_BOOT_PLUGIN = """import os, sys
os.environ.pop("PYTHONSAFEPATH", None)
if os.getcwd() not in sys.path:
    sys.path.insert(0, os.getcwd())
"""
BOOT_PLUGIN_NAME = "agent_code_grader_boot"
_PYTEST_MODULE = re.compile(r"(?:^|[\s;&|(])(?:\S*/)?python[0-9.]*\s+(?:-\S+\s+)*-m\s*pytest\b")


@dataclass(frozen=True)
class _Machine:
    modules: frozenset[str]
    pytest_plugins: tuple[str, ...]
    path_dirs: frozenset[str] = frozenset()     # workspace directories on its sys.path (PYTHONPATH)
    env: tuple[tuple[str, str], ...] = ()       # the task's env the probe ran with (for later baseline scripts)


async def _probe(box: Sandbox, env: Mapping[str, str] | None) -> _Machine:
    script = f"{box.home}/.agent-code-probe.py"
    await box.write_file(script, _PROBE, user="agent")
    q = shlex.quote(script)
    result = await box.exec(f"python {q} 2>/dev/null || python3 {q}", user="agent", env=env, timeout=60,
                            cwd=box.workdir)
    try:
        found = json.loads(result.stdout.strip().splitlines()[-1])
        return _Machine(frozenset(found["modules"]), tuple(found["pytest_plugins"]), frozenset(found["path_dirs"]),
                        tuple((env or {}).items()))
    except (ValueError, IndexError, KeyError, TypeError):
        return _Machine(frozenset(), (), env=tuple((env or {}).items()))


async def _lines(box: Sandbox, cmd: str, what: str, env: Mapping[str, str]) -> list[str]:
    result = await run_step(box, cmd, what, user="agent", env=env)
    return [p for p in result.stdout.split("\0") if p]


async def _baseline_files(box: Sandbox, baseline: str, names: Sequence[str]) -> dict[str, str]:
    """``{path: text}`` of files of the baseline commit (those it has)."""
    out: dict[str, str] = {}
    for name in names:
        shown = await box.exec(f"git show {shlex.quote(f'{baseline}:{name}')}", user="agent", timeout=60,
                               cwd=box.workdir)
        if shown.ok:
            out[name] = shown.stdout
    return out


async def _mentions(box: Sandbox, baseline: str, names: frozenset[str]) -> list[tuple[str, str]]:
    """``(path, line)`` of the baseline's lines that name any of ``names`` (fixed strings), at
    most ~4 MB of them."""
    patterns = " ".join(f"-e {shlex.quote(n)}" for n in sorted(names))
    found = await box.exec(f"git grep -z -I -F --no-color {patterns} {baseline} -- | head -c 4000000",
                           user="agent", timeout=120, cwd=box.workdir)
    out: list[tuple[str, str]] = []
    for row in found.stdout.splitlines():
        where, _, line = row.partition("\0")
        out.append((where.removeprefix(f"{baseline}:"), line))
    return out


# A module that lists its own directory and imports what it finds (a plugin registry).
_LISTS = "iter_modules|walk_packages|listdir|scandir|iterdir|glob|files\\("
_ITSELF = "import_module|__import__|exec_module|load_module|__path__|__file__|__package__|__spec__"


async def _enumerating(box: Sandbox, baseline: str, packages: frozenset[str]) -> frozenset[str]:
    """The packages of the baseline with a module that lists a directory and imports, or lists
    its own (``pkgutil.iter_modules(__path__)``, ``os.listdir(os.path.dirname(__file__))``,
    ``importlib.resources.files(__package__).iterdir()``)."""
    found = await box.exec(f"git grep -l -z -I -E --all-match -e {shlex.quote(_LISTS)} -e {shlex.quote(_ITSELF)} "
                           f"{baseline} -- '*.py'", user="agent", timeout=120, cwd=box.workdir)
    dirs = {posixpath.dirname(p.removeprefix(f"{baseline}:")) for p in found.stdout.split("\0") if p.strip()}
    return frozenset(d for d in dirs if d in packages)


async def _grader_paths(box: Sandbox, baseline: str, command: str, ids: Sequence[str],
                        tracked: frozenset[str]) -> dict[str, str]:
    """``{path: text}`` of the files the grading command names, and of those its shell scripts
    run, four deep (text only for the shell scripts; '' for the others)."""
    scripts: dict[str, str | None] = {}
    found = evidence.command_paths(command, ids)
    for _ in range(4):
        wanted = [p for p in evidence.shell_scripts(found) if p not in scripts]
        got = await _baseline_files(box, baseline, [p for p in wanted if p in tracked])
        scripts.update({p: got.get(p) for p in wanted})
        more = evidence.grader_paths(command, ids, scripts)
        if more == found:
            break
        found = more
    return {p: scripts.get(p) or "" for p in found}


async def _setup_outputs(box: Sandbox, baseline: str) -> frozenset[str]:
    """What the task's setup wrote into the workspace: what it left untracked (ignored), and what
    the baseline commit took in from it (files, and the directories it created)."""
    left = await _lines(box, "git ls-files -z -o --directory", "listing what the setup left", {})
    wrote = await _lines(box, f"git diff --name-only -z --no-renames {PRESETUP_REF} {baseline} --",
                         "listing what the setup wrote", {})
    before = await _lines(box, f"git ls-tree -r -z --name-only {PRESETUP_REF}", "listing the repository", {})
    return frozenset(left) | evidence.setup_outputs(wrote, before)


async def _import_scans(box: Sandbox, files: Sequence[str], env: Mapping[str, str] | None) -> dict[str, support.Scan]:
    """``{path: scan}`` of the baseline's python ``files`` (``imports.py``, run as the agent user
    in the workspace before the change is applied); {} when the machine's python cannot run it."""
    if not files:
        return {}
    script, listfile = f"{box.home}/.agent-code-imports.py", f"{box.home}/.agent-code-imports.list"
    await box.write_file(script, Path(imports.__file__).read_text(), user="agent")
    await box.write_file(listfile, "\0".join(files) + "\0", user="agent")
    q = shlex.quote
    result = await box.exec(f"python3 {q(script)} {q(listfile)} 2>/dev/null || python {q(script)} {q(listfile)}",
                            user="agent", env=env, timeout=300, cwd=box.workdir)
    try:
        found = json.loads(result.stdout.strip().splitlines()[-1])
    except (ValueError, IndexError):
        return {}
    return {p: v for p, v in found.items() if isinstance(v, dict)} if isinstance(found, dict) else {}


async def _test_evidence(box: Sandbox, task: Task, context: protected.Context, configs: dict[str, str],
                         scripts: frozenset[str], env: Mapping[str, str] | None) -> protected.Context:
    """The context with what the tests' import graph and the runner's collection settings say:
    the test-support modules and the configured test files (``support.py``, ``evidence.py``)."""
    found = evidence.collection(configs)
    scans = await _import_scans(box, [p for p in sorted(context.tracked) if p.endswith(".py")], env)
    hidden = support.patch_scans(task.test_patch)
    scans = support.merged(scans, hidden)
    loads = support.import_graph(scans, context.packages, context.path_dirs)
    imported = frozenset(p for targets in loads.values() for p in targets)
    runner_tests = evidence.runner_test_files(context.tracked, found, scans, imported)
    collected = tuple(f"**/{p}" for p in evidence.PYTEST_FILES)
    tests = {p for p, scan in scans.items() if p in runner_tests or (
        matches_any(p, collected) and (p not in imported or support.collects(scan, found.functions, found.classes)))}
    tests |= {p for p in scans if posixpath.basename(p) == "conftest.py" or p in scripts or p in hidden}
    kept = {p for p in scans if matches_any(p, context.test_files) or any(p.startswith(d + "/") for d in context.test_dirs)}
    helpers = support.test_support(scans, loads, tests, kept, path_dirs=context.path_dirs, functions=found.functions,
                                   classes=found.classes)
    return replace(context, support=helpers, runner_tests=runner_tests,
                   reference=evidence.patch_paths(task.patch))


async def _context(box: Sandbox, task: Task, baseline: str, machine: _Machine, changes: list[protected.Change],
                   tracked: list[str]) -> protected.Context:
    """What the rules of ``protected.py`` need to know about this task, this machine and this
    change: the baseline's files, config and scripts, the machine's modules, what the
    baseline's code imports of what the change adds."""
    tests = evidence.patch_paths(task.test_patch)
    command = task.eval_cmd or task.test_cmd or ""
    tracked_set = frozenset(tracked)
    configs = await _baseline_files(box, baseline, [p for p in evidence.config_files(tracked, command)
                                                     if p in tracked_set])
    scripts = await _grader_paths(box, baseline, command, task.tests, tracked_set)
    context = protected.Context(
        test_files=tuple(task.test_files), test_patch_paths=tests,
        collected=protected.RUNNER_TEST_FILES + evidence.configured_test_globs(configs)
        + evidence.command_test_globs(command),
        grader_paths=frozenset(scripts),
        opaque_grader=any(evidence.opaque(t) for t in [command, *scripts.values()]),
        test_dirs=evidence.test_dirs(tracked, task.test_files, tests),
        test_ancestors=protected.ancestors([p for p in tracked if protected.matches_any(p, task.test_files)]
                                           + list(tests)),
        packages=evidence.package_dirs(tracked),
        path_dirs=frozenset({""}) | machine.path_dirs,
        shadowable=protected.default_shadowable(machine.modules),
        tracked=tracked_set,
        untracked=await _setup_outputs(box, baseline))
    if any(protected._components(c) is not None or c.path in context.tracked for c in changes):
        context = await _test_evidence(box, task, context, configs, frozenset(scripts), dict(machine.env))
    names = evidence.new_names(changes, context)
    submodules = evidence.submodule_mentions(changes, context)
    data = evidence.data_names(changes)
    if names or submodules or data:
        lines = await _mentions(box, baseline, names | submodules | data)
        context = replace(context, baseline_imports=evidence.imported_names(lines, names),
                          asked_for=evidence.asked_for(changes, context, lines),
                          test_data=evidence.named_by_tests(changes, evidence.test_lines(lines, context,
                                                                                             task.test_patch)))
    if submodules:
        context = replace(context, enumerating=await _enumerating(box, baseline, context.packages))
    return context


async def _stage(box: Sandbox, task: Task, baseline: str, diff: str, machine: _Machine,
                 rules: Sequence[protected.Rule]) -> tuple[ExecResult | None, dict[str, str], dict[str, str]]:
    """Apply ``diff`` to the working tree, less every path a rule of ``protected.py`` refuses.

    The diff goes into a scratch index first (over the baseline), never through ``git add``, so
    every path it touches is seen, ignored or not. Returns (the failed ``git apply``, or None;
    ``{refused path: rule}``; the import guard's files for what is applied)."""
    q = shlex.quote
    index = {"GIT_INDEX_FILE": f"{box.home}/.agent-code-grading-index"}
    patch = f"{box.home}/agent.diff"
    await box.write_file(patch, diff if diff.endswith("\n") else diff + "\n", user="agent")
    applied = await box.exec(f"git read-tree {baseline} && git apply --cached --whitespace=nowarn {q(patch)}",
                             user="agent", env={**GIT_ENV, **index}, timeout=120, cwd=box.workdir)
    if not applied.ok:
        return applied, {}, {}
    raw = await run_step(box, f"git diff-index --cached --raw -z --no-renames {baseline} --",
                         "listing the agent's changes", user="agent", env=index)
    changes = evidence.parse_raw_diff(raw.stdout)
    tracked = await _lines(box, f"git ls-tree -r -z --name-only {baseline}", "listing the baseline", index)
    context = await _context(box, task, baseline, machine, changes, tracked)
    refused = await asyncio.to_thread(protected.check, changes, context, rules)   # (100,000 paths: off the loop)
    if refused:
        listfile = f"{box.home}/.agent-code-refused"
        await box.write_file(listfile, "\0".join(refused) + "\0", user="agent")
        await run_step(box, f"git --literal-pathspecs reset -q {baseline} --pathspec-from-file={q(listfile)}"
                       " --pathspec-file-nul", "leaving out the refused changes", user="agent", env=index)
        left = await run_step(box, f"git diff-index --cached --raw -z --no-renames {baseline} --",
                              "listing the agent's changes", user="agent", env=index)
        stuck = sorted({c.path for c in evidence.parse_raw_diff(left.stdout)} & set(refused))
        if stuck:
            raise TaskError(f"could not leave out the refused change(s) {stuck!r}")
    allowed = f"{box.home}/allowed.diff"
    await run_step(box, f"git diff --cached {DIFF_FLAGS} {baseline} -- > {q(allowed)}"
                   f" && if [ -s {q(allowed)} ]; then git apply --whitespace=nowarn {q(allowed)}; fi",
                   "applying the agent's change", user="agent", env=index)
    taken = [c for c in changes if c.path not in refused]
    project = [p for p in tracked if not protected.under(p, context.untracked)]
    files = guard.guard_files(evidence.new_names(taken, context), box.workdir,
                              [*project, *(c.path for c in taken if c.status == "A")])
    return None, dict(sorted(refused.items())), files


def grader_env(command: str, machine: _Machine, box: Sandbox, env: Mapping[str, str] | None) -> dict[str, str]:
    """The grader's environment: the task's ``env``, no user site, bytecode cached outside the
    workspace (a planted ``__pycache__`` is never read), pytest plugins only from the machine
    (named one by one; none autoloaded from what the workspace might register), and for
    ``python -m pytest`` no working directory on ``sys.path`` until pytest has been imported."""
    out = dict(env or {})
    out.update(PYTHONNOUSERSITE="1", PYTHONPYCACHEPREFIX=f"{box.home}/.agent-code-pycache",
               PYTEST_DISABLE_PLUGIN_AUTOLOAD="1")
    plugins = [f"-p {shlex.quote(name)}" for name in machine.pytest_plugins]
    boot_dir = f"{box.home}/.agent-code-grader"     # the boot plugin and the import guard
    out["PYTHONPATH"] = boot_dir + (":" + out["PYTHONPATH"] if out.get("PYTHONPATH") else "")
    if _PYTEST_MODULE.search(command):
        out["PYTHONSAFEPATH"] = "1"
        plugins.append(f"-p {BOOT_PLUGIN_NAME}")
    out["PYTEST_ADDOPTS"] = " ".join([*plugins, out.get("PYTEST_ADDOPTS", "")]).strip()
    return out


# --- reading test results ---------------------------------------------------------------------

def parse_test_results(output: str) -> dict[str, set[str]]:
    """Every test id pytest reported in ``output``, with the statuses it got.

    Result lines are read where pytest writes them, whole (no leading whitespace: an indented
    ``PASSED ...`` is a source line in a traceback, not a result): ``-rA`` lines in the "short
    test summary info" section, ``-v`` lines in the run's progress (before any section but
    "test session starts"); output without section headers is read whole."""
    results: dict[str, set[str]] = {}
    section: str | None = None
    for raw in output.splitlines():
        header = _SECTION.match(raw.rstrip())
        if header:
            section = header.group(1).lower()
            continue
        line = _XDIST_PREFIX.sub("", raw.rstrip())
        if section is None or "short test summary info" in section:
            match = _SUMMARY_LINE.match(line)
            if match and "::" in match.group(2):
                results.setdefault(match.group(2), set()).add(match.group(1))
                continue
        if section is None or "test session starts" in section:
            match = _VERBOSE_LINE.match(line)
            if match:
                results.setdefault(match.group(1), set()).add(match.group(2))
    return results


def decide(ids: Sequence[str], results: Mapping[str, set[str]], strict: Sequence[str] = ()
           ) -> tuple[list[str], list[str]]:
    """(passed, failed) of ``ids``. An id passes when reported PASSED, XFAIL or XPASS and never
    FAILED or ERROR; the ``strict`` ones (FAIL_TO_PASS: what shows the fix) pass only as PASSED or
    XPASS: an expected failure is still a failure, and ``pytest.xfail()`` is one call away for
    the code under test."""
    strict_set = set(strict)

    def ok(test: str) -> bool:
        got = results.get(test, set())
        good = got & (PASSING - {"XFAIL"} if test in strict_set else PASSING)
        return bool(good) and not got & FAILING and not (test in strict_set and "XFAIL" in got)

    passed = [t for t in ids if ok(t)]
    return passed, [t for t in ids if t not in passed]


def build_test_command(test_cmd: str, ids: Sequence[str]) -> str:
    quoted = shlex.join(ids)
    return test_cmd.replace("{tests}", quoted) if "{tests}" in test_cmd else f"{test_cmd} {quoted}"


# --- grading ----------------------------------------------------------------------------------

async def grade(task: Task, diff: str, make_sandbox: Callable[[], Sandbox], *, partial: bool = False,
                env: Mapping[str, str] | None = None, timeout: float = 600,
                setup_timeout: float = 600, rules: Sequence[protected.Rule] = protected.RULES) -> Grade:
    """Grade ``diff`` (from :func:`collect_diff`) for ``task`` in a fresh sandbox from
    ``make_sandbox()`` (not yet entered). ``env`` (e.g. a ``PATH`` with the interpreter the
    tests need) is given to the setup and the grader; ``timeout`` bounds the grader's run.
    ``rules`` are what the grader refuses to take from the diff (``protected.RULES``; a task
    suite with a hack class of its own adds a :class:`~agent_code.tasks.protected.Rule`)."""
    start = time.monotonic()

    def done(reward: float, *, applied: bool = True, passed: list[str] | None = None,
             failed: list[str] | None = None, output: str = "", error: str | None = None,
             refused: Mapping[str, str] | None = None) -> Grade:
        return Grade(reward, applied, passed or [], failed or [], output, time.monotonic() - start, error,
                     sorted(refused or {}), dict(refused or {}), ungradable=error is not None)

    async with make_sandbox() as box:
        workspace = await prepare_workspace(box, task, env=env, setup_timeout=setup_timeout, write_problem=False)
        machine = await _probe(box, env)
        refused: dict[str, str] = {}
        guarded: dict[str, str] = guard.guard_files((), box.workdir, ())
        try:
            if diff.strip():
                failed, refused, guarded = await _stage(box, task, workspace.baseline, diff, machine, rules)
                if failed is not None:
                    return done(0.0, applied=False, failed=list(task.tests), output=failed.output(OUTPUT_LIMIT),
                                error="the diff does not apply to the task's repository")
        except TaskError as exc:
            return done(0.0, failed=list(task.tests), output=str(exc)[-OUTPUT_LIMIT:], error=str(exc).split("\n")[0],
                        refused=refused)
        if task.test_patch:   # raises: a test patch that does not apply may be the task's own fault (grade_change)
            hidden = f"{box.home}/test.patch"
            await box.write_file(hidden, task.test_patch, user="agent")
            await run_step(box, f"git apply --whitespace=nowarn {shlex.quote(hidden)}",
                           "applying the task's test_patch", user="agent")

        command = task.eval_cmd or build_test_command(task.test_cmd or "", task.tests)
        boot = f"{box.home}/.agent-code-grader"
        await box.write_file(f"{boot}/{BOOT_PLUGIN_NAME}.py", _BOOT_PLUGIN, user="agent")
        for name, text in guarded.items():
            await box.write_file(f"{boot}/{name}", text, user="agent")
        result = await box.exec(command, user="agent", env=grader_env(command, machine, box, env), timeout=timeout,
                                cwd=box.workdir)
        output = result.output(OUTPUT_LIMIT)
        if result.timed_out:
            return done(0.0, failed=list(task.tests), output=output, error=f"grading timed out after {timeout:g}s",
                        refused=refused)
        if task.eval_cmd:
            return done(1.0 if result.ok else 0.0, output=output, refused=refused)
        passed, failed_ids = decide(task.tests, parse_test_results(result.stdout + "\n" + result.stderr),
                                    strict=task.fail_to_pass)
        if partial:
            reward = len(passed) / len(task.tests)
        else:
            reward = 0.0 if failed_ids else 1.0
        return done(reward, passed=passed, failed=failed_ids, output=output, refused=refused)


async def grade_change(task: Task, diff: str, make_sandbox: Callable[[], Sandbox], **options: Any) -> Grade:
    """:func:`grade` with the blame settled (the module doc's rule): returns a :class:`Grade`
    for everything the change causes — reward 0 with ``error`` and ``ungradable`` when grading
    it failed but the control (the task's baseline, graded in a fresh sandbox) grades — and
    raises only what the task or the machine causes (the control failed as well)."""
    try:
        return await grade(task, diff, make_sandbox, **options)
    except asyncio.CancelledError:
        raise
    except Exception as exc:   # noqa: BLE001  (whatever it was, the control decides whose it is)
        failure = exc
    if not diff.strip():
        raise failure                      # the baseline itself does not grade: the task's or the machine's
    try:
        control = await grade(task, "", make_sandbox, **options)
    except asyncio.CancelledError:
        raise
    except Exception:                      # noqa: BLE001
        raise failure from None            # the machine or the task: not this change
    first = str(failure).strip().split("\n")[0] or type(failure).__name__
    # the control graded (whatever its reward): the machine and the task work, the change did this
    return Grade(0.0, False, [], list(task.tests), str(failure)[-OUTPUT_LIMIT:], control.duration,
                 f"grading this change failed where the task's baseline grades: {first}", ungradable=True)
