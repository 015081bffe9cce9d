"""The file tools through the registry, as the agent calls them: read_file, list_files,
glob, project_tree (and grep in the escape matrix), plus echo, system_date and the
registry's error handling."""

from __future__ import annotations

import os
import re
from pathlib import Path
from typing import Any

import pytest

from agent_code.globs import glob_regex

from agent_code.tools import ToolContext, default_tools, files, paths
from agent_code.types import ToolCall, ToolResult

SECRET = "TOPSECRET"


@pytest.fixture
def tree(tmp_path: Path) -> Path:
    outside = tmp_path / "outside"
    outside.mkdir()
    (outside / "secret.txt").write_text(SECRET + "\n")
    (outside / "secret.py").write_text(SECRET + "\n")
    root = tmp_path / "root"
    (root / "src" / "pkg").mkdir(parents=True)
    (root / "src" / "pkg" / "__init__.py").write_text("")
    (root / "src" / "pkg" / "mod.py").write_text("def f():\n    return 1\n")
    (root / "src" / "main.py").write_text("import pkg\n")
    (root / "src" / "notes.txt").write_text("notes\n")
    (root / "README.md").write_text("# demo\n")
    (root / "setup.py").write_text("setup()\n")
    (root / "node_modules" / "dep").mkdir(parents=True)
    (root / "node_modules" / "dep" / "x.py").write_text("ignored\n")
    (root / "src" / "__pycache__").mkdir()
    (root / "src" / "__pycache__" / "main.cpython-311.pyc").write_bytes(b"\x00\x01")
    (root / "link_file").symlink_to(outside / "secret.txt")
    (root / "link_dir").symlink_to(outside)
    (root / "link_main.py").symlink_to(root / "src" / "main.py")
    (root / "link_src").symlink_to(root / "src")
    return root


@pytest.fixture
def run(tree: Path):
    registry = default_tools()
    ctx = ToolContext(tree)

    def call(name: str, arguments: Any = None, **kwargs: Any) -> ToolResult:
        args = arguments if arguments is not None else kwargs
        return registry.run(ToolCall("call_1", name, args), ctx)

    return call


def ok(result: ToolResult) -> str:
    assert not result.is_error, result.content
    return result.content


def err(result: ToolResult) -> str:
    assert result.is_error, result.content
    return result.content


# --- registry -------------------------------------------------------------------------

def test_default_tools_are_registered_with_kinds_and_descriptions() -> None:
    registry = default_tools()
    assert {t.name: t.kind for t in registry.list()} == {
        "echo": "read", "system_date": "read", "read_file": "read", "list_files": "read",
        "glob": "read", "grep": "read", "project_tree": "read",
        "edit_file": "edit", "write_file": "edit", "bash": "execute", "skill": "read"}
    for t in registry.list():
        assert t.read_only == (t.kind == "read")
        assert len(t.description) > 40
        for name, spec in t.input_schema["properties"].items():
            assert spec.get("description"), f"{t.name}.{name} has no description"
    assert default_tools() is not registry  # a fresh registry each time


def test_unknown_tool_and_invalid_arguments(run) -> None:
    assert err(run("rm_rf")).startswith("unknown tool 'rm_rf'; available tools: echo, system_date")
    assert err(run("read_file")) == "invalid arguments for read_file: missing required argument 'path'"
    assert err(run("read_file", path="README.md", offset="2")) == (
        "invalid arguments for read_file: argument 'offset' must be of type integer, got str")
    assert err(run("echo", text="x", loud=True)) == (
        "invalid arguments for echo: unknown argument 'loud' (allowed: text)")
    assert err(run("echo", ["x"])) == "invalid arguments for echo: arguments must be a JSON object, got list"


# --- echo / system_date ---------------------------------------------------------------

def test_echo(run) -> None:
    assert ok(run("echo", text="héllo\nworld")) == "héllo\nworld"


def test_system_date(run) -> None:
    assert re.fullmatch(r"\d{4}-\d\d-\d\d \d\d:\d\d:\d\d UTC", ok(run("system_date", timezone="UTC")))
    assert re.fullmatch(r"\d{4}-\d\d-\d\d \d\d:\d\d:\d\d CST",
                        ok(run("system_date", timezone="Asia/Shanghai")))
    assert re.fullmatch(r"\d{4}-\d\d-\d\d \d\d:\d\d:\d\d \S+", ok(run("system_date")))
    assert err(run("system_date", timezone="Mars/Base")) == "unknown timezone 'Mars/Base'"
    assert err(run("system_date", timezone="../../etc/passwd")) == "unknown timezone '../../etc/passwd'"
    assert err(run("system_date", timezone="")) == "unknown timezone ''"


# --- confinement: every file tool, every kind of escape --------------------------------

PATH_TOOLS = {
    "read_file": {},
    "list_files": {},
    "glob": {"pattern": "**/*"},
    "grep": {"pattern": "TOP"},
    "project_tree": {},
}


@pytest.mark.parametrize("tool_name", list(PATH_TOOLS))
@pytest.mark.parametrize("escape", ["../outside", "../outside/secret.txt", "src/../../outside",
                                    "ABS_DIR", "ABS_FILE", "link_file", "link_dir",
                                    "link_dir/secret.txt"])
def test_every_file_tool_refuses_escapes(run, tree: Path, tool_name: str, escape: str) -> None:
    path = {"ABS_DIR": str(tree.parent / "outside"),
            "ABS_FILE": str(tree.parent / "outside" / "secret.txt")}.get(escape, escape)
    content = err(run(tool_name, path=path, **PATH_TOOLS[tool_name]))
    assert content == f"path {path!r} is outside the working directory {tree}"


@pytest.mark.parametrize("tool_name", ["list_files", "glob", "grep", "project_tree"])
def test_walks_never_show_what_lies_outside(run, tool_name: str) -> None:
    content = ok(run(tool_name, **PATH_TOOLS[tool_name]))
    assert SECRET not in content
    assert "secret" not in content


def test_absolute_path_inside_is_fine(run, tree: Path) -> None:
    assert ok(run("read_file", path=str(tree / "README.md"))) == "     1\t# demo"
    assert ok(run("list_files", path=str(tree / "src" / "pkg"))) == "__init__.py\nmod.py"


# --- read_file ------------------------------------------------------------------------

def test_read_file_numbers_lines(run) -> None:
    assert ok(run("read_file", path="src/pkg/mod.py")) == "     1\tdef f():\n     2\t    return 1"


def test_read_file_offset_and_limit(run, tree: Path) -> None:
    (tree / "long.txt").write_text("".join(f"{i}\n" for i in range(1, 2121)))
    out = ok(run("read_file", path="long.txt"))
    lines = out.split("\n")
    assert len(lines) == 2001
    assert lines[0] == "     1\t1"
    assert lines[1999] == "  2000\t2000"
    assert lines[2000] == "… 120 more lines; call again with offset=2001"
    assert ok(run("read_file", path="long.txt", offset=2001)).split("\n")[-1] == "  2120\t2120"
    assert ok(run("read_file", path="long.txt", offset=5, limit=2)) == (
        "     5\t5\n     6\t6\n… 2114 more lines; call again with offset=7")
    assert ok(run("read_file", path="long.txt", offset=2120, limit=5)) == "  2120\t2120"
    assert err(run("read_file", path="long.txt", offset=2121)) == (
        "offset 2121 is past the end of 'long.txt', which has 2120 lines")
    assert err(run("read_file", path="long.txt", offset=0)) == (
        "offset must be 1 or more (the first line is line 1)")
    assert err(run("read_file", path="long.txt", limit=0)) == "limit must be 1 or more"


def test_read_file_stops_at_a_line_before_the_result_limit(run, tree: Path) -> None:
    # 2000 lines of 100 characters would be ~214,000 characters: the registry would cut
    # it mid-line; read_file stops early instead and says where to continue
    (tree / "wide.txt").write_text(("y" * 100 + "\n") * 2000)
    out = ok(run("read_file", path="wide.txt"))
    assert len(out) <= files.MAX_RESULT_CHARS
    *rows, note = out.split("\n")
    assert len(rows) == files.READ_BUDGET_CHARS // 108
    assert rows[-1] == f"{len(rows):>6}\t" + "y" * 100
    assert note == f"… {2000 - len(rows)} more lines; call again with offset={len(rows) + 1}"


def test_read_file_edge_cases(run, tree: Path) -> None:
    (tree / "empty.txt").write_bytes(b"")
    assert ok(run("read_file", path="empty.txt")) == "(empty file: empty.txt)"
    (tree / "wide.txt").write_text("x" * 2500 + "\nshort\n")
    assert ok(run("read_file", path="wide.txt")) == (
        "     1\t" + "x" * 2000 + "… [500 more characters on this line]\n     2\tshort")
    (tree / "latin1.txt").write_bytes(b"caf\xe9\r\nok")
    assert ok(run("read_file", path="latin1.txt")) == "     1\tcaf\ufffd\n     2\tok"
    assert ok(run("read_file", path="link_main.py")) == "     1\timport pkg"


def test_read_file_refusals(run, tree: Path) -> None:
    (tree / "img.png").write_bytes(b"\x89PNG\r\n\x1a\n\x00\x00\x00\rIHDR")
    assert err(run("read_file", path="img.png")) == "'img.png' is a binary file; read_file only shows text"
    (tree / "huge.log").write_bytes(b"a" * (paths.MAX_FILE_BYTES + 1))
    assert err(run("read_file", path="huge.log")) == (
        "'huge.log' is too large to read (5.0 MiB; the limit is 5.0 MiB); "
        "use grep to find the lines you need")
    assert err(run("read_file", path="src")) == "'src' is a directory, not a file"
    assert err(run("read_file", path="nope.py")) == "no such file: 'nope.py'"
    os.mkfifo(tree / "pipe")
    assert err(run("read_file", path="pipe")) == "'pipe' is not a regular file"


# --- list_files -----------------------------------------------------------------------

def test_list_files(run, tree: Path) -> None:
    (tree / "dangling").symlink_to(tree / "gone.txt")
    assert ok(run("list_files")) == "\n".join([
        "README.md",
        "dangling -> gone.txt (missing)",
        "link_dir -> (outside working directory)",
        "link_file -> (outside working directory)",
        "link_main.py -> src/main.py",
        "link_src -> src/",
        "node_modules/",  # ignored dirs are still listed
        "setup.py",
        "src/",
    ])
    assert ok(run("list_files", path="src")) == "__pycache__/\nmain.py\nnotes.txt\npkg/"
    assert ok(run("list_files", path="link_src/pkg")) == "__init__.py\nmod.py"
    (tree / "void").mkdir()
    assert ok(run("list_files", path="void")) == "(empty directory)"
    assert err(run("list_files", path="README.md")) == "'README.md' is not a directory"


def test_list_files_cap(run, tree: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(files, "MAX_LIST_ENTRIES", 3)
    assert ok(run("list_files", path="src")) == (
        "__pycache__/\nmain.py\nnotes.txt\n… 1 more entries (showing first 3)")


# --- glob -----------------------------------------------------------------------------

@pytest.mark.parametrize("pattern,path,expected", [
    ("**/*.py", ".", ["link_main.py", "setup.py", "src/main.py", "src/pkg/__init__.py",
                      "src/pkg/mod.py"]),
    ("*.py", ".", ["link_main.py", "setup.py"]),
    ("src/*.py", ".", ["src/main.py"]),
    ("./src/*.txt", ".", ["src/notes.txt"]),
    ("src/**", ".", ["src/main.py", "src/notes.txt", "src/pkg/__init__.py", "src/pkg/mod.py"]),
    ("*.py", "src", ["src/main.py"]),
    ("**/*.{md,txt}", ".", ["README.md", "src/notes.txt"]),
    ("**/[m]*.py", ".", ["src/main.py", "src/pkg/mod.py"]),
    ("**/[!m_]*.py", ".", ["link_main.py", "setup.py"]),
    ("**/[!ls_]*.py", "src", ["src/main.py", "src/pkg/mod.py"]),
    ("src/pkg/mo?.py", ".", ["src/pkg/mod.py"]),
    ("**/x.py", ".", []),                      # node_modules is skipped
    ("**/*.pyc", ".", []),                     # __pycache__ is skipped
    ("link_src/*.py", ".", []),                # symlinked dirs are not entered
    ("*.py", "link_src/pkg", ["src/pkg/__init__.py", "src/pkg/mod.py"]),
])
def test_glob(run, pattern: str, path: str, expected: list[str]) -> None:
    out = ok(run("glob", pattern=pattern, path=path))
    if expected:
        assert out == "\n".join(expected)
    else:
        assert out.startswith(f"no files match {pattern!r}")


def test_glob_messages(run, tree: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    assert ok(run("glob", pattern="*.rs")) == "no files match '*.rs'"
    assert ok(run("glob", pattern="*.rs", path="src")) == "no files match '*.rs' in src"
    monkeypatch.setattr(files, "MAX_GLOB_RESULTS", 2)
    assert ok(run("glob", pattern="**/*.py")) == (
        "link_main.py\nsetup.py\n… 3 more files (showing first 2); narrow the pattern")


@pytest.mark.parametrize("pattern", ["../*", "../outside/*.txt", "src/../../*", "**/../**"])
def test_glob_refuses_dotdot(run, pattern: str) -> None:
    assert err(run("glob", pattern=pattern)) == (
        f"glob pattern {pattern!r} contains '..'; patterns may not leave the working directory")


@pytest.mark.parametrize("pattern", ["/etc/*", "/**/*.py", "C:/x/*"])
def test_glob_refuses_absolute(run, pattern: str) -> None:
    assert err(run("glob", pattern=pattern)).startswith(f"glob pattern {pattern!r} is absolute")


def test_glob_regex_translation() -> None:
    def m(glob: str, path: str) -> bool:
        return re.fullmatch(glob_regex(glob), path) is not None
    assert m("**/*.py", "a.py") and m("**/*.py", "a/b/c.py") and not m("**/*.py", "a.pyc")
    assert m("a/**/b", "a/b") and m("a/**/b", "a/x/y/b") and not m("a/**/b", "ab")
    assert not m("*.py", "a/b.py") and m("*", ".hidden")
    assert m("a**b", "axxb") and not m("a**b", "a/b")
    assert m("{a,b/{c,d}}.txt", "b/d.txt") and not m("{a,b}.txt", "c.txt")
    assert m("[a-c]x", "bx") and not m("[!a-c]x", "bx") and not m("[!a-c]x", "/x")
    assert m(r"\*.txt", "*.txt") and not m(r"\*.txt", "a.txt")
    assert m("[unclosed", "[unclosed") and m("{a", "{a")
    assert m("a+(b).txt", "a+(b).txt")


# --- project_tree ---------------------------------------------------------------------

def test_project_tree(run) -> None:
    assert ok(run("project_tree")) == "\n".join([
        "./",
        "├── README.md",
        "├── link_main.py -> src/main.py",
        "├── link_src -> src/",
        "├── setup.py",
        "└── src/",
        "    ├── main.py",
        "    ├── notes.txt",
        "    └── pkg/",
        "        ├── __init__.py",
        "        └── mod.py",
    ])
    assert ok(run("project_tree", path="src", max_depth=1)) == "\n".join([
        "src/", "├── main.py", "├── notes.txt", "└── pkg/"])
    assert err(run("project_tree", max_depth=0)) == "max_depth must be 1 or more"


def test_project_tree_nesting_and_cap(run, tree: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    (tree / "src" / "pkg" / "sub").mkdir()
    (tree / "src" / "pkg" / "sub" / "deep.py").write_text("")
    (tree / "void").mkdir()
    assert ok(run("project_tree", path="src", max_depth=5)) == "\n".join([
        "src/",
        "├── main.py",
        "├── notes.txt",
        "└── pkg/",
        "    ├── __init__.py",
        "    ├── mod.py",
        "    └── sub/",
        "        └── deep.py",
    ])
    assert ok(run("project_tree", path="void")) == "void/\n(empty directory)"
    monkeypatch.setattr(files, "MAX_TREE_ENTRIES", 4)
    assert ok(run("project_tree", path="src", max_depth=5)) == "\n".join([
        "src/", "├── main.py", "├── notes.txt", "└── pkg/", "    ├── __init__.py",
        "… more entries not shown (limit 4); use a smaller max_depth or a subdirectory as path"])
