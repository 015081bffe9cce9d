"""Identical retries: a request the gateway already answered gets the recorded reply again.

An SDK retries a request whose reply it did not receive (a timeout, a dropped connection: the
Anthropic and OpenAI SDKs do so on their own, ``max_retries``), byte for byte the same body. If
the gateway had answered it already, generating again would record a second turn — a ``retry``
branch, one more sample — for a reply the client saw only once (or never). So each session
remembers its last answered request (:class:`Answer`: the digest of its path and body, and the
reply's bytes) and a request that repeats it is answered with those bytes again: the same
message id, text and tool-call ids, nothing generated, nothing recorded.

* **What counts as the same request**: the same session (its API key or identity, resolved and
  checked as for any request), the same path and query, and the same body bytes. A body that
  differs in anything — another seed, another temperature, one more message — is a new request.
* **Fresh samples**: a client that re-sends a request on purpose, to get another sample of it,
  sends the header ``x-agent-code-fresh-sample: 1`` (or changes the body: a different ``seed``
  does it): it is generated and recorded as usual (a ``retry`` branch), and its reply becomes the
  one remembered.
* **Bounded**: one answer per session, the last one (its reply's bytes: one JSON body, or the
  events of one stream without its keep-alive pings). A session that has moved on answers an
  older request by generating it again.
* **No bypass**: the replay is made after the route resolved the session (auth: a key names
  only its own session) and under the session's lock, and only where a new turn would be
  admitted (``Session.check_open``: not closed, under its turn and in-flight caps); the request
  counts against the session's request budget like any other. The reply carries
  ``x-agent-code-replayed: 1``.
* **Limit**: a request that is still being generated is not answered yet; a retry that arrives
  meanwhile (its original's connection still open) generates a second turn, labelled ``retry``.
  A client that gave up on the original closed that connection, which cancels it: nothing of
  it is recorded, so the retry is then the one turn.

The answer is remembered when the turn is recorded (in the same step), so a retry finds the
turn and its answer together or neither. ``tests/test_identical_retries.py`` shows the SDK's own
retry through a proxy that drops the connection once the gateway has answered.
"""

from __future__ import annotations

import hashlib
from dataclasses import dataclass
from typing import Mapping

from starlette.requests import Request
from starlette.responses import Response

FRESH_HEADER = "x-agent-code-fresh-sample"
REPLAYED_HEADER = "x-agent-code-replayed"
_YES = ("1", "true", "yes")


@dataclass(frozen=True)
class Answer:
    """A session's last answered request and its reply's bytes (``chunks``: the JSON body, or a
    stream's events)."""

    key: bytes
    size: int
    status: int
    media_type: str
    headers: tuple[tuple[str, str], ...]
    chunks: tuple[bytes, ...]


def request_key(request: Request) -> tuple[bytes, int] | None:
    """(digest, size) of the request's path, query and body; None when its body was not read."""
    raw = getattr(request.state, "raw_body", None)
    if not isinstance(raw, bytes):
        return None
    target = request.url.path + ("?" + request.url.query if request.url.query else "")
    return hashlib.sha256(target.encode("utf-8", "surrogatepass") + b"\0" + raw).digest(), len(raw)


def wants_fresh(headers: Mapping[str, str]) -> bool:
    return headers.get(FRESH_HEADER, "").strip().lower() in _YES


def matching(answer: Answer | None, request: Request) -> Answer | None:
    """``answer`` when ``request`` repeats it and does not ask for a fresh sample."""
    if answer is None or wants_fresh(request.headers):
        return None
    raw = getattr(request.state, "raw_body", None)
    if not isinstance(raw, bytes) or len(raw) != answer.size:   # the cheap test first
        return None
    found = request_key(request)
    return answer if found is not None and found[0] == answer.key else None


def remembered(request: Request, status: int, media_type: str, headers: Mapping[str, str],
               chunks: list[bytes]) -> Answer | None:
    found = request_key(request)
    if found is None:
        return None
    return Answer(found[0], found[1], status, media_type, tuple(headers.items()), tuple(chunks))


def response(answer: Answer) -> Response:
    """The remembered reply, byte for byte (a stream's events in one body: the client reads
    them as it would have)."""
    headers = {**dict(answer.headers), REPLAYED_HEADER: "1"}
    return Response(b"".join(answer.chunks), status_code=answer.status, media_type=answer.media_type,
                    headers=headers)
