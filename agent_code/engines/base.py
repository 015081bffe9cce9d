"""The engine protocol: token ids in, sampled token ids and their logprobs out.

Engines are async and cancellable: cancelling the task that awaits ``generate`` must
abort the request in the engine (free the slot, stop sampling) before the
``CancelledError`` propagates.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Protocol, Sequence, runtime_checkable

from agent_code.protocols.canonical import SamplingParams


class EngineError(Exception):
    """The engine failed (unreachable, crashed, returned malformed data)."""


@dataclass
class Generation:
    output_ids: list[int]
    logprobs: list[float]           # one per output id: the logprob it was sampled with
    finish_reason: str              # "stop" (end of turn / stop string) | "length" | "abort"
    prompt_tokens: int = 0
    meta: dict = field(default_factory=dict)


@runtime_checkable
class Engine(Protocol):
    name: str

    async def generate(self, prompt_ids: Sequence[int], sampling: SamplingParams, *,
                       session_id: str | None = None) -> Generation: ...

    async def close(self) -> None: ...
