"""``agent-code inspect FILE``: look at exported training samples.

FILE is a samples ``.jsonl`` / ``.parquet`` file, an export directory, or a turn-log directory
(one holding ``sessions/*.turns.jsonl``: its samples are recovered first). Prints one table per
session; ``--html OUT`` also writes a self-contained page with every sample token by token
(``rollout/inspect_html.py``, imported when used: the rollout package is slow to import).
"""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING, Optional

import typer

from agent_code.trajectory.samples import Sample

if TYPE_CHECKING:
    from rich.console import Console

app = typer.Typer(add_completion=False, pretty_exceptions_enable=False, rich_markup_mode=None)


def load_samples(path: Path) -> list[Sample]:
    from agent_code.trajectory.store import SESSIONS_DIR, read_samples, recover

    if path.is_dir() and (path / SESSIONS_DIR).is_dir() and not any(
            (path / name).exists() for name in ("samples", "samples.jsonl")):
        return recover(path)
    return read_samples(path)


def print_tables(samples: list[Sample], console: Console) -> None:
    from rich.table import Table

    from agent_code.rollout.inspect_html import by_session, describe_drift

    for sid, group in by_session(samples).items():
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
                console.print(f"  sample {s.index}: drift " + describe_drift(event), markup=False, highlight=False)


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
        from agent_code.rollout.inspect_html import render_html
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
