#!/usr/bin/env bash
# Creates .venv (Python >= 3.11) and installs agent-code into it, editable, with the
# test extras. Re-running is cheap: it reinstalls only when pyproject.toml changed.
set -euo pipefail
cd "$(dirname "$0")/.."

pick_python() {
  for py in "${PYTHON:-}" python3.13 python3.12 python3.11 python3 python; do
    [ -n "$py" ] || continue
    if command -v "$py" >/dev/null 2>&1 &&
       "$py" -c 'import sys; sys.exit(0 if sys.version_info >= (3, 11) else 1)' 2>/dev/null; then
      echo "$py"; return 0
    fi
  done
  echo "agent-code needs Python >= 3.11 (set PYTHON=/path/to/python3.11)" >&2
  return 1
}

if [ ! -x .venv/bin/python ]; then
  py=$(pick_python)
  echo "setup: creating .venv with $($py --version)" >&2
  "$py" -m venv .venv
fi
stamp=.venv/.agent-code-installed
if [ ! -f "$stamp" ] || [ pyproject.toml -nt "$stamp" ]; then
  echo "setup: installing agent-code and its dependencies into .venv" >&2
  .venv/bin/python -m pip install --quiet --disable-pip-version-check -e ".[dev]"
  touch "$stamp"
fi
# (a checkout set up before the policy was pure Python only may hold the old compiled build,
# which nothing loads any more: removed so no stale native code lies in the package)
rm -rf agent_code/policy/_native agent_code/policy/_native.new
