"""Qwen3-Coder XML tool calls::

    <tool_call>
    <function=NAME>
    <parameter=KEY>
    VALUE
    </parameter>
    </function>
    </tool_call>

Values are text; each is converted by the declared tool's parameter schema: ``integer``,
``number``, ``boolean``, ``object``, ``array`` and ``null`` are read as JSON when declared so
(a type list or ``anyOf`` that allows ``string`` keeps the text); undeclared parameters stay
strings. A value that does not convert stays a string, noted with ``(call kept)``. One newline
after ``<parameter=KEY>`` and one before ``</parameter>`` belong to the format and are removed.

Lenient where the model is sloppy but the meaning is clear: a ``<function=…>`` block without
the ``<tool_call>`` wrapper, a missing ``</parameter>`` (ends at the next ``<parameter=`` or
``</function>``), a missing ``</function>`` inside a closed ``<tool_call>``, and a missing
``</tool_call>`` after a closed ``</function>`` (engines that stop on it). A block that fails
keeps its raw text in the reply text and says why in ``ill_formed``; no call is taken from it.
"""

from __future__ import annotations

from typing import Any

from agent_code.parse.common import Block, Declared, extract_blocks, loads, make_call, short
from agent_code.protocols.canonical import ToolCallOut

OPEN, CLOSE = "<tool_call>", "</tool_call>"
FN_OPEN, FN_CLOSE = "<function=", "</function>"
P_OPEN, P_CLOSE = "<parameter=", "</parameter>"
SOURCE = "qwen3_coder"


def _types(spec: object) -> list[str]:
    if not isinstance(spec, dict):
        return []
    kind = spec.get("type")
    if isinstance(kind, str):
        return [kind]
    if isinstance(kind, list):
        return [k for k in kind if isinstance(k, str)]
    out: list[str] = []
    for key in ("anyOf", "oneOf"):
        options = spec.get(key)
        if isinstance(options, list):
            for option in options:
                out.extend(_types(option))
    return out


def _convert_one(value: str, kind: str) -> tuple[bool, object]:
    text = value.strip()
    if kind == "boolean":
        if text.lower() in ("true", "false"):
            return True, text.lower() == "true"
        return False, None
    if kind == "null":
        return (True, None) if text == "null" else (False, None)
    try:
        parsed = loads(text)
    except ValueError:
        return False, None
    if kind == "integer":
        if isinstance(parsed, bool):
            return False, None
        if isinstance(parsed, int):
            return True, parsed
        if isinstance(parsed, float) and parsed.is_integer():
            return True, int(parsed)
        return False, None
    if kind == "number":
        ok = isinstance(parsed, (int, float)) and not isinstance(parsed, bool)
        return ok, parsed
    if kind == "object":
        return isinstance(parsed, dict), parsed
    if kind == "array":
        return isinstance(parsed, list), parsed
    return False, None


def convert(value: str, spec: object) -> tuple[object, bool]:
    """(converted value, ok). Undeclared or string-typed parameters stay text."""
    kinds = _types(spec)
    if not kinds or "string" in kinds:
        return value, True
    for kind in ("null", "integer", "number", "boolean", "object", "array"):
        if kind in kinds:
            ok, parsed = _convert_one(value, kind)
            if ok:
                return parsed, True
    return value, False


def _trim(value: str) -> str:
    if value.startswith("\n"):
        value = value[1:]
    if value.endswith("\n"):
        value = value[:-1]
    return value


def _parameters(body: str) -> dict[str, str]:
    params: dict[str, str] = {}
    pos = body.find(P_OPEN)
    while pos >= 0:
        name_end = body.find(">", pos + len(P_OPEN))
        if name_end < 0:
            break
        name = body[pos + len(P_OPEN):name_end].strip()
        start = name_end + 1
        close = body.find(P_CLOSE, start)
        nxt = body.find(P_OPEN, start)
        if close >= 0 and (nxt < 0 or close < nxt):
            params[name] = _trim(body[start:close])
            pos = body.find(P_OPEN, close + len(P_CLOSE))
        else:
            end = nxt if nxt >= 0 else len(body)
            params[name] = _trim(body[start:end])
            pos = nxt
    return params


def _function(name: str, body: str, declared: Declared) -> tuple[ToolCallOut | None, list[str]]:
    raw = _parameters(body)
    schema = declared.get(name, {})
    properties = schema.get("properties")
    properties = properties if isinstance(properties, dict) else {}
    arguments: dict[str, Any] = {}
    bad: list[str] = []
    for key, value in raw.items():
        arguments[key], ok = convert(value, properties.get(key))
        if not ok:
            bad.append(key)
    call, notes = make_call(name, arguments, declared, SOURCE)
    if call is not None and bad:
        notes.append(f"{SOURCE}: {name}: could not convert {', '.join(repr(k) for k in bad)} "
                     "to the declared type; kept as text (call kept)")
    return call, notes


def _region_calls(region: str, closed: bool, declared: Declared) -> tuple[list[ToolCallOut], list[str], bool]:
    """Calls in the text of one ``<tool_call>`` region (or a bare ``<function=`` block)."""
    calls: list[ToolCallOut] = []
    notes: list[str] = []
    pos = region.find(FN_OPEN)
    if pos < 0:
        return [], [f"{SOURCE}: no <function=...> in <tool_call>: {short(region)!r}"], False
    while pos >= 0:
        name_end = region.find(">", pos + len(FN_OPEN))
        if name_end < 0:
            return [], [f"{SOURCE}: unterminated <function= tag"], False
        name = region[pos + len(FN_OPEN):name_end].strip()
        fn_close = region.find(FN_CLOSE, name_end + 1)
        if fn_close < 0 and not closed:
            return [], [f"{SOURCE}: unterminated <function={short(name, 40)}>"], False
        body = region[name_end + 1:fn_close if fn_close >= 0 else len(region)]
        call, why = _function(name, body, declared)
        if call is None:
            return [], why, False
        calls.append(call)
        notes.extend(why)
        if fn_close < 0:
            break
        pos = region.find(FN_OPEN, fn_close + len(FN_CLOSE))
    return calls, notes, True


def extract(text: str, declared: Declared) -> tuple[str, list[ToolCallOut], list[str]]:
    """(text outside the calls, calls, ill_formed)."""

    def next_block(text: str, pos: int) -> Block | None:
        wrapped, bare = text.find(OPEN, pos), text.find(FN_OPEN, pos)
        if wrapped < 0 and bare < 0:
            return None
        if wrapped >= 0 and (bare < 0 or wrapped < bare):
            start, inner_start = wrapped, wrapped + len(OPEN)
            close = text.find(CLOSE, inner_start)
            region = text[inner_start:close if close >= 0 else len(text)]
            end = close + len(CLOSE) if close >= 0 else len(text)
            # an engine that stops on </tool_call> leaves it out: a closed </function> suffices
            closed = close >= 0
        else:
            start = bare
            fn_close = text.find(FN_CLOSE, bare)
            end = fn_close + len(FN_CLOSE) if fn_close >= 0 else len(text)
            region, closed = text[start:end], False
            stray = text.find(CLOSE, end)  # a </tool_call> right after a bare block belongs to it
            if stray >= 0 and not text[end:stray].strip():
                end = stray + len(CLOSE)
        return start, end, _region_calls(region, closed, declared)

    return extract_blocks(text, next_block)
