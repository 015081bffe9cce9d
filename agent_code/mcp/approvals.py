"""The user's answers about project MCP servers, kept outside the project.

A ``.mcp.json`` comes with the project — a clone, a branch, or a session of the agent may
have written it — and a server is a program that runs as the user. So a project server
starts only once the user approved it, at the REPL's start on a terminal (never from piped
input: that may be a command the agent ran). The answer is kept in
``~/.agent-code/mcp-approvals.json`` (under ``~/.agent-code/``, which the agent's tools may
not write), per project (its resolved path) and server, with the digest of the server's
entry as written: a changed entry (another command, other arguments) is asked about again.
"""

from __future__ import annotations

import json
import time
from pathlib import Path
from typing import Literal

from agent_code.jsonl import write_json_atomic
from agent_code.mcp.config import ServerConfig

APPROVALS_FILE = "mcp-approvals.json"
Decision = Literal["approved", "declined"]


class ApprovalStore:
    def __init__(self, path: Path) -> None:
        self.path = Path(path)

    def _read(self) -> dict:
        try:
            data = json.loads(self.path.read_text(encoding="utf-8"))
        except (OSError, ValueError):
            return {"version": 1, "projects": {}}
        if not isinstance(data, dict) or not isinstance(data.get("projects"), dict):
            return {"version": 1, "projects": {}}
        return data

    @staticmethod
    def _key(root: Path) -> str:
        return str(Path(root).resolve())

    def decision(self, root: Path, server: ServerConfig) -> Decision | None:
        """The user's answer for this server entry in this project; None: not asked (or the
        entry changed since)."""
        record = self._read()["projects"].get(self._key(root), {}).get(server.name)
        if not isinstance(record, dict) or record.get("digest") != server.digest():
            return None
        answer = record.get("decision")
        return answer if answer in ("approved", "declined") else None

    def record(self, root: Path, server: ServerConfig, decision: Decision) -> None:
        """Keep the answer (atomically replacing the file); raises OSError."""
        data = self._read()
        project = data["projects"].setdefault(self._key(root), {})
        project[server.name] = {"digest": server.digest(), "decision": decision,
                                "entry": server.entry, "at": time.strftime("%Y-%m-%dT%H:%M:%S%z")}
        self.path.parent.mkdir(parents=True, exist_ok=True)
        write_json_atomic(self.path, data, indent=2)
