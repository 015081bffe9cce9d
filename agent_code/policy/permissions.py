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
never looks at tool names. :meth:`PermissionPolicy.explain` computes the decision and
why (an :class:`Explanation`: behaviour, reason, the rule or deny-list entry and the file
it came from) from steps 1–3; :meth:`PermissionPolicy.check` acts on it with steps 4–5:

1. the **built-in deny list** (``policy/denylist.py``: ``rm -rf /`` in any spelling, mkfs,
   dd to a device, fork bombs, curl | sh …) and the **deny rules** from settings
   (``policy/rules.py``) — in every mode, bypassPermissions included; then, in every mode
   but bypassPermissions, **self-protection** (``policy/self_protection.py``): a call that
   would change the agent's settings, hooks, skills or git's config and hooks is refused,
   and one that may (a write target the policy cannot know) is at least asked;
2. the **ask** and **allow** rules, which replace the mode table's answer (in plan mode
   only for read calls: plan stays read-only whatever the rules say);
3. the **mode table** (above);
4. **PreToolUse hooks** (``agent/hooks.py``) for a call that is not already refused,
   before anyone is asked: a hook that exits 2 refuses it, with its stderr as the reason;
5. for ``ask``: the ``ask`` callback (the REPL's y/n/always prompt), else a denial.

**The OS sandbox** (``agent_code/confine``) is the first wall; this policy is the second. With
a wall (``PermissionPolicy.wall``), a call that the mode table would ask about in ``default``
or ``acceptEdits`` runs without a question when the wall contains it: a command of the
agent's own bash tool (it runs inside the wall, whatever it does) — never an MCP tool's call,
whose server acts where the wall does not reach. Rules still decide first (an ``ask`` rule
still asks), the deny list and deny rules still refuse, and self-protection's ``ask`` (a write
target it cannot know) still asks. Edits keep the mode's answer: the edit tools run in the
agent's own process, outside the wall, and in ``default`` an edit is the user's review point.

Plan mode also lets read-only **commands** run (``ls``, ``cat``, ``grep``, ``git diff``, …):
:func:`effective_kind` treats an ``execute`` call whose ``command`` argument passes
:func:`is_read_only_command` as a ``read``. That check is an allow-list over a real
tokenization (``shlex`` with shell punctuation), never a substring match: every command in
a pipeline or ``;``/``&&``/``||`` chain must be an allowed reader with no writing option,
and redirections other than to ``/dev/null``, substitutions, subshells, background jobs,
variable assignments and multi-line scripts are refused. It is deliberately conservative:
a refused harmless command costs the model one turn, an allowed writer would break the
promise of plan mode.
"""

from __future__ import annotations

from dataclasses import dataclass, field, replace
from enum import Enum
from pathlib import Path
from typing import Any, Callable, Literal, Protocol

from agent_code.policy import self_protection
from agent_code.policy.commands import analyze
from agent_code.policy.rules import RuleSet, Verdict, subject_of
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


def command_argument(tool: Tool, arguments: object) -> str | None:
    """The shell command an ``execute`` tool was asked to run (its ``command`` argument; an
    MCP tool's arguments are its server's, never a command line the policy reads)."""
    if tool.kind != "execute" or not isinstance(arguments, dict) or getattr(tool, "origin", None) is not None:
        return None
    command = arguments.get("command")
    return command if isinstance(command, str) else None


class Containment(Protocol):
    """What the policy needs of the OS sandbox (``agent_code.confine.Wall``)."""

    def describe(self) -> str: ...


AUTO_ALLOW_MODES = (PermissionMode.DEFAULT, PermissionMode.ACCEPT_EDITS)


def contained_command(wall: "Containment | None", tool: Tool, arguments: object) -> bool:
    """True when the wall runs this call: a command line of the agent's own ``execute`` tool
    (bash) with a wall set. An MCP tool's call is never contained: its server does its work."""
    return wall is not None and command_argument(tool, arguments) is not None


Asker = Callable[[Tool, Any], bool]  # (tool, arguments) -> approved?
PreToolUse = Callable[[Tool, Any], "str | None"]  # (tool, arguments) -> why it is blocked, or None


def rule_denial_message(tool_name: str, verdict: Verdict) -> str:
    """Why a deny rule (or the built-in deny list) refused a call, for the model."""
    if verdict.builtin:
        what = f"the built-in deny list refuses it in every mode (rule {verdict.rule}: {verdict.detail})"
    else:
        matched = f" (it matched `{verdict.detail}`)" if verdict.detail else ""
        what = f"it matches the deny rule {verdict.rule} from {verdict.source}{matched}"
    return (f"Permission denied: {tool_name} was not run: {what}. Do not retry it or a variant of it: "
            "continue without it, or tell the user what you wanted to do and why.")


def ask_refusal_message(tool_name: str, verdict: Verdict | None) -> str | None:
    """The headless refusal of a call an ask rule wanted approved (None: not an ask rule)."""
    if verdict is None or verdict.behavior != "ask":
        return None
    return (f"Permission denied: {tool_name} needs the user's approval (ask rule {verdict.rule} from "
            f"{verdict.source}), and nobody can approve it in this run. Do not retry it: continue "
            "with the tools you are allowed to use, and describe what you would have done.")


def declined_message(tool_name: str) -> str:
    return (f"Permission denied: the user declined this {tool_name} call. Do not retry it; stop and ask "
            "the user how they want to proceed.")


@dataclass
class PermissionPolicy:
    """The permission state of one agent: the mode, the settings' rules, the PreToolUse
    hooks and, in an interactive session, who to ask. ``root`` is the project, against
    which path rules are matched."""

    mode: PermissionMode = PermissionMode.DEFAULT
    ask: Asker | None = None
    rules: RuleSet = field(default_factory=RuleSet)
    root: Path | None = None
    pre_tool_use: PreToolUse | None = None
    # the OS sandbox the bash tool's commands run in (None: none; see the module doc)
    wall: Containment | None = None

    def __post_init__(self) -> None:
        self.mode = PermissionMode(self.mode)

    @classmethod
    def of(cls, value: "PermissionPolicy | PermissionMode | str | None") -> "PermissionPolicy":
        """A policy from a policy, a mode or a mode's name (``None``: the default mode)."""
        if isinstance(value, PermissionPolicy):
            return value
        return cls(PermissionMode(value or PermissionMode.DEFAULT))

    def explain(self, tool: Tool, arguments: object) -> "Explanation":
        """The decision for one call and why, without asking anyone or running hooks: steps
        1–3 of the module doc (the deny list and deny rules, self-protection, ask/allow
        rules, the mode table). :meth:`check` acts on it; ``agent-code permissions check``
        and the REPL's ``/permissions check`` print it. A call the policy fails on (a bug)
        is one it cannot judge: asked, as a line it cannot read, never run unasked nor a
        crash of the agent."""
        try:
            explained = self._explain(tool, arguments)
            return replace(explained, sandbox=self._sandbox_line(tool, arguments))
        except Exception as error:  # noqa: BLE001
            detail = f"{type(error).__name__}: {error}"[:200]
            message = (f"Permission denied: {tool.name} was not run: the permission policy could not judge this call "
                       f"({detail}). Do not retry it: continue without it, or tell the user what you wanted to do.")
            return Explanation("ask", f"the policy could not judge it ({detail})", "policy-error", "built-in",
                               "deny-list", detail, message)

    def _explain(self, tool: Tool, arguments: object) -> "Explanation":
        mode = self.mode
        subject = subject_of(tool, arguments)
        analysis = analyze(subject.value) if subject.kind == "command" else None   # parsed once per check
        verdict = self.rules.evaluate(tool, arguments, self.root, analysis)
        if verdict is not None and verdict.behavior == "deny":
            if verdict.builtin:
                reason = f"the built-in deny list refuses it in every mode ({verdict.detail})"
                return Explanation("deny", reason, verdict.rule, "built-in", "deny-list", verdict.detail,
                                   rule_denial_message(tool.name, verdict))
            matched = f" (it matched `{verdict.detail}`)" if verdict.detail else ""
            return Explanation("deny", f"it matches the deny rule {verdict.rule}{matched}", verdict.rule,
                               verdict.source, "rule", verdict.detail, rule_denial_message(tool.name, verdict))
        finding = None
        if mode is not PermissionMode.BYPASS_PERMISSIONS:
            command = command_argument(tool, arguments)
            finding = self_protection.check_call(tool.kind, arguments, command,
                                                 analysis if analysis is not None and analysis.text == command else None,
                                                 self_protection.Places.cached(self.root, self.rules.home))
            if finding is not None and finding.severity == "deny":
                return Explanation("deny", f"self-protection: it would change {finding.what} "
                                           f"(only the user may, or bypassPermissions)", "self-protection",
                                   "built-in", "self-protection", finding.detail, finding.message(tool.name))
        kind = effective_kind(mode, tool, arguments)
        behavior = mode_behavior(mode, kind)
        if verdict is not None and (mode is not PermissionMode.PLAN or kind == "read"):
            behavior = verdict.behavior
            if verdict.builtin:  # the built-in list's own ask (a line it cannot read)
                explained = Explanation(behavior, f"the built-in deny list asks about it ({verdict.detail})",
                                        verdict.rule, "built-in", "deny-list", verdict.detail)
            else:
                reason = f"it matches the {verdict.behavior} rule {verdict.rule}"
                if verdict.detail:
                    reason += f" (it matched `{verdict.detail}`)"
                explained = Explanation(behavior, reason, verdict.rule, verdict.source, "rule", verdict.detail)
        elif behavior == "ask" and mode in AUTO_ALLOW_MODES and contained_command(self.wall, tool, arguments):
            verdict = None
            behavior = "allow"
            explained = Explanation(behavior, f"the OS sandbox contains it, and '{mode.value}' runs contained "
                                              "commands without asking", None, "sandbox", "sandbox")
        else:
            verdict = None
            explained = Explanation(behavior, mode_reason(mode, tool, kind, arguments), None, "mode", "mode")
        if finding is not None and behavior == "allow":
            return Explanation("ask", f"self-protection: it may change {finding.what}, which no rule or mode "
                                      "approves without the user", "self-protection", "built-in",
                               "self-protection", finding.detail, finding.message(tool.name))
        if behavior == "deny":
            decision = Decision(False, denial_message(mode, tool.name, kind, behavior))
            message = explain_plan_refusal(mode, tool, arguments, decision).message
        elif behavior == "ask":
            message = ask_refusal_message(tool.name, verdict) or denial_message(mode, tool.name, kind, behavior)
        else:
            message = ""
        return Explanation(explained.behavior, explained.reason, explained.rule, explained.source,
                           explained.stage, explained.detail, message)

    def _sandbox_line(self, tool: Tool, arguments: object) -> str:
        """Whether the OS sandbox would contain the call, for a person (empty: not a command)."""
        if command_argument(tool, arguments) is None:
            return ""
        if self.wall is None:
            return "off: the command would run unconfined"
        return f"contains it ({self.wall.describe()})"

    def check(self, tool: Tool, arguments: object) -> Decision:
        """Allow or refuse one call (the steps are in the module doc): :meth:`explain`,
        then the PreToolUse hooks, then the ``ask`` callback."""
        explained = self.explain(tool, arguments)
        if explained.behavior == "deny":
            return Decision(False, explained.message)
        if self.pre_tool_use is not None:
            blocked = self.pre_tool_use(tool, arguments)
            if blocked is not None:
                return Decision(False, blocked)
        if explained.behavior == "allow":
            return Decision(True)
        if self.ask is not None:
            return Decision(True) if self.ask(tool, arguments) else Decision(False, declined_message(tool.name))
        return Decision(False, explained.message)


@dataclass(frozen=True)
class Explanation:
    """A decision and why (:meth:`PermissionPolicy.explain`): ``behavior``; ``reason``, one
    line for a person; ``rule``, what decided it (a rule's text, a built-in deny-list id,
    ``self-protection``, or None for the mode table); ``source``, where that came from (a
    settings file, ``session``, ``built-in``, ``mode``); ``stage`` (``deny-list``,
    ``rule``, ``self-protection``, ``mode``); ``detail``, what matched; ``message``, what
    the model reads when the call is refused (for ``ask``: when nobody can answer)."""

    behavior: Behavior
    reason: str
    rule: str | None
    source: str | None
    stage: str
    detail: str = ""
    message: str = ""
    sandbox: str = ""   # whether the OS sandbox would contain a command (empty: not a command)

    def as_dict(self) -> dict[str, Any]:
        return {"decision": self.behavior, "reason": self.reason, "rule": self.rule, "source": self.source,
                "stage": self.stage, "detail": self.detail, "sandbox": self.sandbox}


def mode_reason(mode: PermissionMode | str, tool: Tool, kind: ToolKind, arguments: object) -> str:
    """Why the mode table decided what it did, for a person."""
    mode = PermissionMode(mode)
    behavior = mode_behavior(mode, kind)
    if mode is PermissionMode.PLAN and kind == "read" and tool.kind == "execute":
        return "plan mode runs read-only commands, and this one only reads"
    if mode is PermissionMode.PLAN and behavior == "deny" and command_argument(tool, arguments) is not None:
        refusal = explain_plan_refusal(mode, tool, arguments, Decision(False, "")).message
        why = refusal.partition("this one is not: ")[2].rstrip(".)") or "it is not read-only"
        return f"plan mode runs only read-only commands, and this one is not: {why}"
    does = {"read": "reads", "edit": "changes files", "execute": "runs commands"}.get(kind, "runs commands")
    verb = {"allow": "allows", "ask": "asks the user before", "deny": "refuses"}[behavior]
    return f"permission mode '{mode.value}' {verb} a tool that {does} ({tool.name}), and no rule applies"


# --- read-only commands (plan mode) ---------------------------------------------------
# The analysis of the command itself lives in policy/readonly.py; these names stay importable here.

from agent_code.policy.readonly import (  # noqa: E402,F401
    GIT_READ_ONLY,
    READ_ONLY_COMMANDS,
    is_read_only_command,
    read_only_command_problem,
)


def effective_kind(mode: PermissionMode | str, tool: Tool, arguments: object) -> ToolKind:
    """The kind the mode table is asked about: in plan mode an ``execute`` call whose
    ``command`` is read-only counts as a ``read``; otherwise the tool's own kind."""
    command = command_argument(tool, arguments)
    if PermissionMode(mode) is PermissionMode.PLAN and command is not None and is_read_only_command(command):
        return "read"
    return tool.kind


def runs_as_read_only(mode: PermissionMode | str, tool: Tool, arguments: object) -> bool:
    """True when an ``execute`` call may run only because its command is read-only (plan
    mode): the tool must then run it with the executable config of git and the other readers
    neutralised (``ToolContext.read_only_commands``). Never true in the other modes, where a
    command that runs was allowed as a command and behaves as the user's own would."""
    return tool.kind == "execute" and effective_kind(mode, tool, arguments) == "read"


def explain_plan_refusal(mode: PermissionMode | str, tool: Tool, arguments: object, decision: Decision) -> Decision:
    """A plan-mode refusal of a command says why the command is not read-only."""
    command = command_argument(tool, arguments)
    if decision.allowed or PermissionMode(mode) is not PermissionMode.PLAN or command is None:
        return decision
    why = read_only_command_problem(command)
    return Decision(False, f"{decision.message} (Plan mode runs only read-only commands such as ls, cat, "
                           f"grep, git status/diff/log; this one is not: {why}.)")
