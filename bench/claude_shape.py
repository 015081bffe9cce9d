"""Claude-Code-shaped sessions for the gateway benchmarks (shared by ``gateway_overhead.py``
and ``load.py``).

A session looks like what Claude Code sends: a long system prompt, ~20 tools whose schemas
have Claude Code's names, parameters and description sizes (the descriptions are filler
prose of the real lengths, not Anthropic's text), and a history that grows by one tool call
and one tool result per turn. The same conversation can be written in each wire protocol the
gateway serves: Anthropic Messages, OpenAI Chat Completions and OpenAI Responses.

The engine's reply for these sessions is a Hermes ``<tool_call>`` to ``Read``
(:data:`READ_CALL_TEXT`); the ``instant`` engine answers it by default.
"""

from __future__ import annotations

import json
from typing import Any

WORDS = ("the agent reads files searches code edits safely runs tests and reports back to the user "
         "always prefer small focused changes check the repository conventions before editing").split()

# The engine reply every benchmark turn gets (a call to a declared tool).
READ_CALL = {"name": "Read", "arguments": {"file_path": "/work/src/app.py"}}
READ_CALL_TEXT = "<tool_call>\n" + json.dumps(READ_CALL) + "\n</tool_call>"

_S, _I, _B, _N = "string", "integer", "boolean", "number"

# (name, description words, {param: (type, description words)}, required) — Claude Code's tool
# set and parameters; the description lengths follow the real ones (Bash, Task and TodoWrite
# are long).
_TOOLS: list[tuple[str, int, dict[str, tuple[Any, int]], list[str]]] = [
    ("Task", 900, {"description": (_S, 12), "prompt": (_S, 8), "subagent_type": (_S, 10)},
     ["description", "prompt", "subagent_type"]),
    ("Bash", 1400, {"command": (_S, 6), "timeout": (_N, 12), "description": (_S, 40),
                    "run_in_background": (_B, 20), "dangerouslyDisableSandbox": (_B, 15)}, ["command"]),
    ("Glob", 160, {"pattern": (_S, 8), "path": (_S, 40)}, ["pattern"]),
    ("Grep", 420, {"pattern": (_S, 12), "path": (_S, 14), "glob": (_S, 16), "output_mode": (_S, 30),
                   "-B": (_N, 18), "-A": (_N, 18), "-C": (_N, 18), "-n": (_B, 14), "-i": (_B, 6),
                   "type": (_S, 24), "head_limit": (_N, 28), "multiline": (_B, 20)}, ["pattern"]),
    ("ExitPlanMode", 260, {"plan": (_S, 20)}, ["plan"]),
    ("Read", 420, {"file_path": (_S, 8), "offset": (_N, 16), "limit": (_N, 14)}, ["file_path"]),
    ("Edit", 300, {"file_path": (_S, 8), "old_string": (_S, 6), "new_string": (_S, 10),
                   "replace_all": (_B, 10)}, ["file_path", "old_string", "new_string"]),
    ("MultiEdit", 520, {"file_path": (_S, 8), "edits": ("array", 10)}, ["file_path", "edits"]),
    ("Write", 220, {"file_path": (_S, 14), "content": (_S, 6)}, ["file_path", "content"]),
    ("NotebookEdit", 160, {"notebook_path": (_S, 12), "cell_id": (_S, 20), "new_source": (_S, 6),
                           "cell_type": (_S, 14), "edit_mode": (_S, 14)}, ["notebook_path", "new_source"]),
    ("WebFetch", 380, {"url": (_S, 6), "prompt": (_S, 8)}, ["url", "prompt"]),
    ("TodoWrite", 1700, {"todos": ("array", 6)}, ["todos"]),
    ("WebSearch", 240, {"query": (_S, 6), "allowed_domains": ("array", 10), "blocked_domains": ("array", 10)},
     ["query"]),
    ("BashOutput", 120, {"bash_id": (_S, 10), "filter": (_S, 26)}, ["bash_id"]),
    ("KillShell", 60, {"shell_id": (_S, 8)}, ["shell_id"]),
    ("SlashCommand", 300, {"command": (_S, 12)}, ["command"]),
    ("Skill", 350, {"skill": (_S, 10)}, ["skill"]),
    ("AskUserQuestion", 420, {"questions": ("array", 10), "answers": ("object", 8)}, ["questions"]),
    ("ListMcpResourcesTool", 60, {"server": (_S, 10)}, []),
    ("ReadMcpResourceTool", 60, {"server": (_S, 6), "uri": (_S, 6)}, ["server", "uri"]),
]


def prose(n_words: int, seed: int) -> str:
    """Deterministic filler text of ``n_words`` words."""
    return " ".join(WORDS[(i * 7 + seed) % len(WORDS)] for i in range(n_words))


def _schema(kind: str, words: int, seed: int) -> dict[str, Any]:
    schema: dict[str, Any] = {"type": kind, "description": prose(words, seed)}
    if kind == "array":
        schema["items"] = {"type": "object", "properties": {"content": {"type": "string", "minLength": 1},
                                                            "status": {"type": "string",
                                                                       "enum": ["pending", "in_progress",
                                                                                "completed"]}},
                           "required": ["content", "status"], "additionalProperties": False}
    return schema


def claude_code_tools(n: int = len(_TOOLS)) -> list[dict[str, Any]]:
    """Anthropic ``tools``: the first ``n`` of Claude Code's tools (cycled with a numeric
    suffix beyond its 20)."""
    tools = []
    for i in range(n):
        name, words, params, required = _TOOLS[i % len(_TOOLS)]
        if i >= len(_TOOLS):
            name = f"{name}{i // len(_TOOLS)}"
        props = {p: _schema(kind, w, i * 13 + j) for j, (p, (kind, w)) in enumerate(params.items())}
        tools.append({"name": name, "description": prose(words, i),
                      "input_schema": {"type": "object", "properties": props, "required": required,
                                       "additionalProperties": False,
                                       "$schema": "http://json-schema.org/draft-07/schema#"}})
    return tools


def system_prompt(n_words: int = 2600) -> str:
    """A system prompt of ``n_words`` words (Claude Code's own is ~2,600 words plus its
    environment block and CLAUDE.md)."""
    return prose(n_words, 1)


def tool_result(turn: int, n_words: int = 220) -> str:
    """The text of the tool result answering turn ``turn``'s call."""
    return prose(n_words, turn)


FIRST_USER = "Fix the failing test in src/app.py."


class Conversation:
    """One Claude-Code-shaped conversation written in one wire protocol.

    ``body()`` is the next request's JSON bytes; ``add_reply(reply_json, turn)`` appends the
    model's reply and a tool result answering each of its calls. The system prompt and tools
    are serialized once and every message once, so a long conversation costs the client
    little more than the bytes it sends.
    """

    def __init__(self, protocol: str, *, system: str, tools: list[dict[str, Any]], model: str = "bench",
                 max_tokens: int = 512, result_words: int = 220) -> None:
        if protocol not in PROTOCOLS:
            raise ValueError(f"unknown protocol {protocol!r} (choose from {', '.join(PROTOCOLS)})")
        self.protocol = protocol
        self.result_words = result_words
        self.messages: list[bytes] = []
        head = {"model": model}
        if protocol == "anthropic":
            head.update(max_tokens=max_tokens, system=system, tools=tools)
            self.path, key, first = "/v1/messages", "messages", [{"role": "user", "content": FIRST_USER}]
        elif protocol == "openai-chat":
            head.update(max_tokens=max_tokens, tools=[{"type": "function", "function": {
                "name": t["name"], "description": t["description"], "parameters": t["input_schema"]}}
                for t in tools])
            self.path, key = "/v1/chat/completions", "messages"
            first = [{"role": "system", "content": system}, {"role": "user", "content": FIRST_USER}]
        else:
            head.update(max_output_tokens=max_tokens, instructions=system, store=False, tools=[
                {"type": "function", "name": t["name"], "description": t["description"],
                 "parameters": t["input_schema"], "strict": False} for t in tools])
            self.path, key = "/v1/responses", "input"
            first = [{"type": "message", "role": "user", "content": [{"type": "input_text", "text": FIRST_USER}]}]
        self._head = json.dumps(head)[:-1].encode() + f', "{key}": ['.encode()
        self._extend(first)

    def _extend(self, items: list[dict[str, Any]]) -> None:
        self.messages.extend(json.dumps(item).encode() for item in items)

    def body(self) -> bytes:
        return self._head + b", ".join(self.messages) + b"]}"

    def add_reply(self, reply: dict[str, Any], turn: int) -> int:
        """Append the reply (the parsed JSON response) and one tool result per call in it;
        returns the number of calls."""
        result = tool_result(turn, self.result_words)
        if self.protocol == "anthropic":
            content = reply["content"]
            calls = [b["id"] for b in content if b["type"] == "tool_use"]
            self._extend([{"role": "assistant", "content": content}])
            self._extend([{"role": "user", "content": [{"type": "tool_result", "tool_use_id": c, "content": result}
                                                       for c in calls]}] if calls else [])
        elif self.protocol == "openai-chat":
            message = reply["choices"][0]["message"]
            calls = [c["id"] for c in message.get("tool_calls") or []]
            self._extend([{k: v for k, v in message.items() if v is not None}])
            self._extend([{"role": "tool", "tool_call_id": c, "content": result} for c in calls])
        else:
            output = reply["output"]
            calls = [o["call_id"] for o in output if o["type"] == "function_call"]
            self._extend(output)
            self._extend([{"type": "function_call_output", "call_id": c, "output": result} for c in calls])
        if not calls:
            self._extend([{"role": "user", "content": "Go on."} if self.protocol != "openai-responses" else
                          {"type": "message", "role": "user", "content": [{"type": "input_text", "text": "Go on."}]}])
        return len(calls)


PROTOCOLS = ("anthropic", "openai-chat", "openai-responses")


def percentile(values: list[float], q: float) -> float:
    """The ``q`` quantile (0..1) of ``values``, nearest rank."""
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, int(round(q * (len(ordered) - 1))))]
