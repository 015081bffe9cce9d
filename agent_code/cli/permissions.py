"""``agent-code permissions check [--mode MODE] [-C DIR] [--json] [--tool TOOL] -- COMMAND``.

What the permission policy would decide for one call, and why — to write and debug rules
without running the agent. The first line is the decision (``allow``, ``ask`` or
``deny``); then the reason, the rule or deny-list entry that decided it and the settings
file it came from, and the mode used::

    $ agent-code permissions check -C myproject -- git push --force
    ask
    reason: it matches the ask rule bash(git push:*) (it matched `git push --force`)
    rule: bash(git push:*)  (from .agent/settings.json)
    mode: default  (permission mode)

The settings (rules, ``defaultMode``, hooks) are loaded from ``DIR`` (default: the current
directory) and the user's ``~/.agent-code/settings.json`` exactly as a run with a prompt
loads them (``agent/settings.py``); the mode is ``--mode``, else the settings'
``defaultMode``, else ``default``. COMMAND is one argument (a whole command line, quoted)
or several, joined with spaces. ``--tool`` checks another tool: an ``execute`` tool gets
COMMAND as its ``command``, any other its ``path`` (``--tool write_file -- .git/config``).
Nobody is asked and no hook runs: a PreToolUse hook could still refuse an allowed call
(the output says so when hooks are configured).

Exit status: ``0`` allow, ``1`` deny, ``2`` ask; ``64`` for a usage error (an unknown
mode or tool, no command, a missing directory) and ``78`` for settings that cannot be read
— never ``2``, which a script reads as "ask".

The REPL's ``/permissions check COMMAND`` prints the same explanation for the session's
own policy (:func:`explanation_lines`).
"""

from __future__ import annotations

import argparse
import json
import sys
from dataclasses import replace
from pathlib import Path
from types import ModuleType
from typing import TYPE_CHECKING, NoReturn

if TYPE_CHECKING:
    from agent_code.agent.settings import Settings
    from agent_code.confine import Wall
    from agent_code.policy.permissions import Explanation

EXIT = {"allow": 0, "deny": 1, "ask": 2}
EX_USAGE = 64
EX_CONFIG = 78
PROG = "agent-code permissions"


class _Parser(argparse.ArgumentParser):
    """argparse, but a usage error exits with ``EX_USAGE`` (argparse's 2 means "ask" here)."""

    def error(self, message: str) -> NoReturn:
        self.print_usage(sys.stderr)
        self.exit(EX_USAGE, f"{self.prog}: error: {message}\n")


def _parser() -> argparse.ArgumentParser:
    from agent_code.policy import MODES

    parser = _Parser(prog=PROG, description="Inspect the permission policy.")
    sub = parser.add_subparsers(dest="action", metavar="check", parser_class=_Parser)
    check = sub.add_parser(
        "check", help="the decision for one command (or tool call), and why",
        description="Print allow, ask or deny for COMMAND, then the reason and the rule or deny-list entry "
                    "that decided it. Exit status: 0 allow, 1 deny, 2 ask; 64 usage error, 78 unreadable "
                    "settings.")
    check.add_argument("--mode", metavar="MODE",
                       help=f"permission mode ({', '.join(MODES)}); default: the settings' defaultMode, "
                            "else default")
    check.add_argument("-C", "--cwd", dest="directory", metavar="DIR", default=".",
                       help="the project whose settings are used (default: the current directory)")
    check.add_argument("--json", action="store_true", help="print one JSON object")
    check.add_argument("--no-sandbox", action="store_true",
                       help="judge as a session without the OS sandbox would (default: with it, where this machine "
                            "can sandbox)")
    check.add_argument("--tool", default="bash", metavar="TOOL",
                       help="the tool to check (default: bash); an execute tool gets COMMAND as its command, "
                            "any other as its path")
    check.add_argument("command", nargs="*", metavar="COMMAND",
                       help="the command line (one quoted argument, or words joined with spaces)")
    return parser


def explanation_lines(explained: Explanation, mode: str, mode_source: str = "") -> list[str]:
    """The text form: the decision first, then reason, rule (and its file), mode."""
    lines = [explained.behavior, f"reason: {explained.reason}"]
    if explained.rule is None:
        lines.append("rule: none (the OS sandbox contains the command)" if explained.stage == "sandbox"
                     else "rule: none (the permission mode decides)")
    elif explained.stage == "deny-list":
        lines.append(f"rule: {explained.rule}  (built-in deny list)")
    elif explained.stage == "self-protection":
        lines.append("rule: self-protection  (built-in, off only in bypassPermissions)")
    else:
        lines.append(f"rule: {explained.rule}  (from {explained.source or 'session'})")
    if explained.detail and explained.detail not in explained.reason:
        lines.append(f"matched: {explained.detail}")
    lines.append(f"mode: {mode}" + (f"  ({mode_source})" if mode_source else ""))
    if explained.sandbox:
        lines.append(f"sandbox: {explained.sandbox}")
    return lines


def _usage_error(message: str) -> NoReturn:
    print(f"{PROG} check: error: {message}", file=sys.stderr)
    raise SystemExit(EX_USAGE)


def _load_settings(settings_module: ModuleType, root: Path) -> Settings:
    """The settings a run with a prompt would use (the trusted versions, where the settings
    loader keeps a trust store), recording nothing: a check is not a session."""
    import inspect

    load = getattr(settings_module, "load_trusted_settings", None)
    if load is None:
        return settings_module.load_settings(root)
    if "record_first_sight" in inspect.signature(load).parameters:
        return load(root, record_first_sight=False)
    return load(root)


def _wall(root: Path, settings: Settings, no_sandbox: bool) -> tuple[Wall | None, str]:
    """The OS sandbox a session in ``root`` would run its commands in, as the CLI opens it
    (``cli/sandbox.py``), and why there is none ("" when there is one)."""
    from agent_code.cli.sandbox import sandbox_off
    from agent_code.confine import NoWall, open_wall

    off = sandbox_off(no_sandbox)
    if off is not None:
        return None, off
    opened = open_wall(root, settings.sandbox)
    return (None, opened.reason) if isinstance(opened, NoWall) else (opened, "")


def check(args: argparse.Namespace) -> int:
    from agent_code.agent import settings as settings_module
    from agent_code.policy import MODES, PermissionPolicy, RuleSet, SettingsError
    from agent_code.tools import default_tools

    if args.mode is not None and args.mode not in MODES:
        _usage_error(f"unknown mode {args.mode!r}; choose one of {', '.join(MODES)}")
    if not args.command:
        _usage_error("no command to check; usage: agent-code permissions check [OPTIONS] -- COMMAND")
    root = Path(args.directory)
    if not root.is_dir():
        _usage_error(f"{args.directory} is not a directory")
    root = root.resolve()
    tool = default_tools().get(args.tool)
    if tool is None:
        _usage_error(f"unknown tool {args.tool!r}; one of {', '.join(t.name for t in default_tools().list())}")
    text = args.command[0] if len(args.command) == 1 else " ".join(args.command)

    try:
        settings = _load_settings(settings_module, root)
    except SettingsError as exc:
        print(f"{PROG} check: error: {exc}", file=sys.stderr)
        return EX_CONFIG
    for warning in settings.warnings:
        print(f"agent-code: warning: {warning}", file=sys.stderr)

    if args.mode is not None:
        mode, mode_source = args.mode, "--mode"
    elif settings.default_mode:
        mode, mode_source = settings.default_mode, "defaultMode in the settings"
    else:
        mode, mode_source = "default", "no --mode or defaultMode"
    wall, no_wall = _wall(root, settings, args.no_sandbox)
    policy = PermissionPolicy(mode, rules=RuleSet(list(settings.rules.rules)), root=root, wall=wall)
    arguments = {"command": text} if tool.kind == "execute" else {"path": text}
    try:
        explained = policy.explain(tool, arguments)
    finally:
        if wall is not None:
            wall.close()
    if no_wall and explained.sandbox:
        explained = replace(explained, sandbox=f"none ({no_wall}): the command would run unconfined")
    hooks = bool(settings.hooks.get("PreToolUse"))

    if args.json:
        out = {**explained.as_dict(), "mode": mode, "mode_source": mode_source, "tool": tool.name,
               "arguments": arguments, "settings": list(settings.sources), "pre_tool_use_hooks": hooks}
        print(json.dumps(out, ensure_ascii=False))
    else:
        lines = explanation_lines(explained, mode, mode_source)
        if settings.sources:
            lines.append(f"settings: {', '.join(settings.sources)}")
        if hooks and explained.behavior != "deny":
            lines.append("note: PreToolUse hooks are configured; this check does not run them, and they may "
                         "still refuse the call")
        print("\n".join(lines))
    return EXIT[explained.behavior]


def main(argv: list[str]) -> None:
    parser = _parser()
    args = parser.parse_args(argv)
    if args.action != "check":
        parser.print_help(sys.stderr)
        raise SystemExit(EX_USAGE)
    raise SystemExit(check(args))
