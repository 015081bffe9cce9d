"""The CLI's y/N questions: asked only at a terminal; only y/yes is a yes."""

from __future__ import annotations

import io

import pytest

from agent_code.cli.confirm import terminal, yes_no
from agent_code.cli.repl import settings_question


class Tty(io.StringIO):
    def isatty(self) -> bool:
        return True


class Interrupted(Tty):
    def readline(self, size: int | None = -1, /) -> str:  # type: ignore[override]
        raise KeyboardInterrupt


def test_nobody_to_ask_unless_both_ends_are_a_terminal():
    assert terminal(io.StringIO("y\n"), Tty()) is None     # piped input: maybe a command the agent ran
    assert terminal(Tty("y\n"), io.StringIO()) is None
    closed = io.StringIO()
    closed.close()
    assert terminal(closed, Tty()) is None                # isatty on a closed stream raises ValueError
    assert terminal(object(), Tty()) is None
    pair = terminal(Tty(), Tty())
    assert pair is not None and all(isinstance(end, Tty) for end in pair)
    assert settings_question(io.StringIO("yes\n"), Tty()) is None


@pytest.mark.parametrize("typed, expected", [
    ("y\n", True), ("YES\n", True), ("  yes  \n", True),
    ("\n", False), ("n\n", False), ("No\n", False), ("", False),
    ("maybe\nsure\ny\n", True),      # asked again until a y or an n
    ("what\nn\ny\n", False),
])
def test_yes_no_answers(typed, expected):
    out = Tty()
    assert yes_no(Tty(typed), out, "start it?") is expected
    assert out.getvalue().startswith("start it? [y/N] ")


def test_ctrl_c_is_no():
    out = Tty()
    assert yes_no(Interrupted(), out, "accept?") is False
    assert out.getvalue().endswith("\n")
