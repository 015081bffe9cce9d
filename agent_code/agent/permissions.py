"""Permission modes: whether a tool call may run, decided from the tool's ``kind``.

The decision is two pure steps, so each can grow without the other changing:

1. :func:`mode_behavior` — the mode table: ``allow``, ``ask`` or ``deny`` for a kind.

   ====================  ======  ======  =======
   mode                  read    edit    execute
   ====================  ======  ======  =======
   ``default``           allow   ask     ask
   ``acceptEdits``       allow   allow   ask
   ``plan``              allow   deny    deny
   ``bypassPermissions`` allow   allow   allow
   ====================  ======  ======  =======

2. :func:`decide` — turns that into a :class:`Decision` for one call. ``ask`` goes to
   the ``ask`` callback when there is one (a REPL prompt, later); in a headless run
   nobody can answer, so ``ask`` becomes a denial whose message tells the model not to
   retry and tells the user which ``--permission-mode`` would allow it.

:class:`PermissionPolicy` is what the agent loop holds and asks before every call; it
never looks at tool names. Later layers (allow/ask/deny rules from settings files,
hooks) slot in as further steps of :meth:`PermissionPolicy.check` before the mode table.
"""

from __future__ import annotations

from dataclasses import dataclass
from enum import Enum
from typing import Any, Callable, Literal

from agent_code.tools.base import Tool, ToolKind

Behavior = Literal["allow", "ask", "deny"]


class PermissionMode(str, Enum):
    DEFAULT = "default"
    ACCEPT_EDITS = "acceptEdits"
    PLAN = "plan"
    BYPASS_PERMISSIONS = "bypassPermissions"


MODE_TABLE: dict[PermissionMode, dict[str, Behavior]] = {
    PermissionMode.DEFAULT: {"read": "allow", "edit": "ask", "execute": "ask"},
    PermissionMode.ACCEPT_EDITS: {"read": "allow", "edit": "allow", "execute": "ask"},
    PermissionMode.PLAN: {"read": "allow", "edit": "deny", "execute": "deny"},
    PermissionMode.BYPASS_PERMISSIONS: {"read": "allow", "edit": "allow", "execute": "allow"},
}

_DOES = {"edit": "changes files", "execute": "runs commands"}
_GRANT = {
    "edit": "--permission-mode acceptEdits (or bypassPermissions, which also allows commands)",
    "execute": "--permission-mode bypassPermissions",
}


@dataclass(frozen=True)
class Decision:
    allowed: bool
    message: str = ""  # for the model (as an is_error tool_result) when not allowed


def mode_behavior(mode: PermissionMode | str, kind: ToolKind) -> Behavior:
    """The mode table; an unknown kind is treated like ``execute`` (the most dangerous)."""
    row = MODE_TABLE[PermissionMode(mode)]
    return row.get(kind, row["execute"])


def denial_message(mode: PermissionMode | str, tool_name: str, kind: ToolKind, behavior: Behavior) -> str:
    """Why ``tool_name`` may not run, what the model should do, and how the user grants it."""
    mode = PermissionMode(mode)
    does = _DOES.get(kind, "runs commands")
    grant = _GRANT.get(kind, _GRANT["execute"])
    if mode is PermissionMode.PLAN:
        return (f"Permission denied: {tool_name} {does}, and plan mode is read-only. Do not retry it: "
                "use the read-only tools to investigate and give your plan as your answer. To carry "
                f"it out, the user can run agent-code again with {grant}.")
    if behavior == "ask":
        why = (f"permission mode '{mode.value}' needs the user's approval for that, and nobody can "
               "approve it in this run")
    else:
        why = f"permission mode '{mode.value}' does not allow it"
    return (f"Permission denied: {tool_name} {does}; {why}. Do not retry it: continue with the tools "
            "you are allowed to use, and describe the change or command you would have made. "
            f"The user can allow it by running agent-code with {grant}.")


def decide(mode: PermissionMode | str, tool_name: str, kind: ToolKind,
           ask: Callable[[], bool] | None = None) -> Decision:
    """Allow or deny one call. ``ask`` answers an ``ask`` behaviour; without it (headless)
    ``ask`` is a denial."""
    behavior = mode_behavior(mode, kind)
    if behavior == "allow":
        return Decision(True)
    if behavior == "ask" and ask is not None and ask():
        return Decision(True)
    return Decision(False, denial_message(mode, tool_name, kind, behavior))


Asker = Callable[[Tool, Any], bool]  # (tool, arguments) -> approved?


@dataclass
class PermissionPolicy:
    """The permission state of one agent: the mode and, in an interactive session, who to ask."""

    mode: PermissionMode = PermissionMode.DEFAULT
    ask: Asker | None = None

    def __post_init__(self) -> None:
        self.mode = PermissionMode(self.mode)

    @classmethod
    def of(cls, value: "PermissionPolicy | PermissionMode | str | None") -> "PermissionPolicy":
        """A policy from a policy, a mode or a mode's name (``None``: the default mode)."""
        if isinstance(value, PermissionPolicy):
            return value
        return cls(PermissionMode(value or PermissionMode.DEFAULT))

    def check(self, tool: Tool, arguments: Any) -> Decision:
        ask = None if self.ask is None else (lambda: self.ask(tool, arguments))  # type: ignore[misc]
        return decide(self.mode, tool.name, tool.kind, ask)
