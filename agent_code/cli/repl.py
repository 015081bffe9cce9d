"""The interactive shell: ``agent-code`` without a prompt.

On a terminal it reads with prompt_toolkit (line editing, history kept in
``~/.agent-code/history``); with piped input it reads plain lines, so it can be scripted.
The prompt shows the permission mode (``[plan] >``). Each line is a turn of one
conversation, rendered as it happens by the CLI's text renderer; lines starting with
``/`` are commands (:data:`COMMANDS`; ``/help`` lists them, every one of them works):

``/help``, ``/model [NAME]``, ``/compact``, ``/permissions [MODE | check COMMAND]``, ``/undo [--force]``,
``/mcp [approve NAME]``, ``/exit`` (also ``/quit``, Ctrl-D).

At the start, a settings file that changed since the user last accepted it (a session of
the agent may have written it) is shown and asked about (:func:`settings_question`; only
on a terminal); one not accepted is not used (``agent/settings.py``).

Ctrl-C during a turn interrupts that turn (the agent rolls its history back to before the
prompt, so no ``tool_use`` is left without its result) and returns to the prompt; at the
prompt it clears the line. Calls the permission mode would ask about (edits and commands
in ``default``, commands in ``acceptEdits``, ask rules) are asked here: ``y`` once, ``n``
no (the model is told the user declined), ``a`` always — an allow rule for the rest of
the session (``bash(git diff:*)``, ``Edit``). Edits show the diff they would make. A plan
from ``exit_plan_mode`` is shown for approval.
"""

from __future__ import annotations

import sys
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any, Callable, TextIO, overload

from agent_code.cli.confirm import terminal, yes_no
from agent_code.agent.undo import undo_last
from agent_code.policy import PermissionMode, parse_rule, subject_of, suggest_rules

if TYPE_CHECKING:
    from prompt_toolkit import PromptSession
    from prompt_toolkit.history import History

    from agent_code.agent.loop import Agent
    from agent_code.agent.trust import Change
    from agent_code.mcp import McpManager
    from agent_code.tools.base import Tool

EXIT_OK = 0
MODE_NAMES = {m.value.lower(): m for m in PermissionMode}
# the system prompt's mode lines say "refused" for what a headless run cannot ask about;
# here the user is asked, so the model is told that instead
INTERACTIVE_NOTES = {
    "default": "Permission mode: default. You may read and search; file edits and commands are "
               "shown to the user, who approves or declines each. If one is declined, do not retry it: "
               "ask the user how to proceed.",
    "acceptEdits": "Permission mode: acceptEdits. You may read and edit files; commands (bash) are "
                   "shown to the user, who approves or declines each.",
}


@overload
def interactive_system(text: str) -> str: ...
@overload
def interactive_system(text: None) -> None: ...
def interactive_system(text: str | None) -> str | None:
    """``text`` with the headless mode line swapped for its interactive one."""
    from agent_code.agent.prompt import MODE_NOTES

    if not text:
        return text
    for mode, note in INTERACTIVE_NOTES.items():
        text = text.replace(MODE_NOTES.get(mode, "\0"), note)
    return text


def parse_command(line: str) -> tuple[str, list[str]]:
    """``"/permissions plan"`` → ``("/permissions", ["plan"])``."""
    name, *args = line.strip().split()
    return name.lower(), args


@dataclass(frozen=True)
class SlashCommand:
    name: str
    usage: str
    help: str
    handler: str  # the Repl method


COMMANDS: tuple[SlashCommand, ...] = (
    SlashCommand("/help", "/help", "show this help", "cmd_help"),
    SlashCommand("/model", "/model [NAME]", "show the model, or switch to NAME", "cmd_model"),
    SlashCommand("/compact", "/compact", "summarize older turns now to free context", "cmd_compact"),
    SlashCommand("/permissions", "/permissions [MODE | check COMMAND]",
                 "show the mode and rules, switch mode (default, acceptEdits, plan, bypassPermissions), or "
                 "explain what the policy decides for COMMAND", "cmd_permissions"),
    SlashCommand("/undo", "/undo [--force]", "restore the file the agent changed last (one change per call)",
                 "cmd_undo"),
    SlashCommand("/mcp", "/mcp [approve NAME]", "show the MCP servers, their state and tools; approve a project "
                 "server (on a terminal)", "cmd_mcp"),
    SlashCommand("/exit", "/exit", "leave (also /quit, Ctrl-D)", "cmd_exit"),
)
ALIASES = {"/quit": "/exit", "/q": "/exit", "/?": "/help"}


class _Leave(Exception):
    """Raised by /exit."""


class Repl:
    """One interactive session over ``agent`` (already built by the CLI)."""

    def __init__(self, agent: Agent, *, stdin: TextIO | None = None, stdout: TextIO | None = None,
                 stderr: TextIO | None = None, interactive: bool | None = None,
                 history_file: Path | None = None, mcp: McpManager | None = None) -> None:
        self.agent = agent
        self.mcp = mcp  # the session's McpManager (agent_code/mcp), None without servers
        self.stdin = stdin or sys.stdin
        self.out = stdout or sys.stdout
        self.err = stderr or sys.stderr
        if interactive is None:
            interactive = self.stdin.isatty() and self.out.isatty()
        self.interactive = interactive
        self.history_file = history_file
        self.session: PromptSession[str] | None = None
        self.pending_notes: list[str] = []  # told to the model with the next prompt (/undo)
        agent.permissions.ask = self.ask
        if hasattr(agent, "on_plan"):
            agent.on_plan = self.approve_plan
        agent.system = interactive_system(agent.system)
        rebuild = agent.system_for_mode
        if rebuild is not None:
            agent.system_for_mode = lambda mode: interactive_system(rebuild(mode))

    # --- input -------------------------------------------------------------------------

    def say(self, text: str) -> None:
        print(text, file=self.out, flush=True)

    def prompt_text(self) -> str:
        return f"[{self.agent.permissions.mode.value}] > "

    def _session(self) -> PromptSession[str]:
        if self.session is None:
            from prompt_toolkit import PromptSession
            from prompt_toolkit.history import FileHistory, InMemoryHistory

            history: History = InMemoryHistory()
            if self.history_file is not None:
                try:
                    self.history_file.parent.mkdir(parents=True, exist_ok=True)
                    history = FileHistory(str(self.history_file))
                except OSError as exc:
                    print(f"agent-code: no history file ({exc.strerror}); history is kept in memory",
                          file=self.err)
            self.session = PromptSession(history=history)
        return self.session

    def read(self, message: str, remember: bool = True) -> str:
        """One line from the user; EOFError at the end of input, KeyboardInterrupt on Ctrl-C."""
        if self.interactive:
            if remember:
                return self._session().prompt(message)
            from prompt_toolkit import prompt

            return prompt(message)
        self.out.write(message)
        self.out.flush()
        line = self.stdin.readline()
        if not line:
            raise EOFError
        return line.rstrip("\n")

    # --- the loop ----------------------------------------------------------------------

    def run(self) -> int:
        print("agent-code REPL — /help for commands, /exit to leave", file=self.err, flush=True)
        while True:
            try:
                line = self.read(self.prompt_text())
            except EOFError:
                return EXIT_OK
            except KeyboardInterrupt:
                print("(use /exit or Ctrl-D to leave)", file=self.err, flush=True)
                continue
            line = line.strip()
            if not line:
                continue
            if line.startswith("/"):
                try:
                    self.command(line)
                except _Leave:
                    return EXIT_OK
                except KeyboardInterrupt:
                    print("\n(interrupted)", file=self.err, flush=True)
                continue
            self.turn(line)

    def turn(self, line: str) -> None:
        prompt = "\n".join([*self.pending_notes, line]) if self.pending_notes else line
        try:
            result = self.agent.run(prompt)
        except KeyboardInterrupt:
            print("\n(interrupted; the turn was dropped)", file=self.err, flush=True)
            return
        self.pending_notes.clear()
        if result.status == "error":
            print(f"agent-code: error: {result.error}", file=self.err, flush=True)

    def command(self, line: str) -> None:
        name, args = parse_command(line)
        name = ALIASES.get(name, name)
        spec = next((c for c in COMMANDS if c.name == name), None)
        if spec is None:
            self.say(f"unknown command {name}; /help lists them")
            return
        getattr(self, spec.handler)(args)

    # --- slash commands ----------------------------------------------------------------

    def cmd_help(self, args: list[str]) -> None:
        width = max(len(c.usage) for c in COMMANDS)
        lines = ["commands:"] + [f"  {c.usage.ljust(width)}  {c.help}" for c in COMMANDS]
        lines.append("anything else is sent to the agent; Ctrl-C interrupts a turn, Ctrl-D leaves.")
        self.say("\n".join(lines))

    def cmd_model(self, args: list[str]) -> None:
        provider = self.agent.provider
        if args:
            provider.model = args[0]
            self.say(f"model: {provider.model} (provider {provider.name}); the next turn uses it")
        else:
            self.say(f"model: {provider.model} (provider {provider.name})")

    def cmd_compact(self, args: list[str]) -> None:
        compact: Callable[[], str] | None = getattr(self.agent, "compact", None)
        if compact is None:
            self.say("/compact: this agent cannot compact its history (no Agent.compact)")
            return
        self.say(f"compact: {compact()}")

    def cmd_permissions(self, args: list[str]) -> None:
        policy = self.agent.permissions
        if args and args[0].lower() == "check":
            self.check_permission(" ".join(args[1:]))
            return
        if args:
            mode = MODE_NAMES.get(args[0].lower())
            if mode is None:
                self.say(f"unknown mode {args[0]!r}; choose one of {', '.join(m.value for m in PermissionMode)}")
                return
            self.set_mode(mode)
            self.say(f"permission mode: {mode.value}")
            return
        lines = [f"permission mode: {policy.mode.value}"]
        for behavior in ("deny", "ask", "allow"):
            for rule in policy.rules.of(behavior):
                lines.append(f"  {behavior:5}  {rule.text}  ({rule.source or 'session'})")
        if len(lines) == 1:
            lines.append("  no allow/ask/deny rules (settings: ~/.agent-code/settings.json, "
                         ".agent/settings.json, .agent/settings.local.json)")
        lines.append("  built-in deny list: always on (rm -rf /, mkfs, dd to a device, fork bombs, curl | sh, …)")
        lines.append("  self-protection: " + ("off in bypassPermissions" if policy.mode is PermissionMode.BYPASS_PERMISSIONS
                                                else "on (the agent may not change its settings, hooks, skills or .git)"))
        lines.append("  /permissions check COMMAND: what the policy decides for COMMAND, and why")
        if policy.pre_tool_use is not None:
            lines.append("  PreToolUse hooks: on")
        self.say("\n".join(lines))

    def check_permission(self, command: str) -> None:
        """``/permissions check COMMAND``: the session policy's decision for the bash tool
        running COMMAND, and why — the text of ``agent-code permissions check``; nothing
        runs and nobody is asked."""
        from agent_code.cli.permissions import explanation_lines

        if not command.strip():
            self.say("usage: /permissions check COMMAND (e.g. /permissions check git push --force)")
            return
        tool = self.agent.tools.get("bash")
        if tool is None:
            from agent_code.tools import default_tools

            tool = default_tools().get("bash")
            assert tool is not None   # a built-in tool
        policy = self.agent.permissions
        explained = policy.explain(tool, {"command": command})
        self.say("\n".join(explanation_lines(explained, policy.mode.value, "this session")))

    def set_mode(self, mode: PermissionMode) -> None:
        if hasattr(self.agent, "set_permission_mode"):
            self.agent.set_permission_mode(mode)
        else:
            self.agent.permissions.mode = mode

    def cmd_undo(self, args: list[str]) -> None:
        outcome = undo_last(self.agent.ctx, force="--force" in args)
        self.say("undo: " + outcome.message)
        if outcome.note:
            self.pending_notes.append(outcome.note)

    def cmd_mcp(self, args: list[str]) -> None:
        """``/mcp``: what ``agent-code mcp list`` prints, for this session's servers;
        ``/mcp approve NAME``: approve a project server now (asked on a terminal only) and start it."""
        from agent_code.mcp import describe_servers

        if args and args[0].lower() == "approve":
            self.approve_server(args[1] if len(args) > 1 else "")
            return
        if self.mcp is None:
            self.say("no MCP servers (add them to .mcp.json, ~/.agent-code/settings.json \"mcpServers\", "
                     "or start agent-code with --mcp-config FILE)")
            return
        self.say("\n".join(describe_servers(self.mcp)))

    def approve_server(self, name: str) -> None:
        from agent_code.agent.settings import user_dir
        from agent_code.cli.mcp import add_tools, mcp_question
        from agent_code.mcp import APPROVALS_FILE, CONNECTED, ApprovalStore, guard

        state = self.mcp.servers.get(name) if self.mcp is not None else None
        if self.mcp is None or state is None or state.config.scope != "project":
            self.say(f"/mcp approve: no project server named {name!r} (/mcp lists them)")
            return
        if state.status == CONNECTED:
            self.say(f"{name} is already running")
            return
        ask = mcp_question(self.stdin, self.out) if self.interactive else None
        if ask is None:
            self.say("/mcp approve needs a terminal: it asks you, and piped input may be a command the agent ran")
            return
        store = ApprovalStore(user_dir() / APPROVALS_FILE)
        verdict = store.check(self.agent.ctx.root, state.config)
        approved = ask(state.config, verdict)
        try:   # what was shown is what is recorded, and what the spawn is checked against
            store.record(self.agent.ctx.root, state.config, "approved" if approved else "declined",
                         verdict.footprint)
        except OSError as exc:
            self.say(f"(your answer could not be saved: {exc.strerror or exc})")
        if not approved:
            self.say(f"{name}: not approved")
            return
        self.mcp.start([state.config], guards={name: guard(state.config, self.mcp.root, verdict.footprint)})
        add_tools(self.agent, self.mcp, lambda message: self.say(f"warning: {message}"))
        now = self.mcp.servers[name]
        self.say(f"{name}: {now.status}" + (f" ({len(now.tools)} tools)" if now.status == CONNECTED
                                            else f": {now.error}"))

    def cmd_exit(self, args: list[str]) -> None:
        raise _Leave

    # --- asking the user ---------------------------------------------------------------

    def ask(self, tool: Tool, arguments: object) -> bool:
        """The permission policy's ask callback: y (once), n, a (always: session allow rules)."""
        always = suggest_rules(tool, arguments)
        self.say(describe_call(tool, arguments, self.agent.ctx.root))
        choices = "[y]es / [n]o" + (f" / [a]lways allow {', '.join(always)} this session" if always else "")
        while True:
            try:
                answer = self.read(f"allow? {choices}: ", remember=False).strip().lower()
            except EOFError:
                return False
            if answer in ("y", "yes"):
                return True
            if answer in ("n", "no", ""):
                return False
            if answer in ("a", "always") and always:
                for text in always:
                    self.agent.permissions.rules.add(parse_rule(text, "allow", "session"))
                return True
            if not self.interactive:  # piped input: no second chance, or the next prompts are eaten
                self.say(f"(not an answer: {answer!r}; taken as no)")
                return False

    def approve_plan(self, plan: str) -> bool | str:
        """``Agent.on_plan``: show the plan; approve (switching mode), or keep planning."""
        from agent_code.cli.render import for_terminal

        self.say("plan:\n" + for_terminal(plan.strip()))
        while True:
            try:
                answer = self.read("approve? [y] yes, accept edits / [d] yes, ask before each edit / "
                                   "[n] no, keep planning: ", remember=False).strip().lower()
            except EOFError:
                return False
            if answer in ("y", "yes"):
                self.set_mode(PermissionMode.ACCEPT_EDITS)
                return True
            if answer == "d":
                self.set_mode(PermissionMode.DEFAULT)
                return True
            if answer in ("n", "no", ""):
                try:
                    feedback = self.read("what should change? (empty: stop here) ", remember=False).strip()
                except EOFError:
                    feedback = ""
                return feedback or False
            if not self.interactive:
                self.say(f"(not an answer: {answer!r}; the plan is not approved)")
                return False


def describe_call(tool: Tool, arguments: object, root: Path) -> str:
    """What the user is asked to approve: the command, or the diff an edit would make — with its
    control characters escaped (``cli/render.py``: the model's text must not redraw the question)."""
    from agent_code.cli.render import for_terminal

    return for_terminal(_describe_call(tool, arguments, root))


def _describe_call(tool: Tool, arguments: object, root: Path) -> str:
    subject = subject_of(tool, arguments)
    if subject.kind == "command":
        return f"{tool.name} wants to run: {subject.value}"
    if tool.kind == "edit" and isinstance(arguments, dict):
        preview = edit_preview(tool.name, arguments, root)
        head = f"{tool.name} wants to change {arguments.get('path', '?')}"
        return head + (":\n" + preview if preview else "")
    import json

    return f"{tool.name} wants to run with {json.dumps(arguments, ensure_ascii=False)[:500]}"


def edit_preview(tool_name: str, arguments: dict[str, Any], root: Path) -> str:
    """The unified diff ``edit_file``/``write_file`` would make (best effort: '' if unknown)."""
    from agent_code.tools.base import ToolContext, ToolError
    from agent_code.tools.edit import unified_diff, with_file_line_endings
    from agent_code.tools.paths import resolve_inside

    path = arguments.get("path")
    if not isinstance(path, str):
        return ""
    try:
        real = resolve_inside(ToolContext(root), path, kind="file", must_exist=False)
        before = real.read_text(encoding="utf-8") if real.exists() else None
    except (ToolError, OSError, UnicodeDecodeError):
        return ""
    if tool_name == "write_file" and isinstance(arguments.get("content"), str):
        return unified_diff(before, arguments["content"], path)
    old, new = arguments.get("old_string"), arguments.get("new_string")
    if tool_name == "edit_file" and before is not None and isinstance(old, str) and isinstance(new, str) and old:
        old, new = with_file_line_endings(before, old, new)
        if old not in before:
            return ""
        after = before.replace(old, new, -1 if arguments.get("replace_all") else 1)
        return unified_diff(before, after, path)
    return ""


def settings_question(stdin: TextIO | None = None, stdout: TextIO | None = None) -> Callable[[Change], bool] | None:
    """The REPL's start-up question about a settings file that changed since the user last
    accepted it (``agent/trust.py``): shows what changed and asks y/N. None — nobody to ask,
    so the change is not used and a warning says so — unless stdin and stdout are a terminal:
    piped input may be a command the agent ran, and must never accept settings."""
    pair = terminal(stdin, stdout)
    if pair is None:
        return None
    stdin, out = pair

    def ask(change: Change) -> bool:
        from agent_code.agent.settings import describe_change

        print(describe_change(change), file=out)
        print("Settings can loosen permissions and run commands (hooks), and a session of the agent can "
              "write them: accept only a change you made or want.", file=out, flush=True)
        return yes_no(stdin, out, f"accept this version of {change.file.label}?")

    return ask


def run_repl(agent: Agent, history_file: Path | None = None, mcp: McpManager | None = None) -> int:
    """The CLI's entry: a :class:`Repl` on the process's terminal (or piped stdin)."""
    return Repl(agent, history_file=history_file, mcp=mcp).run()
