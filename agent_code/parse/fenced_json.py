"""Lenient fallback for small models that write a tool call as plain JSON.

A fenced block (```json, ```tool_call, ```tool_code, ```tool or a bare ```) holding an object — or a list of objects —
shaped ``{"name": X, "arguments": {...}}`` (``parameters`` or ``input`` also accepted; a JSON
string holding the object too), where every X is a DECLARED tool, becomes those calls and the
block leaves the text. Fences in other languages (```python …) are never looked into.
Outside fences, a bare object of that shape does the same. Anything
else is left alone and is NOT reported as ill-formed: plain JSON in an answer is legitimate
content. Missing required arguments keep the call, noted ``(call kept)``.
"""

from __future__ import annotations

import re

from agent_code.parse.common import Declared, arguments_of, loads, make_call, raw_decode
from agent_code.protocols.canonical import ToolCallOut

SOURCE = "fenced_json"
ARG_KEYS = ("arguments", "parameters", "input")
FENCE = re.compile(r"```[ \t]*([\w+.-]*)[ \t]*\n(.*?)```", re.S)
CALL_FENCES = ("", "json", "tool_call", "tool_code", "tool")  # other fences (```python …) are left alone
CANDIDATE = re.compile(r"\{\s*\"")
MAX_CANDIDATES = 64  # bare-object attempts per reply: bounds the work on adversarial text


def _calls(value: object, declared: Declared) -> tuple[list[ToolCallOut], list[str]] | None:
    """The calls ``value`` names, or None when it is not entirely made of declared calls."""
    items = value if isinstance(value, list) and value else [value]
    calls: list[ToolCallOut] = []
    notes: list[str] = []
    for item in items:
        if not isinstance(item, dict) or not isinstance(item.get("name"), str) \
                or item["name"] not in declared:
            return None
        found, arguments = arguments_of(item, ARG_KEYS)
        if not found:
            return None
        call, why = make_call(item["name"], arguments, declared, SOURCE)
        if call is None:
            return None
        calls.append(call)
        notes.extend(why)
    return calls, notes


def _bare(text: str, declared: Declared, budget: list[int]) -> tuple[str, list[ToolCallOut], list[str]]:
    kept: list[str] = []
    calls: list[ToolCallOut] = []
    notes: list[str] = []
    pos = 0
    search = 0
    while budget[0] > 0:
        match = CANDIDATE.search(text, search)
        if match is None:
            break
        budget[0] -= 1
        start = match.start()
        try:
            value, end = raw_decode(text, start)
        except ValueError:
            search = start + 1
            continue
        got = _calls(value, declared) if isinstance(value, dict) else None
        if got is None:
            search = start + 1
            continue
        kept.append(text[pos:start])
        calls.extend(got[0])
        notes.extend(got[1])
        pos = search = end
    kept.append(text[pos:])
    return "".join(kept), calls, notes


def extract(text: str, declared: Declared) -> tuple[str, list[ToolCallOut], list[str]]:
    """(text without the recognised calls, calls, notes)."""
    if not declared:
        return text, [], []
    kept: list[str] = []
    calls: list[ToolCallOut] = []
    notes: list[str] = []
    budget = [MAX_CANDIDATES]
    pos = 0
    for match in FENCE.finditer(text):
        outside, got_calls, got_notes = _bare(text[pos:match.start()], declared, budget)
        kept.append(outside)
        calls.extend(got_calls)
        notes.extend(got_notes)
        got = None
        if match.group(1).lower() in CALL_FENCES:
            try:
                got = _calls(loads(match.group(2)), declared)
            except ValueError:
                pass
        if got is None:
            kept.append(match.group(0))
        else:
            calls.extend(got[0])
            notes.extend(got[1])
        pos = match.end()
    outside, got_calls, got_notes = _bare(text[pos:], declared, budget)
    kept.append(outside)
    calls.extend(got_calls)
    notes.extend(got_notes)
    return "".join(kept), calls, notes
