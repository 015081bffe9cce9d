"""The real Docker engine and the project's sandbox image for the tests, via the documented set-up
(``scripts/docker-setup.sh``: installs docker.io + debootstrap if missing, starts dockerd, builds
``agent-code-sandbox``; a second run does nothing).

Used through the session fixture ``docker_image`` (tests/conftest.py): the set-up runs at most
once per test session, and only when a test asks for Docker. Where the engine cannot be started
(no root, no apt, a kernel that will not run containers: the script exits 3) the Docker tests are
skipped, loudly: the reason goes into every skip and into a warning in the summary. Anything
else that fails (the image does not build) is an error, not a skip.
"""

from __future__ import annotations

import subprocess
import warnings
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[1]
SETUP = REPO / "scripts" / "docker-setup.sh"
NO_ENGINE = 3          # the script's exit code when the engine cannot be installed or started

_state: dict[str, str] = {}


def docker_image() -> str:
    """The sandbox image's tag, after the set-up; skips (loudly) when no engine can run here."""
    if "skip" in _state:
        pytest.skip(_state["skip"])
    if "image" not in _state:
        try:
            import docker  # noqa: F401
        except ImportError:
            _skip("the docker SDK is not installed (pip install 'agent-code[remote]')")
        proc = subprocess.run(["bash", str(SETUP), "--print"], capture_output=True, text=True, timeout=1800)
        if proc.returncode == NO_ENGINE:
            _skip(f"no Docker engine can be started here: {proc.stderr.strip()[-1500:]}")
        if proc.returncode != 0 or not proc.stdout.strip():
            pytest.fail(f"scripts/docker-setup.sh failed (exit {proc.returncode}):\n{proc.stderr[-4000:]}",
                        pytrace=False)
        _state["image"] = proc.stdout.strip().splitlines()[-1]
    return _state["image"]


def _skip(reason: str) -> None:
    reason = f"DOCKER TESTS SKIPPED: {reason}"
    _state["skip"] = reason
    warnings.warn(pytest.PytestWarning(reason), stacklevel=2)
    pytest.skip(reason)
