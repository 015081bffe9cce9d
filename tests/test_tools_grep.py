"""grep: the ripgrep and pure-Python paths must print exactly the same thing."""

from __future__ import annotations

import os
import shutil
from pathlib import Path

import pytest

from agent_code.tools import ToolContext, ToolError, default_tools, paths
from agent_code.tools import grep as grep_module
from agent_code.tools.grep import RgUnavailable, grep_python, grep_rg
from agent_code.types import ToolCall

HAVE_RG = shutil.which("rg") is not None
needs_rg = pytest.mark.skipif(not HAVE_RG, reason="ripgrep (rg) is not installed")


@pytest.fixture(scope="module")
def root(tmp_path_factory: pytest.TempPathFactory) -> Path:
    base = tmp_path_factory.mktemp("grep")
    outside = base / "outside"
    outside.mkdir()
    (outside / "secret.txt").write_text("alpha TOPSECRET\n")
    r = base / "root"
    files: dict[str, bytes | str] = {
        "a.txt": "alpha\nBeta\nalphabet soup\n",
        "a/b.txt": "alpha in a/b\n",                      # sorts before a.txt
        "src/main.py": "import os\n\ndef main():\n    print('Alpha')\n",
        "src/util.py": "def alpha():\n    return 1\n",
        "src/deep/nested/x.py": "ALPHA = 1\n",
        "src/deep/notes.txt": b"alpha notes\r\nsecond\r\n",  # CRLF
        "node_modules/pkg/index.js": "alpha\n",
        "src/node_modules/y.js": "alpha\n",
        ".git/config": "alpha\n",
        "build/out.txt": "alpha\n",
        "notbuild/build": "alpha in a file named build\n",  # only directories are ignored
        ".hidden.txt": "alpha hidden\n",
        "bin.dat": b"alpha\x00\x01\x02alpha\n",
        "late_nul.txt": b"alpha first\n" + b"x" * 9000 + b"\n\x00alpha late\n",
        "bom.txt": b"\xef\xbb\xbfalpha bom\n",
        "latin1.txt": b"alpha caf\xe9\n",
        "wide.txt": "alpha " + "z" * 600 + "\n",
        "we:ird name.txt": "alpha colon\n",
        "noeol.txt": "last alpha",
        "huge.txt": b"alpha\n" * (paths.MAX_FILE_BYTES // 6 + 1),
    }
    for rel, content in files.items():
        p = r / rel
        p.parent.mkdir(parents=True, exist_ok=True)
        if isinstance(content, str):
            p.write_text(content)
        else:
            p.write_bytes(content)
    (r / "link_out.txt").symlink_to(outside / "secret.txt")
    (r / "link_outdir").symlink_to(outside)
    (r / "link_in.txt").symlink_to(r / "a.txt")
    (r / "link_src").symlink_to(r / "src")
    os.mkfifo(r / "pipe")
    return r


@pytest.fixture
def ctx(root: Path) -> ToolContext:
    return ToolContext(root)


EXPECTED_ALPHA = """\
.hidden.txt:1:alpha hidden
a/b.txt:1:alpha in a/b
a.txt:1:alpha
a.txt:3:alphabet soup
bom.txt:1:\ufeffalpha bom
late_nul.txt:1:alpha first
late_nul.txt:3:\x00alpha late
latin1.txt:1:alpha caf\ufffd
noeol.txt:1:last alpha
notbuild/build:1:alpha in a file named build
src/deep/notes.txt:1:alpha notes
src/util.py:1:def alpha():
we:ird name.txt:1:alpha colon
wide.txt:1:alpha """ + "z" * 494 + "… [106 more characters on this line]"

CASES = [
    # pattern, path, glob, case_insensitive, max_results
    ("alpha", ".", None, False, 200),
    ("alpha", ".", None, True, 200),
    ("^alpha$", ".", None, False, 200),
    ("soup$|second$|notes$", ".", None, False, 200),  # CRLF: '$' is not before '\r'
    ("alpha", "src", None, False, 200),
    ("alpha", "src/deep", None, True, 200),
    ("alpha", ".", "*.py", True, 200),
    ("alpha", ".", "src/*.py", True, 200),
    ("alpha", ".", "src/**/*.py", True, 200),
    ("alpha", ".", "deep/*.py", True, 200),     # a glob with '/' is anchored at the root
    ("alpha", ".", "!*.txt", False, 200),
    ("alpha", ".", "!src", True, 200),
    ("alpha", ".", "!deep/", True, 200),
    ("alpha", ".", "*.{py,txt}", False, 200),
    ("alpha", ".", "[ab]*", False, 200),
    ("alpha", ".", "**", False, 200),           # cannot re-include ignored directories
    ("alpha", "node_modules", None, False, 200),  # an ignored dir named explicitly is searched
    ("alpha", "a.txt", "*.py", False, 200),       # an explicit file ignores the glob
    ("alpha", "link_in.txt", None, False, 200),   # a link inside the root: its target
    ("alpha", "link_src", None, True, 200),
    ("z{600}", ".", None, False, 200),
    ("", "src/util.py", None, False, 200),
    (r"\bdef\b", ".", None, False, 200),
    ("alpha", ".", None, True, 3),
    ("TOPSECRET", ".", None, False, 200),
    ("nothing-here", ".", None, False, 200),
    ("nothing-here", "src", "*.py", False, 200),
]


@needs_rg
@pytest.mark.parametrize("pattern,path,glob,ci,limit", CASES)
def test_rg_and_python_agree(ctx: ToolContext, pattern: str, path: str, glob: str | None,
                             ci: bool, limit: int) -> None:
    py = grep_python(ctx, pattern, path, glob, ci, limit)
    rg = grep_rg(ctx, pattern, path, glob, ci, limit)
    assert rg == py
    assert "alpha TOPSECRET" not in py


@pytest.mark.parametrize("impl", ["python", pytest.param("rg", marks=needs_rg)])
def test_exact_output(ctx: ToolContext, impl: str) -> None:
    g = grep_python if impl == "python" else grep_rg
    assert g(ctx, "alpha") == EXPECTED_ALPHA
    assert g(ctx, "alpha", ".", None, True, 3) == (
        ".hidden.txt:1:alpha hidden\na/b.txt:1:alpha in a/b\na.txt:1:alpha\n"
        "… 13 more matches (showing first 3); narrow the pattern or path")
    assert g(ctx, "alpha", ".", "*.py", True) == (
        "src/deep/nested/x.py:1:ALPHA = 1\nsrc/main.py:4:    print('Alpha')\n"
        "src/util.py:1:def alpha():")
    assert g(ctx, "alpha", ".", "src/*.py", True) == (
        "src/main.py:4:    print('Alpha')\nsrc/util.py:1:def alpha():")
    assert g(ctx, "soup$|second$|notes$") == "a.txt:3:alphabet soup"
    assert g(ctx, "alpha", "link_in.txt") == "a.txt:1:alpha\na.txt:3:alphabet soup"
    assert g(ctx, "alpha", "node_modules") == "node_modules/pkg/index.js:1:alpha"
    assert g(ctx, "nothing-here") == "no matches for /nothing-here/"
    assert g(ctx, "nothing-here", "src", "*.py") == (
        "no matches for /nothing-here/ in src (files matching '*.py')")


@pytest.mark.parametrize("impl", ["python", pytest.param("rg", marks=needs_rg)])
def test_errors(ctx: ToolContext, root: Path, impl: str) -> None:
    g = grep_python if impl == "python" else grep_rg
    cases = [
        (("a(",), "invalid regex: missing ), unterminated subpattern at position 1"),
        (("a\\nb",), "grep matches one line at a time, so the pattern cannot contain a newline (\\n)"),
        (("alpha", "bin.dat"), "'bin.dat' is a binary file; grep only searches text"),
        (("alpha", "huge.txt"), "'huge.txt' is too large to search (over 5 MiB)"),
        (("alpha", "pipe"), "'pipe' is not a regular file or directory"),
        (("alpha", "../outside"), f"path '../outside' is outside the working directory {root}"),
        (("alpha", "link_outdir"), f"path 'link_outdir' is outside the working directory {root}"),
        (("alpha", "link_out.txt"), f"path 'link_out.txt' is outside the working directory {root}"),
        (("alpha", str(root.parent / "outside" / "secret.txt")), "is outside the working directory"),
        (("alpha", "missing"), "no such file or directory: 'missing'"),
        (("alpha", ".", None, False, 0), "max_results must be 1 or more"),
    ]
    for args, message in cases:
        with pytest.raises(ToolError) as exc:
            g(ctx, *args)
        assert message in str(exc.value)


@needs_rg
def test_regex_only_ripgrep_rejects(ctx: ToolContext) -> None:
    with pytest.raises(ToolError) as exc:
        grep_rg(ctx, "(?<=def )alpha")
    assert str(exc.value) == (
        "invalid regex: look-around, including look-ahead and look-behind, is not supported")
    result = default_tools().run(ToolCall("1", "grep", {"pattern": "(?=x)"}), ctx)
    assert result.is_error and result.content.startswith("invalid regex: look-around")


@needs_rg
def test_rg_command_flags(ctx: ToolContext) -> None:
    q = grep_module._prepare(ctx, "x", ".", "*.py", True, 10)
    cmd = grep_module.rg_command(q)
    for flag in ["--no-config", "--no-ignore", "--hidden", "--no-follow", "--null", "--text",
                 "--with-filename", "--line-number", "--no-heading", "-i"]:
        assert flag in cmd
    assert cmd[cmd.index("--max-filesize") + 1] == str(paths.MAX_FILE_BYTES)
    assert cmd[-4:] == ["-e", "x", "--", "."]
    globs = [cmd[i + 1] for i, a in enumerate(cmd) if a == "-g"]
    assert globs[0] == "*.py"  # the user's glob first: the ignored dirs after it win
    assert sorted(globs[1:]) == sorted(f"!{d}/" for d in paths.IGNORED_DIRS)


def test_the_tool_uses_rg_or_falls_back(ctx: ToolContext, monkeypatch: pytest.MonkeyPatch) -> None:
    call = ToolCall("1", "grep", {"pattern": "alpha", "glob": "*.py", "case_insensitive": True})
    expected = grep_python(ctx, "alpha", ".", "*.py", True)
    assert default_tools().run(call, ctx).content == expected
    monkeypatch.setattr(grep_module, "host_rg", lambda ctx: None)
    assert default_tools().run(call, ctx).content == expected
    with pytest.raises(RgUnavailable):
        grep_rg(ctx, "alpha")
    with pytest.raises(RgUnavailable):
        grep_rg(ctx, "alpha", rg=str(ctx.root / "no-such-rg"))


def test_registry_reports_errors_instead_of_raising(ctx: ToolContext) -> None:
    registry = default_tools()
    bad = registry.run(ToolCall("1", "grep", {"pattern": "a("}), ctx)
    assert bad.is_error and bad.content.startswith("invalid regex: ")
    bad = registry.run(ToolCall("1", "grep", {"pattern": 3}), ctx)
    assert bad.is_error and bad.content == (
        "invalid arguments for grep: argument 'pattern' must be of type string, got int")
    none = registry.run(ToolCall("1", "grep", {"pattern": "TOPSECRET"}), ctx)
    assert not none.is_error and none.content == "no matches for /TOPSECRET/"
