"""Training samples from a session's turn records (pure functions, no I/O).

A session's :class:`~agent_code.trajectory.records.TurnRecord` s form a forest through
``parent``: a turn's prompt extends the prompt + output of its parent. Every root-to-leaf
chain becomes one :class:`Sample` (slime's ``Sample`` field names): its tokens are the leaf's
prompt + output, its prompt part is the chain root's prompt, and ``loss_mask`` /
``rollout_log_probs`` cover the response part (everything after the root's prompt).

Masking rules:

* A chain turn ``u`` sampled its output at positions ``[len(u.prompt_ids), ...)`` of its own
  sequence. Those positions of the leaf's tokens get mask 1 and ``u``'s logprobs, compared
  token by token, *up to the first position where the leaf's token is not what the engine
  sampled*. Under the "tokens" history policy they always match; under "template" the prompt is
  re-rendered and may differ (say, earlier ``<think>`` reasoning stripped). From the first
  mismatch on the rest of that output is masked 0 and a ``"realigned"`` drift event counts the
  sampled tokens not trained: a token is only trained in the exact context it was sampled in.
  A turn's span also ends where the next chain turn's prompt ends, so two turns never claim
  the same position.
* A turn shared by several chains (a retry splits off it) is trained once: in the first sample
  that contains it (samples are ordered by chain root index, the main chain first among its
  root's, then leaf index). Later samples
  mask it 0 and list it under ``metadata["shared_turns"]``.
* Everything else (tool results, user text, template tokens) is mask 0, logprob 0.0.

Hence every mask-1 position holds the id the engine sampled for that turn at that offset, with
its logprob, and each (turn, offset) is trained at most once across the session's samples.
``metadata["weight_versions"]`` says which policy weights sampled them: one entry per trained
turn span, ``{"turn", "version", "start", "end"}`` in response positions (``loss_mask``
indices, end exclusive), so a session that spans a weight update stays one sample and a
trainer can correct the off-policy spans.

Branches: a root that is a client's side request (``side.py``: a known title/topic request,
or one without tools beside roots with tools whose system prompt is none of theirs) is
``"side"``. Of the first other root's chains, the one that ends at its latest turn is ``"main"``
(of those whose turns carry no branch hint): the conversation the client went on with to its
end — a retried turn's answer, not the one it dropped — never the first leaf by index, nor the
longest chain, which requests the model sends itself with its session key during its run (a
dead end off an early turn; a crafted chain longer than the rest of the agent's) would be. Another root is labelled by its ``branch_hint``,
else ``"sub-agent"`` when its system message or its tool set differs from the main root's, else
``"compaction"`` (same agent, history rewritten). A chain that splits off a turn an
earlier sample already holds is a ``"retry"`` unless its first own turn carries a hint.

Rewards (:data:`REWARD_POLICIES`): ``"full"`` — the default — gives every sample the session
reward: each branch (sub-agent, compaction segment, retry) contributed to that outcome, and
with per-token losses each sample's tokens are weighted like the main chain's. ``"split"``
divides the reward equally among the samples so the session's total reward stays constant
however many branches it had.
"""

from __future__ import annotations

import copy
from dataclasses import dataclass, field, fields
from typing import Any, Callable, Sequence

from agent_code.trajectory.records import TurnRecord
from agent_code.trajectory.side import same_agent, side_roots

__all__ = ["Sample", "build_samples", "REWARD_POLICIES", "register_reward_policy", "STATUS_BY_FINISH",
           "SAMPLE_STATUSES"]

STATUS_BY_FINISH = {"stop": "completed", "length": "truncated", "abort": "aborted"}
SAMPLE_STATUSES = ("completed", "truncated", "aborted")

RewardPolicy = Callable[[float | None, int], list[float | None]]


def _full(reward: float | None, n: int) -> list[float | None]:
    return [reward] * n


def _split(reward: float | None, n: int) -> list[float | None]:
    return [None if reward is None else reward / n] * n if n else []


REWARD_POLICIES: dict[str, RewardPolicy] = {"full": _full, "split": _split}


def register_reward_policy(name: str, policy: RewardPolicy) -> None:
    """Add a reward policy: ``policy(session_reward, n_samples) -> one reward per sample``."""
    REWARD_POLICIES[name] = policy


@dataclass
class Sample:
    session_id: str
    index: int
    branch: str
    tokens: list[int]
    response_length: int
    loss_mask: list[int]
    rollout_log_probs: list[float]
    reward: float | None = None
    status: str = "completed"
    response: str = ""
    rollout_id: str | None = None
    metadata: dict[str, Any] = field(default_factory=dict)

    @property
    def prompt_length(self) -> int:
        return len(self.tokens) - self.response_length

    @property
    def trained_tokens(self) -> int:
        return sum(self.loss_mask)

    def to_dict(self, *, copy_data: bool = True) -> dict[str, Any]:
        """A deep copy as plain data (like ``dataclasses.asdict``, whose per-element deep copy
        of the token lists is ~100x slower). ``copy_data=False``: the sample's own lists and
        metadata, not copies, for a caller that serializes the dict at once and keeps nothing."""
        out = {f.name: getattr(self, f.name) for f in fields(self)}
        if copy_data:
            out.update(tokens=list(self.tokens), loss_mask=list(self.loss_mask),
                       rollout_log_probs=list(self.rollout_log_probs), metadata=copy.deepcopy(self.metadata))
        return out

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> "Sample":
        known = {k: v for k, v in data.items() if k in cls.__dataclass_fields__}
        sample = cls(**known)
        sample.tokens = [int(t) for t in sample.tokens]
        sample.loss_mask = [int(m) for m in sample.loss_mask]
        sample.rollout_log_probs = [float(x) for x in sample.rollout_log_probs]
        sample.metadata = dict(sample.metadata or {})
        return sample


def _chains(by_index: dict[int, TurnRecord]) -> list[list[TurnRecord]]:
    """Root-to-leaf chains, ordered by root index then leaf index."""

    def parent_of(rec: TurnRecord) -> int | None:
        # a parent that is missing (or not earlier: malformed) makes the turn a root
        p = rec.parent
        return p if p is not None and p in by_index and p < rec.index else None

    parents = {p for rec in by_index.values() if (p := parent_of(rec)) is not None}
    chains = []
    for idx in sorted(by_index):
        if idx in parents:
            continue
        chain = [by_index[idx]]
        while (p := parent_of(chain[-1])) is not None:
            chain.append(by_index[p])
        chain.reverse()
        chains.append(chain)
    chains.sort(key=lambda c: (c[0].index, c[-1].index))
    return chains


def _main_chain(chains: list[list[TurnRecord]], first_root: TurnRecord) -> int:
    """Move the main chain (module doc) to the front of its root's chains, so that it trains the
    turns it shares with the others; its position."""
    ours = [n for n, c in enumerate(chains) if c[0] is first_root]
    best = max(ours, key=lambda n: (not any(u.branch_hint for u in chains[n][1:]), chains[n][-1].index))
    chains.insert(ours[0], chains.pop(best))
    return ours[0]


def build_samples(records: Sequence[TurnRecord], *, reward: float | None, rollout_id: str | None = None,
                  reward_policy: str = "full", metadata: dict[str, Any] | None = None,
                  status_override: str | None = None,
                  decode: Callable[[list[int]], str] | None = None) -> list[Sample]:
    """One :class:`Sample` per root-to-leaf chain of one session's turn records (see module doc).

    ``status_override`` replaces every sample's status (say ``"aborted"`` for a session cut
    short); ``decode`` turns response ids into ``Sample.response`` (empty without it). The
    caller's ``metadata`` is merged under the sample's own keys.
    """
    if not records:
        return []
    sessions = {r.session_id for r in records}
    if len(sessions) > 1:
        raise ValueError(f"build_samples takes one session's records, got {len(sessions)} sessions")
    if reward_policy not in REWARD_POLICIES:
        raise ValueError(f"unknown reward policy {reward_policy!r}; known: {', '.join(REWARD_POLICIES)}")
    by_index: dict[int, TurnRecord] = {}
    for rec in records:
        by_index[rec.index] = rec           # a re-recorded index: the later record wins
    chains = _chains(by_index)
    side = side_roots(chain[0] for chain in chains if chain[0].parent is None or chain[0].parent not in by_index)
    first_root = next((c[0] for c in chains if c[0].index not in side), chains[0][0])
    main_chain = _main_chain(chains, first_root)

    trained: set[int] = set()                   # turns already trained by an earlier sample
    samples: list[Sample] = []
    rewards = REWARD_POLICIES[reward_policy](reward, len(chains))
    for n, chain in enumerate(chains):
        root, leaf = chain[0], chain[-1]
        tokens = list(leaf.prompt_ids) + list(leaf.output_ids)
        P = len(root.prompt_ids)
        R = len(tokens) - P
        mask = [0] * R
        logprobs = [0.0] * R
        drift: list[dict[str, Any]] = []
        shared: list[int] = []
        claimed = [False] * R                   # positions some chain turn's output holds
        versions: list[dict[str, Any]] = []     # the weight version of each turn's trained span
        for pos, u in enumerate(chain):
            for event in u.drift:
                drift.append({"turn": u.index, **event})
            is_shared = u.index in trained
            if is_shared:
                shared.append(u.index)
            out = u.output_ids
            start = len(u.prompt_ids)
            nxt = chain[pos + 1] if pos + 1 < len(chain) else None
            # the span ends where the next chain turn's prompt ends (the leaf: the sequence end)
            limit = len(tokens) if nxt is None else min(len(nxt.prompt_ids), len(tokens))
            k = 0
            span = min(len(out), limit - start)
            lo = start - P
            if lo >= 0 and span > 0 and tokens[start:start + span] == list(out[:span]) and not any(claimed[lo:lo + span]):
                # the whole span at once (the common case): what the loop below comes to for it
                claimed[lo:lo + span] = [True] * span
                if not is_shared:
                    mask[lo:lo + span] = [1] * span
                    scored = min(span, len(u.logprobs))   # (past the logprobs, 0.0 stays)
                    logprobs[lo:lo + scored] = [float(x) for x in u.logprobs[:scored]]
                k = span
            while k < len(out) and P <= start + k < limit and tokens[start + k] == out[k] \
                    and not claimed[start + k - P]:
                claimed[start + k - P] = True
                if not is_shared:
                    mask[start + k - P] = 1
                    logprobs[start + k - P] = float(u.logprobs[k]) if k < len(u.logprobs) else 0.0
                k += 1
            if k and not is_shared and u.weight_version is not None:
                versions.append({"turn": u.index, "version": u.weight_version, "start": start - P,
                                 "end": start + k - P})
            if k < len(out) and not is_shared:
                drift.append({"turn": u.index, "kind": "realigned", "cause": _realign_cause(nxt, start + k),
                              "masked": len(out) - k, "at": k})
        trained.update(u.index for u in chain)

        ill_formed = [{"turn": u.index, "issue": issue} for u in chain for issue in u.ill_formed]
        meta: dict[str, Any] = dict(metadata or {})
        meta.update({
            "turns": len(chain),
            "turn_indices": [u.index for u in chain],
            "truncated": leaf.finish_reason == "length",
            "use_tool": any(bool((u.reply or {}).get("tool_calls")) for u in chain),
            "ill_formed": ill_formed,
            "drift": drift,
            "shared_turns": shared,
            "client_rewrites": [note for u in chain for note in u.notes],
        })
        cache = [[u.index, len(u.prompt_ids), u.cached_tokens] for u in chain if u.cached_tokens is not None]
        if cache:  # [turn, prompt tokens, of them served from the engine's prefix cache]
            meta["engine_cache"] = cache
        if versions:  # response positions [start, end) each turn trained, and the weights that sampled them
            meta["weight_versions"] = versions
        status = status_override or STATUS_BY_FINISH.get(leaf.finish_reason, "aborted")
        samples.append(Sample(
            session_id=leaf.session_id, rollout_id=rollout_id, index=n,
            branch="side" if root.index in side else _branch(chain, shared, first_root, is_first=n == main_chain),
            tokens=tokens, response_length=R, loss_mask=mask, rollout_log_probs=logprobs,
            reward=rewards[n], status=status, response=decode(tokens[P:]) if decode else "",
            metadata=meta))
    return samples


def _realign_cause(nxt: TurnRecord | None, at: int) -> str:
    """Why a turn's output stops matching the leaf's tokens at sequence position ``at``."""
    if nxt is None:
        return "the leaf's tokens end inside its output"
    if at >= len(nxt.prompt_ids):
        return f"turn {nxt.index}'s {nxt.policy} prompt ends inside this output"
    if nxt.policy == "template":
        return f"template re-render in turn {nxt.index}'s prompt"
    return f"turn {nxt.index}'s prompt differs from the sampled output"


def _branch(chain: list[TurnRecord], shared: list[int], first_root: TurnRecord, *, is_first: bool) -> str:
    if is_first:
        return "main"
    own = chain[len(shared)] if len(shared) < len(chain) else chain[-1]
    if own.branch_hint:
        return own.branch_hint
    if own.parent is not None and own is not chain[0]:
        return "retry"      # split off a turn an earlier sample holds
    root = chain[0]
    if root is first_root:
        return "retry"
    return "compaction" if same_agent(root.messages, root.tools, first_root.messages, first_root.tools) \
        else "sub-agent"
