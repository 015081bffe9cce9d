"""Read-only file tools: read_file, list_files, glob, project_tree.

Every path goes through :func:`paths.resolve_inside`, every tree walk through
:func:`paths.walk`, so none of them can see past the working directory. read_file also
records what it showed in ``ctx.files``: the edit tools (``edit.py``) require that record.
"""

from __future__ import annotations

import os
import re
from pathlib import Path
from typing import Annotated

from agent_code.globs import glob_regex
from agent_code.tools import paths
from agent_code.tools.base import MAX_RESULT_CHARS, ToolContext, ToolError, tool
from agent_code.tools.paths import cut_line, display, is_within, printable, resolve_inside

MAX_LINE_CHARS = 2000
READ_BUDGET_CHARS = MAX_RESULT_CHARS - 200  # leave room for the "more lines" note
MAX_LIST_ENTRIES = 1000
MAX_GLOB_RESULTS = 500
MAX_TREE_ENTRIES = 500


def _size(n: int) -> str:
    return f"{n / (1024 * 1024):.1f} MiB" if n >= 1024 * 1024 else f"{n} bytes"


# --- read_file ------------------------------------------------------------------------

@tool()
def read_file(
    ctx: ToolContext,
    path: Annotated[str, "File to read, relative to the working directory."],
    offset: Annotated[int, "1-based number of the first line to show."] = 1,
    limit: Annotated[int, "Maximum number of lines to show."] = 2000,
) -> str:
    """Read a text file. Lines come numbered like `cat -n` (number, tab, text), starting
    at `offset`; at most `limit` lines (and about 30,000 characters) are shown and a final
    note gives the offset for the rest.
    Lines over 2000 characters are shortened. Binary files and files over 5 MiB are refused
    (use grep to search big files)."""
    if offset < 1:
        raise ToolError("offset must be 1 or more (the first line is line 1)")
    if limit < 1:
        raise ToolError("limit must be 1 or more")
    real = resolve_inside(ctx, path, kind="file")
    size = real.stat().st_size
    if size > paths.MAX_FILE_BYTES:
        raise ToolError(f"{path!r} is too large to read ({_size(size)}; the limit is "
                        f"{_size(paths.MAX_FILE_BYTES)}); use grep to find the lines you need")
    data = paths.read_regular(real, path)
    if b"\x00" in data[:paths.BINARY_SNIFF_BYTES]:
        raise ToolError(f"{path!r} is a binary file; read_file only shows text")
    ctx.files.record(real, data)  # the model has now seen this content: edit tools may change it
    if not data:
        return f"(empty file: {printable(display(ctx, real))})"
    lines = paths.split_lines(data)
    if offset > len(lines):
        raise ToolError(f"offset {offset} is past the end of {path!r}, which has {len(lines)} lines")
    out: list[str] = []
    used = 0
    end = offset - 1  # last line shown
    for n in range(offset, min(len(lines), offset - 1 + limit) + 1):
        row = f"{n:>6}\t{cut_line(lines[n - 1], MAX_LINE_CHARS)}"
        used += len(row) + 1
        if used > READ_BUDGET_CHARS and out:
            break  # stop at a line boundary, before the registry would cut mid-line
        out.append(row)
        end = n
    if end < len(lines):
        out.append(f"… {len(lines) - end} more lines; call again with offset={end + 1}")
    return printable("\n".join(out))


# --- list_files -----------------------------------------------------------------------

@tool()
def list_files(
    ctx: ToolContext,
    path: Annotated[str, "Directory to list, relative to the working directory."] = ".",
) -> str:
    """List one directory (not recursive), sorted by name, one entry per line.
    Directories end with '/'; symbolic links show as 'name -> target'."""
    real = resolve_inside(ctx, path, kind="dir")
    root = Path(os.path.realpath(ctx.root))
    try:
        with os.scandir(real) as it:
            entries = sorted(it, key=lambda d: d.name)
    except OSError as exc:
        raise ToolError(f"cannot list {path!r}: {exc.strerror}") from None
    lines: list[str] = []
    for d in entries[:MAX_LIST_ENTRIES]:
        if d.is_symlink():
            target = Path(os.path.realpath(d.path))
            if not is_within(target, root):
                lines.append(f"{d.name} -> (outside working directory)")
            elif not target.exists():
                lines.append(f"{d.name} -> {display(ctx, target)} (missing)")
            else:
                lines.append(f"{d.name} -> {display(ctx, target)}{'/' if target.is_dir() else ''}")
        elif d.is_dir(follow_symlinks=False):
            lines.append(f"{d.name}/")
        else:
            lines.append(d.name)
    if not lines:
        return "(empty directory)"
    if len(entries) > MAX_LIST_ENTRIES:
        lines.append(f"… {len(entries) - MAX_LIST_ENTRIES} more entries (showing first "
                     f"{MAX_LIST_ENTRIES})")
    return printable("\n".join(lines))


# --- glob -----------------------------------------------------------------------------

def check_glob(pattern: str) -> list[str]:
    """Refuse NUL, empty, absolute and ``..`` patterns; return the pattern's components."""
    if "\x00" in pattern:
        raise ToolError("glob pattern contains a NUL byte")
    if pattern.startswith(("/", "\\")) or re.match(r"[A-Za-z]:[\\/]", pattern):
        raise ToolError(f"glob pattern {pattern!r} is absolute; give a pattern relative to "
                        "`path` (e.g. '**/*.py')")
    parts = [p for p in pattern.split("/") if p not in ("", ".")]
    if ".." in parts:
        raise ToolError(f"glob pattern {pattern!r} contains '..'; patterns may not leave "
                        "the working directory")
    if not parts:
        raise ToolError(f"glob pattern {pattern!r} matches no files; try '**/*' or '*.py'")
    return parts


@tool()
def glob(
    ctx: ToolContext,
    pattern: Annotated[str, "Glob relative to `path`, e.g. '**/*.py', 'src/*.txt', "
                            "'*.{js,ts}'. '*' stays within one directory, '**' spans any "
                            "number of directories."],
    path: Annotated[str, "Directory to search from, relative to the working directory."] = ".",
) -> str:
    """Find files whose path (relative to `path`) matches a glob pattern. Returns matching
    files, one per line, relative to the working directory and sorted; at most 500.
    Dependency, cache and build directories (.git, node_modules, __pycache__, .venv, dist,
    build, ...) are skipped, and symlinked directories are not entered."""
    parts = check_glob(pattern)
    start = resolve_inside(ctx, path, kind="dir")
    rx = re.compile(glob_regex("/".join(parts)), re.DOTALL)
    depth = None if "**" in pattern else len(parts)
    found = [e.rel for e in paths.walk(ctx, start, max_depth=depth)
             if e.is_file and rx.fullmatch(e.path.relative_to(start).as_posix())]
    if not found:
        where = "" if display(ctx, start) == "." else f" in {display(ctx, start)}"
        return printable(f"no files match {pattern!r}{where}")
    lines = found[:MAX_GLOB_RESULTS]
    if len(found) > MAX_GLOB_RESULTS:
        lines.append(f"… {len(found) - MAX_GLOB_RESULTS} more files (showing first "
                     f"{MAX_GLOB_RESULTS}); narrow the pattern")
    return printable("\n".join(lines))


# --- project_tree ---------------------------------------------------------------------

def _label(ctx: ToolContext, e: paths.Entry) -> str:
    slash = "/" if e.is_dir else ""
    if e.target is not None:
        return f"{e.name} -> {display(ctx, e.target)}{slash}"
    return e.name + slash


@tool()
def project_tree(
    ctx: ToolContext,
    path: Annotated[str, "Directory to draw, relative to the working directory."] = ".",
    max_depth: Annotated[int, "How many directory levels to show (1 = only direct entries)."] = 3,
) -> str:
    """Show the directory tree under `path` as an indented drawing (├── / └──), directories
    ending in '/', up to `max_depth` levels and at most 500 entries. Dependency, cache and
    build directories (.git, node_modules, __pycache__, .venv, dist, build, ...) are left out."""
    if max_depth < 1:
        raise ToolError("max_depth must be 1 or more")
    start = resolve_inside(ctx, path, kind="dir")
    lines = [display(ctx, start) + "/"]
    shown = 0
    truncated = False

    def draw(directory: Path, prefix: str, depth: int) -> None:
        nonlocal shown, truncated
        entries = paths.children(ctx, directory)
        for i, e in enumerate(entries):
            if shown >= MAX_TREE_ENTRIES:
                truncated = True
                return
            last = i == len(entries) - 1
            lines.append(prefix + ("└── " if last else "├── ") + _label(ctx, e))
            shown += 1
            if e.is_dir and e.target is None and depth < max_depth:
                draw(e.path, prefix + ("    " if last else "│   "), depth + 1)

    draw(start, "", 1)
    if shown == 0:
        lines.append("(empty directory)")
    if truncated:
        lines.append(f"… more entries not shown (limit {MAX_TREE_ENTRIES}); use a smaller "
                     "max_depth or a subdirectory as path")
    return printable("\n".join(lines))
