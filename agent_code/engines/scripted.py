"""An engine that replies from a JSONL script: deterministic, instant, no model.

One reply per line (blank lines and ``#`` lines are skipped), in either of two shapes:

* the raw completion, as the model would write it in the served chat template::

    {"text": "...", "session"?: "id", "finish_reason"?: "stop" | "length",
     "logprobs"?: [float, ...], "delay"?: seconds, "token_delay"?: seconds, "when"?: "substring"}

* the scripted *provider*'s shape (``agent-code --provider scripted --script``), an Anthropic
  assistant turn: a list of blocks, or ``{"content": [blocks], "stop_reason"?: ...}`` with the
  same optional ``session``, ``delay``, ``token_delay``, ``when`` and ``logprobs``. Blocks are ``text``,
  ``tool_use`` (``name`` and ``input``; an ``id`` is ignored — the gateway assigns the wire ids),
  ``thinking`` (its text is the reasoning) and ``redacted_thinking`` (dropped). The turn is
  written as completion text by the served chat template itself (the text the template
  renders for that assistant message after its generation prompt, up to its end-of-turn
  token), so the gateway's parsers read back the same text, reasoning and tool calls.
  ``stop_reason`` ``max_tokens`` is ``finish_reason: "length"``; any other is ``"stop"``.

  The two shapes cannot be confused: a ``text`` line is a completion, a list or a
  ``content`` line is a turn (both keys on one line is an error).

A request for session ``S`` takes the next unused line whose ``session`` is ``S`` (or, for a
rollout's unguessable key ``<task>.<k>.<random>``, whose ``session`` is ``<task>.<k>``); once those are
used up (or there are none) it takes the next unused line without a ``session``. Lines are
consumed once, in file order. Nothing left → :class:`ScriptExhausted`, which the gateway answers
with a plain, non-retryable 400 that says the script ran out.

A line with ``when`` is only for a request whose prompt (decoded) contains that text, and such
a request takes it before any other line: this is how a script answers a client's side
requests (Claude Code's title request, say: ``"when": "sentence-case title"``) wherever they
fall among the conversation's turns.

The text is tokenized with the served tokenizer (``renderer.encode``, so special-token strings
such as ``<tool_call>`` become their tokens) and closed with the template's end-of-turn token,
unless the line says ``"finish_reason": "length"`` (a reply cut off by the budget).
``logprobs`` gives the first logprobs; the ``k``-th emitted token (0-based) otherwise gets
``-(k + 1) / 1024``. Requests cut the reply to ``sampling.max_new_tokens`` (finish ``"length"``)
and at the token that completes a ``sampling.stop`` string (finish ``"stop"``, the string in
``meta["stop"]``) — the same stop semantics as the real engines here. ``delay`` makes the reply
wait (cancellably), for tests of timeouts and cancellation. ``token_delay`` paces the reply:
that many seconds per token, after ``delay``; ``stream`` hands out the tokens one by one at that
pace (``generate`` waits for all of them), for tests of streaming.
"""

from __future__ import annotations

import asyncio
from collections import deque
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any, AsyncIterator, Sequence

from agent_code.engines.base import EngineError, Generation, Piece
from agent_code.jsonl import read_jsonl
from agent_code.protocols.canonical import SamplingParams

if TYPE_CHECKING:
    from agent_code.render.template import Renderer

_FIELDS = {"text", "session", "finish_reason", "logprobs", "delay", "token_delay", "when"}
_TURN_FIELDS = {"content", "stop_reason", "session", "logprobs", "delay", "token_delay", "when"}
_BLOCK_TYPES = {"text", "tool_use", "thinking", "redacted_thinking"}
_STOP_REASONS = {"end_turn": "stop", "tool_use": "stop", "stop_sequence": "stop", "max_tokens": "length"}
_PROBE_PROMPT = [{"role": "user", "content": "agent-code scripted turn"}]


class ScriptError(EngineError, ValueError):
    """The script file is missing or malformed (reported with file:line)."""


class ScriptExhausted(EngineError):
    """No line of the script is left for a request. Not an engine outage, so not answered as one
    (Anthropic's 529 ``overloaded_error``, which Claude Code retries for minutes): a plain 400
    ``invalid_request_error`` in each protocol's own format, which no client retries — the
    Anthropic and OpenAI SDKs retry only 408, 409, 429 and 5xx. The OpenAI code is
    ``invalid_prompt`` because Codex retries a streamed ``response.failed`` whatever its code
    except a few, and that is its plain non-retryable request error."""

    status = 400
    kind = "invalid_request_error"
    code = "invalid_prompt"


@dataclass
class ScriptedReply:
    line: int
    text: str
    ids: list[int]              # text tokens + end-of-turn (unless finish_reason is "length")
    logprobs: list[float]       # same length as ids
    finish_reason: str
    session: str | None = None
    delay: float = 0.0
    when: str | None = None     # only for a prompt containing this text
    token_delay: float = 0.0    # seconds per token


def default_logprob(k: int) -> float:
    """The logprob the scripted engine reports for its ``k``-th emitted token (0-based)."""
    return -(k + 1) / 1024


class ScriptedEngine:
    name = "scripted"

    def __init__(self, path: str | Path, renderer: Renderer):
        self.path = Path(path)
        self.renderer = renderer
        self.replies = self._load()
        self._by_session: dict[str, deque[ScriptedReply]] = {}
        self._shared: deque[ScriptedReply] = deque()
        self._conditional: list[ScriptedReply] = []
        for reply in self.replies:
            if reply.when is not None:
                self._conditional.append(reply)
            elif reply.session is None:
                self._shared.append(reply)
            else:
                self._by_session.setdefault(reply.session, deque()).append(reply)
        self.used = 0

    def _load(self) -> list[ScriptedReply]:
        eot = list(self.renderer.end_of_turn_ids)
        return [self._reply(obj, number, where, eot)
                for number, where, obj in read_jsonl(self.path, ScriptError, "the engine script")]

    def _reply(self, obj: object, number: int, where: str, eot: list[int]) -> ScriptedReply:
        if isinstance(obj, list):     # the scripted provider's shape: just the blocks
            obj = {"content": obj}
        if not isinstance(obj, dict):
            raise ScriptError(f"{where}: each line must be a JSON object (or a list of content blocks), "
                              f"got {type(obj).__name__}")
        if "content" in obj:
            obj = self._turn_as_completion(obj, where)
        unknown = set(obj) - _FIELDS
        if unknown:
            raise ScriptError(f"{where}: unknown field(s) {sorted(unknown)}; allowed: {sorted(_FIELDS)}")
        text = obj.get("text")
        if not isinstance(text, str):
            raise ScriptError(f'{where}: "text" must be a string')
        session = obj.get("session")
        if session is not None and not isinstance(session, str):
            raise ScriptError(f'{where}: "session" must be a string')
        finish = obj.get("finish_reason", "stop")
        if finish not in ("stop", "length"):
            raise ScriptError(f'{where}: "finish_reason" must be "stop" or "length", got {finish!r}')
        delay, token_delay = obj.get("delay", 0), obj.get("token_delay", 0)
        for key, value in (("delay", delay), ("token_delay", token_delay)):
            if not isinstance(value, (int, float)) or isinstance(value, bool) or value < 0:
                raise ScriptError(f'{where}: "{key}" must be a number of seconds >= 0')
        when = obj.get("when")
        if when is not None and (not isinstance(when, str) or not when):
            raise ScriptError(f'{where}: "when" must be a non-empty string')
        ids = list(self.renderer.encode(text)) + (eot if finish == "stop" else [])
        given = obj.get("logprobs") or []
        if not isinstance(given, list) or not all(
                isinstance(x, (int, float)) and not isinstance(x, bool) for x in given):
            raise ScriptError(f'{where}: "logprobs" must be a list of numbers')
        if len(given) > len(ids):
            raise ScriptError(f'{where}: {len(given)} logprobs for {len(ids)} tokens')
        logprobs = [float(x) for x in given] + [default_logprob(k) for k in range(len(given), len(ids))]
        return ScriptedReply(number, text, ids, logprobs, finish, session, float(delay), when,
                             float(token_delay))

    def _turn_as_completion(self, obj: dict[str, Any], where: str) -> dict[str, Any]:
        """A line in the scripted provider's shape → the same line with ``text``: the completion
        the served chat template writes for that assistant turn."""
        if "text" in obj:
            raise ScriptError(f'{where}: a line has either "text" (a completion) or "content" (an assistant '
                              f'turn of blocks), not both')
        unknown = set(obj) - _TURN_FIELDS
        if unknown:
            raise ScriptError(f"{where}: unknown field(s) {sorted(unknown)} for a turn of blocks; "
                              f"allowed: {sorted(_TURN_FIELDS)}")
        blocks = obj["content"]
        if not isinstance(blocks, list) or not blocks:
            raise ScriptError(f'{where}: "content" must be a non-empty list of blocks')
        text, reasoning, calls = [], [], []
        for block in blocks:
            kind = block.get("type") if isinstance(block, dict) else None
            if kind not in _BLOCK_TYPES:
                raise ScriptError(f"{where}: unsupported block {kind!r} (expected one of {sorted(_BLOCK_TYPES)})")
            if kind == "text" and isinstance(block.get("text"), str):
                text.append(block["text"])
            elif kind == "thinking" and isinstance(block.get("thinking"), str):
                reasoning.append(block["thinking"])
            elif kind == "tool_use":
                name, arguments = block.get("name"), block.get("input", {})
                if not isinstance(name, str) or not name or not isinstance(arguments, dict):
                    raise ScriptError(f"{where}: a tool_use block needs a 'name' and an object 'input'")
                calls.append({"type": "function", "function": {"name": name, "arguments": arguments}})
            elif kind in ("text", "thinking"):
                raise ScriptError(f'{where}: a {kind} block needs a string "{kind}"')
        stop = obj.get("stop_reason") or "end_turn"
        if stop not in _STOP_REASONS:
            raise ScriptError(f'{where}: "stop_reason" must be one of {sorted(_STOP_REASONS)}, got {stop!r}')
        message: dict[str, Any] = {"role": "assistant", "content": "".join(text)}
        if reasoning:
            message["reasoning_content"] = "".join(reasoning)
        if calls:
            message["tool_calls"] = calls
        out = {k: v for k, v in obj.items() if k not in ("content", "stop_reason")}
        out["text"] = completion_text(self.renderer, message, where)
        out["finish_reason"] = _STOP_REASONS[stop]
        return out

    @property
    def remaining(self) -> int:
        return len(self._shared) + len(self._conditional) + sum(len(q) for q in self._by_session.values())

    def _matching(self, session_id: str | None, prompt_ids: Sequence[int]) -> ScriptedReply | None:
        if not self._conditional:
            return None
        text = self.renderer.decode(list(prompt_ids))
        for reply in self._conditional:
            if reply.when is not None and reply.when in text and (reply.session is None or session_id is not None and (
                    session_id == reply.session or session_id.rsplit(".", 1)[0] == reply.session)):
                self._conditional.remove(reply)
                return reply
        return None

    def _next(self, session_id: str | None, prompt_ids: Sequence[int] = ()) -> ScriptedReply:
        matched = self._matching(session_id, prompt_ids)
        if matched is not None:
            return matched
        own = self._by_session.get(session_id) if session_id is not None else None
        if not own and session_id is not None:   # a rollout's key: "<task>.<k>.<random>" matches "<task>.<k>"
            own = self._by_session.get(session_id.rsplit(".", 1)[0]) if "." in session_id else None
        if own:
            return own.popleft()
        if self._shared:
            return self._shared.popleft()
        who = f"session {session_id!r}" if session_id is not None else "a request without a session"
        raise ScriptExhausted(f"the engine script {self.path} ran out (exhausted): no line left for {who} "
                              f"({self.used} of {len(self.replies)} replies used); add lines for this request "
                              f"(a scripted engine answers each request with the next unused line)")

    async def generate(self, prompt_ids: Sequence[int], sampling: SamplingParams, *,
                       session_id: str | None = None) -> Generation:
        reply = await self._start(session_id, prompt_ids)
        generation = self._generation(reply, prompt_ids, sampling)
        if reply.token_delay:
            await asyncio.sleep(reply.token_delay * len(generation.output_ids))
        return generation

    async def stream(self, prompt_ids: Sequence[int], sampling: SamplingParams, *,
                     session_id: str | None = None) -> AsyncIterator[Piece | Generation]:
        """The reply's tokens one by one, ``token_delay`` apart, then its Generation."""
        reply = await self._start(session_id, prompt_ids)
        generation = self._generation(reply, prompt_ids, sampling)
        for k, token in enumerate(generation.output_ids):
            if reply.token_delay:
                await asyncio.sleep(reply.token_delay)
            yield Piece([token], [generation.logprobs[k]])
        yield generation

    async def _start(self, session_id: str | None, prompt_ids: Sequence[int]) -> ScriptedReply:
        reply = self._next(session_id, prompt_ids)
        self.used += 1
        if reply.delay:
            await asyncio.sleep(reply.delay)
        else:
            await asyncio.sleep(0)
        return reply

    def _generation(self, reply: ScriptedReply, prompt_ids: Sequence[int], sampling: SamplingParams) -> Generation:
        """The reply cut by the request's stop strings and token budget."""
        ids, logprobs, finish = list(reply.ids), list(reply.logprobs), reply.finish_reason
        meta: dict[str, Any] = {"script_line": reply.line}
        cut = _stop_cut(self.renderer, ids, sampling.stop)
        if cut is not None:
            end, stop = cut
            ids, logprobs, finish = ids[:end], logprobs[:end], "stop"
            meta["stop"] = stop
        if sampling.max_new_tokens is not None and len(ids) > sampling.max_new_tokens:
            end = max(0, sampling.max_new_tokens)
            ids, logprobs, finish = ids[:end], logprobs[:end], "length"
            meta.pop("stop", None)
        return Generation(output_ids=ids, logprobs=logprobs, finish_reason=finish,
                          prompt_tokens=len(prompt_ids), meta=meta)

    async def close(self) -> None:
        return None


def completion_text(renderer: Renderer, message: dict[str, Any], where: str = "") -> str:
    """What the served chat template writes for the assistant ``message`` after its generation
    prompt, up to (not including) its end-of-turn token: the completion a model following the
    template would have generated for that turn."""
    try:
        before = renderer.render_text(_PROBE_PROMPT, None, add_generation_prompt=True)
        full = renderer.render_text(_PROBE_PROMPT + [message], None, add_generation_prompt=False)
    except Exception as exc:
        raise ScriptError(f"{where}: the chat template cannot render this turn ({type(exc).__name__}: {exc}); "
                          f'write the completion as "text" instead') from None
    end = full.rfind(renderer.end_of_turn_text) if renderer.end_of_turn_text else -1
    if not full.startswith(before) or end < len(before):
        raise ScriptError(f"{where}: this chat template does not write an assistant turn after its generation "
                          f'prompt; write the completion as "text" instead')
    return full[len(before):end]


def _stop_cut(renderer: Renderer, ids: list[int], stops: Sequence[str]) -> tuple[int, str] | None:
    """(number of tokens through the one completing the earliest stop string, that string)."""
    stops = [s for s in stops or () if s]
    if not stops:
        return None
    def hit(end: int) -> str | None:
        text = renderer.decode(ids[:end])
        return min((s for s in stops if s in text), key=text.find, default=None)

    if hit(len(ids)) is None:
        return None
    low, high = 1, len(ids)  # "the first `end` tokens contain a stop string" only turns true once
    while low < high:
        mid = (low + high) // 2
        if hit(mid) is None:
            low = mid + 1
        else:
            high = mid
    found = hit(low)
    return (low, found) if found is not None else None
