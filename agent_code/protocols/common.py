"""What every wire protocol shares: :class:`ProtocolError` (a refused request), the thinking
signer, the random ids of replies, items and tool calls, and SSE framing (compact JSON, chunks)."""

from __future__ import annotations

import base64
import hashlib
import hmac
import json
import os
import secrets
import string
import threading
from typing import Protocol

ID_ALPHABET = string.ascii_letters + string.digits
# byte -> letter or digit, the top 8 byte values dropped (256 = 4 * 62 + 8), so each is equally likely
_TO_ALPHABET = bytes(ord(ID_ALPHABET[b % len(ID_ALPHABET)]) for b in range(256))
_UNEVEN = bytes(range(4 * len(ID_ALPHABET), 256))


class ProtocolError(ValueError):
    """A request the gateway refuses; ``status`` and ``kind`` are what the client is sent."""

    def __init__(self, message: str, *, status: int = 400, kind: str | None = None) -> None:
        super().__init__(message)
        self.message = message
        self.status = status
        self.kind = kind or ("request_too_large" if status == 413 else "invalid_request_error")


class Signer(Protocol):
    def sign(self, text: str) -> str: ...

    def verify(self, text: str, signature: str) -> bool: ...


class ThinkingSigner:
    """HMAC-SHA256 over the thinking text with a per-gateway secret, base64-encoded.

    Lets the gateway tell its own thinking blocks, echoed back by a client, from altered ones.
    """

    def __init__(self, secret: bytes | str | None = None) -> None:
        if secret is None:
            secret = secrets.token_bytes(32)
        elif isinstance(secret, str):
            secret = secret.encode("utf-8")
        self._secret = secret

    def sign(self, text: str) -> str:
        mac = hmac.new(self._secret, text.encode("utf-8", "surrogatepass"), hashlib.sha256).digest()
        return base64.b64encode(mac).decode("ascii")

    def verify(self, text: str, signature: str) -> bool:
        if not isinstance(text, str) or not isinstance(signature, str):
            return False
        return hmac.compare_digest(self.sign(text).encode("ascii"),
                                   signature.encode("utf-8", "surrogatepass"))


def random_id(prefix: str, length: int) -> str:
    """``prefix`` and ``length`` random letters and digits, from the OS's secure source (ids are
    minted per reply and per tool call, so this is on every turn's path: the letters come from a
    pool that one ``urandom`` call refills, each handed out once)."""
    global _pool
    with _pool_lock:
        while len(_pool) < length:
            _pool += secrets.token_bytes(_POOL_BYTES).translate(_TO_ALPHABET, _UNEVEN)
        out, _pool = _pool[:length], _pool[length:]
    return prefix + out.decode("ascii")


_POOL_BYTES = 4096
_pool = b""
_pool_lock = threading.Lock()


def _forget_pool() -> None:
    global _pool, _pool_lock
    _pool, _pool_lock = b"", threading.Lock()   # a forked child never hands out its parent's letters


os.register_at_fork(after_in_child=_forget_pool)


def dumps(data: object) -> str:
    """Compact JSON; lone surrogates are escaped so the bytes stay valid UTF-8."""
    text = json.dumps(data, ensure_ascii=False, separators=(",", ":"))
    try:
        text.encode("utf-8")
    except UnicodeEncodeError:
        text = json.dumps(data, ensure_ascii=True, separators=(",", ":"))
    return text


def sse_data(data: object) -> bytes:
    """An SSE message with only a data line (Chat Completions)."""
    return f"data: {dumps(data)}\n\n".encode("utf-8")


def sse_event(event: str, data: object) -> bytes:
    """An SSE message with an event name and a data line (Messages, Responses)."""
    return f"event: {event}\ndata: {dumps(data)}\n\n".encode("utf-8")


def chunks(text: str, size: int) -> list[str]:
    """``text`` in pieces of ``size`` characters (at least 1); ``[""]`` for no text."""
    return [text[i:i + size] for i in range(0, len(text), max(1, size))] or [""]
