"""What the HTTP engines (SGLang, vLLM) share: one httpx client per event loop, and
turning an error response into one readable line."""

from __future__ import annotations

import asyncio

import httpx


class LoopClient:
    """An ``httpx.AsyncClient`` made on first use in the running loop (and remade if the
    loop changes: a client cannot outlive the loop it was made in)."""

    def __init__(self, base_url: str, *, timeout: float, headers: dict[str, str],
                 transport: httpx.AsyncBaseTransport | None = None) -> None:
        self.base_url, self.timeout, self.headers, self.transport = base_url, timeout, headers, transport
        self._client: httpx.AsyncClient | None = None
        self._loop: asyncio.AbstractEventLoop | None = None

    def get(self) -> httpx.AsyncClient:
        loop = asyncio.get_running_loop()
        if self._client is None or self._loop is not loop or self._client.is_closed:
            self._client = httpx.AsyncClient(
                base_url=self.base_url, headers=self.headers, transport=self.transport,
                timeout=httpx.Timeout(self.timeout, connect=min(10.0, self.timeout)))
            self._loop = loop
        return self._client

    async def aclose(self) -> None:
        if self._client is not None:
            client, self._client = self._client, None
            try:
                await client.aclose()
            except RuntimeError:
                pass  # its event loop is gone


def error_text(response: httpx.Response) -> str:
    try:
        data = response.json()
    except ValueError:
        return response.text[:500]
    if isinstance(data, dict):
        err = data.get("error")
        if isinstance(err, dict):
            return str(err.get("message") or err)
        return str(err or data.get("message") or data.get("detail") or data)[:500]
    return str(data)[:500]
