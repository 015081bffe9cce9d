"""docs/security.md matches the code: every rule of the grader's table (``protected.RULES``) has
its row, and every row of the grader's and the run-scale tables names an attack test that exists."""

from __future__ import annotations

import re
from pathlib import Path

from agent_code.tasks.protected import RULES

REPO = Path(__file__).resolve().parents[1]
DOC = (REPO / "docs" / "security.md").read_text()


def table(header: str) -> list[list[str]]:
    """The rows (cells) of the markdown table whose header line starts with ``header``."""
    start = DOC.index(header)
    lines = DOC[start:].split("\n\n", 1)[0].splitlines()[2:]
    return [[cell.strip() for cell in line.strip().strip("|").split("|")] for line in lines]


def named_tests(cell: str) -> list[str]:
    return re.findall(r"`(tests/[\w/]+\.py(?:::\w+)?)`", cell)


def exists(ref: str) -> bool:
    path, _, function = ref.partition("::")
    file = REPO / path
    return file.is_file() and (not function or re.search(rf"^(?:async )?def {function}\(", file.read_text(),
                                                          re.MULTILINE) is not None)


def test_every_grader_rule_has_its_row_and_its_attack_test():
    rows = {cells[0]: cells for cells in table("| rule | what | why | attack test |")}
    assert sorted(rows) == sorted(rule.name for rule in RULES)
    for name, cells in rows.items():
        refs = named_tests(cells[-1])
        assert refs and all(exists(ref) for ref in refs), (name, cells[-1])


def test_every_run_scale_row_names_an_attack_test_that_exists():
    rows = table("| class | what holds now | attack test |")
    assert len(rows) >= 7
    for cells in rows:
        refs = named_tests(cells[-1])
        assert refs and all(exists(ref) for ref in refs), cells


def test_a_missing_test_is_noticed():
    assert not exists("tests/test_security_doc.py::test_that_does_not_exist")
    assert not exists("tests/no_such_file.py")
