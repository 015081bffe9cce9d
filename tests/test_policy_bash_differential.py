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
# (each command not found is handled in a process of its own: it writes a file of its own, so
# the records of a pipeline's stages, which run at once, cannot interleave)
LOGGER = 'command_not_found_handle() { printf "%s\\n" "$1" > "$LOG.$BASHPID"; return 0; }\n'


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


def _records(log: Path) -> list[bytes]:
    return [path.read_bytes() for path in log.parent.glob(log.name + ".*")]


def ran_by_bash(text: str, log: Path) -> set[str]:
    subprocess.run(["bash", "-c", LOGGER + text + "\nwait"], env={"LOG": str(log), "PATH": os.environ["PATH"]},
                   stdin=subprocess.DEVNULL, capture_output=True, timeout=30, cwd=log.parent)  # (files it writes)
    return {name for record in _records(log) for name in record.decode("utf-8", "replace").split()}


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


# --- words: what bash passes as argv, for lines of every kind of quoting -----------------

CHARS = list("abc019_-.,:=+%@/#!^") + [" ", "\t", "\\", "'", '"', "$", "`", "\r", "\x0b", "\x0c", "\n", "*", "?",
                                       "[", "]", "{", "}", "(", ")", "<", ">", "|", "&", ";", "~"]
ANSI_PIECES = list("abn t\\'\"x41") + ["\\n", "\\t", "\\x41", "\\101", "\\'", "\\\\", "\\e", "\\cA", "\\u00e9"]
ARGV_LOGGER = 'command_not_found_handle() { printf "%s\\0" "$#" "$@" > "$LOG.$BASHPID"; return 0; }\n'


def _piece(r: random.Random) -> str:
    x = r.random()
    if x < 0.35:
        return "".join(r.choice("abcxyz019_-.,:=+%@/") for _ in range(r.randint(1, 4)))
    if x < 0.5:
        return "'" + "".join(r.choice(CHARS) for _ in range(r.randint(0, 5))).replace("'", "") + "'"
    if x < 0.65:
        body = "".join(r.choice(CHARS) for _ in range(r.randint(0, 5)))
        body = body.replace('"', '\\"').replace("`", "\\`").replace("$", "\\$")
        if body.endswith("\\") and not body.endswith("\\\\"):
            body += "\\"
        return '"' + body + '"'
    if x < 0.75:
        body = "".join(r.choice(ANSI_PIECES) for _ in range(r.randint(0, 4))).replace("'", "\\'")
        if body.endswith("\\") and not body.endswith("\\\\"):
            body += "\\"
        return "$'" + body + "'"
    if x < 0.9:
        return "\\" + r.choice(CHARS)
    return r.choice(["#", "a#b", "=", "x=y", "!", "%", "^", "a:b", "--x=1", "-", "--"])


def _quoted_line(r: random.Random, names: list[int]) -> str:
    commands = []
    for _ in range(r.randint(1, 4)):
        names[0] += 1
        words = ["".join(_piece(r) for _ in range(r.randint(1, 3))) for _ in range(r.randint(0, 4))]
        commands.append(" ".join([f"zq{names[0]}", *words]))
    return "".join(c if not k else r.choice([" | ", " && ", "; ", "\n", " || "]) + c for k, c in enumerate(commands))


def argv_by_bash(text: str, log: Path, cwd: Path) -> list[tuple[str, ...]]:
    subprocess.run(["bash", "-c", ARGV_LOGGER + text + "\nwait"], cwd=cwd, stdin=subprocess.DEVNULL,
                   capture_output=True, timeout=30,
                   env={"LOG": str(log), "PATH": os.environ["PATH"], "HOME": "/nonexistent", "LC_ALL": "C.UTF-8"})
    calls = []
    for record in _records(log):
        fields = record.decode("utf-8", "surrogateescape").split("\0")
        calls.append(tuple(fields[1:1 + int(fields[0])]))
    return calls


@pytest.mark.parametrize("seed", [1, 2])
def test_every_literal_command_has_the_argv_bash_passes(seed, tmp_path):
    """Quotes of every kind, escapes, ``$'…'``, control characters, glued word parts: for every
    command the analysis lists with literal words only, bash runs that name with exactly that
    argv; and no name bash runs is missing. (Found: tree-sitter-bash ends a word before a
    backslash that follows a quote or an expansion, ``"r"\\m -rf ~``; it ran a ``$'\\\\'``
    string on past its quote; a line continuation inside a word.)"""
    from agent_code.policy.shell_syntax import UNKNOWN, UNKNOWN_QUOTED

    r, names, cwd = random.Random(seed), [0], tmp_path / "empty"
    cwd.mkdir()
    wrong, judged = [], 0
    for number in range(700):
        text = _quoted_line(r, names)
        analysis = analyze(text)
        assert not [e for e in analysis.errors if "could not be analysed" in e], text
        if analysis.errors or analysis.unknown or analysis.opaque:
            continue
        judged += 1
        listed: dict[str, list] = {}
        for command in analysis.commands:
            listed.setdefault(command.argv[0] if command.argv else "", []).append(command)
        for call in argv_by_bash(text, tmp_path / f"log{number}", cwd):
            found = listed.get(call[0])
            if not found:
                wrong.append((text, call, None))
                continue
            literal = [c for c in found if not any(UNKNOWN in p or UNKNOWN_QUOTED in p or any(ch in p for ch in "*?[{~")
                                                   for p in c.patterns)]
            if literal and all(c.argv != call for c in literal):
                wrong.append((text, call, [c.argv for c in literal]))
    assert judged > 400
    assert not wrong, wrong[:5]


# --- here-documents: where the body ends, what the line after the delimiter runs --------

def _heredoc_lines() -> list[str]:
    lines = []
    ends = [("EOF", "EOF"), ("'EOF'", "EOF"), ('"EOF"', "EOF"), ("\\EOF", "EOF"), ("E'O'F", "EOF"), ("'E O'", "E O"),
            ("EOF", "\tEOF"), ("EOF", "EOF "), ("EOF", " EOF"), ("EOF", "EOF;"), ("E\"\"OF", "EOF"), ("$X", "$X"),
            ("A-B", "A-B"), ("EOF", "EOF # c")]
    for op in ("<<", "<<-"):
        for delimiter, end in ends:
            for after in ("", " | zqpipe", " && zqand", "; zqsemi", ";", "|zqp", "&&zqa", ">zqfile", " zqarg"):
                lines.append(f"zqcat {op}{delimiter}{after}\nbody `zqtick` $(zqsub)\n{end}\nzqafter1\nEOF\nzqafter2")
                lines.append(f"zqcat {op} {delimiter}{after}\n\tbody\n{end}\nzqafter1\n{end}\nzqafter2")
    return lines + ["zqcat <<EOF; zqcat2 <<EOF2\na\nEOF\nb\nEOF2\nzqafter", "zqcat <<EOF <<EOF2\na\nEOF\nzqmid\nEOF2\nzqafter",
                    "zqcat <<EOF\na\\\nEOF\nzqafter\nEOF", "zqx $(zqcat <<EOF\na)\nEOF\n)\nzqafter"]


def test_every_command_bash_runs_around_a_here_document_is_in_the_analysis(tmp_path):
    """(Found: ``<<EOF;`` took "EOF;" as the delimiter, so the body ran on past the line "EOF"
    while bash ran the lines after it; words after the delimiter were dropped, ``rm <<EOF -rf ~``;
    `…` in an unquoted body was not opened.)"""
    misread, judged = [], 0
    for number, text in enumerate(_heredoc_lines()):
        analysis = analyze(text)
        assert not [e for e in analysis.errors if "could not be analysed" in e], text
        if analysis.errors or analysis.unknown or analysis.opaque:
            continue
        judged += 1
        listed = {c.program for c in analysis.commands}
        missing = {name for name in ran_by_bash(text, tmp_path / f"log{number}") if name not in listed}
        if missing:
            misread.append((text, sorted(missing)))
    assert judged > 150
    assert not misread, misread[:5]
