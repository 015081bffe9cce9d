"""Hermes / Qwen2.5 / Qwen3 tool calls: ``<tool_call>\\n{"name": ..., "arguments": {...}}\\n</tool_call>``.

Several blocks may follow each other, and one block may hold several JSON objects in a row.
``arguments`` may also be spelled ``parameters``, or be a JSON string holding the object; a
missing ``arguments`` is ``{}``. A block is all or nothing: if any object in it is not a valid
call, no call is taken from it, its raw text stays in the reply text, and ``ill_formed`` says why.
A block cut off before ``</tool_call>`` (the engine stopped on it, or ran out of tokens) is taken
only if what follows ``<tool_call>`` is complete JSON.
"""

from __future__ import annotations

from typing import Any

from agent_code.parse.common import Block, Declared, arguments_of, extract_blocks, make_call, raw_decode, short
from agent_code.protocols.canonical import ToolCallOut

OPEN, CLOSE = "<tool_call>", "</tool_call>"
SOURCE = "hermes"


def _block_calls(inner: str, declared: Declared) -> tuple[list[ToolCallOut], list[str], bool]:
    """(calls, notes, ok) for the text between the tags."""
    inner = inner.strip()
    values: list[Any] = []
    pos, end = 0, len(inner)
    while True:
        while pos < end and inner[pos].isspace():
            pos += 1
        if pos >= end:
            break
        try:
            value, pos = raw_decode(inner, pos)
        except ValueError as exc:
            return [], [f"{SOURCE}: invalid JSON in <tool_call> ({short(str(exc), 80)}): {short(inner)!r}"], False
        values.append(value)
    if not values:
        return [], [f"{SOURCE}: empty <tool_call>"], False
    calls: list[ToolCallOut] = []
    notes: list[str] = []
    for value in values:
        if not isinstance(value, dict):
            return [], [f"{SOURCE}: <tool_call> holds {type(value).__name__}, not an object"], False
        found, arguments = arguments_of(value, ("arguments", "parameters"))
        call, why = make_call(value.get("name"), arguments if found else {}, declared, SOURCE)
        if call is None:
            return [], why, False
        calls.append(call)
        notes.extend(why)
    return calls, notes, True


def extract(text: str, declared: Declared) -> tuple[str, list[ToolCallOut], list[str]]:
    """(text outside the calls, calls, ill_formed)."""

    def next_block(text: str, pos: int) -> Block | None:
        start = text.find(OPEN, pos)
        if start < 0:
            return None
        close = text.find(CLOSE, start + len(OPEN))
        inner = text[start + len(OPEN):close if close >= 0 else len(text)]
        got, why, ok = _block_calls(inner, declared)
        if close < 0 and not ok:
            why = [f"{SOURCE}: unterminated <tool_call>"] + why
        return start, close + len(CLOSE) if close >= 0 else len(text), (got, why, ok)

    return extract_blocks(text, next_block)
