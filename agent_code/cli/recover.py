"""``agent-code recover DIR``: turn logs back into samples, after a crash.

A gateway started with ``--trajectory-dir DIR`` appends every finished turn to
``DIR/sessions/*.turns.jsonl`` (flushed and fsynced). If it dies, this rebuilds each
session's samples from those logs (status ``aborted``, no reward unless given) and writes
them like a finished session: ``OUT/samples.jsonl`` and ``OUT/samples/<session>.parquet``.
"""

from __future__ import annotations

from pathlib import Path
from typing import Optional

import typer

app = typer.Typer(add_completion=False, pretty_exceptions_enable=False, rich_markup_mode=None)


@app.command(context_settings={"help_option_names": ["-h", "--help"]})
def recover_command(
    directory: Path = typer.Argument(..., help="The gateway's --trajectory-dir."),
    out: Optional[Path] = typer.Option(None, "--out", help="Where to write the samples (default: DIRECTORY)."),
    reward: Optional[float] = typer.Option(None, "--reward", help="Reward to give every recovered session."),
) -> None:
    """Rebuild samples from a trajectory directory's turn logs."""
    import sys

    from agent_code.trajectory.store import recover, write_samples

    if not (directory / "sessions").is_dir():
        print(f"agent-code recover: error: {directory} has no sessions/ turn logs", file=sys.stderr)
        raise typer.Exit(1)
    samples = recover(directory, reward=reward)
    written = write_samples(samples, out or directory)
    sessions = len({s.session_id for s in samples})
    print(f"recovered {len(samples)} samples from {sessions} sessions; wrote " + ", ".join(str(p) for p in written))


def main(argv: list[str]) -> None:
    app(args=argv, prog_name="agent-code recover")
