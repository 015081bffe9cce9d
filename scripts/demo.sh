#!/usr/bin/env bash
# The main job, offline: set up, then run the agent with the scripted provider on the
# bundled sample project. Extra arguments go to agent-code (e.g. --output-format stream-json).
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/setup.sh
exec .venv/bin/python -m agent_code.demo "$@"
