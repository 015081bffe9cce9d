"""OpenAI Chat Completions wire protocol: the way in (request body → ChatRequest) and the way out
(ParsedReply → ``chat.completion`` object or ``chat.completion.chunk`` SSE stream). Pure
functions; shared OpenAI rules (errors, arguments, ``tool_choice``, sampling) live in
:mod:`agent_code.protocols.openai_common`.

Way in:

* ``system`` and ``developer`` messages become ``system`` messages, in place (no merging: a
  Chat client lays out its own conversation). ``user`` content is a string or parts (``text``
  parts joined with ``"\\n"``; ``image_url``/``input_audio``/``file`` become placeholders, with a
  note). ``tool`` messages become ``tool`` messages; their ``tool_call_id`` must name a call of
  the nearest preceding assistant message (as the real API checks), and is then dropped.
* An ``assistant`` message: ``content`` (string, parts, or null → ``""``), ``reasoning_content``
  (kept when non-empty), and ``tool_calls`` — ALL of them, each with a non-empty ``id`` and a
  ``function`` whose JSON-string ``arguments`` are decoded to a dict (see openai_common for the
  refusal rule); the ids are dropped. This is exactly the canonical message the gateway recorded
  for its own reply, so an echoed history matches the held turn token for token.
* ``tools`` of type ``function`` → canonical schemas (``parameters`` missing → an empty object
  schema); other tool types (``custom``, …) are dropped with a note. ``tool_choice`` → the
  canonical dict.
* ``max_completion_tokens``, else ``max_tokens``, else the gateway default; ``temperature``
  (0–2), ``top_p``, ``top_k`` (an extension), ``seed``, ``stop`` (a string or a list). ``n``
  other than 1 is refused. Fields this gateway does not act on (``logprobs``,
  ``response_format``, penalties, ``logit_bias``, …) are accepted with a note when they would
  change the output; unknown top-level fields are ignored with a note (vendor clients send
  extensions such as ``enable_thinking``).

Way out: ``finish_reason`` is ``tool_calls`` when the reply has calls, ``length`` when the
budget ran out, else ``stop``. ``content`` is null when there is no text but there are calls.
Reasoning goes out as ``reasoning_content`` (message and deltas). The stream opens with a role
chunk (sent before the engine finishes), then reasoning, content and tool-call deltas (the first
delta of each call carries its ``index``, ``id``, ``type`` and ``function.name``; the arguments
follow in chunks), a finish chunk, a usage chunk when ``stream_options.include_usage``, and
``data: [DONE]``.
"""

from __future__ import annotations

import time
from dataclasses import dataclass
from typing import Any

from agent_code.protocols import openai_common as oc
from agent_code.protocols.canonical import ChatRequest, Message, ParsedReply, ToolSchema, rest_of

ROLES = ("system", "developer", "user", "assistant", "tool")
USER_TEXT = ("text",)
USER_MEDIA = ("image_url", "input_audio", "file")
ASSISTANT_TEXT = ("text", "refusal")

# top-level fields the translation reads or knowingly accepts
KNOWN_FIELDS = {
    "model", "messages", "tools", "tool_choice", "parallel_tool_calls", "max_tokens", "max_completion_tokens",
    "temperature", "top_p", "top_k", "seed", "stop", "stream", "stream_options", "n", "user", "metadata",
    "logprobs", "top_logprobs", "response_format", "frequency_penalty", "presence_penalty", "logit_bias",
    "reasoning_effort", "store", "service_tier", "modalities", "audio", "prediction", "web_search_options",
    "safety_identifier", "prompt_cache_key", "verbosity", "functions", "function_call",
}


@dataclass
class ChatWire:
    """Wire-side details of one request that the way out needs."""

    model: str
    include_usage: bool = False
    identity: str | None = None


# ---------------------------------------------------------------------------------------------
# way in


def _tool_calls(raw: object, path: str) -> tuple[list[dict[str, Any]], list[str]]:
    calls, ids = [], []
    for i, call in enumerate(oc.need_list(raw, path)):
        where = oc.at(path, i)
        oc.need_object(call, where)
        ids.append(oc.need_str(call, "id", where, non_empty=True))
        kind = call.get("type", "function")
        if kind != "function":
            raise oc.fail(oc.at(where, "type"), f"only 'function' tool calls are supported, got {kind!r}",
                          "invalid_type")
        function = oc.need_object(call.get("function"), oc.at(where, "function"))
        name = oc.need_str(function, "name", oc.at(where, "function"), non_empty=True)
        if "arguments" not in function:
            raise oc.fail(oc.at(where, "function.arguments"), "field required", "missing_required_parameter")
        arguments = oc.decode_arguments(function["arguments"], oc.at(where, "function.arguments"))
        calls.append({"type": "function", "function": {"name": name, "arguments": arguments}})
    return calls, ids


def _messages(raw: object, notes: list[str]) -> list[Message]:
    out: list[Message] = []
    open_ids: set[str] = set()  # call ids of the nearest preceding assistant message
    for i, message in enumerate(oc.need_list(raw, "messages", non_empty=True)):
        path = oc.at("messages", i)
        oc.need_object(message, path)
        role = message.get("role")
        if role not in ROLES:
            shown = repr(role) if isinstance(role, str) else oc.type_name(role)
            raise oc.fail(oc.at(path, "role"), f"must be one of {', '.join(ROLES)}, got {shown}", "invalid_value")
        content = message.get("content")
        where = oc.at(path, "content")
        if role in ("system", "developer"):
            if content is None:
                raise oc.fail(where, "field required", "missing_required_parameter")
            text = oc.content_text(content, where, notes, text_types=USER_TEXT, media_types=())
            out.append({"role": "system", "content": text})
        elif role == "user":
            if content is None:
                raise oc.fail(where, "field required", "missing_required_parameter")
            text = oc.content_text(content, where, notes, text_types=USER_TEXT, media_types=USER_MEDIA)
            out.append({"role": "user", "content": text})
        elif role == "tool":
            call_id = oc.need_str(message, "tool_call_id", path, non_empty=True)
            if call_id not in open_ids:
                raise oc.fail(oc.at(path, "tool_call_id"),
                              f"{call_id!r} answers no tool call of the preceding assistant message",
                              "invalid_tool_call_id")
            if content is None:
                raise oc.fail(where, "field required", "missing_required_parameter")
            text = oc.content_text(content, where, notes, text_types=USER_TEXT, media_types=USER_MEDIA)
            out.append({"role": "tool", "content": text})
        else:
            if message.get("function_call") is not None:
                raise oc.fail(oc.at(path, "function_call"), "the legacy function_call is not supported; "
                              "use tool_calls", "unsupported_parameter")
            text = oc.content_text(content, where, notes, text_types=ASSISTANT_TEXT, media_types=(),
                                   allow_null=True)
            reply: Message = {"role": "assistant", "content": text}
            reasoning = oc.opt_str(message, "reasoning_content", path)
            if reasoning:
                reply["reasoning_content"] = reasoning
            calls, ids = ([], []) if message.get("tool_calls") is None else \
                _tool_calls(message["tool_calls"], oc.at(path, "tool_calls"))
            if calls:
                reply["tool_calls"] = calls
            open_ids = set(ids)
            out.append(reply)
    return out


def _tools(raw: object, notes: list[str]) -> list[ToolSchema] | None:
    if raw is None:
        return None
    out: list[ToolSchema] = []
    seen: set[str] = set()
    for i, tool in enumerate(oc.need_list(raw, "tools")):
        path = oc.at("tools", i)
        oc.need_object(tool, path)
        kind = tool.get("type")
        if not isinstance(kind, str):
            raise oc.fail(oc.at(path, "type"), f"must be a string, got {oc.type_name(kind)}")
        if kind != "function":
            notes.append(f"{path}: tool type {kind!r} is not served on chat completions; dropped")
            continue
        function = oc.need_object(tool.get("function"), oc.at(path, "function"))
        fpath = oc.at(path, "function")
        name = oc.need_str(function, "name", fpath, non_empty=True)
        if name in seen:
            raise oc.fail(oc.at(fpath, "name"), f"duplicate tool name {name!r}")
        seen.add(name)
        description = oc.opt_str(function, "description", fpath) or ""
        parameters = oc.opt_object(function, "parameters", fpath)
        oc.opt_bool(function, "strict", fpath)
        out.append({"type": "function", "function": {
            "name": name, "description": description,
            "parameters": parameters if parameters is not None else {"type": "object", "properties": {}}}})
    return out or None


def _accepted_extras(body: dict[str, Any], notes: list[str]) -> None:
    """Fields that are validated for type and otherwise not acted on."""
    n = oc.opt_int(body, "n", minimum=1)
    if n is not None and n != 1:
        raise oc.fail("n", f"only n=1 is supported, got {n}", "unsupported_value")
    if oc.opt_bool(body, "logprobs"):
        notes.append("logprobs: not returned by this gateway (the trajectory records them)")
    oc.opt_int(body, "top_logprobs", minimum=0)
    response_format = oc.opt_object(body, "response_format")
    if response_format is not None:
        kind = response_format.get("type")
        if not isinstance(kind, str):
            raise oc.fail("response_format.type", f"must be a string, got {oc.type_name(kind)}")
        if kind != "text":
            notes.append(f"response_format: {kind!r} is not enforced; the reply is free text")
    if oc.opt_object(body, "logit_bias"):
        notes.append("logit_bias: not supported; ignored")
    for key in ("reasoning_effort", "service_tier", "safety_identifier", "prompt_cache_key", "verbosity"):
        oc.opt_str(body, key)
    for key in ("store",):
        oc.opt_bool(body, key)
    for key in ("audio", "prediction", "web_search_options"):
        oc.opt_object(body, key)
    if body.get("modalities") is not None:
        oc.need_list(body["modalities"], "modalities")
    if body.get("functions") is not None or body.get("function_call") is not None:
        raise oc.fail("functions" if body.get("functions") is not None else "function_call",
                      "the legacy functions API is not supported; use tools", "unsupported_parameter")
    unknown = sorted(k for k in body if k not in KNOWN_FIELDS)
    if unknown:
        notes.append(f"ignored unknown field(s): {', '.join(unknown)}")


def _translate(body: object, default_max_tokens: int | None) -> tuple[ChatRequest, ChatWire]:
    if not isinstance(body, dict):
        raise oc.fail(None, f"request body must be a JSON object, got {oc.type_name(body)}")
    model = oc.need_str(body, "model", "", non_empty=True)
    notes: list[str] = []
    sampling = oc.sampling(body, ("max_completion_tokens", "max_tokens"), default_max_tokens, notes)
    sampling.stop = oc.stop_strings(body.get("stop"))
    messages = _messages(body.get("messages"), notes)
    tools = _tools(body.get("tools"), notes)
    declared = {t["function"]["name"] for t in tools or []}
    tool_choice = oc.canonical_tool_choice(body.get("tool_choice"), notes,
                                           named={"function": "function.name"})
    oc.check_forced_tool(tool_choice, declared)
    if oc.opt_bool(body, "parallel_tool_calls") is False:
        notes.append("parallel_tool_calls: false is not enforced; every call the model makes is returned")
    stream = oc.stream_flag(body)
    options = oc.opt_object(body, "stream_options")
    include_usage = bool(oc.opt_bool(options or {}, "include_usage", "stream_options"))
    sid = oc.identity(body)
    _accepted_extras(body, notes)
    effort = body.get("reasoning_effort")
    chat = ChatRequest(messages=messages, tools=tools, sampling=sampling, stream=stream, model=model,
                       tool_choice=tool_choice, thinking=bool(effort) and effort != "none", notes=notes)
    return chat, ChatWire(model=model, include_usage=include_usage and stream, identity=sid)


def translate_request(body: object, *, default_max_tokens: int | None = None) -> tuple[ChatRequest, ChatWire]:
    """A ``POST /v1/chat/completions`` body → (ChatRequest, ChatWire); raises OpenAIRequestError."""
    try:
        return _translate(body, default_max_tokens)
    except RecursionError:
        raise oc.fail(None, "request body is nested too deeply") from None


# ---------------------------------------------------------------------------------------------
# way out


def finish_reason_for(reply: ParsedReply, finish_reason: str) -> str:
    if reply.tool_calls:
        return "tool_calls"
    if finish_reason == "length":
        return "length"
    return "stop"


def new_completion_id() -> str:
    return oc.new_id("chatcmpl-")


def _assign_ids(reply: ParsedReply) -> None:
    for call in reply.tool_calls:
        if not call.id:
            call.id = oc.new_id("call_")


def usage(prompt_tokens: int, completion_tokens: int) -> dict[str, int]:
    return {"prompt_tokens": prompt_tokens, "completion_tokens": completion_tokens,
            "total_tokens": prompt_tokens + completion_tokens}


def completion_body(reply: ParsedReply, *, completion_id: str, created: int, model: str, finish_reason: str,
                    prompt_tokens: int, completion_tokens: int) -> dict[str, Any]:
    """The ``chat.completion`` object for a reply."""
    _assign_ids(reply)
    message: dict[str, Any] = {"role": "assistant",
                               "content": reply.text if reply.text or not reply.tool_calls else None,
                               "refusal": None}
    if reply.reasoning:
        message["reasoning_content"] = reply.reasoning
    if reply.tool_calls:
        message["tool_calls"] = [{"id": c.id, "type": "function",
                                  "function": {"name": c.name, "arguments": oc.encode_arguments(c.arguments)}}
                                 for c in reply.tool_calls]
    return {"id": completion_id, "object": "chat.completion", "created": created, "model": model,
            "system_fingerprint": None,
            "choices": [{"index": 0, "message": message, "logprobs": None, "finish_reason": finish_reason}],
            "usage": usage(prompt_tokens, completion_tokens)}


class ChunkMaker:
    """Builds the ``chat.completion.chunk`` objects of one streamed reply (same id throughout)."""

    def __init__(self, *, completion_id: str, model: str, include_usage: bool, created: int | None = None) -> None:
        self.completion_id, self.model, self.include_usage = completion_id, model, include_usage
        self.created = int(time.time()) if created is None else created
        self.sent_reasoning = self.sent_text = ""

    def chunk(self, delta: dict[str, Any], finish_reason: str | None = None) -> dict[str, Any]:
        out = {"id": self.completion_id, "object": "chat.completion.chunk", "created": self.created,
               "model": self.model, "system_fingerprint": None,
               "choices": [{"index": 0, "delta": delta, "logprobs": None, "finish_reason": finish_reason}]}
        if self.include_usage:
            out["usage"] = None
        return out

    def opening(self) -> dict[str, Any]:
        """Sent at once, before the engine finishes."""
        return self.chunk({"role": "assistant", "content": ""})

    def reasoning(self, piece: str) -> list[dict[str, Any]]:
        """A piece of reasoning streamed before the end (a prefix of the final reasoning)."""
        self.sent_reasoning += piece
        return [self.chunk({"reasoning_content": piece})]

    def text(self, piece: str) -> list[dict[str, Any]]:
        """A piece of text streamed before the end (a prefix of the final text)."""
        self.sent_text += piece
        return [self.chunk({"content": piece})]

    def reply(self, reply: ParsedReply, *, finish_reason: str, prompt_tokens: int, completion_tokens: int,
              chunk_chars: int = 64) -> list[dict[str, Any]]:
        """Every chunk after the opening one and those streamed already, in order, ending with
        the finish chunk (and the usage chunk when asked for)."""
        _assign_ids(reply)
        out = []
        if reply.reasoning:
            rest = rest_of(reply.reasoning, self.sent_reasoning)
            out += [self.chunk({"reasoning_content": c}) for c in oc.chunks(rest, chunk_chars) if c]
        if reply.text:
            out += [self.chunk({"content": c}) for c in oc.chunks(rest_of(reply.text, self.sent_text), chunk_chars)
                    if c]
        for index, call in enumerate(reply.tool_calls):
            out.append(self.chunk({"tool_calls": [{"index": index, "id": call.id, "type": "function",
                                                   "function": {"name": call.name, "arguments": ""}}]}))
            for piece in oc.chunks(oc.encode_arguments(call.arguments), chunk_chars):
                out.append(self.chunk({"tool_calls": [{"index": index, "function": {"arguments": piece}}]}))
        out.append(self.chunk({}, finish_reason))
        if self.include_usage:
            out.append({"id": self.completion_id, "object": "chat.completion.chunk", "created": self.created,
                        "model": self.model, "system_fingerprint": None, "choices": [],
                        "usage": usage(prompt_tokens, completion_tokens)})
        return out


DONE = b"data: [DONE]\n\n"
KEEPALIVE = b": keep-alive\n\n"
