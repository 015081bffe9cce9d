"""Turn records: what one answered model turn was, token for token.

Ids and logprobs are stored as compact arrays (``array('i')`` / ``array('f')``), not
lists of Python ints: a gateway holds thousands of long sessions. A prompt that extends an
earlier turn's held sequence is a :class:`~agent_code.trajectory.tokens.TokenSeq` over it, so
a session's ids are held about once, not once per turn.

On disk (:meth:`TurnRecord.to_log`) such a turn is written by reference: ``prompt_ref``
``[parent, n]`` (the first ``n`` ids of the parent's prompt + output) and ``prompt_suffix``
(the new ids); its messages as ``messages_ref`` ``[parent, n]`` (the parent's messages and
reply) and ``messages_suffix``; its tools as ``tools_ref`` when they are the parent's. A root
turn is written whole, as every turn was before (:meth:`from_log` reads both).
"""

from __future__ import annotations

import time
from array import array
from dataclasses import dataclass, field
from typing import Any, Mapping, NotRequired, Sequence, TypedDict, Unpack

from agent_code.trajectory.tokens import TokenSeq


class TurnFields(TypedDict):
    """:class:`TurnRecord`'s fields other than its ids and logprobs (:meth:`TurnRecord.build`)."""

    session_id: str
    index: int
    messages: list[dict[str, Any]]
    tools: list[dict[str, Any]] | None
    finish_reason: str
    reply: dict[str, Any]
    ill_formed: NotRequired[list[str]]
    protocol: NotRequired[str]
    started_at: NotRequired[float]
    timing: NotRequired[dict[str, float]]
    parent: NotRequired[int | None]
    policy: NotRequired[str]
    prefix_reused: NotRequired[int]
    drift: NotRequired[list[dict[str, Any]]]
    branch_hint: NotRequired[str | None]
    notes: NotRequired[list[dict[str, Any]]]
    cached_tokens: NotRequired[int | None]
    weight_version: NotRequired[str | None]


@dataclass
class TurnRecord:
    session_id: str
    index: int
    messages: list[dict[str, Any]]        # canonical prompt messages
    tools: list[dict[str, Any]] | None
    prompt_ids: TokenSeq
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
    cached_tokens: int | None = None  # prompt tokens the engine served from its prefix cache (None: not reported)
    weight_version: str | None = None  # the policy weights that generated the output (None: not known)
    _held: TokenSeq | None = field(default=None, init=False, repr=False, compare=False)

    @classmethod
    def build(cls, *, prompt_ids: Sequence[int], output_ids: Sequence[int], logprobs: Sequence[float],
              **kw: Unpack[TurnFields]) -> "TurnRecord":
        prompt = prompt_ids if isinstance(prompt_ids, TokenSeq) else TokenSeq(array("i", prompt_ids))
        return cls(prompt_ids=prompt, output_ids=array("i", output_ids), logprobs=array("f", logprobs), **kw)

    def held(self) -> TokenSeq:
        """The sequence this turn holds: its prompt, then its output (made once, shared by
        every turn that extends it)."""
        if self._held is None:
            self._held = self.prompt_ids.extend(self.output_ids, origin=self.index)
        return self._held

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
            **({"cached_tokens": self.cached_tokens} if self.cached_tokens is not None else {}),
            **({"weight_version": self.weight_version} if self.weight_version is not None else {}),
        }

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> "TurnRecord":
        fields = {k: v for k, v in data.items() if k in cls.__dataclass_fields__ and not k.startswith("_")}
        return cls.build(**fields)

    def to_log(self, parent: "TurnRecord | None" = None) -> dict[str, Any]:
        """:meth:`to_dict`, with what this turn shares with ``parent`` (its parent record)
        written as references (module doc): each turn stores only what is new."""
        out = self.to_dict()
        if parent is None or parent.index != self.parent or parent.session_id != self.session_id:
            return out
        prompt = self.prompt_ids
        if prompt.base is not None and prompt.base is parent._held:
            del out["prompt_ids"]
            out["prompt_ref"], out["prompt_suffix"] = [parent.index, prompt.keep], prompt.own.tolist()
        n = len(parent.messages)
        messages = self.messages
        if len(messages) > n and messages[n] is parent.reply and all(a is b for a, b in zip(messages, parent.messages)):
            del out["messages"]
            out["messages_ref"], out["messages_suffix"] = [parent.index, n + 1], messages[n + 1:]
        if self.tools is parent.tools and self.tools is not None:
            del out["tools"]
            out["tools_ref"] = parent.index
        return out

    @classmethod
    def from_log(cls, data: dict[str, Any], earlier: Mapping[int, "TurnRecord"]) -> "TurnRecord":
        """A record written by :meth:`to_log` (or :meth:`to_dict`); ``earlier`` holds the
        session's records read before it, by index. Raises ValueError when a reference
        names a turn that is not there or reaches past it."""
        data = dict(data)

        def referenced(key: str) -> tuple[TurnRecord, int]:
            ref = data.pop(key)
            if not (isinstance(ref, list) and len(ref) == 2 and all(type(x) is int for x in ref)):
                raise ValueError(f"{key} must be [turn index, count], got {ref!r}")
            if ref[0] not in earlier:
                raise ValueError(f"{key} names turn {ref[0]}, which is not earlier in the log")
            return earlier[ref[0]], ref[1]

        if "prompt_ref" in data:
            parent, keep = referenced("prompt_ref")
            held = parent.held()
            if not 0 <= keep <= len(held):
                raise ValueError(f"prompt_ref keeps {keep} ids of turn {parent.index}, which holds {len(held)}")
            data["prompt_ids"] = held.extend(array("i", data.pop("prompt_suffix", [])), keep)
        if "messages_ref" in data:
            parent, keep = referenced("messages_ref")
            shared = [*parent.messages, parent.reply]
            if not 0 <= keep <= len(shared):
                raise ValueError(f"messages_ref keeps {keep} messages of turn {parent.index}")
            suffix = data.pop("messages_suffix", [])
            if not isinstance(suffix, list):
                raise ValueError("messages_suffix must be a list")
            data["messages"] = shared[:keep] + suffix
        if "tools_ref" in data:
            ref = data.pop("tools_ref")
            if ref not in earlier:
                raise ValueError(f"tools_ref names turn {ref!r}, which is not earlier in the log")
            data["tools"] = earlier[ref].tools
        return cls.from_dict(data)
