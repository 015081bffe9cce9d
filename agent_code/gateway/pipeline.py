"""One model turn, independent of the wire protocol.

    canonical request → render (chat template → prompt ids) → engine (ids, logprobs)
    → decode → parse (reasoning, text, tool calls) → TurnOutcome

The HTTP layer translates the wire body into a :class:`ChatRequest` first and the
outcome back into the wire reply afterwards; it calls :meth:`Gateway.commit` only once
the reply reached the client, so an unanswered turn is never recorded.

``generate(..., progress=callback)`` streams: it reads the engine's pieces as they come
(:func:`agent_code.engines.base.stream_generation`) and calls ``callback`` with what of the reply
is already certain (:func:`agent_code.parse.incremental.certain` on the partial output); the
outcome, its ids, logprobs and parse, is the same as without a callback.
"""

from __future__ import annotations

import logging
import time
from dataclasses import dataclass, field, replace
from typing import TYPE_CHECKING, Any, Callable, Sequence

from agent_code.engines.base import Engine, EngineError, Generation, stream_generation
from agent_code.gateway.grammar import tool_call_grammar
from agent_code.gateway.offload import Batcher
from agent_code.gateway.sessions import Session, SessionStore
from agent_code.gateway.weights import WeightGate
from agent_code.parse import detect_parsers, parse_completion
from agent_code.parse.common import Declared, declared_tools
from agent_code.parse.incremental import Progress, certain
from agent_code.protocols.canonical import ChatRequest, ParsedReply, SamplingParams, ToolSchema
from agent_code.trajectory.history import POLICIES, PendingSuffix, PromptPlan, stage_prompt
from agent_code.trajectory.records import TurnRecord
from agent_code.trajectory.tokens import TokenSeq, as_ids

if TYPE_CHECKING:
    from agent_code.render.template import Renderer
    from agent_code.trajectory.samples import Sample
    from agent_code.trajectory.store import TurnLog

SAMPLING_KEYS = ("temperature", "top_p", "top_k", "seed", "max_new_tokens")


class RenderError(ValueError):
    """The chat template refused the conversation (a client error: 400)."""


@dataclass
class PreparedTurn:
    request: ChatRequest
    prompt_ids: TokenSeq               # shares the held ids (see PromptPlan)
    sampling: SamplingParams
    timing: dict[str, float]
    plan: PromptPlan | None = None


@dataclass
class PendingTurn:
    """A turn prepared all but its new suffix's ids (``Gateway.prepare_staged``): tokenize
    ``text`` with ``Gateway.encode_suffix``, then :meth:`complete` makes the PreparedTurn."""

    gateway: "Gateway"
    session: Session
    request: ChatRequest
    staged: PendingSuffix
    started: float

    @property
    def text(self) -> str:
        return self.staged.text

    def complete(self, suffix_ids: Sequence[int]) -> PreparedTurn:
        return self.gateway._prepared(self.session, self.request, self.staged.complete(suffix_ids), self.started)


@dataclass
class TurnOutcome:
    request: ChatRequest
    prompt_ids: TokenSeq
    generation: Generation
    reply: ParsedReply
    stop_sequence: str | None
    timing: dict[str, float] = field(default_factory=dict)
    plan: PromptPlan | None = None
    weight_version: str | None = None   # the weights that generated it

    @property
    def finish_reason(self) -> str:
        return self.generation.finish_reason


class Gateway:
    def __init__(self, engine: Engine, renderer: Renderer, *, model_name: str = "agent-code-local",
                 tool_parser: str | None = None, reasoning_parser: str | None = None,
                 store: SessionStore | None = None, default_max_tokens: int = 4096,
                 history_policy: str = "tokens", turn_log: TurnLog | None = None, reward_policy: str = "full",
                 tool_grammar: str = "auto", open_on_first_use: bool | None = None,
                 weight_version: str = "0") -> None:
        if history_policy not in POLICIES:
            raise ValueError(f"unknown history policy '{history_policy}' (choose from {', '.join(POLICIES)})")
        self.history_policy = history_policy
        self.turn_log = turn_log  # optional: appends each recorded turn durably
        self.reward_policy = reward_policy
        self.engine = engine
        self.renderer = renderer
        self.model_name = model_name
        detected_tool, detected_reasoning = detect_parsers(renderer.chat_template or "")
        self.tool_parser = tool_parser or detected_tool
        self.reasoning_parser = reasoning_parser or detected_reasoning
        self.store = store or SessionStore()
        if open_on_first_use is not None:   # False: serve only the sessions the orchestrator opened
            self.store.open_on_first_use = open_on_first_use
        self._persists_ends = turn_log is not None and hasattr(turn_log, "mark_ended")
        if turn_log is not None and self._persists_ends:
            # what ended before a restart stays ended: reload the tombstones, persist new ones
            self.store.ended |= turn_log.ended_ids()
        self.store.on_end = self._session_ended
        self.default_max_tokens = default_max_tokens
        if tool_grammar not in ("auto", "off"):
            raise ValueError(f"tool_grammar must be 'auto' or 'off', got {tool_grammar!r}")
        self.tool_grammar = tool_grammar
        self._suffix_batcher: Batcher[str, list[int]] | None = None   # made on first use (encode_suffix_off_loop)
        self._declared: tuple[list[ToolSchema] | None, Declared] | None = None   # the last tools list parsed against
        self.weights = WeightGate(weight_version)   # admission and the weight version (gateway/weights.py)

    def _session_ended(self, session_id: str, how: str) -> None:
        """A session was finished or deleted: an engine that routes by session forgets it (an
        engine pool's pin), and the turn log records the end."""
        forget = getattr(self.engine, "forget", None)
        if forget is not None:
            forget(session_id)
        if self._persists_ends:
            self._persist_end(session_id, how)

    def _persist_end(self, session_id: str, how: str) -> None:
        assert self.turn_log is not None   # called only where there is a turn log
        try:
            self.turn_log.mark_ended(session_id, how)
        except OSError as exc:   # the samples are written; the tombstone stays in memory
            import logging

            logging.getLogger("agent_code.gateway").error("session %r ended but %s could not be recorded: %s",
                                                          session_id, how, exc)

    # -- the turn ---------------------------------------------------------------------

    def render(self, request: ChatRequest) -> list[int]:
        try:
            return list(self.renderer.render(request.messages, request.tools))
        except Exception as exc:  # jinja raise_exception, bad roles, ...
            raise RenderError(f"the chat template rejected the conversation: {exc}") from None

    def plan(self, session: Session, request: ChatRequest) -> PromptPlan:
        """The prompt ids, reusing the session's held tokens where the history allows."""
        return self._completed(self.stage(session, request))

    def _completed(self, staged: PromptPlan | PendingSuffix) -> PromptPlan:
        """A staged plan with its suffix tokenized here (:meth:`encode_suffix`) when it has one."""
        return staged.complete(self.encode_suffix(staged.text)) if isinstance(staged, PendingSuffix) else staged

    def stage(self, session: Session, request: ChatRequest) -> PromptPlan | PendingSuffix:
        """:meth:`plan` but for the tokenization of a new suffix (see :class:`PendingSuffix`)."""
        try:
            return stage_prompt(self.renderer, session.turns, session.history, request.messages, request.tools,
                                self.history_policy)
        except Exception as exc:
            raise RenderError(f"the chat template rejected the conversation: {exc}") from None

    def encode_suffix(self, text: str) -> list[int]:
        """A :class:`PendingSuffix`'s ids."""
        try:
            return self.renderer.encode(text)
        except Exception as exc:
            raise RenderError(f"the chat template rejected the conversation: {exc}") from None

    async def encode_suffix_off_loop(self, text: str) -> list[int]:
        """:meth:`encode_suffix` in the gateway's tokenizing thread, batched with the other
        sessions' suffixes waiting then (:class:`agent_code.gateway.offload.Batcher`): the
        tokenizer's batch call lets go of the GIL, so the event loop serves other requests
        meanwhile, on another core. The same ids as :meth:`encode_suffix`."""
        if self._suffix_batcher is None:
            encode_many = getattr(self.renderer, "encode_many", None) or (
                lambda texts: [self.renderer.encode(t) for t in texts])
            self._suffix_batcher = Batcher(encode_many, name="gateway-tokenize")
        try:
            return await self._suffix_batcher(text)
        except Exception as exc:
            raise RenderError(f"the chat template rejected the conversation: {exc}") from None

    def sampling_for(self, session: Session, request: ChatRequest, prompt_len: int) -> SamplingParams:
        """The request's sampling, overridden by the session's (the trainer decides), then
        clamped to the session's cap on new tokens and to its context budget."""
        overrides = {k: v for k, v in session.sampling.items() if k in SAMPLING_KEYS and v is not None}
        sampling = replace(request.sampling, **overrides)
        if session.max_new_tokens is not None:
            sampling = replace(sampling, max_new_tokens=min(sampling.max_new_tokens, session.max_new_tokens))
        if session.max_context_tokens is not None:
            room = session.max_context_tokens - prompt_len
            sampling = replace(sampling, max_new_tokens=max(0, min(sampling.max_new_tokens, room)))
        return self.constrain(sampling, request)

    def constrain(self, sampling: SamplingParams, request: ChatRequest) -> SamplingParams:
        """With ``tool_grammar="auto"``, a request that declares tools gets a grammar allowing
        only plain text or Hermes calls to those tools (see :mod:`agent_code.gateway.grammar`),
        when the engine supports grammars and the template speaks Hermes. ``tool_choice``
        none: no grammar; any/tool: a call is required."""
        choice = request.tool_choice.get("type") if isinstance(request.tool_choice, dict) else None
        if (self.tool_grammar == "off" or not request.tools or choice == "none"
                or self.tool_parser != "hermes" or sampling.grammar or sampling.tool_grammar
                or not getattr(self.engine, "supports_grammar", False)):
            return sampling
        tools = request.tools
        if choice == "tool":
            tools = [t for t in tools if t.get("function", {}).get("name") == request.tool_choice.get("name")]
        try:
            grammar = tool_call_grammar(tools, require_call=choice in ("any", "tool"))
        except ValueError:  # no usable tool name: leave the turn unconstrained
            return sampling
        return replace(sampling, grammar=grammar)

    def prepare(self, session: Session, request: ChatRequest) -> "PreparedTurn":
        """Check the session, render the prompt and settle the sampling (no engine call)."""
        staged = self.prepare_staged(session, request, defer_chars=None)
        assert isinstance(staged, PreparedTurn)
        return staged

    def prepare_staged(self, session: Session, request: ChatRequest, *,
                       defer_chars: int | None) -> "PreparedTurn | PendingTurn":
        """:meth:`prepare`; with ``defer_chars``, a turn whose new suffix is at least that long
        comes back as a :class:`PendingTurn` instead, its tokenization left to the caller (who
        can run it off the event loop: ``TurnFlow``)."""
        session.check_open()
        t0 = time.perf_counter()
        staged = self.stage(session, request)
        if isinstance(staged, PendingSuffix) and defer_chars is not None and len(staged.text) >= defer_chars:
            return PendingTurn(self, session, request, staged, t0)
        return self._prepared(session, request, self._completed(staged), t0)

    def _prepared(self, session: Session, request: ChatRequest, plan: PromptPlan, t0: float) -> "PreparedTurn":
        sampling = self.sampling_for(session, request, len(plan.prompt_ids))
        return PreparedTurn(request, plan.prompt_ids, sampling, {"render": time.perf_counter() - t0}, plan)

    async def generate(self, session: Session, turn: "PreparedTurn",
                       progress: Callable[[Progress], None] | None = None) -> TurnOutcome:
        session.check_open()
        version = await self.weights.admit()   # waits (or is refused) while paused for a weight update
        session.in_flight += 1
        try:
            t1 = time.perf_counter()
            if turn.sampling.max_new_tokens <= 0:  # context budget exhausted: stop at once
                generation = Generation([], [], "length", prompt_tokens=len(turn.prompt_ids))
            elif progress is not None:
                generation = await self._streamed(session, turn, progress)
            else:
                generation = await self.engine.generate(as_ids(turn.prompt_ids), turn.sampling, session_id=session.id)
            t2 = time.perf_counter()
            reply, stop_sequence = self.parse(generation, turn.sampling, turn.request)
            t3 = time.perf_counter()
        finally:
            session.in_flight -= 1
            self.weights.release()
        timing = {**turn.timing, "engine": t2 - t1, "parse": t3 - t2}
        reported = generation.meta.get("weight_version")   # the engine's own word wins
        return TurnOutcome(turn.request, turn.prompt_ids, generation, reply, stop_sequence, timing, turn.plan,
                           str(reported) if reported is not None else version)

    async def _streamed(self, session: Session, turn: "PreparedTurn",
                        progress: Callable[[Progress], None]) -> Generation:
        """The engine's generation, read piece by piece; ``progress`` hears what is certain.
        Reading the partial output costs a decode and a parse of all of it, so it is done at
        most once per four times its own duration (a long reply is not re-read per token)."""
        ids: list[int] = []
        next_read = 0.0
        async for item in stream_generation(self.engine, as_ids(turn.prompt_ids), turn.sampling,
                                            session_id=session.id):
            if isinstance(item, Generation):
                return item
            ids.extend(item.output_ids)
            now = time.perf_counter()
            if now >= next_read:
                progress(self.certain(ids, turn.sampling, turn.request))
                next_read = now + 4 * (time.perf_counter() - now)
        raise EngineError(f"the engine {self.engine.name!r} ended its stream without a Generation")

    def certain(self, ids: Sequence[int], sampling: SamplingParams, request: ChatRequest) -> Progress:
        """What of the reply the partial output ``ids`` already settles (see :meth:`parse`)."""
        ids = list(ids)
        end = set(self.renderer.end_of_turn_ids)
        while ids and ids[-1] in end:
            ids.pop()
        text = self.renderer.decode(ids).rstrip("\ufffd")  # an incomplete UTF-8 character
        return certain(text, tool_parser=self.tool_parser, reasoning_parser=self.reasoning_parser,
                       tools=request.tools, stops=sampling.stop)

    async def run_turn(self, session: Session, request: ChatRequest) -> TurnOutcome:
        return await self.generate(session, self.prepare(session, request))

    def parse(self, generation: Generation, sampling: SamplingParams,
              request: ChatRequest) -> tuple[ParsedReply, str | None]:
        ids = list(generation.output_ids)
        end = set(self.renderer.end_of_turn_ids)
        while ids and ids[-1] in end:
            ids.pop()
        text = self.renderer.decode(ids)
        stop_sequence = None
        if generation.finish_reason == "stop":
            stop_sequence = next((s for s in sampling.stop if s and text.endswith(s)), None)
            if stop_sequence:
                text = text[: -len(stop_sequence)]
        reply = parse_completion(text, tool_parser=self.tool_parser, reasoning_parser=self.reasoning_parser,
                                 tools=request.tools, declared=self._declared_tools(request.tools))
        return reply, stop_sequence

    def _declared_tools(self, tools: list[ToolSchema] | None) -> Declared:
        """``declared_tools(tools)``, found once per tools list: the translations hand every request
        of a session, and the sessions that declare the same tools, the same list, which no one
        changes in place (``trajectory/history.py`` keys its facts of tools lists the same way)."""
        held = self._declared
        if held is not None and held[0] is tools:
            return held[1]
        declared = declared_tools(tools)
        self._declared = (tools, declared)
        return declared

    def finish_session(self, session_id: str, reward: float | None = None,
                       metadata: dict[str, Any] | None = None, rollout_id: str | None = None,
                       status: str | None = None) -> list[Sample]:
        """Close the session and return its samples (also written under the trajectory dir).
        ``status`` (e.g. ``"aborted"`` for a rollout cut off at its budget) overrides every
        sample's own status. The session closes only once its samples are written: if the write
        fails (disk full) it stays open and finishing it again, once there is room, succeeds."""
        from agent_code.trajectory.samples import build_samples

        session = self.store.unfinished(session_id)
        samples = build_samples(session.turns, reward=reward, rollout_id=rollout_id,
                                reward_policy=self.reward_policy, metadata=metadata, decode=self.renderer.decode,
                                status_override=status)
        if self.turn_log is not None:
            from agent_code.trajectory.store import write_samples

            write_samples(samples, self.turn_log.directory)
        self.store.close(session_id)
        return samples

    def commit(self, session: Session, outcome: TurnOutcome, protocol: str, total_s: float) -> TurnRecord:
        """Record the turn; called once the reply has reached the client.

        A turn that extends a held one (``tokens`` policy) shares its parent's message and tool
        objects for the part of the history they stand for (equal by the history's digests), so
        a session holds its system prompt, tools and earlier messages once, not once per turn."""
        g = outcome.generation
        plan = outcome.plan
        messages, tools = outcome.request.messages, outcome.request.tools
        if plan is not None and plan.parent is not None and plan.held_messages:
            parent = session.turns[plan.parent]
            messages = [*parent.messages, parent.reply, *messages[plan.held_messages:]]
            tools = parent.tools
        record = TurnRecord.build(
            session_id=session.id, index=len(session.turns), messages=messages,
            tools=tools, prompt_ids=outcome.prompt_ids, output_ids=g.output_ids,
            logprobs=g.logprobs, finish_reason=g.finish_reason, reply=outcome.reply.as_message(),
            ill_formed=list(outcome.reply.ill_formed), protocol=protocol,
            timing={**outcome.timing, "total": total_s},
        )
        record.weight_version = outcome.weight_version
        cached = g.meta.get("cached_tokens")
        if type(cached) is int and cached >= 0:
            record.cached_tokens = cached
        if plan is not None:
            record.parent, record.policy, record.prefix_reused = plan.parent, plan.policy, plan.prefix_reused
            record.drift, record.branch_hint = list(plan.drift), plan.branch_hint
            record.notes = list(plan.notes)
            for note in plan.notes:
                logging.getLogger("agent_code.gateway").info("session %s turn %d: the client echoed turn %d's %s call rewritten (%s); "
                         "the held ids were kept", session.id, record.index, note["turn"], note["tool"],
                         "; ".join(note["rewrites"]) or "no known rewrite")
        session.turns.append(record)
        shared = plan if plan is not None and plan.parent is not None and plan.held_messages > 0 else None
        session.history.add(record, plan.messages_key if plan is not None else None,
                             (shared.held_messages - 1, outcome.request.messages[shared.held_messages - 1])
                             if shared is not None else None)
        if self.turn_log is not None:
            parent_record = session.turns[record.parent] if record.parent is not None else None
            self.turn_log.append(record, parent_record)
        return record
