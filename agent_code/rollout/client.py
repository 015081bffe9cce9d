"""The rollout side of the gateway's session API, over HTTP.

Rollouts only ever talk to the gateway through these calls, so the same rollout code works
with an in-process gateway, one started per Ray node, or one running elsewhere.
"""

from __future__ import annotations

from typing import Any

import httpx

from agent_code.trajectory.samples import Sample


class GatewayClientError(Exception):
    pass


class GatewayClient:
    def __init__(self, base_url: str, *, timeout: float = 120.0) -> None:
        self.base_url = base_url.rstrip("/")
        self._http = httpx.AsyncClient(base_url=self.base_url, timeout=timeout)

    async def __aenter__(self) -> "GatewayClient":
        return self

    async def __aexit__(self, *exc: Any) -> None:
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

    async def open_session(self, session_id: str, **options: Any) -> dict[str, Any]:
        body = {"session_id": session_id, **{k: v for k, v in options.items() if v is not None}}
        return await self._call("POST", "/v1/sessions", body)

    async def turns(self, session_id: str) -> list[dict[str, Any]]:
        return (await self._call("GET", f"/v1/sessions/{session_id}/turns"))["turns"]

    async def finish(self, session_id: str, *, reward: float | None, metadata: dict[str, Any] | None = None,
                     rollout_id: str | None = None, status: str | None = None) -> list[Sample]:
        body = {"reward": reward, "metadata": metadata or {}, "rollout_id": rollout_id, "status": status}
        reply = await self._call("POST", f"/v1/sessions/{session_id}/finish",
                                 {k: v for k, v in body.items() if v is not None or k == "reward"})
        return [Sample.from_dict(s) for s in reply["samples"]]

    async def healthy(self) -> bool:
        try:
            return (await self._http.get("/healthz")).status_code == 200
        except httpx.HTTPError:
            return False
