"""A local stand-in for E2B: its control-plane REST API and the in-sandbox ``envd`` daemon, on
127.0.0.1, speaking the wire protocol the official ``e2b`` Python SDK (2.x) speaks, so the
unmodified SDK runs against it.

Two servers, as in E2B (``api.e2b.app`` and the sandbox edge), each on a free loopback port:

``api_url`` — the control plane, authenticated by the ``X-API-KEY`` header:
  * ``POST /v2/sandboxes`` (and the older ``POST /sandboxes``): JSON body ``{"templateID",
    "timeout", "envVars", "metadata", ...}`` → ``201 {"templateID", "sandboxID", "clientID",
    "envdVersion", "envdAccessToken", "domain"}``
  * ``GET /sandboxes/{id}`` → the same shape plus ``state``; ``DELETE /sandboxes/{id}`` → 204
  * errors are ``{"code": <status>, "message": ...}``: 401 for a missing or wrong key, 404 for an
    unknown sandbox or template.

``sandbox_url`` — envd behind the edge proxy, which routes by the ``E2b-Sandbox-Id`` header
(the SDK sends it, with ``E2b-Sandbox-Port: 49983``, when given ``sandbox_url``); envd checks
``X-Access-Token`` against the sandbox's ``envdAccessToken``. The user is HTTP Basic
``<user>:`` (RPC) or ``?username=`` (files); E2B's users are ``root`` and ``user``.
  * ``GET /health`` → 204
  * ``GET /files?path=`` → the file's bytes; ``POST /files?path=`` with ``multipart/form-data``
    (part ``file``, its filename the path when ``path`` is absent) or ``application/octet-stream``
    → ``[{"name", "type": "file", "path"}]``; errors ``{"code", "message"}`` (404 missing, 400 a
    directory or a bad path).
  * Connect RPC, JSON codec: ``POST /process.Process/Start`` (server streaming,
    ``application/connect+json``: 5-byte envelopes — flags, big-endian length — each a
    ``StartResponse`` ``{"event": {"start": {"pid"}} | {"data": {"stdout"|"stderr": base64}} |
    {"end": {"exitCode", "exited", "status"}} | {"keepalive": {}}}``, then an end-of-stream
    envelope (flag 0x02) ``{}`` or ``{"error": {"code", "message"}}``; ``Connect-Timeout-Ms``
    ends the stream with ``deadline_exceeded`` while the process runs on, as envd does), and
    ``POST /process.Process/SendSignal`` (unary ``application/json``, ``{"process": {"pid"},
    "signal": "SIGNAL_SIGKILL"}``; errors as HTTP status + ``{"code", "message"}``).

A sandbox here is a temp directory ``<root>/<sandbox id>/`` holding ``home/user`` (the ``user``
account's ``HOME``) and ``root`` (root's). Commands are real local subprocesses run as *this*
process's OS user (``USER``/``HOME`` set for the requested E2B user, nothing more: there is no
privilege separation), each in its own session and marked with ``E2B_FAKE_SANDBOX=<id>`` in its
environment, so deleting the sandbox kills every process it started, detached ones included
(``/proc`` is scanned, as a VM's teardown would). File paths are real paths on this machine and
must lie inside the sandbox's directory. Sandboxes past their ``timeout`` are gone.
"""

from __future__ import annotations

import asyncio
import base64
import email.policy
import json
import os
import secrets
import shutil
import signal
import struct
import tempfile
import time
from collections.abc import AsyncIterator
from dataclasses import dataclass, field
from email.parser import BytesParser
from pathlib import Path
from typing import Any, Self

from starlette.applications import Starlette
from starlette.requests import Request
from starlette.responses import JSONResponse, Response, StreamingResponse
from starlette.routing import Route

from .sglang_server import ThreadedASGIServer

ENVD_VERSION = "0.5.7"
ENVD_PORT = 49983
MARKER = "E2B_FAKE_SANDBOX"
USERS = {"root", "user"}
SIGNALS = {"SIGNAL_SIGKILL": signal.SIGKILL, "SIGNAL_SIGTERM": signal.SIGTERM, 9: signal.SIGKILL,
           15: signal.SIGTERM}
CONNECT_HTTP_STATUS = {"invalid_argument": 400, "unauthenticated": 401, "permission_denied": 403,
                       "not_found": 404, "deadline_exceeded": 504, "unimplemented": 501,
                       "internal": 500, "unavailable": 503}


@dataclass
class FakeSandbox:
    id: str
    template: str
    root: Path
    access_token: str
    envs: dict[str, str]
    metadata: dict[str, str]
    expires: float
    processes: dict[int, asyncio.subprocess.Process] = field(default_factory=dict)

    def home(self, user: str) -> Path:
        return self.root / ("root" if user == "root" else f"home/{user}")


def envelope(payload: dict[str, Any], flags: int = 0) -> bytes:
    """One Connect streaming frame: flags byte, 4-byte big-endian length, the JSON message."""
    data = json.dumps(payload, separators=(",", ":")).encode()
    return struct.pack(">BI", flags, len(data)) + data


def read_envelopes(body: bytes) -> list[tuple[int, bytes]]:
    frames, at = [], 0
    while at + 5 <= len(body):
        flags, size = struct.unpack(">BI", body[at:at + 5])
        frames.append((flags, body[at + 5:at + 5 + size]))
        at += 5 + size
    if at != len(body):
        raise ValueError("truncated Connect envelope")
    return frames


def api_error(status: int, message: str) -> JSONResponse:
    return JSONResponse({"code": status, "message": message}, status_code=status)


def connect_error(code: str, message: str) -> JSONResponse:
    """A unary Connect error: the HTTP status for ``code``, and ``{"code", "message"}``."""
    return JSONResponse({"code": code, "message": message}, status_code=CONNECT_HTTP_STATUS.get(code, 500))


def end_event(returncode: int) -> dict[str, Any]:
    """envd's end event as proto3 JSON (default values omitted), in Go's ``ProcessState`` terms:
    a process killed by a signal has exit code -1, ``exited`` false, status ``signal: killed``."""
    if returncode < 0:
        name = {signal.SIGKILL: "killed", signal.SIGTERM: "terminated"}.get(-returncode, f"signal {-returncode}")
        return {"exitCode": -1, "status": f"signal: {name}"}
    end: dict[str, Any] = {"exited": True, "status": f"exit status {returncode}"}
    if returncode:
        end["exitCode"] = returncode
    return end


def multipart_files(content_type: str, body: bytes) -> list[tuple[str | None, bytes]]:
    """The ``file`` parts of a ``multipart/form-data`` body as ``(filename, content)``."""
    message = BytesParser(policy=email.policy.HTTP).parsebytes(
        f"Content-Type: {content_type}\r\n\r\n".encode() + body)
    return [(part.get_filename(), part.get_payload(decode=True) or b"") for part in message.iter_parts()
            if part.get_param("name", header="content-disposition") == "file"]


def basic_user(header: str | None) -> str | None:
    """The user of an ``Authorization: Basic base64(user:)`` header."""
    if not header or not header.startswith("Basic "):
        return None
    try:
        return base64.b64decode(header[6:]).decode().partition(":")[0] or None
    except ValueError:
        return None


def marked_pids(sandbox_id: str) -> list[int]:
    """Live (not zombie) processes carrying ``E2B_FAKE_SANDBOX=<id>`` in their environment."""
    needle, pids = f"{MARKER}={sandbox_id}".encode(), []
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit() or int(entry.name) == os.getpid():
            continue
        try:
            if (needle in (entry / "environ").read_bytes().split(b"\0")
                    and (entry / "stat").read_text().rpartition(") ")[2][:1] not in ("Z", "X")):
                pids.append(int(entry.name))
        except OSError:
            continue
    return pids


def kill_marked(sandbox_id: str, patience: float = 5.0) -> None:
    """SIGKILL the sandbox's processes until none is left (children forked meanwhile included)."""
    deadline = time.monotonic() + patience
    while (pids := marked_pids(sandbox_id)) and time.monotonic() < deadline:
        for pid in pids:
            try:
                os.kill(pid, signal.SIGKILL)
            except OSError:
                pass
        time.sleep(0.02)


class FakeE2B:
    """``with FakeE2B(api_key="e2b_test") as fake:`` then point the SDK (or the backend) at
    ``fake.api_url`` and ``fake.sandbox_url``. ``fake.sandboxes`` are the live ones,
    ``fake.deleted`` the ids deleted through the API, ``fake.requests`` ``(method, path)``s."""

    def __init__(self, *, api_key: str = "e2b_test_key", templates: tuple[str, ...] = ("base",),
                 envd_version: str = ENVD_VERSION, default_timeout: int = 300) -> None:
        self.api_key = api_key
        self.templates = set(templates)
        self.envd_version = envd_version
        self.default_timeout = default_timeout
        self.sandboxes: dict[str, FakeSandbox] = {}
        self.deleted: list[str] = []
        self.requests: list[tuple[str, str]] = []
        self.root = Path(tempfile.mkdtemp(prefix="fake-e2b-"))
        self._api = ThreadedASGIServer(Starlette(routes=[
            Route("/v2/sandboxes", self._create, methods=["POST"]),
            Route("/sandboxes", self._create, methods=["POST"]),
            Route("/sandboxes/{sandbox_id}", self._info, methods=["GET"]),
            Route("/sandboxes/{sandbox_id}", self._delete, methods=["DELETE"]),
        ]))
        self._envd = ThreadedASGIServer(Starlette(routes=[
            Route("/health", self._health, methods=["GET"]),
            Route("/files", self._read, methods=["GET"]),
            Route("/files", self._write, methods=["POST"]),
            Route("/process.Process/Start", self._start, methods=["POST"]),
            Route("/process.Process/SendSignal", self._send_signal, methods=["POST"]),
        ]))
        self.api_url, self.sandbox_url = self._api.url, self._envd.url

    def __enter__(self) -> Self:
        self._api.start()
        self._envd.start()
        return self

    def __exit__(self, *exc: object) -> None:
        for sandbox_id in list(self.sandboxes):
            self._destroy(sandbox_id)
        self._api.stop()
        self._envd.stop()
        shutil.rmtree(self.root, ignore_errors=True)

    # --- control plane ---------------------------------------------------------------------

    def _authorized(self, request: Request) -> JSONResponse | None:
        self.requests.append((request.method, request.url.path))
        key = request.headers.get("x-api-key")
        if not key:
            return api_error(401, "Missing API key, please provide it in the X-API-Key header")
        if key != self.api_key:
            return api_error(401, "Invalid API key, please visit https://e2b.dev/docs/api-key")
        return None

    def _live(self, sandbox_id: str) -> FakeSandbox | None:
        sandbox = self.sandboxes.get(sandbox_id)
        if sandbox is not None and time.monotonic() > sandbox.expires:
            self._destroy(sandbox_id)
            return None
        return sandbox

    def _shape(self, sandbox: FakeSandbox) -> dict[str, Any]:
        return {"templateID": sandbox.template, "sandboxID": sandbox.id, "clientID": "fake-client",
                "envdVersion": self.envd_version, "envdAccessToken": sandbox.access_token, "domain": None}

    async def _create(self, request: Request) -> JSONResponse:
        if (denied := self._authorized(request)) is not None:
            return denied
        try:
            body = await request.json()
        except ValueError:
            return api_error(400, "request body is not JSON")
        template = body.get("templateID")
        if template not in self.templates:
            return api_error(404, f"template '{template}' not found")
        sandbox_id = "i" + secrets.token_hex(9)
        root = self.root / sandbox_id
        for sub in ("home/user", "root"):
            (root / sub).mkdir(parents=True)
        sandbox = FakeSandbox(sandbox_id, template, root, secrets.token_hex(16), dict(body.get("envVars") or {}),
                              dict(body.get("metadata") or {}),
                              time.monotonic() + int(body.get("timeout") or self.default_timeout))
        self.sandboxes[sandbox_id] = sandbox
        return JSONResponse(self._shape(sandbox), status_code=201)

    async def _info(self, request: Request) -> JSONResponse:
        if (denied := self._authorized(request)) is not None:
            return denied
        sandbox = self._live(request.path_params["sandbox_id"])
        if sandbox is None:
            return api_error(404, f"sandbox \"{request.path_params['sandbox_id']}\" not found")
        return JSONResponse({**self._shape(sandbox), "state": "running", "metadata": sandbox.metadata})

    async def _delete(self, request: Request) -> Response:
        if (denied := self._authorized(request)) is not None:
            return denied
        sandbox_id = request.path_params["sandbox_id"]
        if self._live(sandbox_id) is None:
            return api_error(404, f"sandbox \"{sandbox_id}\" not found")
        self._destroy(sandbox_id)
        self.deleted.append(sandbox_id)
        return Response(status_code=204)

    def _destroy(self, sandbox_id: str) -> None:
        sandbox = self.sandboxes.pop(sandbox_id)
        for proc in sandbox.processes.values():
            if proc.returncode is None:
                try:
                    os.killpg(proc.pid, signal.SIGKILL)
                except OSError:
                    pass
        kill_marked(sandbox_id)
        shutil.rmtree(sandbox.root, ignore_errors=True)

    # --- envd: routing, auth, paths ----------------------------------------------------------

    def _sandbox_for(self, request: Request) -> FakeSandbox | Response:
        self.requests.append((request.method, request.url.path))
        sandbox_id = request.headers.get("e2b-sandbox-id", "")
        sandbox = self._live(sandbox_id)
        if sandbox is None:  # the edge proxy answers for a sandbox it does not know
            return JSONResponse({"sandboxId": sandbox_id, "message": "The sandbox was not found", "code": 502},
                                status_code=502)
        if request.headers.get("x-access-token") != sandbox.access_token:
            return api_error(401, "unauthorized access, please provide a valid access token")
        return sandbox

    def _path(self, sandbox: FakeSandbox, raw: str | None, user: str) -> Path | None:
        """The sandbox path ``raw`` (relative: to the user's home) if it lies inside the sandbox."""
        if not raw:
            return None
        path = Path(os.path.normpath(raw if os.path.isabs(raw) else sandbox.home(user) / raw))
        return path if path == sandbox.root or sandbox.root in path.parents else None

    async def _health(self, request: Request) -> Response:
        found = self._sandbox_for(request)
        return found if isinstance(found, Response) else Response(status_code=204)

    async def _read(self, request: Request) -> Response:
        found = self._sandbox_for(request)
        if isinstance(found, Response):
            return found
        user = request.query_params.get("username") or "user"
        path = self._path(found, request.query_params.get("path"), user)
        if path is None:
            return api_error(400, f"path '{request.query_params.get('path')}' is not inside this sandbox")
        if path.is_dir():
            return api_error(400, f"path '{path}' is a directory")
        if not path.exists():
            return api_error(404, f"path '{path}' does not exist")
        return Response(path.read_bytes(), media_type="application/octet-stream")

    async def _write(self, request: Request) -> Response:
        found = self._sandbox_for(request)
        if isinstance(found, Response):
            return found
        user = request.query_params.get("username") or "user"
        if user not in USERS:
            return api_error(400, f"user '{user}' does not exist")
        content_type = request.headers.get("content-type", "")
        if content_type.startswith("multipart/form-data"):
            uploads = multipart_files(content_type, await request.body())
            if len(uploads) == 1 and request.query_params.get("path"):
                uploads = [(request.query_params["path"], uploads[0][1])]
        elif content_type.startswith("application/octet-stream"):
            uploads = [(request.query_params.get("path"), await request.body())]
        else:
            return api_error(400, f"unsupported content type '{content_type}'")
        written = []
        for raw, data in uploads:
            path = self._path(found, raw, user)
            if path is None:
                return api_error(400, f"path '{raw}' is not inside this sandbox")
            if path.is_dir():
                return api_error(400, f"path '{path}' is a directory")
            path.parent.mkdir(parents=True, exist_ok=True)
            path.write_bytes(data)
            written.append({"name": path.name, "type": "file", "path": str(path)})
        return JSONResponse(written)

    # --- envd: Connect RPC -------------------------------------------------------------------

    async def _start(self, request: Request) -> Response:
        found = self._sandbox_for(request)
        if isinstance(found, Response):
            return found
        if request.headers.get("content-type") != "application/connect+json":
            return Response(status_code=415, headers={"Accept-Post": "application/connect+json"})
        try:
            frames = read_envelopes(await request.body())
            start = json.loads(frames[0][1])
        except (ValueError, IndexError):
            return self._stream_error("invalid_argument", "could not read a StartRequest envelope")
        user = basic_user(request.headers.get("authorization")) or "user"
        if user not in USERS:
            return self._stream_error("permission_denied", f"user '{user}' does not exist")
        config = start.get("process") or {}
        home = found.home(user)
        cwd = self._path(found, config.get("cwd"), user) if config.get("cwd") else home
        if cwd is None or not cwd.is_dir():
            return self._stream_error("invalid_argument", f"cwd '{config.get('cwd')}' does not exist")
        env = {"PATH": os.environ.get("PATH", "/usr/bin:/bin"), "HOME": str(home), "USER": user,
               "LOGNAME": user, "E2B_SANDBOX": "true", "E2B_SANDBOX_ID": found.id, MARKER: found.id,
               **found.envs, **(config.get("envs") or {})}
        try:
            proc = await asyncio.create_subprocess_exec(
                config.get("cmd") or "/bin/bash", *(config.get("args") or []), cwd=cwd, env=env,
                stdin=asyncio.subprocess.DEVNULL, stdout=asyncio.subprocess.PIPE,
                stderr=asyncio.subprocess.PIPE, start_new_session=True)
        except OSError as e:
            return self._stream_error("internal", f"error starting process: {e}")
        found.processes[proc.pid] = proc
        timeout_ms = request.headers.get("connect-timeout-ms")
        deadline = time.monotonic() + int(timeout_ms) / 1000 if timeout_ms else None
        keepalive = float(request.headers.get("keepalive-ping-interval") or 0) or None
        return StreamingResponse(self._events(proc, deadline, keepalive), media_type="application/connect+json")

    @staticmethod
    def _stream_error(code: str, message: str) -> Response:
        """A streaming call's error: HTTP 200 and only the end-of-stream envelope."""
        return Response(envelope({"error": {"code": code, "message": message}}, flags=0x02),
                        media_type="application/connect+json")

    @staticmethod
    async def _events(proc: asyncio.subprocess.Process, deadline: float | None,
                      keepalive: float | None) -> AsyncIterator[bytes]:
        queue: asyncio.Queue[tuple[str, bytes] | None] = asyncio.Queue()

        async def pump(stream: asyncio.StreamReader | None, name: str) -> None:
            while stream is not None and (chunk := await stream.read(65536)):
                await queue.put((name, chunk))
            await queue.put(None)

        pumps = [asyncio.ensure_future(pump(proc.stdout, "stdout")), asyncio.ensure_future(pump(proc.stderr, "stderr"))]
        yield envelope({"event": {"start": {"pid": proc.pid}}})
        open_pipes = 2
        try:
            while open_pipes:
                wait = [t for t in (keepalive, deadline and deadline - time.monotonic()) if t is not None]
                try:
                    item = await asyncio.wait_for(queue.get(), max(0.0, min(wait)) if wait else None)
                except TimeoutError:
                    if deadline is not None and time.monotonic() >= deadline:
                        yield envelope({"error": {"code": "deadline_exceeded", "message": "context deadline exceeded"}},
                                       flags=0x02)
                        return
                    yield envelope({"event": {"keepalive": {}}})
                    continue
                if item is None:
                    open_pipes -= 1
                    continue
                name, chunk = item
                yield envelope({"event": {"data": {name: base64.b64encode(chunk).decode()}}})
            returncode = await proc.wait()
            yield envelope({"event": {"end": end_event(returncode)}})
            yield envelope({}, flags=0x02)
        finally:
            for task in pumps:
                task.cancel()

    async def _send_signal(self, request: Request) -> Response:
        found = self._sandbox_for(request)
        if isinstance(found, Response):
            return found
        if request.headers.get("content-type") != "application/json":
            return Response(status_code=415, headers={"Accept-Post": "application/json"})
        try:
            body = json.loads(await request.body())
            pid = int(body["process"]["pid"])
        except (ValueError, KeyError, TypeError):
            return connect_error("invalid_argument", "expected {\"process\": {\"pid\": N}, \"signal\": ...}")
        sig = SIGNALS.get(body.get("signal"))
        if sig is None:
            return connect_error("invalid_argument", f"invalid signal: {body.get('signal')}")
        proc = found.processes.get(pid)
        if proc is None or proc.returncode is not None:
            return connect_error("not_found", f"process with pid {pid} not found")
        try:
            proc.send_signal(sig)
        except ProcessLookupError:
            return connect_error("not_found", f"process with pid {pid} not found")
        return JSONResponse({})
