"""``agent-code settings [status|accept] [-C DIR]``: the settings files and whether their
current versions are the ones you accepted (``agent/trust.py``).

``status`` (the default) says whether you trust the project's folder (``cli/trust.py``) and
lists ``~/.agent-code/settings.json``, ``.agent/settings.json`` and
``.agent/settings.local.json`` of the project with what changed in each since you last
accepted it. ``accept`` first asks whether to trust a folder never trusted that has its own
configuration (showing it), then shows each change and asks y/N; a version you accept takes
effect from the next start, in the REPL and in runs with a prompt (``-p``) alike. It asks on a
terminal only: no flag skips the question, since a command the agent runs could use it.
Exit codes: 0 done, 1 an error (a settings file that cannot be used, no terminal to ask on).
"""

from __future__ import annotations

import sys
from pathlib import Path
from typing import Optional

import typer

from agent_code.cli.project import fail, project_dir

app = typer.Typer(add_completion=False, pretty_exceptions_enable=False, rich_markup_mode=None,
                  invoke_without_command=True, help="Settings files changed since you accepted them.")
_given: dict[str, Optional[Path]] = {}  # -C given before the sub-command
CWD = typer.Option(None, "--cwd", "-C", help="Project directory (default: the current one).")


def _review(cwd: Path | None, record: bool):
    from agent_code.agent.settings import SettingsError, review_settings

    root = project_dir("settings", cwd, _given.get("cwd"))
    try:
        return root, review_settings(root, record_first_sight=record)[0]
    except SettingsError as exc:
        fail("settings", str(exc))


@app.callback()
def settings(ctx: typer.Context, cwd: Optional[Path] = CWD) -> None:
    """Settings files changed since you accepted them (``status``), and accepting them (``accept``)."""
    _given["cwd"] = cwd
    if ctx.invoked_subcommand is None:
        status(cwd)


@app.command()
def status(cwd: Optional[Path] = CWD) -> None:
    """Each settings file: accepted, absent, or what changed since you accepted it."""
    import shlex

    from agent_code.agent.settings import describe_change
    from agent_code.agent.trust import visible

    root, found = _review(cwd, record=False)
    if not found.folder_trusted:
        from agent_code.cli.trust import project_config

        config = project_config(root)
        print("folder: not trusted" + (f"; its own configuration is not used (only the deny and ask rules of its "
                                       f"settings): {config.brief()}" if not config.empty
                                       else " (it has no configuration of its own)"))
    for f in found.files:
        if f.group == "project" and not found.folder_trusted:
            print(f"{f.label}: {'present, not used' if f.text is not None else 'absent'}")
            continue
        change = found.change_of(f.key)
        if change is not None:
            print(describe_change(change))
        elif f.label in found.first_sight and f.text is not None:
            print(f"{f.label}: {'present' if f.text is not None else 'absent'}, not yet recorded "
                  "(taken as it is at the next start: no session has run with it)")
        else:
            print(f"{f.label}: {'accepted' if f.text is not None else 'absent'}")
    if found.changes or not found.folder_trusted:
        print(f"to accept: agent-code settings accept -C {visible(shlex.quote(str(root)))}")


@app.command()
def accept(cwd: Optional[Path] = CWD) -> None:
    """Show each changed settings file and ask whether to accept its current version."""
    from agent_code.agent.settings import trust_store
    from agent_code.cli.repl import settings_question

    ask = settings_question()
    if ask is None:
        print("agent-code settings accept: error: needs a terminal: it shows each change and asks you "
              "(a command the agent runs has none, so it cannot accept settings)", file=sys.stderr)
        raise typer.Exit(1)
    root = project_dir("settings", cwd, _given.get("cwd"))
    _accept_folder(root)
    root, found = _review(cwd, record=True)
    if not found.changes:
        print("nothing to accept: every settings file is as you accepted it")
        return
    store = trust_store()
    for change in found.changes:
        if not ask(change):
            print(f"{change.file.label}: not accepted")
            continue
        try:
            store.put(change.file.key, change.file.text, "accepted", change.file.scripts)
        except OSError as exc:
            print(f"agent-code settings: error: cannot save the acceptance in {store.dir}: "
                  f"{exc.strerror or exc}", file=sys.stderr)
            raise typer.Exit(1)
        print(f"{change.file.label}: accepted")


def _accept_folder(root: Path) -> None:
    """Ask whether to trust the folder ``root`` when it has configuration of its own and is
    not trusted yet (``cli/trust.py``); record the answer yes."""
    from agent_code.agent.settings import SettingsError, folder_trusted, trust_folder
    from agent_code.cli.trust import folder_question, project_config

    ask = folder_question()
    if ask is None or folder_trusted(root):
        return
    try:
        config = project_config(root)
        if config.empty:
            return
        if not ask(config):
            print("folder: not trusted")
            return
        trust_folder(root, how="accepted with agent-code settings accept", files=config.settings)
    except SettingsError as exc:
        fail("settings", str(exc))
    except OSError as exc:
        fail("settings", f"cannot save the folder's trust in the trust store: {exc.strerror or exc}")
    print("folder: trusted (its settings files recorded as accepted in the versions shown)")


def main(argv: list[str]) -> None:
    app(args=argv, prog_name="agent-code settings")
