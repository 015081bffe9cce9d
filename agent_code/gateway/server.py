"""Building and running a gateway: from an engine spec to a listening server.

``BackgroundServer`` runs uvicorn in a thread on a free loopback port; tests and
``agent-code --local`` use it, ``agent-code serve`` runs in the foreground.
"""

from __future__ import annotations

import gc
import re
import threading
import time
from typing import TYPE_CHECKING, TypedDict

from agent_code.gateway.connections import ConnectionLimits, uvicorn_config
from agent_code.gateway.pipeline import Gateway
from agent_code.gateway.sessions import SessionStore

if TYPE_CHECKING:
    from starlette.types import ASGIApp

    from agent_code.engines.base import Engine
    from agent_code.render.template import Renderer


class GatewayOptions(TypedDict, total=False):
    """:func:`build_gateway`'s options beside the engine, the trajectory dir and who opens sessions
    (what a caller that builds the gateway for those three passes on)."""

    tokenizer: str | Renderer | None
    model_name: str | None
    tool_parser: str | None
    reasoning_parser: str | None
    max_turns: int | None
    max_context_tokens: int | None
    history_policy: str
    reward_policy: str
    max_sessions: int | None
    max_in_flight: int | None
    weight_version: str


def build_gateway(engine_spec: str | None = None, *, engine: Engine | str | None = None,
                  tokenizer: str | Renderer | None = None, model_name: str | None = None,
                  tool_parser: str | None = None, reasoning_parser: str | None = None,
                  max_turns: int | None = None, max_context_tokens: int | None = None,
                  history_policy: str = "tokens", trajectory_dir: str | None = None,
                  reward_policy: str = "full", max_sessions: int | None = None,
                  max_in_flight: int | None = None, open_on_first_use: bool = True,
                  weight_version: str = "0") -> Gateway:
    """A gateway on ``engine_spec`` (an ``--engine`` spec string), or on ``engine``: an object
    satisfying :class:`~agent_code.engines.base.Engine` that the caller owns (a trainer's own
    engine client; the gateway awaits its ``generate`` on the gateway's event loop and never
    closes it). ``tokenizer``: the tokenizer and chat template prompts are rendered with (a
    directory, hub id or GGUF, or a loaded :class:`~agent_code.render.template.Renderer`); with an
    engine object it must be given unless the engine names one in its ``tokenizer`` attribute
    (the ids the gateway sends must be the ids the engine's model reads, so there is no default).
    Limits: ``max_turns`` and ``max_context_tokens`` per session,
    ``max_sessions`` open at once, ``max_in_flight`` requests generating at once per session
    (each None: no limit; the request size limit and the admin token belong to ``create_app``).
    ``open_on_first_use``: False serves only the sessions opened with ``POST /v1/sessions`` (every
    rollout gateway; see :mod:`agent_code.gateway.sessions`). ``weight_version``: the version
    turns record until an admin resume names another (:mod:`agent_code.gateway.weights`)."""
    from agent_code.trajectory.samples import REWARD_POLICIES
    from agent_code.trajectory.store import TurnLog

    if reward_policy not in REWARD_POLICIES:
        raise ValueError(f"unknown reward policy '{reward_policy}' (choose from {', '.join(REWARD_POLICIES)})")
    renderer, engine = _renderer_and_engine(engine_spec, engine, tokenizer)
    return Gateway(engine, renderer, model_name=model_name or "agent-code-local", tool_parser=tool_parser,
                   reasoning_parser=reasoning_parser, history_policy=history_policy,
                   turn_log=TurnLog(trajectory_dir) if trajectory_dir else None, reward_policy=reward_policy,
                   store=SessionStore(default_max_turns=max_turns, default_max_context=max_context_tokens,
                                      max_sessions=max_sessions, max_in_flight=max_in_flight,
                                      open_on_first_use=open_on_first_use),
                   weight_version=weight_version)


def _renderer_and_engine(engine_spec: str | None, engine: Engine | str | None,
                         tokenizer: str | Renderer | None) -> tuple[Renderer, Engine]:
    """:func:`build_gateway`'s renderer and engine, from a spec string or an engine object."""
    from agent_code.engines import Engine, create_engine
    from agent_code.render.template import Renderer, load_renderer

    if engine_spec is not None and engine is not None:
        raise TypeError("build_gateway takes an engine spec or engine=, not both")
    spec = engine_spec if engine_spec is not None else engine
    if spec is None:
        raise TypeError("build_gateway needs an engine: a spec string ('llamacpp', 'sglang:URL' …) or engine=<an "
                        "object with name, async generate(prompt_ids, sampling, *, session_id) and async close()>")
    if not isinstance(spec, str):
        if not isinstance(spec, Engine):
            raise TypeError(f"engine={type(spec).__name__} is not an engine: it needs a 'name', an async "
                            "'generate(prompt_ids, sampling, *, session_id=None) -> Generation' and an async "
                            "'close()' (agent_code.engines.base.Engine)")
        source = tokenizer if tokenizer is not None else _named_tokenizer(spec)
        if source is None:
            raise ValueError(f"engine={type(spec).__name__} needs tokenizer= (the tokenizer and chat template of "
                             "the model it serves: a directory, hub id, GGUF or Renderer), unless the engine names "
                             "one (a 'tokenizer' attribute holding such a name or Renderer, or a 'renderer' "
                             "attribute holding a Renderer): the gateway renders prompts to token ids with it, and "
                             "ids of another tokenizer would be read as different text")
        return (source if isinstance(source, Renderer) else load_renderer(source)), spec
    single = re.sub(r"\*\d+$", "", spec.strip())   # a pool of in-process replicas: their one spec
    if tokenizer is None and single.startswith("llamacpp:"):
        from agent_code.render.models import resolve_gguf

        tokenizer = resolve_gguf(single.split(":", 1)[1])  # the GGUF carries its tokenizer and template
    renderer = tokenizer if isinstance(tokenizer, Renderer) else load_renderer(tokenizer)
    return renderer, create_engine(spec, renderer)


def _named_tokenizer(engine: object) -> str | Renderer | None:
    """The tokenizer an engine object names: its ``tokenizer`` (a name or a Renderer) or its ``renderer``."""
    from agent_code.render.template import Renderer

    named = getattr(engine, "tokenizer", None)
    if isinstance(named, (str, Renderer)) and named:
        return named
    renderer = getattr(engine, "renderer", None)
    return renderer if isinstance(renderer, Renderer) else None


GC_THRESHOLDS = (10_000, 10, 10)   # the youngest generation collected every 10,000 net allocations (Python: 700)


def settle_heap() -> None:
    """Once the gateway is built: its start-up heap (``transformers``, the tokenizer, the chat
    template, the engine; some 225,000 objects) is moved out of the cyclic collector's sight
    (``gc.freeze``) and the youngest generation is collected less often. Parsing one request
    body makes thousands of objects; with Python's default threshold (700) the collector ran
    several times a request, and the bodies of the requests in flight were promoted to the
    oldest generation, whose growth then set off full collections over the whole heap: under
    128 sessions a sixth of the gateway's CPU went to the collector. What is still collected
    is the same, only later."""
    gc.collect()
    gc.freeze()
    gc.set_threshold(*GC_THRESHOLDS)


class BackgroundServer:
    def __init__(self, app: ASGIApp, host: str = "127.0.0.1", port: int = 0,
                 limits: ConnectionLimits | None = None) -> None:
        import uvicorn

        self.config = uvicorn_config(app, limits, host=host, port=port, log_level="warning", lifespan="off",
                                     timeout_graceful_shutdown=2)
        self.server = uvicorn.Server(self.config)
        self.thread = threading.Thread(target=self.server.run, name="agent-code-gateway", daemon=True)
        self.url = ""

    def __enter__(self) -> "BackgroundServer":
        self.thread.start()
        deadline = time.monotonic() + 30
        while not self.server.started:
            if not self.thread.is_alive() or time.monotonic() > deadline:
                raise RuntimeError("the gateway did not start")
            time.sleep(0.01)
        host, port = self.server.servers[0].sockets[0].getsockname()[:2]
        self.url = f"http://{host}:{port}"
        return self

    def __exit__(self, *exc: object) -> None:
        self.server.should_exit = True
        self.thread.join(timeout=10)
