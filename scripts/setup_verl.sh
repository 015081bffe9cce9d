#!/usr/bin/env bash
# Creates .venv-verl: verl 0.9.1 with what its agent-loop and PPO modules import, the CPU torch
# wheel, and agent-code itself (editable), for the verl adapter's tests (tests/test_trainers_verl.py)
# and examples/verl_dataset.py. verl needs transformers<5.11 (agent-code's own .venv has a newer
# one), hence a venv of its own. Re-running is cheap: it reinstalls only when this script or
# pyproject.toml changed.
set -euo pipefail
cd "$(dirname "$0")/.."
venv=.venv-verl
stamp=$venv/.verl-installed
if [ -f "$stamp" ] && [ ! scripts/setup_verl.sh -nt "$stamp" ] && [ ! pyproject.toml -nt "$stamp" ]; then
  exit 0
fi
pick_python() {
  for py in "${PYTHON:-}" python3.12 python3.11 python3; do
    [ -n "$py" ] || continue
    if command -v "$py" >/dev/null 2>&1 &&
       "$py" -c 'import sys; sys.exit(0 if (3, 11) <= sys.version_info < (3, 13) else 1)' 2>/dev/null; then
      echo "$py"; return 0
    fi
  done
  echo "verl needs Python 3.11 or 3.12 (set PYTHON=/path/to/python3.12)" >&2
  return 1
}
if [ ! -x $venv/bin/python ]; then
  py=$(pick_python)
  echo "setup_verl: creating $venv with $($py --version)" >&2
  "$py" -m venv $venv
fi
echo "setup_verl: installing verl 0.9.1 and agent-code into $venv" >&2
pip=($venv/bin/python -m pip install --quiet --disable-pip-version-check)
"${pip[@]}" -e . "torch==2.13.0" "transformers>=5.5.3,!=5.6.0,<5.11" "tensordict>=0.8.0,!=0.9.0,<=0.10.0" \
  "hydra-core" "omegaconf" "ray==2.60.0" "codetiming" "pillow" "pydantic" "numpy>=2" "packaging" "dill" \
  "accelerate" "pylatexenc" "torchdata" "datasets" "cachetools" "fastapi" \
  "pytest"   # the bundled tasks' tests run with the venv's Python (the local sandbox)
# verl's own dependency list pulls in wandb, peft, tensorboard, pybind11 ... that its agent loop and
# core_algos never import; it goes in without them (what they do import is listed above), and
# pip's note that they are missing is expected
"${pip[@]}" --no-deps "verl==0.9.1" 2>&1 | { grep -v -e "^ERROR: pip's dependency resolver" -e "^verl 0.9.1 requires" \
  -e "^WARNING: Location" >&2 || true; }
touch "$stamp"
