"""What of a completion is already certain while it is still being generated. Pure functions.

:func:`certain` reads a partial completion and returns a :class:`Progress`: reasoning and text
that are PREFIXES of what :func:`agent_code.parse.parse_completion` will return for the whole
completion, however it goes on. The gateway streams exactly these prefixes and, once the
generation is done, the rest of the final parse, so what a client accumulates is the final
reply by construction. Whatever might still change is held back only as long as needed:

* a trailing piece that could become a stop string (cut from the final text);
* reasoning (``think`` parser): text that does not start with ``<think>`` could still become
  reasoning through a later lone ``</think>``, so nothing is certain until that is settled
  (a ``<think>`` anywhere, or a ``</think>``); inside ``<think>`` the thought streams, minus a
  trailing partial ``</think>`` and trailing whitespace (the parse strips it);
* text (only once the reasoning is settled): when tools are declared, everything from the
  first place a call could start — ``<tool_call>``, ``<function=``, DeepSeek-V3's
  ``<｜tool▁calls▁begin｜>`` or ``<｜tool▁call▁begin｜>``, a code fence, a JSON
  object ``{"`` (the fenced-JSON fallback takes bare objects) — or a trailing partial one; and
  trailing whitespace. Text before that place is kept verbatim by every tool parser. With no
  tool declared no parser removes anything, so all the text is certain.

Tool calls are never certain before the end (a later block can change which parser applies).
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import Sequence

from agent_code.parse.common import declared_tools
from agent_code.parse.deepseek_v3 import OPENERS as DEEPSEEK_OPENERS
from agent_code.parse.reasoning import CLOSE as THINK_CLOSE
from agent_code.parse.reasoning import OPEN as THINK_OPEN
from agent_code.protocols.canonical import ToolSchema

CALL_OPENERS = ("<tool_call>", "<function=", *DEEPSEEK_OPENERS, "```")
_OBJECT = re.compile(r"\{\s*(\"|$)")   # a bare JSON object's start, or what could still become one


@dataclass(frozen=True)
class Progress:
    reasoning: str = ""            # a prefix of the final reasoning ("" for none)
    reasoning_done: bool = False   # the final reasoning is exactly ``reasoning`` (None when "")
    text: str = ""                 # a prefix of the final text (only once the reasoning is done)


def _partial_suffix(text: str, marker: str) -> int:
    """Length of the longest suffix of ``text`` that is a proper prefix of ``marker``."""
    for k in range(min(len(marker) - 1, len(text)), 0, -1):
        if text.endswith(marker[:k]):
            return k
    return 0


def without_stop_tail(text: str, stops: Sequence[str]) -> str:
    """``text`` less a trailing piece that is, or could still become, a stop string."""
    held = 0
    for stop in stops:
        if stop:
            held = max(held, len(stop) if text.endswith(stop) else _partial_suffix(text, stop))
    return text[:len(text) - held]


def _reasoning(text: str, parser: str) -> tuple[str, bool, str | None]:
    """(certain reasoning, settled, the rest once settled) — mirrors ``split_reasoning``."""
    if parser != "think":
        return "", True, text
    stripped = text.lstrip()
    if stripped.startswith(THINK_OPEN):
        thought, closed, rest = stripped[len(THINK_OPEN):].partition(THINK_CLOSE)
        if closed:
            return thought.strip(), True, rest
        return thought[:len(thought) - _partial_suffix(thought, THINK_CLOSE)].strip(), False, None
    close = text.find(THINK_CLOSE)
    if close >= 0 and THINK_OPEN not in text[:close]:
        return text[:close].strip(), True, text[close + len(THINK_CLOSE):]
    if THINK_OPEN in text:                        # a later </think> can no longer make reasoning
        return "", True, text
    return "", False, None   # a <think> may still open, or a later lone </think> make all this reasoning


def _call_free_end(text: str) -> int:
    """Where a tool call could start in ``text`` (its length when nowhere)."""
    end = len(text)
    for marker in CALL_OPENERS:
        found = text.find(marker)
        end = min(end, found if found >= 0 else len(text) - _partial_suffix(text, marker))
    match = _OBJECT.search(text)
    if match is not None:
        end = min(end, match.start())
    return end


def certain(text: str, *, tool_parser: str, reasoning_parser: str, tools: list[ToolSchema] | None,
            stops: Sequence[str] = ()) -> Progress:
    """The certain part of the partial completion ``text`` (see the module docstring)."""
    text = without_stop_tail(text, stops)
    reasoning, settled, rest = _reasoning(text, reasoning_parser)
    if not settled or rest is None:
        return Progress(reasoning, False, "")
    if declared_tools(tools):
        rest = rest[:_call_free_end(rest)]
    return Progress(reasoning, True, rest.strip())


def advance(sent: Progress, now: Progress) -> tuple[list[tuple[str, str]], Progress]:
    """What ``now`` adds to what was ``sent``, in stream order — ``("reasoning", piece)``,
    ``("reasoning_done", the whole reasoning)``, ``("text", piece)`` — and what is sent then."""
    out: list[tuple[str, str]] = []
    reasoning, done, text = sent.reasoning, sent.reasoning_done, sent.text
    if not done and len(now.reasoning) > len(reasoning) and now.reasoning.startswith(reasoning):
        out.append(("reasoning", now.reasoning[len(reasoning):]))
        reasoning = now.reasoning
    if now.reasoning_done and not done and now.reasoning == reasoning:
        out.append(("reasoning_done", reasoning))
        done = True
    if done and len(now.text) > len(text) and now.text.startswith(text):
        out.append(("text", now.text[len(text):]))
        text = now.text
    return out, Progress(reasoning, done, text)
