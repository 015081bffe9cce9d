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
      "hooks": {"PreToolUse": [...], "PostToolUse": [...], "Stop": [...]}
    }

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
from typing import Any, Callable

from agent_code.agent.hooks import HookConfigError, HookMatcher, Hooks, parse_hooks
from agent_code.policy import RuleSet
from agent_code.policy.settings import SettingsError, by_precedence, read_permissions

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


def read_settings_file(path: Path, label: str) -> dict[str, Any] | None:
    """One file's JSON object; None when the file does not exist."""
    try:
        text = path.read_text(encoding="utf-8")
    except FileNotFoundError:
        return None
    except (OSError, UnicodeDecodeError) as exc:
        raise SettingsError(f"cannot read {label}: {getattr(exc, 'strerror', None) or exc}") from None
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
        try:
            for event, matchers in parse_hooks(data.get("hooks"), label).items():
                out.hooks.setdefault(event, []).extend(matchers)
        except HookConfigError as exc:
            raise SettingsError(str(exc)) from None
    by_precedence(out.rules.rules)
    return out


def load_settings(root: Path, home: Path | None = None) -> Settings:
    """The merged settings of the project at ``root``; raises :class:`SettingsError`."""
    layers = []
    for path, label in settings_files(root, home):
        data = read_settings_file(path, label)
        if data is not None:
            layers.append((label, data))
    return merge_settings(layers)


def configure_agent(agent: Any, settings: Settings, root: Path, *, mode_from_cli: bool = False,
                    home: Path | None = None, report: Callable[[str], None] | None = None) -> Hooks:
    """Wire ``settings`` (and the installed skills) into ``agent``; returns its hooks."""
    from agent_code.agent.prompt import skills_prompt
    from agent_code.tools.skills import find_skills

    policy = agent.permissions
    policy.rules = RuleSet(list(settings.rules.rules), home=str(home) if home else None)
    policy.root = Path(root)
    if settings.default_mode and not mode_from_cli:
        if hasattr(agent, "set_permission_mode"):
            agent.set_permission_mode(settings.default_mode)
        else:
            policy.mode = type(policy.mode)(settings.default_mode)

    def session_info() -> dict[str, Any]:
        session = getattr(agent, "session", None)
        if session is None:
            return {}
        path = getattr(session, "path", None)
        return {"session_id": getattr(session, "id", None), "transcript_path": str(path) if path else None}

    hooks = Hooks(settings.hooks, Path(root), session=session_info, **({"report": report} if report else {}))
    if hooks.config.get("PreToolUse"):
        policy.pre_tool_use = hooks.pre_tool_use
    if hooks.config.get("PostToolUse"):
        agent.after_tool.append(hooks.post_tool_use)
    if hooks.config.get("Stop"):
        agent.on_stop.append(hooks.stop)

    section = skills_prompt(find_skills(Path(root), home))
    if section:
        agent.system = (agent.system or "") + "\n\n" + section
        rebuild = getattr(agent, "system_for_mode", None)
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


def apply_cli_settings(agent: Any, root: Path, report: Callable[[str], None] | None = None) -> Settings:
    """What the CLI does after building its agent: load the settings files of ``root``,
    print their warnings, and :func:`configure_agent`. Raises :class:`SettingsError`."""
    import sys

    settings = load_settings(root)
    for warning in settings.warnings:
        print(f"agent-code: warning: {warning}", file=sys.stderr)
    configure_agent(agent, settings, root, mode_from_cli=mode_given_on_command_line(), report=report)
    return settings
