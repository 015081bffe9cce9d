"""An approval of a project MCP server covers what it runs, not only its ``.mcp.json`` entry
(``agent_code/mcp/footprint.py``), and what a person is shown about a server holds no secret.

The attack: the user approved ``python server.py``; the agent (even in acceptEdits, with no
shell) rewrites ``server.py``; the entry is unchanged, so the next ``agent-code mcp list``
(or REPL start) ran the new code as the user. Then the next spellings of it: a link swapped,
the command itself a project file or found on a ``PATH`` the entry points into the project, a
module beside the script (and one planted to shadow the standard library), ``PYTHONPATH`` and
``NODE_OPTIONS`` naming project files, ``bash -c "python x.py"``, ``python -m pkg``, a
directory given to ``node``, ``.mcp.json`` itself replaced by a link. Each server writes a
canary file when it runs: ``NAME-v1`` for the approved code, ``NAME-v2`` for the attacker's.
The real ``agent-code mcp list`` runs in a subprocess with a temporary HOME; the approval is
the REPL's (``plan`` with its question answered yes).
"""

from __future__ import annotations

import io
import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from agent_code.cli.mcp import mcp_question
from agent_code.agent.settings import folder_trusted, trust_folder
from agent_code.mcp import (APPROVALS_FILE, FAILED, ApprovalStore, McpManager, parse_servers, plan,
                            project_servers, start_servers)
from tests.conftest import cli_env

PY = sys.executable
NODE = shutil.which("node")
SERVER = """\
import json, sys
from pathlib import Path
Path({canary!r}).joinpath({mark!r}).write_text("ran")
for line in sys.stdin:   # a tiny MCP server over stdio: initialize, tools/list
    msg = json.loads(line)
    if "id" not in msg:
        continue
    result = {{}}
    if msg.get("method") == "initialize":
        result = {{"protocolVersion": msg["params"]["protocolVersion"], "capabilities": {{"tools": {{}}}},
                  "serverInfo": {{"name": "tiny", "version": "1"}}}}
    elif msg.get("method") == "tools/list":
        result = {{"tools": [{{"name": "ping", "inputSchema": {{"type": "object"}}}}]}}
    print(json.dumps({{"jsonrpc": "2.0", "id": msg["id"], "result": result}}), flush=True)
"""


def canary_py(canary: Path, mark: str) -> str:
    return f"from pathlib import Path\nPath({str(canary)!r}).joinpath({mark!r}).write_text('ran')\n"


def canary_sh(canary: Path, mark: str) -> str:
    return f"#!/bin/sh\necho ran > '{canary}/{mark}'\n"


def canary_js(canary: Path, mark: str) -> str:
    return f"require('fs').writeFileSync({json.dumps(str(canary / mark))}, 'ran');\n"


def write(path: Path, text: str, mode: int | None = None) -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(text)
    if mode is not None:
        path.chmod(mode)
    return path


def mcp_list(root: Path, home: Path, *args: str) -> str:
    """``agent-code mcp list`` in ``root``, a folder the user trusts (folder trust is
    tests/test_folder_trust.py's; here the approval is what is tested), with the OS sandbox off:
    it would keep the servers' canary writes outside the project from happening at all, and
    this file proves the approval alone."""
    if not folder_trusted(root, home):
        trust_folder(root, home, how="test")
    proc = subprocess.run([PY, "-m", "agent_code", "mcp", "list", "-C", str(root), *args], capture_output=True,
                          text=True, cwd=root, env=cli_env(HOME=str(home), AGENT_CODE_SANDBOX="0"), timeout=90)
    assert proc.returncode == 0, proc.stderr
    return proc.stdout + proc.stderr


def approve(root: Path, home: Path, asked: list | None = None) -> list:
    """The REPL's start-up question, answered yes on the terminal, for every project server."""
    store = ApprovalStore(home / ".agent-code" / APPROVALS_FILE)
    return plan(root, project_servers(root), store, repl=True,
                ask=lambda config, verdict=None: (asked.append((config.name, verdict)) if asked is not None else None)
                or True)


def block(output: str, name: str) -> str:
    """The lines ``mcp list`` printed about one server."""
    lines = output.splitlines()
    start = next(i for i, line in enumerate(lines) if line.startswith(f"{name}  ["))
    end = next((i for i in range(start + 1, len(lines)) if not lines[i].startswith("    ")), len(lines))
    return "\n".join(lines[start:end])


@pytest.fixture
def site(tmp_path):
    home, root, canary = tmp_path / "home", tmp_path / "project", tmp_path / "canary"
    for d in (home, root, canary):
        d.mkdir()
    return home, root, canary


def test_a_rewritten_script_of_an_approved_server_never_runs_and_is_asked_about_again(site):
    home, root, canary = site
    write(root / "server.py", SERVER.format(canary=str(canary), mark="tiny-v1"))
    write(root / ".mcp.json", json.dumps({"mcpServers": {"tiny": {"command": PY, "args": ["server.py"]}}}))
    approve(root, home)
    listed = mcp_list(root, home)
    assert "tiny  [project: .mcp.json, approved]  connected tiny 1, 1 tool" in listed, listed
    assert (canary / "tiny-v1").exists()

    # the agent rewrites the script (an edit, no shell): the entry is the same
    write(root / "server.py", SERVER.format(canary=str(canary), mark="tiny-v2"))
    listed = mcp_list(root, home)
    assert not (canary / "tiny-v2").exists(), "the changed script ran"
    assert "tiny  [project: .mcp.json]  not approved" in listed
    assert "changed since you approved it: server.py" in block(listed, "tiny")

    # the REPL asks again, saying what changed; approved, the new script is what runs
    asked: list = []
    approve(root, home, asked)
    assert [name for name, _ in asked] == ["tiny"]
    assert asked[0][1].why() == "changed since you approved it: server.py"
    assert "server.py" in asked[0][1].footprint.files()
    listed = mcp_list(root, home)
    assert "connected tiny" in block(listed, "tiny") and (canary / "tiny-v2").exists()


def test_the_next_spellings_of_the_attack(site, tmp_path):
    """Each server is approved and ran its v1; then each is changed the way a clever attacker
    would next try; the next ``mcp list`` runs none of them and names what changed."""
    home, root, canary = site
    outside = tmp_path / "outside"
    servers: dict[str, dict] = {}
    expect: dict[str, str] = {}      # server -> what the listing says changed
    changes = []

    # a link in the project, swapped to another file (outside the project)
    write(root / "link" / "v1.py", canary_py(canary, "link-v1"))
    (root / "link" / "run.py").symlink_to("v1.py")
    write(outside / "evil.py", canary_py(canary, "link-v2"))
    servers["link"] = {"command": PY, "args": ["link/run.py"]}
    changes.append(lambda: ((root / "link" / "run.py").unlink(), (root / "link" / "run.py").symlink_to(outside / "evil.py")))
    expect["link"] = "link/run.py"

    # the command itself is a project file
    write(root / "projcmd" / "server", canary_sh(canary, "projcmd-v1"), 0o755)
    servers["projcmd"] = {"command": "./projcmd/server"}
    changes.append(lambda: write(root / "projcmd" / "server", canary_sh(canary, "projcmd-v2"), 0o755))
    expect["projcmd"] = "projcmd/server"

    # the command found on a PATH the entry points into the project
    write(root / "pathcmd" / "bin" / "mcp-tool", canary_sh(canary, "pathcmd-v1"), 0o755)
    servers["pathcmd"] = {"command": "mcp-tool", "env": {"PATH": "./pathcmd/bin:/usr/bin:/bin"}}
    changes.append(lambda: write(root / "pathcmd" / "bin" / "mcp-tool", canary_sh(canary, "pathcmd-v2"), 0o755))
    expect["pathcmd"] = "pathcmd/bin/mcp-tool"

    # ... and a file planted earlier on that PATH, shadowing the interpreter it named
    python_dir = str(Path(PY).parent)
    servers["shadow"] = {"command": Path(PY).name, "env": {"PATH": f"./shadow/bin:{python_dir}:/usr/bin:/bin"},
                         "args": ["-c", canary_py(canary, "shadow-v1")]}
    (root / "shadow" / "bin").mkdir(parents=True)
    changes.append(lambda: write(root / "shadow" / "bin" / Path(PY).name, canary_sh(canary, "shadow-v2"), 0o755))
    expect["shadow"] = "command"

    # a module beside the script, which it imports
    write(root / "helper" / "server.py", "import helper\n")
    write(root / "helper" / "helper.py", canary_py(canary, "helper-v1"))
    servers["helper"] = {"command": PY, "args": ["helper/server.py"]}
    changes.append(lambda: write(root / "helper" / "helper.py", canary_py(canary, "helper-v2")))
    expect["helper"] = "helper/helper.py"

    # ... and one planted beside it to shadow the standard library's
    write(root / "stdlib" / "server.py", "import json\n" + canary_py(canary, "stdlib-v1"))
    servers["stdlib"] = {"command": PY, "args": ["stdlib/server.py"]}
    changes.append(lambda: write(root / "stdlib" / "json.py", canary_py(canary, "stdlib-v2")))
    expect["stdlib"] = "stdlib/json.py"

    # a script in a subdirectory importing a package below it
    write(root / "sub" / "server.py", "import pkg.mod\n")
    write(root / "sub" / "pkg" / "__init__.py", "")
    write(root / "sub" / "pkg" / "mod.py", canary_py(canary, "sub-v1"))
    servers["sub"] = {"command": PY, "args": ["sub/server.py"]}
    changes.append(lambda: write(root / "sub" / "pkg" / "mod.py", canary_py(canary, "sub-v2")))
    expect["sub"] = "sub/pkg/mod.py"

    # PYTHONPATH naming a project directory
    write(root / "pp" / "tool.py", canary_py(canary, "pp-v1"))
    servers["pp"] = {"command": PY, "args": ["-c", "import tool"], "env": {"PYTHONPATH": "pp"}}
    changes.append(lambda: write(root / "pp" / "tool.py", canary_py(canary, "pp-v2")))
    expect["pp"] = "pp/tool.py"

    # the script named inside a shell's -c
    write(root / "bashc" / "srv.py", canary_py(canary, "bashc-v1"))
    servers["bashc"] = {"command": "bash", "args": ["-c", f"exec '{PY}' bashc/srv.py"]}
    changes.append(lambda: write(root / "bashc" / "srv.py", canary_py(canary, "bashc-v2")))
    expect["bashc"] = "bashc/srv.py"

    # python -m a project package (its __main__ in a subdirectory)
    write(root / "modpkg" / "__init__.py", "")
    write(root / "modpkg" / "sub" / "__init__.py", "")
    write(root / "modpkg" / "sub" / "run.py", canary_py(canary, "modpkg-v1"))
    write(root / "modpkg" / "__main__.py", "import modpkg.sub.run\n")
    servers["modpkg"] = {"command": PY, "args": ["-m", "modpkg"]}
    changes.append(lambda: write(root / "modpkg" / "sub" / "run.py", canary_py(canary, "modpkg-v2")))
    expect["modpkg"] = "modpkg/sub/run.py"

    if NODE is not None:
        # NODE_OPTIONS requiring a project file
        write(root / "nodeopt" / "hook.js", canary_js(canary, "nodeopt-v1"))
        servers["nodeopt"] = {"command": NODE, "args": ["-e", "0"],
                              "env": {"NODE_OPTIONS": "--require ./nodeopt/hook.js"}}
        changes.append(lambda: write(root / "nodeopt" / "hook.js", canary_js(canary, "nodeopt-v2")))
        expect["nodeopt"] = "nodeopt/hook.js"
        # a directory given to node (npx ./local alike): a file two levels down
        write(root / "nodedir" / "index.js", "require('./lib/run.js');\n")
        write(root / "nodedir" / "lib" / "run.js", canary_js(canary, "nodedir-v1"))
        servers["nodedir"] = {"command": NODE, "args": ["./nodedir"]}
        changes.append(lambda: write(root / "nodedir" / "lib" / "run.js", canary_js(canary, "nodedir-v2")))
        expect["nodedir"] = "nodedir/lib/run.js"

    write(root / ".mcp.json", json.dumps({"mcpServers": servers}, indent=1))
    approve(root, home)
    mcp_list(root, home)
    ran = sorted(p.name for p in canary.iterdir())
    assert ran == sorted(f"{name}-v1" for name in servers), ran    # each approved server ran

    for change in changes:
        change()
    listed = mcp_list(root, home)
    assert sorted(p.name for p in canary.iterdir()) == ran, "a changed server ran"
    for name, label in expect.items():
        said = block(listed, name)
        assert f"{name}  [project: .mcp.json]  not approved" in said, said
        assert "changed since you approved it: " in said, said
        changed = said.split("changed since you approved it: ", 1)[1].split(";")[0].split(", ")
        assert label in changed, said


def test_mcp_json_replaced_by_a_link_asks_again(site):
    home, root, canary = site
    write(root / "s.py", canary_py(canary, "s-v1"))
    text = json.dumps({"mcpServers": {"s": {"command": PY, "args": ["s.py"]}}})
    write(root / ".mcp.json", text)
    approve(root, home)
    assert ApprovalStore(home / ".agent-code" / APPROVALS_FILE).decision(root, project_servers(root)[0]) == "approved"
    (root / ".mcp.json").unlink()
    write(root / "cfg" / "servers.json", text)       # the same entry, behind a link
    (root / ".mcp.json").symlink_to("cfg/servers.json")
    listed = mcp_list(root, home)
    assert not (canary / "s-v1").exists()
    assert "changed since you approved it: .mcp.json itself" in block(listed, "s")


def test_the_files_are_checked_again_immediately_before_the_spawn(site):
    """Approved, then changed between the plan and the start: the guard refuses the spawn."""
    home, root, canary = site
    write(root / "late.py", canary_py(canary, "late-v1"))
    write(root / ".mcp.json", json.dumps({"mcpServers": {"late": {"command": PY, "args": ["late.py"]}}}))
    planned = approve(root, home)
    assert planned[0].start and planned[0].approved is not None
    write(root / "late.py", canary_py(canary, "late-v2"))
    with McpManager(root, startup_timeout=20) as manager:
        start_servers(manager, planned)
        state = manager.servers["late"]
        assert state.status == FAILED and state.error == "not started: changed since you approved it: late.py"
    assert not list(canary.iterdir())


def test_an_approval_from_before_footprints_is_asked_again(site):
    home, root, _ = site
    write(root / ".mcp.json", json.dumps({"mcpServers": {"old": {"command": PY, "args": ["x.py"]}}}))
    (config,) = project_servers(root)
    store = ApprovalStore(home / ".agent-code" / APPROVALS_FILE)
    store.path.parent.mkdir(parents=True)
    store.path.write_text(json.dumps({"version": 1, "projects": {str(root.resolve()): {
        "old": {"digest": config.digest(), "decision": "approved", "entry": config.entry}}}}))
    verdict = store.check(root, config)
    assert verdict.decision is None and "approved before approvals covered them" in (verdict.why() or "")
    # a "no" stays a no while the entry is the same, whatever its files do
    store.record(root, config, "declined")
    write(root / "x.py", "print(1)\n")
    assert store.decision(root, config) == "declined"


def test_a_directory_too_large_to_pin_is_asked_about_at_every_start(site):
    from agent_code.mcp.footprint import MAX_FILES, footprint

    home, root, canary = site
    big = root / "big"
    big.mkdir()
    for i in range(MAX_FILES + 1):
        (big / f"f{i}.txt").write_text("x")
    write(root / "b.py", canary_py(canary, "b-v1"))
    write(root / ".mcp.json", json.dumps({"mcpServers": {"b": {"command": PY, "args": ["b.py", "big"]}}}))
    (config,) = project_servers(root)
    assert footprint(config, root).unpinned
    approve(root, home)
    store = ApprovalStore(home / ".agent-code" / APPROVALS_FILE)
    verdict = store.check(root, config)
    assert verdict.decision is None and "an approval of it lasts one start" in (verdict.why() or "")
    listed = mcp_list(root, home)
    assert "not approved" in block(listed, "b") and "big" in block(listed, "b")
    assert not (canary / "b-v1").exists()


def test_a_fifo_named_by_an_argument_does_not_hang_the_check(site):
    from agent_code.mcp.footprint import footprint

    _, root, _ = site
    os.mkfifo(root / "pipe")
    (config,) = parse_servers({"mcpServers": {"f": {"command": PY, "args": ["pipe"]}}}, "project", ".mcp.json")
    assert footprint(config, root).pins["pipe"].startswith("p-file")


SECRET = "sk-live-7f3a9c1e5b2d8f4a6c0e"
URL_SECRET = "q9w8e7r6t5y4u3i2o1p0"


def http_servers(port: int) -> dict:
    return {"mcpServers": {"tracker": {
        "type": "http", "url": f"http://127.0.0.1:{port}/mcp?key=${{TRACKER_URL_KEY}}",
        "headers": {"Authorization": "Bearer ${TRACKER_TOKEN}", "X-Api-Key": "literal-key-0123456789abcdef",
                    "X-Team": "acme", "X-Session": "${TRACKER_TOKEN}"}}}}


class FakeTerminal(io.StringIO):
    def isatty(self) -> bool:
        return True


def test_headers_are_shown_with_their_secrets_masked(site, monkeypatch):
    home, root, _ = site
    import socket

    with socket.socket() as s:       # a port nothing listens on: the cli server fails, its error is listed
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    servers = http_servers(port)
    servers["mcpServers"]["local"] = {"command": "db-mcp", "args": ["--api-key", "${TRACKER_TOKEN}",
                                                                    "--url=https://db/?k=${TRACKER_URL_KEY}"]}
    write(root / ".mcp.json", json.dumps(servers))
    monkeypatch.setenv("TRACKER_TOKEN", SECRET)
    monkeypatch.setenv("TRACKER_URL_KEY", URL_SECRET)

    # the approval question
    config, local = project_servers(root)
    out = FakeTerminal()
    store = ApprovalStore(home / ".agent-code" / APPROVALS_FILE)
    assert mcp_question(FakeTerminal("n\n"), out)(config, store.check(root, config)) is False
    asked = out.getvalue()
    for name in ("Authorization", "X-Api-Key", "X-Team", "X-Session"):
        assert f"{name}: " in asked
    assert "Authorization: Bearer ****…" in asked and "${TRACKER_TOKEN}" in asked and "${TRACKER_URL_KEY}" in asked
    assert "X-Team: acme" in asked and f"127.0.0.1:{port}/mcp" in asked

    # mcp list: the project's (not approved) and the same servers from --mcp-config (started, failing)
    listed = mcp_list(root, home, "--mcp-config", json.dumps({"mcpServers": {
        "cli-tracker": http_servers(port)["mcpServers"]["tracker"]}}))
    assert "Authorization: Bearer ****…" in block(listed, "tracker")
    assert "X-Api-Key: ****…" in block(listed, "cli-tracker") and "failed" in block(listed, "cli-tracker")
    assert "--api-key '****…" in block(listed, "local") and "(from ${TRACKER_TOKEN})" in block(listed, "local")
    for shown in (asked, listed):
        for secret in (SECRET, URL_SECRET, "literal-key-0123456789abcdef"):
            assert secret not in shown and secret[:8] not in shown and secret[4:12] not in shown


def test_what_is_shown_cannot_redraw_the_terminal(site):
    """An entry's text with a newline, an escape sequence (erase the line, move up) or a bidi
    override is shown as escapes: the question shows what runs, not what the entry draws."""
    home, root, _ = site
    write(root / ".mcp.json", json.dumps({"mcpServers": {"odd\u001b[1A": {
        "command": "node", "args": ["evil.js\u001b[2K\rsafe.js", "a\nb", "x\u202ey"]}}}))
    (config,) = project_servers(root)
    out = FakeTerminal()
    mcp_question(FakeTerminal("n\n"), out)(config)
    listed = mcp_list(root, home)
    for shown in (out.getvalue(), listed):
        assert "\x1b" not in shown and "\u202e" not in shown and "a\nb" not in shown
        assert "evil.js\\x1b[2K\\x0dsafe.js" in shown and "\\u202e" in shown
