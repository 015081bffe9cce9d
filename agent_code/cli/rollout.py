"""``agent-code rollout TASKS``: turn a file of tasks into graded, trainable samples.

Opens one gateway (in process, on ``--engine``; or uses ``--gateway URL``), runs every
(task, sample) in its own sandbox and session with a progress bar, and writes
``samples.jsonl``, ``samples.parquet``, ``results.jsonl`` and ``report.html`` under ``--out``.
With ``--ray [ADDRESS]`` the rollouts run as Ray tasks, a gateway per node.

Exit codes: 0 the run completed (whatever the rewards) · 1 error before any rollout ran, or an
invariant of the exported samples failed · 2 bad usage (``--gateway`` without ``--admin-token``
included) · 3 no rollout reached the agent: every rollout aborted for an infrastructure reason
(``boot``, ``launch`` or ``gateway``; the reasons are on stderr) · 130 interrupted (what finished
is kept and written). A run in which at least one agent ran is a normal run, even if every agent
failed (crashed, ran out of budget, made no model call, earned 0).

Sessions: the in-process gateway (and every Ray node's) serves only the sessions this run
opens (``explicit``), behind an admin token minted for the run. ``--gateway URL`` needs
``--admin-token`` and checks that the gateway refuses its session routes without it (start it
with ``agent-code serve --sessions explicit --admin-token TOKEN``); otherwise any agent could
finish its own session with the reward it likes.

A reward that was never computed (the rollout aborted before grading) is shown as
``n/a (REASON)`` in the per-rollout line, the summary and report.html alike; means are over the
rollouts that have a reward.
"""

from __future__ import annotations

import asyncio
import re
import sys
import time
from pathlib import Path
from typing import TYPE_CHECKING, Any, Optional

import typer

from agent_code.engines import ENGINE_SPECS

if TYPE_CHECKING:   # imported where used: `agent-code --help` stays quick
    from rich.console import Console

    from agent_code.gateway.server import BackgroundServer
    from agent_code.rollout.runner import RolloutConfig, RolloutResult
    from agent_code.tasks import Task
    from agent_code.trajectory.samples import Sample

app = typer.Typer(add_completion=False, pretty_exceptions_enable=False, rich_markup_mode=None)

_RAY_ADDRESS = re.compile(r"^(auto|local|ray://.+|[\w.\-]+:\d+)$")


@app.command(context_settings={"help_option_names": ["-h", "--help"]})
def rollout(
    tasks_file: str = typer.Argument(..., metavar="TASKS", help="Tasks JSONL file, or 'bundled' for the bundled set."),
    agent: str = typer.Option("agent-code", "--agent", help="CLI agent: agent-code, claude-code, codex, qwen-code."),
    engine: str = typer.Option("llamacpp", "--engine", help="Engine spec for the in-process gateway: "
                               + " | ".join(ENGINE_SPECS)),
    tokenizer: Optional[str] = typer.Option(None, "--tokenizer", help="Tokenizer/chat template (default: the engine's)."),
    tool_parser: Optional[str] = typer.Option(None, "--tool-parser", help="Tool-call parser (default: detected)."),
    gateway_url: Optional[str] = typer.Option(None, "--gateway", help="Use this running gateway instead of starting one."),
    admin_token: Optional[str] = typer.Option(None, "--admin-token", envvar="AGENT_CODE_ADMIN_TOKEN",
                                              help="The gateway's admin token, for its session routes (the "
                                                   "in-process gateway gets this one, or a fresh random one)."),
    sandbox: str = typer.Option("local", "--sandbox", help="Sandbox: local, docker[:IMAGE], e2b[:TEMPLATE]."),
    samples_per_task: int = typer.Option(1, "--samples-per-task", "-k", min=1, help="Rollouts per task."),
    concurrency: int = typer.Option(1, "--concurrency", "-j", min=1, help="Rollouts at once."),
    budget: float = typer.Option(600.0, "--budget", min=1, help="Seconds each agent may run (a task's timeout wins)."),
    max_steps: int = typer.Option(30, "--max-steps", min=1, help="Step cap for agents that take one (agent-code)."),
    max_turns: Optional[int] = typer.Option(None, "--max-turns", min=1, help="Gateway turns per rollout (429 beyond)."),
    temperature: Optional[float] = typer.Option(None, "--temperature", min=0.0,
                                                help="Sampling temperature for every turn (default: what the agent "
                                                     "asks for, else 1.0)."),
    top_p: Optional[float] = typer.Option(None, "--top-p", min=0.0, max=1.0, help="Nucleus sampling for every turn."),
    top_k: Optional[int] = typer.Option(None, "--top-k", min=1, help="Top-k sampling for every turn."),
    max_tokens: Optional[int] = typer.Option(None, "--max-tokens", min=1,
                                             help="Most tokens a turn may sample, whatever the agent asks for (a "
                                                  "request asking for fewer keeps its own)."),
    max_context_tokens: Optional[int] = typer.Option(None, "--max-context-tokens", min=1,
                                                     help="Context budget of a turn, prompt and reply: a reply is "
                                                          "cut to fit (it stops as max_tokens)."),
    tool_profile: str = typer.Option("auto", "--tool-profile",
                                     help="agent-code's tools: full, small (four tools, whole-file writes, a prompt that spells out "
                                          "the working pattern: for small models) or auto (small on an "
                                          "in-process llamacpp engine, else full)."),
    partial: bool = typer.Option(False, "--partial", help="Reward = fraction of listed tests passing, not 1/0."),
    model: str = typer.Option("agent-code-local", "--model", help="Model name the gateway serves."),
    out: Optional[Path] = typer.Option(None, "--out", "-o", help="Output directory (default: rollouts/<time>)."),
    overwrite: bool = typer.Option(False, "--overwrite", help="Replace a non-empty --out directory."),
    ray_address: Optional[str] = typer.Option(None, "--ray", help="Run on Ray: --ray (a local instance) or --ray ADDRESS."),
) -> None:
    """Run a CLI agent on every task through the gateway; grade, export samples and a report."""
    from rich.console import Console

    from agent_code.rollout.runner import RolloutConfig
    from agent_code.tasks import bundled_tasks_path, load_tasks

    err = Console(stderr=True, soft_wrap=True)
    path = bundled_tasks_path() if tasks_file == "bundled" else Path(tasks_file)
    try:
        tasks = load_tasks(path)
    except Exception as exc:
        err.print(f"agent-code rollout: {exc}", markup=False, highlight=False)
        raise typer.Exit(1)
    from agent_code.harness import HARNESSES

    if agent not in HARNESSES:
        err.print(f"agent-code rollout: unknown agent '{agent}' (choose from {', '.join(HARNESSES)})", markup=False)
        raise typer.Exit(2)
    from agent_code.tools import TOOL_PROFILES

    if tool_profile not in ("auto", *TOOL_PROFILES):
        err.print(f"agent-code rollout: --tool-profile {tool_profile}: choose auto, {' or '.join(TOOL_PROFILES)}",
                  markup=False)
        raise typer.Exit(2)
    if tool_profile == "auto":
        tool_profile = "small" if not gateway_url and engine.partition(":")[0].strip().lower() == "llamacpp" else "full"
    out_dir = out or Path("rollouts") / time.strftime("%Y%m%d-%H%M%S")
    if out_dir.exists() and any(out_dir.iterdir()):
        if not overwrite:
            err.print(f"agent-code rollout: {out_dir} is not empty (pass --overwrite to replace it)", markup=False)
            raise typer.Exit(2)
        import shutil

        shutil.rmtree(out_dir)
    out_dir.mkdir(parents=True, exist_ok=True)
    config = RolloutConfig(agent=agent, sandbox=sandbox, samples_per_task=samples_per_task, concurrency=concurrency,
                           budget=budget, partial=partial, model=model, max_steps=max_steps, max_turns=max_turns,
                           tool_profile=tool_profile, max_new_tokens=max_tokens, max_context_tokens=max_context_tokens,
                           sampling={k: v for k, v in (("temperature", temperature), ("top_p", top_p),
                                                       ("top_k", top_k)) if v is not None},
                           sandbox_options=_hidden(sandbox, path, out_dir))
    if gateway_url and not admin_token:
        err.print(f"agent-code rollout: --gateway {gateway_url} needs --admin-token (or AGENT_CODE_ADMIN_TOKEN): "
                  f"the gateway's session routes must be closed to the agents, or any agent could finish its own "
                  f"session with the reward it likes. Start the gateway with 'agent-code serve --sessions explicit "
                  f"--admin-token TOKEN' and pass the same token here.", markup=False, highlight=False)
        raise typer.Exit(2)
    gateway_options = {"engine_spec": engine, "tokenizer": tokenizer, "model_name": model, "tool_parser": tool_parser}
    total = len(tasks) * samples_per_task
    err.print(f"rollout: {len(tasks)} task(s) × {samples_per_task} = {total} rollout(s) · agent {agent} · "
              f"engine {engine if not gateway_url else gateway_url} · sandbox {sandbox} · "
              f"{'tool profile ' + tool_profile + ' · ' if agent == 'agent-code' else ''}out {out_dir}",
              markup=False, highlight=False)
    try:
        code = asyncio.run(_run(tasks, config, out_dir, gateway_options, gateway_url, ray_address, err,
                                admin_token or None))
    except KeyboardInterrupt:
        code = 130
    raise typer.Exit(code)


def _hidden(sandbox: str, tasks_path: Path, out_dir: Path) -> dict[str, Any]:
    """Keep the tasks file (hidden tests, reference data) and the outputs out of the agent's sight,
    and the history of a git repository holding the tasks file (its objects hold the file too)."""
    if not sandbox.startswith("local"):
        return {}
    tasks_dir = tasks_path.resolve().parent
    hide = [str(tasks_dir), str(out_dir.resolve())]
    repo = next((d for d in (tasks_dir, *tasks_dir.parents) if (d / ".git").exists()), None)
    if repo is not None:
        hide.append(str(repo / ".git"))
    return {"hide": hide}


async def _run(tasks: list[Task], config: RolloutConfig, out_dir: Path, gateway_options: dict[str, Any],
               gateway_url: str | None, ray_address: str | None, err: Console, admin_token: str | None = None) -> int:
    from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn

    from agent_code.rollout.export import RunWriter

    progress = Progress(TextColumn("[bold]rollouts"), BarColumn(), MofNCompleteColumn(),
                        TextColumn("solved {task.fields[solved]} · aborted {task.fields[aborted]}"),
                        TimeElapsedColumn(), TextColumn("{task.fields[last]}"), console=err, transient=False)
    bar = progress.add_task("rollouts", total=len(tasks) * config.samples_per_task, solved=0, aborted=0, last="")
    counts = {"solved": 0, "aborted": 0}
    renderer_box: dict[str, Any] = {}
    writer: RunWriter | None = None

    def on_result(result: RolloutResult, samples: list[Sample]) -> None:
        assert writer is not None
        writer.add(result, samples)
        counts["solved"] += result.solved
        counts["aborted"] += bool(result.abort_reason)
        last = rollout_line(result)
        progress.update(bar, advance=1, last=last, solved=counts["solved"], aborted=counts["aborted"])
        if not err.is_terminal:  # a log, not a terminal: one line per rollout instead of a live bar
            done = int(progress.tasks[0].completed)
            err.print(f"[{done}/{progress.tasks[0].total:g}] {last} · {result.turns} turns · "
                      f"{result.timings.get('total', 0):.1f} s", markup=False, highlight=False)

    interrupted = False
    try:
        with progress:
            if ray_address is not None:
                from agent_code.rollout.ray_runner import run_all_ray

                writer = RunWriter(out_dir)
                options = dict(gateway_options, trajectory_dir=str((out_dir / "trajectories").resolve()))
                await run_all_ray(tasks, config, options, address=ray_address, on_result=on_result,
                                  admin_token=admin_token)
            else:
                import secrets

                from agent_code.rollout.client import admin_token_scope

                # an in-process gateway gets a token of its own, so an agent cannot finish (grade) or
                # read sessions through its session routes; an external one needs --admin-token
                token = admin_token or (None if gateway_url else secrets.token_urlsafe(24))
                async with _gateway(gateway_options, gateway_url, out_dir, err, renderer_box, token) as url:
                    if gateway_url:
                        await _check_remote(url, token)
                    writer = RunWriter(out_dir, renderer=renderer_box.get("renderer"))
                    from agent_code.rollout.runner import run_all

                    with admin_token_scope(token):
                        await run_all(tasks, config, url, on_result=on_result)
    except asyncio.CancelledError:
        interrupted = True
    except Exception as exc:
        err.print(f"agent-code rollout: {type(exc).__name__}: {exc}", markup=False, highlight=False)
        if writer is None:
            return 1
    if writer is None:
        return 130 if interrupted else 1
    paths = writer.close()
    _print_summary(writer.results, paths, interrupted)
    problems = _verify(writer.samples, out_dir / "trajectories", err)
    if interrupted:
        return 130
    infra = no_rollout_ran(writer.results)
    if infra is not None:
        err.print(f"agent-code rollout: error: {infra}", markup=False, highlight=False)
        return 3
    return 1 if problems else 0


INFRA_REASONS = ("boot", "launch", "gateway")


def no_rollout_ran(results: list[Any]) -> str | None:
    """Why no rollout reached its agent (every one aborted with boot, launch or gateway), or
    None when at least one did (or there were none)."""
    if not results or any(r.abort_reason not in INFRA_REASONS for r in results):
        return None
    from collections import Counter

    reasons = Counter(r.abort_reason for r in results)
    first = next((r for r in results if r.error), None)
    detail = ""
    if first is not None:
        line = first.error.strip().splitlines()[0] if first.error.strip() else ""
        detail = f"; first: {first.rollout_id}: {first.abort_reason}: {line[:300]}"
    return (f"no rollout reached the agent: all {len(results)} aborted for infrastructure reasons ("
            + ", ".join(f"{k} {v}" for k, v in sorted(reasons.items())) + ")" + detail)


def _verify(samples: list[Sample], trajectory_dir: Path, err: Console) -> list[str]:
    """Check the exported samples against the turns the gateway logged (token-exact, each
    sampled token trained once); reports and returns the problems."""
    from agent_code.trajectory.store import TurnLog
    from agent_code.trajectory.verify import verify_samples

    if not (trajectory_dir / "sessions").is_dir():
        return []  # an external gateway: its turn log is elsewhere
    turns = TurnLog(trajectory_dir).sessions()
    problems = verify_samples(samples, turns)
    if problems:
        for line in problems[:20]:
            err.print(f"invariant violated: {line}", markup=False, highlight=False)
    else:
        recorded = sum(len(turns.get(s, [])) for s in {x.session_id for x in samples})
        err.print(f"invariants: OK ({len(samples)} samples token-exact against {recorded} recorded turns)",
                  markup=False, highlight=False)
    return problems


async def _check_remote(url: str, token: str | None) -> None:
    """A remote gateway must keep its session routes to the admin token."""
    from agent_code.rollout.client import GatewayClient

    async with GatewayClient(url, admin_token=token) as client:
        if not await client.requires_admin_token():
            raise RuntimeError(f"the gateway at {url} lets a request without the admin token manage sessions "
                               f"(finish them with a reward): restart it with 'agent-code serve --sessions explicit "
                               f"--admin-token TOKEN'")


def rollout_line(result: RolloutResult) -> str:
    """The per-rollout line (progress bar and log)."""
    from agent_code.rollout.export import reward_text

    line = f"{result.rollout_id}: reward {reward_text(result)}"
    if result.abort_reason and result.reward is not None:
        line += f" ({result.abort_reason})"
    rejected = getattr(result, "rejected_paths", None) or []
    if rejected:
        line += f" · {len(rejected)} rejected path(s)"
    return line


class _gateway:
    """An in-process gateway on a free loopback port (or the given URL), as an async context."""

    def __init__(self, options: dict[str, Any], url: str | None, out_dir: Path, err: Console, box: dict[str, Any],
                 admin_token: str | None = None):
        self.options, self.url, self.out_dir, self.err, self.box = options, url, out_dir, err, box
        self.admin_token = admin_token
        self.server: BackgroundServer | None = None

    async def __aenter__(self) -> str:
        if self.url:
            return self.url
        from agent_code.gateway.app import create_app
        from agent_code.gateway.server import BackgroundServer, build_gateway

        self.err.print(f"rollout: starting the gateway on engine {self.options['engine_spec']}…", markup=False,
                       highlight=False)
        gateway = await asyncio.to_thread(build_gateway, trajectory_dir=str(self.out_dir / "trajectories"),
                                          open_on_first_use=False, **self.options)
        self.box["renderer"] = gateway.renderer
        from agent_code.sandbox.e2b import tunnel_hosts

        self.server = BackgroundServer(create_app(gateway, admin_token=self.admin_token, allowed_hosts=tunnel_hosts()))
        self.server.__enter__()
        return self.server.url

    async def __aexit__(self, *exc: object) -> None:
        if self.server is not None:
            await asyncio.to_thread(self.server.__exit__, None, None, None)


def _print_summary(results: list[Any], paths: dict[str, Path], interrupted: bool) -> None:
    from rich.console import Console
    from rich.table import Table

    from agent_code.rollout.export import cache_text, groups_text, mean_text, summarize

    console = Console(soft_wrap=True)
    s = summarize(results)
    table = Table(title="rollout summary" + (" (interrupted)" if interrupted else ""), title_justify="left")
    for name in ("task", "rollouts", "solved", "mean reward", "rejected paths"):
        table.add_column(name, justify="left" if name == "task" else "right")
    for task, t in s["tasks"].items():
        table.add_row(task, str(t["rollouts"]), str(t["solved"]), mean_text(t), str(t["rejected_paths"]))
    console.print(table)
    aborted = ", ".join(f"{k} {v}" for k, v in sorted(s["aborted"].items())) or "none"
    console.print(f"solve rate {s['solve_rate']:.0%} ({s['solved']}/{s['rollouts']}) · mean reward {mean_text(s)} · "
                  f"samples {s['samples']} · rejected paths {s['rejected_paths']} · aborted: {aborted}"
                  + (f" ({s['infrastructure']} of the machine's, left out of their groups)" if s["infrastructure"] else ""),
                  markup=False, highlight=False)
    console.print(groups_text(s), markup=False, highlight=False)
    cache = cache_text(s)
    if cache is not None:
        console.print(cache, markup=False, highlight=False)
    for r in results:
        console.print(f"  {rollout_line(r)}", markup=False, highlight=False)
        if r.abort_reason and r.error:
            first = r.error.strip().splitlines()[0] if r.error.strip() else ""
            console.print(f"    {r.abort_reason}: {first[:160]}", markup=False, highlight=False)
        if getattr(r, "rejected_paths", None):
            console.print("    rejected: " + ", ".join(r.rejected_paths[:20])
                          + (" …" if len(r.rejected_paths) > 20 else ""), markup=False, highlight=False)
    for name, path in paths.items():   # each output once, the report among them
        console.print(f"{name}: {path}", markup=False, highlight=False)


def main(argv: list[str]) -> None:
    from agent_code.cli.stacks import dump_stacks_on_sigusr1

    dump_stacks_on_sigusr1()  # `kill -USR1 PID`: where a run that seems stuck is
    app(args=_ray_flag(argv), prog_name="agent-code rollout")


def _ray_flag(argv: list[str]) -> list[str]:
    """``--ray`` may stand alone (a local Ray instance) or take an address: normalise to ``--ray=X``."""
    out: list[str] = []
    i = 0
    while i < len(argv):
        arg = argv[i]
        if arg == "--ray":
            nxt = argv[i + 1] if i + 1 < len(argv) else None
            if nxt is not None and _RAY_ADDRESS.match(nxt):
                out.append(f"--ray={nxt}")
                i += 2
                continue
            out.append("--ray=local")
        else:
            out.append(arg)
        i += 1
    return out


if __name__ == "__main__":  # pragma: no cover
    main(sys.argv[1:])
