"""The user's answers about project MCP servers, kept outside the project.

A ``.mcp.json`` comes with the project — a clone, a branch, or a session of the agent may
have written it — and a server is a program that runs as the user. So a project server
starts only once the user approved it, at the REPL's start on a terminal (never from piped
input: that may be a command the agent ran). The answer is kept in
``~/.agent-code/mcp-approvals.json`` (under ``~/.agent-code/``, which the agent's tools may
not write), per project (its resolved path) and server, with the digest of the server's
entry as written *and* its footprint (``agent_code.mcp.footprint``: the executable its command
resolves to, the files its arguments and environment name, the script's neighbours): a changed
entry, or a changed file the server runs, is asked about again — "changed since you approved
it: server.py" — and until then the server does not start. A "no" is kept by the entry alone
(a changed file does not turn it into a question). A server whose footprint cannot be pinned
whole (too many files) has no lasting approval: it is asked about at every start. Records
written before footprints existed count as changed.
"""

from __future__ import annotations

import json
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Literal

from agent_code.jsonl import write_json_atomic
from agent_code.mcp.config import ServerConfig
from agent_code.mcp.footprint import Footprint, footprint

APPROVALS_FILE = "mcp-approvals.json"
Decision = Literal["approved", "declined"]


@dataclass
class Verdict:
    """Where a project server stands with the user (:meth:`ApprovalStore.check`)."""

    decision: Decision | None             # None: to be asked (never asked, or something changed)
    footprint: Footprint                  # what it runs now: record this one when asking
    changed: list[str] = field(default_factory=list)   # what changed since the approval
    entry_changed: bool = False           # the entry itself is not the one approved (or never asked)

    def why(self) -> str | None:
        """One line on why an approved server is asked about again; None when it is not."""
        if self.entry_changed or self.decision is not None:
            return None
        parts = []
        if self.changed:
            parts.append("changed since you approved it: " + ", ".join(self.changed[:8]) + (
                f" and {len(self.changed) - 8} more" if len(self.changed) > 8 else ""))
        if self.footprint.unpinned:
            parts.append("its approval cannot be kept: " + "; ".join(self.footprint.unpinned)
                         + " (an approval of it lasts one start)")
        return "; ".join(parts) or None


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

    def check(self, root: Path, server: ServerConfig, now: Footprint | None = None) -> Verdict:
        """The user's answer for this server in this project, if it still holds (module doc);
        ``now``: the footprint, when already computed."""
        now = now if now is not None else footprint(server, root)
        record = self._read()["projects"].get(self._key(root), {}).get(server.name)
        if not isinstance(record, dict) or record.get("digest") != server.digest():
            return Verdict(None, now, entry_changed=True)
        answer = record.get("decision")
        if answer == "declined":
            return Verdict("declined", now)
        if answer != "approved":
            return Verdict(None, now, entry_changed=True)
        approved = record.get("footprint")
        if not isinstance(approved, dict):
            return Verdict(None, now, ["the files it runs (approved before approvals covered them)"])
        changed = now.changed({str(k): str(v) for k, v in approved.items()})
        return Verdict(None if changed or now.unpinned else "approved", now, changed)

    def decision(self, root: Path, server: ServerConfig) -> Decision | None:
        """The user's answer for this server entry in this project; None: not asked, or the
        entry or a file it runs changed since."""
        return self.check(root, server).decision

    def record(self, root: Path, server: ServerConfig, decision: Decision, shown: Footprint | None = None) -> None:
        """Keep the answer with ``shown``, the footprint the user was asked about (computed now
        when None); atomically replaces the file; raises OSError."""
        shown = shown if shown is not None else footprint(server, root)
        data = self._read()
        project = data["projects"].setdefault(self._key(root), {})
        project[server.name] = {"digest": server.digest(), "decision": decision, "footprint": shown.pins,
                                "entry": server.entry, "at": time.strftime("%Y-%m-%dT%H:%M:%S%z")}
        self.path.parent.mkdir(parents=True, exist_ok=True)
        write_json_atomic(self.path, data, indent=2)
