"""ScriptedProvider: replays assistant turns from a JSONL file, one turn a line.

Each line is an assistant turn in the Anthropic shape, either the full object
``{"content": [blocks...], "stop_reason": "tool_use"}`` or just the list of blocks.
``stop_reason`` defaults to ``tool_use`` when the turn has a tool_use block, else
``end_turn``. Blank lines and lines starting with ``#`` are skipped. The script is
read and checked when the provider is made, so a bad file fails before the run. ``tool_choice``
is accepted and not enforced: a turn is replayed as written.
"""

from __future__ import annotations

import json
from pathlib import Path

from agent_code.jsonl import read_jsonl
from agent_code.providers.base import ProviderError
from agent_code.types import ModelResponse

BLOCK_TYPES = {"text", "tool_use", "thinking", "redacted_thinking"}


def load_script(path: str | Path) -> list[ModelResponse]:
    path = Path(path)
    turns = [_turn(data, where) for _, where, data in read_jsonl(path, ProviderError, "script")]
    if not turns:
        raise ProviderError(f"script {path} has no turns")
    return turns


def _turn(data: object, where: str) -> ModelResponse:
    if isinstance(data, list):
        data = {"content": data}
    if not isinstance(data, dict) or not isinstance(data.get("content"), list):
        raise ProviderError(f"{where}: a turn must be a list of blocks or an object with 'content'")
    for block in data["content"]:
        kind = block.get("type") if isinstance(block, dict) else None
        if kind not in BLOCK_TYPES:
            raise ProviderError(f"{where}: unsupported block {kind!r} (expected one of {sorted(BLOCK_TYPES)})")
        if kind == "tool_use" and not (block.get("id") and block.get("name")):
            raise ProviderError(f"{where}: tool_use blocks need an 'id' and a 'name'")
    has_tool = any(b["type"] == "tool_use" for b in data["content"])
    return ModelResponse(content=data["content"],
                         stop_reason=data.get("stop_reason") or ("tool_use" if has_tool else "end_turn"))


class ScriptedProvider:
    name = "scripted"

    def __init__(self, script: str | Path, model: str = "scripted") -> None:
        self.script = Path(script)
        self.model = model
        self.turns = load_script(self.script)
        self.position = 0

    def complete(self, messages, tools=None, system=None, tool_choice=None) -> ModelResponse:
        # tool_choice is taken and not checked: the script's turn is what the model says
        if self.position >= len(self.turns):
            raise ProviderError(f"script {self.script} is exhausted after {len(self.turns)} turns")
        turn = self.turns[self.position]
        self.position += 1
        # hand out a copy: the loop keeps these blocks in its history
        return ModelResponse(content=json.loads(json.dumps(turn.content)), stop_reason=turn.stop_reason,
                             model=self.model)
