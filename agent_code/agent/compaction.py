"""Context compaction: older turns become a summary, recent turns stay verbatim, and every
``tool_use`` keeps its ``tool_result``.

The API rejects a history in which an assistant ``tool_use`` is not answered by a
``tool_result`` (same id) in the very next user message, or a ``tool_result`` answers no
``tool_use`` of the message before it. A compaction that cuts between the two breaks the
conversation for good — a known defect of the course's snapshots. So:

* :func:`check_tool_pairing` states the rule as a validator (a list of problems, empty when
  the history is sound). Tests, ``--resume`` and :func:`compact_history` itself use it.
* :func:`cut_points` lists where the kept part may start: at an assistant message (its
  results come after it, so they are kept too) or at a user message that carries no
  ``tool_result``. Never at a user message of tool results.
* :func:`choose_cut` picks the latest cut that still keeps the last ``keep_turns`` turns,
  moving later while the kept part is over ``keep_tokens`` (a few huge tool results).
* The older part is sent to the model **as a plain-text transcript** in a single user
  message with no tools (:func:`render_transcript`, :func:`summary_request`): the request
  carries no ``tool_use`` blocks to pair, it can be capped to fit the window however long
  the history is, and any Anthropic-compatible endpoint accepts it. If the model fails or
  answers with nothing, a mechanical summary (:func:`fallback_summary`) is used instead:
  compaction must not fail the run.
* :func:`compacted_history` puts the summary in a user message in front of the kept turns
  (or in front of the kept first user message) and the result is checked again: if it did
  not pass, :class:`CompactionError` — a broken history is never handed back.

Token counts: the provider's ``usage`` when there is one (the agent tracks it per turn),
else :func:`estimate_tokens`, a deliberately rough chars/4 estimate.
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from typing import Any

from agent_code.providers.base import ModelProvider, ProviderError

DEFAULT_CONTEXT_WINDOW = 128_000
COMPACT_AT = 0.8          # compact when the context reaches this fraction of the window
KEEP_TURNS = 6            # assistant turns kept verbatim (fewer if they are too large)
KEEP_FRACTION = 0.3       # ... and at most this fraction of the window
RESULT_CHARS = 2_000      # per tool result / tool input in the transcript
SUMMARY_TAG = "conversation-summary"

Message = dict[str, Any]


class CompactionError(Exception):
    """Compaction could not produce a valid history (the history is left as it was)."""


# --- the pairing rule -----------------------------------------------------------------

def _blocks(message: Message) -> list[dict[str, Any]]:
    content = message.get("content")
    if isinstance(content, str):
        return [{"type": "text", "text": content}]
    return [b for b in content or [] if isinstance(b, dict)]


def tool_use_ids(message: Message) -> list[str]:
    return [b.get("id", "") for b in _blocks(message) if b.get("type") == "tool_use"]


def tool_result_ids(message: Message) -> list[str]:
    return [b.get("tool_use_id", "") for b in _blocks(message) if b.get("type") == "tool_result"]


def check_tool_pairing(messages: list[Message]) -> list[str]:
    """Problems with ``messages`` as an Anthropic history; ``[]`` when every ``tool_use`` id
    has its ``tool_result`` in the next (user) message and every ``tool_result`` answers a
    ``tool_use`` of the assistant message right before it."""
    problems: list[str] = []
    if messages and messages[0].get("role") != "user":
        problems.append(f"message 0: the history must start with a user message, not {messages[0].get('role')!r}")
    for i, message in enumerate(messages):
        role = message.get("role")
        if role not in ("user", "assistant"):
            problems.append(f"message {i}: unknown role {role!r}")
            continue
        if role == "assistant":
            uses = tool_use_ids(message)
            dups = sorted({u for u in uses if uses.count(u) > 1})
            if dups:
                problems.append(f"message {i}: duplicate tool_use id(s) {dups}")
            if "" in uses:
                problems.append(f"message {i}: a tool_use has no id")
            if not uses:
                continue
            nxt = messages[i + 1] if i + 1 < len(messages) else None
            if nxt is None or nxt.get("role") != "user":
                problems.extend(f"message {i}: tool_use {u} has no tool_result (no user message follows)"
                                for u in uses)
                continue
            answered = set(tool_result_ids(nxt))
            problems.extend(f"message {i}: tool_use {u} has no tool_result in message {i + 1}"
                            for u in uses if u not in answered)
            for b in _blocks(message):
                if b.get("type") == "tool_use" and b.get("name") is None:
                    problems.append(f"message {i}: tool_use {b.get('id')} has no name")
        else:
            results = tool_result_ids(message)
            if not results:
                continue
            prev = messages[i - 1] if i > 0 else None
            asked = set(tool_use_ids(prev)) if prev is not None and prev.get("role") == "assistant" else set()
            problems.extend(f"message {i}: tool_result for {r} answers no tool_use of message {i - 1}"
                            for r in results if r not in asked)
            dups = sorted({r for r in results if results.count(r) > 1})
            if dups:
                problems.append(f"message {i}: duplicate tool_result(s) for {dups}")
            kinds = [b.get("type") for b in _blocks(message)]
            first_other = next((k for k, t in enumerate(kinds) if t != "tool_result"), len(kinds))
            if "tool_result" in kinds[first_other:]:
                problems.append(f"message {i}: tool_result blocks must come before any other content")
    return problems


# --- sizes ----------------------------------------------------------------------------

def estimate_tokens(value: object) -> int:
    """A rough token count: about four characters a token, over the JSON text."""
    text = value if isinstance(value, str) else json.dumps(value, ensure_ascii=False, default=str)
    return (len(text) + 3) // 4


def should_compact(context_tokens: int, context_window: int, threshold: float = COMPACT_AT) -> bool:
    return context_tokens >= threshold * context_window


# --- where to cut ---------------------------------------------------------------------

def cut_points(messages: list[Message]) -> list[int]:
    """Indices where the kept (verbatim) part may start; 0 is never one (nothing to summarize)."""
    points = []
    for i in range(1, len(messages)):
        m = messages[i]
        if m.get("role") == "assistant" or (m.get("role") == "user" and not tool_result_ids(m)):
            points.append(i)
    return points


def choose_cut(messages: list[Message], keep_turns: int = KEEP_TURNS,
               keep_tokens: int | None = None) -> int | None:
    """Where the kept part starts: it holds the last ``keep_turns`` assistant turns when they
    fit in ``keep_tokens``, fewer when not (at least the last turn). None: nothing to cut."""
    points = cut_points(messages)
    if not points:
        return None
    assistants = [i for i, m in enumerate(messages) if m.get("role") == "assistant"]
    if len(assistants) >= keep_turns > 0:
        boundary = assistants[-keep_turns]
        eligible = [p for p in points if p <= boundary]
        cut = eligible[-1] if eligible else points[0]
    else:
        cut = points[0]
    if keep_tokens is not None:
        for p in points:
            if p >= cut and estimate_tokens(messages[p:]) <= keep_tokens:
                return p
        return points[-1]
    return cut


# --- the summary ----------------------------------------------------------------------

def _short(text: str, limit: int = RESULT_CHARS) -> str:
    return text if len(text) <= limit else text[:limit] + f" … [{len(text) - limit} more characters]"


def _result_text(block: dict[str, Any]) -> str:
    content = block.get("content")
    if isinstance(content, list):
        return "\n".join(str(b.get("text", "")) for b in content if isinstance(b, dict))
    return "" if content is None else str(content)


def transcript_lines(messages: list[Message]) -> list[str]:
    """The conversation as plain text, one entry per block; tool inputs and results are cut
    to :data:`RESULT_CHARS` characters."""
    names: dict[str, str] = {}
    lines: list[str] = []
    for message in messages:
        role = message.get("role")
        for b in _blocks(message):
            kind = b.get("type")
            if kind == "text" and b.get("text"):
                lines.append(f"{'USER' if role == 'user' else 'ASSISTANT'}: {_short(str(b['text']), 4 * RESULT_CHARS)}")
            elif kind == "tool_use":
                names[b.get("id", "")] = str(b.get("name"))
                args = json.dumps(b.get("input"), ensure_ascii=False, default=str)
                lines.append(f"ASSISTANT called {b.get('name')}: {_short(args)}")
            elif kind == "tool_result":
                name = names.get(b.get("tool_use_id", ""), "tool")
                flag = " (error)" if b.get("is_error") else ""
                lines.append(f"RESULT of {name}{flag}: {_short(_result_text(b))}")
            elif kind == "thinking" and b.get("thinking"):
                lines.append(f"ASSISTANT (thinking): {_short(str(b['thinking']), 500)}")
    return lines


def render_transcript(messages: list[Message], max_chars: int) -> str:
    """The transcript, at most about ``max_chars``: the start (the task) and the end (the
    latest state) are kept, the middle is dropped with a note."""
    lines = transcript_lines(messages)
    text = "\n".join(lines)
    if len(text) <= max_chars:
        return text
    head, tail = max_chars // 3, max_chars - max_chars // 3
    return (text[:head] + f"\n[... {len(text) - head - tail} characters of the middle of the conversation "
            "omitted ...]\n" + text[-tail:])


SUMMARY_SYSTEM = ("You summarize a coding agent's conversation so the agent can continue the work "
                  "without it. You do not call tools; you answer with the summary only.")
SUMMARY_INSTRUCTIONS = """\
Above is the earlier part of a conversation between a user and a coding agent (tool calls
and their results included, some cut short). Write a summary the agent can continue from:
1. The user's requests, quoted or closely paraphrased (all of them; the first one matters most).
2. What was found: files, functions, facts, error messages (with paths and line numbers).
3. What was changed (files edited or created, commands run and their outcome).
4. What is still to do, and anything the user asked to avoid.
If the transcript starts with an earlier summary, fold it in. Be specific and concise."""


def summary_request(transcript: str) -> tuple[str, list[Message]]:
    """(system, messages) of the summarization request: one user message, plain text."""
    text = f"<transcript>\n{transcript}\n</transcript>\n\n{SUMMARY_INSTRUCTIONS}"
    return SUMMARY_SYSTEM, [{"role": "user", "content": [{"type": "text", "text": text}]}]


def fallback_summary(messages: list[Message], limit: int = 6_000) -> str:
    """A mechanical summary for when the model cannot write one: the user's words, and
    which tools were called on what."""
    requests: list[str] = []
    calls: list[str] = []
    for message in messages:
        for b in _blocks(message):
            if message.get("role") == "user" and b.get("type") == "text" and b.get("text"):
                if not str(b["text"]).startswith(f"<{SUMMARY_TAG}>"):
                    requests.append(_short(str(b["text"]), 1_000))
                else:
                    requests.append(_short(str(b["text"]), 2_000))
            elif b.get("type") == "tool_use":
                inp = b.get("input")
                inp = inp if isinstance(inp, dict) else {}
                target = inp.get("path") or inp.get("command") or inp.get("pattern") or inp.get("description") or ""
                calls.append(f"{b.get('name')} {_short(str(target), 120)}".strip())
    text = "(The model could not summarize; this is a mechanical record.)\nUser messages:\n"
    text += "\n".join(f"- {r}" for r in requests) or "- (none)"
    text += f"\nTool calls ({len(calls)}): " + "; ".join(calls[-40:])
    return _short(text, limit)


def summary_message_text(summary: str, replaced: int) -> str:
    return (f"<{SUMMARY_TAG}>\nThe earlier part of this conversation ({replaced} messages) was compacted "
            f"to save context. Summary:\n{summary.strip()}\n</{SUMMARY_TAG}>")


def compacted_history(messages: list[Message], cut: int, summary: str) -> list[Message]:
    """The summary, then ``messages[cut:]`` verbatim. Raises :class:`CompactionError` unless
    the result passes :func:`check_tool_pairing`."""
    if cut not in cut_points(messages):
        raise CompactionError(f"cannot cut the history at message {cut}: it would split a tool_use "
                              "from its tool_result")
    block = {"type": "text", "text": summary_message_text(summary, cut)}
    first = messages[cut]
    if first.get("role") == "user":
        new = [{"role": "user", "content": [block] + _blocks(first)}] + messages[cut + 1:]
    else:
        new = [{"role": "user", "content": [block]}] + messages[cut:]
    problems = check_tool_pairing(new)
    if problems:
        raise CompactionError("compaction would leave an invalid history: " + "; ".join(problems[:3]))
    return new


@dataclass
class Compaction:
    """What one compaction did."""

    messages: list[Message]            # the new history
    summary: str
    replaced: int                      # messages summarized
    kept: int                          # messages kept verbatim
    tokens_before: int
    tokens_after: int
    fallback: bool = False             # the mechanical summary was used
    error: str | None = None           # why the model's summary was not used
    usage: dict[str, int] = field(default_factory=dict)

    def describe(self) -> str:
        how = "a mechanical summary" if self.fallback else "a summary"
        return (f"compacted {self.replaced} earlier messages into {how}; kept the last {self.kept} verbatim "
                f"(~{self.tokens_before:,} → ~{self.tokens_after:,} tokens)")


def compact_history(provider: ModelProvider, messages: list[Message], *,
                    context_window: int = DEFAULT_CONTEXT_WINDOW, keep_turns: int = KEEP_TURNS,
                    tokens_before: int | None = None) -> Compaction | None:
    """Summarize the older part of ``messages`` with ``provider``; None when there is nothing
    to compact (too short). The input list is not changed."""
    cut = choose_cut(messages, keep_turns, keep_tokens=int(context_window * KEEP_FRACTION))
    if cut is None:
        return None
    old = messages[:cut]
    transcript = render_transcript(old, max_chars=max(8_000, context_window * 2))
    system, request = summary_request(transcript)
    summary, error, usage = "", None, {}
    try:
        response = provider.complete(request, tools=None, system=system)
        summary = response.text.strip()
        if response.usage is not None:
            usage = {"input_tokens": response.usage.input_tokens, "output_tokens": response.usage.output_tokens}
        if not summary:
            error = "the model's summary was empty"
    except ProviderError as exc:
        error = f"the summarization request failed: {exc}"
    fallback = not summary
    if fallback:
        summary = fallback_summary(old)
    new = compacted_history(messages, cut, summary)
    return Compaction(new, summary, replaced=cut, kept=len(messages) - cut,
                      tokens_before=tokens_before if tokens_before is not None else estimate_tokens(messages),
                      tokens_after=estimate_tokens(new), fallback=fallback, error=error, usage=usage)
