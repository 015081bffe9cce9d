"""Checking exported samples against the turns the gateway recorded: the trajectory invariants.

For every session:

* shapes: ``len(tokens) == prompt + response_length``; ``loss_mask`` and
  ``rollout_log_probs`` are ``response_length`` long; the mask holds only 0 and 1;
* token-exact: every position with mask 1 holds exactly the id the engine sampled there,
  with the logprob it was sampled with;
* each sampled token is trained exactly once across the session's samples (a turn shared by
  several branches is trained in one of them), except tokens a ``realigned`` drift event
  says were masked out (the template history policy), and nothing else is trained.

:func:`verify_samples` returns the problems found (empty: all hold); rollouts run it on what
they export, and the tests use it too.
"""

from __future__ import annotations

import math
from collections import defaultdict
from typing import Iterable, Mapping, Sequence

from agent_code.trajectory.records import TurnRecord
from agent_code.trajectory.samples import Sample


def _session_problems(sid: str, samples: Sequence[Sample], turns: Sequence[TurnRecord]) -> list[str]:
    problems: list[str] = []
    by_index = {t.index: t for t in turns}
    trained: dict[tuple[int, int], int] = defaultdict(int)
    masked_by_drift = 0
    for s in samples:
        where = f"session {sid} sample {s.index}"
        R = s.response_length
        P = len(s.tokens) - R
        if R < 0 or len(s.loss_mask) != R or len(s.rollout_log_probs) != R:
            problems.append(f"{where}: lengths disagree (tokens {len(s.tokens)}, response {R}, "
                            f"mask {len(s.loss_mask)}, logprobs {len(s.rollout_log_probs)})")
            continue
        if any(m not in (0, 1) for m in s.loss_mask):
            problems.append(f"{where}: loss_mask holds values other than 0 and 1")
        masked_by_drift += sum(int(e.get("masked", 0)) for e in s.metadata.get("drift") or []
                               if e.get("kind") == "realigned")
        claimed = [False] * R
        for index in s.metadata.get("turn_indices") or []:
            turn = by_index.get(index)
            if turn is None:
                problems.append(f"{where}: turn {index} was never recorded")
                continue
            start = len(turn.prompt_ids) - P
            for k, token in enumerate(turn.output_ids):
                pos = start + k
                if not (0 <= pos < R) or not s.loss_mask[pos] or claimed[pos]:
                    continue
                claimed[pos] = True
                if s.tokens[P + pos] != token:
                    problems.append(f"{where}: position {pos} trains id {s.tokens[P + pos]}, turn {index} sampled {token}")
                elif not math.isclose(s.rollout_log_probs[pos], float(turn.logprobs[k]), abs_tol=1e-5):
                    problems.append(f"{where}: position {pos} has logprob {s.rollout_log_probs[pos]}, "
                                    f"sampled with {turn.logprobs[k]}")
                trained[(index, k)] += 1
        stray = sum(1 for pos in range(R) if s.loss_mask[pos] and not claimed[pos])
        if stray:
            problems.append(f"{where}: {stray} trained position(s) hold no sampled token")
    twice = [key for key, n in trained.items() if n > 1]
    if twice:
        problems.append(f"session {sid}: {len(twice)} sampled token(s) trained more than once")
    sampled = sum(len(t.output_ids) for t in turns)
    missing = sampled - len(trained)
    if missing != masked_by_drift:
        problems.append(f"session {sid}: {missing} sampled token(s) never trained "
                        f"({masked_by_drift} explained by realigned drift)")
    return problems


def verify_samples(samples: Iterable[Sample], turns: Mapping[str, Sequence[TurnRecord]]) -> list[str]:
    """Problems with ``samples`` given each session's recorded turns (``{session id: turns}``)."""
    grouped: dict[str, list[Sample]] = defaultdict(list)
    for s in samples:
        grouped[s.session_id].append(s)
    problems: list[str] = []
    for sid, group in grouped.items():
        if sid not in turns:
            problems.append(f"session {sid}: no recorded turns to check its samples against")
            continue
        problems += _session_problems(sid, group, turns[sid])
    return problems
