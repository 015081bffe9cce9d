"""Path escapes: every way out of the working directory we could think of, against every file tool.

Each attempt goes through the tool registry, as the model calls tools, in a world where the root
sits beside an ``outside`` directory full of canary files, a sibling whose name extends the
root's (``proj-evil``) and one differing only in case (``PROJ``), with symlinks of every kind
inside the root (to outside files and directories, relative, chained, dangling, looping, to
``/``, ``/proc/self/root``, ``/etc`` and ``/dev/zero``), a FIFO, a hard link to an outside file
and, as root, a character device. Every attempt must be refused (an ``is_error`` result) — or,
for the few spellings that are just odd names (``%2e%2e``, look-alike dots), land inside the root
— must never show a canary, never hang, and leave everything outside the root exactly as it was
(and the root too, when refused).

Hard links are the one documented exception (``tools/paths.py``): a hard link inside the root is
the same file under a name inside it, so reading it is allowed; the edit tools refuse to write
through one (``test_a_hard_link_is_read_but_never_written_through``).
"""

from __future__ import annotations

import os
import stat
import threading
import uuid
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pytest

from agent_code.tools import ToolContext, default_tools
from agent_code.types import ToolCall, ToolResult

CANARY = "CANARY-outside-the-root"
HARD_MARK = "HARDLINKED-file-content"
WRITTEN = "WRITTEN-BY-AN-ESCAPE"
PROBE = "CANARY-out.ide"   # a regex matching the canary that is not the canary (grep echoes it)
ESCAPE_TMP = f"/tmp/agent-code-escape-{uuid.uuid4().hex}.txt"
CALL_TIMEOUT_S = 15


@dataclass
class World:
    tmp: Path
    root: Path
    outside: Path
    has_device: bool


@pytest.fixture
def world(tmp_path: Path) -> World:
    outside = tmp_path / "outside"
    (outside / "dir").mkdir(parents=True)
    (outside / "secret.txt").write_text(CANARY + "\n")
    (outside / "dir" / "deep.txt").write_text(CANARY + " deep\n")
    (outside / "hard_target.txt").write_text(HARD_MARK + "\n")
    for sibling in ("proj-evil", "PROJ"):
        (tmp_path / sibling).mkdir()
        (tmp_path / sibling / "secret.txt").write_text(CANARY + f" in {sibling}\n")

    root = tmp_path / "proj"
    (root / "src").mkdir(parents=True)
    (root / "a.txt").write_text("inside\n")
    (root / "src" / "main.py").write_text("print('inside')\n")
    links = {
        "link_file": outside / "secret.txt", "rel_link": Path("../outside/secret.txt"), "link_dir": outside,
        "chain_a": root / "chain_b", "chain_b": outside / "secret.txt", "dangling_out": outside / "missing.txt",
        "dangling_dir_out": outside / "newdir", "link_root": Path("/"), "link_proc": Path("/proc/self/root"),
        "link_zero": Path("/dev/zero"), "link_etc": Path("/etc"), "loop_a": root / "loop_b",
        "loop_b": root / "loop_a", "src/up": Path(".."), "src/up2": Path("../.."),
    }
    for name, target in links.items():
        (root / name).symlink_to(target)
    os.link(outside / "hard_target.txt", root / "hard.txt")
    os.mkfifo(root / "pipe")
    try:
        os.mknod(root / "zero_dev", 0o666 | stat.S_IFCHR, os.makedev(1, 5))  # /dev/zero's numbers
        has_device = True
    except (PermissionError, OSError):
        has_device = False
    return World(tmp_path, root, outside, has_device)


def snapshot(top: Path, skip: Path | None = None) -> dict[str, Any]:
    """Every entry under ``top`` (not following links, not entering ``skip``): its kind and its
    content (files), target (links) or nothing (FIFOs, devices)."""
    seen: dict[str, Any] = {}
    for dirpath, dirnames, filenames in os.walk(top, followlinks=False):
        here = Path(dirpath)
        if skip is not None:
            dirnames[:] = [d for d in dirnames if here / d != skip]
        for name in dirnames + filenames:
            p = here / name
            if p == skip:
                continue
            st = p.lstat()
            rel = str(p.relative_to(top))
            if stat.S_ISLNK(st.st_mode):
                seen[rel] = ("link", os.readlink(p))
            elif stat.S_ISREG(st.st_mode):
                seen[rel] = ("file", p.read_bytes())
            else:
                seen[rel] = ("dir" if stat.S_ISDIR(st.st_mode) else "special", None)
    return seen


@dataclass(frozen=True)
class Attempt:
    tool: str
    args: dict[str, Any]
    expect: str = "refused"              # or "inside": a harmless odd name, created/read inside the root
    read_first: str | None = None        # a read_file before it (the edit tools' rule)
    needs: str | None = None             # "device": only where a device could be made
    absent: tuple[str, ...] = field(default=())  # strings the output must not hold (besides the canary)

    @property
    def id(self) -> str:
        shown = ",".join(f"{k}={v!r}" for k, v in self.args.items() if k != "content")
        return f"{self.tool}({shown[:70]})"


def _read(path: str, **kw: Any) -> Attempt:
    return Attempt("read_file", {"path": path}, **kw)


def _write(path: str, **kw: Any) -> Attempt:
    return Attempt("write_file", {"path": path, "content": WRITTEN + "\n"}, **kw)


def _edit(path: str, **kw: Any) -> Attempt:
    return Attempt("edit_file", {"path": path, "old_string": CANARY, "new_string": WRITTEN}, **kw)


def _grep(path: str = ".", glob: str | None = None, **kw: Any) -> Attempt:
    args: dict[str, Any] = {"pattern": PROBE, "path": path}
    if glob is not None:
        args["glob"] = glob
    return Attempt("grep", args, **kw)


ATTEMPTS: list[Attempt] = [
    # relative and absolute
    _read("../outside/secret.txt"), _read("../../etc/passwd"), _read("../" * 40 + "etc/passwd"),
    _read("src/../../outside/secret.txt"), _read("./../outside/secret.txt"), _read("/etc/passwd"),
    _read("/etc/shadow"), _read("/"), _read("//etc/passwd"), _read("/../../../etc/passwd"),
    _read("{outside}/secret.txt"), _read("{root}/../outside/secret.txt"),
    _read("{tmp}/proj-evil/secret.txt"), _read("{tmp}/PROJ/secret.txt"),
    # home
    _read("~"), _read("~/.bashrc"), _read("~root/.bashrc"),
    # symlinks
    _read("link_file"), _read("rel_link"), _read("link_dir/secret.txt"), _read("link_dir/dir/deep.txt"),
    _read("chain_a"), _read("dangling_out"), _read("loop_a"), _read("link_root/etc/passwd"),
    _read("link_proc/etc/passwd"), _read("link_etc/passwd"), _read("src/up2/outside/secret.txt"),
    _read("src/up/../../outside/secret.txt"),
    # devices, FIFOs, /proc
    _read("link_zero"), _read("/dev/zero"), _read("/dev/random"), _read("/dev/stdin"), _read("pipe"),
    _read("zero_dev", needs="device"), _read("/proc/self/environ"), _read("/proc/self/root/etc/passwd"),
    _read("/proc/self/root{outside}/secret.txt"), _read("/proc/self/fd/0"), _read("/proc/self/cwd/../../etc/passwd"),
    # spellings
    _read("a.txt\x00../../outside/secret.txt"), _read("a" * 5000), _read("x/" * 3000 + "../" * 3000 + "a.txt"),
    _read("\ud800../outside/secret.txt"), _read("..\\outside\\secret.txt"), _read("..\\..\\etc\\passwd"),
    _read("%2e%2e/outside/secret.txt"), _read("%2e%2e%2foutside%2fsecret.txt"),
    _read("\u2024\u2024/outside/secret.txt"), _read("\uff0e\uff0e/outside/secret.txt"),
    _read("..\u2215outside\u2215secret.txt"), _read("../OUTSIDE/SECRET.TXT"), _read("../Outside/secret.txt"),
    # list_files
    Attempt("list_files", {"path": ".."}), Attempt("list_files", {"path": "link_dir"}),
    Attempt("list_files", {"path": "/"}), Attempt("list_files", {"path": "~"}),
    Attempt("list_files", {"path": "/proc/self"}), Attempt("list_files", {"path": "src/up2"}),
    Attempt("list_files", {"path": "link_proc"}),
    Attempt("list_files", {"path": "."}, expect="inside", absent=("deep.txt", "secret.txt")),
    # glob
    Attempt("glob", {"pattern": "../outside/*"}), Attempt("glob", {"pattern": "**/../../outside/*"}),
    Attempt("glob", {"pattern": "/etc/*"}), Attempt("glob", {"pattern": "*", "path": ".."}),
    Attempt("glob", {"pattern": "*", "path": "link_dir"}), Attempt("glob", {"pattern": "*", "path": "~"}),
    Attempt("glob", {"pattern": "**/*.txt", "path": "src/up2"}),
    Attempt("glob", {"pattern": "**/*"}, expect="inside", absent=("deep.txt", "secret.txt", "pipe")),
    # grep
    _grep(".."), _grep("/etc"), _grep("link_file"), _grep("link_dir"), _grep("chain_a"), _grep("dangling_out"),
    _grep("pipe"), _grep("/dev/zero"), _grep("zero_dev", needs="device"), _grep("/proc/self/environ"),
    _grep("src/up2"), _grep(".", glob="../outside/*"), _grep(".", glob="**/../../outside/*.txt"),
    _grep(".", expect="inside"), _grep("src", expect="inside"),
    # project_tree
    Attempt("project_tree", {"path": ".."}), Attempt("project_tree", {"path": "link_dir"}),
    Attempt("project_tree", {"path": "/"}), Attempt("project_tree", {"path": "src/up2"}),
    Attempt("project_tree", {"path": ".", "max_depth": 10}, expect="inside", absent=("deep.txt", "secret.txt")),
    # edit_file
    _edit("../outside/secret.txt"), _edit("{outside}/secret.txt"), _edit("link_file"), _edit("rel_link"),
    _edit("link_dir/secret.txt"), _edit("chain_a"), _edit("pipe"), _edit("zero_dev", needs="device"),
    _edit("..\\outside\\secret.txt"), _edit("/proc/self/root{outside}/secret.txt"),
    Attempt("edit_file", {"path": "hard.txt", "old_string": HARD_MARK, "new_string": WRITTEN},
            read_first="hard.txt"),
    # write_file
    _write("../outside/new.txt"), _write("../escape-created.txt"), _write("{outside}/abs-new.txt"),
    _write(ESCAPE_TMP), _write("link_dir/new.txt"), _write("link_file"), _write("rel_link"), _write("chain_a"),
    _write("dangling_out"), _write("dangling_dir_out/new.txt"), _write("src/up2/outside/new.txt"),
    _write("link_proc/{tmp}/proc-escape.txt"), _write("loop_a"), _write("~/new.txt"), _write("..\\escape.txt"),
    _write("pipe"), _write("/dev/null"), _write("zero_dev", needs="device"), _write("a.txt\x00/../../escape.txt"),
    _write("hard.txt", read_first="hard.txt"), _write("{tmp}/PROJ/secret.txt"), _write("{tmp}/proj-evil/new.txt"),
    _write("%2e%2e/new.txt", expect="inside"), _write("\uff0e\uff0e/new.txt", expect="inside"),
]


def _fill(value: Any, world: World) -> Any:
    if not isinstance(value, str):
        return value
    return (value.replace("{outside}", str(world.outside)).replace("{root}", str(world.root))
            .replace("{tmp}", str(world.tmp)))


def _run(name: str, args: dict[str, Any], ctx: ToolContext) -> ToolResult:
    """One tool call in a thread, so a call that hangs (a FIFO read) fails the test instead."""
    box: list[ToolResult] = []
    worker = threading.Thread(target=lambda: box.append(default_tools().run(ToolCall("c1", name, args), ctx)),
                              daemon=True)
    worker.start()
    worker.join(CALL_TIMEOUT_S)
    assert not worker.is_alive(), f"{name}({args!r}) hung for {CALL_TIMEOUT_S} s"
    return box[0]


def test_there_are_at_least_fifty_distinct_attempts() -> None:
    ids = [a.id + repr(a.read_first) for a in ATTEMPTS]
    assert len(set(ids)) == len(ids) and len(ids) >= 50
    assert {a.tool for a in ATTEMPTS} == {"read_file", "list_files", "glob", "grep", "project_tree",
                                          "edit_file", "write_file"}


@pytest.mark.parametrize("attempt", ATTEMPTS, ids=[a.id for a in ATTEMPTS])
def test_escape_attempt(world: World, attempt: Attempt) -> None:
    if attempt.needs == "device" and not world.has_device:
        pytest.skip("cannot make a device node here (needs root with CAP_MKNOD)")
    ctx = ToolContext(world.root)
    if attempt.read_first:
        assert not _run("read_file", {"path": attempt.read_first}, ctx).is_error
    outside_before = snapshot(world.tmp, skip=world.root)
    root_before = snapshot(world.root)
    args = {k: _fill(v, world) for k, v in attempt.args.items()}

    result = _run(attempt.tool, args, ctx)

    assert CANARY not in result.content and HARD_MARK not in result.content, result.content[:500]
    for text in attempt.absent:
        assert text not in result.content, result.content[:500]
    assert snapshot(world.tmp, skip=world.root) == outside_before          # nothing outside read-modified
    assert not Path(ESCAPE_TMP).exists()
    if attempt.expect == "refused":
        assert result.is_error, f"not refused: {result.content[:500]}"
        assert len(result.content) < 2000                                    # a clear, short message
        assert snapshot(world.root) == root_before                          # and nothing written inside
    else:
        assert not result.is_error, result.content[:500]
        if attempt.tool == "write_file":
            created = world.root / args["path"]
            assert created.read_text() == WRITTEN + "\n" and created.resolve().is_relative_to(world.root)


@pytest.mark.parametrize("path, message", [
    ("../outside/secret.txt", "is outside the working directory"),
    ("~/.bashrc", "'~' is not expanded"),
    ("..\\..\\etc\\passwd", "uses '..' with backslashes"),
    ("a" * 5000, "is too long"),
    ("a.txt\x00x", "contains a NUL byte"),
    ("\ud800", "is not valid Unicode text"),
    ("pipe", "is not a regular file"),
    ("link_zero", "is outside the working directory"),
    ("loop_a", "cannot access"),
])
def test_refusals_say_why(world: World, path: str, message: str) -> None:
    result = _run("read_file", {"path": path}, ToolContext(world.root))
    assert result.is_error and message in result.content, result.content[:300]


def test_a_long_path_is_not_echoed_whole(world: World) -> None:
    result = _run("read_file", {"path": "../" * 3000}, ToolContext(world.root))
    assert result.is_error and len(result.content) < 600


def test_a_hard_link_is_read_but_never_written_through(world: World) -> None:
    """The documented decision: reading a hard link inside the root is allowed (its path is
    inside), but edit_file and write_file refuse it, so the outside name never changes."""
    ctx = ToolContext(world.root)
    read = _run("read_file", {"path": "hard.txt"}, ctx)
    assert not read.is_error and HARD_MARK in read.content
    for name, args in (("edit_file", {"path": "hard.txt", "old_string": HARD_MARK, "new_string": "x"}),
                       ("write_file", {"path": "hard.txt", "content": "x\n"})):
        result = _run(name, args, ctx)
        assert result.is_error and "hard links" in result.content, result.content
    assert (world.outside / "hard_target.txt").read_text() == HARD_MARK + "\n"
    assert ctx.backups == []   # a refused change leaves no backup behind


def test_walking_tools_never_open_a_fifo_or_device(world: World) -> None:
    """grep and glob over the whole root (a FIFO and, as root, a device inside) finish, and show
    neither as a file."""
    ctx = ToolContext(world.root)
    found = _run("grep", {"pattern": "inside"}, ctx)
    assert not found.is_error and "a.txt:1:inside" in found.content and "pipe" not in found.content
    listed = _run("glob", {"pattern": "**/*"}, ctx)
    assert "pipe" not in listed.content and "zero_dev" not in listed.content
