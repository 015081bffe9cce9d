"""Sandboxes: where a task's repository is copied and a CLI agent runs (see ``base.py``).

``create_sandbox(spec)`` picks a backend by name: ``local`` (a temp dir here, the agent as a
throw-away unprivileged user), ``docker[:IMAGE]`` (Docker SDK), ``e2b[:TEMPLATE]`` (E2B's API).
"""

from __future__ import annotations

from typing import Any

from agent_code.sandbox.base import ExecResult, Job, Sandbox, SandboxError

__all__ = ["ExecResult", "Job", "Sandbox", "SandboxError", "create_sandbox", "SANDBOXES"]

SANDBOXES = ("local", "docker", "e2b")


def create_sandbox(spec: str = "local", **options: Any) -> Sandbox:
    """A new, not yet entered sandbox for ``spec`` (``KIND[:ARG]``); enter it with ``async with``."""
    kind, _, arg = spec.partition(":")
    if kind == "local":
        from agent_code.sandbox.local import LocalSandbox

        return LocalSandbox(**options)
    if kind == "docker":
        from agent_code.sandbox.docker import DockerSandbox

        return DockerSandbox(image=arg, **options) if arg else DockerSandbox(**options)
    if kind == "e2b":
        from agent_code.sandbox.e2b import E2BSandbox

        return E2BSandbox(template=arg, **options) if arg else E2BSandbox(**options)
    raise SandboxError(f"unknown sandbox '{spec}' (choose from {', '.join(SANDBOXES)})")
