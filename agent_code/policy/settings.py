"""The ``permissions`` section of a settings file: rules and the default mode, read and checked.

Finding, reading and merging the settings files (and their ``hooks``) is the agent's
(``agent/settings.py``); this module reads one file's ``permissions`` object::

    "permissions": {
      "allow": ["bash(git diff:*)", "bash(npm test)", "edit_file"],
      "ask":   ["bash(git push:*)"],
      "deny":  ["bash(rm:*)", "read_file(secrets/**)"],
      "defaultMode": "acceptEdits"
    }

The rule syntax is in ``policy/rules.py``. A rule or mode that cannot be read is a
:class:`SettingsError` naming the file — never silently skipped, since a skipped rule could
be a skipped deny rule. Unknown keys are warnings.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from agent_code.policy.rules import Rule, RuleError, parse_rule

MODES = ("default", "acceptEdits", "plan", "bypassPermissions")
PERMISSION_KEYS = ("allow", "ask", "deny", "defaultMode")
PRECEDENCE = ("deny", "ask", "allow")


class SettingsError(ValueError):
    """A settings file that cannot be used; the message names the file and the problem."""


@dataclass
class PermissionSettings:
    """One file's ``permissions``: its rules (deny, then ask, then allow), its
    ``defaultMode`` (None when it sets none) and warnings about unknown keys."""

    rules: list[Rule] = field(default_factory=list)
    default_mode: str | None = None
    warnings: list[str] = field(default_factory=list)


def read_permissions(permissions: object, label: str) -> PermissionSettings:
    """Check and parse the ``permissions`` object of the file reported as ``label``;
    raises :class:`SettingsError`. Pure."""
    out = PermissionSettings()
    if not isinstance(permissions, dict):
        raise SettingsError(f"'permissions' in {label} must be an object")
    for key in permissions:
        if key not in PERMISSION_KEYS:
            out.warnings.append(f"{label}: unknown key permissions.{key} ignored "
                                f"(known: {', '.join(PERMISSION_KEYS)})")
    for behavior in PRECEDENCE:
        texts = permissions.get(behavior, [])
        if not isinstance(texts, list):
            raise SettingsError(f"permissions.{behavior} in {label} must be a list of rules")
        for text in texts:
            try:
                out.rules.append(parse_rule(text, behavior, label))  # type: ignore[arg-type]
            except RuleError as exc:
                raise SettingsError(str(exc)) from None
    mode = permissions.get("defaultMode")
    if mode is not None:
        if mode not in MODES:
            raise SettingsError(f"permissions.defaultMode {mode!r} in {label} is not a mode; "
                                f"expected one of {', '.join(MODES)}")
        out.default_mode = mode
    return out


def by_precedence(rules: list[Rule]) -> None:
    """Sort merged rules in place: deny, then ask, then allow (stable within each)."""
    rules.sort(key=lambda r: PRECEDENCE.index(r.behavior))
