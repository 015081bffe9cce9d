"""The speed tricks of :mod:`agent_code.policy.shell_syntax` change no result: node kinds
read through ``kind_id`` are ``node.type``, and an ASCII line sliced as text reads the
same as one decoded from bytes. Pure functions: nothing here runs a command."""

from __future__ import annotations

import pytest

from agent_code.policy import shell_syntax
from agent_code.policy.shell_syntax import _KIND, parse, parser, read

LINES = [
    "git status --short | grep -v '^??' | wc -l",
    "cd \"$(git rev-parse --show-toplevel)\" && make -j\"$(nproc)\" all 2>&1 | tee log",
    "for f in $(git diff --name-only); do python -m py_compile \"$f\" || echo \"bad: $f\"; done",
    "for d in build dist; do rm -rf \"$d\"; done",
    "for d in a b; do d=/; rm -rf $d; done",
    "export PYTHONPATH=\"$PWD/src:${PYTHONPATH:-}\" BUILD_ID=`date +%s`",
    "n=$(( $(ls tests | wc -l) + 1 )); echo \"tests: $n\" >> build.log 2>&1",
    "report() { printf '%s\\t%s\\n' \"$1\" \"$(wc -l < \"$1\")\"; }; report setup.py",
    ":(){ :|:& };:",
    "while true; do sleep 1 & done",
    "case \"$(uname -s)\" in Linux) echo linux;; *) echo other;; esac",
    "diff <(sort a.txt) <(sort b.txt) > diff.txt || true",
    "python3 - <<'EOF'\nimport sys\nEOF",
    "cat <<-EOF | sh\n\t$(touch a)\nEOF",
    "echo $'line one\\nline two' $\"hi\" \"a\\\"b\\\\c\\$d\" a\\ b",
    "[[ $x =~ $(touch a) ]] && echo ${y#$(touch b)}",
    "echo $(echo rm -rf /) \"$(echo -n x)\"",
    "if [ -f x ]; then a; elif b; then c; else d; fi",
    "echo \"unterminated $(",
    "fi ) ;; done",
    "echo 'open",
    "ls >& 2 > f x; cat < in <<< \"word\"",
]


def _nodes(node):
    stack = [node]
    while stack:
        n = stack.pop()
        yield n
        stack.extend(n.children)


@pytest.mark.parametrize("line", LINES)
def test_kind_ids_name_the_node_types(line):
    root = parser().parse(line.encode()).root_node
    for node in _nodes(root):
        assert _KIND[node.kind_id] == node.type


@pytest.mark.parametrize("line", LINES)
def test_ascii_slicing_reads_as_decoding(line):
    source = line.encode()
    tree = parser().parse(source)
    scripts = []
    for text in (line, None):  # None: every span is decoded from the bytes
        scripts.append(read(tree, source, text, source))
    assert scripts[0] == scripts[1] == parse(line)


def test_loop_body_assignment_checks():
    assert shell_syntax._assigns("d").search("x=1; d=/")
    assert shell_syntax._assigns("d").search("for d in x; do :; done")
    assert not shell_syntax._assigns("d").search("dd=1 echo $d")
    assert shell_syntax._CHANGES_VARIABLES.search("read -r x")
    assert shell_syntax._CHANGES_VARIABLES.search(". ./env")


def _parsed_as_given(line: str):
    """The script of ``line`` read from tree-sitter's parse of exactly its bytes (what
    :func:`parse` did before it ended a line with a newline)."""
    source = line.encode()
    return read(parser().parse(source), source, line, source)


@pytest.mark.parametrize("line", [
    *LINES,
    "git log --oneline | grep -i fix | head -n 15",
    "a | b | c | d | e # a comment at the end",
    "find . -name '*.py' | xargs grep -l TODO | sort | uniq -c",
    "cat <<EOF | sh\nrm -rf build",          # a here-document that the end of the line ends
    "echo \"$(a | b | c)\" | tee out | wc -l",
])
def test_a_final_newline_reads_as_the_end_of_the_line(line):
    """parse() ends a line with a newline (it spares tree-sitter-bash an error recovery
    after a final pipeline): the commands, words and errors are those of the line as given."""
    ended = parse(line)
    given = _parsed_as_given(line)
    assert ended.pipelines == given.pipelines or line.startswith("cat <<EOF")
    assert ended.substitutions == given.substitutions
    assert ended.fork_bomb == given.fork_bomb and ended.functions == given.functions
    assert bool(ended.errors) == bool(given.errors)
    if "<<EOF" in line:  # the unterminated here-document: its body, with or without its last newline
        (heredoc,) = [t for p in ended.pipelines for s in p for _, t in s.redirects if t.heredoc is not None]
        assert heredoc.heredoc.rstrip("\n") == "rm -rf build"


def test_no_newline_after_a_final_backslash():
    """``echo a\\`` at the end of a ``bash -c`` script prints ``a\\``; a newline after it
    would be a line continuation, so parse() leaves such a line as it is."""
    for line in ("echo a\\", "rm -rf /tmp/x \\"):
        assert parse(line) == _parsed_as_given(line)


def test_errors_quote_the_line_as_given():
    (error,) = parse("echo 'open").errors
    assert error.endswith("near ` 'open`")
