"""The permission analysis against bash itself: every command bash runs must be a command of
the analysis (or the analysis must say it cannot judge the line, which makes the policy ask).

Random lines of simple commands with made-up names (each used once), joined by every
separator and nested in every compound (groups, subshells, if/for/while/case, functions,
substitutions, here-documents, here-strings, comments, line continuations), are analysed and
then run by bash with a ``command_not_found_handle`` that logs each name it is asked to run.
A name bash ran that the analysis does not list is a place where the parser reads the line
otherwise than bash (tree-sitter-bash reading a newline as a blank after a pipeline of three
stages was found so: tests/test_policy_attacks.py section M). The analysis must never raise.
"""

from __future__ import annotations

import os
import random
import shutil
import subprocess
from pathlib import Path

import pytest

from agent_code.policy.commands import analyze

pytestmark = pytest.mark.skipif(shutil.which("bash") is None, reason="needs bash")

ARGS = ["1", "15", "-n", "x", "-1", "a1", "--k=3", "0", '"q 1"', "'s'", "$v", "${v:-1}", '"$v"']
SEPARATORS = [" | ", " | ", " |& ", " && ", " || ", "; ", "\n", "\n", " &\n", " & ", " |\n", " &&\n", " ||\n",
              " \\\n", ";\n", " # c\n", "\n\n"]
REDIRECTIONS = ["", "", "", "", " 2>&1", " >/dev/null", " 2>/dev/null", " <<<x", " >&2", " </dev/null"]
LOGGER = 'command_not_found_handle() { printf "%s\\n" "$1" >> "$LOG"; return 0; }\n'


class Lines:
    """A generator of random command lines; every simple command gets a new name (zq1, zq2 …),
    which no program on PATH has."""

    def __init__(self, seed: int) -> None:
        self.r = random.Random(seed)
        self.count = 0

    def name(self) -> str:
        self.count += 1
        return f"zq{self.count}"

    def simple(self, depth: int) -> str:
        r = self.r
        words = [self.name()] + [r.choice(ARGS) for _ in range(r.randint(0, 3))]
        if depth < 2 and r.random() < 0.08:
            words.append("$(" + self.seq(depth + 1, r.randint(1, 3)) + ")")
        if depth < 2 and r.random() < 0.04:
            words.append('"$(' + self.seq(depth + 1, r.randint(1, 3)) + ')"')
        return " ".join(words) + r.choice(REDIRECTIONS)

    def statement(self, depth: int) -> str:
        r = self.r
        x = r.random()
        if depth < 2:
            body = lambda: self.seq(depth + 1, r.randint(1, 3))  # noqa: E731
            if x < 0.05:
                return "{ " + body() + "\n}"
            if x < 0.10:
                return "( " + body() + " )"
            if x < 0.14:
                return "if " + self.simple(depth) + "\nthen " + body() + "\nelse " + body() + "\nfi"
            if x < 0.17:
                return "for i in 1 2; do\n" + body() + "\ndone"
            if x < 0.19:
                return "while false; do " + body() + "; done"
            if x < 0.21:
                return "case $v in\n a) " + body() + ";;\n *) " + body() + ";;\nesac"
            if x < 0.23:
                return f"f{r.randint(0, 3)}() {{ " + body() + "; }"
            if x < 0.26:
                tail = r.choice(["", " | " + self.simple(depth), " && " + self.simple(depth)])
                return self.name() + " <<EOF" + tail + "\nline $v\nEOF"
            if x < 0.28:
                return "v=" + r.choice(["1", "$(" + body() + ")", '"a b"'])
            if x < 0.30:
                return "! " + self.simple(depth)
        return self.simple(depth)

    def seq(self, depth: int, n: int) -> str:
        parts = [self.statement(depth)]
        for _ in range(n - 1):
            parts.append(self.r.choice(SEPARATORS) + self.statement(depth))
        return "".join(parts).strip()

    def line(self) -> str:
        return self.seq(0, self.r.randint(2, 7))


def ran_by_bash(text: str, log: Path) -> set[str]:
    log.write_text("")
    subprocess.run(["bash", "-c", LOGGER + text + "\nwait"], env={"LOG": str(log), "PATH": os.environ["PATH"]},
                   stdin=subprocess.DEVNULL, capture_output=True, timeout=30)
    return set(log.read_text().split())


@pytest.mark.parametrize("seed", [1, 2, 3])
def test_every_command_bash_runs_is_in_the_analysis(seed, tmp_path):
    lines = Lines(seed)
    misread, judged = [], 0
    for number in range(600):
        text = lines.line()
        analysis = analyze(text)  # must not raise
        assert not [e for e in analysis.errors if "could not be analysed" in e], text
        if analysis.errors or analysis.unknown or analysis.opaque:
            continue  # a line the policy asks about
        judged += 1
        listed = {c.program for c in analysis.commands}
        # ("{" and "}" after an assignment are words to bash: it runs "{", no such program)
        # (a log of its own per line: a background job of an earlier line may still write)
        missing = {name for name in ran_by_bash(text, tmp_path / f"log{number}") if name not in listed} - {"{", "}"}
        if missing:
            misread.append((text, sorted(missing)))
    assert judged > 450  # most lines are judged, not asked about
    assert not misread, misread[:5]
