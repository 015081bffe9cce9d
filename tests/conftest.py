from __future__ import annotations

import json
import os
import subprocess
import sys
import tempfile
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[1]

# --- pure_python: tests that reach into the policy's internals --------------------------
# scripts/setup.sh compiles the policy's hot modules (scripts/build_native.py). A compiled
# module calls its own functions directly and fixes its classes' methods and types, so a
# test that swaps one of them (to inject an error, count calls, switch a fast path off or
# feed the code it replaced) would test nothing there. Such tests carry ``pure_python``:
# in a compiled run they all run once, together, in a child pytest with the pure-Python
# policy (AGENT_CODE_PURE_PYTHON=1), and each reports the child's outcome as its own.
PURE_RESULTS = "AGENT_CODE_PURE_RESULTS"  # the child's file of outcomes (one JSON line a report)


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    config.stash[_PURE_ITEMS] = [item.nodeid for item in items if item.get_closest_marker("pure_python")]


_PURE_ITEMS = pytest.StashKey[list[str]]()
_PURE_OUTCOMES = pytest.StashKey[dict[str, dict[str, str]]]()


def _pure_outcomes(config: pytest.Config) -> dict[str, dict[str, str]]:
    """Run every pure_python test of this session in one pure-Python child; nodeid -> report."""
    if _PURE_OUTCOMES in config.stash:
        return config.stash[_PURE_OUTCOMES]
    with tempfile.TemporaryDirectory(prefix="agent-code-pure-") as tmp:
        results = Path(tmp) / "results.jsonl"
        env = {**os.environ, "AGENT_CODE_PURE_PYTHON": "1", PURE_RESULTS: str(results)}
        done = subprocess.run([sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider",
                               *config.stash[_PURE_ITEMS]], cwd=config.rootpath, env=env,
                              capture_output=True, text=True, timeout=1800)
        outcomes: dict[str, dict[str, str]] = {}
        lines = results.read_text().splitlines() if results.exists() else []
        for line in lines:
            report = json.loads(line)
            # the worst phase decides: a failed set-up or teardown fails the test too
            if report["outcome"] != "passed" or report["nodeid"] not in outcomes:
                if outcomes.get(report["nodeid"], {}).get("outcome") != "failed":
                    outcomes[report["nodeid"]] = report
    outcomes[""] = {"outcome": "failed", "longrepr": f"exit {done.returncode}\n{done.stdout[-4000:]}{done.stderr[-4000:]}"}
    config.stash[_PURE_OUTCOMES] = outcomes
    return outcomes


@pytest.hookimpl(tryfirst=True)
def pytest_pyfunc_call(pyfuncitem: pytest.Function) -> bool | None:
    if not pyfuncitem.get_closest_marker("pure_python"):
        return None
    import agent_code.policy

    if not agent_code.policy.NATIVE:
        return None  # the policy is Python here: run the test itself
    outcomes = _pure_outcomes(pyfuncitem.config)
    report = outcomes.get(pyfuncitem.nodeid)
    if report is None:
        pytest.fail("the pure-Python child run did not report this test:\n" + outcomes[""]["longrepr"],
                    pytrace=False)
    if report["outcome"] == "skipped":
        pytest.skip(report["longrepr"])
    if report["outcome"] != "passed":
        pytest.fail(f"in the pure-Python child run ({report['when']}):\n{report['longrepr']}", pytrace=False)
    return True


def pytest_runtest_logreport(report: pytest.TestReport) -> None:
    """In the pure-Python child: write each test's outcome for the parent."""
    path = os.environ.get(PURE_RESULTS)
    if not path or (report.when != "call" and report.outcome == "passed"):
        return
    longrepr = report.longrepr[2] if isinstance(report.longrepr, tuple) else str(report.longrepr or "")
    with open(path, "a", encoding="utf-8") as out:
        out.write(json.dumps({"nodeid": report.nodeid, "when": report.when, "outcome": report.outcome,
                              "longrepr": longrepr}) + "\n")


def cli_env(**overrides: str | None) -> dict[str, str]:
    """A child environment with no API credentials unless a test sets them."""
    env = {k: v for k, v in os.environ.items()
           if k not in ("ANTHROPIC_AUTH_TOKEN", "ANTHROPIC_API_KEY", "ANTHROPIC_BASE_URL")}
    env["PYTHONPATH"] = str(REPO) + os.pathsep + env.get("PYTHONPATH", "")
    env["NO_COLOR"] = "1"
    for key, value in overrides.items():
        if value is None:
            env.pop(key, None)
        else:
            env[key] = value
    return env


def run_cli(*args: str, env: dict[str, str] | None = None, input: str | None = None,
            timeout: float = 60) -> subprocess.CompletedProcess[str]:
    """Run the real ``agent-code`` entry point in a subprocess."""
    return subprocess.run([sys.executable, "-m", "agent_code", *args], capture_output=True, text=True,
                          env=env or cli_env(), input=input, timeout=timeout)


@pytest.fixture
def no_credentials(monkeypatch: pytest.MonkeyPatch) -> None:
    for key in ("ANTHROPIC_AUTH_TOKEN", "ANTHROPIC_API_KEY", "ANTHROPIC_BASE_URL"):
        monkeypatch.delenv(key, raising=False)


@pytest.fixture(scope="session")
def docker_image() -> str:
    """The real Docker engine, started, and the project's sandbox image, built, by the documented
    set-up (scripts/docker-setup.sh); skips loudly where no engine can be started (docker_fixtures)."""
    from docker_fixtures import docker_image as set_up

    return set_up()
