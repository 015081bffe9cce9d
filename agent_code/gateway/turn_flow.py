"""The HTTP side of one model turn, shared by every protocol's routes.

A protocol's route does the way in (read the body, translate it to a ChatRequest, pick the
session) and hands :meth:`TurnFlow.answer` a :class:`WayOut`: an object, made per request,
that knows how to write this protocol's reply. The flow does the rest, identically for all
protocols:

    prepare (render; session checks)  → error in the protocol's format
    (prepare and commit run off the event loop, in the session's order: :mod:`.offload`)
    JSON:  generate, cancelled if the client disconnects (499, nothing recorded)
           → body → commit → reply
    SSE:   the opening events at once → content deltas as the engine's tokens make them
           certain, keep-alive events whenever nothing was sent for a ping interval
           → the rest of the reply's events but the last → commit → the last event
           (a client that goes away cancels the generator, hence the engine request;
            nothing is recorded)

Streams are real token streams: the pipeline reads the engine's pieces and reports what of the
reply is certain (:mod:`agent_code.parse.incremental`: always a prefix of the final parse);
the way out sends that as deltas (``WayOut.progress``) and, at the end, the rest of the final
reply, so a client accumulates exactly the reply that is recorded. A way out without
``progress`` gets the whole reply at the end.

The turn is recorded before the final bytes are written, so a client that acts on the reply
(finishes the session, say) always finds it there, and never when the client was gone before
the reply was complete. A turn whose turn-log line cannot be written (disk full) is taken back
out of the session and the client gets an error in its protocol's format (507; in a stream, the
error event in place of the last one) instead of a reply the trajectory would not hold. Every
reply carries ``x-agent-code-session`` (the session id, useful
for clients grouped by history) and, when the translation dropped or rewrote something,
``x-agent-code-notes``; the notes are also logged. A JSON reply also carries the turn's
recorded timings as ``Server-Timing`` (render, engine, parse, total; in milliseconds).

A request that repeats the session's last answered one (an SDK's retry) is answered, under the
session's lock and its checks, with that reply's bytes again: nothing is generated or recorded
(:mod:`.replay`; the answer is remembered in the same step as its turn).
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import re
import time
from typing import Any, AsyncIterator, Callable, Iterable, ParamSpec, Protocol, TypeVar

from starlette.requests import Request
from starlette.responses import Response, StreamingResponse

from agent_code.gateway import offload, replay
from agent_code.gateway.http import (STORAGE_FULL, ClientGone, HttpError, as_http_error, disconnected, json_bytes,
                                     unless_disconnected)
from agent_code.gateway.pipeline import Gateway, PendingTurn, PreparedTurn, TurnOutcome
from agent_code.gateway.sessions import Session
from agent_code.parse.incremental import Progress, advance
from agent_code.protocols.canonical import ChatRequest
from agent_code.trajectory.records import TurnRecord

log = logging.getLogger("agent_code.gateway")

STREAM_HEADERS = {"cache-control": "no-cache", "x-accel-buffering": "no"}


class WayOut(Protocol):
    """One request's reply, in one protocol's wire format."""

    protocol: str          # recorded with the turn ("anthropic", "openai-chat", "openai-responses")

    def error(self, err: HttpError) -> Response: ...

    def body(self, outcome: TurnOutcome) -> dict[str, Any]:
        """The JSON reply."""

    def opening(self, turn: PreparedTurn) -> Iterable[bytes]:
        """SSE bytes sent before the engine is done."""

    def keepalive(self) -> bytes: ...

    def progress(self, news: list[tuple[str, str]]) -> list[bytes]:
        """(Optional) SSE bytes for what became certain: ``("reasoning" | "reasoning_done" |
        "text", piece)`` from :func:`agent_code.parse.incremental.advance`."""

    def reply_events(self, outcome: TurnOutcome) -> tuple[list[bytes], list[bytes]]:
        """The rest of the stream (after what ``progress`` sent): (before the turn is recorded, after)."""

    def stream_error(self, err: HttpError) -> bytes: ...


_CONTROL = re.compile(r"[\x00-\x1f\x7f]")


def header_safe(text: str, limit: int = 2000) -> str:
    """A header value: printable ASCII only (other characters backslash-escaped), no edge spaces,
    bounded. HTTP forbids the rest, and a value that the server's HTTP layer refuses would drop
    the connection after the turn was recorded (a session id may be any string)."""
    safe = text.encode("ascii", "backslashreplace").decode("ascii")
    safe = _CONTROL.sub(lambda m: f"\\x{ord(m.group()):02x}", safe).strip(" ")
    return safe if len(safe) <= limit else safe[: limit - 3] + "..."


def reply_headers(session: Session, request: ChatRequest) -> dict[str, str]:
    headers = {"x-agent-code-session": header_safe(session.id, 256)}
    if request.notes:
        headers["x-agent-code-notes"] = header_safe("; ".join(request.notes))
    return headers


def server_timing(timing: dict[str, float]) -> str:
    """The turn's recorded timings as a ``Server-Timing`` header value (milliseconds):
    ``render;dur=4.1, engine;dur=0.2, parse;dur=0.3, total;dur=5.0``."""
    return ", ".join(f"{name};dur={seconds * 1000:.3f}" for name, seconds in timing.items())


AfterCommit = Callable[[Session, TurnRecord], None]


class NotRecorded(Exception):
    """The turn could not be written to the turn log; it was taken back out of the session."""

    def __init__(self, cause: OSError) -> None:
        super().__init__(str(cause))
        full = cause.errno in STORAGE_FULL
        log.error("a turn was not recorded (its reply is withheld): %s", cause)
        self.error = HttpError(507 if full else 503, "api_error",
                               f"the turn was not recorded, so its reply is void: the gateway could not write its "
                               f"trajectory dir ({cause}); retry once it can write again",
                               code="insufficient_storage" if full else None)


def forget_turn(session: Session, index: int) -> None:
    """Take the turns from ``index`` on back out of ``session`` (commits are synchronous, so
    they are the one a failed commit just added). A history entry it overwrote (the very same
    conversation generated twice) is not restored: the next request that extends it starts a
    new branch instead of extending the older turn."""
    del session.turns[index:]
    session.history.forget(index)


T = TypeVar("T")
P = ParamSpec("P")

LIGHT_GROWTH_BYTES = 32 * 1024


def light_turn(session: Session, body_bytes: int | None) -> bool:
    """Whether preparing this request is cheap enough to do on the event loop: the session
    holds turns and the request body grew by less than :data:`LIGHT_GROWTH_BYTES` since the
    session's previous request, so (when it extends what is held, as an agent's next turn does)
    only a few new messages are rendered and tokenized. A first request, a shrunken body (a new
    branch, a compaction: a full render) or one of unknown size goes to the worker pool. The
    previous size is noted for the next request either way."""
    previous, session.last_body_bytes = session.last_body_bytes, body_bytes
    return (body_bytes is not None and previous is not None and bool(session.turns)
            and 0 <= body_bytes - previous < LIGHT_GROWTH_BYTES and body_bytes < offload.LARGE_BODY_BYTES)


OFF_LOOP_SUFFIX_CHARS = 512
OFF_LOOP_MIN_ANSWERING = 2   # requests being answered at once for the loop to count as busy


async def prepare_in_session(gateway: Gateway, session: Session, chat: ChatRequest, light: bool,
                             busy: bool = True) -> PreparedTurn:
    """``gateway.prepare`` holding the session's guard: a light turn (:func:`light_turn`) on the
    loop, as :func:`in_session` would, except that, when the loop is ``busy`` (other requests
    are being answered), the tokenization of its new suffix, when that is at least
    :data:`OFF_LOOP_SUFFIX_CHARS` long (a tool result, say), runs in the gateway's tokenizing
    thread after the guard is let go (``Gateway.encode_suffix_off_loop``): the tokenizer lets go
    of the GIL, so the loop serves the other requests meanwhile (on a second core) instead of
    waiting for it. (A request alone gains nothing from the thread hop, so it tokenizes right
    here.) A suffix tokenized off the loop gives the very ids it would on it; the held prefix
    was settled on the loop."""
    if light and session.guard.acquire(blocking=False):
        try:
            turn = gateway.prepare_staged(session, chat, defer_chars=OFF_LOOP_SUFFIX_CHARS if busy else None)
        finally:
            session.guard.release()
        if isinstance(turn, PendingTurn):
            turn = turn.complete(await gateway.encode_suffix_off_loop(turn.text))
        return turn
    return await offload.run(session.guarded(gateway.prepare), session, chat)


async def in_session(session: Session, here: bool, fn: Callable[P, T], *args: P.args, **kwargs: P.kwargs) -> T:
    """``fn(*args, **kwargs)`` holding the session's guard: right here on the loop when ``here`` and the
    guard is free at once (a worker thread may be busy with the session: then the loop does not
    wait for it), else in the worker pool."""
    if here and session.guard.acquire(blocking=False):
        try:
            return fn(*args, **kwargs)
        finally:
            session.guard.release()
    return await offload.run(session.guarded(fn), *args, **kwargs)


class TurnFlow:
    def __init__(self, gateway: Gateway, *, ping_interval_s: float = 5.0) -> None:
        self.gw = gateway
        self.ping_interval_s = ping_interval_s
        self.answering = 0   # requests in answer() now (their JSON replies not yet built)

    async def answer(self, request: Request, session: Session, chat: ChatRequest, out: WayOut, *,
                     started: float, after_commit: AfterCommit | None = None) -> Response:
        self.answering += 1
        try:
            return await self._answer(request, session, chat, out, started=started, after_commit=after_commit)
        finally:
            self.answering -= 1

    async def _answer(self, request: Request, session: Session, chat: ChatRequest, out: WayOut, *,
                      started: float, after_commit: AfterCommit | None) -> Response:
        if chat.notes:
            log.debug("%s request for session %s: %s", out.protocol, session.id, "; ".join(chat.notes))
        headers = reply_headers(session, chat)
        try:
            async with session.lock:  # in the session's order
                answered = replay.matching(session.last_answer, request)
                if answered is not None:   # an identical retry (gateway/replay.py)
                    session.check_open()
                    log.info("session %s: an identical retry of its last answered request; the reply is "
                             "sent again (nothing generated, nothing recorded)", session.id)
                    return replay.response(answered)
                light = light_turn(session, getattr(request.state, "body_bytes", None))
                turn = await prepare_in_session(self.gw, session, chat, light, busy=self.answering >= OFF_LOOP_MIN_ANSWERING)
        except Exception as exc:
            return self._error(out, exc, headers)
        if chat.stream:
            return StreamingResponse(self._stream(request, session, turn, out, started, after_commit, headers),
                                     media_type="text/event-stream", headers={**STREAM_HEADERS, **headers})
        try:
            outcome = await unless_disconnected(request, self.gw.generate(session, turn))
        except ClientGone:
            return Response(status_code=499)  # nobody is listening; nothing is recorded
        except Exception as exc:
            return self._error(out, exc, headers)
        content = json_bytes(out.body(outcome))
        if disconnected(request):
            return Response(status_code=499)
        try:
            record = await self._commit(session, outcome, out, started, after_commit,
                                        lambda: replay.remembered(request, 200, "application/json", headers, [content]))
        except NotRecorded as exc:
            return self._error(out, exc.error, headers)
        return Response(content, media_type="application/json",
                        headers={**headers, "server-timing": server_timing(record.timing)})

    @staticmethod
    def _error(out: WayOut, exc: BaseException, headers: dict[str, str]) -> Response:
        response = out.error(as_http_error(exc))
        response.headers.update(headers)
        return response

    async def _commit(self, session: Session, outcome: TurnOutcome, out: WayOut, started: float,
                      after_commit: AfterCommit | None, answer: Callable[[], replay.Answer | None]) -> TurnRecord:
        """Record the turn (off the loop, under the session's lock: its log line is fsynced),
        and with it ``answer()``, the session's last answered request (``gateway/replay.py``).
        If its turn log line cannot be written (disk full, I/O error), the turn is taken back
        out of the session too and :class:`NotRecorded` is raised: the client then gets an
        error instead of a reply the trajectory does not hold."""

        def commit() -> TurnRecord:
            index = len(session.turns)
            try:
                record = self.gw.commit(session, outcome, out.protocol, time.perf_counter() - started)
            except OSError as exc:
                forget_turn(session, index)
                raise NotRecorded(exc) from exc
            session.last_answer = answer()
            return record

        # With no turn log there is nothing to write: a few microseconds of bookkeeping, done here
        # at once when no worker thread holds the session (no await: nothing can interrupt it).
        # Else shielded: once begun, the record is written whole (or not at all) even if the
        # client goes away now.
        if self.gw.turn_log is None and session.guard.acquire(blocking=False):
            try:
                record = commit()
            finally:
                session.guard.release()
        else:
            record = await asyncio.shield(in_session(session, False, commit))
        if after_commit is not None:
            after_commit(session, record)
        return record

    async def _stream(self, request: Request, session: Session, turn: PreparedTurn, out: WayOut, started: float,
                      after_commit: AfterCommit | None, headers: dict[str, str]) -> AsyncIterator[bytes]:
        """If the client goes away, Starlette cancels this generator: the engine task is
        cancelled with it and nothing is recorded. What it sends but keep-alive pings is kept
        for an identical retry (``gateway/replay.py``)."""
        latest: list[Progress] = []
        wake = asyncio.Event()

        def heard(progress: Progress) -> None:
            latest[:] = [progress]
            wake.set()

        streams = getattr(out, "progress", None) is not None
        task = asyncio.ensure_future(self.gw.generate(session, turn, heard) if streams
                                     else self.gw.generate(session, turn))
        kept: list[bytes] = []
        try:
            for chunk in out.opening(turn):
                kept.append(chunk)
                yield chunk
            sent, last_write = Progress(), time.monotonic()
            while not task.done():
                woken = asyncio.ensure_future(wake.wait())
                try:
                    await asyncio.wait({task, woken}, timeout=max(0.0, last_write + self.ping_interval_s
                                                                 - time.monotonic()),
                                       return_when=asyncio.FIRST_COMPLETED)
                finally:
                    woken.cancel()
                wake.clear()
                chunks: list[bytes] = []
                if latest:
                    news, sent = advance(sent, latest.pop())
                    chunks = out.progress(news) if news else []
                    kept += chunks
                if not chunks and not task.done() and time.monotonic() >= last_write + self.ping_interval_s:
                    chunks = [out.keepalive()]
                for chunk in chunks:
                    yield chunk
                if chunks:
                    last_write = time.monotonic()
            try:
                outcome = task.result()
            except Exception as exc:
                yield out.stream_error(as_http_error(exc))
                return
            before, after = out.reply_events(outcome)
            for chunk in before:
                yield chunk
            kept += [*before, *after]
            try:
                await self._commit(session, outcome, out, started, after_commit, lambda: replay.remembered(
                    request, 200, "text/event-stream", {**STREAM_HEADERS, **headers}, kept))
            except NotRecorded as exc:
                yield out.stream_error(exc.error)  # instead of the last event: the reply is void
                return
            for chunk in after:
                yield chunk
        finally:
            if not task.done():
                task.cancel()
                with contextlib.suppress(BaseException):
                    # shielded: Starlette cancels this generator again at every await (anyio's
                    # level cancellation), and a cancellation reaching the engine task while it
                    # cleans up would leave its HTTP request to the engine open (vLLM would
                    # generate on for nobody)
                    await asyncio.shield(task)
