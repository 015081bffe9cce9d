"""The confinement layer: resolve_inside, display, walk, is_binary, line helpers."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from agent_code.tools import ToolContext, ToolError
from agent_code.tools.paths import (IGNORED_DIRS, MAX_FILE_BYTES, cut_line, display, is_binary,
                                    resolve_inside, split_lines, walk)


@pytest.fixture
def tree(tmp_path: Path) -> Path:
    outside = tmp_path / "outside"
    outside.mkdir()
    (outside / "secret.txt").write_text("TOPSECRET\n")
    root = tmp_path / "root"
    (root / "src" / "pkg").mkdir(parents=True)
    (root / "src" / "pkg" / "mod.py").write_text("x = 1\n")
    (root / "src" / "main.py").write_text("print()\n")
    (root / "a.txt").write_text("a\n")
    (root / ".hidden").write_text("h\n")
    (root / "node_modules" / "lib").mkdir(parents=True)
    (root / "node_modules" / "lib" / "index.js").write_text("js\n")
    (root / ".git").mkdir()
    (root / ".git" / "HEAD").write_text("ref\n")
    (root / "build").write_text("a file named build is not an ignored dir\n")
    (root / "link_file").symlink_to(outside / "secret.txt")
    (root / "link_dir").symlink_to(outside)
    (root / "link_in").symlink_to(root / "src" / "main.py")
    (root / "link_src").symlink_to(root / "src")
    (root / "dangling").symlink_to(root / "nope")
    return root


@pytest.fixture
def ctx(tree: Path) -> ToolContext:
    return ToolContext(tree)


def test_constants() -> None:
    assert MAX_FILE_BYTES == 5 * 1024 * 1024
    assert IGNORED_DIRS == {".git", "node_modules", "__pycache__", ".venv", "venv", ".mypy_cache",
                            ".pytest_cache", ".ruff_cache", ".tox", "dist", "build", ".idea", ".agent"}


def test_relative_and_absolute_inside(ctx: ToolContext, tree: Path) -> None:
    assert resolve_inside(ctx, "src/main.py") == tree / "src" / "main.py"
    assert resolve_inside(ctx, str(tree / "src" / "main.py"), kind="file") == tree / "src" / "main.py"
    assert resolve_inside(ctx, ".", kind="dir") == tree
    assert resolve_inside(ctx, "src/../a.txt") == tree / "a.txt"
    assert resolve_inside(ctx, "link_in", kind="file") == tree / "src" / "main.py"
    assert resolve_inside(ctx, "link_src/pkg", kind="dir") == tree / "src" / "pkg"


@pytest.mark.parametrize("path", ["..", "../outside/secret.txt", "src/../../outside",
                                  "link_file", "link_dir", "link_dir/secret.txt"])
def test_escapes_are_refused(ctx: ToolContext, tree: Path, path: str) -> None:
    with pytest.raises(ToolError) as err:
        resolve_inside(ctx, path)
    assert str(err.value) == f"path {path!r} is outside the working directory {tree}"


def test_absolute_outside_refused(ctx: ToolContext, tree: Path) -> None:
    for p in (str(tree.parent / "outside" / "secret.txt"), "/etc/passwd", "/"):
        with pytest.raises(ToolError, match="is outside the working directory"):
            resolve_inside(ctx, p)


def test_root_given_through_a_symlink(tmp_path: Path, tree: Path) -> None:
    alias = tmp_path / "alias"
    alias.symlink_to(tree)
    ctx = ToolContext(alias)
    assert ctx.root == tree
    assert resolve_inside(ctx, str(alias / "a.txt")) == tree / "a.txt"
    assert display(ctx, resolve_inside(ctx, str(alias / "src"))) == "src"


def test_errors(ctx: ToolContext, tree: Path) -> None:
    cases = [
        (dict(path="foo.py", kind="file"), "no such file: 'foo.py'"),
        (dict(path="nodir", kind="dir"), "no such directory: 'nodir'"),
        (dict(path="nothing"), "no such file or directory: 'nothing'"),
        (dict(path="dangling"), "no such file or directory: 'dangling'"),
        (dict(path="src", kind="file"), "'src' is a directory, not a file"),
        (dict(path="a.txt", kind="dir"), "'a.txt' is not a directory"),
        (dict(path="a\x00b"), "path 'a\\x00b' contains a NUL byte"),
        (dict(path=""), "path is empty; use '.' for the working directory"),
    ]
    for kwargs, message in cases:
        with pytest.raises(ToolError) as err:
            resolve_inside(ctx, **kwargs)
        assert str(err.value) == message


def test_must_exist_false(ctx: ToolContext, tree: Path) -> None:
    assert resolve_inside(ctx, "new/file.txt", must_exist=False) == tree / "new" / "file.txt"
    with pytest.raises(ToolError, match="outside"):
        resolve_inside(ctx, "link_dir/new.txt", must_exist=False)


def test_fifo_is_not_a_regular_file(ctx: ToolContext, tree: Path) -> None:
    os.mkfifo(tree / "pipe")
    with pytest.raises(ToolError) as err:
        resolve_inside(ctx, "pipe", kind="file")
    assert str(err.value) == "'pipe' is not a regular file"


def test_display(ctx: ToolContext, tree: Path) -> None:
    assert display(ctx, tree) == "."
    assert display(ctx, tree / "src" / "pkg" / "mod.py") == "src/pkg/mod.py"


def test_walk_order_ignores_and_symlinks(ctx: ToolContext, tree: Path) -> None:
    got = [(e.rel, e.kind, e.is_symlink) for e in walk(ctx, tree)]
    assert got == [
        (".hidden", "file", False),
        ("a.txt", "file", False),
        ("build", "file", False),
        ("link_in", "file", True),
        ("link_src", "dir", True),   # listed, never entered
        ("src", "dir", False),
        ("src/main.py", "file", False),
        ("src/pkg", "dir", False),
        ("src/pkg/mod.py", "file", False),
    ]


def test_walk_max_depth_and_skip(ctx: ToolContext, tree: Path) -> None:
    assert [e.rel for e in walk(ctx, tree / "src", max_depth=1)] == ["src/main.py", "src/pkg"]
    assert [e.rel for e in walk(ctx, tree, skip=lambda e: e.name == "src" or e.is_symlink)] == [
        ".hidden", "a.txt", "build"]


def test_is_binary(tmp_path: Path) -> None:
    (tmp_path / "t").write_bytes(b"text\n" * 10)
    (tmp_path / "b").write_bytes(b"\x89PNG\x00\x01")
    (tmp_path / "late").write_bytes(b"a" * 8192 + b"\x00")
    assert not is_binary(tmp_path / "t")
    assert is_binary(tmp_path / "b")
    assert not is_binary(tmp_path / "late")


def test_split_and_cut_lines() -> None:
    assert split_lines(b"") == []
    assert split_lines(b"a\n") == ["a"]
    assert split_lines(b"a\r\n\nb") == ["a\r", "", "b"]
    assert split_lines(b"caf\xe9\n") == ["caf\ufffd"]
    assert cut_line("abc\r", 10) == "abc"
    assert cut_line("x" * 12, 10) == "x" * 10 + "… [2 more characters on this line]"
