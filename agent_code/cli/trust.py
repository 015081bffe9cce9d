"""Folder trust at a session's start: whether a project's own configuration is used.

A project configures agent-code through files it carries — ``.agent/settings.json`` and
``.agent/settings.local.json`` (permissions, ``defaultMode``, hooks), ``.agents/skills/``
(instructions put in the model's prompt) and ``.mcp.json`` (servers: programs that run as the
user). A repository the user merely cloned must not configure its user, so these are used only
in a folder the user trusts (the record: ``agent/trust.py``). :func:`decide` is what
``cli/run.py`` does before loading the settings:

- ``--no-trust-project``: none of them, whatever the store says (rollouts pass it: a task's
  ``.agent/`` must not loosen the harness's own flags);
- a folder the store trusts: all of them (each settings file still in the version the user
  accepted; each project MCP server still approved on its own);
- ``--trust-project``: trust the folder now and record it (with the current versions of its
  settings files as accepted; it does not accept later changes to them: ``agent-code settings
  accept`` does);
- a folder that configures none of these: nothing to ask (and nothing recorded);
- the REPL on a terminal: shows what the project would configure and asks once, y/N; yes
  trusts and records it, no runs without (asked again next time);
- otherwise (``-p``, a prompt, piped input — an agent's command has no terminal): runs with
  none of them and says so once on stderr, with how to trust the folder.

Without trust the project's deny and ask rules still apply: they can only restrict. The
project's ``AGENTS.md``/``CLAUDE.md`` are instructions, not configuration, and stay loaded
(``agent/memory.py``).
"""

from __future__ import annotations

import sys
from dataclasses import dataclass, field
from pathlib import Path
from typing import Callable, TextIO

from agent_code.agent.settings import current_settings, folder_trusted, trust_folder
from agent_code.agent.trust import SettingsFile, summarize, visible
from agent_code.cli.confirm import terminal, yes_no

FLAG = "--trust-project"
NO_FLAG = "--no-trust-project"


@dataclass
class ProjectConfig:
    """What a project folder would configure, read once (what is shown is what is recorded)."""

    root: Path
    settings: list[SettingsFile] = field(default_factory=list)   # the project's two files (absent: text None)
    skills: list[str] = field(default_factory=list)              # the project's skill names
    mcp_file: bool = False                                       # .mcp.json exists
    mcp: list[str] = field(default_factory=list)                 # a line per server (or why none can be read)

    @property
    def empty(self) -> bool:
        return not (any(f.text is not None for f in self.settings) or self.skills or self.mcp_file)

    def brief(self) -> str:
        """One line: the files that would configure the session."""
        parts = [f.label for f in self.settings if f.text is not None]
        if self.skills:
            parts.append(f".agents/skills ({', '.join(visible(name) for name in self.skills)})")
        if self.mcp_file:
            parts.append(".mcp.json")
        return ", ".join(parts)

    def lines(self) -> list[str]:
        """What the project would configure, for a person deciding whether to trust it."""
        out = []
        for f in self.settings:
            if f.text is None:
                continue
            shown = [line for line in summarize(None, f.text) if not line.startswith("(no change")]
            out.append(f"  {f.label}:")
            out += [f"    {line.replace(' (unset) → ', ' ')}" for line in shown] or ["    (no permissions or hooks)"]
        if self.skills:
            out.append(f"  skills (.agents/skills, put in the model's prompt): "
                       f"{', '.join(visible(name) for name in self.skills)}")
        if self.mcp_file:
            out.append("  MCP servers (.mcp.json; each still asks before it first starts):")
            out += [f"    {line}" for line in self.mcp] or ["    (none)"]
        return out


def project_config(root: Path, home: Path | None = None) -> ProjectConfig:
    """What the project at ``root`` would configure; raises ``SettingsError`` for a settings
    file that cannot be read (a FIFO, not UTF-8, too large)."""
    from agent_code.mcp import McpConfigError, project_servers
    from agent_code.mcp.config import PROJECT_FILE
    from agent_code.tools.skills import project_skills

    config = ProjectConfig(Path(root))
    config.settings = [f for f in current_settings(root, home) if f.group == "project"]
    config.skills = [s.name for s in project_skills(root)]
    mcp_path = Path(root) / PROJECT_FILE
    config.mcp_file = mcp_path.exists() or mcp_path.is_symlink()
    if config.mcp_file:
        try:
            config.mcp = [f"{visible(s.name)}: {visible(s.describe())}" for s in project_servers(root)]
        except McpConfigError as exc:
            config.mcp = [f"(cannot be read: {visible(str(exc))})"]
    return config


def folder_question(stdin: TextIO | None = None,
                    stdout: TextIO | None = None) -> Callable[[ProjectConfig], bool] | None:
    """The start-up question about a folder never trusted: shows what it would configure and
    asks y/N. None — nobody to ask — unless stdin and stdout are a terminal (piped input may be
    a command the agent ran, which must never trust a folder)."""
    pair = terminal(stdin, stdout)
    if pair is None:
        return None
    stdin, out = pair

    def ask(config: ProjectConfig) -> bool:
        print(f"This folder has its own agent-code configuration, which you have not trusted yet:\n"
              f"  {visible(str(config.root))}", file=out)
        print("\n".join(config.lines()), file=out)
        print("A repository can loosen permissions and run commands as you through these files (a clone "
              "you have not read, or a session of the agent, may have written them): trust only a folder "
              "you know. Without trust this session uses none of them (but their deny and ask rules).",
              file=out, flush=True)
        return yes_no(stdin, out, "trust this folder (its settings, hooks, skills and MCP servers)?")

    return ask


def not_trusted_note(config: ProjectConfig) -> str:
    import shlex

    where = visible(shlex.quote(str(config.root)))
    return (f"this folder's own configuration is not trusted, so this run uses none of it (only the deny and "
            f"ask rules of its settings): {config.brief()}. To trust the folder: pass {FLAG}, or run "
            f"agent-code in a terminal there and answer yes, or agent-code settings accept -C {where}")


def _note(message: str) -> None:
    print(f"agent-code: note: {message}", file=sys.stderr)


def decide(root: Path, *, flag: bool | None, ask: Callable[[ProjectConfig], bool] | None,
           home: Path | None = None, note: Callable[[str], None] = _note,
           current_session: Path | None = None) -> bool:
    """Whether this session uses the project's own configuration (module doc). ``flag``:
    ``--trust-project`` (True), ``--no-trust-project`` (False) or neither (None); ``ask``: the
    REPL's question (None: nobody to ask); ``current_session``: the session this start opened.
    Records the folder's trust when it is given now. Raises ``SettingsError`` for a settings
    file that cannot be used."""
    if flag is False:
        return False
    if folder_trusted(root, home):
        return True
    config = project_config(root, home)
    if flag is None and config.empty:
        return False
    if flag is None and ask is not None and not ask(config):
        note("the folder is not trusted: this session uses none of its own configuration (only the deny "
             "and ask rules of its settings); you will be asked again at the next start")
        return False
    if flag is None and ask is None:
        note(not_trusted_note(config))
        return False
    how = f"{FLAG} on the command line" if flag else "accepted at the REPL's start"
    try:
        trust_folder(root, home, how=how, files=config.settings, current_session=current_session)
    except OSError as exc:
        note(f"the folder is trusted for this session, but that could not be saved ({exc.strerror or exc}): "
             "its settings files are not recorded, and the next start asks again")
    return True
