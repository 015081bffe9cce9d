"""``agent-code worktree [list|remove NAME [--force]] [-C DIR]``: the git worktrees that
``agent-code --worktree NAME`` made under ``.agent/worktrees/`` (``agent_code/worktree.py``).

``list`` (the default) shows each one's name, branch, state (clean, or how many uncommitted
changes) and path. ``remove NAME`` deletes the worktree's directory and git's record of it
and keeps its branch; it refuses a worktree with uncommitted changes unless ``--force``.
Exit codes: 0 done, 1 refused or failed.
"""

from __future__ import annotations

from pathlib import Path
from typing import NoReturn, Optional

import typer

from agent_code.cli.project import fail, project_dir

app = typer.Typer(add_completion=False, pretty_exceptions_enable=False, rich_markup_mode=None,
                  invoke_without_command=True, help="The git worktrees of agent-code --worktree NAME.")
_given: dict[str, Optional[Path]] = {}  # -C given before the sub-command
CWD = typer.Option(None, "--cwd", "-C", help="A directory of the repository (default: the current one).")


def _cwd(cwd: Path | None) -> Path:
    return project_dir("worktree", cwd, _given.get("cwd"))


def _fail(message: str) -> NoReturn:
    fail("worktree", message)


@app.callback()
def worktree(ctx: typer.Context, cwd: Optional[Path] = CWD) -> None:
    """The git worktrees of ``agent-code --worktree NAME``: ``list`` (default) and ``remove``."""
    _given["cwd"] = cwd
    if ctx.invoked_subcommand is None:
        list_(cwd)


@app.command("list")
def list_(cwd: Optional[Path] = CWD) -> None:
    """Each worktree under .agent/worktrees/: name, branch, clean or changed, path."""
    from agent_code.worktree import WorktreeError, list_worktrees

    try:
        found = list_worktrees(_cwd(cwd))
    except WorktreeError as exc:
        _fail(str(exc))
        return
    if not found:
        print("no worktrees (agent-code --worktree NAME makes one)")
        return
    width = max(len(w.name) for w in found)
    for w in found:
        if not w.exists:
            state = "missing (its directory is gone; remove NAME forgets it)"
        elif w.changes:
            state = f"{len(w.changes)} uncommitted change{'s' if len(w.changes) != 1 else ''}"
        else:
            state = "clean"
        if w.locked:
            state += ", locked"
        print(f"{w.name:<{width}}  {w.branch or '(detached HEAD)'}  {state}  {w.path}")


@app.command()
def remove(name: str = typer.Argument(..., help="The worktree's name (as given to --worktree)."),
           force: bool = typer.Option(False, "--force", "-f", help="Remove it even with uncommitted changes "
                                                                   "(they are lost)."),
           cwd: Optional[Path] = CWD) -> None:
    """Remove a worktree (its branch is kept); refuses uncommitted changes without --force."""
    from agent_code.worktree import WorktreeError
    from agent_code.worktree import remove as remove_worktree

    try:
        gone = remove_worktree(_cwd(cwd), name, force=force)
    except WorktreeError as exc:
        _fail(str(exc))
        return
    dropped = f"; {len(gone.changes)} uncommitted changes discarded" if gone.changes else ""
    kept = f"; branch {gone.branch} kept (git branch -D {gone.branch} deletes it)" if gone.branch else ""
    print(f"removed worktree {name} ({gone.path}){dropped}{kept}")


def main(argv: list[str]) -> None:
    app(args=argv, prog_name="agent-code worktree")
