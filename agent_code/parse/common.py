"""Shared steps of the tool-call parsers: declared tools, strict JSON, turning a name and
arguments into a ToolCallOut (or a reason why not)."""

from __future__ import annotations

import json
from typing import Any, Callable

from agent_code.protocols.canonical import ToolCallOut, ToolSchema

Declared = dict[str, dict[str, Any]]  # tool name -> its parameters schema ({} when none given)


def declared_tools(tools: list[ToolSchema] | None) -> Declared:
    """Name → parameters schema for canonical tool schemas; malformed entries are skipped.
    ``None`` and ``[]`` both mean: no tool was declared, so no call can be accepted."""
    out: Declared = {}
    for tool in tools or []:
        if not isinstance(tool, dict):
            continue
        fn = tool.get("function", tool)
        if not isinstance(fn, dict) or not isinstance(fn.get("name"), str):
            continue
        params = fn.get("parameters")
        out[fn["name"]] = params if isinstance(params, dict) else {}
    return out


def _no_constants(name: str) -> Any:
    raise ValueError(f"{name} is not JSON")


_DECODER = json.JSONDecoder(parse_constant=_no_constants)


def loads(text: str) -> Any:
    """Strict JSON (no NaN/Infinity); raises ValueError (RecursionError folded in) on failure."""
    try:
        value, end = _DECODER.raw_decode(text.strip())
    except RecursionError:
        raise ValueError("JSON nested too deeply") from None
    if end != len(text.strip()):
        raise ValueError(f"extra data after JSON at char {end}")
    return value


def raw_decode(text: str, pos: int) -> tuple[Any, int]:
    """One JSON value starting at ``pos``: (value, end); raises ValueError on failure."""
    try:
        return _DECODER.raw_decode(text, pos)
    except RecursionError:
        raise ValueError("JSON nested too deeply") from None


def short(text: str, limit: int = 60) -> str:
    text = " ".join(text.split())
    return text if len(text) <= limit else text[:limit - 1] + "…"


def make_call(name: object, arguments: object, declared: Declared, source: str) -> tuple[ToolCallOut | None, list[str]]:
    """A call if ``name`` is a declared tool and ``arguments`` a dict, else (None, [why]).

    Missing required arguments do not reject the call (the client's tool will answer with its
    own validation error, which is what the model should learn from); they are recorded in the
    notes with the suffix ``(call kept)``.
    """
    if not isinstance(name, str) or not name:
        return None, [f"{source}: tool call without a name"]
    if name not in declared:
        return None, [f"{source}: call to undeclared tool {short(name, 40)!r}"]
    if not isinstance(arguments, dict):
        return None, [f"{source}: {name}: arguments must be an object, got {type(arguments).__name__}"]
    notes: list[str] = []
    required = declared[name].get("required")
    if isinstance(required, list):
        missing = [key for key in required if isinstance(key, str) and key not in arguments]
        if missing:
            notes.append(f"{source}: {name}: missing required argument(s) "
                         f"{', '.join(repr(k) for k in missing)} (call kept)")
    return ToolCallOut(name=name, arguments=arguments), notes


def arguments_of(obj: dict[str, Any], keys: tuple[str, ...]) -> tuple[bool, Any]:
    """(found, value) for the first of ``keys`` in ``obj``; a JSON string value is decoded."""
    for key in keys:
        if key in obj:
            value = obj[key]
            if isinstance(value, str):
                try:
                    value = loads(value)
                except ValueError:
                    pass
            return True, value
    return False, None


# A tool-call block a format's finder found: where it starts and ends in the text, and its
# calls parsed (calls, notes, whether the whole block parsed)
Block = tuple[int, int, tuple[list[ToolCallOut], list[str], bool]]


def extract_blocks(text: str, next_block: Callable[[str, int], Block | None]) -> tuple[str, list[ToolCallOut], list[str]]:
    """The loop every tagged tool-call format shares: ``next_block(text, pos)`` finds the next
    block from ``pos`` on (None: no more). A block whose calls all parse gives them and leaves
    the text; one that does not stays in the text as it was written. Returns (text outside
    the calls, calls, notes on what was ill-formed)."""
    kept: list[str] = []
    calls: list[ToolCallOut] = []
    notes: list[str] = []
    pos = 0
    while True:
        block = next_block(text, pos)
        if block is None:
            kept.append(text[pos:])
            break
        start, end, (got, why, ok) = block
        kept.append(text[pos:start])
        notes.extend(why)
        if ok:
            calls.extend(got)
        else:
            kept.append(text[start:end])
        if end >= len(text):
            break
        pos = end
    return "".join(kept), calls, notes
