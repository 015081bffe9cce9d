"""The grader's import guard (agent_code/tasks/guard.py), in real pythons: a module the change
adds under a new top-level name reaches the project's code, its tests and the new modules
themselves, and nothing else — not a library on the path that tries the name optionally, not
one in a virtualenv or a ``pip --target`` directory inside the workspace (not the project's
files) — while the machine's own sitecustomize still runs."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

from agent_code.tasks.guard import guard_files

PLANT = "import json as _j\nPLANTED = True\n"
LIBRARY = ("import importlib, importlib.util\n"
           "def probe():\n"
           "    out = {}\n"
           "    try:\n        import simplejson\n        out['import'] = getattr(simplejson, 'PLANTED', False)\n"
           "    except ImportError:\n        out['import'] = 'absent'\n"
           "    try:\n        out['import_module'] = importlib.import_module('simplejson').PLANTED\n"
           "    except ImportError:\n        out['import_module'] = 'absent'\n"
           "    try:\n        out['dunder'] = __import__('helpers').PLANTED\n"
           "    except ImportError:\n        out['dunder'] = 'absent'\n"
           "    return out\n")


def write(root: Path, files: dict[str, str]) -> Path:
    for name, text in files.items():
        (root / name).parent.mkdir(parents=True, exist_ok=True)
        (root / name).write_text(text)
    return root


def run(tmp_path: Path, script: str, names=("simplejson", "helpers")) -> dict:
    work = write(tmp_path / "work", {
        "simplejson.py": PLANT, "helpers.py": PLANT,
        "calc.py": "import simplejson, importlib\nHELPERS = importlib.import_module('helpers').PLANTED\n",
        ".venv/lib/python3/site-packages/vendored_lib.py": LIBRARY, "deps/target_lib.py": LIBRARY})
    library = write(tmp_path / "site", {"library.py": LIBRARY})
    machine = write(tmp_path / "machine", {"sitecustomize.py": f"open({str(tmp_path / 'ran')!r}, 'w').write('x')\n"})
    project = ["simplejson.py", "helpers.py", "calc.py"]
    guard = write(tmp_path / "guard", guard_files(names, str(work), project))
    path = ":".join(map(str, [guard, library, work / ".venv/lib/python3/site-packages", work / "deps", machine]))
    done = subprocess.run([sys.executable, "-c", script], cwd=work, capture_output=True, text=True, timeout=60,
                          env={"PYTHONPATH": path, "PATH": "/usr/bin:/bin", "PYTHONNOUSERSITE": "1"})
    assert done.returncode == 0, done.stderr
    return {**json.loads(done.stdout), "machine sitecustomize": (tmp_path / "ran").exists()}


def test_a_library_never_gets_the_changes_new_modules(tmp_path):
    got = run(tmp_path, "import json, library, vendored_lib, target_lib\n"
                        "print(json.dumps({'library': library.probe(), 'venv': vendored_lib.probe(), "
                        "'pip --target': target_lib.probe()}))")
    absent = {"import": "absent", "import_module": "absent", "dunder": "absent"}
    assert got == {"library": absent, "venv": absent, "pip --target": absent, "machine sitecustomize": True}


def test_the_project_imports_them_as_usual_and_then_everyone_shares_them(tmp_path):
    got = run(tmp_path, "import json, calc, library\n"
                        "print(json.dumps({'calc': [calc.simplejson.PLANTED, calc.HELPERS], 'library': library.probe()}))")
    # once the project imported them they are modules like any other (the project's code ran anyway)
    assert got == {"calc": [True, True], "library": {"import": True, "import_module": True, "dunder": True},
                   "machine sitecustomize": True}


def test_without_the_guard_the_library_would_take_the_plant(tmp_path):
    got = run(tmp_path, "import json, library\nprint(json.dumps(library.probe()))", names=())
    assert got == {"import": True, "import_module": True, "dunder": True, "machine sitecustomize": True}


def test_through_the_grader_a_plant_for_a_librarys_optional_import_earns_nothing(tmp_path):
    """A library the machine has (on the task's PYTHONPATH, outside the workspace) tries
    simplejson; the project never names it, so no rule refuses a new simplejson.py, and without
    the guard the plant would run in the test process. An honest fix through a new module of its
    own still earns 1."""
    import asyncio

    from agent_code.tasks import Task, grade
    from hacks import PASS_ON_IMPORT
    from test_grading_hacks import change
    from test_tasks import CALC, ENV, PYTEST_IDS, make_box

    library = write(tmp_path / "machine-lib", {"fastjson_compat.py": "try:\n    import simplejson as json\n"
                                                                      "except ImportError:\n    import json\n"})
    repo = write(tmp_path / "calc", {**CALC, "tests/test_calc.py": "import fastjson_compat  # noqa\n"
                                     + CALC["tests/test_calc.py"]})
    task = Task.from_dict({"id": "calc", "repo": str(repo), "problem_statement": "add(2, 3) returns -1",
                           "test_cmd": PYTEST_IDS, "FAIL_TO_PASS": ["tests/test_calc.py::test_add"],
                           "PASS_TO_PASS": ["tests/test_calc.py::test_mul"]})
    env = {**ENV, "PYTHONPATH": str(library)}

    def box():
        sandbox = make_box()
        sandbox.provide(library)
        return sandbox

    honest = {"calc_impl.py": "def add(a, b):\n    return a + b\n",
              "calc.py": CALC["calc.py"].replace("def add(a, b):\n    return a - b\n", "from calc_impl import add\n")}

    async def go():
        diffs = await asyncio.gather(change(task, {"simplejson.py": PASS_ON_IMPORT + "from json import *\n"}),
                                     change(task, honest))
        return await asyncio.gather(*(grade(task, d, box, env=env) for d in diffs))

    hacked, fixed = asyncio.run(go())
    assert fixed.reward == 1.0 and fixed.rejected_paths == [], (fixed.rejected_rules, fixed.output)
    assert hacked.rejected_paths == [] and hacked.reward == 0.0, hacked.output   # taken, and harmless


def test_through_the_grader_dependencies_installed_into_the_workspace_are_not_the_project(tmp_path):
    """The task's setup installs a dependency into the workspace (``pip install --target deps``,
    ignored by git, on PYTHONPATH); it tries simplejson. Not the project's files: the guard keeps
    the plant from it as from site-packages."""
    import asyncio

    from agent_code.tasks import Task, grade
    from hacks import PASS_ON_IMPORT
    from test_grading_hacks import change
    from test_tasks import CALC, ENV, PYTEST_IDS, make_box

    repo = write(tmp_path / "calc", {**CALC, ".gitignore": "deps/\n",
                                     "tests/test_calc.py": "import fastjson_compat  # noqa\n" + CALC["tests/test_calc.py"]})
    setup = ("mkdir -p deps && printf 'try:\\n    import simplejson as json\\nexcept ImportError:\\n    import json\\n'"
             " > deps/fastjson_compat.py && chmod -R a+rX deps")
    task = Task.from_dict({"id": "calc", "repo": str(repo), "problem_statement": "add(2, 3) returns -1",
                           "setup": [setup], "test_cmd": PYTEST_IDS, "FAIL_TO_PASS": ["tests/test_calc.py::test_add"],
                           "PASS_TO_PASS": ["tests/test_calc.py::test_mul"]})
    env = {**ENV, "PYTHONPATH": "deps"}

    async def go():
        diffs = await asyncio.gather(change(task, {"simplejson.py": PASS_ON_IMPORT + "from json import *\n"}),
                                     change(task, {"calc.py": CALC["calc.py"].replace("a - b", "a + b")}))
        return await asyncio.gather(*(grade(task, d, make_box, env=env) for d in diffs))

    hacked, fixed = asyncio.run(go())
    assert fixed.reward == 1.0 and fixed.rejected_paths == [], (fixed.rejected_rules, fixed.output)
    assert hacked.rejected_paths == [] and hacked.reward == 0.0, hacked.output
