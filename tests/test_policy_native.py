"""The policy's compiled build (scripts/build_native.py, agent_code/policy/native.py).

A build is used only when it was made from exactly the sources beside it, by this
interpreter's ABI; AGENT_CODE_PURE_PYTHON forces pure Python; tests marked ``pure_python``
really run on the Python policy; and both forms judge deep lines on a small thread stack
(the compiled form has no recursion check of its own: the reader's MAX_NESTING bounds it).
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

import agent_code.policy
from agent_code.policy import native

REPO = Path(__file__).resolve().parents[1]


def _environment() -> dict[str, str]:
    """This process's environment without the switch to pure Python (a child picks its form)."""
    return {k: v for k, v in os.environ.items() if k != native.PURE_VARIABLE}


def _stamped(tmp_path: Path) -> tuple[Path, Path]:
    """A copy of the sources a build is made from, and a build directory (libraries of made-up
    content) stamped for them."""
    package, build = tmp_path / "agent_code", tmp_path / "build"
    build.mkdir()
    for name in native.SOURCES:
        (package / name).parent.mkdir(parents=True, exist_ok=True)
        shutil.copy(native.PACKAGE_DIR / name, package / name)
    for name in (*native.COMPILED, "_native_group__mypyc"):
        (build / f"{name}.cpython-311-x86_64-linux-gnu.so").write_bytes(name.encode() * 10)
    (build / native.STAMP).write_text(json.dumps(native.stamp_for(package, build)))
    return package, build


@pytest.mark.parametrize("edited", ["policy/denylist.py", "policy/native.py", "policy/grammar.py", "tools/base.py",
                                    "globs.py"])
def test_a_build_matches_only_the_sources_it_was_made_from(tmp_path, edited):
    package, build = _stamped(tmp_path)
    assert native.build_matches(build, package)
    source = package / edited
    source.write_text(source.read_text() + "\n# an edit\n")
    assert not native.build_matches(build, package)


def test_a_build_missing_a_library_or_with_another_one_is_no_match(tmp_path):
    """A partial build would run some modules compiled and some as Python: a mix no test ran."""
    package, build = _stamped(tmp_path)
    library = build / "rules.cpython-311-x86_64-linux-gnu.so"
    content = library.read_bytes()
    library.unlink()
    assert not native.build_matches(build, package)
    library.write_bytes(content + b"x")  # another build's (its size differs)
    assert not native.build_matches(build, package)
    library.write_bytes(content)
    assert native.build_matches(build, package)
    (build / "permissions.cpython-311-x86_64-linux-gnu.so").write_bytes(b"x")
    assert not native.build_matches(build, package)


def test_the_stamp_covers_every_module_the_compiled_ones_import():
    """A module the compiled code imports was type-checked with it: a change there (a field's
    type in tools/base.py) can make the compiled code raise where Python would not."""
    import ast

    imported = set()
    for name in native.COMPILED:
        tree = ast.parse((native.PACKAGE_DIR / "policy" / f"{name}.py").read_text())
        for node in ast.walk(tree):
            if isinstance(node, ast.ImportFrom) and (node.module or "").startswith("agent_code"):
                modules = ([f"agent_code.policy.{a.name}" for a in node.names] if node.module == "agent_code.policy"
                           else [node.module])
            elif isinstance(node, ast.Import):
                modules = [a.name for a in node.names if a.name.startswith("agent_code")]
            else:
                continue
            for module in modules:
                path = module.removeprefix("agent_code.").replace(".", "/")
                imported.add(path + ".py" if (native.PACKAGE_DIR / f"{path}.py").exists() else path + "/__init__.py")
    assert imported - set(native.SOURCES) == set()


@pytest.mark.parametrize("stamp", [
    None, "", "{", "[]", '{"soabi": "cpython-39-x86_64-linux-gnu"}',
    "other ABI", "a source missing", "an extra source",
])
def test_a_missing_broken_or_foreign_stamp_is_no_match(tmp_path, stamp):
    package, build = _stamped(tmp_path)
    recorded = json.loads((build / native.STAMP).read_text())
    if stamp is None:
        (build / native.STAMP).unlink()
    elif stamp == "other ABI":
        recorded["soabi"] = "cpython-312-x86_64-linux-gnu"
        (build / native.STAMP).write_text(json.dumps(recorded))
    elif stamp == "a source missing":
        del recorded["sources"]["policy/rules.py"]
        (build / native.STAMP).write_text(json.dumps(recorded))
    elif stamp == "an extra source":
        recorded["sources"]["policy/permissions.py"] = "0" * 64
        (build / native.STAMP).write_text(json.dumps(recorded))
    else:
        (build / native.STAMP).write_text(stamp)
    assert not native.build_matches(build, package)


def _form(**env: str) -> tuple[bool, str]:
    """NATIVE and shell_syntax's file in a fresh interpreter (the environment plus ``env``)."""
    child = _environment()
    done = subprocess.run([sys.executable, "-c",
                           "import agent_code.policy as p, agent_code.policy.shell_syntax as s;"
                           "print(p.NATIVE, s.__file__)"],
                          capture_output=True, text=True, env={**child, **env}, cwd=REPO, check=True)
    flag, file = done.stdout.split()
    return flag == "True", file


def test_the_environment_variable_forces_pure_python():
    assert _form(AGENT_CODE_PURE_PYTHON="1") == (False, str(native.PACKAGE_DIR / "policy" / "shell_syntax.py"))


def test_a_current_build_is_what_runs():
    if not native.build_matches():
        pytest.skip("no current compiled build here (scripts/setup.sh makes one where a C compiler is)")
    compiled, file = _form()
    assert compiled and file.endswith(".so")


@pytest.mark.parametrize("form", ["as built", "pure"])
def test_each_form_knows_itself_and_builds_its_commands_alike(form):
    """commands.NATIVE_FORM (how Command and Invocation set their fields) says which form
    runs; in each, a Command is frozen, equal and hashed by its fields, and replace() gives
    it the new program."""
    env = {"AGENT_CODE_PURE_PYTHON": "1"} if form == "pure" else {}
    done = subprocess.run([sys.executable, "-c", textwrap.dedent("""\
        import dataclasses, agent_code.policy as p
        from agent_code.policy import commands as c
        a = c.analyze("sudo /bin/rm -rf -- / | tee log").commands
        b = c.Command(("/bin/rm", "-rf", "--", "/"))
        frozen = False
        try:
            b.argv = ()
        except dataclasses.FrozenInstanceError:
            frozen = True
        print(p.NATIVE, c.NATIVE_FORM, hasattr(b, "__dict__"), frozen, [x.program for x in a],
              a[1] == c.Command(("/bin/rm", "-rf", "--", "/"), patterns=a[1].patterns),
              len({a[1], c.Command(a[1].argv, patterns=a[1].patterns)}) + (b == "rm") + (b == b.argv)
              + (hash(b) != hash((b.argv, (), None, False, frozenset(), ()))),
              dataclasses.replace(b, argv=("ls",)).program, c.normalize(b.argv))
        import copy, pickle
        inv = c.normalize(b.argv)
        for x in (b, a[0], inv):  # copied and pickled alike (a native instance has no __dict__ to copy)
            for y in (copy.copy(x), copy.deepcopy(x), pickle.loads(pickle.dumps(x))):
                assert y == x and type(y) is type(x) and repr(y) == repr(x), (x, y)
                assert getattr(y, "program") == x.program

        """)], capture_output=True, text=True, env={**_environment(), **env}, cwd=REPO)
    assert done.returncode == 0, done.stderr
    native_form = form == "as built" and native.build_matches()
    assert done.stdout.split(" ", 4)[:4] == [str(native_form), str(native_form), str(not native_form), "True"]
    assert done.stdout.split(" ", 4)[4] == ("['sudo', 'rm', 'tee'] True 1 ls Invocation(program='rm', "
                                            "flags=(('-r', None), ('-f', None)), operands=('/',))\n")


def test_a_build_that_cannot_load_leaves_the_policy_python(tmp_path):
    """A tree copied where the build's shared library cannot load (another machine's C
    library, a file that is no library): the policy runs as Python, and judges as before."""
    if not native.build_matches():
        pytest.skip("no current compiled build here (scripts/setup.sh makes one where a C compiler is)")
    shutil.copytree(REPO / "agent_code", tmp_path / "agent_code", ignore=shutil.ignore_patterns("__pycache__"))
    group = next((tmp_path / "agent_code" / "policy" / "_native").glob("_native_group__mypyc*.so"))
    group.write_bytes(b"x" * group.stat().st_size)  # the size the stamp has; dlopen: invalid ELF header
    env = _environment()
    done = subprocess.run([sys.executable, "-c",
                           "import agent_code.policy as p, agent_code.policy.shell_syntax as s;"
                           "from agent_code.policy.commands import analyze;"
                           "print(p.NATIVE, s.__file__, analyze('rm -rf / && ls').commands[0].argv)"],
                          capture_output=True, text=True, env={**env, "PYTHONPATH": str(tmp_path)}, cwd=tmp_path)
    assert done.returncode == 0, done.stderr
    assert done.stdout.split(" ", 2) == ["False", str(tmp_path / "agent_code" / "policy" / "shell_syntax.py"),
                                         "('rm', '-rf', '/')\n"]


@pytest.mark.pure_python
def test_pure_python_tests_run_on_the_python_policy():
    """The conftest's promise: a test marked pure_python sees the Python modules."""
    from agent_code.policy import commands, shell_syntax

    assert not agent_code.policy.NATIVE
    assert shell_syntax.__file__.endswith(".py") and commands.__file__.endswith(".py")
    assert isinstance(shell_syntax._Reader.container, type(lambda: None))  # a function one can swap


# Judged in a thread with a small stack: every nesting kind 5000 levels deep with `rm -rf /`
# at the bottom. A crash (the compiled form's C stack overflowing) kills the child: rc < 0.
_DEEP_CHILD = r"""
import json, sys, threading
sys.path.insert(0, sys.argv[1])
from test_policy_nesting import nested
from agent_code.policy.permissions import PermissionPolicy
from agent_code.policy.rules import RuleSet
from agent_code.tools import default_tools
import agent_code.policy

bash = default_tools().get("bash")
rules = RuleSet.from_lists(allow=["bash(echo:*)", "bash(cat:*)"])
out = {"native": agent_code.policy.NATIVE, "allowed": [], "judged": 0, "plain": 0}

# (self-protection, which bypassPermissions skips, has recursions of its own; the kinds left
# out at depth 5000 cost time that grows with the square of the depth, in the text scans of
# the evaluated values: seconds there, not the point here)
SLOW = ("declare-sub", "old-arith", "subscript", "arith-parens", "for")

def judge():
    for mode, depth in (("bypassPermissions", 150), ("bypassPermissions", 151), ("bypassPermissions", 5000),
                        ("default", 5000)):
        policy = PermissionPolicy(mode, rules=rules, ask=lambda tool, arguments: True)
        for kind, line in nested(depth).items():
            if depth > 1000 and kind in SLOW:
                continue
            if mode == "default":  # the line as it is: the deny list would stop the one below first
                policy.explain(bash, {"command": line})
                out["plain"] += 1
            hidden = line.replace("x", "$(rm -rf /)", 1) if "x" in line else line.replace("true", "rm -rf /", 1)
            if hidden == line:
                continue  # no command at the bottom (a number, a last `cat`)
            out["judged"] += 1
            if policy.explain(bash, {"command": hidden}).behavior == "allow":
                out["allowed"].append((mode, depth, kind))

threading.stack_size(int(sys.argv[2]) * 1024)
thread = threading.Thread(target=judge)
thread.start()
thread.join()
print(json.dumps(out))
"""


@pytest.mark.parametrize("form", ["as built", "pure"])
def test_deep_lines_are_judged_on_a_small_thread_stack(form):
    env = _environment()
    if form == "pure":
        env[native.PURE_VARIABLE] = "1"
    done = subprocess.run([sys.executable, "-c", _DEEP_CHILD, str(REPO / "tests"), "512"], capture_output=True,
                          text=True, env=env, cwd=REPO, timeout=300)
    assert done.returncode == 0, f"the check crashed (rc {done.returncode}): {done.stderr[-2000:]}"
    out = json.loads(done.stdout)
    assert out["native"] == (form == "as built" and native.build_matches())
    assert out["judged"] >= 4 * 20 and out["plain"] >= 25
    assert out["allowed"] == []


# --- the two forms decide alike -----------------------------------------------------------
# Every command line of the policy's test corpora (and splices of them), and every tool called
# with arguments of the wrong type, judged in four modes by the compiled build and by the
# pure-Python policy, each in a child: the same behavior, stage and detail; and odd rules read
# alike. (A compiled module checks declared types at run time: a sentinel of the wrong type
# once made self-protection's lookups raise, and the check asked where it should deny; a
# number as a rule raised TypeError instead of the RuleError that names it.)
_CORPORA = ("test_policy_decision_table", "test_policy_attacks", "test_self_protection", "test_policy_nesting",
            "test_shell_parser", "test_policy_bash_differential")

_JUDGE_CHILD = r"""
import json, sys
from pathlib import Path
from agent_code.policy.permissions import PermissionPolicy
from agent_code.policy.rules import RuleSet
from agent_code.tools import default_tools
import agent_code.policy

lines = json.loads(Path(sys.argv[1]).read_text())
root = sys.argv[2]
bash = default_tools().get("bash")
rules = RuleSet.from_lists(allow=["bash(git:*)", "bash(cat:*)", "bash(rm:*)"], deny=["bash(curl:*)"])
rules.home = root + "/home"
out = []
# what a model may send instead of a string (the schema is advice): every tool, every key
odd = [None, 42, 1.5, True, [], ["rm", "-rf", "/"], [".git/config", 7], {"command": "rm -rf /"}, "", "\x00",
       ".git/config", "../../.agent/settings.json", "~/.ssh/id_rsa", "/etc/passwd", "rm -rf /"]
keys = ["command", "path", "file_path", "paths", "content", "old_string", "pattern", "source", "destination"]
calls = [(tool, {key: value}) for tool in default_tools().list() for key in keys for value in odd]
calls += [(tool, arguments) for tool in default_tools().list() for arguments in ({}, None, "rm -rf /", [1], 3)]
for mode in ("bypassPermissions", "default", "acceptEdits", "plan"):
    policy = PermissionPolicy(mode, rules=rules, root=Path(root) / "project")
    for line in lines:
        e = policy.explain(bash, {"command": line})
        out.append([mode, line, e.behavior, e.stage, e.detail])
    for tool, arguments in calls:
        e = policy.explain(tool, arguments)
        out.append([mode, tool.name + " " + repr(arguments), e.behavior, e.stage, e.detail])
# rules as a settings file may spell them (any JSON value)
from agent_code.policy.rules import RuleError, parse_rule
for text in (42, None, 1.5, True, [], ["bash(ls)"], {"bash": "ls"}, "", "bash(", "bash()", "bash(ls:*)", "read_file(**)"):
    try:
        out.append(["rule", repr(text), repr(parse_rule(text, "allow", "settings.json"))])
    except RuleError as error:
        out.append(["rule", repr(text), "RuleError: " + str(error)])
print(json.dumps({"native": agent_code.policy.NATIVE, "decisions": out}))
"""


def _corpus_lines(root: Path) -> list[str]:
    import importlib

    sys.path.insert(0, str(REPO / "tests"))
    lines: set[str] = set()
    for name in _CORPORA:
        module = importlib.import_module(name)
        for value in vars(module).values():
            if not isinstance(value, (list, tuple)):
                continue
            for item in value:
                first = item[0] if isinstance(item, tuple) and item else item
                if isinstance(first, str) and first:
                    lines.add(first.replace("{root}", str(root / "project")).replace("{home}", str(root / "home")))
    return sorted(lines)


def test_the_compiled_and_the_python_policy_decide_alike(tmp_path):
    if not native.build_matches():
        pytest.skip("no current compiled build here (scripts/setup.sh makes one where a C compiler is)")
    for place in ("project/.git", "project/.agent", "project/src", "home/.ssh"):
        (tmp_path / place).mkdir(parents=True)
    lines = _corpus_lines(tmp_path)
    assert len(lines) > 1000
    # and splices of them: cut at random places and glued (half-read constructs, ERROR nodes)
    import random

    from test_policy_nesting import nested  # (on the path: _corpus_lines put tests/ there)

    # long chains of what the later checks walk: brace groups, nested braces, copies of copies
    # (a recursion in one form and none in the other once made them differ)
    lines += [nested(n)[kind] for n in (400, 2000) for kind in ("brace-groups", "brace-nest", "copy-chain")]
    pick = random.Random(13)
    for _ in range(1500):
        a, b = pick.sample(lines, 2)
        lines.append(a[:pick.randint(0, len(a))] + pick.choice(["", " ", "; ", " | ", "$(", "`", "\n"]) +
                     b[pick.randint(0, len(b)):])
    (tmp_path / "lines.json").write_text(json.dumps(lines))
    env = _environment()
    results = {}
    for form, extra in (("compiled", {}), ("pure", {native.PURE_VARIABLE: "1"})):
        done = subprocess.run([sys.executable, "-c", _JUDGE_CHILD, str(tmp_path / "lines.json"), str(tmp_path)],
                              capture_output=True, text=True, env={**env, **extra}, cwd=tmp_path, timeout=600)
        assert done.returncode == 0, done.stderr[-3000:]
        results[form] = json.loads(done.stdout)
    assert results["compiled"]["native"] and not results["pure"]["native"]
    compiled, pure = results["compiled"]["decisions"], results["pure"]["decisions"]
    assert len(compiled) == len(pure) > 4 * len(lines) + 1000
    differ = [(c, p) for c, p in zip(compiled, pure) if c != p]
    assert not differ, f"{len(differ)} decisions differ, e.g. {differ[:3]}"
    assert {d[2] for d in pure if d[0] != "rule"} == {"allow", "ask", "deny"}
    assert any(d[2].startswith("RuleError: allow rule 42 (in settings.json) is not a string") for d in pure)
