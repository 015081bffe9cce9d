"""Harnesses: one small module per CLI agent (see ``base.py``); ``get_harness(name)`` picks one.

Adding an agent is one file: subclass :class:`CliHarness` and add it to ``HARNESSES``.
"""

from __future__ import annotations

from agent_code.harness.agent_code import AgentCodeHarness
from agent_code.harness.base import AgentRun, CliHarness, HarnessError, Launch
from agent_code.harness.claude_code import ClaudeCodeHarness
from agent_code.harness.codex import CodexHarness
from agent_code.harness.qwen_code import QwenCodeHarness

__all__ = ["AgentRun", "CliHarness", "HarnessError", "Launch", "HARNESSES", "get_harness"]

HARNESSES: dict[str, type[CliHarness]] = {
    h.name: h for h in (AgentCodeHarness, ClaudeCodeHarness, CodexHarness, QwenCodeHarness)}


def get_harness(name: str) -> CliHarness:
    try:
        return HARNESSES[name]()
    except KeyError:
        raise HarnessError(f"unknown agent '{name}' (choose from {', '.join(HARNESSES)})") from None
