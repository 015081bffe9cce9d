"""grep: regex search over the working directory, through ripgrep when it is installed.

:func:`grep_rg` and :func:`grep_python` give the same output for the same tree; the
flags below make ripgrep walk like :func:`paths.walk`:

* ``--no-ignore --hidden``: no .gitignore magic, dotfiles included; instead every name
  in ``IGNORED_DIRS`` is excluded with ``-g '!name/'`` (given after the user's glob, so
  it wins: in ripgrep the last matching glob decides).
* ``--no-follow``: symlinks are not searched at all (Python skips them too), so nothing
  outside the root is ever read.
* ``--text`` plus a check afterwards: ripgrep's own binary detection may stop half-way
  through a file, so both sides instead drop every file with a NUL in its first 8 KiB.
* ``--encoding none``: bytes as they are (no BOM sniffing), decoded with U+FFFD.
* ``--max-filesize``: larger files are skipped on both sides.
* ``--null``: file names may contain ``:``, so the name is ended by NUL.

Results are sorted by path components, then line number, in Python on both sides.
ripgrep's regex dialect differs a little from Python's: the pattern is compiled by
Python first (so Python syntax errors read the same on both paths), and what ripgrep
alone rejects (look-around, back-references) comes back as ``invalid regex: ...``.
"""

from __future__ import annotations

import os
import re
import subprocess
from dataclasses import dataclass
from pathlib import Path
from typing import Annotated

from agent_code.tools import paths
from agent_code.tools.base import ToolContext, ToolError, tool
from agent_code.globs import glob_regex
from agent_code.tools.paths import cut_line, display, printable, resolve_inside

MAX_LINE_CHARS = 500
RG_TIMEOUT_S = 60

Match = tuple[str, int, str]  # (path relative to root, line number, line text)


class _GlobFilter:
    """A ripgrep ``-g`` glob, gitignore style: a glob without '/' matches the base name at
    any depth, one with '/' is anchored at the root, a trailing '/' matches only
    directories and a leading '!' excludes instead of includes."""

    def __init__(self, glob: str) -> None:
        self.text = glob
        self.exclude = glob.startswith("!")
        g = glob[1:] if self.exclude else glob
        self.dir_only = g.endswith("/")
        g = g.rstrip("/")
        if not g or "\x00" in g:
            raise ToolError(f"invalid glob {glob!r}")
        if ".." in g.split("/"):
            raise ToolError(f"glob {glob!r} contains '..'; a glob only filters the files under `path` "
                            "and may not leave it")
        if "/" in g:
            source = glob_regex(g.lstrip("/"))
        else:
            source = "(?:.*/)?" + glob_regex(g)
        self.rx = re.compile(source, re.DOTALL)

    def matches(self, rel: str, is_dir: bool) -> bool:
        return (is_dir or not self.dir_only) and self.rx.fullmatch(rel) is not None


@dataclass(frozen=True)
class _Query:
    pattern: str
    regex: re.Pattern[str]
    target: Path         # resolved, inside the root
    target_rel: str      # the same, relative to the root
    glob: _GlobFilter | None
    case_insensitive: bool
    max_results: int


def _prepare(ctx: ToolContext, pattern: str, path: str, glob: str | None,
             case_insensitive: bool, max_results: int) -> _Query:
    if max_results < 1:
        raise ToolError("max_results must be 1 or more")
    if "\x00" in pattern:
        raise ToolError("pattern contains a NUL byte")
    if "\n" in pattern or re.search(r"(?<!\\)(?:\\\\)*\\n", pattern):
        raise ToolError("grep matches one line at a time, so the pattern cannot contain a "
                        "newline (\\n)")
    try:
        regex = re.compile(pattern, re.IGNORECASE if case_insensitive else 0)
    except re.error as exc:
        raise ToolError(f"invalid regex: {exc}") from None
    filt = _GlobFilter(glob) if glob is not None else None
    target = resolve_inside(ctx, path)
    if target.is_file():  # an explicitly named file: searched whatever the glob says
        if target.stat().st_size > paths.MAX_FILE_BYTES:
            raise ToolError(f"{path!r} is too large to search (over "
                            f"{paths.MAX_FILE_BYTES // (1024 * 1024)} MiB)")
        if paths.is_binary(target):
            raise ToolError(f"{path!r} is a binary file; grep only searches text")
    elif not target.is_dir():
        raise ToolError(f"{path!r} is not a regular file or directory")
    return _Query(pattern, regex, target, display(ctx, target), filt, case_insensitive,
                  max_results)


def _format(q: _Query, matches: list[Match]) -> str:
    if not matches:
        where = "" if q.target_rel == "." else f" in {q.target_rel}"
        only = "" if q.glob is None else f" (files matching {q.glob.text!r})"
        return printable(f"no matches for /{q.pattern}/{where}{only}")
    matches = sorted(matches, key=lambda m: (m[0].split("/"), m[1]))
    lines = [f"{rel}:{n}:{cut_line(text, MAX_LINE_CHARS)}" for rel, n, text in matches[:q.max_results]]
    if len(matches) > q.max_results:
        lines.append(f"… {len(matches) - q.max_results} more matches (showing first "
                     f"{q.max_results}); narrow the pattern or path")
    return printable("\n".join(lines))


# --- pure Python ----------------------------------------------------------------------

def _python_files(ctx: ToolContext, q: _Query) -> list[tuple[str, Path]]:
    if q.target.is_file():
        return [(q.target_rel, q.target)]
    g = q.glob
    skip = (lambda e: g.matches(e.rel, e.is_dir)) if g is not None and g.exclude else None
    return [(e.rel, e.path) for e in paths.walk(ctx, q.target, skip=skip)
            if e.is_file and not e.is_symlink
            and (g is None or g.exclude or g.matches(e.rel, False))]


def _python_matches(ctx: ToolContext, q: _Query) -> list[Match]:
    found: list[Match] = []
    for rel, p in _python_files(ctx, q):
        try:
            if p.lstat().st_size > paths.MAX_FILE_BYTES:
                continue
            data = p.read_bytes()
        except OSError:
            continue  # unreadable: skipped, as ripgrep does
        if b"\x00" in data[:paths.BINARY_SNIFF_BYTES]:
            continue
        for n, line in enumerate(paths.split_lines(data), start=1):
            if q.regex.search(line):
                found.append((rel, n, line))
    return found


def grep_python(ctx: ToolContext, pattern: str, path: str = ".", glob: str | None = None,
                case_insensitive: bool = False, max_results: int = 200) -> str:
    q = _prepare(ctx, pattern, path, glob, case_insensitive, max_results)
    return _format(q, _python_matches(ctx, q))


# --- ripgrep --------------------------------------------------------------------------

class RgUnavailable(ToolError):
    """ripgrep could not run (missing, or failed for a reason other than the regex)."""


def rg_command(q: _Query, rg: str = "rg") -> list[str]:
    cmd = [rg, "--no-config", "--no-heading", "--line-number", "--color", "never",
           "--with-filename", "--null", "--no-ignore", "--hidden", "--no-follow", "--text",
           "--encoding", "none", "--max-filesize", str(paths.MAX_FILE_BYTES), "--sort", "path"]
    if q.case_insensitive:
        cmd.append("-i")
    if q.glob is not None:
        cmd += ["-g", q.glob.text]
    for name in sorted(paths.IGNORED_DIRS):
        cmd += ["-g", f"!{name}/"]
    return cmd + ["-e", q.pattern, "--", q.target_rel]


def _rg_matches(ctx: ToolContext, q: _Query, rg: str) -> list[Match]:
    try:
        proc = subprocess.run(rg_command(q, rg), cwd=ctx.root, stdin=subprocess.DEVNULL,
                              capture_output=True, timeout=RG_TIMEOUT_S)
    except subprocess.TimeoutExpired:
        raise ToolError(f"grep timed out after {RG_TIMEOUT_S} s; narrow the path or "
                        "pattern") from None
    except OSError as exc:
        raise RgUnavailable(f"cannot run rg: {exc}") from None
    stderr = proc.stderr.decode("utf-8", "replace")
    if proc.returncode == 2 and not proc.stdout and any(
            marker in stderr for marker in ("regex parse error", "in a regex", "size limit")):
        detail = [ln.strip() for ln in stderr.splitlines() if ln.strip()]
        msg = next((ln.removeprefix("error:").strip() for ln in detail if ln.startswith("error:")),
                   detail[-1] if detail else "rejected by ripgrep")
        raise ToolError(f"invalid regex: {msg}")
    if proc.returncode not in (0, 1) and not proc.stdout:
        raise RgUnavailable(f"rg failed (exit {proc.returncode}): {stderr.strip()[:300]}")
    # exit 2 with output = some files could not be read; keep what was found
    found: list[Match] = []
    binary: dict[str, bool] = {}
    for raw in proc.stdout.split(b"\n"):
        name, sep, rest = raw.partition(b"\x00")
        number, colon, text = rest.partition(b":")
        if not sep or not colon or not number.isdigit():
            continue
        rel = os.fsdecode(name).removeprefix("./")
        if rel not in binary:
            binary[rel] = paths.is_binary(ctx.root / rel)
        if not binary[rel]:
            found.append((rel, int(number), text.decode("utf-8", "replace")))
    return found


def host_rg(ctx: ToolContext) -> str | None:
    """``rg`` as agent-code starts it, on the host: never one from a ``PATH`` entry in the project
    or another directory a command of the wall may write (``agent_code/confine/programs.py``)."""
    from agent_code.confine.programs import host_which

    wall = ctx.wall
    return host_which("rg", [ctx.root, *(wall.writable if wall is not None else ())])


def grep_rg(ctx: ToolContext, pattern: str, path: str = ".", glob: str | None = None,
            case_insensitive: bool = False, max_results: int = 200, *, rg: str | None = None) -> str:
    rg = rg or host_rg(ctx)
    if rg is None:
        raise RgUnavailable("rg (ripgrep) is not installed")
    q = _prepare(ctx, pattern, path, glob, case_insensitive, max_results)
    return _format(q, _rg_matches(ctx, q, rg))


# --- the tool -------------------------------------------------------------------------

@tool()
def grep(
    ctx: ToolContext,
    pattern: Annotated[str, "Regular expression (Python/ripgrep syntax), matched against "
                            "each line."],
    path: Annotated[str, "File or directory to search, relative to the working "
                         "directory."] = ".",
    glob: Annotated[str | None, "Only search files matching this glob, e.g. '*.py' (a glob "
                                "without '/' matches the file name at any depth) or "
                                "'src/**/*.ts'; prefix with '!' to exclude."] = None,
    case_insensitive: Annotated[bool, "Ignore upper/lower case."] = False,
    max_results: Annotated[int, "Maximum number of matching lines to return."] = 200,
) -> str:
    """Search file contents with a regular expression, one line at a time. Returns
    'path:line_number:line' for each matching line, sorted by path then line number, paths
    relative to the working directory. Binary files, files over 5 MiB, symlinks and
    dependency/cache/build directories (.git, node_modules, __pycache__, .venv, dist, build,
    ...) are skipped. Matched lines over 500 characters are shortened."""
    rg = host_rg(ctx)
    if rg is not None:
        try:
            return grep_rg(ctx, pattern, path, glob, case_insensitive, max_results, rg=rg)
        except RgUnavailable:
            pass
    return grep_python(ctx, pattern, path, glob, case_insensitive, max_results)
