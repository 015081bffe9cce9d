from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[1]


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
