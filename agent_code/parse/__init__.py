"""Raw completion text → ParsedReply (reasoning, visible text, tool calls). Pure functions.

One module per format: ``hermes`` (``<tool_call>{json}</tool_call>``), ``qwen3_coder``
(``<tool_call><function=…><parameter=…>``), ``deepseek_v3`` (``<｜tool▁calls▁begin｜>`` …
``function<｜tool▁sep｜>NAME`` and a ```` ```json ```` fence), ``fenced_json`` (lenient JSON fallback for small
models), ``reasoning`` (``<think>…</think>``).

Rules shared by every parser:

* Only calls to DECLARED tools with object arguments are returned. A call to an undeclared
  tool, unparseable JSON/XML or non-object arguments goes into ``ill_formed`` (one short line
  each) and its raw text stays in ``text``, so nothing the model wrote is lost.
* Missing required arguments keep the call; ``ill_formed`` gets a line ending ``(call kept)``.
  Arguments are not otherwise validated: the client's tool answers bad arguments itself.
* ``tools=None`` and ``tools=[]`` both mean no tool was declared.
* Text outside the calls is stripped of surrounding whitespace. Reasoning is stripped too;
  empty reasoning is ``None``.
* The fenced-JSON fallback (``fallback_fenced``) runs only when the chosen tool parser found
  neither a call nor an ill-formed block — so a broken ``<tool_call>`` is never half-rescued.
* No input string makes these functions raise; an unknown parser NAME raises ValueError.
"""

from __future__ import annotations

from agent_code.parse import deepseek_v3, fenced_json, hermes, qwen3_coder
from agent_code.parse.common import Declared, declared_tools
from agent_code.parse.reasoning import split_reasoning
from agent_code.protocols.canonical import ParsedReply, ToolCallOut, ToolSchema

TOOL_PARSERS = {
    "hermes": hermes.extract,
    "qwen3_coder": qwen3_coder.extract,
    "deepseek_v3": deepseek_v3.extract,
    "fenced_json": fenced_json.extract,
    "none": None,
}
REASONING_PARSERS = {"think": split_reasoning, "none": None}


def detect_parsers(chat_template: str | None) -> tuple[str, str]:
    """(tool_parser, reasoning_parser) names for a chat template's source text."""
    template = chat_template or ""
    if deepseek_v3.CALLS_BEGIN in template and deepseek_v3.SEP in template:
        tool = "deepseek_v3"
    elif "<function=" in template and "<parameter=" in template:
        tool = "qwen3_coder"
    elif "<tool_call>" in template:
        tool = "hermes"
    else:
        tool = "none"
    reasoning = "think" if "<think>" in template or "</think>" in template else "none"
    return tool, reasoning


def parse_completion(text: str, *, tool_parser: str, reasoning_parser: str,
                     tools: list[ToolSchema] | None, fallback_fenced: bool = True,
                     prompt_opened_think: bool = False, declared: Declared | None = None) -> ParsedReply:
    """Split a raw completion. ``prompt_opened_think``: the generation prompt ended inside an
    open ``<think>`` (so a completion without ``</think>`` is all reasoning). ``declared``:
    ``declared_tools(tools)`` when the caller has it already (read only)."""
    if tool_parser not in TOOL_PARSERS:
        raise ValueError(f"unknown tool parser {tool_parser!r}; known: {sorted(TOOL_PARSERS)}")
    if reasoning_parser not in REASONING_PARSERS:
        raise ValueError(f"unknown reasoning parser {reasoning_parser!r}; known: {sorted(REASONING_PARSERS)}")
    reasoning = None
    if reasoning_parser == "think":
        reasoning, text = split_reasoning(text, opened=prompt_opened_think)
    if declared is None:
        declared = declared_tools(tools)
    calls: list[ToolCallOut] = []
    ill_formed: list[str] = []
    extract = TOOL_PARSERS[tool_parser]
    if extract is not None:
        text, calls, ill_formed = extract(text, declared)
    if fallback_fenced and tool_parser != "fenced_json" and not calls and not ill_formed:
        text, calls, ill_formed = fenced_json.extract(text, declared)
    return ParsedReply(text=text.strip(), reasoning=reasoning, tool_calls=calls, ill_formed=ill_formed)


__all__ = ["TOOL_PARSERS", "REASONING_PARSERS", "detect_parsers", "parse_completion"]
