"""The rollout side of the gateway's session API, over HTTP.

Rollouts only ever talk to the gateway through these calls, so the same rollout code works
with an in-process gateway, one started per Ray node, or one running elsewhere.

A gateway with an admin token (``agent-code serve --admin-token``, required off loopback) lets
only the orchestrator open, read, finish and delete sessions: give the client the token
(``GatewayClient(url, admin_token=T)``), or set it for everything in a context with
:func:`admin_token_scope` (what ``agent-code rollout --admin-token`` does). It is sent as the
``x-agent-code-admin`` header, never as an API key, so it never becomes a session id.

Weight updates (the trainer's side of :mod:`agent_code.gateway.weights`, with the same token):
``await client.pause()`` (``mode="reject"`` refuses new turns with a 503 instead of holding
them), poll ``await client.weights()`` until ``["drained"]``, update the engine's weights, then
``await client.resume("v8")``: every turn admitted from then on records ``v8``.
"""

from __future__ import annotations

import contextlib
import contextvars
import secrets
from typing import Any, Iterator, Literal

from urllib.parse import quote

import httpx

from agent_code.trajectory.samples import Sample


ADMIN_HEADER = "x-agent-code-admin"  # the same name as agent_code.gateway.auth's (not imported: no server deps)

_scoped_admin_token: contextvars.ContextVar[str | None] = contextvars.ContextVar("agent_code_admin_token",
                                                                                 default=None)


@contextlib.contextmanager
def admin_token_scope(token: str | None) -> Iterator[None]:
    """Clients made in this context (and the tasks it starts) without an ``admin_token`` of
    their own send ``token``."""
    reset = _scoped_admin_token.set(token or None)
    try:
        yield
    finally:
        _scoped_admin_token.reset(reset)


def _seg(session_id: str) -> str:
    """A session id as one path segment (``/`` and all included)."""
    return quote(session_id, safe="")


class GatewayClientError(Exception):
    pass


class GatewayClient:
    def __init__(self, base_url: str, *, timeout: float = 120.0, admin_token: str | None = None) -> None:
        self.base_url = base_url.rstrip("/")
        token = admin_token or _scoped_admin_token.get()
        headers = {ADMIN_HEADER: token} if token else {}
        self._http = httpx.AsyncClient(base_url=self.base_url, timeout=timeout, headers=headers)

    async def __aenter__(self) -> "GatewayClient":
        return self

    async def __aexit__(self, *exc: object) -> None:
        await self.aclose()

    async def aclose(self) -> None:
        await self._http.aclose()

    async def _call(self, method: str, path: str, body: dict[str, Any] | None = None) -> dict[str, Any]:
        try:
            response = await self._http.request(method, path, json=body)
        except httpx.HTTPError as exc:
            raise GatewayClientError(f"gateway {self.base_url} unreachable: {exc}") from exc
        if response.status_code >= 400:
            try:
                message = response.json()["error"]["message"]
            except Exception:
                message = response.text[:300]
            raise GatewayClientError(f"{method} {path} → {response.status_code}: {message}")
        return response.json()

    async def open_session(self, session_id: str, *, sampling: dict[str, Any] | None = None,
                           max_context_tokens: int | None = None, max_turns: int | None = None,
                           max_new_tokens: int | None = None) -> dict[str, Any]:
        options = {"sampling": sampling, "max_context_tokens": max_context_tokens, "max_turns": max_turns,
                   "max_new_tokens": max_new_tokens}
        body = {"session_id": session_id, **{k: v for k, v in options.items() if v is not None}}
        return await self._call("POST", "/v1/sessions", body)

    async def turns(self, session_id: str) -> list[dict[str, Any]]:
        return (await self._call("GET", f"/v1/sessions/{_seg(session_id)}/turns"))["turns"]

    async def finish(self, session_id: str, *, reward: float | None, metadata: dict[str, Any] | None = None,
                     rollout_id: str | None = None, status: str | None = None) -> list[Sample]:
        body = {"reward": reward, "metadata": metadata or {}, "rollout_id": rollout_id, "status": status}
        reply = await self._call("POST", f"/v1/sessions/{_seg(session_id)}/finish",
                                 {k: v for k, v in body.items() if v is not None or k == "reward"})
        return [Sample.from_dict(s) for s in reply["samples"]]

    async def delete(self, session_id: str) -> None:
        """Forget a session on the gateway (its turns stay in the gateway's trajectory dir)."""
        await self._call("DELETE", f"/v1/sessions/{_seg(session_id)}")

    async def pause(self, mode: Literal["wait", "reject"] = "wait") -> dict[str, Any]:
        """Stop admitting new turns (``wait``: they are held until :meth:`resume`; ``reject``: they
        are refused with a 503); turns already generating finish. Returns :meth:`weights`' status."""
        if mode not in ("wait", "reject"):
            raise GatewayClientError(f"pause mode must be 'wait' or 'reject', not {mode!r}")
        return await self._call("POST", "/v1/admin/pause", {"mode": mode})

    async def resume(self, weight_version: str | None = None) -> dict[str, Any]:
        """Admit new turns again; with ``weight_version``, they (and every later turn) record it
        (an engine that reports its own version still wins). Returns the status."""
        return await self._call("POST", "/v1/admin/resume",
                                {"weight_version": weight_version} if weight_version is not None else {})

    async def weights(self) -> dict[str, Any]:
        """The gateway's weight status: ``weight_version``, ``paused``, ``mode``, ``generating``,
        ``waiting`` and ``drained`` (no turn generating: the moment to update the weights)."""
        return await self._call("GET", "/v1/admin/weights")

    async def requires_admin_token(self) -> bool:
        """Whether the gateway refuses its session routes to a request without the admin token
        (asked with no credential at all, about a session that cannot exist)."""
        try:
            async with httpx.AsyncClient(base_url=self.base_url, timeout=30) as bare:
                response = await bare.get(f"/v1/sessions/{_seg('probe-' + secrets.token_hex(16))}")
        except httpx.HTTPError as exc:
            raise GatewayClientError(f"gateway {self.base_url} unreachable: {exc}") from exc
        return response.status_code in (401, 403)

    async def healthy(self) -> bool:
        try:
            return (await self._http.get("/healthz")).status_code == 200
        except httpx.HTTPError:
            return False
