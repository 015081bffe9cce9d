"""A request body that repeats the session's previous one with messages added, parsed by its new
part only.

An agent CLI resends its whole conversation every turn: the body of turn *n* + 1 is, byte for
byte, the body of turn *n* with the new messages written before the list's closing bracket.
Parsing all of it again (and then comparing every earlier message with what was held) costs
time that grows with the session. So for each session the gateway keeps a :class:`BodyMemo`:
the previous body's bytes up to the end of its last message (``head``), its bytes after the
list's closing bracket (``tail``) and its parsed value. A body that starts with ``head`` and
ends with ``tail`` is the previous one with the bytes between them changed: when those bytes
are ``, message, message … ]`` only the new messages are parsed, and the rest of the value —
the same objects — is taken from the memo.

What comes back is what :func:`~agent_code.gateway.http.parse_json_body` gives for the whole
body, exactly: a memo is kept only of a body that orjson read whole (no run of digits that sends a
body to the standard library, nothing orjson refuses), and the new part is read by orjson too, as
the items of a list at the very depth of the body's list (``[[item, …]]``: the same nesting
limit), only when it holds no such digit run either. orjson reads a value the same wherever it
stands, so the whole body read by orjson — which is what ``parse_json_body`` does with it — gives
the same value. Anything else (another shape, an edit anywhere earlier, a new part that does not
read as new items, one that orjson refuses) goes to the full parse, which also gives any error
its message. The parsed value is shared with the next request's: nothing may change it in place
(translation only reads it; ``tests/test_body_memo.py`` checks that for every protocol).
``tests/test_body_memo.py`` compares both on edited and hostile bodies.
"""

from __future__ import annotations

import json
import re
from dataclasses import dataclass
from json.decoder import WHITESPACE, scanstring  # type: ignore[attr-defined]
from typing import Any

from starlette.requests import Request

from agent_code.gateway.http import needs_standard_library, orjson, read_json, read_json_bytes

MIN_BYTES = 32 * 1024   # a shorter body is parsed whole (its parse costs less than keeping a memo)

_SCAN = json.JSONDecoder()   # for finding where values end in a body already accepted


@dataclass(frozen=True)
class BodyMemo:
    """A parsed body, kept for the next one: ``head`` (its bytes up to the end of the last item
    of the list under ``key``), ``tail`` (its bytes after that list) and ``value``."""

    key: str
    head: bytes
    tail: bytes
    value: dict[str, Any]


async def read_json_extending(request: Request, limit: int, memo: BodyMemo | None, key: str
                              ) -> tuple[Any, BodyMemo | None]:
    """``read_json`` (``gateway/http.py``) through :func:`parse_body`: the body, and its memo."""
    return await read_json(request, limit, lambda raw: parse_body(raw, memo, key))


def parse_body(raw: bytes, memo: BodyMemo | None, key: str) -> tuple[Any, BodyMemo | None]:
    """``parse_json_body(raw)`` — read from its new part alone when it extends ``memo``'s body —
    and the memo for the next body (None for one too small to keep, of another shape, or read
    by the standard library)."""
    if memo is not None and memo.key == key:
        extended = _extend(raw, memo)
        if extended is not None:
            return extended.value, extended
    value, by_orjson = read_json_bytes(raw)
    return value, (remember(raw, value, key) if by_orjson and len(raw) >= MIN_BYTES else None)


_TO_FIRST_ITEM = re.compile(rb"[ \t\n\r]*,")


def _extend(raw: bytes, memo: BodyMemo) -> BodyMemo | None:
    head, tail = memo.head, memo.tail
    if orjson is None or len(raw) < len(head) + len(tail) or not raw.startswith(head) or not raw.endswith(tail):
        return None
    middle = raw[len(head):len(raw) - len(tail)]   # ", item, item ]" and whitespace, if it extends
    start = _TO_FIRST_ITEM.match(middle)
    if start is None or needs_standard_library(middle):
        return None
    try:   # the new items where the body's list has its items: inside two containers
        read = orjson.loads(b"[[" + middle[start.end():] + b"]")
    except orjson.JSONDecodeError:
        return None
    if len(read) != 1 or not read[0]:   # "item], [more" closed the list and opened another
        return None
    added = read[0]
    value = dict(memo.value)
    value[memo.key] = [*memo.value[memo.key], *added]
    end = middle.rindex(b"]")   # the list's closing bracket: only whitespace follows it in ``middle``
    last = len(middle[:end].rstrip(b" \t\n\r"))
    return BodyMemo(memo.key, raw[:len(head) + last], tail, value)


def remember(raw: bytes, value: Any, key: str) -> BodyMemo | None:
    """The memo of a body that :func:`parse_json_body` accepted as ``value``: where its list
    ``key`` ends, found by reading its top-level object once more (key by key, each value by
    the standard library's scanner); None for a body of another shape (no such list, an empty
    one, a key given twice, a byte-order mark)."""
    if not isinstance(value, dict) or not isinstance(value.get(key), list) or not value[key]:
        return None
    if raw.startswith(b"\xef\xbb\xbf"):
        return None
    try:
        text = raw.decode("utf-8")
        spans = _list_span(text, key)
    except (ValueError, RecursionError):
        return None
    if spans is None:
        return None
    last, after = spans
    if raw.isascii():
        cut_head, cut_tail = last, after
    else:
        cut_head, cut_tail = len(text[:last].encode("utf-8")), len(text[:after].encode("utf-8"))
    return BodyMemo(key, raw[:cut_head], raw[cut_tail:], value)


def _list_span(text: str, key: str) -> tuple[int, int] | None:
    """In the JSON object ``text``: the end of the last item of its list ``key`` and the end of
    that list; None when the key is missing or given twice, or its value is not a non-empty list."""
    i = WHITESPACE.match(text, 0).end()
    if text[i:i + 1] != "{":
        return None
    seen: set[str] = set()
    found: tuple[int, int] | None = None
    i += 1
    while True:
        i = WHITESPACE.match(text, i).end()
        if text[i:i + 1] == "}":
            return found
        if seen and text[i:i + 1] == ",":
            i = WHITESPACE.match(text, i + 1).end()
        if text[i:i + 1] != '"':
            return None
        name, i = scanstring(text, i + 1)
        if name in seen:
            return None
        seen.add(name)
        i = WHITESPACE.match(text, i).end()
        if text[i:i + 1] != ":":
            return None
        i = WHITESPACE.match(text, i + 1).end()
        if name != key:
            _, i = _SCAN.raw_decode(text, i)
            continue
        if text[i:i + 1] != "[":
            return None
        i += 1
        last = -1
        while True:
            i = WHITESPACE.match(text, i).end()
            if text[i:i + 1] == "]":
                i += 1
                break
            if last >= 0:
                if text[i:i + 1] != ",":
                    return None
                i = WHITESPACE.match(text, i + 1).end()
            _, i = _SCAN.raw_decode(text, i)
            last = i
        if last < 0:
            return None
        found = (last, i)
