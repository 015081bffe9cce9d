"""An :class:`~agent_code.gateway.http.HttpError` in the error format of the protocol a path
belongs to, for what answers before (or outside) a route: the request guard, the request caps,
an unknown route. OpenAI's paths get OpenAI's format, every other path Anthropic's (the session
and admin routes use Anthropic's)."""

from __future__ import annotations

from starlette.responses import Response
from starlette.types import Receive, Scope, Send

from agent_code.gateway.http import HttpError
from agent_code.gateway.routes_anthropic import error_response
from agent_code.gateway.routes_openai_chat import openai_error_response

OPENAI_PATHS = ("/v1/chat/", "/chat/", "/v1/responses", "/responses", "/models")


def error_for_path(path: str, err: HttpError, headers: dict[str, str] | None = None) -> Response:
    """``err`` as ``path``'s protocol writes errors, with ``headers`` added."""
    response = openai_error_response(err) if path.startswith(OPENAI_PATHS) else error_response(err)
    response.headers.update(headers or {})
    return response


async def send_error(scope: Scope, receive: Receive, send: Send, err: HttpError,
                     headers: dict[str, str] | None = None) -> None:
    """Answer the ASGI request ``scope`` with :func:`error_for_path`."""
    await error_for_path(scope.get("path", ""), err, headers)(scope, receive, send)
