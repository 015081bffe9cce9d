"""A streamed Responses turn that fails ends with ``response.failed`` whose ``error.code`` is one
of the codes OpenAI documents for a response (the SDK's ``ResponseError.code`` literal), never
an error type or a gateway-specific code."""

from __future__ import annotations

import typing

import openai
import pytest
from openai.types.responses.response_error import ResponseError

from gateway_fixtures import qwen25_renderer

from agent_code.engines.base import EngineError
from agent_code.gateway.app import create_app
from agent_code.gateway.pipeline import Gateway
from agent_code.gateway.server import BackgroundServer
from agent_code.protocols.openai_common import _KINDS
from agent_code.protocols.openai_responses import FAILURE_CODES, ResponseWriter, ResponsesWire, failure_code

DOCUMENTED = set(typing.get_args(ResponseError.model_fields["code"].annotation))


def test_the_codes_are_openais():
    assert FAILURE_CODES <= DOCUMENTED and {"server_error", "rate_limit_exceeded", "invalid_prompt"} <= FAILURE_CODES


@pytest.mark.parametrize("code,want", [
    ("server_error", "server_error"), ("invalid_prompt", "invalid_prompt"), ("rate_limit_exceeded", "rate_limit_exceeded"),
    ("rate_limit_error", "rate_limit_exceeded"), ("engine_overloaded", "server_error"), ("overloaded", "server_error"),
    ("unavailable", "server_error"), ("insufficient_storage", "server_error"), ("api_error", "server_error"),
    ("timeout_error", "server_error"), ("invalid_request_error", "invalid_prompt"), ("request_too_large", "invalid_prompt"),
    ("not_found", "invalid_prompt"), ("permission_error", "invalid_prompt"), ("authentication_error", "invalid_prompt"),
    ("context_length_exceeded", "invalid_prompt"), (None, "server_error"), ("made_up", "server_error"),
])
def test_failure_code(code, want):
    assert failure_code(code) == want


def test_every_error_the_gateway_raises_fails_with_a_documented_code():
    for kind, (err_type, default_code) in _KINDS.items():
        for code in (kind, err_type, default_code):
            assert failure_code(code) in DOCUMENTED
    writer = ResponseWriter(ResponsesWire(model="m"), model="m")
    for code in ("engine_overloaded", "invalid_request_error", None):
        kind, event = writer.failed("boom", code)
        assert kind == "response.failed" and event["response"]["error"]["code"] in DOCUMENTED


class BrokenEngine:
    name = "broken"

    async def generate(self, prompt_ids, sampling, session_id=None):
        raise EngineError("the engine fell over")


def test_an_engine_failure_mid_stream_is_server_error():
    renderer = qwen25_renderer()
    gateway = Gateway(BrokenEngine(), renderer, model_name="m")
    with BackgroundServer(create_app(gateway)) as server:
        client = openai.OpenAI(base_url=f"{server.url}/v1", api_key="broken", max_retries=0)
        events = list(client.responses.create(model="m", input="hi", stream=True))
    assert events[-1].type == "response.failed", [e.type for e in events]
    error = events[-1].response.error
    assert error.code == "server_error" and "fell over" in error.message
