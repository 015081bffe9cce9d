"""The demos, on a bundled sample project (a small library with a bug and a failing test).

``python -m agent_code.demo`` (what ``scripts/demo.sh`` runs) is the main job: the agent on
its own in-process gateway and the embedded model (llama.cpp, Qwen2.5-Coder-0.5B) — no
key, no network. ``python -m agent_code.demo --scripted`` replays a scripted model
instead: instant, deterministic, and what the tests use.
"""

from pathlib import Path

HERE = Path(__file__).resolve().parent
SAMPLE_PROJECT = HERE / "sample_project"
DEMO_SCRIPT = HERE / "demo_script.jsonl"
DEMO_PROMPT = "Why does the inventory test fail? Date your answer."
LOCAL_PROMPT = ("Use the read_file tool to read inventory/stock.py. "
                "Then explain in one sentence why total_value ignores quantity.")


def demo_argv(*extra: str) -> list[str]:
    """The scripted demo's command line."""
    return ["--provider", "scripted", "--script", str(DEMO_SCRIPT), "-C", str(SAMPLE_PROJECT),
            "--no-session-persistence", *extra, DEMO_PROMPT]


def local_demo_argv(*extra: str) -> list[str]:
    """The main job: the embedded model through the in-process gateway. A 0.5B model on a
    CPU is slow and easily lost, so steps and reply length are kept short."""
    return ["--local", "--max-steps", "6", "--max-tokens", "256", "-C", str(SAMPLE_PROJECT),
            "--no-session-persistence", *extra, LOCAL_PROMPT]
