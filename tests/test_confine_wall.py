"""The wall (agent_code/confine/wall.py) lets ordinary work through: real bash, bwrap, git and pytest
inside it, in a project under ``/tmp`` (the private ``/tmp`` binds it back) — and its settings,
its description, :meth:`Wall.contains_write` and the start-up banner without one.
(Attacks: tests/test_confine_attacks.py.)"""

from __future__ import annotations

import http.server
import os
import shutil
import subprocess
import sys
import threading
from pathlib import Path

import pytest

from agent_code.confine import NoWall, Wall, WallSettings, open_wall, wall_settings

needs_bwrap = pytest.mark.skipif(shutil.which("bwrap") is None,
                                 reason="bubblewrap (bwrap) is not installed: the OS sandbox cannot be tested")
GIT_ENV = {"GIT_AUTHOR_NAME": "t", "GIT_AUTHOR_EMAIL": "t@t", "GIT_COMMITTER_NAME": "t", "GIT_COMMITTER_EMAIL": "t@t",
           "GIT_CONFIG_NOSYSTEM": "1"}


def env_for(home: Path) -> dict[str, str]:
    return {"PATH": os.environ.get("PATH", "/usr/bin:/bin"), "HOME": str(home), "LANG": "C.UTF-8", **GIT_ENV}


def run(wall: Wall, command: str, cwd: Path, env: dict[str, str]) -> subprocess.CompletedProcess:
    argv, env = wall.wrap(["bash", "-c", command], env)
    return subprocess.run(argv, env=env, cwd=cwd, capture_output=True, text=True, timeout=60,
                          stdin=subprocess.DEVNULL)


@pytest.fixture
def project(tmp_path, monkeypatch):
    home = tmp_path / "home"
    home.mkdir()
    monkeypatch.setenv("HOME", str(home))
    root = tmp_path / "project"
    root.mkdir()
    subprocess.run(["git", "init", "-q"], cwd=root, check=True, env={**os.environ, **GIT_ENV})
    (root / "app.py").write_text("def add(a, b):\n    return a + b\n")
    (root / "test_app.py").write_text("from app import add\n\ndef test_add():\n    assert add(1, 2) == 3\n")
    subprocess.run(["git", "add", "."], cwd=root, check=True, env={**os.environ, **GIT_ENV})
    subprocess.run(["git", "commit", "-qm", "init"], cwd=root, check=True, env={**os.environ, **GIT_ENV})
    return root


@pytest.fixture
def wall(project):
    opened = open_wall(project)
    assert isinstance(opened, Wall), getattr(opened, "reason", "")
    yield opened
    opened.close()


@needs_bwrap
def test_ordinary_work_runs_inside(wall, project):
    env = env_for(Path(os.environ["HOME"]))
    done = run(wall, "echo new > new.txt && sed -i 's/a + b/b + a/' app.py && cat /usr/share/common-licenses/GPL-3 "
                     ">/dev/null 2>&1; ls /usr/bin >/dev/null && git add -A && git commit -qm edit && git log --oneline "
                     "| wc -l && echo tmp > \"$TMPDIR/t\" && cat /tmp/t && echo $TMPDIR", project, env)
    assert done.returncode == 0, done.stderr
    assert done.stdout.split() == ["2", "tmp", "/tmp"]
    assert (project / "new.txt").read_text() == "new\n"
    assert "b + a" in (project / "app.py").read_text()
    assert (wall.tmp / "t").read_text() == "tmp\n"   # the session's temp dir, not the host's /tmp
    assert not Path("/tmp/t").exists() or Path("/tmp/t").read_text() != "tmp\n"


@needs_bwrap
def test_pytest_runs_inside_with_this_interpreter(wall, project):
    env = env_for(Path(os.environ["HOME"]))
    env["PATH"] = f"{Path(sys.executable).parent}:{env['PATH']}"
    done = run(wall, f"{sys.executable} -m pytest -q -p no:cacheprovider test_app.py", project, env)
    assert done.returncode == 0, done.stdout + done.stderr
    assert "1 passed" in done.stdout


@needs_bwrap
def test_git_commit_in_a_worktree(project, tmp_path):
    tree = tmp_path / "tree"
    subprocess.run(["git", "worktree", "add", "-q", "-b", "side", str(tree)], cwd=project, check=True,
                   env={**os.environ, **GIT_ENV})
    opened = open_wall(tree)
    assert isinstance(opened, Wall)
    try:
        assert (project / ".git").resolve() in opened.writable   # the common dir: objects and refs
        assert (project / ".git" / "hooks").resolve() in opened.protected
        assert (tree / ".git") in opened.protected   # the file naming the git dir
        env = env_for(Path(os.environ["HOME"]))
        done = run(opened, "echo w > w.txt && git add w.txt && git commit -qm w && git log --oneline | wc -l; "
                           "echo x > \"$(git rev-parse --git-common-dir)/hooks/pre-commit\"; "
                           "echo 'gitdir: /elsewhere' > .git", tree, env)
        assert done.stdout.split()[0] == "2", done.stderr
        assert "Read-only file system" in done.stderr
        assert not (project / ".git" / "hooks" / "pre-commit").exists()
        assert (tree / ".git").read_text().startswith("gitdir: ") and "/elsewhere" not in (tree / ".git").read_text()
    finally:
        opened.close()
    log = subprocess.run(["git", "log", "--oneline", "side"], cwd=project, capture_output=True, text=True).stdout
    assert len(log.splitlines()) == 2


@needs_bwrap
def test_a_venv_and_path_entry_under_tmp_stay_reachable(wall, project, tmp_path):
    tools = tmp_path / "tools-bin"
    tools.mkdir()
    (tools / "hello-wall").write_text("#!/bin/sh\necho hello from tools\n")
    (tools / "hello-wall").chmod(0o755)
    env = env_for(Path(os.environ["HOME"]))
    env["PATH"] = f"{tools}:{env['PATH']}"
    done = run(wall, "hello-wall && touch \"$(command -v hello-wall)\"", project, env)
    assert done.stdout.strip() == "hello from tools"
    assert done.returncode != 0   # visible, but read-only


@needs_bwrap
def test_close_removes_the_session_temp_and_is_idempotent(project):
    opened = open_wall(project)
    assert isinstance(opened, Wall)
    run(opened, "echo x > /tmp/kept", project, env_for(Path(os.environ["HOME"])))
    assert (opened.tmp / "kept").exists()
    opened.close()
    opened.close()
    assert not opened.tmp.exists()


@needs_bwrap
def test_contains_write(wall, project, tmp_path):
    (project / "out").symlink_to("/etc")
    (project / "in").symlink_to(project / "sub")
    assert wall.contains_write("app.py") and wall.contains_write(project / "new" / "file")
    assert wall.contains_write("in/x") and wall.contains_write("/tmp/anything") and wall.contains_write("/dev/null")
    assert not wall.contains_write("out/passwd")   # the link leads to the read-only root
    assert not wall.contains_write(".git/hooks/pre-commit") and not wall.contains_write(".git/config")
    assert not wall.contains_write(".agent/settings.json") and not wall.contains_write("/etc/passwd")
    assert not wall.contains_write("/root/.bashrc") and not wall.contains_write("/var/lib/x")
    # this test's home lies under /tmp: inside, that is the session's private /tmp (contained)
    assert wall.contains_write(Path(os.environ["HOME"]) / ".bashrc")
    assert wall.contains_write(".git/objects/x")   # commits work


@needs_bwrap
def test_describe_and_agent_dir(wall, project):
    assert (project / ".agent").is_dir()   # created so it can be mounted read-only
    line = wall.describe()
    assert line.startswith(f"bubblewrap: writes only {project}, temp; read-only: ")
    assert ".git/hooks" in line and ".agent" in line and line.endswith("network off")


class _Host(http.server.BaseHTTPRequestHandler):
    def do_GET(self) -> None:
        self.send_response(200)
        self.end_headers()
        self.wfile.write(b"hello from the host")

    def log_message(self, *args: object) -> None:
        pass


@pytest.fixture
def host_service():
    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), _Host)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    yield server.server_address[1]
    server.shutdown()
    server.server_close()


FETCH = ("import sys, urllib.request as u\n"
         "try:\n"
         "    print(u.urlopen(sys.argv[1], timeout=10).read().decode())\n"
         "except Exception as e:\n"
         "    print('FAILED', e)\n")


@needs_bwrap
@pytest.mark.parametrize("allowed", [(), ("127.0.0.1",), ("example.org", "*.example.org")])
def test_the_network_is_only_the_proxy_and_the_proxy_only_where_a_rule_allows(project, host_service, allowed):
    """A host service on loopback: reached only through the egress proxy and only when a rule
    names it; a direct connection never (the wall's network namespace has only its own lo)."""
    opened = open_wall(project, WallSettings(allowed_domains=allowed))
    assert isinstance(opened, Wall)
    url = f"http://127.0.0.1:{host_service}/"
    try:
        env = {**env_for(Path(os.environ["HOME"])), "FETCH": FETCH}
        # through the proxy (NO_PROXY emptied: loopback normally stays direct) and directly
        via = run(opened, f'NO_PROXY= no_proxy= {sys.executable} -c "$FETCH" {url}', project, env)
        direct = run(opened, f'{sys.executable} -c "$FETCH" {url}', project, env)
        assert direct.stdout.startswith("FAILED"), direct.stdout + direct.stderr
        if allowed == ("127.0.0.1",):
            assert via.stdout.strip() == "hello from the host", via.stdout + via.stderr
            assert "network only through the proxy, to 127.0.0.1" in opened.describe()
        else:
            assert via.stdout.startswith("FAILED"), via.stdout + via.stderr
            if allowed:
                assert "403" in via.stdout   # the proxy's refusal, with its reason
        interfaces = run(opened, "tail -n +3 /proc/net/dev | cut -d: -f1", project, env)   # this netns's
        assert interfaces.stdout.split() == ["lo"], interfaces.stdout
    finally:
        opened.close()


def test_settings():
    assert wall_settings(None, "x") == WallSettings()
    parsed = wall_settings({"enabled": False, "allowed_domains": ["PyPI.org", "*.github.com"],
                            "writable": ["~/.cache/pip"], "deny_read": ["secrets"]}, "s.json")
    assert parsed == WallSettings(False, ("pypi.org", "*.github.com"), ("~/.cache/pip",), ("secrets",))
    for bad, message in [([], "must be an object"), ({"enabled": "no"}, "true or false"),
                         ({"writeable": []}, "unknown key 'writeable'"), ({"writable": ["rel/path"]}, "absolute"),
                         ({"writable": ["/"]}, "everything writable"), ({"allowed_domains": ["http://x.com"]}, "not a domain"),
                         ({"deny_read": "x"}, "list of non-empty strings")]:
        with pytest.raises(ValueError, match=message) as caught:
            wall_settings(bad, "~/.agent-code/settings.json")
        assert "~/.agent-code/settings.json" in str(caught.value)


def test_no_wall(monkeypatch, tmp_path):
    assert open_wall(tmp_path, WallSettings(enabled=False)).reason.startswith("turned off")  # type: ignore[union-attr]
    monkeypatch.setenv("PATH", str(tmp_path))   # no bwrap on PATH
    missing = open_wall(tmp_path)
    assert isinstance(missing, NoWall) and missing.reason == "bwrap not found: install bubblewrap"
    banner = missing.banner()
    assert "unconfined" in banner and "apt install bubblewrap" in banner and "--no-sandbox" in banner
    assert "\n" not in banner
    assert isinstance(open_wall(Path("/")), NoWall)


def _cli(tmp_path: Path, project: Path, command: str, *flags: str, path: str | None = None):
    """A headless scripted session in bypassPermissions whose model runs ``command`` with bash."""
    import json

    from conftest import cli_env, run_cli

    script = tmp_path / "script.jsonl"
    script.write_text(json.dumps([{"type": "tool_use", "id": "b1", "name": "bash", "input": {"command": command}}])
                      + "\n" + json.dumps([{"type": "text", "text": "done"}]) + "\n")
    env = cli_env(HOME=os.environ["HOME"], AGENT_CODE_SANDBOX=None, **({"PATH": path} if path else {}))
    return run_cli("-p", "--provider", "scripted", "--script", str(script), "-C", str(project),
                   "--permission-mode", "bypassPermissions", "--no-session-persistence", *flags, "go", env=env)


ATTACK = ("mkdir -p .agent; echo '#!/bin/sh' > .git/hooks/pre-commit; echo '{\"permissions\": {\"defaultMode\": \"bypassPermissions\"}}' "
          "> .agent/settings.json; echo fine > ok.txt")


@needs_bwrap
def test_the_cli_runs_the_bash_tool_inside_the_wall(project, tmp_path):
    proc = _cli(tmp_path, project, ATTACK)
    assert proc.returncode == 0 and proc.stderr == "", proc.stderr
    assert (project / "ok.txt").read_text() == "fine\n"
    assert not (project / ".git" / "hooks" / "pre-commit").exists()
    assert not (project / ".agent" / "settings.json").exists()


@needs_bwrap
def test_no_sandbox_runs_commands_unconfined_and_says_so(project, tmp_path):
    proc = _cli(tmp_path, project, ATTACK, "--no-sandbox")
    assert proc.stderr.strip() == ("agent-code: the OS sandbox is off (turned off by --no-sandbox): "
                                   "commands run unconfined"), proc.stderr
    assert (project / ".git" / "hooks" / "pre-commit").exists() and (project / ".agent" / "settings.json").exists()


@needs_bwrap
def test_hooks_run_inside_the_wall(project, tmp_path):
    import json

    user = Path(os.environ["HOME"]) / ".agent-code"
    user.mkdir()
    (user / "settings.json").write_text(json.dumps({"hooks": {"Stop": [{"hooks": [{"type": "command", "command":
        "echo '#!/bin/sh' > .git/hooks/post-checkout || echo blocked > hook.txt"}]}]}}))
    proc = _cli(tmp_path, project, "true")
    assert proc.returncode == 0, proc.stderr
    assert (project / "hook.txt").read_text() == "blocked\n"
    assert not (project / ".git" / "hooks" / "post-checkout").exists()


def test_without_bwrap_the_banner_says_so_once(project, tmp_path):
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    for name in ("bash", "git", "true"):
        found = shutil.which(name)
        if found:
            (bin_dir / name).symlink_to(found)
    proc = _cli(tmp_path, project, "echo fine > ok.txt", path=str(bin_dir))
    assert proc.returncode == 0, proc.stderr
    lines = [line for line in proc.stderr.splitlines() if "OS sandbox" in line]
    assert len(lines) == 1 and "no OS sandbox (bwrap not found: install bubblewrap)" in lines[0]
    assert (project / "ok.txt").exists()
