"""OpenAI Responses wire protocol (what Codex CLI speaks): the way in (request body →
ChatRequest) and the way out (ParsedReply → ``response`` object or the SSE event sequence).
Pure functions; the rules both OpenAI endpoints share live in
:mod:`agent_code.protocols.openai_common`.

Way in — ``instructions`` and ``input`` (a string, or items) become canonical messages:

* ``instructions`` is the first ``system`` message; ``system``/``developer`` messages that come
  before any other item are merged into it (joined with ``"\\n\\n"``: Codex sends its
  permission notes that way, and a chat template expects one system prompt); later ones stay
  ``system`` messages in place. ``user`` messages → ``user`` (``input_text`` parts joined with
  ``"\\n"``; images, files and audio become placeholders, with a note).
* Consecutive model-side items — ``reasoning``, assistant ``message`` (``output_text``
  parts), ``function_call``, ``custom_tool_call`` — merge into ONE assistant message, exactly the
  canonical message the gateway recorded for its own reply (so an echoed history is matched to
  the held turn token for token): reasoning → ``reasoning_content``; calls → ``tool_calls`` with
  dict arguments (a custom call's free text becomes ``{"input": text}``); wire ids are dropped.
* ``function_call_output`` / ``custom_tool_call_output`` → ``tool`` messages; their ``call_id``
  must name a call that came earlier in ``input`` (as the real API checks). The output is a
  string or content items (text kept, media as placeholders).
* ``reasoning`` items carry ``encrypted_content`` that THIS gateway issued: the reasoning text,
  base64-encoded and HMAC-signed (signed, not secret). It round-trips even though Codex resends
  reasoning items without their ``content``. Without it, ``content`` ``reasoning_text`` parts
  are used; a blob the gateway cannot read (another server's) is dropped with a note, and so is
  one whose signature fails (its text is still used, with a note).
* ``agent_message`` items (Codex sub-agents) → a ``user`` message
  ``<agent_message author=… recipient=…>\\n…\\n</agent_message>``; encrypted parts become a
  placeholder, with a note.
* Known item types a text model cannot replay (``web_search_call``, ``local_shell_call``,
  ``image_generation_call``, ``compaction``, ``tool_search_call``, MCP items, …) are dropped with
  a note. ``item_reference`` and ``previous_response_id`` are refused (400): this gateway
  stores no responses — send the full history with ``store: false``, as Codex does. Unknown item
  types and roles are refused.
* ``tools``: ``function`` → a canonical function; ``custom`` (freeform, e.g. Codex's
  ``apply_patch``) → a function taking one string argument ``input`` whose description carries
  the grammar, if any; ``namespace`` → each inner tool flattened as ``<namespace>__<name>``.
  Hosted tool types (``web_search``, ``file_search``, ``computer_use_preview``, ``local_shell``,
  ``image_generation``, ``code_interpreter``, ``mcp``, ``tool_search``, …) and unknown tool types
  are dropped with a note, never an error.
* ``max_output_tokens`` (else the gateway default), ``temperature``, ``top_p``, ``top_k`` (an
  extension), ``seed`` (an extension); ``reasoning``, ``text``, ``include``, ``truncation``,
  ``store``, ``prompt_cache_key`` … are accepted; ``background: true``, ``conversation`` and
  ``prompt`` are refused.

Way out — output items in the order reasoning, message, calls. A call to a custom tool goes
out as a ``custom_tool_call`` whose ``input`` is the ``input`` argument; a namespaced call
carries its ``namespace``. ``status`` is ``incomplete`` (``max_output_tokens``) when the budget
ran out. The stream: ``response.created``, ``response.in_progress`` (repeated as the keep-alive
while the engine works), then per item ``response.output_item.added`` … its deltas …
``response.output_item.done`` (messages with ``content_part.added``/``output_text.delta``/
``.done``/``content_part.done``; reasoning with ``reasoning_text`` parts; function calls with
``function_call_arguments.delta/.done``; custom calls with ``custom_tool_call_input.delta/.done``),
and last ``response.completed`` (or ``response.incomplete``) with usage. Every event has a
``sequence_number``.
"""

from __future__ import annotations

import base64
import binascii
import time
from dataclasses import dataclass, field
from typing import Any

from agent_code.protocols import openai_common as oc
from agent_code.protocols.canonical import ChatRequest, Message, ParsedReply, ToolSchema, rest_of
from agent_code.protocols.common import Signer

SEALED_PREFIX = "agent-code.v1."
NAMESPACE_SEPARATOR = "__"
CUSTOM_INPUT = "input"
MESSAGE_TEXT = ("input_text", "output_text", "text")
OUTPUT_TEXT = ("output_text", "input_text", "text", "refusal")
MEDIA = ("input_image", "input_file", "input_audio")
HOSTED_TOOLS = {
    "web_search", "web_search_preview", "web_search_preview_2025_03_11", "web_search_2025_08_26",
    "file_search", "computer", "computer_use", "computer_use_preview", "local_shell", "shell",
    "apply_patch", "image_generation", "code_interpreter", "mcp", "tool_search",
}
SKIPPED_ITEMS = {
    "web_search_call", "file_search_call", "computer_call", "computer_call_output", "local_shell_call",
    "local_shell_call_output", "shell_call", "shell_call_output", "apply_patch_call", "apply_patch_call_output",
    "image_generation_call", "code_interpreter_call", "mcp_list_tools", "mcp_approval_request",
    "mcp_approval_response", "mcp_call", "tool_search_call", "tool_search_output", "additional_tools",
    "compaction", "compaction_summary", "context_compaction", "compaction_trigger", "configuration_update",
    "ghost_snapshot",
}
ROLES = ("user", "assistant", "system", "developer")
REFUSED_FIELDS = {
    "previous_response_id": "this gateway stores no responses; send the full history in input (store: false)",
    "conversation": "this gateway stores no conversations; send the full history in input",
    "prompt": "stored prompt templates are not available on this gateway",
}
KNOWN_FIELDS = {
    "model", "input", "instructions", "tools", "tool_choice", "parallel_tool_calls", "max_output_tokens",
    "max_tool_calls", "temperature", "top_p", "top_k", "seed", "top_logprobs", "stream", "stream_options",
    "store", "include", "reasoning", "text", "truncation", "metadata", "user", "safety_identifier",
    "prompt_cache_key", "prompt_cache_retention", "service_tier", "background", "client_metadata",
    *REFUSED_FIELDS,
}


# ---------------------------------------------------------------------------------------------
# reasoning that round-trips through encrypted_content


def seal_reasoning(text: str, signer: Signer) -> str:
    """``agent-code.v1.<base64 text>.<signature>``: the text itself travels, signed."""
    payload = base64.urlsafe_b64encode(text.encode("utf-8", "surrogatepass")).decode("ascii")
    return f"{SEALED_PREFIX}{payload}.{signer.sign(text)}"


def open_reasoning(token: str, signer: Signer | None) -> tuple[str, bool] | None:
    """(text, signature ok) for a token this gateway sealed; None for anything else."""
    if not isinstance(token, str) or not token.startswith(SEALED_PREFIX):
        return None
    payload, _, signature = token[len(SEALED_PREFIX):].partition(".")
    try:
        raw = base64.b64decode(payload.encode("ascii"), altchars=b"-_", validate=True)
        text = raw.decode("utf-8", "surrogatepass")
    except (binascii.Error, UnicodeError, ValueError):
        return None
    try:
        ok = signer is None or signer.verify(text, signature)
    except Exception:
        ok = False
    return text, ok


# ---------------------------------------------------------------------------------------------
# tools


@dataclass(frozen=True)
class ToolRef:
    """How a canonical tool name goes back on the wire."""

    kind: str                    # "function" or "custom"
    name: str
    namespace: str | None = None


def flat_name(namespace: str | None, name: str) -> str:
    return f"{namespace}{NAMESPACE_SEPARATOR}{name}" if namespace else name


def _custom_schema(tool: dict[str, Any], path: str) -> dict[str, Any]:
    fmt = oc.opt_object(tool, "format", path)
    hint = "The tool's input, as plain text."
    if fmt is not None:
        kind = fmt.get("type")
        if kind not in ("text", "grammar"):
            raise oc.fail(oc.at(path, "format.type"), f"must be 'text' or 'grammar', got {kind!r}")
        if kind == "grammar":
            definition = oc.need_str(fmt, "definition", oc.at(path, "format"))
            syntax = oc.opt_str(fmt, "syntax", oc.at(path, "format")) or "lark"
            hint = f"The tool's input, as plain text matching this {syntax} grammar:\n{definition}"
    return {"type": "object", "properties": {CUSTOM_INPUT: {"type": "string", "description": hint}},
            "required": [CUSTOM_INPUT]}


def _one_tool(tool: object, path: str, namespace: str | None, out: list[ToolSchema],
              refs: dict[str, ToolRef], notes: list[str]) -> None:
    tool = oc.need_object(tool, path)
    kind = tool.get("type")
    if not isinstance(kind, str):
        raise oc.fail(oc.at(path, "type"), f"must be a string, got {oc.type_name(kind)}")
    if kind == "namespace":
        if namespace is not None:
            raise oc.fail(oc.at(path, "type"), "namespaces cannot be nested", "invalid_value")
        ns = oc.need_str(tool, "name", path, non_empty=True)
        oc.opt_str(tool, "description", path)
        for i, inner in enumerate(oc.need_list(tool.get("tools"), oc.at(path, "tools"))):
            _one_tool(inner, oc.at(oc.at(path, "tools"), i), ns, out, refs, notes)
        return
    if kind not in ("function", "custom"):
        what = "hosted tool" if kind in HOSTED_TOOLS else "unknown tool type"
        notes.append(f"{path}: {what} {kind!r} is not available to this model; dropped")
        return
    name = oc.need_str(tool, "name", path, non_empty=True)
    flat = flat_name(namespace, name)
    if flat in refs:
        raise oc.fail(oc.at(path, "name"), f"duplicate tool name {flat!r}")
    description = oc.opt_str(tool, "description", path) or ""
    if kind == "function":
        parameters = oc.opt_object(tool, "parameters", path)
        oc.opt_bool(tool, "strict", path)
        schema = parameters if parameters is not None else {"type": "object", "properties": {}}
    else:
        schema = _custom_schema(tool, path)
    refs[flat] = ToolRef(kind, name, namespace)
    out.append({"type": "function", "function": {"name": flat, "description": description, "parameters": schema}})


def _tools(raw: object, notes: list[str]) -> tuple[list[ToolSchema] | None, dict[str, ToolRef]]:
    refs: dict[str, ToolRef] = {}
    if raw is None:
        return None, refs
    out: list[ToolSchema] = []
    for i, tool in enumerate(oc.need_list(raw, "tools")):
        _one_tool(tool, oc.at("tools", i), None, out, refs, notes)
    return out or None, refs


# ---------------------------------------------------------------------------------------------
# input items


def _output_text(output: object, path: str, notes: list[str]) -> str:
    if isinstance(output, str):
        return output
    if isinstance(output, list):
        return oc.content_text(output, path, notes, text_types=MESSAGE_TEXT, media_types=MEDIA)
    raise oc.fail(path, f"must be a string or an array of content items, got {oc.type_name(output)}")


class _History:
    """Collects canonical messages; consecutive model-side items merge into one assistant message."""

    def __init__(self, instructions: str | None) -> None:
        self.messages: list[Message] = []
        self.pending: Message | None = None
        self.leading_system = True
        if instructions:
            self.messages.append({"role": "system", "content": instructions})

    def flush(self) -> None:
        if self.pending is not None:
            self.messages.append(self.pending)
            self.pending = None

    def add(self, message: Message) -> None:
        self.flush()
        if message["role"] == "system" and self.leading_system and self.messages:
            first = self.messages[0]
            first["content"] = f"{first['content']}\n\n{message['content']}" if first["content"] else message["content"]
            return
        if message["role"] != "system":
            self.leading_system = False
        self.messages.append(message)

    def assistant(self) -> Message:
        self.leading_system = False
        if self.pending is None:
            self.pending = {"role": "assistant", "content": ""}
        return self.pending

    def text(self, text: str) -> None:
        if text:
            reply = self.assistant()
            reply["content"] = f"{reply['content']}\n{text}" if reply["content"] else text
        else:
            self.assistant()

    def reasoning(self, text: str) -> None:
        reply = self.assistant()
        if text:
            prior = reply.get("reasoning_content")
            reply["reasoning_content"] = f"{prior}\n{text}" if prior else text

    def call(self, name: str, arguments: dict[str, Any]) -> None:
        self.assistant().setdefault("tool_calls", []).append(
            {"type": "function", "function": {"name": name, "arguments": arguments}})


def _reasoning_text(item: dict[str, Any], path: str, signer: Signer | None, notes: list[str]) -> str:
    token = oc.opt_str(item, "encrypted_content", path)
    if token:
        opened = open_reasoning(token, signer)
        if opened is not None:
            text, ok = opened
            if not ok:
                notes.append(f"{path}: reasoning signature did not verify; reasoning kept")
            return text
    content = item.get("content")
    if content is not None:
        parts = oc.need_list(content, oc.at(path, "content"))
        texts = []
        for j, part in enumerate(parts):
            where = oc.at(oc.at(path, "content"), j)
            oc.need_object(part, where)
            texts.append(oc.need_str(part, "text", where))
        if texts:
            return "\n".join(texts)
    summary = item.get("summary")
    if summary is not None:
        oc.need_list(summary, oc.at(path, "summary"))
    if token:
        notes.append(f"{path}: encrypted reasoning from another server cannot be read; dropped")
    elif summary:
        notes.append(f"{path}: a reasoning summary is not the model's reasoning; dropped")
    return ""


def _agent_message(item: dict[str, Any], path: str, notes: list[str]) -> Message:
    author = oc.opt_str(item, "author", path) or "agent"
    recipient = oc.opt_str(item, "recipient", path) or "agent"
    texts = []
    for j, part in enumerate(oc.need_list(item.get("content"), oc.at(path, "content"))):
        where = oc.at(oc.at(path, "content"), j)
        oc.need_object(part, where)
        kind = part.get("type")
        if kind in MESSAGE_TEXT:
            texts.append(oc.need_str(part, "text", where))
        elif kind == "encrypted_content":
            notes.append(f"{where}: encrypted agent message content replaced with a placeholder")
            texts.append("[encrypted content omitted]")
        else:
            raise oc.fail(oc.at(where, "type"), f"unknown agent message part type {kind!r}", "invalid_type")
    body = "\n".join(texts)
    return {"role": "user", "content": f'<agent_message author="{author}" recipient="{recipient}">\n'
                                       f"{body}\n</agent_message>"}


def _call_id(item: dict[str, Any], path: str, calls: dict[str, str], kind: str) -> None:
    call_id = oc.need_str(item, "call_id", path, non_empty=True)
    if call_id in calls:
        raise oc.fail(oc.at(path, "call_id"), f"duplicate call_id {call_id!r}", "invalid_tool_call_id")
    calls[call_id] = kind


def _answered(item: dict[str, Any], path: str, calls: dict[str, str]) -> None:
    call_id = oc.need_str(item, "call_id", path, non_empty=True)
    if call_id not in calls:
        raise oc.fail(oc.at(path, "call_id"), f"no tool call found for output with call_id {call_id!r}",
                      "invalid_tool_call_id")


def _input(raw: object, history: _History, signer: Signer | None, notes: list[str]) -> None:
    if isinstance(raw, str):
        history.add({"role": "user", "content": raw})
        return
    calls: dict[str, str] = {}
    for i, item in enumerate(oc.need_list(raw, "input", non_empty=True)):
        path = oc.at("input", i)
        oc.need_object(item, path)
        kind = item.get("type", "message" if "role" in item else None)
        if not isinstance(kind, str):
            raise oc.fail(oc.at(path, "type"), f"must be a string naming the item type, got {oc.type_name(kind)}")
        if kind == "message":
            role = item.get("role")
            if role not in ROLES:
                shown = repr(role) if isinstance(role, str) else oc.type_name(role)
                raise oc.fail(oc.at(path, "role"), f"must be one of {', '.join(ROLES)}, got {shown}", "invalid_value")
            if "content" not in item:
                raise oc.fail(oc.at(path, "content"), "field required", "missing_required_parameter")
            where = oc.at(path, "content")
            if role == "assistant":
                history.text(oc.content_text(item["content"], where, notes, text_types=OUTPUT_TEXT, media_types=()))
            else:
                text = oc.content_text(item["content"], where, notes, text_types=MESSAGE_TEXT,
                                       media_types=MEDIA if role == "user" else ())
                history.add({"role": "user" if role == "user" else "system", "content": text})
        elif kind == "reasoning":
            history.reasoning(_reasoning_text(item, path, signer, notes))
        elif kind == "function_call":
            _call_id(item, path, calls, kind)
            name = oc.need_str(item, "name", path, non_empty=True)
            namespace = oc.opt_str(item, "namespace", path)
            if "arguments" not in item:
                raise oc.fail(oc.at(path, "arguments"), "field required", "missing_required_parameter")
            history.call(flat_name(namespace, name), oc.decode_arguments(item["arguments"], oc.at(path, "arguments")))
        elif kind == "custom_tool_call":
            _call_id(item, path, calls, kind)
            name = oc.need_str(item, "name", path, non_empty=True)
            namespace = oc.opt_str(item, "namespace", path)
            history.call(flat_name(namespace, name), {CUSTOM_INPUT: oc.need_str(item, "input", path)})
        elif kind in ("function_call_output", "custom_tool_call_output"):
            _answered(item, path, calls)
            if "output" not in item:
                raise oc.fail(oc.at(path, "output"), "field required", "missing_required_parameter")
            history.add({"role": "tool", "content": _output_text(item["output"], oc.at(path, "output"), notes)})
        elif kind == "agent_message":
            history.add(_agent_message(item, path, notes))
        elif kind == "item_reference":
            raise oc.fail(path, "item_reference needs stored responses, which this gateway does not keep; "
                          "send the items themselves (store: false)", "unsupported_parameter")
        elif kind in SKIPPED_ITEMS:
            notes.append(f"{path}: {kind} item cannot be replayed to this model; dropped")
        else:
            raise oc.fail(oc.at(path, "type"), f"unknown input item type {kind!r}", "invalid_type")
    history.flush()


# ---------------------------------------------------------------------------------------------
# the request


@dataclass
class ResponsesWire:
    """Wire-side details of one request that the way out needs (and echoes)."""

    model: str
    tool_refs: dict[str, ToolRef] = field(default_factory=dict)
    identity: str | None = None
    echo: dict[str, Any] = field(default_factory=dict)   # request fields the response object repeats


def _accepted_extras(body: dict[str, Any], notes: list[str]) -> None:
    for key in ("reasoning", "text", "stream_options", "client_metadata"):
        oc.opt_object(body, key)
    text = body.get("text") or {}
    fmt = text.get("format")
    if fmt is not None:
        oc.need_object(fmt, "text.format")
        if fmt.get("type") not in (None, "text"):
            notes.append(f"text.format: {fmt.get('type')!r} is not enforced; the reply is free text")
    include = body.get("include")
    if include is not None:
        for i, value in enumerate(oc.need_list(include, "include")):
            if not isinstance(value, str):
                raise oc.fail(oc.at("include", i), f"must be a string, got {oc.type_name(value)}")
    truncation = oc.opt_str(body, "truncation")
    if truncation not in (None, "auto", "disabled"):
        raise oc.fail("truncation", f"must be 'auto' or 'disabled', got {truncation!r}")
    for key in ("safety_identifier", "prompt_cache_key", "prompt_cache_retention", "service_tier"):
        oc.opt_str(body, key)
    oc.opt_bool(body, "store")
    oc.opt_int(body, "max_tool_calls", minimum=1)
    oc.opt_int(body, "top_logprobs", minimum=0)
    if oc.opt_bool(body, "background"):
        raise oc.fail("background", "background responses are not supported", "unsupported_parameter")
    for key, why in REFUSED_FIELDS.items():
        if body.get(key) is not None:
            raise oc.fail(key, f"not supported: {why}", "unsupported_parameter")
    unknown = sorted(k for k in body if k not in KNOWN_FIELDS)
    if unknown:
        notes.append(f"ignored unknown field(s): {', '.join(unknown)}")


def _translate(body: object, signer: Signer | None, default_max_tokens: int | None) -> tuple[ChatRequest, ResponsesWire]:
    if not isinstance(body, dict):
        raise oc.fail(None, f"request body must be a JSON object, got {oc.type_name(body)}")
    model = oc.need_str(body, "model", "", non_empty=True)
    notes: list[str] = []
    _accepted_extras(body, notes)
    sampling = oc.sampling(body, ("max_output_tokens",), default_max_tokens, notes)
    instructions = body.get("instructions")
    if instructions is not None and not isinstance(instructions, str):
        raise oc.fail("instructions", f"must be a string, got {oc.type_name(instructions)}")
    if body.get("input") is None:
        raise oc.fail("input", "field required", "missing_required_parameter")
    history = _History(instructions)
    _input(body["input"], history, signer, notes)
    tools, refs = _tools(body.get("tools"), notes)
    choice = oc.canonical_tool_choice(body.get("tool_choice"), notes,
                                      named={"function": "name", "custom": "name"})
    if choice and choice.get("type") == "tool":
        namespace = body["tool_choice"].get("namespace")
        choice["name"] = flat_name(namespace if isinstance(namespace, str) else None, choice["name"])
    oc.check_forced_tool(choice, set(refs))
    parallel = oc.opt_bool(body, "parallel_tool_calls")
    stream = oc.stream_flag(body)
    sid = oc.identity(body)
    reasoning = body.get("reasoning") or {}
    effort = reasoning.get("effort")
    chat = ChatRequest(messages=history.messages, tools=tools, sampling=sampling, stream=stream, model=model,
                       tool_choice=choice, thinking=bool(effort) and effort != "none", notes=notes)
    echo = {"instructions": instructions, "max_output_tokens": body.get("max_output_tokens"),
            "parallel_tool_calls": True if parallel is None else parallel,
            "temperature": sampling.temperature, "top_p": sampling.top_p,
            "tool_choice": body.get("tool_choice") if body.get("tool_choice") is not None else "auto",
            "tools": body.get("tools") or [], "store": bool(body.get("store", False)),
            "metadata": body.get("metadata") or {}, "user": body.get("user"),
            "prompt_cache_key": body.get("prompt_cache_key"),
            "reasoning": {"effort": effort, "summary": reasoning.get("summary")},
            "text": body.get("text") or {"format": {"type": "text"}},
            "truncation": body.get("truncation") or "disabled"}
    return chat, ResponsesWire(model=model, tool_refs=refs, identity=sid, echo=echo)


def translate_request(body: object, *, signer: Signer | None = None,
                      default_max_tokens: int | None = None) -> tuple[ChatRequest, ResponsesWire]:
    """A ``POST /v1/responses`` body → (ChatRequest, ResponsesWire); raises OpenAIRequestError."""
    try:
        return _translate(body, signer, default_max_tokens)
    except RecursionError:
        raise oc.fail(None, "request body is nested too deeply") from None


# ---------------------------------------------------------------------------------------------
# way out


def new_response_id() -> str:
    return oc.new_id("resp_", 32)


def reasoning_item(text: str, signer: Signer | None, item_id: str | None = None) -> dict[str, Any]:
    return {"id": item_id or oc.new_id("rs_"), "type": "reasoning", "status": "completed", "summary": [],
            "content": [{"type": "reasoning_text", "text": text}],
            "encrypted_content": seal_reasoning(text, signer) if signer else None}


def output_items(reply: ParsedReply, refs: dict[str, ToolRef], signer: Signer | None,
                 ids: dict[str, str] | None = None) -> list[dict[str, Any]]:
    """The completed output items of a reply: reasoning, message, then one item per call.
    Fills empty ToolCallOut ids in place (they become the ``call_id``s). ``ids``: the item ids
    of the reasoning and message items a stream has begun already (by type)."""
    ids = ids or {}
    items: list[dict[str, Any]] = []
    if reply.reasoning:
        items.append(reasoning_item(reply.reasoning, signer, ids.get("reasoning")))
    if reply.text:
        items.append({"id": ids.get("message") or oc.new_id("msg_"), "type": "message", "status": "completed",
                      "role": "assistant",
                      "content": [{"type": "output_text", "text": reply.text, "annotations": [], "logprobs": []}]})
    for call in reply.tool_calls:
        if not call.id:
            call.id = oc.new_id("call_")
        ref = refs.get(call.name) or ToolRef("function", call.name)
        if ref.kind == "custom":
            value = call.arguments.get(CUSTOM_INPUT)
            if not isinstance(value, str):
                strings = [v for v in call.arguments.values() if isinstance(v, str)]
                value = strings[0] if len(call.arguments) == 1 and strings else oc.encode_arguments(call.arguments)
            item = {"id": oc.new_id("ctc_"), "type": "custom_tool_call", "status": "completed",
                    "call_id": call.id, "name": ref.name, "input": value}
        else:
            item = {"id": oc.new_id("fc_"), "type": "function_call", "status": "completed", "call_id": call.id,
                    "name": ref.name, "arguments": oc.encode_arguments(call.arguments)}
        if ref.namespace:
            item["namespace"] = ref.namespace
        items.append(item)
    return items


def usage(input_tokens: int, output_tokens: int) -> dict[str, Any]:
    return {"input_tokens": input_tokens, "input_tokens_details": {"cached_tokens": 0},
            "output_tokens": output_tokens, "output_tokens_details": {"reasoning_tokens": 0},
            "total_tokens": input_tokens + output_tokens}


# The codes OpenAI documents for a Response's ``error.code`` (``response.failed``); clients
# and SDKs that validate the event know no others.
FAILURE_CODES = frozenset({
    "server_error", "rate_limit_exceeded", "invalid_prompt", "vector_store_timeout", "invalid_image",
    "invalid_image_format", "invalid_base64_image", "invalid_image_url", "image_too_large", "image_too_small",
    "image_parse_error", "image_content_policy_violation", "invalid_image_mode", "image_file_too_large",
    "unsupported_image_media_type", "empty_image_file", "failed_to_download_image", "image_file_not_found",
})
_RATE_LIMITED = {"rate_limit_error", "rate_limit_exceeded"}
_REQUEST_FAULTS = {"invalid_request_error", "request_too_large", "not_found", "not_found_error",
                   "permission_error", "authentication_error", "context_length_exceeded"}


def failure_code(code: str | None) -> str:
    """One of :data:`FAILURE_CODES` for an error's code or type: kept when OpenAI documents it;
    a rate limit is ``rate_limit_exceeded``; a fault of the request (refused, too large, not
    allowed) is ``invalid_prompt``; anything else — an engine that failed or is overloaded,
    a full disk, a timeout — is ``server_error``."""
    if code in FAILURE_CODES:
        return code
    if code in _RATE_LIMITED:
        return "rate_limit_exceeded"
    if code in _REQUEST_FAULTS:
        return "invalid_prompt"
    return "server_error"


class ResponseWriter:
    """The response object and SSE events of one request (same id, running sequence numbers)."""

    def __init__(self, wire: ResponsesWire, *, model: str, response_id: str | None = None,
                 created_at: int | None = None) -> None:
        self.wire, self.model = wire, model
        self.response_id = response_id or new_response_id()
        self.created_at = int(time.time()) if created_at is None else created_at
        self.sequence = 0
        self.begun: dict[str, dict[str, Any]] = {}   # item type -> {"id", "index", "sent", "done"}: streamed early

    def response(self, *, status: str, output: list[dict[str, Any]] | None = None,
                 usage: dict[str, Any] | None = None, incomplete_reason: str | None = None,
                 error: dict[str, Any] | None = None) -> dict[str, Any]:
        return {"id": self.response_id, "object": "response", "created_at": self.created_at, "status": status,
                "background": False, "error": error,
                "incomplete_details": {"reason": incomplete_reason} if incomplete_reason else None,
                "model": self.model, "output": output or [], "previous_response_id": None,
                "usage": usage, **self.wire.echo,
                "completed_at": int(time.time()) if status in ("completed", "incomplete") else None}

    def final(self, reply: ParsedReply, *, finish_reason: str, input_tokens: int, output_tokens: int,
              signer: Signer | None) -> dict[str, Any]:
        """The finished response object (the JSON reply, and the payload of the last event)."""
        incomplete = finish_reason == "length" and not reply.tool_calls
        return self.response(status="incomplete" if incomplete else "completed",
                             output=output_items(reply, self.wire.tool_refs, signer,
                                                 {kind: begun["id"] for kind, begun in self.begun.items()}),
                             usage=usage(input_tokens, output_tokens),
                             incomplete_reason="max_output_tokens" if incomplete else None)

    def event(self, kind: str, **data: object) -> tuple[str, dict[str, Any]]:
        payload = {"type": kind, "sequence_number": self.sequence, **data}
        self.sequence += 1
        return kind, payload

    def opening(self) -> list[tuple[str, dict[str, Any]]]:
        """Sent at once, before the engine finishes."""
        return [self.event("response.created", response=self.response(status="in_progress")),
                self.event("response.in_progress", response=self.response(status="in_progress"))]

    def keepalive(self) -> tuple[str, dict[str, Any]]:
        """A real event (clients' idle timers ignore SSE comments); repeating in_progress is harmless."""
        return self.event("response.in_progress", response=self.response(status="in_progress"))

    def failed(self, message: str, code: str | None = "server_error") -> tuple[str, dict[str, Any]]:
        """``response.failed``; ``code`` (an OpenAI error's code or type) becomes one of the codes
        OpenAI documents for a response's error (:func:`failure_code`)."""
        return self.event("response.failed", response=self.response(
            status="failed", error={"code": failure_code(code), "message": message}))

    def reasoning(self, piece: str) -> list[tuple[str, dict[str, Any]]]:
        """A piece of reasoning streamed before the end (a prefix of the final reasoning)."""
        return self._piece("reasoning", piece)

    def reasoning_done(self, reasoning: str, signer: Signer | None) -> list[tuple[str, dict[str, Any]]]:
        begun = self.begun.get("reasoning")
        if begun is None or begun["done"]:
            return []
        begun["done"] = True
        return self._closing(begun["index"], reasoning_item(reasoning, signer, begun["id"]))

    def text(self, piece: str) -> list[tuple[str, dict[str, Any]]]:
        """A piece of text streamed before the end (a prefix of the final text)."""
        return self._piece("message", piece)

    def _piece(self, kind: str, piece: str) -> list[tuple[str, dict[str, Any]]]:
        out = []
        begun = self.begun.get(kind)
        if begun is None:
            begun = self.begun[kind] = {"id": oc.new_id("rs_" if kind == "reasoning" else "msg_"),
                                        "index": len(self.begun), "sent": "", "done": False}
            shell = ({"id": begun["id"], "type": "reasoning", "summary": [],
                      "content": [{"type": "reasoning_text", "text": ""}]} if kind == "reasoning" else
                     {"id": begun["id"], "type": "message", "role": "assistant",
                      "content": [{"type": "output_text", "text": "", "annotations": [], "logprobs": []}]})
            out += self._opening(begun["index"], shell)
        begun["sent"] += piece
        return out + self._deltas(begun["index"], kind, begun["id"], [piece])

    def reply_events(self, final: dict[str, Any], chunk_chars: int = 64) -> list[tuple[str, dict[str, Any]]]:
        """Every event after the opening ones and those streamed already, for the finished
        response ``final``; the last one is ``response.completed`` (or ``response.incomplete``)."""
        events = []
        for index, item in enumerate(final["output"]):
            begun = self.begun.get(item["type"])
            if begun is None:
                events += self._item_events(index, item, chunk_chars)
            elif not begun["done"]:
                rest = rest_of(item["content"][0]["text"], begun["sent"])
                events += self._deltas(index, item["type"], item["id"], [c for c in oc.chunks(rest, chunk_chars) if c])
                events += self._closing(index, item)
        kind = "response.incomplete" if final["status"] == "incomplete" else "response.completed"
        events.append(self.event(kind, response=final))
        return events

    def _opening(self, index: int, item: dict[str, Any]) -> list[tuple[str, dict[str, Any]]]:
        """``output_item.added`` (and for a message or reasoning, ``content_part.added``)."""
        kind, where = item["type"], {"item_id": item["id"], "output_index": index}
        if kind in ("message", "reasoning"):
            extra = {"encrypted_content": None} if kind == "reasoning" else {}
            return [self.event("response.output_item.added", output_index=index,
                               item={**item, "status": "in_progress", "content": [], **extra}),
                    self.event("response.content_part.added", **where, content_index=0,
                               part={**item["content"][0], "text": ""})]
        empty = {"input": ""} if kind == "custom_tool_call" else {"arguments": ""}
        return [self.event("response.output_item.added", output_index=index,
                           item={**item, "status": "in_progress", **empty})]

    def _deltas(self, index: int, kind: str, item_id: str, pieces: list[str]) -> list[tuple[str, dict[str, Any]]]:
        where = {"item_id": item_id, "output_index": index}
        if kind == "message":
            return [self.event("response.output_text.delta", **where, content_index=0, delta=c, logprobs=[])
                    for c in pieces]
        if kind == "reasoning":
            return [self.event("response.reasoning_text.delta", **where, content_index=0, delta=c) for c in pieces]
        name = "custom_tool_call_input" if kind == "custom_tool_call" else "function_call_arguments"
        return [self.event(f"response.{name}.delta", **where, delta=c) for c in pieces]

    def _closing(self, index: int, item: dict[str, Any]) -> list[tuple[str, dict[str, Any]]]:
        """The ``.done`` events of a finished item, ending with ``output_item.done``."""
        ev, kind, where = self.event, item["type"], {"item_id": item["id"], "output_index": index}
        if kind == "message":
            part = item["content"][0]
            out = [ev("response.output_text.done", **where, content_index=0, text=part["text"], logprobs=[]),
                   ev("response.content_part.done", **where, content_index=0, part=part)]
        elif kind == "reasoning":
            part = item["content"][0]
            out = [ev("response.reasoning_text.done", **where, content_index=0, text=part["text"]),
                   ev("response.content_part.done", **where, content_index=0, part=part)]
        elif kind == "function_call":
            out = [ev("response.function_call_arguments.done", **where, name=item["name"],
                      arguments=item["arguments"])]
        else:  # custom_tool_call
            out = [ev("response.custom_tool_call_input.done", **where, input=item["input"])]
        return out + [ev("response.output_item.done", output_index=index, item=item)]

    def _item_events(self, index: int, item: dict[str, Any], size: int) -> list[tuple[str, dict[str, Any]]]:
        if item["type"] in ("message", "reasoning"):
            whole = item["content"][0]["text"]
        else:
            whole = item["input"] if item["type"] == "custom_tool_call" else item["arguments"]
        return (self._opening(index, item) + self._deltas(index, item["type"], item["id"], oc.chunks(whole, size))
                + self._closing(index, item))
