"""A local HTTP server on 127.0.0.1 that speaks the Anthropic Messages wire format.

It stands in for the remote API (which cannot be reached from tests): it answers
``POST /v1/messages`` with the replies it is given, in order, in the real response
shape, and records every request (path, headers, parsed JSON body) for assertions.
A reply may be an ``(status, body)`` pair to answer with an API error instead.
"""

from __future__ import annotations

import json
import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any


def message(content: list[dict[str, Any]], stop_reason: str | None = None, model: str = "test-model",
            usage: tuple[int, int] = (10, 5)) -> dict[str, Any]:
    if stop_reason is None:
        stop_reason = "tool_use" if any(b["type"] == "tool_use" for b in content) else "end_turn"
    return {"id": "msg_test", "type": "message", "role": "assistant", "model": model, "content": content,
            "stop_reason": stop_reason, "stop_sequence": None,
            "usage": {"input_tokens": usage[0], "output_tokens": usage[1]}}


def api_error(status: int, kind: str, text: str) -> tuple[int, dict[str, Any]]:
    return status, {"type": "error", "error": {"type": kind, "message": text}}


class FakeAnthropic:
    def __init__(self, replies: list[Any]) -> None:
        self.replies = list(replies)
        self.requests: list[dict[str, Any]] = []
        outer = self

        class Handler(BaseHTTPRequestHandler):
            def log_message(self, *args: Any) -> None:
                pass

            def do_POST(self) -> None:
                raw = self.rfile.read(int(self.headers.get("content-length") or 0))
                body = json.loads(raw)
                outer.requests.append({"path": self.path, "body": body,
                                       "headers": {k.lower(): v for k, v in self.headers.items()}})
                if self.path.split("?")[0] != "/v1/messages":
                    return self._send(404, {"type": "error", "error": {"type": "not_found_error",
                                                                       "message": self.path}})
                if body.get("stream"):
                    return self._send(*api_error(400, "invalid_request_error", "this fake does not stream"))
                if not outer.replies:
                    return self._send(*api_error(500, "api_error", "no scripted reply left"))
                reply = outer.replies.pop(0)
                status, payload = reply if isinstance(reply, tuple) else (200, reply)
                self._send(status, payload)

            def _send(self, status: int, payload: dict[str, Any]) -> None:
                data = json.dumps(payload).encode()
                self.send_response(status)
                self.send_header("content-type", "application/json")
                self.send_header("content-length", str(len(data)))
                self.end_headers()
                self.wfile.write(data)

        self.server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.url = f"http://127.0.0.1:{self.server.server_address[1]}"
        self.thread = threading.Thread(target=self.server.serve_forever, daemon=True)

    def __enter__(self) -> "FakeAnthropic":
        self.thread.start()
        return self

    def __exit__(self, *exc: Any) -> None:
        self.server.shutdown()
        self.server.server_close()

    @property
    def bodies(self) -> list[dict[str, Any]]:
        return [r["body"] for r in self.requests]
