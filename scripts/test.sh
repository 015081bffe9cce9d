#!/usr/bin/env bash
# Set up, then run the whole test suite. Extra arguments go to pytest.
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/setup.sh
export PATH="$PWD/.venv/bin:$PATH"   # the venv's rg, so grep's ripgrep path is tested too
exec .venv/bin/python -m pytest "$@"
