"""``agent-code serve``: the rollout gateway in the foreground.

It listens on 127.0.0.1 unless ``--host`` says otherwise; on any other host it refuses to start
without an admin token (``--admin-token`` or ``AGENT_CODE_ADMIN_TOKEN``), which the session
management routes then require (see :mod:`agent_code.gateway.auth`).

``--sessions auto`` (default) opens a session on a model request's first use of a key — what a
developer's ``agent-code --local`` relies on. ``--sessions explicit`` serves only sessions
opened with ``POST /v1/sessions`` (unknown keys get 401 in the protocol's format); it needs an
admin token, loopback or not, and is what a gateway that rollouts use (``rollout --gateway
URL``) should run. Either way a finished or deleted session is never reopened (409), also after
a restart on the same ``--trajectory-dir``.

Only requests for this gateway's own host are served (DNS rebinding; :mod:`agent_code.gateway.request_guard`):
``localhost``, IP literals, the name ``--host`` binds, and each ``--allowed-host NAME`` (a reverse
proxy's or tunnel's public name). ``--max-session-requests`` caps the requests one session (API key)
has open at once (:mod:`agent_code.gateway.connections`)."""

from __future__ import annotations

import errno
import socket
from enum import Enum
from typing import Any, Optional

import typer

from agent_code.engines import ENGINE_SPECS
from agent_code.gateway.connections import DEFAULT_SESSION_REQUESTS

app = typer.Typer(add_completion=False, pretty_exceptions_enable=False, rich_markup_mode=None)

# choices, so --help lists them and a bad value is refused (exit 2) with the list
# (spelled out for the type checker; tests/test_serve_starting.py checks they list POLICIES and
# REWARD_POLICIES)
class SessionsMode(str, Enum):
    AUTO = "auto"
    EXPLICIT = "explicit"


class HistoryPolicy(str, Enum):
    TOKENS = "tokens"
    TEMPLATE = "template"


class RewardPolicy(str, Enum):
    FULL = "full"
    SPLIT = "split"


def bind_socket(host: str, port: int) -> socket.socket:
    """A socket bound to (host, port), made before anything is announced: a busy port is an
    error here, not after ``listening on …`` was printed. uvicorn serves on this very socket."""
    family = socket.AF_INET6 if ":" in host else socket.AF_INET
    # IPPROTO_TCP named: asyncio sets TCP_NODELAY only on sockets whose proto says TCP, and
    # without it every reply's last write waited ~40 ms for the client's delayed ACK (Nagle)
    sock = socket.socket(family, socket.SOCK_STREAM, socket.IPPROTO_TCP)
    try:
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        sock.bind((host, port))
    except BaseException:
        sock.close()
        raise
    sock.set_inheritable(True)
    return sock


@app.command(context_settings={"help_option_names": ["-h", "--help"]})
def serve(
    engine: str = typer.Option("llamacpp", "--engine",
                               help=" | ".join(ENGINE_SPECS)),
    tokenizer: Optional[str] = typer.Option(None, "--tokenizer",
                                            help="Tokenizer + chat template: a directory, a .gguf, or a hub id "
                                                 "(default: the embedded model's)."),
    host: str = typer.Option("127.0.0.1", "--host",
                             help="Address to bind (default loopback only); any other needs --admin-token."),
    port: int = typer.Option(8765, "--port"),
    model_name: str = typer.Option("agent-code-local", "--model-name", help="Model id reported to clients."),
    tool_parser: Optional[str] = typer.Option(None, "--tool-parser", help="Default: detected from the template."),
    reasoning_parser: Optional[str] = typer.Option(None, "--reasoning-parser",
                                                   help="Default: detected from the template."),
    max_turns: Optional[int] = typer.Option(None, "--max-turns", min=1, help="Turn cap per session."),
    max_context: Optional[int] = typer.Option(None, "--max-context", min=1,
                                              help="Context budget per session, in tokens."),
    max_body_mb: float = typer.Option(32.0, "--max-body-mb", min=0.001, help="Largest accepted request body."),
    max_sessions: Optional[int] = typer.Option(None, "--max-sessions", min=1,
                                               help="Sessions open at once; one more is refused with 429 "
                                                    "(finished and deleted sessions free their slot)."),
    max_in_flight: Optional[int] = typer.Option(None, "--max-in-flight", min=1,
                                                help="Requests generating at once per session (429 beyond)."),
    admin_token: Optional[str] = typer.Option(None, "--admin-token", envvar="AGENT_CODE_ADMIN_TOKEN",
                                              show_envvar=True,
                                              help="Token the session management routes require "
                                                   "(x-agent-code-admin: TOKEN or Authorization: Bearer TOKEN); "
                                                   "needed on a non-loopback --host."),
    sessions: SessionsMode = typer.Option("auto", "--sessions",
                                 help="auto: a model request's key opens its session on first use; explicit: "
                                      "only sessions opened with POST /v1/sessions (needs --admin-token)."),
    history_policy: HistoryPolicy = typer.Option("tokens", "--history-policy",
                                       help="tokens: reuse the ids sampled earlier (default); template: re-render."),
    trajectory_dir: Optional[str] = typer.Option(None, "--trajectory-dir",
                                                 help="Append every turn to DIR/sessions/*.turns.jsonl as it "
                                                      "completes; finished sessions go to DIR/samples.*"),
    reward_policy: RewardPolicy = typer.Option("full", "--reward-policy",
                                      help="How a session's reward spreads over its samples: full or split."),
    header_timeout: float = typer.Option(10.0, "--header-timeout", min=0.1,
                                         help="Seconds a connection has to send a request's headers (after "
                                              "opening, or after its last reply); it is closed past that."),
    max_connections: int = typer.Option(2048, "--max-connections", min=1,
                                        help="Connections open at once; past it the longest-open idle ones are "
                                             "closed to make room (kept below the open-file limit)."),
    weight_version: str = typer.Option("0", "--weight-version",
                                       help="The weight version turns record until POST /v1/admin/resume "
                                            "names another (weight updates)."),
    max_requests: int = typer.Option(512, "--max-requests", min=1,
                                     help="Requests answered at once; past it a 503 in the protocol's error "
                                          "format, with retry-after."),
    max_session_requests: int = typer.Option(DEFAULT_SESSION_REQUESTS, "--max-session-requests", min=1,
                                             help="Requests one session (API key) has open at once; past it "
                                                  "its requests get 429 while other sessions keep their slots."),
    allowed_host: Optional[list[str]] = typer.Option(None, "--allowed-host",
                                                     help="A host name (no port) served besides localhost, IP "
                                                          "literals and --host; repeatable. Requests naming "
                                                          "any other Host are refused (DNS rebinding)."),
) -> None:
    """Serve the Anthropic Messages API (POST /v1/messages), the OpenAI Chat Completions API
    (POST /v1/chat/completions) and the OpenAI Responses API (POST /v1/responses) in front of a
    local engine, recording every turn token for token. The API key is the session id."""
    import asyncio
    import sys

    import uvicorn

    from agent_code.gateway.app import create_app
    from agent_code.gateway.auth import bind_problem
    from agent_code.gateway.connections import ConnectionLimits, raise_fd_limit, uvicorn_config
    from agent_code.gateway.request_guard import allowed_names, served_names
    from agent_code.gateway.server import build_gateway, settle_heap
    from agent_code.gateway.starting import StartingApp

    admin_token = admin_token or None  # an empty variable is no token
    mode, history, rewards = sessions.value, history_policy.value, reward_policy.value
    problem = bind_problem(host, admin_token)
    if problem is None and mode == "explicit" and not admin_token:
        problem = ("--sessions explicit needs an admin token (--admin-token TOKEN or AGENT_CODE_ADMIN_TOKEN): "
                   "without one, any agent could finish its own session with the reward it likes")
    try:
        hosts = allowed_names(served_names(host, allowed_host or []))
    except ValueError as exc:
        problem = problem or f"--allowed-host: {exc}"
    if problem is not None:
        print(f"agent-code serve: error: {problem}", file=sys.stderr)
        raise typer.Exit(2)
    try:  # the port first: a busy one fails at once, before the engine loads and before any announcement
        sock = bind_socket(host, port)
    except OSError as exc:
        why = "is already in use" if exc.errno == errno.EADDRINUSE else f"cannot be bound: {exc.strerror or exc}"
        print(f"agent-code serve: error: {host}:{port} {why} (pick another with --port)", file=sys.stderr)
        raise typer.Exit(1)
    shown = f"[{host}]" if ":" in host else host
    url = f"http://{shown}:{sock.getsockname()[1]}"   # the real port, also for --port 0

    def build() -> Any:  # in a thread, while /healthz already answers (gateway/starting.py)
        gateway = build_gateway(engine, tokenizer=tokenizer, model_name=model_name, tool_parser=tool_parser,
                                reasoning_parser=reasoning_parser, max_turns=max_turns,
                                max_context_tokens=max_context, history_policy=history,
                                trajectory_dir=trajectory_dir, reward_policy=rewards,
                                max_sessions=max_sessions, max_in_flight=max_in_flight,
                                open_on_first_use=mode == "auto", weight_version=weight_version)
        app_ = create_app(gateway, max_body_bytes=int(max_body_mb * 1024 * 1024), admin_token=admin_token,
                          allowed_hosts=hosts, max_session_requests=max_session_requests)
        print(f"agent-code gateway: engine {gateway.engine.name}, model {model_name}, "
              f"parsers {gateway.tool_parser}/{gateway.reasoning_parser}; listening on {url} "
              f"(Anthropic /v1/messages, OpenAI /v1/chat/completions and /v1/responses); "
              f"sessions {mode}; session management "
              f"{'needs the admin token' if admin_token else 'open (loopback, no admin token)'}",
              file=sys.stderr, flush=True)
        settle_heap()   # the start-up heap, built: out of the collector's way (gateway/server.py)
        return app_

    starting = StartingApp()
    limits = ConnectionLimits(header_timeout, raise_fd_limit(max_connections), max_requests)
    server = uvicorn.Server(uvicorn_config(starting, limits, host=host, port=port, log_level="warning",
                                           lifespan="off"))
    failed: list[BaseException] = []

    async def run() -> None:
        serving = asyncio.ensure_future(server.serve(sockets=[sock]))
        loading = asyncio.ensure_future(starting.load(build))
        await asyncio.wait({serving, loading}, return_when=asyncio.FIRST_COMPLETED)
        if not loading.done():   # stopped (Ctrl-C) while loading: the load thread is a daemon
            loading.cancel()
        elif loading.exception() is not None:
            failed.append(loading.exception())  # type: ignore[arg-type]
            server.should_exit = True
        await serving

    asyncio.run(run())
    if failed:
        print(f"agent-code serve: error: {failed[0]}", file=sys.stderr)
        raise typer.Exit(1)


def main(argv: list[str]) -> None:
    from agent_code.cli.stacks import dump_stacks_on_sigusr1

    dump_stacks_on_sigusr1()  # `kill -USR1 PID`: where a gateway that seems stuck is
    app(args=argv, prog_name="agent-code serve")
