"""Attacks on the wall (agent_code/confine/wall.py) with real bash, bwrap, git and a real TCP server
on the host's loopback — and no permission policy at all: each command goes straight through
:meth:`Wall.wrap`, as in bypassPermissions with the deny list switched off.

Every attack (``tests/confine_driver.py`` lists them: the issue's acceptance list, then the
variants a clever attacker tries next) runs as the test's user and as an unprivileged one
(``acsbx`` where it exists, else ``nobody``; the project, its home and the canaries are theirs),
inside the wall and bare. The bare run shows that the attack works and that its check sees it —
so each walled check can fail — the walled run that the host is left unchanged. One driver
process per (user, mode) runs them all.

The homes and canaries lie outside ``/tmp`` — under ``/var/lib`` as root, else ``~/.cache`` —
since the wall's ``/tmp`` is private: a home under it would be out of sight anyway, too easy.
"""

from __future__ import annotations

import json
import os
import pwd
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path

import pytest

from tests.confine_driver import ATTACKS

REPO = Path(__file__).resolve().parents[1]
DRIVER = Path(__file__).with_name("confine_driver.py")
pytestmark = pytest.mark.skipif(shutil.which("bwrap") is None,
                                reason="bubblewrap (bwrap) is not installed: the OS sandbox cannot be tested")

# never run bare (they would damage this machine) or cannot be shown bare everywhere: a nested
# user namespace may be refused to an unprivileged user by the kernel, ptrace of the parent by Yama
WALLED_ONLY = {"rm_root"}
BARE_MAYBE = {"nested_unshare", "nested_bwrap", "ptrace_host", "symlink_hooks"}


def unprivileged_user() -> str | None:
    if os.geteuid() != 0 or shutil.which("setpriv") is None:
        return None
    for name in ("acsbx", "nobody"):
        try:
            pwd.getpwnam(name)
            return name
        except KeyError:
            continue
    return None


def _base() -> Path:
    top = Path("/var/lib/agent-code-wall-tests") if os.geteuid() == 0 else Path.home() / ".cache" / "agent-code-wall-tests"
    top.mkdir(parents=True, exist_ok=True)
    os.chmod(top, 0o755)
    return Path(tempfile.mkdtemp(dir=top))


def run_attacks(user: str, walled: bool) -> dict[str, dict]:
    names = [n for n in ATTACKS if walled or n not in WALLED_ONLY]
    base = _base()
    try:
        argv = [sys.executable, str(DRIVER), json.dumps({"base": str(base), "walled": walled, "attacks": names})]
        if user == "unprivileged":
            name = unprivileged_user()
            if name is None:
                pytest.skip("the unprivileged runs need root (to switch user) and setpriv")
            entry = pwd.getpwnam(name)
            os.chown(base, entry.pw_uid, entry.pw_gid)
            argv = ["setpriv", f"--reuid={name}", f"--regid={name}", "--clear-groups", *argv]
        env = {**os.environ, "PYTHONPATH": str(REPO)}
        done = subprocess.run(argv, env=env, capture_output=True, text=True, timeout=300, cwd="/")
        assert done.returncode == 0, done.stderr[-3000:]
        return json.loads(done.stdout)
    finally:
        shutil.rmtree(base, ignore_errors=True)


@pytest.fixture(scope="module")
def outcomes() -> dict[tuple[str, bool], dict]:
    return {}


def outcome(outcomes: dict, user: str, walled: bool) -> dict:
    if (user, walled) not in outcomes:
        outcomes[(user, walled)] = run_attacks(user, walled)
    return outcomes[(user, walled)]


@pytest.mark.parametrize("user", ["self", "unprivileged"])
@pytest.mark.parametrize("name", list(ATTACKS))
def test_the_attack_fails_inside_the_wall(outcomes, user, name):
    result = outcome(outcomes, user, True)[name]
    assert result["changed"] is None, f"{name} as {user}: {result['changed']}\n{result['output']}"


@pytest.mark.parametrize("user", ["self", "unprivileged"])
def test_bare_the_attacks_work(outcomes, user):
    """Without the wall the same commands change the host, and the checks see it."""
    bare = outcome(outcomes, user, False)
    expected = set(ATTACKS) - WALLED_ONLY - BARE_MAYBE
    missed = {name: bare[name]["output"] for name in expected if bare[name]["changed"] is None}
    assert missed == {}
