"""``agent-code serve``: the rollout gateway in the foreground.

It listens on 127.0.0.1 unless ``--host`` says otherwise; on any other host it refuses to start
without an admin token (``--admin-token`` or ``AGENT_CODE_ADMIN_TOKEN``), which the session
management routes then require (see :mod:`agent_code.gateway.auth`).

``--sessions auto`` (default) opens a session on a model request's first use of a key — what a
developer's ``agent-code --local`` relies on. ``--sessions explicit`` serves only sessions
opened with ``POST /v1/sessions`` (unknown keys get 401 in the protocol's format); it needs an
admin token, loopback or not, and is what a gateway that rollouts use (``rollout --gateway
URL``) should run. Either way a finished or deleted session is never reopened (409), also after
a restart on the same ``--trajectory-dir``."""

from __future__ import annotations

from typing import Optional

import typer

from agent_code.engines import ENGINE_SPECS

app = typer.Typer(add_completion=False, pretty_exceptions_enable=False, rich_markup_mode=None)


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
    sessions: str = typer.Option("auto", "--sessions",
                                 help="auto: a model request's key opens its session on first use; explicit: "
                                      "only sessions opened with POST /v1/sessions (needs --admin-token)."),
    history_policy: str = typer.Option("tokens", "--history-policy",
                                       help="tokens: reuse the ids sampled earlier (default); template: re-render."),
    trajectory_dir: Optional[str] = typer.Option(None, "--trajectory-dir",
                                                 help="Append every turn to DIR/sessions/*.turns.jsonl as it "
                                                      "completes; finished sessions go to DIR/samples.*"),
    reward_policy: str = typer.Option("full", "--reward-policy",
                                      help="How a session's reward spreads over its samples: full or split."),
) -> None:
    """Serve the Anthropic Messages API in front of a local engine, recording every turn."""
    import sys

    import uvicorn

    from agent_code.gateway.app import create_app
    from agent_code.gateway.auth import bind_problem
    from agent_code.gateway.server import build_gateway

    admin_token = admin_token or None  # an empty variable is no token
    if sessions not in ("auto", "explicit"):
        print(f"agent-code serve: error: --sessions must be auto or explicit, not {sessions!r}", file=sys.stderr)
        raise typer.Exit(2)
    problem = bind_problem(host, admin_token)
    if problem is None and sessions == "explicit" and not admin_token:
        problem = ("--sessions explicit needs an admin token (--admin-token TOKEN or AGENT_CODE_ADMIN_TOKEN): "
                   "without one, any agent could finish its own session with the reward it likes")
    if problem is not None:
        print(f"agent-code serve: error: {problem}", file=sys.stderr)
        raise typer.Exit(2)
    try:
        gateway = build_gateway(engine, tokenizer=tokenizer, model_name=model_name, tool_parser=tool_parser,
                                reasoning_parser=reasoning_parser, max_turns=max_turns,
                                max_context_tokens=max_context, history_policy=history_policy,
                                trajectory_dir=trajectory_dir, reward_policy=reward_policy,
                                max_sessions=max_sessions, max_in_flight=max_in_flight,
                                open_on_first_use=sessions == "auto")
    except Exception as exc:
        print(f"agent-code serve: error: {exc}", file=sys.stderr)
        raise typer.Exit(1)
    print(f"agent-code gateway: engine {gateway.engine.name}, model {model_name}, "
          f"parsers {gateway.tool_parser}/{gateway.reasoning_parser}; listening on http://{host}:{port}; "
          f"sessions {sessions}; session management "
          f"{'needs the admin token' if admin_token else 'open (loopback, no admin token)'}",
          file=sys.stderr)
    app_ = create_app(gateway, max_body_bytes=int(max_body_mb * 1024 * 1024), admin_token=admin_token)
    uvicorn.run(app_, host=host, port=port, log_level="warning", lifespan="off")


def main(argv: list[str]) -> None:
    app(args=argv, prog_name="agent-code serve")
