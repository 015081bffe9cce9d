"""Layering: no lower layer of ``agent_code`` imports an upper one.

Every module under ``agent_code/`` is imported (so none is broken), and parsed with
:mod:`ast`: every import in it is checked — top-level ones, those inside functions (lazy imports)
and those under ``if TYPE_CHECKING:`` alike, with relative imports resolved. A unit is a
top-level package (``agent_code/tools/``) or module (``agent_code/types.py``); the root
``agent_code/__init__.py`` (only ``__version__``) is the unit ``agent_code``.

The table, lowest layer first. A unit may import its own layer and any lower one, never a
higher one:

====  ===========================================  ==========================================
 0    agent_code, types, globs, jsonl               shared value types and helpers
 1    protocols                                     canonical turns, wire formats (pure)
 2    render                                        chat templates, tokenizers
 3    engines                                       model engines
 4    parse                                         completion → text, reasoning, tool calls
 5    trajectory                                    turn records, samples, turn logs
 6    gateway                                       the turn pipeline and its HTTP server
 7    confine                                       the OS sandbox around the agent's commands
 8    tools                                         the tools and their registry (incl. skills)
 9    policy                                        shell analysis, rules, deny list, decision
10    providers                                     model providers (local: the gateway)
11    agent                                         the loop and what it owns, settings loading
12    worktree, mcp                                 git worktrees; MCP servers and their tools
13    sandbox                                       where a rollout's agent runs
14    tasks                                         tasks, workspaces, grading
15    harness                                       one CLI agent in a sandbox
16    rollout                                       rollouts, export, the inspect HTML page
17    cli                                           the command line
18    demo, __main__                                demos and the entry point
====  ===========================================  ==========================================

Two chains meet at the CLI — the agent's (tools → policy → providers → agent) and the
rollout's (sandbox → tasks → harness → rollout) — and both stand on the gateway (the local
provider and the rollout both run it). The table is linear, so it also forbids imports
between the chains that nothing needs today (sandbox → agent, for one).
"""

from __future__ import annotations

import ast
import importlib
from pathlib import Path

import pytest

import agent_code

PACKAGE = Path(agent_code.__file__).resolve().parent

LAYERS: list[tuple[str, ...]] = [
    ("agent_code", "types", "globs", "jsonl"),
    ("protocols",),
    ("render",),
    ("engines",),
    ("parse",),
    ("trajectory",),
    ("gateway",),
    ("confine",),
    ("tools",),
    ("policy",),
    ("providers",),
    ("agent",),
    ("worktree", "mcp"),
    ("sandbox",),
    ("tasks",),
    ("harness",),
    ("rollout",),
    ("trainers",),
    ("cli",),
    ("demo", "__main__"),
]
LEVEL = {unit: level for level, units in enumerate(LAYERS) for unit in units}


def module_name(path: Path) -> str:
    parts = list(path.relative_to(PACKAGE.parent).with_suffix("").parts)
    if parts[-1] == "__init__":
        parts.pop()
    return ".".join(parts)


def unit_of(module: str) -> str:
    """``agent_code.tools.base`` → ``tools``; ``agent_code`` → ``agent_code``."""
    parts = module.split(".")
    return parts[1] if len(parts) > 1 else parts[0]


def imported_modules(path: Path, source: str | None = None) -> list[tuple[int, str]]:
    """``(line, module)`` for every import in the file, at any depth, relative ones resolved
    against the file's package; ``from agent_code import a, b`` gives ``agent_code.a`` and
    ``agent_code.b`` (each may be a unit)."""
    name = module_name(path)
    package = name if path.name == "__init__.py" else name.rpartition(".")[0]
    out: list[tuple[int, str]] = []
    if source is None:
        source = path.read_text(encoding="utf-8")
    for node in ast.walk(ast.parse(source, filename=str(path))):
        if isinstance(node, ast.Import):
            out += [(node.lineno, alias.name) for alias in node.names]
        elif isinstance(node, ast.ImportFrom):
            if node.level:
                base = package.split(".")
                base = base[:len(base) - node.level + 1]
                module = ".".join(base + ([node.module] if node.module else []))
            else:
                module = node.module or ""
            if module == "agent_code":
                out += [(node.lineno, f"{module}.{alias.name}") for alias in node.names]
            else:
                out.append((node.lineno, module))
    return out


def modules() -> list[Path]:
    """Every module of the package: ``.py`` files whose folders are all packages (not the
    demo's sample project or the bundled tasks' code, which are data)."""
    def in_package(path: Path) -> bool:
        folder = path.parent
        while folder != PACKAGE:
            if not (folder / "__init__.py").is_file():
                return False
            folder = folder.parent
        return True

    return sorted(p for p in PACKAGE.rglob("*.py") if "__pycache__" not in p.parts and in_package(p))


def violations(files: list[Path], sources: dict[Path, str] | None = None) -> list[str]:
    """One line per upward import; ``sources`` stands in for files' text (the tests below)."""
    found = []
    for path in files:
        here = unit_of(module_name(path))
        for line, module in imported_modules(path, (sources or {}).get(path)):
            if module != "agent_code" and not module.startswith("agent_code."):
                continue
            there = unit_of(module)
            if there not in LEVEL:   # `from agent_code import __version__`: the root's own name
                there = "agent_code"
            if LEVEL[there] > LEVEL[here]:
                found.append(f"{path.relative_to(PACKAGE.parent)}:{line}: {here} (layer {LEVEL[here]}) "
                             f"imports {module} ({there}, layer {LEVEL[there]})")
    return sorted(set(found))


def test_the_table_names_every_package_and_module_once():
    units = {unit_of(module_name(p)) for p in modules()}
    listed = [unit for layer in LAYERS for unit in layer]
    assert len(listed) == len(set(listed)), "a unit is in two layers"
    assert units - set(listed) == set(), "add these to LAYERS (tests/test_layering.py)"
    assert set(listed) - units == set(), "LAYERS names units that no longer exist"


def test_no_lower_layer_imports_an_upper_one():
    assert violations(modules()) == []


def test_every_module_imports():
    """Each module imports (a stale import path after a move fails here, not in a user's run)."""
    failed = {}
    for path in modules():
        name = module_name(path)
        try:
            importlib.import_module(name)
        except Exception as exc:  # noqa: BLE001 - report them all
            failed[name] = repr(exc)
    assert failed == {}


@pytest.mark.parametrize("source, expected", [
    ("from agent_code.agent.loop import Agent\n", "tools (layer 8) imports agent_code.agent.loop (agent"),
    ("def f():\n    from agent_code.cli import run\n", "tools (layer 8) imports agent_code.cli ("),
    ("from typing import TYPE_CHECKING\nif TYPE_CHECKING:\n    import agent_code.policy.rules\n",
     "tools (layer 8) imports agent_code.policy.rules (policy"),
    ("from .. import demo\n", "tools (layer 8) imports agent_code.demo (demo"),
    ("from ..rollout.export import reward_text\n", "tools (layer 8) imports agent_code.rollout.export ("),
])
def test_an_upward_import_is_caught(source, expected):
    """The check can fail: a module of ``tools`` with one upward import (top level, lazy,
    type-only, relative) is reported, with its line."""
    fake = PACKAGE / "tools" / "_layering_probe.py"
    found = violations([fake], {fake: source})
    assert len(found) == 1 and expected in found[0], found


def test_downward_and_same_layer_imports_pass():
    fake = PACKAGE / "agent" / "_layering_probe.py"
    source = ("from agent_code.policy import PermissionPolicy\nfrom . import loop\n"
              "from agent_code import __version__\nimport agent_code.types\nimport json\n")
    assert violations([fake], {fake: source}) == []


def test_the_cli_default_script_is_the_demos():
    """``--provider scripted`` without ``--script`` replays the demo's script; the CLI names
    that file by path because it may not import ``agent_code.demo`` (a layer above)."""
    from agent_code.cli.run import DEMO_SCRIPT
    from agent_code.demo import DEMO_SCRIPT as demo_script

    assert DEMO_SCRIPT == demo_script and DEMO_SCRIPT.is_file()
