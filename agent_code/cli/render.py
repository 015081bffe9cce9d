"""How a run is shown: the three ``--output-format``s, each a small event sink.

* ``text``: the header (cwd, provider, model, base URL) and a trace of tool calls,
  observations and the final answer; with ``-p`` only the answer.
* ``json``: one JSON object when the run ends.
* ``stream-json``: one JSON object per line, per event, flushed as it happens; nothing
  else ever goes to stdout, so a harness can parse every line.

What the text format shows of the model's words, its calls and the tools' output passes
:func:`for_terminal` first: a command's output (run unasked inside the OS sandbox) or the
model's text could otherwise carry escape sequences to the user's terminal — rewrite the
clipboard (OSC 52), erase or redraw lines (a question, a diff), retitle the window. Control and
format characters are written as ``\\xNN``/``\\uNNNN``; newlines and tabs stay. The ``-p``
answer is escaped only when it goes to a terminal (a pipe gets it as it is).
"""

from __future__ import annotations

import json
import sys
from typing import Any, TextIO

OBSERVATION_LINES = 20
KEPT = ("\n", "\t")


def for_terminal(text: str) -> str:
    """``text`` with every control and format character but newline and tab escaped (module doc)."""
    import unicodedata

    def escape(ch: str) -> str:
        return f"\\x{ord(ch):02x}" if ord(ch) < 0x100 else f"\\u{ord(ch):04x}"

    return "".join(escape(ch) if ch not in KEPT and unicodedata.category(ch) in ("Cc", "Cf", "Zl", "Zp") else ch
                   for ch in text)


def _short(value: object, limit: int = 2000) -> str:
    text = value if isinstance(value, str) else json.dumps(value, ensure_ascii=False)
    return for_terminal(text if len(text) <= limit else text[:limit] + "…")


class TextRenderer:
    def __init__(self, quiet: bool = False, out: TextIO | None = None) -> None:
        from rich.console import Console

        self.quiet = quiet
        self.console = Console(file=out or sys.stdout, highlight=False, soft_wrap=True)

    def header(self, info: dict[str, Any]) -> None:
        if self.quiet:
            return
        c = self.console
        c.print("[bold]Agent Code[/bold]")
        c.print(f"cwd: {info['cwd']}", markup=False)
        c.print(f"provider: {info['provider']}  model: {info['model']}  base_url: {info.get('base_url') or '-'}",
                markup=False)
        if info.get("session_id"):
            state = f"resumed, {info.get('messages', 0)} messages" if info.get("resumed") else "new"
            c.print(f"session: {info['session_id']} ({state}; continue it with --resume {info['session_id']})",
                    markup=False, highlight=False)
        c.print()

    def __call__(self, event: dict[str, Any]) -> None:
        kind = event["type"]
        c = self.console
        if kind == "result":
            if event["subtype"] == "success":
                if self.quiet:
                    c.print(for_terminal(event["result"]) if c.is_terminal else event["result"], markup=False,
                            highlight=False)
                else:
                    c.print("[bold green]final:[/] ", end="")
                    c.print(for_terminal(event["result"]), markup=False, highlight=False)
            elif not self.quiet:
                c.print("[bold red]stopped:[/] ", end="")
                c.print(for_terminal(str(event.get("error") or event["result"])), markup=False)
            return
        if self.quiet:
            return
        if kind == "assistant":
            blocks = event["message"]["content"]
            has_tools = any(b.get("type") == "tool_use" for b in blocks)
            for b in blocks:
                if b.get("type") == "thinking" and b.get("thinking"):
                    c.print(f"thinking: {_short(b['thinking'], 300)}", markup=False, style="dim")
                elif b.get("type") == "text" and b.get("text") and has_tools:
                    c.print("[cyan]assistant:[/] ", end="")
                    c.print(for_terminal(b["text"]), markup=False)
        elif kind == "tool_use":
            c.print(f"[yellow]tool_call:[/] {event['name']} ", end="")
            c.print(_short(event["input"], 300), markup=False)
        elif kind == "tool_result":
            lines = event["content"].splitlines() or [""]
            shown = "\n".join(lines[:OBSERVATION_LINES])
            if len(lines) > OBSERVATION_LINES:
                shown += f"\n… ({len(lines) - OBSERVATION_LINES} more lines)"
            label = "[red]tool_error:[/] " if event["is_error"] else "[blue]observation:[/] "
            c.print(label, end="")
            c.print(for_terminal(shown), markup=False)


class JsonRenderer:
    """Collects the run and prints one object at the end."""

    def __init__(self, out: TextIO | None = None) -> None:
        self.out = out or sys.stdout
        self.info: dict[str, Any] = {}

    def header(self, info: dict[str, Any]) -> None:
        self.info = info

    def __call__(self, event: dict[str, Any]) -> None:
        if event["type"] == "result":
            payload = {**event, "provider": self.info.get("provider"), "model": self.info.get("model"),
                       "cwd": self.info.get("cwd")}
            self.out.write(json.dumps(payload, ensure_ascii=False) + "\n")
            self.out.flush()


class StreamJsonRenderer:
    def __init__(self, out: TextIO | None = None) -> None:
        self.out = out or sys.stdout

    def header(self, info: dict[str, Any]) -> None:
        self({"type": "system", "subtype": "init", **info})

    def __call__(self, event: dict[str, Any]) -> None:
        self.out.write(json.dumps(event, ensure_ascii=False) + "\n")
        self.out.flush()


def make_renderer(output_format: str, quiet: bool = False):
    if output_format == "json":
        return JsonRenderer()
    if output_format == "stream-json":
        return StreamJsonRenderer()
    return TextRenderer(quiet=quiet)
