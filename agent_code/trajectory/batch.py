"""Samples as a trainer takes them: padded arrays, or slime-``Sample``-shaped dicts.

:func:`read_samples` (``samples.parquet``, ``samples.jsonl`` or a trajectory dir) gives
:class:`~agent_code.trajectory.samples.Sample` s; :func:`pad_batch` lays them out as
right-padded ``[batch, length]`` arrays aligned on the tokens, the response part of each row
holding its ``loss_mask`` and ``rollout_log_probs`` and its prompt part zeros; :func:`as_slime`
gives the dict a slime rollout buffer holds. Nothing is tokenized again: the ids are the ones the
engine saw and sampled.
"""

from __future__ import annotations

from typing import Any, Sequence

from agent_code.trajectory.samples import Sample
from agent_code.trajectory.store import read_samples

__all__ = ["as_slime", "pad_batch", "read_samples"]

def pad_batch(samples: Sequence[Sample], *, pad_id: int = 0, advantages: Sequence[float] | None = None,
              max_length: int | None = None, tensors: bool | None = None) -> dict[str, Any]:
    """``samples`` as right-padded rows of one length (the longest, or ``max_length``: a
    longer sample is refused, not cut — a cut sample would train on a context it was not
    sampled in). Keys, each ``[batch, length]`` unless said:

    * ``input_ids`` (``pad_id`` after the end), ``attention_mask`` (1 on the tokens);
    * ``loss_mask`` and ``logprobs``: the sample's ``loss_mask`` and ``rollout_log_probs`` on
      its response positions, 0 elsewhere (logprobs sit on the token they are the probability of);
    * ``advantages`` (with ``advantages``, one per sample): that value on every mask-1 position;
    * ``rewards``, ``prompt_lengths``, ``response_lengths``: ``[batch]`` (a missing reward is 0.0).

    ``tensors``: torch tensors (True), nested lists (False), or torch when it is installed (None)."""
    if advantages is not None and len(advantages) != len(samples):
        raise ValueError(f"{len(advantages)} advantages for {len(samples)} samples")
    longest = max((len(s.tokens) for s in samples), default=0)
    length = longest if max_length is None else max_length
    if longest > length:
        raise ValueError(f"a sample has {longest} tokens, over max_length={length}")
    out: dict[str, list[Any]] = {key: [] for key in ("input_ids", "attention_mask", "loss_mask", "logprobs")}
    if advantages is not None:
        out["advantages"] = []
    for i, s in enumerate(samples):
        size, start = len(s.tokens), s.prompt_length
        if len(s.loss_mask) != s.response_length or len(s.rollout_log_probs) != s.response_length:
            raise ValueError(f"sample {s.session_id}#{s.index}: loss_mask and rollout_log_probs must cover "
                             f"its {s.response_length} response tokens")
        pad = length - size
        out["input_ids"].append([int(t) for t in s.tokens] + [pad_id] * pad)
        out["attention_mask"].append([1] * size + [0] * pad)
        mask = [0] * start + [int(m) for m in s.loss_mask] + [0] * pad
        out["loss_mask"].append(mask)
        out["logprobs"].append([0.0] * start + [float(x) for x in s.rollout_log_probs] + [0.0] * pad)
        if advantages is not None:
            out["advantages"].append([float(advantages[i]) * m for m in mask])
    batch: dict[str, Any] = dict(out)
    batch["rewards"] = [float(s.reward) if s.reward is not None else 0.0 for s in samples]
    batch["prompt_lengths"] = [s.prompt_length for s in samples]
    batch["response_lengths"] = [s.response_length for s in samples]
    if tensors is False:
        return batch
    try:
        import torch
    except ImportError:
        if tensors:
            raise
        return batch
    floats = {"logprobs", "advantages", "rewards"}
    return {k: torch.tensor(v, dtype=torch.float32 if k in floats else torch.long) for k, v in batch.items()}


def as_slime(sample: Sample, *, group_index: int | None = None, index: int | None = None,
             rollout_id: int | None = None) -> dict[str, Any]:
    """``sample`` as the dict of slime's ``Sample`` fields (``tokens``, ``response_length``,
    ``loss_mask`` and ``rollout_log_probs`` over the response, ``reward``, ``status``,
    ``weight_versions``: one per trained turn, ...); ``group_index``: the group (task) it belongs
    to, ``index``: its place in the batch, ``rollout_id``: slime's int shared by the samples of one
    rollout (our string id stays in ``metadata["rollout"]``)."""
    spans = sample.metadata.get("weight_versions") or ()
    return {
        "group_index": group_index,
        "index": sample.index if index is None else index,
        "rollout_id": rollout_id,
        "prompt": "",                       # the prompt is in ``tokens``; no text form is kept
        "tokens": list(sample.tokens),
        "response": sample.response,
        "response_length": sample.response_length,
        "label": None,
        "reward": sample.reward,
        "loss_mask": list(sample.loss_mask),
        "rollout_log_probs": list(sample.rollout_log_probs),
        "status": sample.status,            # completed | truncated | aborted: slime's Status names
        "weight_versions": [str(span["version"]) for span in spans],
        "metadata": {**sample.metadata, "session_id": sample.session_id, "branch": sample.branch,
                     "rollout": sample.rollout_id},
    }
