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

**Dropped reasoning.** Most clients do not echo the model's reasoning: a Chat Completions
client drops ``reasoning_content`` from the assistant messages it resends, an Anthropic client
drops the ``thinking`` blocks (always, when it did not ask for thinking: the gateway sends none
then). The echo form of an assistant message therefore leaves its reasoning out, and
:func:`reasoning_echo_ok` keeps the tolerance to that exact drop: an echoed message that does
carry reasoning must carry the held reasoning, character for character (a client that rewrites
the reasoning, or adds some to a reply that had none, does not continue the held turn: a new
root, as before). Visible text and tool calls are compared as always, so a client that drops
the reasoning *and* changes the text is not merged either. The drop is noted like the rows
above (``"part": "reasoning"``, with the number of characters dropped, not the text).

| client | rewrite | shown by |
|---|---|---|
| Chat Completions clients (OpenAI SDK agents, …) | drop ``reasoning_content`` | ``tests/test_echo_retention.py::test_chat_client_dropping_reasoning_is_one_sample`` |
| Anthropic clients | drop ``thinking`` blocks | ``tests/test_echo_retention.py::test_anthropic_client_dropping_thinking_is_one_sample`` |

**Thinking retention (what later prompts hold of the model's reasoning).** Under the ``tokens``
history policy (the default) a turn's prompt is its parent's prompt and output, held: the model's
reasoning stays in every later prompt exactly as it was sampled, whether the client echoed it,
dropped it, or the chat template would strip it from earlier turns (Qwen3's does). What the
model saw is what it generated, and a conversation stays one sample. Under the ``template``
policy the prompt is what the template renders from the messages the client sent: a dropped
reasoning is not rendered (nor, with templates that strip earlier reasoning, an echoed one),
the held reply then differs from the rendering inside its output, and the sampled tokens past
that point are masked out of training (a ``realigned`` drift event), as for any re-render.
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


REASONING = "reasoning_content"
DROPS_REASONING = "drops the model's reasoning (reasoning_content, thinking blocks) from the replies it echoes"


def reasoning_echo_ok(echoed: Mapping[str, Any], held: Mapping[str, Any]) -> bool:
    """Whether ``echoed`` shows ``held``'s reasoning as :func:`echo_form` tolerates it: left out,
    or exactly as held."""
    return REASONING not in echoed or echoed.get(REASONING) == held.get(REASONING)


def echo_form(message: Mapping[str, Any], tool_schemas: Schemas) -> Mapping[str, Any]:
    """An assistant message without its reasoning and with every tool call's arguments in echo
    form (others unchanged; the message itself when nothing changes, so the common case copies
    nothing)."""
    if message.get("role") != "assistant":
        return message
    if REASONING in message:
        message = {k: v for k, v in message.items() if k != REASONING}
    calls = message.get("tool_calls")
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
    """Notes for the reasoning the client left out and each tool call it echoed rewritten
    (``held``: the model's reply)."""
    notes: list[dict[str, Any]] = []
    reasoning = held.get(REASONING)
    if reasoning and REASONING not in echoed:
        notes.append({"kind": "client-rewrite", "turn": turn, "part": "reasoning", "rewrites": [DROPS_REASONING],
                      "dropped_chars": len(reasoning)})
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
