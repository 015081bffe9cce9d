"""Trainer adapters: agent-code rollouts as the input of TRL, verl and slime (``core.py`` says
what the one record of a rollout slot is; each adapter module is one trainer's extension point)."""

from __future__ import annotations

from agent_code.trainers.core import LeftOut, LoopThread, SlotRecord, main_sample, record_of, run_slots

__all__ = ["LeftOut", "LoopThread", "SlotRecord", "main_sample", "record_of", "run_slots"]
