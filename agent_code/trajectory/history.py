"""How a turn's prompt is built from the session's history: by tokens, or by template.

Agent CLIs resend the whole conversation as strings every turn. Re-rendering and
re-tokenizing it (the ``template`` policy, the known design) costs time proportional to
the history and can silently change tokens the model sampled (templates that strip
earlier reasoning, tokenizers that merge across a boundary differently).

The ``tokens`` policy (default) avoids both. Every recorded turn is indexed by its
canonical conversation (prompt messages + the parsed reply, under the same tools).
When a request's history contains such a conversation as a prefix, the prompt is

    parent.prompt_ids + parent.output_ids   (held: exactly what was rendered and sampled)
    + ids of the new suffix                 (tool results, new user text, generation prompt)

and only the suffix is rendered and tokenized. The suffix text comes from the chat
template itself: the template renders a stand-in of the held reply (a marker as its
content, the same tool calls) followed by the new messages, and everything after the
stand-in's end-of-turn token is the suffix. So the template still decides every token
it owns, the held ids are never re-tokenized, and the next prompt extends the held
sequence exactly: zero drift by construction.

Under ``template`` the full conversation is rendered; the prompt is then compared with
the held sequences: a clean extension, a divergence inside the last response
(``realigned``: those sampled tokens are masked out of training), or no common
prefix at all (``fork``: a new sample starts). Each case is logged as a drift event.

A request that matches nothing starts a new root; ``branch_hint`` says why it may have
(a different system prompt: a sub-agent; the same one: a compaction or a restart; the
same messages as an earlier root: a retry). Under ``template``, a realigned turn starts a
``template-drift`` branch: turns that extended the old rendering stay on their own chain.
"""

from __future__ import annotations

import hashlib
import json
import threading
from array import array
from collections import OrderedDict
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, Sequence

from agent_code.protocols.canonical import ToolSchema
from agent_code.protocols.jsontypes import JsonPath, same_scalar_types, scalar_paths
from agent_code.trajectory import echo, side
from agent_code.trajectory.records import TurnRecord
from agent_code.trajectory.tokens import TokenSeq

if TYPE_CHECKING:
    from agent_code.render.template import Renderer

POLICIES = ("tokens", "template")
Tools = list[ToolSchema] | None   # a request's tools (canonical: OpenAI function form)
HELD_MARKER = "\u27e6agent-code:held-reply\u27e7"
_SUFFIX_PROBE_USER = {"role": "user", "content": "."}


class SuffixRenderError(ValueError):
    """The template's output could not be split at the held reply (fallback: full render)."""


def _digest(previous: bytes, item: object) -> bytes:
    blob = json.dumps(item, sort_keys=True, ensure_ascii=False, separators=(",", ":"), default=str)
    return hashlib.sha256(previous + blob.encode("utf-8", "surrogatepass")).digest()


def _key_chain(messages: Sequence[dict[str, Any]], tools: Tools) -> list[bytes]:
    """``chain[j]`` identifies ``messages[:j]`` under ``tools`` (``chain[0]``: no message yet).
    Assistant messages count in their echo form (``echo.py``): a tool call a client echoes back
    rewritten in a way it is known to (a default filled in, ...) is the call the model made."""
    chain = [_tools_digest(tools)]
    tool_schemas = echo.schemas(tools) if any(m.get("tool_calls") for m in messages) else {}
    for message in messages:
        chain.append(_digest(chain[-1], echo.echo_form(message, tool_schemas)))
    return chain


# the facts of tools lists, across sessions: the translation hands every session that declares
# the same tools the same list (protocols/anthropic.py), whose facts — where it holds a number,
# bool or null and of which type, its echo schemas, the digest of its ~70 kB of JSON — are then
# found once
_SHARED_TOOLS: dict[int, tuple[Tools, list[tuple[JsonPath, type]], echo.Schemas, bytes]] = {}


def _tools_entry(tools: Tools) -> tuple[Tools, list[tuple[JsonPath, type]], echo.Schemas, bytes]:
    held = _SHARED_TOOLS.get(id(tools))
    if held is None or held[0] is not tools:
        held = (tools, scalar_paths(tools), echo.schemas(tools), _digest(b"tools", tools or []))
        if len(_SHARED_TOOLS) >= 64:
            _SHARED_TOOLS.clear()
        _SHARED_TOOLS[id(tools)] = held
    return held


def _tools_digest(tools: Tools) -> bytes:
    return _tools_entry(tools)[3] if tools else _digest(b"tools", [])


def prefix_keys(messages: Sequence[dict[str, Any]], tools: Tools) -> list[bytes]:
    """``keys[j]`` identifies ``messages[:j + 1]`` under ``tools``."""
    return _key_chain(messages, tools)[1:]


def conversation_key(turn: TurnRecord, messages_key: bytes | None = None, tool_schemas: echo.Schemas | None = None) -> bytes:
    """The key of the turn's prompt messages followed by its reply. ``messages_key``, the
    key of ``turn.messages`` under ``turn.tools`` when the caller already has it (a
    :class:`PromptPlan` does), saves hashing the whole history again; ``tool_schemas``,
    ``echo.schemas(turn.tools)`` when the caller has them."""
    if messages_key is None:
        messages_key = _key_chain(turn.messages, turn.tools)[-1]
    if turn.reply.get("tool_calls"):
        reply = echo.echo_form(turn.reply, echo.schemas(turn.tools) if tool_schemas is None else tool_schemas)
    else:
        reply = echo.echo_form(turn.reply, {})
    return _digest(messages_key, reply)


@dataclass
class PromptPlan:
    """The prompt of a turn and how it came about. ``prompt_ids`` is a :class:`TokenSeq`: a
    held prefix is shared with the turn that holds it, never copied."""

    prompt_ids: TokenSeq
    parent: int | None = None
    prefix_reused: int = 0
    policy: str = "tokens"
    drift: list[dict[str, Any]] = field(default_factory=list)
    branch_hint: str | None = None
    messages_key: bytes | None = field(default=None, repr=False)  # the request messages' key, when computed
    held_messages: int = 0  # how many leading request messages the parent's held ids stand for
    notes: list[dict[str, Any]] = field(default_factory=list)   # client rewrites tolerated (echo.py)


class SessionHistory:
    """The per-session index from canonical conversations to the turns that produced them.

    :meth:`lookup` finds the longest held conversation a request's messages start with. The
    common case — a request that extends a held turn with its messages echoed as they were —
    costs no more than the new messages: the held turns' own message lists are compared with
    the request's (``==`` in C, then the tool-call arguments type by type, which ``==`` alone
    would let pass as ``1 == 1.0 == True``), and the request's key is the held turn's key
    extended by the new messages' digests. Anything else (a client that echoed a call
    rewritten, a turn not found that way) goes through the digest of every message: the same
    answer, at a cost that grows with the history."""

    def __init__(self) -> None:
        self.by_key: dict[bytes, int] = {}
        self.key_of: dict[int, bytes] = {}                     # turn index -> its conversation key
        # turn index -> ((position, message) where its request showed its parent's reply rewritten,
        # or None; the nearest earlier turn of its chain with an entry, or None): a chain's rewrites,
        # each kept once (every turn of a client that drops the reasoning has one)
        self.echoes: dict[int, tuple[tuple[int, dict[str, Any]] | None, int | None]] = {}
        # id(held tools) -> (those tools, facts); id(held message) -> (that message, its calls' scalars)
        self._calls: dict[int, tuple[dict[str, Any], list[tuple[JsonPath, type]]]] = {}

    def add(self, turn: TurnRecord, messages_key: bytes | None = None,
            echoed: tuple[int, dict[str, Any]] | None = None) -> None:
        """Index ``turn`` (``messages_key``: see :func:`conversation_key`). ``echoed``, for a
        turn whose messages share its parent's (``Gateway.commit``): the position of the
        parent's reply in ``turn.messages`` and the message the request showed there, kept
        where the client rewrote the reply (with the parent's own such rewrites)."""
        key = conversation_key(turn, messages_key, self._tools_facts(turn.tools)[1])
        self.by_key[key] = turn.index
        self.key_of[turn.index] = key
        self.echoes.pop(turn.index, None)
        if echoed is None or turn.parent is None:
            return
        position, message = echoed
        held = turn.messages[position] if 0 <= position < len(turn.messages) else None
        own = (position, message) if held is None or message != held or not self._same_call_types(message, held) \
            else None
        earlier = turn.parent if turn.parent in self.echoes else None
        if own is not None or earlier is not None:
            self.echoes[turn.index] = (own, earlier)

    def forget(self, index: int) -> None:
        """Drop the turns from ``index`` on (a commit that failed: turn_flow.forget_turn)."""
        for key in [k for k, v in self.by_key.items() if v >= index]:
            del self.by_key[key]
        for i in [i for i in self.key_of if i >= index]:
            del self.key_of[i]
            self.echoes.pop(i, None)

    def find_parent(self, messages: Sequence[dict[str, Any]], tools: Tools) -> tuple[int, int] | None:
        """(turn index, number of messages it covers) for the longest held prefix."""
        return self.lookup(messages, tools)[0]

    def lookup(self, messages: Sequence[dict[str, Any]], tools: Tools,
               turns: Sequence[TurnRecord] = ()) -> tuple[tuple[int, int] | None, bytes]:
        """:meth:`find_parent`'s answer, and the key of all of ``messages``. ``turns``, the
        session's records, allow the cheap path of the class doc."""
        if turns:
            found = self._extends(messages, tools, turns)
            if found is not None:
                return found
        chain = _key_chain(messages, tools)
        for j in range(len(messages) - 1, 0, -1):  # a held prefix always ends with an assistant reply
            if messages[j - 1].get("role") == "assistant" and chain[j] in self.by_key:
                index = self._as_echoed(chain[j], messages, j, turns)
                if index is not None:
                    return (index, j), chain[-1]
        return None, chain[-1]

    def _as_echoed(self, key: bytes, messages: Sequence[dict[str, Any]], j: int,
                   turns: Sequence[TurnRecord]) -> int | None:
        """The held turn whose conversation is ``messages[:j]`` (of key ``key``), each assistant
        message's reasoning left out or shown exactly as held (``echo.reasoning_echo_ok``): the
        latest such turn (replies that differ in their reasoning alone share a key). Without
        ``turns`` (no records to compare with), the latest turn of that key."""
        latest = self.by_key[key]
        shown = [i for i in range(j) if echo.REASONING in messages[i] and messages[i].get("role") == "assistant"]
        if not turns or not shown:
            return latest

        def agrees(index: int) -> bool:
            held = [*turns[index].messages, turns[index].reply]
            return all(echo.reasoning_echo_ok(messages[i], held[i]) for i in shown)

        if agrees(latest):
            return latest
        others = sorted((i for i, k in self.key_of.items() if k == key and i != latest), reverse=True)
        return next((i for i in others if agrees(i)), None)

    def _extends(self, messages: Sequence[dict[str, Any]], tools: Tools,
                 turns: Sequence[TurnRecord]) -> tuple[tuple[int, int], bytes] | None:
        """The held turn with the longest conversation that fits, when ``messages`` repeat it
        as the client last showed it (and the key of all of ``messages``); None — the digest
        path decides — as soon as that turn is not it."""
        total = len(messages)
        turn = max((t for t in turns if t.index in self.key_of and len(t.messages) + 1 < total),
                   key=lambda t: (len(t.messages), t.index), default=None)
        if turn is None:
            return None
        n = len(turn.messages) + 1
        held_tools = turn.tools
        facts = self._tools_facts(held_tools)
        if not (tools is held_tools or (tools == held_tools and same_scalar_types(tools, facts[0]))):
            return None   # equal as JSON, types included: then their digests are equal too
        tool_schemas = facts[1]   # the held tools' (the request's are the same)
        last = messages[n - 1]
        if last != turn.reply or not self._same_call_types(last, turn.reply):
            # a client's known rewrite of the call (echo.py) is the call the model made
            if last.get("role") != "assistant":
                return None
            if _digest(b"", echo.echo_form(last, tool_schemas)) != _digest(b"", echo.echo_form(turn.reply, tool_schemas)):
                return None
            if not echo.reasoning_echo_ok(last, turn.reply):
                return None
        view = self._view(turn)
        if messages[:n - 1] != view or not all(a is b or self._same_call_types(a, b) for a, b in zip(messages, view)):
            return None
        key = self.key_of[turn.index]
        for message in messages[n:]:
            key = _digest(key, echo.echo_form(message, tool_schemas))
        return (turn.index, n), key

    def _tools_facts(self, tools: Tools) -> tuple[list[tuple[JsonPath, type]], echo.Schemas]:
        """For a held tools list (kept per object): where it holds a number, bool or null and of
        which type, and its echo schemas."""
        held = _tools_entry(tools)
        return held[1], held[2]

    def _same_call_types(self, message: dict[str, Any], held: dict[str, Any]) -> bool:
        """:func:`_same_calls` for a ``message == held``, where ``held`` is a held message: its
        tool calls' number, bool and null places are found once (kept per message object), and
        only those are compared, so an agent's long history costs no walk of every earlier call."""
        calls = held.get("tool_calls")
        if not calls:
            return True
        facts = self._calls.get(id(held))
        if facts is None or facts[0] is not held:
            facts = self._calls[id(held)] = (held, scalar_paths(calls))
        return not facts[1] or same_scalar_types(message["tool_calls"], facts[1])

    def _view(self, turn: TurnRecord) -> list[dict[str, Any]]:
        """``turn.messages`` as its client sent them: the canonical replies they hold replaced
        where the client echoed one rewritten."""
        if turn.index not in self.echoes:
            return turn.messages
        view = list(turn.messages)
        index: int | None = turn.index
        while index is not None:
            own, index = self.echoes[index]
            if own is not None and own[0] < len(view):
                view[own[0]] = own[1]
        return view


def _same_calls(a: dict[str, Any], b: dict[str, Any]) -> bool:
    """Two messages that are ``==`` also have tool-call arguments of the same JSON types."""
    calls = b.get("tool_calls")
    if not calls:
        return True
    return _strictly_equal(a.get("tool_calls"), calls)


def _strictly_equal(a: object, b: object) -> bool:
    """``a == b`` with JSON's types kept apart (``True``, ``1`` and ``1.0`` differ)."""
    if type(a) is not type(b):
        return False
    if isinstance(a, dict) and isinstance(b, dict):
        return a.keys() == b.keys() and all(_strictly_equal(v, b[k]) for k, v in a.items())
    if isinstance(a, list) and isinstance(b, list):
        return len(a) == len(b) and all(_strictly_equal(x, y) for x, y in zip(a, b))
    return a == b


def render_suffix(renderer: Renderer, held_reply: dict[str, Any], suffix: list[dict[str, Any]], tools: Tools,
                  held_ends_with_eot: bool) -> list[int]:
    """Ids the template puts after a held reply: the new messages and the generation prompt."""
    return renderer.encode(suffix_text(renderer, held_reply, suffix, tools, held_ends_with_eot))


def suffix_text(renderer: Renderer, held_reply: dict[str, Any], suffix: list[dict[str, Any]], tools: Tools,
                held_ends_with_eot: bool) -> str:
    """The text :func:`render_suffix` tokenizes."""
    stand_in = {"role": "assistant", "content": HELD_MARKER}
    if held_reply.get("tool_calls"):
        stand_in["tool_calls"] = held_reply["tool_calls"]
    if tools and not tools_shape_the_tail(renderer):
        tools = None  # the template renders them before the held reply only: not rendered again per turn
    text = renderer.render_text([_SUFFIX_PROBE_USER, stand_in, *suffix], tools)
    at = text.find(HELD_MARKER)
    eot = renderer.end_of_turn_text
    end = text.find(eot, at) if at >= 0 and eot else -1
    if end < 0:
        raise SuffixRenderError("the template's rendering has no end of turn after the held reply")
    tail = text[end + len(eot):]
    return tail if held_ends_with_eot else eot + tail


_TAIL_PROBES: dict[int, tuple[Renderer, bool]] = {}
_PROBE_TOOLS = [{"type": "function", "function": {
    "name": "read_file", "description": "Read a file.",
    "parameters": {"type": "object", "properties": {"path": {"type": "string"}}, "required": ["path"]}}},
    {"type": "function", "function": {"name": "python", "description": "Run code.", "parameters": {
        "type": "object", "properties": {"code": {"type": "string"}}}}}]


def tools_shape_the_tail(renderer: Renderer) -> bool:
    """Whether the chat template renders anything after the conversation's start differently
    when tools are declared (measured once per renderer on probe conversations: tool calls,
    tool results, user text, reasoning). When it does not — every template we serve renders
    tools only in the system or first user block — a turn's suffix is rendered without the
    tools, which spares serialising the whole tools block again every turn."""
    held = _TAIL_PROBES.get(id(renderer))
    if held is not None and held[0] is renderer:
        return held[1]
    call = {"type": "function", "function": {"name": "read_file", "arguments": {"path": "a.py"}}}
    probes: list[list[dict[str, Any]]] = [
        [{"role": "tool", "content": "x = 1"}, {"role": "user", "content": "Go on."}],
        [{"role": "tool", "content": "one"}, {"role": "tool", "content": "two"}],
        [{"role": "user", "content": "Next."}, {"role": "assistant", "content": "Done.", "tool_calls": [call]},
         {"role": "tool", "content": "ok"}],
        [{"role": "user", "content": "Why?"}, {"role": "assistant", "content": "Because.",
                                                "reasoning_content": "think"}, {"role": "user", "content": "So?"}],
    ]
    shaped = False
    for suffix in probes:
        for stand_in in ({"role": "assistant", "content": HELD_MARKER},
                         {"role": "assistant", "content": HELD_MARKER, "tool_calls": [call]}):
            try:
                texts = [renderer.render_text([_SUFFIX_PROBE_USER, stand_in, *suffix], tools)
                         for tools in (_PROBE_TOOLS, None)]
            except Exception:  # a template that refuses a probe: keep rendering the tools
                shaped = True
                break
            tails = [t[t.find(HELD_MARKER):] if HELD_MARKER in t else None for t in texts]
            if tails[0] is None or tails[0] != tails[1]:
                shaped = True
        if shaped:
            break
    _TAIL_PROBES[id(renderer)] = (renderer, shaped)
    return shaped


@dataclass
class PendingSuffix:
    """A ``tokens`` plan that extends a held turn, all but its new suffix's ids: ``text`` (the
    suffix :func:`render_suffix` tokenizes) is still to be tokenized, and :meth:`complete`
    then makes the plan. Tokenizing is the one long step of such a turn, and the tokenizer's
    batch call lets go of the GIL: a gateway can run it off its event loop (see
    ``Gateway.prepare``)."""

    text: str
    parent: TurnRecord
    held: TokenSeq
    key: bytes
    held_messages: int
    notes: list[dict[str, Any]]

    def complete(self, suffix_ids: Sequence[int]) -> PromptPlan:
        return PromptPlan(self.held.extend(suffix_ids), parent=self.parent.index, prefix_reused=len(self.held),
                          messages_key=self.key, held_messages=self.held_messages, notes=self.notes)


def plan_prompt(renderer: Renderer, turns: Sequence[TurnRecord], history: SessionHistory,
                messages: list[dict[str, Any]], tools: Tools, policy: str = "tokens") -> PromptPlan:
    staged = stage_prompt(renderer, turns, history, messages, tools, policy)
    return staged.complete(renderer.encode(staged.text)) if isinstance(staged, PendingSuffix) else staged


def stage_prompt(renderer: Renderer, turns: Sequence[TurnRecord], history: SessionHistory,
                 messages: list[dict[str, Any]], tools: Tools, policy: str = "tokens") -> PromptPlan | PendingSuffix:
    """:func:`plan_prompt` up to its last step: a request that extends a held turn comes back as
    a :class:`PendingSuffix` (its suffix rendered, not yet tokenized), any other as its plan."""
    if policy == "tokens":
        found, key = history.lookup(messages, tools, turns)
        if found is not None:
            parent = turns[found[0]]
            held = parent.held()  # shared, never copied
            ends_with_eot = bool(parent.output_ids) and parent.output_ids[-1] in set(renderer.end_of_turn_ids)
            try:
                text = suffix_text(renderer, parent.reply, messages[found[1]:], tools, ends_with_eot)
            except SuffixRenderError as exc:
                plan = _template_plan(renderer, turns, messages, tools)
                plan.drift.append({"kind": "fallback", "cause": str(exc), "masked": 0})
                plan.messages_key = key
                return plan
            echoed = messages[found[1] - 1]
            notes = [] if echoed == parent.reply else echo.differences(
                parent.reply, echoed, echo.schemas(tools), parent.index)
            return PendingSuffix(text, parent, held, key, found[1], notes)
        plan = PromptPlan(_ROOT_PROMPTS.prompt(renderer, messages, tools), messages_key=key)
        plan.branch_hint = _root_hint(turns, messages, tools)
        return plan
    if policy == "template":
        return _template_plan(renderer, turns, messages, tools)
    raise ValueError(f"unknown history policy '{policy}' (choose from {', '.join(POLICIES)})")


class _RootPrompts:
    """The prompts of recent root turns, by the exact request that rendered them: the sessions
    of a rollout group, and retries, open with the same request (a ~20k-token system prompt and
    tools block, ~1 ms to render and look up every time). An entry is used only for the same
    renderer, the very same tools list object (the translation shares one across sessions
    that declare equal tools) and messages whose JSON text is the same, key order and number
    types included: a pure function's same input. It relies on what the gateway hands it:
    canonical messages of plain JSON values (dicts, lists, strings, numbers, bools, null: their
    JSON text tells them apart; a tuple would read as a list) and tools lists that no one changes
    in place (the translations build new ones). A template that reads the clock
    (``strftime_now``: today's date in the system block) is no pure function: its prompts are
    rendered every time. The prompt is a :class:`TokenSeq`, which no one changes, shared by the
    sessions that use it (so a session can tell from the time its first turn takes whether
    another one opened with the very same request: docs/security.md)."""

    def __init__(self, size: int = 32) -> None:
        self.size = size
        self._kept: OrderedDict[tuple[int, int, str], tuple[Renderer, Tools, TokenSeq]] = OrderedDict()
        self._lock = threading.Lock()

    def prompt(self, renderer: Renderer, messages: list[dict[str, Any]], tools: Tools) -> TokenSeq:
        if "strftime_now" in (renderer.chat_template or ""):
            return TokenSeq(renderer.render(messages, tools))
        try:
            text = json.dumps(messages, ensure_ascii=False, separators=(",", ":"), allow_nan=False)
        except (TypeError, ValueError):   # not plain JSON: rendered every time
            return TokenSeq(renderer.render(messages, tools))
        key = (id(renderer), id(tools), text)
        with self._lock:
            held = self._kept.get(key)
            if held is not None and held[0] is renderer and held[1] is tools:
                self._kept.move_to_end(key)
                return held[2]
        prompt = TokenSeq(renderer.render(messages, tools))
        with self._lock:
            self._kept[key] = (renderer, tools, prompt)
            while len(self._kept) > self.size:
                self._kept.popitem(last=False)
        return prompt


_ROOT_PROMPTS = _RootPrompts()


def _root_hint(turns: Sequence[TurnRecord], messages: list[dict[str, Any]], tools: Tools) -> str | None:
    """Why a request that extends no held turn starts a root: a client's ``side`` request, or
    (measured against the conversation's first root, side requests aside) a ``retry``,
    ``sub-agent`` or ``compaction``; None for the conversation's first root."""
    roots = [t for t in turns if t.parent is None]
    if side.is_side(messages, tools, (side.system_of(t.messages) for t in roots if t.tools)):
        return "side"
    roots = [t for t in roots if t.index not in side.side_roots(roots)]
    if not roots:
        return None
    if any(t.messages == messages for t in roots):
        return "retry"
    return "compaction" if side.same_agent(messages, tools, roots[0].messages, roots[0].tools) else "sub-agent"


def _template_plan(renderer: Renderer, turns: Sequence[TurnRecord], messages: list[dict[str, Any]],
                   tools: Tools) -> PromptPlan:
    """Full re-render, then classify how it relates to what the session already holds."""
    ids = array("i", renderer.render(messages, tools))
    plan = PromptPlan(TokenSeq(ids), policy="template")
    best: TurnRecord | None = None
    for turn in turns:  # the longest held prompt that this prompt starts with
        n = len(turn.prompt_ids)
        if n <= len(ids) and (best is None or n > len(best.prompt_ids)) and ids[:n] == turn.prompt_ids:
            best = turn
    if best is None:
        if turns:
            plan.drift.append({"kind": "fork", "cause": "no held prompt is a prefix of this one", "masked": 0})
            plan.branch_hint = _root_hint(turns, messages, tools)
        return plan
    start, out = len(best.prompt_ids), best.output_ids.tolist()
    region = ids[start:start + len(out)]
    agree = next((i for i, (a, b) in enumerate(zip(region, out)) if a != b), min(len(region), len(out)))
    plan.parent, plan.prefix_reused = best.index, start + agree
    plan.prompt_ids = best.held().extend(ids[start + agree:], start + agree)  # shares what agrees
    if agree < len(out):
        plan.branch_hint = "template-drift"  # later turns of the old chain no longer extend this one
        cause = f"the template re-rendered turn {best.index}'s output differently from token {agree} of {len(out)}"
        echoed = messages[len(best.messages)] if len(messages) > len(best.messages) else None
        rewrites = echo.differences(best.reply, echoed, echo.schemas(tools), best.index) \
            if isinstance(echoed, dict) and echoed.get("role") == "assistant" and echoed != best.reply else []
        if rewrites:
            cause += ": the client echoed its tool call rewritten (" + "; ".join(
                sorted({r for note in rewrites for r in note["rewrites"]}) or ["not a known rewrite"]) + ")"
        plan.drift.append({"kind": "realigned", "turn": best.index, "masked": len(out) - agree, "cause": cause})
    return plan
