"""What the two OpenAI wire protocols (Chat Completions and Responses) share: the error format,
request validation with OpenAI-style parameter paths, sampling fields, tool-call arguments,
``tool_choice``, content parts, wire ids and SSE framing. Pure functions, no I/O.

Rules that hold on both endpoints:

* Errors are ``{"error": {"message", "type", "param", "code"}}``; ``param`` names the offending
  field the way OpenAI does (``messages[2].tool_calls[0].function.arguments``), and the message
  starts with it.
* Tool-call ``arguments`` arrive as a JSON string and are kept canonically as a dict. An empty
  string means ``{}``; anything else that is not a JSON object is refused (400,
  ``invalid_tool_arguments``) rather than kept as text: this gateway only ever emits valid
  object arguments, so an undecodable one is a client bug, and a string in place of the dict
  would render differently from what the model produced and silently break prefix reuse.
* ``tool_choice`` becomes the canonical (Anthropic-shaped) dict the pipeline understands:
  ``none`` → ``{"type": "none"}``, ``auto`` → ``{"type": "auto"}``, ``required`` →
  ``{"type": "any"}``, a named function → ``{"type": "tool", "name": ...}``.
* Content parts the text-only model cannot read (images, audio, files) become a text
  placeholder where they stood, with a note.
* The session identity in the body is ``metadata.session_id``, else ``user``
  (the ``Authorization`` header still wins; see :mod:`agent_code.gateway.identity`).
"""

from __future__ import annotations

import json
from typing import Any

from agent_code.protocols.canonical import SamplingParams
from agent_code.protocols.common import ProtocolError, random_id
from agent_code.protocols.common import chunks, dumps, sse_data, sse_event  # noqa: F401  (re-exported)
from agent_code.protocols.jsontypes import is_int, is_number, type_name  # noqa: F401  (re-exported)

IMAGE_PLACEHOLDER = "[image omitted: this model reads text only]"
AUDIO_PLACEHOLDER = "[audio omitted: this model reads text only]"
FILE_PLACEHOLDER = "[file omitted: this model reads text only]"
MAX_TEMPERATURE = 2.0


class OpenAIRequestError(ProtocolError):
    """A refused request, with the OpenAI ``param`` and ``code`` the client is sent."""

    def __init__(self, message: str, *, param: str | None = None, code: str | None = None,
                 status: int = 400, kind: str | None = None) -> None:
        super().__init__(f"{param}: {message}" if param else message, status=status, kind=kind)
        self.param = param
        self.code = code


def fail(param: str | None, message: str, code: str | None = None) -> OpenAIRequestError:
    return OpenAIRequestError(message, param=param or None, code=code)


# ---------------------------------------------------------------------------------------------
# paths and types


def at(path: str, key: str | int) -> str:
    """``messages`` + 2 → ``messages[2]``; ``messages[2]`` + ``role`` → ``messages[2].role``."""
    if isinstance(key, int):
        return f"{path}[{key}]"
    return f"{path}.{key}" if path else key


def need_object(value: object, path: str) -> dict[str, Any]:
    if not isinstance(value, dict):
        raise fail(path, f"must be an object, got {type_name(value)}")
    return value


def need_list(value: object, path: str, *, non_empty: bool = False) -> list[Any]:
    if not isinstance(value, list):
        raise fail(path, f"must be an array, got {type_name(value)}")
    if non_empty and not value:
        raise fail(path, "must be a non-empty array")
    return value


def need_str(obj: dict[str, Any], key: str, path: str, *, non_empty: bool = False) -> str:
    where = at(path, key)
    if key not in obj or obj[key] is None:
        raise fail(where, "field required", "missing_required_parameter")
    value = obj[key]
    if not isinstance(value, str):
        raise fail(where, f"must be a string, got {type_name(value)}")
    if non_empty and not value:
        raise fail(where, "must be a non-empty string")
    return value


def opt_str(obj: dict[str, Any], key: str, path: str = "") -> str | None:
    value = obj.get(key)
    if value is not None and not isinstance(value, str):
        raise fail(at(path, key), f"must be a string, got {type_name(value)}")
    return value


def opt_bool(obj: dict[str, Any], key: str, path: str = "") -> bool | None:
    value = obj.get(key)
    if value is not None and not isinstance(value, bool):
        raise fail(at(path, key), f"must be a boolean, got {type_name(value)}")
    return value


def opt_object(obj: dict[str, Any], key: str, path: str = "") -> dict[str, Any] | None:
    value = obj.get(key)
    if value is not None:
        need_object(value, at(path, key))
    return value


def opt_int(obj: dict[str, Any], key: str, *, minimum: int | None = None) -> int | None:
    value = obj.get(key)
    if value is None:
        return None
    if not is_int(value):
        shown = repr(value) if is_number(value) else type_name(value)
        raise fail(key, f"must be an integer, got {shown}")
    if minimum is not None and value < minimum:
        raise fail(key, f"must be at least {minimum}, got {value}")
    return value


def opt_number(obj: dict[str, Any], key: str, low: float, high: float) -> float | None:
    value = obj.get(key)
    if value is None:
        return None
    if not is_number(value) or not low <= value <= high:
        shown = repr(value) if is_number(value) else type_name(value)
        raise fail(key, f"must be a number between {low:g} and {high:g}, got {shown}")
    return float(value)


# ---------------------------------------------------------------------------------------------
# the parts of a body both endpoints have


def sampling(body: dict[str, Any], max_keys: tuple[str, ...], default_max_tokens: int | None,
             notes: list[str]) -> SamplingParams:
    """``temperature``, ``top_p``, ``top_k`` (an extension), ``seed`` and the first given of
    ``max_keys`` (e.g. ``max_completion_tokens``, then ``max_tokens``)."""
    params = SamplingParams()
    limits = [(key, opt_int(body, key, minimum=1)) for key in max_keys]
    given = [value for _, value in limits if value is not None]
    if given:
        params.max_new_tokens = given[0]
    elif default_max_tokens is not None:
        params.max_new_tokens = default_max_tokens
    params.temperature = opt_number(body, "temperature", 0.0, MAX_TEMPERATURE)
    params.top_p = opt_number(body, "top_p", 0.0, 1.0)
    params.top_k = opt_int(body, "top_k", minimum=-1)
    if params.top_k == -1:
        params.top_k = None
    params.seed = opt_int(body, "seed")
    for key in ("frequency_penalty", "presence_penalty"):
        value = opt_number(body, key, -2.0, 2.0)
        if value:
            notes.append(f"{key}: not supported by this gateway; ignored")
    return params


def stop_strings(value: object, path: str = "stop") -> list[str]:
    """``stop``: a string or a list of strings; empty strings are refused."""
    if value is None:
        return []
    items = [value] if isinstance(value, str) else value
    if not isinstance(items, list):
        raise fail(path, f"must be a string or an array of strings, got {type_name(value)}")
    for i, stop in enumerate(items):
        if not isinstance(stop, str) or not stop:
            raise fail(at(path, i) if not isinstance(value, str) else path, "must be a non-empty string")
    return list(items)


def identity(body: dict[str, Any]) -> str | None:
    """The session id a body names: ``metadata.session_id``, else ``user``. Also validates
    ``metadata`` (an object of strings) and ``user`` (a string)."""
    metadata = opt_object(body, "metadata")
    for key, value in (metadata or {}).items():
        if not isinstance(value, str):
            raise fail(at("metadata", key), f"must be a string, got {type_name(value)}")
    user = opt_str(body, "user")
    sid = (metadata or {}).get("session_id") or user or ""
    return sid.strip() or None


def stream_flag(body: dict[str, Any]) -> bool:
    return bool(opt_bool(body, "stream"))


def decode_arguments(raw: object, path: str) -> dict[str, Any]:
    """A tool call's ``arguments`` (a JSON string; an object is accepted as is) → a dict."""
    if isinstance(raw, dict):
        return raw
    if not isinstance(raw, str):
        raise fail(path, f"must be a string of JSON, got {type_name(raw)}")
    if not raw.strip():
        return {}
    try:
        value = json.loads(raw)
    except json.JSONDecodeError as exc:
        raise fail(path, f"is not valid JSON ({exc.msg} at column {exc.colno})", "invalid_tool_arguments") from None
    if not isinstance(value, dict):
        raise fail(path, f"must encode a JSON object, got {type_name(value)}", "invalid_tool_arguments")
    return value


def encode_arguments(arguments: dict[str, Any]) -> str:
    return json.dumps(arguments, ensure_ascii=False)


def canonical_tool_choice(value: object, notes: list[str], *,
                          named: dict[str, str] | None = None) -> dict[str, Any] | None:
    """``tool_choice`` → the pipeline's dict. ``named`` maps an object form's ``type`` to how
    its name is found: ``"function.name"`` (Chat) or ``"name"`` (Responses)."""
    if value is None:
        return None
    if isinstance(value, str):
        mapping = {"none": "none", "auto": "auto", "required": "any"}
        if value not in mapping:
            raise fail("tool_choice", f"must be 'none', 'auto', 'required' or an object, got {value!r}")
        return {"type": mapping[value]}
    value = need_object(value, "tool_choice")
    kind = value.get("type")
    if not isinstance(kind, str):
        raise fail("tool_choice.type", f"must be a string, got {type_name(kind)}")
    where = (named or {}).get(kind)
    if where is not None:
        holder = value
        for part in where.split(".")[:-1]:
            holder = need_object(holder.get(part), at("tool_choice", part))
        name = holder.get(where.split(".")[-1])
        if not isinstance(name, str) or not name:
            raise fail(f"tool_choice.{where}", "must be a non-empty string")
        return {"type": "tool", "name": name}
    if kind == "allowed_tools":
        holder = value.get("allowed_tools", value)
        mode = holder.get("mode") if isinstance(holder, dict) else None
        notes.append("tool_choice: allowed_tools is not enforced; all declared tools stay callable")
        return {"type": "any" if mode == "required" else "auto"}
    notes.append(f"tool_choice: {kind!r} names a tool type this gateway does not serve; treated as auto")
    return {"type": "auto"}


def check_forced_tool(choice: dict[str, Any] | None, declared: set[str]) -> None:
    """A ``tool_choice`` that forces a tool must name a declared one (as the real API checks)."""
    if choice and choice.get("type") == "tool" and choice["name"] not in declared:
        raise fail("tool_choice", f"names tool {choice['name']!r}, which is not among the declared tools")


# ---------------------------------------------------------------------------------------------
# content


def placeholder(kind: str, path: str, notes: list[str]) -> str:
    if "image" in kind:
        text = IMAGE_PLACEHOLDER
    elif "audio" in kind:
        text = AUDIO_PLACEHOLDER
    elif "file" in kind:
        text = FILE_PLACEHOLDER
    else:
        text = f"[{kind} content omitted]"
    notes.append(f"{path}: {kind} part replaced with a text placeholder")
    return text


def content_text(content: object, path: str, notes: list[str], *, text_types: tuple[str, ...],
                 media_types: tuple[str, ...], allow_null: bool = False) -> str:
    """A message's content (a string or a list of parts) as one text; text parts are joined
    with ``"\\n"``, media parts become placeholders, other part types are refused."""
    if content is None and allow_null:
        return ""
    if isinstance(content, str):
        return content
    if not isinstance(content, list):
        raise fail(path, f"must be a string or an array of content parts, got {type_name(content)}")
    parts: list[str] = []
    for i, part in enumerate(content):
        where = at(path, i)
        need_object(part, where)
        kind = part.get("type")
        if not isinstance(kind, str):
            raise fail(at(where, "type"), f"must be a string, got {type_name(kind)}")
        if kind in text_types:
            key = "refusal" if kind == "refusal" else "text"
            parts.append(need_str(part, key, where))
        elif kind in media_types:
            parts.append(placeholder(kind, where, notes))
        else:
            allowed = ", ".join(repr(t) for t in (*text_types, *media_types))
            raise fail(at(where, "type"), f"unknown content part type {kind!r} (expected one of {allowed})",
                       "invalid_type")
    return "\n".join(parts)


# ---------------------------------------------------------------------------------------------
# way out: ids, SSE, errors

def new_id(prefix: str, length: int = 24) -> str:
    return random_id(prefix, length)


# HttpError kinds (shared by all protocols) → the OpenAI error type, status and code
_KINDS = {
    "invalid_request_error": ("invalid_request_error", None),
    "request_too_large": ("invalid_request_error", "request_too_large"),
    "not_found_error": ("invalid_request_error", "not_found"),
    "rate_limit_error": ("rate_limit_error", "rate_limit_exceeded"),
    "overloaded_error": ("server_error", "engine_overloaded"),
    "api_error": ("server_error", None),
}


def error_body(status: int, kind: str, message: str, param: str | None = None,
               code: str | None = None) -> tuple[int, dict[str, Any]]:
    """(status, body) of an OpenAI error. Status 529 (Anthropic's "overloaded") becomes 503,
    which OpenAI clients know to retry."""
    err_type, default_code = _KINDS.get(kind, (kind, None))
    if status == 529:
        status = 503
    return status, {"error": {"message": message, "type": err_type, "param": param,
                              "code": code or default_code}}
