"""``agent-code recover DIR``: turn logs back into samples, after a crash.

A gateway started with ``--trajectory-dir DIR`` appends every finished turn to
``DIR/sessions/*.turns.jsonl`` (flushed and fsynced). If it dies, this rebuilds each
session's samples from those logs (status ``aborted``, no reward unless given) and writes
them like a finished session: ``OUT/samples.jsonl`` and ``OUT/samples/<session>.parquet``.

Idempotent, and finished work is never touched: a session that is done — finished (or
deleted) by the gateway, recovered before, or with samples already in ``DIR``'s or ``OUT``'s
``samples.jsonl`` — is skipped, its samples and Parquet file left as they are. Each session it
does recover is recorded as ``recovered`` in ``OUT/ended.jsonl`` (and ``DIR/ended.jsonl``, so a
gateway restarted on ``DIR`` never reopens it); a second run finds nothing to do and writes
nothing (every file byte-identical).
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

    from agent_code.trajectory.store import TurnLog, done_ids, mark_ended, recover, write_samples

    if not (directory / "sessions").is_dir():
        print(f"agent-code recover: error: {directory} has no sessions/ turn logs", file=sys.stderr)
        raise typer.Exit(1)
    target = out or directory
    done = done_ids(directory, target)
    logged = set(TurnLog(directory).sessions())
    samples = recover(directory, reward=reward, skip=done)
    recovered = sorted({s.session_id for s in samples})
    written = write_samples(samples, target)       # samples first: they are the commit point
    for where in dict.fromkeys([target, directory]):
        mark_ended(where, recovered, "recovered")
    kept = len(logged & done)
    print(f"recovered {len(samples)} samples from {len(recovered)} sessions (open at the crash); left {kept} finished "
          f"session(s) untouched" + ("; wrote " + ", ".join(str(p) for p in written) if written else
                                      "; nothing to write"))


def main(argv: list[str]) -> None:
    app(args=argv, prog_name="agent-code recover")
