"""Small tools that touch no files: ``echo`` and ``system_date``."""

from __future__ import annotations

from datetime import datetime
from typing import Annotated
from zoneinfo import ZoneInfo, ZoneInfoNotFoundError

from agent_code.tools.base import ToolContext, ToolError, tool


@tool()
def echo(ctx: ToolContext, text: Annotated[str, "The text to send back."]) -> str:
    """Return the given text unchanged. Useful for testing that tool calls work."""
    return text


@tool()
def system_date(
    ctx: ToolContext,
    timezone: Annotated[str | None, "IANA time zone name such as 'Europe/Paris' or 'UTC'; "
                                    "omit for the machine's local time."] = None,
) -> str:
    """Return the current date and time as 'YYYY-MM-DD HH:MM:SS ZONE', e.g.
    '2026-05-20 14:32:00 CST'. Without a timezone it uses the machine's local time zone."""
    if timezone is None:
        now = datetime.now().astimezone()
    else:
        try:
            now = datetime.now(ZoneInfo(timezone))
        except (ZoneInfoNotFoundError, ValueError, OSError):
            raise ToolError(f"unknown timezone {timezone!r}") from None
    return now.strftime("%Y-%m-%d %H:%M:%S %Z")
