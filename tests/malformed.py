"""Malformed request bodies every JSON endpoint must refuse with a 4xx (shared by the hostile-input
tests of each protocol): not JSON, JSON that is not an object, deep nesting, an absurd declared
length. Each protocol's test adds its own field-level cases with :class:`Bodies.add`."""

from __future__ import annotations

import json
from typing import Any

WRONG = [None, True, 0, -5, 1.5, "s", "", [], {}, [1], {"a": 1}]   # a wrong value for any typed field
NOT_JSON = [b"", b" ", b"{", b"}", b"[", b"nul", b"{'a': 1}", b"\xff\xfe\x00", b"\x80abc", b'{"model": "m",}',
            b"{\"a\": \"\xed\xa0\x80\"}", b"\x00" * 10, b"NaN", b"--", b'{"model": "m"',
            "{\"model\": \"é".encode("latin-1")]


class Bodies:
    def __init__(self) -> None:
        self.cases: list[tuple[str, bytes, dict[str, str]]] = []

    def add(self, name: str, body: Any, headers: dict[str, str] | None = None) -> None:
        raw = body if isinstance(body, bytes) else json.dumps(body).encode()
        self.cases.append((name, raw, headers or {}))


def generic_bodies(good: dict[str, Any]) -> Bodies:
    """The protocol-independent part: ``good`` is a valid request of the endpoint."""
    bodies = Bodies()
    for i, raw in enumerate(NOT_JSON):
        bodies.add(f"raw-{i}", raw)
    for i, value in enumerate([None, 1, -1, 1.5, True, "text", [], [good], [[[]]]]):
        bodies.add(f"scalar-{i}", value)
    bodies.add("deep-list", b"[" * 20_000 + b"]" * 20_000)
    bodies.add("deep-object", b'{"a":' * 10_000 + b"1" + b"}" * 10_000)
    bodies.add("huge-declared", b"{}", {"content-length": str(10**12)})
    return bodies
