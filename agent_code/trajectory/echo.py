"""How clients echo the model's tool calls back, and which of their rewrites a session tolerates.

An agent CLI resends its whole conversation every turn, the model's earlier replies included.
Some clients do not echo a tool call as the model generated it: they normalise its input first.
The token history (``history.py``) finds a request's parent turn by comparing the request's
messages with the replies it holds, so an echoed call that differs from the sampled one would
start a new root, and one conversation would become several samples.

The rewrites a client makes on its own are listed in :data:`REWRITES`, one row each, with the
test that shows the client doing it. Both sides of the comparison — the reply the model
generated and the message the client echoed — are brought to one *echo form* by every row's
``apply``; two tool calls with the same echo form are the same call. Anything else that differs
(other arguments, another tool, other text) still breaks the match, as before: a fork (or a
realignment under the template policy) with its drift event.

When a match needed a rewrite, the turn records a note (:func:`differences`) — which call of
which turn, what the model generated, what the client echoed, which rows explain it — and the
gateway logs it. The prompt still reuses the ids the model sampled: what the model really saw is
what it generated.

| client | tool | rewrite | shown by |
|---|---|---|---|
| Claude Code | any | fills in the arguments its tool schema gives a ``default`` (``Edit``: ``"replace_all": false``) | ``tests/test_client_conformance.py::test_claude_code_conversation_is_one_sample`` |
| Claude Code | ``Bash`` | drops a leading ``cd <its working directory> &&`` from ``command`` | same |
| Qwen Code | any | re-serialises ``arguments`` as compact JSON (keys in the model's order) and echoes an empty ``content`` as ``null``: no row, both parse to the held reply | ``tests/test_client_conformance_codex_qwen.py::test_qwen_code_conversation_is_one_sample`` |
| Codex | any | none: echoes every call byte for byte (``exec_command``, a ``cd <dir> &&`` prefix kept, ``spawn_agent``, the freeform ``apply_patch``) | ``tests/test_client_conformance_codex_qwen.py::test_codex_conversation_is_one_sample``, ``::test_codex_freeform_apply_patch_conversation_is_one_sample`` |

A row applies to a tool, whoever the client is: the gateway does not know which client sent a
request, so a row observed in one client tolerates the same rewrite from any other (the
defaults row: any tool whose schema declares a default; the ``cd`` row: any tool named ``Bash``).
Both rewrites keep the call's meaning, so tolerating them from a client that does not make
them costs nothing.

Keys in another order and JSON re-serialisation never matter: arguments are compared as parsed
JSON objects, keys sorted.
"""

from __future__ import annotations

import copy
import re
from dataclasses import dataclass
from typing import Any, Callable, Mapping, Sequence

Args = dict[str, Any]
Schemas = Mapping[str, Mapping[str, Any]]     # tool name -> its JSON-schema properties

_LEADING_CD = re.compile(r"^\s*cd\s+(?:'[^']*'|\"[^\"]*\"|[^\s;&|'\"]+)\s*&&\s*", re.DOTALL)


@dataclass(frozen=True)
class Rewrite:
    client: str
    tools: frozenset[str] | None          # the tools it applies to (None: every tool)
    what: str
    apply: Callable[[str, Args, Mapping[str, Any]], Args]   # (tool, arguments, schema properties) -> echo form


def _fill_defaults(tool: str, args: Args, props: Mapping[str, Any]) -> Args:
    missing = {k: v["default"] for k, v in props.items() if isinstance(v, dict) and "default" in v and k not in args}
    return {**args, **copy.deepcopy(missing)} if missing else args


def _strip_cd(tool: str, args: Args, props: Mapping[str, Any]) -> Args:
    command = args.get("command")
    if isinstance(command, str):
        stripped = _LEADING_CD.sub("", command, count=1)
        if stripped != command and stripped.strip():
            return {**args, "command": stripped}
    return args


REWRITES: tuple[Rewrite, ...] = (
    Rewrite("Claude Code", None, "fills in arguments whose schema has a default", _fill_defaults),
    Rewrite("Claude Code", frozenset({"Bash"}), "drops a leading `cd <cwd> &&` from the command", _strip_cd),
)


def schemas(tools: Sequence[Mapping[str, Any]] | None) -> dict[str, Mapping[str, Any]]:
    """Tool name -> the properties of its input schema (canonical tools: OpenAI function form)."""
    out: dict[str, Mapping[str, Any]] = {}
    for tool in tools or ():
        fn = tool.get("function", tool) if isinstance(tool, Mapping) else {}
        if not isinstance(fn, Mapping) or not isinstance(fn.get("name"), str):
            continue
        params = fn.get("parameters") or fn.get("input_schema") or {}
        props = params.get("properties") if isinstance(params, Mapping) else None
        out[fn["name"]] = props if isinstance(props, Mapping) else {}
    return out


def _call_parts(call: object) -> tuple[str | None, object]:
    fn = call.get("function") if isinstance(call, Mapping) else None
    if not isinstance(fn, Mapping):
        return None, None
    return fn.get("name"), fn.get("arguments")


def echo_args(tool: str, args: object, props: Mapping[str, Any],
              rewrites: Sequence[Rewrite] = REWRITES) -> tuple[object, list[str]]:
    """``args`` in echo form, and what each rewrite that changed it did."""
    if not isinstance(args, dict):
        return args, []
    applied: list[str] = []
    for rewrite in rewrites:
        if rewrite.tools is not None and tool not in rewrite.tools:
            continue
        new = rewrite.apply(tool, args, props)
        if new != args:
            applied.append(f"{rewrite.client}: {rewrite.what}")
            args = new
    return args, applied


def echo_form(message: Mapping[str, Any], tool_schemas: Schemas) -> Mapping[str, Any]:
    """An assistant message with every tool call's arguments in echo form (others unchanged;
    the message itself when nothing changes, so the common case copies nothing)."""
    calls = message.get("tool_calls") if message.get("role") == "assistant" else None
    if not calls:
        return message
    new_calls, changed = [], False
    for call in calls:
        name, args = _call_parts(call)
        if name is None:
            new_calls.append(call)
            continue
        new_args, applied = echo_args(name, args, tool_schemas.get(name, {}))
        if applied:
            changed = True
            call = {**call, "function": {**call["function"], "arguments": new_args}}
        new_calls.append(call)
    return {**message, "tool_calls": new_calls} if changed else message


def differences(held: Mapping[str, Any], echoed: Mapping[str, Any], tool_schemas: Schemas,
                turn: int) -> list[dict[str, Any]]:
    """Notes for each tool call the client echoed rewritten (``held``: the model's reply)."""
    notes: list[dict[str, Any]] = []
    held_calls, echoed_calls = held.get("tool_calls") or [], echoed.get("tool_calls") or []
    for position, (h, e) in enumerate(zip(held_calls, echoed_calls)):
        name, held_args = _call_parts(h)
        _, echoed_args = _call_parts(e)
        if name is None or held_args == echoed_args:
            continue
        props = tool_schemas.get(name, {})
        _, by_model = echo_args(name, held_args, props)
        _, by_client = echo_args(name, echoed_args, props)
        notes.append({"kind": "client-rewrite", "turn": turn, "call": position, "tool": name,
                      "rewrites": sorted(set(by_model) | set(by_client)),
                      "generated": held_args, "echoed": echoed_args})
    return notes
