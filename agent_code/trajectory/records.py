"""Turn records: what one answered model turn was, token for token.

Ids and logprobs are stored as compact arrays (``array('i')`` / ``array('f')``), not
lists of Python ints: a gateway holds thousands of long sessions.
"""

from __future__ import annotations

import time
from array import array
from dataclasses import dataclass, field
from typing import Any, Sequence


@dataclass
class TurnRecord:
    session_id: str
    index: int
    messages: list[dict[str, Any]]        # canonical prompt messages
    tools: list[dict[str, Any]] | None
    prompt_ids: array
    output_ids: array
    logprobs: array
    finish_reason: str
    reply: dict[str, Any]                 # the canonical assistant message parsed from the output
    ill_formed: list[str] = field(default_factory=list)
    protocol: str = "anthropic"
    started_at: float = field(default_factory=time.time)
    timing: dict[str, float] = field(default_factory=dict)   # seconds: render, engine, parse, total
    # how the prompt came about (see trajectory/history.py)
    parent: int | None = None        # index of the turn whose prompt+output this prompt extends
    policy: str = "tokens"           # "tokens" (held ids reused) or "template" (full re-render)
    prefix_reused: int = 0           # prompt ids taken verbatim from the parent's held sequence
    drift: list[dict[str, Any]] = field(default_factory=list)  # {"kind", "cause", "masked"} events
    branch_hint: str | None = None   # why a new root started: "sub-agent", "compaction", "retry"
    notes: list[dict[str, Any]] = field(default_factory=list)  # client rewrites tolerated (echo.py)

    @classmethod
    def build(cls, *, prompt_ids: Sequence[int], output_ids: Sequence[int], logprobs: Sequence[float],
              **kw: Any) -> "TurnRecord":
        return cls(prompt_ids=array("i", prompt_ids), output_ids=array("i", output_ids),
                   logprobs=array("f", logprobs), **kw)

    def to_dict(self) -> dict[str, Any]:
        return {
            "session_id": self.session_id, "index": self.index, "protocol": self.protocol,
            "messages": self.messages, "tools": self.tools,
            "prompt_ids": self.prompt_ids.tolist(), "output_ids": self.output_ids.tolist(),
            "logprobs": self.logprobs.tolist(), "finish_reason": self.finish_reason,
            "reply": self.reply, "ill_formed": self.ill_formed,
            "started_at": self.started_at, "timing": self.timing,
            "parent": self.parent, "policy": self.policy, "prefix_reused": self.prefix_reused,
            "drift": self.drift, "branch_hint": self.branch_hint, "notes": self.notes,
        }

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> "TurnRecord":
        fields = {k: v for k, v in data.items() if k in cls.__dataclass_fields__}
        return cls.build(**fields)
