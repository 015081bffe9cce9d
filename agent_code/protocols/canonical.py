"""The canonical turn format every wire protocol translates into and out of.

Messages are chat messages as Hugging Face chat templates expect them::

    {"role": "system" | "user" | "tool", "content": str}
    {"role": "assistant", "content": str,
     "reasoning_content": str,                        # only when there was reasoning
     "tool_calls": [{"type": "function",
                     "function": {"name": str, "arguments": dict}}]}   # only when there were calls

Tools are ``[{"type": "function", "function": {"name", "description", "parameters"}}]``.
Wire-only details (tool-call ids, signatures, cache_control) never enter these dicts:
they would change what is rendered and break prefix matching between turns.
"""

from __future__ import annotations

import logging
from dataclasses import dataclass, field
from typing import Any

Message = dict[str, Any]
ToolSchema = dict[str, Any]


@dataclass
class SamplingParams:
    max_new_tokens: int = 1024
    temperature: float | None = None
    top_p: float | None = None
    top_k: int | None = None
    stop: list[str] = field(default_factory=list)
    seed: int | None = None
    # JSON-schema-constrained tool calls (engines that support grammars may use it)
    tool_grammar: dict[str, Any] | None = None
    # a grammar constraining the whole completion: LLGuidance Lark when it starts with
    # "%llguidance", else GBNF (llama.cpp only; engines without grammars ignore it)
    grammar: str | None = None

    def plain(self, top_k_off: int) -> dict[str, Any]:
        """Temperature, top-p, top-k and min-p with unset fields meaning plain sampling
        (temperature 1, top-p 1, no top-k, min-p 0); ``top_k_off`` is how the engine spells
        "no top-k" (llama.cpp: 0, SGLang and vLLM: -1)."""
        top_k = self.top_k if self.top_k is not None and self.top_k > 0 else top_k_off
        return {"temperature": 1.0 if self.temperature is None else float(self.temperature),
                "top_p": 1.0 if self.top_p is None else float(self.top_p),
                "top_k": int(top_k), "min_p": 0.0}


@dataclass
class ChatRequest:
    """A wire request after translation: what the rest of the gateway works with."""

    messages: list[Message]
    tools: list[ToolSchema] | None
    sampling: SamplingParams
    stream: bool = False
    model: str | None = None
    tool_choice: Any = None
    thinking: bool = False          # the client asked for reasoning blocks
    notes: list[str] = field(default_factory=list)  # content the translation dropped or rewrote


@dataclass
class ToolCallOut:
    name: str
    arguments: dict[str, Any]
    id: str = ""  # wire id, assigned by the protocol's way out


@dataclass
class ParsedReply:
    """A raw completion split into its parts by the parsers."""

    text: str = ""
    reasoning: str | None = None
    tool_calls: list[ToolCallOut] = field(default_factory=list)
    ill_formed: list[str] = field(default_factory=list)  # what could not be parsed, and why

    def as_message(self) -> Message:
        """The canonical assistant message for this reply (what the next turn's history holds)."""
        msg: Message = {"role": "assistant", "content": self.text}
        if self.reasoning:
            msg["reasoning_content"] = self.reasoning
        if self.tool_calls:
            msg["tool_calls"] = [{"type": "function", "function": {"name": c.name, "arguments": c.arguments}}
                                 for c in self.tool_calls]
        return msg


def rest_of(final: str, sent: str) -> str:
    """What of ``final`` is left to stream after ``sent``, a prefix of it by construction (see
    :mod:`agent_code.parse.incremental`); if not, a bug: it is logged, and ``final`` past the
    length of ``sent`` is the rest."""
    if not final.startswith(sent):
        logging.getLogger("agent_code.gateway").error(
            "streamed text is not a prefix of the final reply: %r vs %r", sent[-60:], final[:len(sent)][-60:])
    return final[len(sent):]
