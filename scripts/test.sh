#!/usr/bin/env bash
# Set up, then run the whole test suite. Extra arguments go to pytest.
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/setup.sh
# verl's own venv (transformers<5.11) for the verl adapter's tests, made beside the rest
bash scripts/setup_verl.sh &
verl_setup=$!
# real npm peers for the tests (Qwen3 tokenizer files; the Claude Code, Codex and Qwen Code CLIs)
if command -v npm >/dev/null 2>&1; then
  mkdir -p .cache/node
  if ! cmp -s tests/node/package.json .cache/node/.installed; then
    echo "setup: installing npm test peers into .cache/node" >&2
    cp tests/node/package.json .cache/node/package.json
    npm install --prefix .cache/node --no-audit --no-fund --loglevel=error >&2
    cp tests/node/package.json .cache/node/.installed
  fi
else
  echo "setup: npm not found; tests that need npm packages will be skipped" >&2
fi
export PATH="$PWD/.venv/bin:$PATH"   # the venv's rg, so grep's ripgrep path is tested too
# lint first: ruff's findings fail the run like a failing test ([tool.ruff] in pyproject.toml)
.venv/bin/ruff check --quiet agent_code tests bench examples
# types: mypy's findings fail it too ([tool.mypy] in pyproject.toml says how strict)
.venv/bin/mypy --no-error-summary
wait "$verl_setup" || echo "setup: .venv-verl could not be made; the verl tests will say VERL NOT TESTED" >&2
# bubblewrap for the OS sandbox's tests (tests/test_confine_*.py skip without it); best effort
if ! command -v bwrap >/dev/null && [ "$(id -u)" = 0 ] && command -v apt-get >/dev/null; then
  apt-get install -y -q bubblewrap >&2 || echo "setup: bubblewrap could not be installed; the sandbox tests will skip" >&2
fi
if [ "$#" -gt 0 ]; then
  exec .venv/bin/python -m pytest "$@"
fi
# the whole suite: the permission policy's own test files are pure CPU in one process, while
# the rest mostly waits on the subprocesses it starts, so they run beside it on the other core
policy_tests=(tests/test_policy_*.py tests/test_shell_parser.py tests/test_shell_syntax_equivalence.py
              tests/test_self_protection.py tests/test_denylist_classes_41.py)
ignores=()
for file in "${policy_tests[@]}"; do ignores+=(--ignore "$file"); done
mkdir -p .cache
.venv/bin/python -m pytest -p no:cacheprovider "${policy_tests[@]}" > .cache/policy-tests.log 2>&1 &
policy_run=$!
status=0
.venv/bin/python -m pytest "${ignores[@]}" || status=$?
policy_status=0
wait "$policy_run" || policy_status=$?
echo "--- the permission policy's tests (${#policy_tests[@]} files, run beside the rest):"
if [ "$policy_status" -eq 0 ]; then tail -n 1 .cache/policy-tests.log; else cat .cache/policy-tests.log; fi
[ "$status" -eq 0 ] && [ "$policy_status" -eq 0 ]
