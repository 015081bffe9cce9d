"""Anthropic Messages wire protocol: the way in (request body → ChatRequest) and the way out
(ParsedReply → message object or SSE events). Pure functions; the server around them is thin.

Way in — the rules, in the order a request meets them:

* ``system`` (a string or a list of text blocks) becomes ONE leading ``system`` message; several
  blocks are joined with ``"\\n"``. A block (or a string's first line) starting with
  ``x-anthropic-billing-header:`` — Claude Code sends one — is dropped, with a note: it changes
  every request and would break prefix reuse. An empty system text gives no system message.
* ``role: "system"`` entries inside ``messages`` (Claude Code sends these) are folded into a user
  message as a ``<system-reminder>\\n…\\n</system-reminder>`` text block: into the FOLLOWING
  message if it is a user message (placed after its leading ``tool_result`` blocks, so tool
  results still follow the assistant turn that asked for them), else appended to the PREVIOUS
  message if that is a user message, else as a new user message in its place.
* A user message: consecutive text blocks are joined with ``"\\n"`` into a ``user`` message; each
  ``tool_result`` becomes a ``tool`` message with its content flattened to text; order is kept,
  so ``[tool_result, text]`` gives ``tool`` then ``user`` (seed 000). A user message that yields
  nothing (``content: []``) becomes ``{"role": "user", "content": ""}``.
* ``tool_result.is_error: true`` keeps its content unchanged: clients already word the failure in
  the content (Claude Code wraps it in ``<tool_use_error>``), and the canonical ``tool`` message
  has no error flag. The ``tool_use_id`` is dropped (wire-only).
* An assistant message: text blocks joined with ``"\\n"`` → ``content``; ``thinking`` blocks →
  ``reasoning_content`` (joined with ``"\\n"``, only when non-empty); ``tool_use`` →
  ``tool_calls`` with ``arguments`` kept as a dict and the wire id dropped (key omitted when there
  are none); ``redacted_thinking`` is dropped with a note (this gateway cannot read it). With a
  ``signer``, a thinking block whose signature does not verify is kept, with a note.
* Images and documents become the text ``[image omitted: this model reads text only]`` /
  ``[document omitted: this model reads text only]`` where they stood, with a note; any other
  block type the gateway does not know (server tool blocks, search results, …) becomes
  ``[<type> block omitted]``, with a note. ``cache_control`` and ``citations`` are ignored.
* ``tool_use`` inside a user message and ``tool_result``/``thinking`` inside an assistant or user
  message where the API forbids them are rejected (400), as the real API does.
* ``tools[]`` → ``{"type": "function", "function": {"name", "description", "parameters"}}``
  (description ``""`` when missing). Anthropic server tools (a ``type`` other than ``custom`` and
  no ``input_schema``) are dropped with a note. No tools → ``None``.
* ``max_tokens``/``temperature``/``top_p``/``top_k``/``stop_sequences`` go to ``SamplingParams``
  only. ``thinking.type`` ``enabled``/``adaptive`` sets ``ChatRequest.thinking``; a
  ``budget_tokens`` above ``max_tokens`` is accepted (the engine is bounded by max_tokens anyway).
  ``tool_choice`` is kept as given (an object with a string ``type``).

Every JSON value given as a body either translates or raises :class:`ProtocolError` with a
message naming the offending path (``messages.2.content.0: ...``).

Way out — a reply with no reasoning, text or tool calls gives ``content: []``: the real API
does the same for an empty turn, and inventing an empty text block would put text in the
history the model never produced.
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

# ProtocolError, Signer and ThinkingSigner live in common.py; imported here for the callers that
# name them from this module
from agent_code.protocols.common import ProtocolError, Signer, ThinkingSigner, chunks, random_id, sse_event  # noqa: F401
from agent_code.protocols.jsontypes import (ScalarPaths, is_int, is_number, same_key_order, same_scalar_types,
                                            scalar_paths, type_name)
from agent_code.protocols.canonical import ChatRequest, Message, ParsedReply, SamplingParams, ToolSchema, rest_of

BILLING_HEADER_PREFIX = "x-anthropic-billing-header:"
IMAGE_PLACEHOLDER = "[image omitted: this model reads text only]"
DOCUMENT_PLACEHOLDER = "[document omitted: this model reads text only]"
THINKING_ON = ("enabled", "adaptive")
THINKING_OFF = ("disabled",)


# ---------------------------------------------------------------------------------------------
# way in: validation helpers


def _need_object(value: object, path: str) -> dict[str, Any]:
    if not isinstance(value, dict):
        raise ProtocolError(f"{path}: must be an object, got {type_name(value)}")
    return value


def _need_str(obj: dict[str, Any], key: str, path: str, *, non_empty: bool = False) -> str:
    where = f"{path}.{key}" if path else key
    if key not in obj:
        raise ProtocolError(f"{where}: field required")
    value = obj[key]
    if not isinstance(value, str):
        raise ProtocolError(f"{where}: must be a string, got {type_name(value)}")
    if non_empty and not value:
        raise ProtocolError(f"{where}: must be a non-empty string")
    return value


def _block_type(block: object, path: str) -> str:
    kind = _need_object(block, path).get("type")
    if not isinstance(kind, str):
        raise ProtocolError(f"{path}.type: must be a string naming the block type, got {type_name(kind)}")
    return kind


def _content_blocks(content: object, path: str) -> list[tuple[str, dict[str, Any]]]:
    """A message's content as (path, block) pairs; a string is one text block."""
    if isinstance(content, str):
        return [(path, {"type": "text", "text": content})]
    if not isinstance(content, list):
        raise ProtocolError(f"{path}: must be a string or a list of content blocks, got {type_name(content)}")
    return [(f"{path}.{i}", block) for i, block in enumerate(content)]


def _placeholder(kind: str, path: str, notes: list[str]) -> str:
    """The rule for blocks a text-only model cannot read: a placeholder text, and a note."""
    if kind == "image":
        notes.append(f"{path}: image replaced with a text placeholder")
        return IMAGE_PLACEHOLDER
    if kind == "document":
        notes.append(f"{path}: document replaced with a text placeholder")
        return DOCUMENT_PLACEHOLDER
    notes.append(f"{path}: unsupported block type {kind!r} replaced with a text placeholder")
    return f"[{kind} block omitted]"


def _text_of(block: dict[str, Any], path: str) -> str:
    return _need_str(block, "text", path)


def _flatten(blocks: list[tuple[str, dict[str, Any]]], notes: list[str]) -> str:
    """Text-ish content (tool results, mid-list system messages) → one string."""
    parts: list[str] = []
    for path, block in blocks:
        kind = _block_type(block, path)
        if kind == "text":
            parts.append(_text_of(block, path))
        else:
            parts.append(_placeholder(kind, path, notes))
    return "\n".join(parts)


# ---------------------------------------------------------------------------------------------
# way in: the parts of a body


def _system_text(system: object, notes: list[str]) -> str:
    if isinstance(system, str):
        if system.startswith(BILLING_HEADER_PREFIX):
            notes.append("system: dropped the x-anthropic-billing-header line")
            _, _, system = system.partition("\n")
        return system
    if not isinstance(system, list):
        raise ProtocolError(f"system: must be a string or a list of text blocks, got {type_name(system)}")
    parts: list[str] = []
    for i, block in enumerate(system):
        path = f"system.{i}"
        kind = _block_type(block, path)
        if kind != "text":
            raise ProtocolError(f"{path}.type: system blocks must be text blocks, got {kind!r}")
        text = _text_of(block, path)
        if text.startswith(BILLING_HEADER_PREFIX):
            notes.append(f"{path}: dropped the x-anthropic-billing-header block")
            continue
        parts.append(text)
    return "\n".join(parts)


def _reminder(text: str) -> dict[str, Any]:
    return {"type": "text", "text": f"<system-reminder>\n{text}\n</system-reminder>"}


def _fold_system_messages(messages: list[object], notes: list[str], *,
                          first: int = 0) -> list[tuple[str, list[tuple[str, dict[str, Any]]]]]:
    """Validate the message list and fold mid-list system messages into user messages.

    Returns (role, [(path, block), ...]) entries for the user and assistant messages (paths
    count from ``first``: the index of ``messages[0]`` in the request).
    """
    entries: list[tuple[str, list[tuple[str, dict[str, Any]]]]] = []
    pending: list[tuple[str, dict[str, Any]]] = []
    for i, wire_message in enumerate(messages, first):
        path = f"messages.{i}"
        message = _need_object(wire_message, path)
        role = message.get("role")
        if role not in ("user", "assistant", "system"):
            raise ProtocolError(f"{path}.role: must be 'user', 'assistant' or 'system', got {role!r}"
                                if isinstance(role, str) else
                                f"{path}.role: must be 'user', 'assistant' or 'system', got {type_name(role)}")
        if "content" not in message:
            raise ProtocolError(f"{path}.content: field required")
        blocks = _content_blocks(message["content"], f"{path}.content")
        if role == "system":
            pending.append((path, _reminder(_flatten(blocks, notes))))
            continue
        if pending:
            if role == "user":
                lead = 0
                while lead < len(blocks) and isinstance(blocks[lead][1], dict) \
                        and blocks[lead][1].get("type") == "tool_result":
                    lead += 1
                blocks = blocks[:lead] + pending + blocks[lead:]
            elif entries and entries[-1][0] == "user":
                entries[-1][1].extend(pending)
            else:
                entries.append(("user", pending))
            pending = []
        entries.append((role, blocks))
    if pending:
        if entries and entries[-1][0] == "user":
            entries[-1][1].extend(pending)
        else:
            entries.append(("user", pending))
    return entries


def _user_messages(blocks: list[tuple[str, dict[str, Any]]], notes: list[str]) -> list[Message]:
    out: list[Message] = []
    texts: list[str] = []

    def flush() -> None:
        if texts:
            out.append({"role": "user", "content": "\n".join(texts)})
            texts.clear()

    for path, block in blocks:
        kind = _block_type(block, path)
        if kind == "text":
            texts.append(_text_of(block, path))
        elif kind == "tool_result":
            _need_str(block, "tool_use_id", path)
            if "is_error" in block and not isinstance(block["is_error"], (bool, type(None))):
                raise ProtocolError(f"{path}.is_error: must be a boolean, got {type_name(block['is_error'])}")
            content = block.get("content")
            if content is None:
                text = ""
            else:
                text = _flatten(_content_blocks(content, f"{path}.content"), notes)
            flush()
            out.append({"role": "tool", "content": text})
        elif kind in ("tool_use", "thinking", "redacted_thinking"):
            raise ProtocolError(f"{path}.type: {kind} blocks belong in assistant messages")
        else:
            texts.append(_placeholder(kind, path, notes))
    flush()
    if not out:
        out.append({"role": "user", "content": ""})
    return out


def _assistant_message(blocks: list[tuple[str, dict[str, Any]]], notes: list[str],
                       signer: Signer | None) -> Message:
    texts: list[str] = []
    reasoning: list[str] = []
    calls: list[dict[str, Any]] = []
    for path, block in blocks:
        kind = _block_type(block, path)
        if kind == "text":
            texts.append(_text_of(block, path))
        elif kind == "thinking":
            thought = _need_str(block, "thinking", path)
            signature = block.get("signature")
            if signature is not None and not isinstance(signature, str):
                raise ProtocolError(f"{path}.signature: must be a string, got {type_name(signature)}")
            if signer is not None:
                try:
                    ok = signature is not None and signature != "" and signer.verify(thought, signature)
                except Exception:  # a signer that cannot check this text counts as a failed check
                    ok = False
                if not ok:
                    notes.append(f"{path}: thinking signature did not verify; reasoning kept")
            if thought:
                reasoning.append(thought)
        elif kind == "redacted_thinking":
            notes.append(f"{path}: redacted_thinking block dropped")
        elif kind == "tool_use":
            _need_str(block, "id", path, non_empty=True)
            name = _need_str(block, "name", path, non_empty=True)
            if not isinstance(block.get("input"), dict):
                raise ProtocolError(f"{path}.input: must be an object, got {type_name(block.get('input'))}")
            calls.append({"type": "function", "function": {"name": name, "arguments": block["input"]}})
        elif kind == "tool_result":
            raise ProtocolError(f"{path}.type: tool_result blocks belong in user messages")
        else:
            texts.append(_placeholder(kind, path, notes))
    message: Message = {"role": "assistant", "content": "\n".join(texts)}
    if reasoning:
        message["reasoning_content"] = "\n".join(reasoning)
    if calls:
        message["tool_calls"] = calls
    return message


def _tools(tools: object, notes: list[str]) -> list[ToolSchema] | None:
    if tools is None:
        return None
    if not isinstance(tools, list):
        raise ProtocolError(f"tools: must be a list, got {type_name(tools)}")
    out: list[ToolSchema] = []
    seen: set[str] = set()
    for i, tool in enumerate(tools):
        path = f"tools.{i}"
        _need_object(tool, path)
        name = _need_str(tool, "name", path, non_empty=True)
        kind = tool.get("type")
        if kind is not None and not isinstance(kind, str):
            raise ProtocolError(f"{path}.type: must be a string, got {type_name(kind)}")
        if kind not in (None, "custom") and "input_schema" not in tool:
            notes.append(f"{path}: server tool {name!r} ({kind}) dropped")
            continue
        if name in seen:
            raise ProtocolError(f"{path}.name: duplicate tool name {name!r}")
        seen.add(name)
        if "input_schema" not in tool:
            raise ProtocolError(f"{path}.input_schema: field required")
        schema = tool["input_schema"]
        if not isinstance(schema, dict):
            raise ProtocolError(f"{path}.input_schema: must be an object, got {type_name(schema)}")
        description = tool.get("description")
        if description is None:
            description = ""
        elif not isinstance(description, str):
            raise ProtocolError(f"{path}.description: must be a string, got {type_name(description)}")
        out.append({"type": "function", "function": {"name": name, "description": description,
                                                     "parameters": schema}})
    return out or None


def _sampling(body: dict[str, Any], *, require_max_tokens: bool) -> SamplingParams:
    sampling = SamplingParams()
    if "max_tokens" not in body:
        if require_max_tokens:
            raise ProtocolError("max_tokens: field required")
    else:
        value = body["max_tokens"]
        if not is_int(value) or value <= 0:
            shown = repr(value) if is_number(value) else type_name(value)
            raise ProtocolError(f"max_tokens: must be a positive integer, got {shown}")
        sampling.max_new_tokens = value
    value = body.get("temperature")
    if value is not None:
        if not is_number(value) or value < 0:
            raise ProtocolError("temperature: must be a non-negative number")
        sampling.temperature = float(value)
    value = body.get("top_p")
    if value is not None:
        if not is_number(value) or not 0 <= value <= 1:
            raise ProtocolError("top_p: must be a number between 0 and 1")
        sampling.top_p = float(value)
    value = body.get("top_k")
    if value is not None:
        if not is_int(value) or value < 0:
            raise ProtocolError("top_k: must be a non-negative integer")
        sampling.top_k = value
    value = body.get("stop_sequences")
    if value is not None:
        if not isinstance(value, list):
            raise ProtocolError(f"stop_sequences: must be a list of strings, got {type_name(value)}")
        for i, stop in enumerate(value):
            if not isinstance(stop, str) or not stop:
                raise ProtocolError(f"stop_sequences.{i}: must be a non-empty string")
        sampling.stop = list(value)
    return sampling


def _thinking(value: object, notes: list[str]) -> bool:
    if value is None:
        return False
    thinking = _need_object(value, "thinking")
    kind = thinking.get("type")
    if not isinstance(kind, str):
        raise ProtocolError(f"thinking.type: must be a string, got {type_name(kind)}")
    budget = thinking.get("budget_tokens")
    if budget is not None and (not is_int(budget) or budget < 0):
        raise ProtocolError("thinking.budget_tokens: must be a non-negative integer")
    if kind in THINKING_ON:
        return True
    if kind not in THINKING_OFF:
        notes.append(f"thinking: unknown type {kind!r} treated as disabled")
    return False


@dataclass(frozen=True)
class TranslationMemo:
    """What one request of a conversation translated to, piece by piece, so that the next
    request of that conversation (which repeats all of it and adds a little) translates only
    what is new: a wire message, the system field or the tools that are ``==`` to the memo's,
    with the same JSON types at every number, bool and null (:func:`same_scalar_types`), get
    the memo's canonical objects back — the very objects, so the history's own comparisons of
    them are identity checks. Immutable: a request reads one and the route keeps the next."""

    system: object = None                # the wire ``system`` field ...
    system_out: tuple[tuple[Message, ...], tuple[str, ...]] = ((), ())   # ... its canonical messages, notes
    tools: object = None                 # the wire ``tools`` ...
    tools_out: tuple[list[ToolSchema] | None, tuple[str, ...]] = (None, ())   # ... its canonical tools, notes
    tools_scalars: ScalarPaths = ()
    wire: tuple[object, ...] = ()        # the wire messages ...
    scalars: tuple[ScalarPaths, ...] = ()   # ... their number/bool/null places
    out: tuple[tuple[tuple[Message, ...], tuple[str, ...]], ...] = ()   # ... and (canonical messages, notes) for each
    flat: tuple[Message, ...] = ()       # every wire message's canonical messages, in order ...
    flat_ends: tuple[int, ...] = ()      # ... where each wire message's end in ``flat``
    flat_notes: tuple[str, ...] = ()     # the same for their notes
    notes_ends: tuple[int, ...] = ()


def _same(value: object, held: object, paths: ScalarPaths) -> bool:
    return value is held or (value == held and same_scalar_types(value, paths))


def _held_run(wire_messages: list[object], held: TranslationMemo) -> int:
    """How many leading wire messages are :func:`_same` as the memo's: one ``==`` over all the
    memo holds (in C), then the number/bool/null places of those that have any. 0 when that
    ``==`` fails anywhere: then every message goes through :func:`_same` on its own."""
    k = min(len(wire_messages), len(held.wire))
    if not k or tuple(wire_messages[:k]) != held.wire[:k]:
        return 0
    for i, paths in enumerate(held.scalars[:k]):
        if paths and not same_scalar_types(wire_messages[i], paths):
            return i
    return k


# the last tools list translated, for the next session that declares the same one (every rollout of
# an agent does): its canonical tools, the same objects, and the facts found of them (history.py)
_shared_tools: tuple[object, ScalarPaths, tuple[list[ToolSchema] | None, tuple[str, ...]]] | None = None


def _translate(body: object, signer: Signer | None, *, require_max_tokens: bool,
               memo: TranslationMemo | None = None) -> tuple[ChatRequest, TranslationMemo | None]:
    global _shared_tools
    if not isinstance(body, dict):
        raise ProtocolError(f"request body: must be a JSON object, got {type_name(body)}")
    # a gateway serves one model: a body without ``model`` (the seed's worked example) asks for it
    model = _need_str(body, "model", "", non_empty=True) if "model" in body else None
    notes: list[str] = []
    sampling = _sampling(body, require_max_tokens=require_max_tokens)

    wire_messages = body.get("messages")
    if not isinstance(wire_messages, list) or not wire_messages:
        raise ProtocolError("messages: must be a non-empty list")
    messages: list[Message] = []
    wire_system = body.get("system")
    system_notes: Sequence[str]
    if memo is not None and wire_system is not None and wire_system == memo.system:
        system_out, system_notes = memo.system_out   # text only: no type can differ under ==
    else:
        new_notes: list[str] = []
        system = _system_text(wire_system, new_notes) if wire_system is not None else ""
        system_notes = new_notes
        system_out = ({"role": "system", "content": system},) if system else ()
    messages.extend(system_out)
    notes.extend(system_notes)
    held = memo if memo is not None else TranslationMemo()
    # the memo's leading run (see _held_run): its messages are ``==`` to a request's that had
    # no system message among them, so only the rest can hold one
    k = _held_run(wire_messages, held)
    folds = any(isinstance(m, dict) and m.get("role") == "system" for m in wire_messages[k:])
    memo_fields: dict[str, Any] | None = None   # the new memo's, but for its tools (found below)
    if folds:   # mid-list system messages fold into their neighbours: translated whole, no memo
        for role, blocks in _fold_system_messages(wire_messages, notes):
            if role == "user":
                messages.extend(_user_messages(blocks, notes))
            else:
                messages.append(_assistant_message(blocks, notes, signer))
    else:
        # the memo's leading run at once, then message by message (the memo's where _same)
        scalars, outs = list(held.scalars[:k]), list(held.out[:k])
        first, first_note = len(messages), len(notes)
        if k:
            messages.extend(held.flat[:held.flat_ends[k - 1]])
            notes.extend(held.flat_notes[:held.notes_ends[k - 1]])
        flat_ends, notes_ends = list(held.flat_ends[:k]), list(held.notes_ends[:k])
        for i in range(k, len(wire_messages)):
            message = wire_messages[i]
            if i < len(held.wire) and _same(message, held.wire[i], held.scalars[i]):
                paths, out = held.scalars[i], held.out[i]
            else:
                paths, out = scalar_paths(message), _message(message, i, signer)
            scalars.append(paths)
            outs.append(out)
            messages.extend(out[0])
            notes.extend(out[1])
            flat_ends.append(len(messages) - first)
            notes_ends.append(len(notes) - first_note)
        memo_fields = dict(system=wire_system, system_out=(system_out, tuple(system_notes)),
                           wire=tuple(wire_messages), scalars=tuple(scalars), out=tuple(outs),
                           flat=tuple(messages[first:]), flat_ends=tuple(flat_ends),
                           flat_notes=tuple(notes[first_note:]), notes_ends=tuple(notes_ends))

    wire_tools = body.get("tools")
    tool_notes: Sequence[str]
    shared = _shared_tools
    if memo is not None and wire_tools is not None and _same(wire_tools, memo.tools, memo.tools_scalars) \
            and same_key_order(wire_tools, memo.tools):
        tools, tool_notes = memo.tools_out
        tools_scalars = memo.tools_scalars
    elif wire_tools is not None and shared is not None and _same(wire_tools, shared[0], shared[1]) \
            and same_key_order(wire_tools, shared[0]):   # (the template shows the key order)
        (tools, tool_notes), tools_scalars = shared[2], shared[1]   # another session's, the same tools
    else:
        new_tool_notes: list[str] = []
        tools = _tools(wire_tools, new_tool_notes)
        tool_notes = new_tool_notes
        tools_scalars = tuple(scalar_paths(wire_tools)) if wire_tools is not None else ()
        if wire_tools is not None:
            _shared_tools = (wire_tools, tools_scalars, (tools, tuple(tool_notes)))
    notes.extend(tool_notes)
    new_memo = None if memo_fields is None else TranslationMemo(
        **memo_fields, tools=wire_tools, tools_out=(tools, tuple(tool_notes)), tools_scalars=tools_scalars)
    stream = body.get("stream", False)
    if stream is None:
        stream = False
    if not isinstance(stream, bool):
        raise ProtocolError(f"stream: must be a boolean, got {type_name(stream)}")
    thinking = _thinking(body.get("thinking"), notes)
    tool_choice = body.get("tool_choice")
    if tool_choice is not None:
        _need_object(tool_choice, "tool_choice")
        if not isinstance(tool_choice.get("type"), str):
            raise ProtocolError("tool_choice.type: must be a string")
    chat = ChatRequest(messages=messages, tools=tools, sampling=sampling, stream=stream, model=model,
                       tool_choice=tool_choice, thinking=thinking, notes=notes)
    return chat, new_memo


def _message(message: object, i: int, signer: Signer | None) -> tuple[tuple[Message, ...], tuple[str, ...]]:
    """One user or assistant wire message (a list with no system message to fold) → its
    canonical messages and the notes it raised."""
    notes: list[str] = []
    [(role, blocks)] = _fold_system_messages([message], notes, first=i)
    if role == "user":
        return tuple(_user_messages(blocks, notes)), tuple(notes)
    return (_assistant_message(blocks, notes, signer),), tuple(notes)


def translate_request(body: object, *, signer: Signer | None = None) -> ChatRequest:
    """A ``POST /v1/messages`` body → ChatRequest; raises ProtocolError for any bad body."""
    return translate_request_memo(body, signer=signer)[0]


def translate_request_memo(body: object, *, signer: Signer | None = None, memo: TranslationMemo | None = None
                           ) -> tuple[ChatRequest, TranslationMemo | None]:
    """:func:`translate_request` reusing ``memo`` (the conversation's previous request's) for
    what is unchanged, and the memo for the next request (None where none can be kept)."""
    try:
        return _translate(body, signer, require_max_tokens=True, memo=memo)
    except RecursionError:
        raise ProtocolError("request body: nested too deeply") from None


def translate_count_request(body: object, *, signer: Signer | None = None) -> ChatRequest:
    """A ``POST /v1/messages/count_tokens`` body: the same rules, ``max_tokens`` optional."""
    try:
        return _translate(body, signer, require_max_tokens=False)[0]
    except RecursionError:
        raise ProtocolError("request body: nested too deeply") from None


# ---------------------------------------------------------------------------------------------
# way out

def _random_id(prefix: str) -> str:
    return random_id(prefix + "01", 22)


def new_message_id() -> str:
    return _random_id("msg_")


def new_tool_use_id() -> str:
    return _random_id("toolu_")


def stop_reason_for(reply: ParsedReply, finish_reason: str,
                    stop_sequence: str | None) -> tuple[str, str | None]:
    """(stop_reason, stop_sequence): tool calls win, then truncation, then a matched stop string."""
    if reply.tool_calls:
        return "tool_use", None
    if finish_reason == "length":
        return "max_tokens", None
    if stop_sequence is not None:
        return "stop_sequence", stop_sequence
    return "end_turn", None


def _reply_blocks(reply: ParsedReply, signer: Signer | None, thinking_requested: bool) -> list[dict[str, Any]]:
    """Content blocks in API order: thinking, text, tool_use. Fills empty ToolCallOut ids in place,
    so the JSON body and the stream of one reply name the same ids."""
    blocks: list[dict[str, Any]] = []
    if reply.reasoning and thinking_requested:
        signature = signer.sign(reply.reasoning) if signer is not None else ""
        blocks.append({"type": "thinking", "thinking": reply.reasoning, "signature": signature})
    if reply.text:
        blocks.append({"type": "text", "text": reply.text})
    for call in reply.tool_calls:
        if not call.id:
            call.id = new_tool_use_id()
        blocks.append({"type": "tool_use", "id": call.id, "name": call.name, "input": call.arguments})
    return blocks


def response_body(reply: ParsedReply, *, model: str, message_id: str, stop_reason: str,
                  stop_sequence: str | None, input_tokens: int, output_tokens: int,
                  signer: Signer | None = None, thinking_requested: bool = True) -> dict[str, Any]:
    """The Anthropic message object for a reply. Reasoning is sent as a thinking block only when
    the client asked for thinking; an empty reply gives ``content: []``."""
    return {"id": message_id, "type": "message", "role": "assistant", "model": model,
            "content": _reply_blocks(reply, signer, thinking_requested),
            "stop_reason": stop_reason, "stop_sequence": stop_sequence,
            "usage": {"input_tokens": input_tokens, "output_tokens": output_tokens}}


def message_start_event(*, model: str, message_id: str, input_tokens: int,
                        output_tokens: int = 0) -> tuple[str, dict[str, Any]]:
    """The first event of a stream; a gateway sends it before generation starts."""
    return ("message_start", {"type": "message_start", "message": {
        "id": message_id, "type": "message", "role": "assistant", "model": model, "content": [],
        "stop_reason": None, "stop_sequence": None,
        "usage": {"input_tokens": input_tokens, "output_tokens": output_tokens}}})


class MessageStream:
    """The content events of one streamed message, written as the reply becomes certain:
    :meth:`reasoning`, :meth:`reasoning_done` and :meth:`text` stream pieces that are prefixes
    of the final reply (:mod:`agent_code.parse.incremental`); :meth:`finish` sends the rest of
    the final reply — the remainder of the open blocks, the blocks not begun, the tool calls —
    and the closing events. Only ``finish`` gives the same events as a reply sent whole."""

    def __init__(self, *, signer: Signer | None = None, thinking_requested: bool = True,
                 chunk_chars: int = 64) -> None:
        self.signer, self.thinking_requested, self.size = signer, thinking_requested, max(1, chunk_chars)
        self.index = -1
        self.open: str | None = None               # the kind of the block being streamed
        self.sent: dict[str, str] = {}             # kind -> what of it was sent
        self.closed: set[str] = set()

    def _start(self, kind: str, block: dict[str, Any]) -> list[tuple[str, dict[str, Any]]]:
        self.index += 1
        self.open = kind
        self.sent[kind] = ""
        return [("content_block_start", {"type": "content_block_start", "index": self.index,
                                         "content_block": block})]

    def _deltas(self, deltas: list[dict[str, Any]]) -> list[tuple[str, dict[str, Any]]]:
        return [("content_block_delta", {"type": "content_block_delta", "index": self.index, "delta": d})
                for d in deltas]

    def _stop(self) -> list[tuple[str, dict[str, Any]]]:
        self.closed.add(self.open or "")
        self.open = None
        return [("content_block_stop", {"type": "content_block_stop", "index": self.index})]

    def _piece(self, kind: str, piece: str, whole: bool = False) -> list[tuple[str, dict[str, Any]]]:
        events = [] if self.open == kind else self._start(kind, {"type": kind, kind: "", "signature": ""}
                                                          if kind == "thinking" else {"type": kind, kind: ""})
        self.sent[kind] += piece
        return events + self._deltas([{"type": f"{kind}_delta", kind: c} for c in chunks(piece, self.size)
                                      if c or whole])

    def reasoning(self, piece: str) -> list[tuple[str, dict[str, Any]]]:
        return self._piece("thinking", piece) if self.thinking_requested else []

    def reasoning_done(self, reasoning: str) -> list[tuple[str, dict[str, Any]]]:
        if self.open != "thinking":
            return []
        signature = self.signer.sign(reasoning) if self.signer is not None else ""
        return self._deltas([{"type": "signature_delta", "signature": signature}]) + self._stop()

    def text(self, piece: str) -> list[tuple[str, dict[str, Any]]]:
        return self._piece("text", piece)

    def finish(self, reply: ParsedReply, *, stop_reason: str, stop_sequence: str | None,
               output_tokens: int) -> list[tuple[str, dict[str, Any]]]:
        events: list[tuple[str, dict[str, Any]]] = []
        for block in _reply_blocks(reply, self.signer, self.thinking_requested):
            kind = block["type"]
            if kind in ("thinking", "text"):
                if kind in self.closed:   # streamed whole already
                    continue
                begun = self.open == kind
                events += self._piece(kind, rest_of(block[kind], self.sent[kind]) if begun else block[kind],
                                      whole=not begun)
                if kind == "thinking":
                    events += self._deltas([{"type": "signature_delta", "signature": block["signature"]}])
            else:
                if self.open is not None:
                    events += self._stop()
                events += self._start(kind, {"type": "tool_use", "id": block["id"], "name": block["name"],
                                             "input": {}})
                payload = json.dumps(block["input"], ensure_ascii=False)
                events += self._deltas([{"type": "input_json_delta", "partial_json": c}
                                        for c in chunks(payload, self.size)])
            events += self._stop()
        if self.open is not None:   # streamed, but empty in the final reply (cannot happen by construction)
            events += self._stop()
        events.append(("message_delta", {"type": "message_delta",
                                         "delta": {"stop_reason": stop_reason, "stop_sequence": stop_sequence},
                                         "usage": {"output_tokens": output_tokens}}))
        events.append(("message_stop", {"type": "message_stop"}))
        return events


def stream_events(reply: ParsedReply, *, model: str, message_id: str, stop_reason: str,
                  stop_sequence: str | None, input_tokens: int, output_tokens: int,
                  signer: Signer | None = None, thinking_requested: bool = True,
                  chunk_chars: int = 64) -> list[tuple[str, dict[str, Any]]]:
    """The same reply as the SSE events of a streamed response, in the API's order."""
    events = [message_start_event(model=model, message_id=message_id, input_tokens=input_tokens,
                                  output_tokens=min(1, max(0, output_tokens)))]
    stream = MessageStream(signer=signer, thinking_requested=thinking_requested, chunk_chars=chunk_chars)
    return events + stream.finish(reply, stop_reason=stop_reason, stop_sequence=stop_sequence,
                                  output_tokens=output_tokens)


def sse_encode(event: str, data: dict[str, Any]) -> bytes:
    return sse_event(event, data)


def ping_event() -> bytes:
    return sse_encode("ping", {"type": "ping"})


def error_body(kind: str, message: str) -> dict[str, Any]:
    return {"type": "error", "error": {"type": kind, "message": message}}
