"""``<think>…</think>`` reasoning (Qwen3, DeepSeek-R1 style templates).

* A completion that starts (after whitespace) with ``<think>`` has its reasoning up to
  ``</think>``; with no ``</think>`` (cut off by max_tokens) all of it is reasoning.
* A completion with a lone ``</think>`` (no ``<think>`` before it) began inside a think block the
  generation prompt opened: the text before ``</think>`` is the reasoning.
* ``opened=True`` says the prompt opened the block: then a completion without ``</think>`` is
  all reasoning.
Empty reasoning (``<think>\\n\\n</think>``, as templates write when thinking is off) is ``None``.
"""

from __future__ import annotations

OPEN, CLOSE = "<think>", "</think>"


def split_reasoning(text: str, *, opened: bool = False) -> tuple[str | None, str]:
    """(reasoning or None, the rest of the text)."""
    if opened:
        thought, closed, rest = text.partition(CLOSE)
        if thought.lstrip().startswith(OPEN):  # the model opened it again
            thought = thought.lstrip()[len(OPEN):]
        return (thought.strip() or None), (rest if closed else "")
    stripped = text.lstrip()
    if stripped.startswith(OPEN):
        thought, closed, rest = stripped[len(OPEN):].partition(CLOSE)
        return (thought.strip() or None), (rest if closed else "")
    close = text.find(CLOSE)
    if close >= 0 and OPEN not in text[:close]:
        return (text[:close].strip() or None), text[close + len(CLOSE):]
    return None, text
