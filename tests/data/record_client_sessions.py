"""Record the canonical requests of real client sessions for tests/test_conformance_templates.py.

Runs the real Claude Code, Codex and Qwen Code CLIs through the scripted multi-step fixes of
tests/test_client_conformance*.py (the npm peers in .cache/node) and writes, per client, every
request the gateway received as the protocol layer translated it (canonical messages and tools)
with the reply the gateway gave, to tests/data/client_sessions.json.gz. Re-run after a client
upgrade:  .venv/bin/python tests/data/record_client_sessions.py
"""

from __future__ import annotations

import gzip
import json
import sys
import tempfile
from pathlib import Path

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE.parent))

from agent_code.gateway.pipeline import Gateway  # noqa: E402

OUT = HERE / "client_sessions.json.gz"


def main() -> None:
    import test_client_conformance as cc
    import test_client_conformance_codex_qwen as cq

    recorded: list = []
    commit = Gateway.commit

    def spy(self, session, outcome, protocol, total_s):
        record = commit(self, session, outcome, protocol, total_s)
        recorded.append({"session": session.id, "protocol": protocol, "messages": outcome.request.messages,
                         "tools": outcome.request.tools, "reply": record.reply})
        return record

    Gateway.commit = spy
    sessions = {}
    runs = {"claude_code": lambda tmp: cc.run_headline_fix(tmp),
            "codex": lambda tmp: cq.codex_fix(tmp),
            "qwen_code": lambda tmp: cq.test_qwen_code_conversation_is_one_sample(tmp)}
    for name, run in runs.items():
        recorded.clear()
        with tempfile.TemporaryDirectory() as tmp:
            run(Path(tmp))
        sessions[name] = list(recorded)
        print(f"{name}: {len(recorded)} requests", file=sys.stderr)
    with gzip.open(OUT, "wt", encoding="utf-8") as fh:
        json.dump(sessions, fh, ensure_ascii=False, sort_keys=True)
    print(f"wrote {OUT} ({OUT.stat().st_size} bytes)", file=sys.stderr)


if __name__ == "__main__":
    main()
