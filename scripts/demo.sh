#!/usr/bin/env bash
# The main job, offline: set up, then `agent-code rollout` on the bundled bug-fix tasks with
# agent-code as the agent, the local sandbox and the embedded model (outputs in rollouts/demo).
# --scripted replays the reference fixes instead of the model; other arguments go to rollout.
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/setup.sh
exec .venv/bin/python -m agent_code.demo.rollout "$@"
