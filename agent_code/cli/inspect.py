"""``agent-code inspect FILE``: look at exported training samples.

FILE is a samples ``.jsonl`` / ``.parquet`` file, an export directory, or a turn-log directory
(one holding ``sessions/*.turns.jsonl``: its samples are recovered first). Prints one table per
session; ``--html OUT`` also writes a self-contained page with every sample token by token:
trained tokens (loss mask 1) highlighted with their logprob, untrained response tokens plain,
prompt tokens dimmed.
"""

from __future__ import annotations

import html
from pathlib import Path
from typing import Any, Callable, Optional

import typer

from agent_code.trajectory.samples import Sample

app = typer.Typer(add_completion=False, pretty_exceptions_enable=False, rich_markup_mode=None)


def load_samples(path: Path) -> list[Sample]:
    from agent_code.trajectory.store import SESSIONS_DIR, read_samples, recover

    if path.is_dir() and (path / SESSIONS_DIR).is_dir() and not any(
            (path / name).exists() for name in ("samples", "samples.jsonl")):
        return recover(path)
    return read_samples(path)


def _by_session(samples: list[Sample]) -> dict[str, list[Sample]]:
    out: dict[str, list[Sample]] = {}
    for s in samples:
        out.setdefault(s.session_id, []).append(s)
    return out


def print_tables(samples: list[Sample], console: Any) -> None:
    from rich.table import Table

    for sid, group in _by_session(samples).items():
        rollout = group[0].rollout_id
        title = f"session {sid}" + (f" (rollout {rollout})" if rollout else "")
        table = Table(title=title, title_justify="left")
        for name in ("#", "branch", "status", "turns", "prompt", "response", "trained", "reward", "drift"):
            table.add_column(name, justify="right" if name not in ("branch", "status") else "left")
        for s in group:
            reward = "-" if s.reward is None else f"{s.reward:g}"
            table.add_row(str(s.index), s.branch, s.status, str(s.metadata.get("turns", "?")),
                          str(s.prompt_length), str(s.response_length), str(s.trained_tokens), reward,
                          str(len(s.metadata.get("drift") or [])))
        console.print(table)
        for s in group:
            for event in s.metadata.get("drift") or []:
                console.print(f"  sample {s.index}: drift " + _describe(event), markup=False, highlight=False)


def _describe(event: dict[str, Any]) -> str:
    head = f"turn {event.get('turn', '?')} {event.get('kind', '?')}"
    rest = ", ".join(f"{k}={v}" for k, v in event.items() if k not in ("turn", "kind"))
    return head + (f" ({rest})" if rest else "")


# --------------------------------------------------------------------------- HTML

_CSS = """
body { font-family: system-ui, sans-serif; margin: 1.5em; color: #222; }
.sample { border: 1px solid #ccc; border-radius: 6px; margin: 1.5em 0; padding: 0.8em; }
.sample h2 { font-size: 1.1em; margin: 0 0 0.4em 0; }
table.fields { border-collapse: collapse; font-size: 0.85em; margin-bottom: 0.6em; }
table.fields td { padding: 1px 8px; border-bottom: 1px solid #eee; vertical-align: top; }
.tokens { font-family: ui-monospace, monospace; font-size: 0.85em; white-space: pre-wrap;
          word-break: break-all; line-height: 1.5; }
.tokens span { border-right: 1px solid rgba(0,0,0,0.07); }
span.p { color: #999; }
span.t { background: #c8f0c8; }
span.u { background: #fff; }
.legend span { padding: 0 4px; margin-right: 8px; }
"""


def _token_texts(renderer: Any) -> Callable[[int], tuple[str, str]]:
    """id -> (display text, raw token) using the tokenizer; falls back to ``<id>``."""
    cache: dict[int, tuple[str, str]] = {}
    tok = getattr(renderer, "tokenizer", None)

    def text(i: int) -> tuple[str, str]:
        if i not in cache:
            if tok is None:
                cache[i] = (f"<{i}>", str(i))
            else:
                try:
                    raw = tok.convert_ids_to_tokens(int(i))
                    shown = tok.decode([int(i)], skip_special_tokens=False, clean_up_tokenization_spaces=False)
                except Exception:
                    raw, shown = str(i), f"<{i}>"
                cache[i] = (shown, str(raw))
        return cache[i]

    return text


def render_html(samples: list[Sample], renderer: Any = None, *, title: str = "agent-code samples") -> str:
    """A self-contained HTML page (no external assets) showing each sample token by token."""
    out = ["<!DOCTYPE html>", "<html><head><meta charset='utf-8'>", f"<title>{html.escape(title)}</title>",
           f"<style>{_CSS}</style></head><body>", f"<h1>{html.escape(title)}</h1>",
           "<p class='legend'><span class='p'>prompt</span><span class='u'>response, not trained</span>"
           "<span class='t'>trained (loss mask 1; hover: logprob)</span></p>"]
    text = _token_texts(renderer)
    for sid, group in _by_session(samples).items():
        out.append(f"<h2>session {html.escape(sid)}</h2>")
        for s in group:
            fields = [("session_id", s.session_id), ("rollout_id", s.rollout_id), ("index", s.index),
                      ("branch", s.branch), ("status", s.status), ("reward", s.reward),
                      ("prompt tokens", s.prompt_length), ("response_length", s.response_length),
                      ("trained tokens", s.trained_tokens)]
            meta = s.metadata
            fields += [(k, meta[k]) for k in ("turns", "turn_indices", "truncated", "use_tool", "shared_turns",
                                              "ill_formed") if k in meta]
            fields += [("drift", "; ".join(_describe(e) for e in meta.get("drift") or []) or "none")]
            out.append(f"<div class='sample' id='{html.escape(sid, quote=True)}-{s.index}'>")
            out.append(f"<h2>sample {s.index} · {html.escape(s.branch)} · {html.escape(s.status)}</h2>")
            out.append("<table class='fields'>" + "".join(
                f"<tr><td>{html.escape(str(k))}</td><td>{html.escape(str(v))}</td></tr>" for k, v in fields)
                + "</table>")
            spans = []
            P = s.prompt_length
            for pos, tid in enumerate(s.tokens):
                shown, raw = text(tid)
                if pos < P:
                    cls, tip = "p", f"prompt · id {tid} · {raw}"
                else:
                    r = pos - P
                    if s.loss_mask[r]:
                        cls, tip = "t", f"logprob {s.rollout_log_probs[r]:.4f} · id {tid} · {raw}"
                    else:
                        cls, tip = "u", f"not trained · id {tid} · {raw}"
                spans.append(f"<span class='{cls}' title='{html.escape(tip, quote=True)}'>"
                             f"{html.escape(shown)}</span>")
            out.append("<div class='tokens'>" + "".join(spans) + "</div></div>")
    out.append("</body></html>")
    return "\n".join(out)


# --------------------------------------------------------------------------- command

@app.command(context_settings={"help_option_names": ["-h", "--help"]})
def inspect(
    file: Path = typer.Argument(..., help="Samples .jsonl/.parquet, an export directory, or a turn-log directory."),
    html_out: Optional[Path] = typer.Option(None, "--html", help="Also write a token-by-token HTML page here."),
    tokenizer: Optional[str] = typer.Option(None, "--tokenizer",
                                            help="Tokenizer for --html: a directory, a .gguf, or a hub id "
                                                 "(default: the embedded model's)."),
) -> None:
    """Show training samples: per session and sample, branch, status, token counts, reward, drift."""
    import sys

    from rich.console import Console

    if not file.exists():
        print(f"agent-code inspect: error: {file} does not exist", file=sys.stderr)
        raise typer.Exit(1)
    try:
        samples = load_samples(file)
    except Exception as exc:
        print(f"agent-code inspect: error: cannot read {file}: {exc}", file=sys.stderr)
        raise typer.Exit(1)
    console = Console(width=max(Console().width, 100))
    if not samples:
        console.print(f"no samples in {file}", markup=False)
    print_tables(samples, console)
    if html_out is not None:
        renderer = None
        from agent_code.render.template import load_renderer
        try:
            renderer = load_renderer(tokenizer)
        except Exception as exc:
            if tokenizer is not None:
                print(f"agent-code inspect: error: {exc}", file=sys.stderr)
                raise typer.Exit(1)
            print(f"agent-code inspect: no tokenizer ({exc}); showing token ids", file=sys.stderr)
        html_out.write_text(render_html(samples, renderer, title=f"agent-code samples: {file.name}"),
                            encoding="utf-8")
        console.print(f"wrote {html_out}", markup=False, highlight=False)


def main(argv: list[str]) -> None:
    app(args=argv, prog_name="agent-code inspect")
