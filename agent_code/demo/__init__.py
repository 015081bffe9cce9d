"""The offline demo: the scripted provider against a bundled sample project.

``python -m agent_code.demo`` runs it (``make demo`` / ``scripts/demo.sh`` call this).
"""

from pathlib import Path

HERE = Path(__file__).resolve().parent
SAMPLE_PROJECT = HERE / "sample_project"
DEMO_SCRIPT = HERE / "demo_script.jsonl"
DEMO_PROMPT = "Why does the inventory test fail? Date your answer."


def demo_argv(*extra: str) -> list[str]:
    return ["--provider", "scripted", "--script", str(DEMO_SCRIPT), "-C", str(SAMPLE_PROJECT), *extra, DEMO_PROMPT]
