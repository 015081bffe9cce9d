"""The engine protocol: token ids in, sampled token ids and their logprobs out.

Engines are async and cancellable: cancelling the task that awaits ``generate`` must
abort the request in the engine (free the slot, stop sampling) before the
``CancelledError`` propagates.

An engine that can stream also has ``stream``: an async iterator of :class:`Piece` (output ids
and their logprobs, in order, as they are sampled) that ends with the same :class:`Generation`
that ``generate`` returns (whose ids are all the pieces' ids, joined). Closing or cancelling the
iterator aborts the request like cancelling ``generate``. :func:`stream_generation` gives any
engine's stream: one without ``stream`` yields just its ``generate`` result.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import AsyncIterator, Protocol, Sequence, runtime_checkable

from agent_code.protocols.canonical import SamplingParams


class EngineError(Exception):
    """The engine failed (unreachable, crashed, returned malformed data)."""


class EngineRequestError(EngineError):
    """The engine answered, refusing this one request for what it holds (a prompt longer than the
    context, a parameter out of range): an HTTP 400, 413 or 422, an error event in place of a
    streamed reply, an abort nobody asked for. The engine itself is fine, and any other replica
    would refuse the same request: an engine pool neither drains the replica nor retries
    (:mod:`.pool`); the gateway answers 400."""


REQUEST_ERROR_STATUSES = (400, 413, 422)   # what a server answers a request it refuses for its content


def request_error_status(status: object) -> bool:
    """Whether an HTTP status an engine reported (in a reply or an error event) blames the request."""
    return isinstance(status, int) and status in REQUEST_ERROR_STATUSES


@dataclass
class Generation:
    output_ids: list[int]
    logprobs: list[float]           # one per output id: the logprob it was sampled with
    finish_reason: str              # "stop" (end of turn / stop string) | "length" | "abort"
    prompt_tokens: int = 0
    meta: dict = field(default_factory=dict)


@dataclass
class Piece:
    """Output ids sampled since the previous piece, with their logprobs."""

    output_ids: list[int]
    logprobs: list[float]


@runtime_checkable
class Engine(Protocol):
    name: str

    async def generate(self, prompt_ids: Sequence[int], sampling: SamplingParams, *,
                       session_id: str | None = None) -> Generation: ...

    async def close(self) -> None: ...


async def stream_generation(engine: Engine, prompt_ids: Sequence[int], sampling: SamplingParams, *,
                            session_id: str | None = None) -> AsyncIterator[Piece | Generation]:
    """The engine's ``stream`` when it has one, else its ``generate`` result alone."""
    stream = getattr(engine, "stream", None)
    if stream is None:
        yield await engine.generate(prompt_ids, sampling, session_id=session_id)
        return
    async for item in stream(prompt_ids, sampling, session_id=session_id):
        yield item
