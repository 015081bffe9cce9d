"""Rollouts: task → sandbox → harness → diff → grade → samples (see ``runner.py``)."""

from __future__ import annotations

from agent_code.rollout.runner import RolloutConfig, RolloutResult, run_all, run_rollout

__all__ = ["RolloutConfig", "RolloutResult", "run_all", "run_rollout"]
