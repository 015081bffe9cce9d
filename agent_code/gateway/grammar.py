"""A grammar that keeps a small model to plain text or well-formed calls to DECLARED tools.

Unconstrained, a small model often answers a tool request with a bare or fenced JSON blob
naming a tool that does not exist. :func:`tool_call_grammar` builds an LLGuidance Lark grammar
(what llama.cpp compiles when a ``grammar`` string starts with ``%llguidance``) that allows
exactly one of:

* plain text that does not begin with whitespace, ``<``, ``{``, ``[`` or a backtick — so
  JSON-looking output is steered into the other branch;
* one or more Hermes calls, newline-separated, each
  ``<tool_call>\\n{"name": NAME, "arguments": {...}}\\n</tool_call>`` where NAME is a declared
  tool and the arguments satisfy its input schema (``%json`` embeds a JSON schema);
* (``json_call``, on by default) one such ``{"name", "arguments"}`` object, bare or in a
  ```json fence — the parser's fenced-JSON fallback turns it into the call.

Why the last branch: forbidding JSON-looking text alone does not make a 0.5B model write
``<tool_call>``; the masked probability spreads over ordinary text instead (measured: 0 calls in
8 samples, against 5 in 8 unconstrained). Letting its preferred ``{``/fence start continue as a
schema-checked call to a declared tool is what turns those blobs into usable calls.

JSON is generated in the compact layout the Qwen/Hermes chat templates render tool calls in
(``", "`` and ``": "``, no newlines), which also keeps the model from padding with whitespace.
The end of the turn is reachable after the text or after any complete call.

:func:`no_call_grammar` is the grammar of ``tool_choice: {"type": "none"}``: the tools are still
declared (and rendered into the prompt, so every request of a session shares its prefix), but the
turn must be text. It allows any text that never writes a call opener (Hermes' and Qwen3-Coder's
``<tool_call>``, ``<function=``, DeepSeek-V3's); code fences stay allowed (agent-code's small
profile asks for the fix as a code block on exactly such a step). The gateway also parses a
``none`` turn as if no tool were declared, so markup that gets through (an engine without
grammars) stays text.
"""

from __future__ import annotations

import json
import re
from typing import Any, Sequence

from agent_code.parse.incremental import CALL_OPENERS as PARSER_OPENERS
from agent_code.protocols.canonical import ToolSchema

STYLES = ("hermes",)

# first character of plain text: not whitespace, not the start of a tag, JSON or code fence
TEXT_REGEX = r"/[^\s<{\[`](?s:.*)/"

# llguidance's own JSON options: compact separators; unknown schema keywords are ignored
_JSON_OPTIONS = {"whitespace_flexible": False, "item_separator": ", ", "key_separator": ": ",
                 "lenient": True}


def _function(tool: ToolSchema) -> dict[str, Any]:
    return tool.get("function", tool) if isinstance(tool, dict) else {}


def _parameters(function: dict[str, Any]) -> dict[str, Any]:
    params = function.get("parameters") or function.get("input_schema")
    if not isinstance(params, dict) or not params:
        return {"type": "object"}
    return {k: v for k, v in params.items() if k != "$schema"}


def call_schema(tools: list[ToolSchema]) -> dict[str, Any]:
    """The JSON schema of one call's body: ``{"name": NAME, "arguments": ARGS}``, any declared tool."""
    options = []
    for tool in tools:
        function = _function(tool)
        name = function.get("name")
        if not isinstance(name, str) or not name:
            continue
        options.append({"type": "object",
                        "properties": {"name": {"const": name}, "arguments": _parameters(function)},
                        "required": ["name", "arguments"], "additionalProperties": False})
    if not options:
        raise ValueError("no named tool to build a tool-call grammar for")
    schema: dict[str, Any] = options[0] if len(options) == 1 else {"anyOf": options}
    return {**schema, "x-guidance": _JSON_OPTIONS}


def tool_call_grammar(tools: list[ToolSchema], *, style: str = "hermes",
                      require_call: bool = False, json_call: bool = True) -> str:
    """An LLGuidance Lark grammar: plain text, or one or more calls to the declared ``tools``
    (canonical ``{"type": "function", "function": {...}}`` schemas). ``require_call`` drops
    the text branch (for ``tool_choice`` any/tool). ``json_call`` also allows ONE call written
    as a bare or ```json-fenced object (same schema), which the parser's fenced-JSON fallback
    reads: small models start that way far more often than with ``<tool_call>``."""
    if style not in STYLES:
        raise ValueError(f"unknown tool-call grammar style {style!r}; known: {list(STYLES)}")
    schema = json.dumps(call_schema(tools), ensure_ascii=False)
    branches = ["calls"] + (["json_call"] if json_call else []) + ([] if require_call else ["TEXT"])
    lines = [
        "%llguidance {}",
        "start: " + " | ".join(branches),
        r'calls: call ("\n" call)*',
        r'call: "<tool_call>\n" body "\n</tool_call>"',
    ]
    if json_call:
        lines.append(r'json_call: body | "```json\n" body "\n```"')
    lines += [f"body: %json {schema}", f"TEXT: {TEXT_REGEX}", ""]
    return "\n".join(lines)


# what starts a call in the chat formats the parsers read: never written under none (code fences are)
CALL_OPENERS = tuple(o for o in PARSER_OPENERS if o != "```")


def no_call_grammar(tools: list[ToolSchema] | None = None, *, openers: Sequence[str] = CALL_OPENERS) -> str:
    """An LLGuidance Lark grammar for ``tool_choice`` none: any text in which none of ``openers``
    occurs, nor (given ``tools``) a JSON object's ``"name": "TOOL"`` naming one of them, the
    call the fenced-JSON fallback would read (a regex intersected with the negation of "contains
    one of those")."""
    if not openers or not all(openers):
        raise ValueError("no_call_grammar needs non-empty openers")
    alternatives = [re.escape(o) for o in openers]
    names = [n for t in tools or [] if isinstance(n := _function(t).get("name"), str) and n]
    if names:
        alternatives.append(r'"name"\s*:\s*"(' + "|".join(re.escape(n) for n in names) + ')"')
    forbidden = "|".join(alternatives).replace("/", "\\/")
    return "\n".join(["%llguidance {}", "start: TEXT", f"TEXT: /(?s:.*)/ & ~/(?s:.*({forbidden}).*)/", ""])
