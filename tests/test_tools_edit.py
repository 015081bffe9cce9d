"""edit_file and write_file through the registry, as the agent calls them: every safety
rule (read first, no stale edits, unique matches, confinement), diffs and backups."""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any

import pytest

from agent_code.tools import ToolContext, default_tools
from agent_code.tools.base import Backup
from agent_code.tools.edit import match_positions, unified_diff, with_file_line_endings
from agent_code.types import ToolCall, ToolResult

SECRET = "TOPSECRET\n"


@pytest.fixture
def root(tmp_path: Path) -> Path:
    outside = tmp_path / "outside"
    outside.mkdir()
    (outside / "secret.txt").write_text(SECRET)
    root = tmp_path / "root"
    (root / "src").mkdir(parents=True)
    (root / "src" / "app.py").write_text("def f():\n    return 1\n\n\ndef g():\n    return 1\n")
    (root / "link_out.txt").symlink_to(outside / "secret.txt")
    (root / "link_dir").symlink_to(outside)
    (root / "link_new.txt").symlink_to(outside / "not_there.txt")  # dangling, points outside
    return root


@pytest.fixture
def ctx(root: Path) -> ToolContext:
    return ToolContext(root)


@pytest.fixture
def call(ctx: ToolContext):
    registry = default_tools()

    def run(name: str, **args: Any) -> ToolResult:
        return registry.run(ToolCall("call_1", name, args), ctx)

    return run


def ok(result: ToolResult) -> str:
    assert not result.is_error, result.content
    return result.content


def err(result: ToolResult) -> str:
    assert result.is_error, result.content
    return result.content


APP = "def f():\n    return 1\n\n\ndef g():\n    return 1\n"


# --- read before you change -----------------------------------------------------------

def test_edit_without_read_is_refused(call, root):
    message = err(call("edit_file", path="src/app.py", old_string="def f", new_string="def h"))
    assert "has not been read" in message and "read_file" in message
    assert (root / "src" / "app.py").read_text() == APP


def test_edit_after_read_lands_and_shows_a_diff(call, root):
    ok(call("read_file", path="src/app.py"))
    out = ok(call("edit_file", path="src/app.py", old_string="def f():", new_string="def first():"))
    assert (root / "src" / "app.py").read_text() == APP.replace("def f():", "def first():")
    assert out.startswith("Edited src/app.py: 1 replacement.")
    assert "--- a/src/app.py\n+++ b/src/app.py\n@@ -1,4 +1,4 @@\n-def f():\n+def first():\n" in out


def test_consecutive_edits_need_no_reread(call, root):
    ok(call("read_file", path="src/app.py"))
    ok(call("edit_file", path="src/app.py", old_string="def f():", new_string="def a():"))
    ok(call("edit_file", path="src/app.py", old_string="def g():", new_string="def b():"))
    assert (root / "src" / "app.py").read_text() == APP.replace("f()", "a()").replace("g()", "b()")


def test_overwrite_existing_without_read_is_refused_but_new_file_needs_none(call, root):
    message = err(call("write_file", path="src/app.py", content="x = 1\n"))
    assert "has not been read" in message
    assert (root / "src" / "app.py").read_text() == APP
    out = ok(call("write_file", path="pkg/new/mod.py", content="x = 1\ny = 2\n"))
    assert (root / "pkg" / "new" / "mod.py").read_text() == "x = 1\ny = 2\n"  # parents created
    assert out.startswith("Created pkg/new/mod.py (2 lines).")
    assert "--- /dev/null\n+++ b/pkg/new/mod.py\n@@ -0,0 +1,2 @@\n+x = 1\n+y = 2" in out
    # what we wrote counts as seen: overwriting it right away is fine
    ok(call("write_file", path="pkg/new/mod.py", content="x = 2\n"))
    assert (root / "pkg" / "new" / "mod.py").read_text() == "x = 2\n"


def test_overwrite_after_read(call, root):
    ok(call("read_file", path="src/app.py"))
    out = ok(call("write_file", path="src/app.py", content="x = 1"))
    assert (root / "src" / "app.py").read_text() == "x = 1"
    assert out.startswith("Wrote src/app.py.") and "+x = 1\n\\ No newline at end of file" in out
    assert "No change" in ok(call("write_file", path="src/app.py", content="x = 1"))


# --- no stale edits -------------------------------------------------------------------

def test_file_changed_on_disk_since_read_is_refused(call, root):
    path = root / "src" / "app.py"
    ok(call("read_file", path="src/app.py"))
    path.write_text(APP + "# changed by someone else\n")
    message = err(call("edit_file", path="src/app.py", old_string="def f():", new_string="def h():"))
    assert "changed on disk since you last read it" in message
    assert err(call("write_file", path="src/app.py", content="")).count("changed on disk") == 1
    assert path.read_text().endswith("# changed by someone else\n")
    ok(call("read_file", path="src/app.py"))  # reading again makes it editable
    ok(call("edit_file", path="src/app.py", old_string="def f():", new_string="def h():"))


def test_same_size_rewrite_with_the_same_mtime_is_still_caught(call, root):
    path = root / "src" / "app.py"
    ok(call("read_file", path="src/app.py"))
    st = path.stat()
    path.write_text(APP.replace("return 1", "return 2"))  # same size
    os.utime(path, ns=(st.st_atime_ns, st.st_mtime_ns))   # and the old mtime
    message = err(call("edit_file", path="src/app.py", old_string="def f():", new_string="def h():"))
    assert "changed on disk" in message


def test_touch_alone_counts_as_a_change(call, root):
    path = root / "src" / "app.py"
    ok(call("read_file", path="src/app.py"))
    st = path.stat()
    os.utime(path, ns=(st.st_atime_ns, st.st_mtime_ns + 5_000_000_000))
    assert "changed on disk" in err(call("edit_file", path="src/app.py", old_string="def f",
                                         new_string="def h"))


# --- matching rules -------------------------------------------------------------------

def test_non_unique_old_string_is_refused_with_lines(call, root):
    ok(call("read_file", path="src/app.py"))
    message = err(call("edit_file", path="src/app.py", old_string="return 1", new_string="return 2"))
    assert "occurs 2 times" in message and "lines 2, 6" in message and "replace_all" in message
    assert (root / "src" / "app.py").read_text() == APP


def test_replace_all_replaces_every_occurrence(call, root):
    ok(call("read_file", path="src/app.py"))
    out = ok(call("edit_file", path="src/app.py", old_string="return 1", new_string="return 2",
                  replace_all=True))
    assert (root / "src" / "app.py").read_text() == APP.replace("return 1", "return 2")
    assert "2 replacements" in out and out.count("+    return 2") == 2


def test_overlapping_matches_count_as_ambiguous(call, root):
    (root / "a.txt").write_text("aaa\n")
    ok(call("read_file", path="a.txt"))
    assert "occurs 2 times" in err(call("edit_file", path="a.txt", old_string="aa", new_string="b"))
    assert match_positions("aaa", "aa") == [0, 1]


def test_identical_missing_and_empty_strings_are_refused(call, root):
    ok(call("read_file", path="src/app.py"))
    assert "identical" in err(call("edit_file", path="src/app.py", old_string="def f",
                                   new_string="def f"))
    assert "old_string is empty" in err(call("edit_file", path="src/app.py", old_string="",
                                             new_string="x"))
    message = err(call("edit_file", path="src/app.py", old_string="def nope", new_string="x"))
    assert "was not found" in message
    prefixed = err(call("edit_file", path="src/app.py", old_string="     1\tdef f():", new_string="x"))
    assert "line-number prefixes" in prefixed
    assert (root / "src" / "app.py").read_text() == APP


def test_edit_of_a_missing_file_is_refused(call, root):
    message = err(call("edit_file", path="src/missing.py", old_string="a", new_string="b"))
    assert "no such file" in message and "write_file" in message
    assert not (root / "src" / "missing.py").exists()


def test_directories_and_non_utf8_files_are_refused(call, root):
    assert "is a directory" in err(call("write_file", path="src", content="x"))
    (root / "latin1.txt").write_bytes("café\n".encode("latin-1"))
    ok(call("read_file", path="latin1.txt"))
    assert "not valid UTF-8" in err(call("edit_file", path="latin1.txt", old_string="caf",
                                         new_string="tea"))
    assert (root / "latin1.txt").read_bytes() == "café\n".encode("latin-1")


def test_crlf_files_keep_their_line_endings(call, root):
    (root / "win.txt").write_bytes(b"one\r\ntwo\r\nthree\r\n")
    ok(call("read_file", path="win.txt"))
    ok(call("edit_file", path="win.txt", old_string="one\ntwo", new_string="1\n2"))
    assert (root / "win.txt").read_bytes() == b"1\r\n2\r\nthree\r\n"
    assert with_file_line_endings("a\nb", "a", "x\ny") == ("a", "x\ny")  # LF file: untouched


# --- confinement ----------------------------------------------------------------------

@pytest.mark.parametrize("path", ["../outside/secret.txt", "link_out.txt", "link_dir/secret.txt",
                                  "link_dir/new.txt", "link_new.txt", "src/../../outside/x.txt"])
def test_paths_outside_the_root_are_refused(call, root, path):
    assert "outside the working directory" in err(call("write_file", path=path, content="pwned\n"))
    assert "outside the working directory" in err(call("edit_file", path=path, old_string="TOPSECRET",
                                                        new_string="pwned"))
    outside = root.parent / "outside"
    assert (outside / "secret.txt").read_text() == SECRET
    assert sorted(p.name for p in outside.iterdir()) == ["secret.txt"]


def test_absolute_path_outside_is_refused_and_inside_is_fine(call, root, tmp_path):
    target = tmp_path / "outside" / "secret.txt"
    assert "outside the working directory" in err(call("write_file", path=str(target), content="x"))
    assert target.read_text() == SECRET
    ok(call("write_file", path=str(root / "abs.txt"), content="fine\n"))
    assert (root / "abs.txt").read_text() == "fine\n"


def test_symlink_inside_the_root_edits_its_target(call, root):
    (root / "alias.py").symlink_to(root / "src" / "app.py")
    ok(call("read_file", path="alias.py"))  # recorded under the resolved path
    ok(call("edit_file", path="src/app.py", old_string="def f():", new_string="def h():"))
    assert (root / "alias.py").is_symlink()
    assert (root / "src" / "app.py").read_text().startswith("def h():")


# --- backups --------------------------------------------------------------------------

def test_every_change_keeps_a_backup_in_order(call, ctx, root):
    ok(call("read_file", path="src/app.py"))
    ok(call("edit_file", path="src/app.py", old_string="def f():", new_string="def a():"))
    ok(call("write_file", path="src/app.py", content="gone\n"))
    ok(call("write_file", path="fresh.txt", content="new\n"))
    err(call("edit_file", path="src/app.py", old_string="nope", new_string="x"))  # refused: no backup
    app = (root / "src" / "app.py").resolve()
    assert ctx.backups == [
        Backup(app, APP.encode(), "edit_file"),
        Backup(app, APP.replace("def f():", "def a():").encode(), "write_file"),
        Backup((root / "fresh.txt").resolve(), None, "write_file"),
    ]


# --- the diff helper ------------------------------------------------------------------

def test_unified_diff_is_capped_and_splits_on_newlines_only():
    before = "".join(f"line {i}\n" for i in range(200))
    diff = unified_diff(before, "", "big.txt", max_lines=10)
    lines = diff.splitlines()
    assert len(lines) == 11 and lines[-1] == "… 193 more diff lines not shown"
    ff = unified_diff("a\x0cb\n", "a\x0cc\n", "ff.txt")  # a form feed is not a line break
    assert "-a\x0cb\n+a\x0cc" in ff
