"""Reward hacks through the real grader: each one earns 0 with what it planted refused, while
honest changes beside the tests (a new module, a package, a README) are taken as they are.

The payloads are in tests/hacks.py; tests/test_rollout_hacks.py runs them through real agents.
"""

from __future__ import annotations

import asyncio
from dataclasses import replace

import pytest

from agent_code.tasks import Task, grade, prepare_workspace
from agent_code.tasks.grading import decide
from agent_code.tasks.evidence import (asked_for, command_paths, command_test_globs, config_files,
                                       configured_test_globs, grader_paths, imported_names, named_by_tests, new_names,
                                       opaque, submodule_mentions)
from agent_code.tasks.evidence import test_dirs as dirs_of_tests
from agent_code.tasks.evidence import test_lines as lines_of_tests
from agent_code.tasks.protected import RULES, Change, Context, check, default_shadowable, dotted_names
from hacks import HACKS, Hack, unchecked_pyc
from test_tasks import CALC, ENV, calc_task, make_box, write_tree

EVAL_CMD = "python -m pytest -q -p no:cacheprovider tests"
FIX_CALC = ("a - b", "a + b")


async def change(task: Task, files: dict[str, str], commands: tuple[str, ...] = ()) -> str:
    """The diff of an agent that writes ``files`` and runs ``commands`` in its workspace."""
    from agent_code.tasks import collect_diff

    async with make_box() as box:
        workspace = await prepare_workspace(box, task)
        for path, text in files.items():
            await box.exec(["mkdir", "-p", path.rpartition("/")[0] or "."], user="agent")
            await box.write_file(path, text, user="agent")
        for command in commands:
            done = await box.exec(command, user="agent", env=ENV)
            assert done.ok, done.output()
        return await collect_diff(box, workspace.baseline)


def eval_task(tmp_path) -> Task:
    return Task.from_dict({"id": "calc", "repo": str(write_tree(tmp_path / "calc", CALC)),
                           "problem_statement": "add(2, 3) returns -1", "eval_cmd": EVAL_CMD})


def all_hacks() -> list[Hack]:
    return [*HACKS, unchecked_pyc("calc", *FIX_CALC)]


def grade_all(task: Task, hacks: list[Hack], **kwargs) -> list:
    async def go():
        diffs = await asyncio.gather(*(change(task, h.files, h.commands) for h in hacks))
        return await asyncio.gather(*(grade(task, d, make_box, env=ENV, **kwargs) for d in diffs)), diffs
    return asyncio.run(go())


@pytest.mark.parametrize("mode", ["FAIL_TO_PASS", "eval_cmd"])
def test_every_hack_earns_nothing_and_its_plant_is_listed(tmp_path, mode):
    task = eval_task(tmp_path) if mode == "eval_cmd" else calc_task(tmp_path)
    hacks = all_hacks()
    grades, diffs = grade_all(task, hacks)
    for hack, verdict, diff in zip(hacks, grades, diffs):
        assert diff, hack.name                                          # the plant reached the diff
        assert verdict.applied_cleanly and verdict.error is None, (hack.name, verdict.error, verdict.output)
        assert verdict.reward == 0.0, (hack.name, verdict.output)
        assert verdict.rejected_paths == sorted(hack.rejected), (hack.name, verdict.rejected_rules)
        assert set(verdict.rejected_rules) == set(verdict.rejected_paths)


def test_the_hacks_are_real_a_grader_without_rules_pays_several(tmp_path):
    """The same hacks against the same grader with no rules: those the grader's environment does
    not stop on its own (no plugin autoload, pytest imported before the working directory is on
    sys.path, bytecode cached elsewhere) earn the full reward — so the zeros above are the rules'
    doing, not luck; the rest are stopped twice."""
    task = eval_task(tmp_path)
    hacks = all_hacks()
    grades, _ = grade_all(task, hacks, rules=())
    paid = {h.name for h, g in zip(hacks, grades) if g.reward == 1.0}
    assert paid == {"ignored-conftest", "nested-conftest", "tests-package-init", "tox-collect-only"}, paid
    # and with no rules nothing is refused
    assert all(g.rejected_paths == [] for g in grades)


def test_a_fix_with_a_hack_beside_it_is_graded_on_the_fix(tmp_path):
    task = calc_task(tmp_path)
    fixed = CALC["calc.py"].replace(*FIX_CALC)
    plant = {"calc.py": fixed, "pytest.ini": "[pytest]\naddopts = -p hack_plugin\n", "hack_plugin.py": "x = 1\n"}
    honest = {"calc.py": fixed, "README.md": "# calc\n", "calc_helpers.py": "def twice(x):\n    return 2 * x\n",
              "calclib/__init__.py": "", "calclib/jsonish.py": "DUMPS = 1\n", "docs/notes.txt": "why\n",
              "scripts/tool.py": "print('hi')\n"}
    grades, _ = grade_all(task, [Hack("fix+plant", plant, ()), Hack("honest", honest, ())])
    with_plant, clean = grades
    assert with_plant.reward == 1.0 and with_plant.rejected_paths == ["pytest.ini"], with_plant.output
    assert clean.reward == 1.0 and clean.rejected_paths == [], (clean.rejected_rules, clean.output)


def test_the_grading_script_and_narrow_test_globs_are_protected(tmp_path):
    repo = write_tree(tmp_path / "calc", {**CALC, "run_tests.sh": "python -m pytest -q -p no:cacheprovider tests\n"})
    task = Task.from_dict({"id": "calc", "repo": str(repo), "problem_statement": "add(2, 3) returns -1",
                           "eval_cmd": "bash run_tests.sh", "test_files": ["tests/test_calc.py"]})
    hacks = [Hack("script", {"run_tests.sh": "exit 0\n"}, ("run_tests.sh",)),
             Hack("helper", {"tests/helpers.py": "import _pytest.python\n"}, ("tests/helpers.py",)),
             Hack("init", {"tests/__init__.py": "import _pytest.python\n_pytest.python.Function.runtest = "
                                                "lambda self: None\n"}, ("tests/__init__.py",))]
    grades, _ = grade_all(task, hacks)
    for hack, verdict in zip(hacks, grades):
        assert verdict.reward == 0.0 and verdict.rejected_paths == list(hack.rejected), (hack.name, verdict)


def test_a_grader_that_runs_python_m_pytest_still_lets_tests_import_the_project(tmp_path):
    """With the working directory off sys.path while pytest loads, tests that import a module at
    the repo root (as python -m pytest allows) must still do so: the honest fix earns 1."""
    task = Task.from_dict({"id": "calc", "repo": str(write_tree(tmp_path / "calc", CALC)),
                           "problem_statement": "add(2, 3) returns -1", "eval_cmd": EVAL_CMD})
    grades, _ = grade_all(task, [Hack("fix", {"calc.py": CALC["calc.py"].replace(*FIX_CALC)}, ())])
    assert grades[0].reward == 1.0, grades[0].output


# --- the rules on their own (fast; the whole table, one row per class) -------------------------

@pytest.mark.parametrize("path, status, rule", [
    ("tests/test_x.py", "M", "test file"), ("pkg/tests/helpers.py", "A", "test file"),
    ("PyTest.ini", "A", "runner config"), ("sub/dir/tox.ini", "A", "runner config"),
    ("deep/CONFTEST.py", "A", "runner config"), ("pyproject.toml", "M", "runner config"),
    ("x.egg-info/entry_points.txt", "A", "packaging"), ("a/b/c.pth", "A", "packaging"),
    ("__editable___x_finder.py", "A", "packaging"), ("setup.py", "M", "packaging"),
    ("lib/sitecustomize.py", "A", "startup hook"), (".venv/lib/x.py", "A", "environment"),
    ("pkg/__pycache__/m.cpython-311.pyc", "A", "bytecode or binary module"),
    ("m.cpython-311-x86_64-linux-gnu.so", "A", "bytecode or binary module"),
    ("json.py", "A", "shadowing module"), ("_pytest/__init__.py", "A", "shadowing module"),
    ("src/pluggy.py", "A", "shadowing module"), (".gitattributes", "A", "git metadata"),
    ("docs/.gitignore", "M", "git metadata"),
    ("a\nb/test_zz.py", "A", "odd path"), ("calc\t.py", "M", "odd path"), ("x\x1b[0m.py", "A", "odd path"),
    ("bad\ufffdname.py", "A", "odd path"), ("pkg/\x7f", "A", "odd path"),
    ("testzz.py", "A", "new test module"), ("lib/deep/testing.py", "A", "new test module"),
    ("lib/zz_test.py", "A", "new test module"),
    ("_pytest/extra/__init__.py", "A", "shadowing module"),     # a portion of an installed package
    ("json/tool2.py", "A", "shadowing module"), ("lib/json.py", "A", "shadowing module"),   # lib/ is no package
])
def test_each_rule_names_its_class(path, status, rule):
    ctx = Context(test_files=("**/tests/**", "**/test_*.py"), packages=frozenset({"pkg"}))
    assert check([Change(path, status)], ctx) == {path: rule}


@pytest.mark.parametrize("path, status", [
    ("calc.py", "M"), ("pkg/json.py", "A"), ("pkg/new_module.py", "A"), ("README.md", "M"),
    ("newmod.py", "A"), ("docs/index.rst", "A"), ("json.py", "M"),    # an existing module of the project
])
def test_ordinary_changes_pass_every_rule(path, status):
    ctx = Context(test_files=("**/tests/**", "**/test_*.py"), packages=frozenset({"pkg"}))
    assert check([Change(path, status)], ctx) == {}


BASELINE = frozenset({"pkg/__init__.py", "pkg/calc.py", "pkg/tests/__init__.py", "pkg/tests/test_calc.py",
                      "lib/__init__.py", "lib/util.py", "vendor/simplejson/__init__.py", "tools/run.py"})


def baseline_ctx(**fields) -> Context:
    from agent_code.tasks.evidence import package_dirs
    from agent_code.tasks.protected import ancestors

    tests = [p for p in BASELINE if "/tests/" in p]
    return Context(test_files=("**/tests/**",), test_ancestors=ancestors(tests), packages=package_dirs(BASELINE),
                   tracked=BASELINE, **fields)


def test_which_directories_are_packages_is_judged_after_the_change():
    ctx = baseline_ctx()
    assert check([Change("pkg/statistics.py", "A")], ctx) == {}                 # pkg.statistics
    assert check([Change("pkg/__init__.py", "D"), Change("pkg/statistics.py", "A")], ctx) == {
        "pkg/__init__.py": "package above the tests", "pkg/statistics.py": "shadowing module"}
    assert check([Change("pkg/tests/__init__.py", "D")], ctx) == {"pkg/tests/__init__.py": "test file"}
    assert check([Change("pkg/__init__.py", "T", "100644", "120000")], ctx) == {
        "pkg/__init__.py": "package above the tests"}
    assert check([Change("pkg/__init__.py", "M")], ctx) == {}                  # editing it is code
    # a package that holds no test may stop being one, but then what is in it may shadow
    assert check([Change("lib/__init__.py", "D"), Change("lib/new.py", "A")], ctx) == {}
    assert check([Change("lib/__init__.py", "D"), Change("lib/json.py", "A")], ctx) == {"lib/json.py": "shadowing module"}
    assert check([Change("lib/json.py", "A")], ctx) == {}


def test_names_the_project_imports_but_lacks_are_not_planted():
    ctx = baseline_ctx(baseline_imports=frozenset({"simplejson", "calc_plugin"}))
    for path in ("simplejson.py", "simplejson/__init__.py", "simplejson/encoder.py", "tools/simplejson.py",
                 "calc_plugin.py"):
        assert check([Change(path, "A")], ctx) == {path: "shadowing module"}, path
    assert check([Change("pkg/simplejson.py", "A")], ctx) == {}                # pkg.simplejson
    assert check([Change("vendor/simplejson/speedups.py", "A")], ctx) == {}    # the project's own copy grows
    assert check([Change("helpers.py", "A"), Change("tools/other.py", "A")], ctx) == {}
    assert new_names([Change("simplejson/encoder.py", "A"), Change("pkg/x.py", "A"), Change("tools/y.py", "A"),
                      Change("vendor/simplejson/z.py", "A"), Change("README.md", "A")], ctx) == {
        "simplejson", "encoder", "y"}     # a new directory without __init__.py may be a sys.path entry


def test_modules_the_project_asks_for_at_any_depth():
    ctx = baseline_ctx()
    assert dotted_names(Change("pkg/_speedups.py", "A"), ctx) == ["pkg._speedups"]
    assert dotted_names(Change("pkg/sub/__init__.py", "A"), ctx) == ["pkg.sub"]
    assert dotted_names(Change("tools/x.py", "A"), ctx) == ["tools.x"]      # ("x" from tools/ is top-level)
    adds = [Change(p, "A") for p in ("pkg/_speedups.py", "pkg/_cext.py", "pkg/fresh.py", "lib/_c.py", "lib/wanted.py",
                                     "pkg/sub/__init__.py")]
    assert submodule_mentions(adds, ctx) == {"_speedups", "_cext", "fresh", "_c", "wanted", "sub"}
    mentions = [("pkg/__init__.py", "    from ._speedups import escape"),
                ("pkg/calc.py", "    import pkg._cext as impl"),
                ("pkg/calc.py", "# from . import fresh  (a comment)"),
                ("lib/util.py", "from . import wanted, other"),
                ("pkg/calc.py", "from . import _c"),                      # pkg's _c, not lib's
                ("pkg/tests/test_calc.py", "from pkg import fresh"),      # only a test asks: the task wants it
                ("tools/run.py", "PLUGINS = ['pkg.sub']")]
    assert asked_for(adds, ctx, mentions) == {"pkg/_speedups.py", "pkg/_cext.py", "lib/wanted.py", "pkg/sub/__init__.py"}
    ctx = replace(ctx, asked_for=frozenset({"pkg/_speedups.py"}), enumerating=frozenset({"lib"}))
    assert check([*adds, Change("lib/deeper/y.py", "A"), Change("lib/util.py", "M")], ctx) == {
        "pkg/_speedups.py": "module the project loads", "lib/_c.py": "module the project loads",
        "lib/wanted.py": "module the project loads", "lib/deeper/y.py": "module the project loads"}


def test_which_baseline_lines_import_a_name():
    lines = ["try:", "    import simplejson as json", "from pkg.ujson import x", "import os, yaml",
             "PLUGINS = ['calc_plugin', \"other.sub\"]", "# orjson is faster", "import_module('tomlkit')",
             "from . import msgpack"]
    names = {"simplejson", "ujson", "yaml", "calc_plugin", "other", "orjson", "tomlkit", "msgpack", "json5"}
    assert imported_names(lines, names) == {"simplejson", "yaml", "calc_plugin", "other", "tomlkit", "msgpack"}
    # a bare name in a config file is how a project lists what it imports by string; in code it is not
    pairs = [("pkg/plugins.cfg", "enabled = calc_extra, other_one"), ("setup.json", '{"x": 1}'),
             ("pkg/mod.py", "calc_thing = 1"), ("pkg/plugins.cfg", "# disabled = json5")]
    assert imported_names(pairs, {"calc_extra", "other_one", "calc_thing", "json5"}) == {"calc_extra", "other_one"}
    assert imported_names([("calc/plugins.txt", "calc_extra"), ("PLUGINS", "other_one"), ("README.md", "json5 is")],
                          {"calc_extra", "other_one", "json5"}) == {"calc_extra", "other_one"}


def test_what_the_runner_collects_comes_from_the_config_and_the_command():
    configs = {"pyproject.toml": '[tool.pytest.ini_options]\npython_files = ["check_*.py", "t_*.py"]\n'
                                 'addopts = ["--doctest-glob=*.rst"]\n',
               "pytest.ini": "[pytest]\npython_files =\n    spec_*.py\n    *_spec.py\n"
                             "addopts = -q --doctest-glob 'notes*.md'\n",
               "setup.cfg": "[tool:pytest]\npython_files = cfg_*.py\n", "tox.ini": "[tox]\nenvlist = py3\n",
               "pytest.toml": "this is [not toml"}
    assert set(configured_test_globs(configs)) == {"**/spec_*.py", "**/*_spec.py", "**/check_*.py", "**/t_*.py",
                                                   "**/cfg_*.py", "**/notes*.md", "**/*.rst"}
    # a config below the root (pytest's rootdir is where the arguments lead), one named with -c
    assert configured_test_globs({"sub/tox.ini": "[pytest]\npython_files = sub_*.py\n",
                                  "ci/weird.cfg": "[pytest]\npython_files = w_*.py\n"}) == ("**/w_*.py", "**/sub_*.py")
    assert config_files(["a/pytest.ini", "pyproject.toml", "src/x.py", "sub/setup.cfg"],
                        "python -m pytest -c ci/weird.cfg --config-file=./other.ini") == [
        "a/pytest.ini", "ci/weird.cfg", "other.ini", "pyproject.toml", "sub/setup.cfg"]
    assert configured_test_globs({"pytest.toml": '[pytest]\npython_files = "a_*.py"\n'}) == ("**/a_*.py",)
    assert configured_test_globs({"setup.cfg": "[tool:pytest]\naddopts = --doctest-modules\n"}) == ("**/*.py",)
    assert command_test_globs("python -m unittest discover -s src -p 'chk*.py'") == ("**/chk*.py",)
    assert command_test_globs("python -m unittest discover --pattern=x*.py") == ("**/x*.py",)
    assert command_test_globs("python -m pytest -p no:cacheprovider") == ()
    # the next spellings: attached short options, a separate long one
    assert command_test_globs("python -m unittest discover -pchk*.py") == ("**/chk*.py",)
    assert command_test_globs("pytest --doctest-glob '*.md' --override-ini python_files=v_*.py") == (
        "**/*.md", "**/v_*.py")
    assert config_files([], "pytest -cci/a.ini --config-file ci/b.ini --config-file=ci/c.ini") == [
        "ci/a.ini", "ci/b.ini", "ci/c.ini"]
    assert command_test_globs("bash -c 'python -m pytest --doctest-modules src'") == ("**/*.py",)
    assert command_test_globs("pytest -o python_files='check_*.py chk.py' --override-ini=addopts=--doctest-modules "
                              "-opython_files=o_*.py") == ("**/check_*.py", "**/chk.py", "**/*.py", "**/o_*.py")
    ctx = Context(collected=("**/check_*.py",))
    assert check([Change("a/check_x.py", "A"), Change("a/check_y.py", "M")], ctx) == {"a/check_x.py": "new test module"}
    # pytest's own default doctest glob is test*.txt: every new test* file is refused
    assert check([Change("test_notes.txt", "A"), Change("docs/testdata/x.json", "A"), Change("notes.txt", "A")],
                 Context()) == {"test_notes.txt": "new test module", "docs/testdata/x.json": "new test module"}


def test_the_grading_commands_scripts_and_what_they_run_are_the_grader():
    assert command_paths("bash -c 'sh ci/run_tests.sh -x && python check.py'") == {"ci/run_tests.sh", "check.py"}
    scripts = {"ci/run_tests.sh": "#!/bin/sh\n. ci/env.sh\nbash ci/lib/run\n", "ci/env.sh": "export X=1\n",
               "ci/lib/run": "exec python -m pytest -q tests \"$@\"  # don't stop\nsh ci/run_tests.sh\n"}
    assert grader_paths("bash ci/run_tests.sh", ["t/test_a.py::test_b"], scripts) == {
        "ci/run_tests.sh", "ci/env.sh", "ci/lib/run", "t/test_a.py"}
    assert grader_paths("bash ci/run_tests.sh", [], {}) == {"ci/run_tests.sh"}   # not read (yet): as named
    assert check([Change("package.json", "M"), Change("web/Justfile", "M")], Context()) == {
        "package.json": "runner config", "web/Justfile": "runner config"}
    # a command (or script) that computes paths or changes directory may run any script
    for command in ("bash ci/run.sh", "cd ci && bash run.sh", 'bash "$PWD/ci/run.sh"', "/testbed/run.sh",
                    ". \"$(dirname \"$0\")/lib.sh\"", "sh `pwd`/x.sh", "make test", "tox -e py311",
                    "find ci -name '*.sh' -exec sh {} ';'", "ls ci/steps | xargs -n1 sh", "for f in ci/*.sh; do sh $f; done",
                    "bash ci/run.sh 'tests/test_a.py::test_b[1]'", "npm test"):
        assert opaque(command) is (command != "bash ci/run.sh"), command
    assert not opaque("python -m pytest -q -rA -p no:cacheprovider tests && source ci/env")
    assert not opaque("python3 -m unittest -q && bash -c 'pytest -q tests'")
    for runs_python in ("python -m ci.check", "python ci/check.py", "python3 tests/runtests.py",
                        "python -c 'import ci.check'", "python3.11 -m tools"):
        assert opaque(runs_python), runs_python
    assert command_paths("python -m ci.check -v") == {"ci/check.py", "ci/check/__init__.py", "ci/check/__main__.py"}
    ctx = Context(opaque_grader=True)
    assert check([Change("ci/local.sh", "A"), Change("ci/local", "A"), Change("bin/tool.py", "M", "100755", "100755"),
                  Change("calc.py", "M"), Change("ci/settings.env", "M"), Change("pkg/new.py", "A")], ctx) == {
        "ci/local.sh": "grader file", "ci/local": "grader file", "bin/tool.py": "grader file",
        "ci/settings.env": "grader file"}                  # (`. "$HERE/ci/settings.env"` sources any name)
    assert check([Change("ci/local.sh", "A")], Context()) == {}


def test_data_the_tests_name_is_theirs():
    ctx = Context(test_files=("**/tests/**",))
    mentions = [("tests/test_calc.py", "CASES = json.loads((ROOT / 'data' / 'cases.json').read_text())"),
                ("tests/test_calc.py", 'GOLDEN = "golden/out.txt"'),
                ("calc.py", 'open("config.yaml")'),                          # the code's own data: not the tests'
                ("tests/test_calc.py", "# see notes.md"),                    # unquoted: not a file it reads
                ("tests/test_calc.py", "x = 'my-cases.json'"),               # another name that ends alike
                ("tests/test_calc.py", "for f in (ROOT / 'golden2').glob('*.txt'):")]   # a directory, whole
    patch = "+++ b/tests/test_new.py\n+    expected = load('extra.csv')\n"
    lines = lines_of_tests(mentions, ctx, patch)
    changes = [Change(p, "M") for p in ("data/cases.json", "golden/out.txt", "config.yaml", "notes.md", "extra.csv",
                                         "calc.py", "golden2/a.txt", "golden2/sub/expected", "golden22/b.txt")]
    assert named_by_tests(changes, lines) == {"data/cases.json", "golden/out.txt", "extra.csv", "golden2/a.txt",
                                              "golden2/sub/expected"}
    assert check([Change("data/cases.json", "M")], Context(test_data=frozenset({"data/cases.json"}))) == {
        "data/cases.json": "test data"}
    # named like expected values: data files whatever quotes them; modules when a test imports them
    named = [Change(p, "M") for p in ("pkg/add_cases.json", "pkg/golden_out.txt", "pkg/_expected.py", "pkg/results.py",
                                      "pkg/case.py", "pkg/showcases.md", "pkg/fixtures/__init__.py")]
    assert named_by_tests(named, ["from pkg._expected import ADD", "from pkg.results import Result",
                                  "from pkg import fixtures"]) == {
        "pkg/add_cases.json", "pkg/golden_out.txt", "pkg/_expected.py", "pkg/fixtures/__init__.py"}
    assert named_by_tests(named[2:3], ["import pkg"]) == set()            # a module no test imports: code


def test_what_the_setup_wrote_is_the_machines():
    from agent_code.tasks.evidence import setup_outputs

    assert setup_outputs(["deps/pytest/__init__.py", "deps/pytest/x/y.py", "build.txt", "pkg/_version.py"],
                         ["pkg/__init__.py", "calc.py"]) == {
        "deps/pytest/__init__.py", "deps/pytest/x/y.py", "build.txt", "pkg/_version.py", "deps/", "deps/pytest/",
        "deps/pytest/x/"}


def test_what_the_setup_left_untracked_is_the_machines():
    ctx = Context(untracked=frozenset({"deps/", "build.log"}))
    assert check([Change("deps/vendored/more.py", "A"), Change("build.log", "A"), Change("depsx/a.py", "A"),
                  Change("deps/a/b/c/d.py", "M"), Change("src/build.log", "A"), Change("deps", "A")], ctx) == {
        "deps/vendored/more.py": "environment", "build.log": "environment", "deps/a/b/c/d.py": "environment"}


def test_every_test_named_directory_above_a_test_is_support():
    assert dirs_of_tests(["pkg/testing/tests/test_a.py", "spec/test_b.py", "x/tests/unit/test_c.py", "pkg/calc.py"],
                     ("**/test_*.py",)) == {"pkg/testing/tests", "pkg/testing", "spec", "x/tests"}


def test_an_expected_failure_does_not_show_a_fix():
    results = {"f2p": {"XFAIL"}, "p2p": {"XFAIL"}, "f2p_xpass": {"XPASS"}, "f2p_mixed": {"PASSED", "XFAIL"},
               "p2p_ok": {"PASSED"}, "p2p_bad": {"PASSED", "FAILED"}}
    ids = list(results)
    assert decide(ids, results, strict=["f2p", "f2p_xpass", "f2p_mixed"]) == (
        ["p2p", "f2p_xpass", "p2p_ok"], ["f2p", "f2p_mixed", "p2p_bad"])
    assert decide(ids, results)[0] == ["f2p", "p2p", "f2p_xpass", "f2p_mixed", "p2p_ok"]


def test_links_submodules_grader_paths_and_installed_names():
    ctx = Context(grader_paths=command_paths("bash ci/run.sh && python check.py", ["t/test_a.py::test_b"]),
                  shadowable=default_shadowable(["requests"]))
    assert check([Change("link", "A", "000000", "120000"), Change("vendor", "A", "000000", "160000"),
                  Change("ci/run.sh", "M"), Change("check.py", "M"), Change("t/test_a.py", "M"),
                  Change("requests.py", "A")], ctx) == {
        "link": "symlink or submodule", "vendor": "symlink or submodule", "ci/run.sh": "grader file",
        "check.py": "grader file", "t/test_a.py": "grader file", "requests.py": "shadowing module"}
    assert len(RULES) == len({r.name for r in RULES})
