"""Settings files: permission rules, the default mode and hooks, merged from three places.

Read in this order, each later one merging over the earlier ones::

    ~/.agent-code/settings.json          the user's, for every project
    <project>/.agent/settings.json       the project's, committed with it
    <project>/.agent/settings.local.json the user's for this project (keep it out of git)

Shape (a subset of Claude Code's; other top-level keys are ignored)::

    {
      "permissions": {
        "allow": ["bash(git diff:*)", "bash(npm test)", "edit_file"],
        "ask":   ["bash(git push:*)"],
        "deny":  ["bash(rm:*)", "read_file(secrets/**)"],
        "defaultMode": "acceptEdits"
      },
      "hooks": {"PreToolUse": [...], "PostToolUse": [...], "Stop": [...]},
      "mcpServers": {"name": {"command": "...", "args": [...]}}    (the user's file only: agent_code/mcp)
      "sandbox": {"enabled": true, "allowed_domains": [...], "writable": [...], "deny_read": [...]}
    }

The project's two files take effect only in a folder the user trusts (``agent/trust.py``):
in one never trusted, only their deny and ask rules are used (:func:`folder_trusted`,
:func:`trust_folder`; the question and the ``--trust-project`` flag are the CLI's,
``cli/trust.py``).

``sandbox`` (read by :func:`agent_code.confine.wall_settings`) configures the OS sandbox the
agent's commands run in. Only the user's own file may loosen it: ``enabled: false``,
``writable`` and ``allowed_domains`` are taken from ``~/.agent-code/settings.json`` alone; in a
project's files (``.agent/settings.json`` comes with a clone, and ``settings.local.json`` can
be committed too) they are ignored with a warning, and only ``deny_read`` (which hides more)
is added.

Only versions the user trusts take effect: a file that changed since the
user last accepted it — whoever changed it: a session of the agent, a process it left
behind, a checkout, the user's own editor — is asked about at the REPL's start, and in a run
with a prompt (``-p``, rollouts) the last accepted version is used instead (plus the new
version's deny and ask rules), with a warning naming the file and how to accept it
(``agent-code settings accept``). :func:`load_trusted_settings` does that;
:func:`load_settings` reads the files as they are.

Merging: the ``allow``/``ask``/``deny`` lists and each hook event's list are joined (every
file's rules count; precedence is by behaviour — deny, then ask, then allow — never by
file); ``defaultMode`` is the last file's that sets one, and applies only when
``--permission-mode`` is not given. The ``permissions`` section is read by
``policy/settings.py`` (rule syntax: ``policy/rules.py``), hooks by ``agent/hooks.py``. A
file that is not valid JSON, or a rule, mode or hook that cannot be read, is an error
naming the file — never silently skipped, since a skipped file could be a skipped deny
rule. Unknown keys inside ``permissions`` are warnings.

:func:`configure_agent` puts a loaded :class:`Settings` on an :class:`Agent`: the rules and
the PreToolUse hooks on its permission policy, PostToolUse on ``after_tool``, Stop on
``on_stop``, and the installed skills' list in its system prompt.
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any, Callable

from agent_code.agent.hooks import HookConfigError, HookMatcher, Hooks, parse_hooks
from agent_code.confine import WallSettings, wall_settings
from agent_code.agent.trust import (TRUST_DIR, Change, Review, SettingsFile, TrustStore, drop_hooks_running,
                                    hook_scripts, read_version, review, version_digest, visible)
from agent_code.policy import RuleSet
from agent_code.policy.settings import SettingsError, by_precedence, read_permissions

if TYPE_CHECKING:
    from agent_code.agent.loop import Agent
    from agent_code.confine import Wall

USER_DIR = ".agent-code"
PROJECT_DIR = ".agent"


def user_dir(home: Path | None = None) -> Path:
    """``~/.agent-code``: user settings, skills and the REPL's history."""
    return (home or Path.home()) / USER_DIR


def settings_files(root: Path, home: Path | None = None) -> list[tuple[Path, str]]:
    """The settings files in merge order, each with the name it is reported under."""
    return [
        (user_dir(home) / "settings.json", f"~/{USER_DIR}/settings.json"),
        (Path(root) / PROJECT_DIR / "settings.json", f"{PROJECT_DIR}/settings.json"),
        (Path(root) / PROJECT_DIR / "settings.local.json", f"{PROJECT_DIR}/settings.local.json"),
    ]


@dataclass
class Settings:
    rules: RuleSet = field(default_factory=RuleSet)
    default_mode: str | None = None
    hooks: dict[str, list[HookMatcher]] = field(default_factory=dict)
    sources: list[str] = field(default_factory=list)   # the files that were read
    warnings: list[str] = field(default_factory=list)
    unaccepted: list[str] = field(default_factory=list)  # files whose current version was not used
    # the user's own MCP servers ("mcpServers" of ~/.agent-code/settings.json, as written; agent_code/mcp)
    mcp_servers: dict[str, Any] = field(default_factory=dict)
    # the OS sandbox's settings (agent_code/confine): loosened only by the user's own file
    sandbox: WallSettings = field(default_factory=WallSettings)


def read_settings_file(path: Path, label: str) -> dict[str, Any] | None:
    """One file's JSON object; None when the file does not exist."""
    return parse_settings_text(read_version(path, label), label)


def parse_settings_text(text: str | None, label: str) -> dict[str, Any] | None:
    """A settings file's text as its JSON object (None for None); raises :class:`SettingsError`."""
    if text is None:
        return None
    try:
        data = json.loads(text) if text.strip() else {}
    except json.JSONDecodeError as exc:
        raise SettingsError(f"{label} is not valid JSON: {exc.msg} (line {exc.lineno}, column {exc.colno})") from None
    if not isinstance(data, dict):
        raise SettingsError(f"{label} must hold a JSON object, not {type(data).__name__}")
    return data


def merge_settings(layers: list[tuple[str, dict[str, Any]]]) -> Settings:
    """Merge parsed settings objects, earliest first (see the module doc); pure."""
    out = Settings()
    for label, data in layers:
        out.sources.append(label)
        permissions = read_permissions(data.get("permissions", {}), label)
        out.warnings.extend(permissions.warnings)
        for rule in permissions.rules:
            out.rules.add(rule)
        if permissions.default_mode is not None:
            out.default_mode = permissions.default_mode
        servers = data.get("mcpServers")
        if isinstance(servers, dict) and label.startswith(f"~/{USER_DIR}/"):
            out.mcp_servers.update(servers)
        elif servers is not None:
            out.warnings.append(f"{label}: \"mcpServers\" is read only from ~/{USER_DIR}/settings.json (an "
                                "object of servers); a project's servers go in .mcp.json")
        if "sandbox" in data:
            _merge_sandbox(out, data["sandbox"], label)
        try:
            for event, matchers in parse_hooks(data.get("hooks"), label).items():
                out.hooks.setdefault(event, []).extend(matchers)
        except HookConfigError as exc:
            raise SettingsError(str(exc)) from None
    by_precedence(out.rules.rules)
    return out


def _merge_sandbox(out: Settings, section: object, label: str) -> None:
    """Merge one file's ``sandbox`` section into ``out`` (module doc: only the user's file loosens)."""
    try:
        parsed = wall_settings(section, label)
    except ValueError as exc:
        raise SettingsError(str(exc)) from None
    current = out.sandbox
    if label.startswith(f"~/{USER_DIR}/"):
        out.sandbox = WallSettings(enabled=parsed.enabled if isinstance(section, dict) and "enabled" in section
                                   else current.enabled,
                                   allowed_domains=current.allowed_domains + parsed.allowed_domains,
                                   writable=current.writable + parsed.writable,
                                   deny_read=current.deny_read + parsed.deny_read)
        return
    ignored = [key for key, given in (("enabled: false", not parsed.enabled), ("writable", parsed.writable),
                                      ("allowed_domains", parsed.allowed_domains)) if given]
    if ignored:
        out.warnings.append(f"{label}: sandbox {', '.join(ignored)} ignored: a project's settings may only hide "
                            f"more (deny_read); loosen the sandbox in ~/{USER_DIR}/settings.json")
    out.sandbox = WallSettings(current.enabled, current.allowed_domains, current.writable,
                               current.deny_read + parsed.deny_read)


def load_settings(root: Path, home: Path | None = None) -> Settings:
    """The merged settings of the project at ``root``; raises :class:`SettingsError`."""
    layers = []
    for path, label in settings_files(root, home):
        data = read_settings_file(path, label)
        if data is not None:
            layers.append((label, data))
    return merge_settings(layers)


# --- trusted versions (agent/trust.py) ---------------------------------------------

def trust_store(home: Path | None = None) -> TrustStore:
    """``~/.agent-code/trust``: the accepted version of each settings file."""
    return TrustStore(user_dir(home) / TRUST_DIR)


def _real(path: Path) -> Path:
    try:
        return path.resolve()
    except (OSError, RuntimeError):
        return path.absolute()


def current_settings(root: Path, home: Path | None = None) -> list[SettingsFile]:
    """The settings files of ``root`` as they are now, each read once, with its trust key: the
    resolved home or project root and then the file's place under it as written (a
    symlinked ``.agent`` or file is still the same settings file)."""
    home_real, root_real = _real(home or Path.home()), _real(Path(root))
    out = []
    for path, label in settings_files(root, home):
        if label.startswith("~/"):
            key, group = home_real / label[2:], "user"
        else:
            key, group = root_real / label, "project"
        out.append(SettingsFile(path, label, str(key), group, read_version(path, label)))
    return out


def project_ran_before(root: Path, current_session: Path | None = None) -> bool:
    """Whether ``root/.agent/sessions`` holds a session, other than ``current_session`` while it
    holds no more than its header line (a session this start just opened)."""
    from agent_code.agent.sessions import sessions_dir

    try:
        logs = list(sessions_dir(root).glob("*.jsonl"))
    except OSError:
        return False
    for log in logs:
        if current_session is not None and _real(log) == _real(Path(current_session)):
            try:
                with log.open("rb") as handle:
                    handle.readline()
                    if not handle.readline():
                        continue
            except OSError:
                continue
        return True
    return False


def enclosing_project(root: Path, store: TrustStore) -> Path | None:
    """The nearest directory above ``root`` that is a project a session ran in (a session
    saved there, or its settings recorded in the store); None if there is none."""
    for outer in _real(Path(root)).parents:
        if project_ran_before(outer) or any(store.has(str(outer / PROJECT_DIR / name))
                                            for name in ("settings.json", "settings.local.json")):
            return outer
    return None


def folder_trusted(root: Path, home: Path | None = None) -> bool:
    """Whether the user trusts the project folder ``root`` (its resolved path; ``agent/trust.py``)."""
    return trust_store(home).folder(_real(Path(root))) is not None


def trust_folder(root: Path, home: Path | None = None, *, how: str,
                 files: list[SettingsFile] | None = None, current_session: Path | None = None) -> list[str]:
    """Trust the project folder ``root``: record the given versions of its settings files
    (``files``: the project's, as shown to the user; default: as they are now; absent ones
    too) as accepted, then the folder itself. Returns the labels of the files present.
    On a store with no record yet, the user's own file is reviewed first (its first sight,
    as this start would take it: ``current_session``, the session it opened), so these new
    records do not make it look as if agent-code had run with this home before.
    Raises :class:`SettingsError` for a file that cannot be used (nothing recorded then) and
    OSError when the store cannot be written."""
    store = trust_store(home)
    if not store.has_any():
        review_settings(root, home, current_session=current_session, project_trusted=False)
    root_real, home_dir = _real(Path(root)), _real(home or Path.home())
    chosen = [f for f in (files if files is not None else current_settings(root, home)) if f.group == "project"]
    for f in chosen:  # every file checked before anything is recorded
        data = parse_settings_text(f.text, f.label)
        if data is not None:
            merge_settings([(f.label, data)])
            f.scripts = hook_scripts(data, root_real, home_dir)
    for f in chosen:
        store.put(f.key, f.text, how, f.scripts)
    store.trust_folder(root_real, how)
    return [f.label for f in chosen if f.text is not None]


def review_settings(root: Path, home: Path | None = None, *, current_session: Path | None = None,
                    record_first_sight: bool = True,
                    project_trusted: bool | None = None) -> tuple[Review, dict[str, dict[str, Any] | None]]:
    """Read and check the settings files, compare them with the trust store (recording first
    sights) and return the review with each file's parsed current version (by key). The
    project's files are reviewed only when their folder is trusted (``project_trusted``; None:
    as the store says); otherwise only their deny and ask rules are checked, and the review's
    ``folder_trusted`` is False. Raises :class:`SettingsError` for a file that cannot be used —
    before anything is recorded."""
    files = current_settings(root, home)
    if project_trusted is None:
        project_trusted = folder_trusted(root, home)
    parsed: dict[str, dict[str, Any] | None] = {}
    home_dir = _real(home or Path.home())
    for f in files:
        parsed[f.key] = data = parse_settings_text(f.text, f.label)
        if data is None:
            continue
        if f.group == "project" and not project_trusted:
            merge_settings([(f.label, restricting_part(data) or {})])  # only these rules are used
            continue
        merge_settings([(f.label, data)])  # check rules, mode and hooks now
        f.scripts = hook_scripts(data, _real(Path(root)), home_dir)
    store = trust_store(home)
    evidence = None
    if project_ran_before(root, current_session):
        evidence = "a session ran in this project before"
    else:
        outer = enclosing_project(root, store)
        if outer is not None:
            evidence = f"it is inside {visible(str(outer))}, a project a session ran in"
    reviewed = [f for f in files if project_trusted or f.group != "project"]
    found = review(reviewed, store, project_evidence=evidence, record_first_sight=record_first_sight)
    found.files, found.folder_trusted = files, project_trusted
    return found, parsed


def inherit_trust(root: Path, origin: Path, home: Path | None = None) -> list[str]:
    """For a git worktree ``root`` of the project ``origin`` (``agent-code --worktree``): record
    each project settings file of ``root`` not yet in the trust store as trusted when it is
    exactly the version the user trusts in ``origin`` — the same text (or both absent) and the
    same hook scripts. Without it, a worktree's committed settings would be unrecorded files
    inside a project a session ran in, and not used until accepted again. The worktree's folder
    is trusted when ``origin``'s is (and only then: a file that differs is then a change to
    accept, as anywhere). Returns the labels recorded; raises OSError when the store cannot be
    written."""
    store = trust_store(home)
    root_real, origin_real, home_dir = _real(Path(root)), _real(Path(origin)), _real(home or Path.home())
    if store.folder(origin_real) is None:
        return []
    done = []
    for path, label in settings_files(root, home)[1:]:   # the project's two files
        key = str(root_real / label)
        if store.has(key):
            continue
        record = store.get(str(origin_real / label))
        try:
            text = read_version(path, label)
            data = parse_settings_text(text, label)
        except SettingsError:
            continue
        if record is None or not record.readable or record.digest != version_digest(text):
            continue
        scripts = hook_scripts(data, root_real, home_dir)
        if scripts != record.scripts:
            continue
        store.put(key, text, f"as trusted in {origin_real}", scripts)
        done.append(label)
    if store.folder(root_real) is None:
        store.trust_folder(root_real, f"a worktree of {origin_real}, a trusted folder")
    return done


def accept_hint(root: Path) -> str:
    import shlex

    return (f"if you made it, accept it in a terminal: agent-code settings accept -C {visible(shlex.quote(str(root)))} "
            "(or start the REPL there)")


def describe_change(change: Change) -> str:
    """The headline and the summary of what changed, one line each."""
    return "\n".join([change.headline() + ":", *(f"  {line}" for line in change.summary())])


def restricting_part(data: dict[str, Any] | None) -> dict[str, Any] | None:
    """The part of a settings object that can only restrict: its deny and ask rules."""
    permissions = (data or {}).get("permissions") or {}
    kept = {k: permissions[k] for k in ("deny", "ask") if permissions.get(k)}
    return {"permissions": kept} if kept else None


def load_trusted_settings(root: Path, home: Path | None = None, *, accept: Callable[[Change], bool] | None = None,
                          warn: Callable[[str], None] | None = None,
                          current_session: Path | None = None, record_first_sight: bool = True,
                          project_trusted: bool | None = None) -> Settings:
    """The merged settings of ``root`` in the versions the user trusts (module doc).
    ``accept`` asks the user about a changed file (the REPL's start; None: nobody can be
    asked, as in a run with a prompt); ``warn`` gets a message for each file whose current
    version is not used, and trust-store problems. ``project_trusted``: whether the project's
    files may be used at all (None: whether the store trusts the folder); when not, only their
    deny and ask rules are (the caller says so once: ``cli/trust.py``). Raises
    :class:`SettingsError`."""
    import sys

    if warn is None:
        def warn(message: str) -> None:
            print(f"agent-code: warning: {message}", file=sys.stderr)

    found, parsed = review_settings(root, home, current_session=current_session,
                                    record_first_sight=record_first_sight, project_trusted=project_trusted)
    for message in found.warnings:
        warn(message)
    store = trust_store(home)
    layers: list[tuple[str, dict[str, Any]]] = []
    unaccepted = []
    for f in found.files:
        data = parsed[f.key]
        if f.group == "project" and not found.folder_trusted:
            restricting = restricting_part(data)
            if restricting is not None:
                layers.append((f"{f.label} (deny and ask rules only: the folder is not trusted)", restricting))
            if data is not None:
                unaccepted.append(f.label)
            continue
        change = found.change_of(f.key)
        if change is not None and accept is not None and accept(change):
            try:
                store.put(f.key, f.text, "accepted", f.scripts)
            except OSError as exc:
                warn(f"{f.label} is used in this session, but its acceptance could not be saved in "
                     f"{store.dir} ({exc.strerror or exc}); you will be asked again")
            change = None
        if change is None:
            if data is not None:
                layers.append((f.label, data))
            continue
        unaccepted.append(f.label)
        trusted = parse_settings_text(change.trusted_text, f"{f.label} (last accepted version)")
        # its hooks that run a script changed since it was accepted do not run
        accepted_scripts = change.record.scripts if change.record is not None else {}
        scripts_now = hook_scripts(trusted, _real(Path(root)), _real(home or Path.home()))
        changed_scripts = {t for t in set(accepted_scripts) | set(scripts_now)
                           if accepted_scripts.get(t) != scripts_now.get(t)}
        trusted = drop_hooks_running(trusted, changed_scripts)
        if trusted is not None:
            layers.append((f"{f.label} (last accepted version)", trusted))
        restricting = restricting_part(data) if change.kind != "scripts" else None
        if restricting is not None:
            layers.append((f"{f.label} (deny and ask rules of the unaccepted version)", restricting))
        used = (("the version you last accepted" if trusted is not None else "none of it")
                + (" without the hooks that run a changed script" if changed_scripts and trusted is not None else "")
                + (", plus the new version's deny and ask rules" if restricting else ""))
        if accept is not None:  # asked, and declined
            warn(f"{f.label} not accepted: this session uses {used}; you will be asked again at the next start.")
        else:
            warn(describe_change(change) + f"\nnot accepted: this run uses {used}. A session of the agent "
                 "may have made this change; " + accept_hint(root) + ".")
    settings = merge_settings(layers)
    settings.unaccepted = unaccepted
    return settings


def configure_agent(agent: Agent, settings: Settings, root: Path, *, mode_from_cli: bool = False,
                    home: Path | None = None, report: Callable[[str], None] | None = None,
                    project_skills: bool = True, wall: Wall | None = None) -> Hooks:
    """Wire ``settings`` (and the installed skills: the project's only with ``project_skills``,
    for a trusted folder) into ``agent``; returns its hooks, which run inside ``wall`` when given."""
    from agent_code.agent.prompt import skills_prompt
    from agent_code.tools.skills import find_skills

    policy = agent.permissions
    policy.rules = RuleSet(list(settings.rules.rules), home=str(home) if home else None)
    policy.root = Path(root)
    if settings.default_mode and not mode_from_cli:
        agent.set_permission_mode(settings.default_mode)

    def session_info() -> dict[str, Any]:
        session = agent.session
        if session is None:
            return {}
        return {"session_id": session.id, "transcript_path": str(session.path)}

    hooks = Hooks(settings.hooks, Path(root), session=session_info, wall=wall)
    if report:
        hooks.report = report
    if hooks.config.get("PreToolUse"):
        policy.pre_tool_use = hooks.pre_tool_use
    if hooks.config.get("PostToolUse"):
        agent.after_tool.append(hooks.post_tool_use)
    if hooks.config.get("Stop"):
        agent.on_stop.append(hooks.stop)

    # a profile without the skill tool (--tool-profile small) gets no skills section
    agent.ctx.project_skills = project_skills  # the skill tool loads what the prompt lists
    section = skills_prompt(find_skills(Path(root), home, project=project_skills)) if agent.tools.get("skill") else ""
    if section:
        agent.system = (agent.system or "") + "\n\n" + section
        rebuild = agent.system_for_mode
        if rebuild is not None:  # a mode switch rebuilds the prompt: keep the skills in it
            agent.system_for_mode = lambda mode: rebuild(mode) + "\n\n" + section
    return hooks


def mode_given_on_command_line(parameter: str = "permission_mode") -> bool:
    """Whether the running typer command got ``parameter`` from the user (command line or
    environment), not from its default — ``defaultMode`` yields to it then. Typer ships
    its own copy of click (``typer._click``) in recent versions, plain click in older
    ones; the current context is looked up in whichever is running."""
    import importlib

    for package in ("typer._click", "click"):
        try:
            current = importlib.import_module(f"{package}.globals").get_current_context
            source = importlib.import_module(f"{package}.core").ParameterSource
        except (ImportError, AttributeError):
            continue
        ctx = current(silent=True)
        if ctx is not None:
            return ctx.get_parameter_source(parameter) in (source.COMMANDLINE, source.ENVIRONMENT)
    return False


def apply_cli_settings(agent: Agent, root: Path, report: Callable[[str], None] | None = None,
                       accept: Callable[[Change], bool] | None = None, *, project_trusted: bool,
                       open_wall: Callable[[WallSettings], Wall | None] | None = None) -> Settings:
    """What the CLI does after building its agent: load the trusted settings of ``root``
    (:func:`load_trusted_settings`; ``accept``: the REPL's start-up question, None in a run
    with a prompt; ``project_trusted``: the folder's trust, decided by ``cli/trust.py``), print
    their warnings, and :func:`configure_agent`. Raises :class:`SettingsError`. ``open_wall``:
    given the settings' ``sandbox`` section, the OS sandbox the session's commands run in (None:
    none); it goes on ``agent.ctx.wall`` (where the bash tool runs), on the permission policy (which
    then runs contained commands unasked in default and acceptEdits) and on the hooks."""
    import sys

    session = agent.session
    settings = load_trusted_settings(root, accept=accept, current_session=session.path if session is not None else None,
                                     project_trusted=project_trusted)
    for warning in settings.warnings:
        print(f"agent-code: warning: {warning}", file=sys.stderr)
    wall = open_wall(settings.sandbox) if open_wall is not None else None
    agent.ctx.wall = agent.permissions.wall = wall   # the commands run in it, so the policy lets them run
    configure_agent(agent, settings, root, mode_from_cli=mode_given_on_command_line(), report=report,
                    project_skills=project_trusted, wall=wall)
    return settings
