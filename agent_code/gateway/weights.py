"""Admission of new turns and the weight version they are generated with (weight updates).

Between (or during) training steps the trainer updates the engine's weights. Around that:

    POST /v1/admin/pause   {"mode": "wait" | "reject"}   stop admitting new turns
    GET  /v1/admin/weights                                 version, paused, turns generating, drained
    POST /v1/admin/resume  {"weight_version": "v8"}       admit again, with the new version

Paused, a turn already generating finishes; a new one waits for the resume (``wait``, the
default: its request stays open) or is refused at once with a 503 ``overloaded_error`` in the
protocol's error format (``reject``). ``drained`` is true once no turn is generating: the
moment to update the weights. Every turn records the version it was admitted with (an engine
that reports its own, in its generation's ``meta["weight_version"]``, wins), and a sample
carries the version of each span it trains (``metadata["weight_versions"]``), so a session that
spans an update is still one token-exact sample. The routes need the admin token.
"""

from __future__ import annotations

import asyncio
from typing import Any, Literal

PauseMode = Literal["wait", "reject"]


class AdmissionPaused(Exception):
    """A new turn while admission is paused in ``reject`` mode (a 503 to the client)."""

    status, kind = 503, "overloaded_error"


class WeightGate:
    """The weight version and whether new turns are admitted; one per gateway, on its loop."""

    def __init__(self, version: str = "0") -> None:
        self.version = version
        self.paused: PauseMode | None = None
        self.generating = 0                 # admitted turns whose generation has not ended
        self.waiting = 0                    # turns held back by a pause in wait mode
        self._open = asyncio.Event()
        self._open.set()

    async def admit(self) -> str:
        """Wait while paused (``reject``: raise :class:`AdmissionPaused`); then count the turn
        as generating and return the version it is generated with. Pair with :meth:`release`."""
        while self.paused is not None:
            if self.paused == "reject":
                raise AdmissionPaused("the gateway is paused for a weight update: new turns are refused "
                                      "until it resumes; retry in a moment")
            self.waiting += 1
            try:
                await self._open.wait()
            finally:
                self.waiting -= 1
        self.generating += 1
        return self.version

    def release(self) -> None:
        self.generating -= 1

    def pause(self, mode: PauseMode = "wait") -> None:
        self.paused = mode
        self._open.clear()

    def resume(self, version: str | None = None) -> None:
        if version is not None:
            self.version = version
        self.paused = None
        self._open.set()

    def status(self) -> dict[str, Any]:
        return {"weight_version": self.version, "paused": self.paused is not None, "mode": self.paused,
                "generating": self.generating, "waiting": self.waiting, "drained": self.generating == 0}
