"""The tree-sitter reading of bash under the permission layer: what is opened up, what the
word patterns say about expansion, and what is marked as not judgeable. Pure functions:
nothing here runs a command."""

from __future__ import annotations

import pytest

from agent_code.policy.commands import analyze
from agent_code.policy.denylist import brace_alternatives, possibly_protected
from agent_code.policy.shell_syntax import UNKNOWN, UNKNOWN_QUOTED, Compound, Simple, parse

HOME = "/home/someone"


def programs(command: str) -> list[str]:
    return [c.program for c in analyze(command).commands]


@pytest.mark.parametrize("command, hidden", [
    ("git status $(($(touch a)))", "touch"),
    ("echo ${x:-$(touch a)}", "touch"),
    ('echo "${y#$(touch a)}"', "touch"),           # tree-sitter keeps this one as text: read again
    ("echo ${a[$(touch a)]}", "touch"),
    ("((n = $(touch a)))", "touch"),
    ("echo $[ $(touch a) + 1 ]", "touch"),
    ("[[ -f $(touch a) ]]", "touch"),
    ("for f in $(touch a); do :; done", "touch"),
    ("case $(touch a) in *) ;; esac", "touch"),
    ("x=$(touch a)", "touch"),
    ("export X=`touch a`", "touch"),
    ("diff <(touch a) >(touch b)", "touch"),
    ("cat <<EOF\n$(touch a)\nEOF", "touch"),
    ("coproc touch a", "touch"),
    ("coproc NAME { touch a; }", "touch"),
    ("f() { touch a; }", "touch"),                  # a body counts as if it runs
    ("if touch a; then :; fi", "touch"),
    ("while touch a; do :; done", "touch"),
    ("( touch a )", "touch"),
    ("{ touch a; }", "touch"),
    ("trap 'touch a' EXIT", "touch"),
    ("alias x='touch a'", "touch"),
    ("script -qc 'touch a' /dev/null", "touch"),
    ("echo 'touch a' | bash", "touch"),
    ("bash /dev/stdin <<< 'touch a'", "touch"),
    ("cat <<'EOF' | sh -s\ntouch a\nEOF", "touch"),
    ("bash -c '$0' 'touch a'", "touch"),
    ("bash -c \"$(echo touch a)\"", "touch"),
])
def test_every_construct_that_runs_a_command_is_opened_up(command, hidden):
    assert hidden in programs(command), command


def test_quoted_heredoc_bodies_are_not_substitutions():
    assert "touch" not in programs("cat <<'EOF'\n$(touch a)\nEOF")
    assert "touch" not in programs("echo '$(touch a)'")


def test_here_document_pipelines_keep_their_stages():
    script = parse("cat <<EOF | sh -s && rm x\na\nEOF")
    assert [[s.argv for s in p] for p in script.pipelines if len(p) > 1] == [[("cat",), ("sh", "-s")]]
    assert any(s.argv == ("rm", "x") for p in script.pipelines for s in p if isinstance(s, Simple))


def test_compound_stages_and_functions():
    script = parse("echo hi | while read l; do sh; done")
    assert isinstance(script.pipelines[0][1], Compound)
    assert parse("f() { f | f & }; f").pipelines[0][0].body.fork_bomb
    assert parse("f() { echo | f; }; f").pipelines[0][0].body.fork_bomb  # a pipeline into itself
    assert not parse("f() { g | g & }; f").pipelines[0][0].body.fork_bomb
    assert parse("while true; do x & done").pipelines[0][0].body.fork_bomb
    assert not parse("while true; do x & sleep 1; done").pipelines[0][0].body.fork_bomb
    assert analyze("git() { echo; }; git status").functions == {"git"}


def test_word_patterns():
    words = parse("x /{a,b} '/{a,b}' \"$X\" $X ~u/x a\\*b $(echo /) \"$(echo a b)\"").pipelines[0][0].words
    assert [w.shape for w in words] == ["x", "/{a,b}", "/\\{a\\,b\\}", UNKNOWN_QUOTED, UNKNOWN, "~u/x", "a\\*b",
                                        "/", "a b"]


def test_a_loop_variable_over_literal_words_is_one_of_them():
    loop = parse('for d in build "a b" *.o; do rm -rf "$d" ${d}; done').pipelines[0][0]
    words = loop.body.pipelines[0][0].words
    assert [w.shape for w in words[2:]] == ["{build,a b,*.o}"] * 2 and [w.text for w in words[2:]] == ["$d", "${d}"]
    for changed in ("d=/", "read d", "for d in /; do :; done"):  # the body may change it: unknown again
        loop = parse(f'for d in build; do {changed}; rm -rf "$d"; done').pipelines[0][0]
        assert loop.body.pipelines[-1][0].words[2].dynamic, changed


@pytest.mark.parametrize("pattern, alternatives", [
    ("/{etc,usr}", ["/etc", "/usr"]),
    ("/{a,{b,c}}x", ["/ax", "/bx", "/cx"]),
    ("x{1..3}", ["x1", "x2", "x3"]),
    ("\\{a,b}", ["\\{a,b}"]),
    ("{a}", ["{a}"]),
])
def test_brace_expansion(pattern, alternatives):
    assert brace_alternatives(pattern) == alternatives


@pytest.mark.parametrize("pattern, protected", [
    ("/", True), ("/*", True), ("/e*", True), ("/{tmp,etc}", True), (UNKNOWN, True), ("/" + UNKNOWN, True),
    (UNKNOWN_QUOTED + "/etc", True), ("~root", True), ("~/..", True), (".*", True), ("../*", True),
    ("build", False), ("build/*", False), ("*", False), ("/tmp/*", False), (UNKNOWN_QUOTED + "/build", False),
    ("~/project/*", False), ("*.egg-info", False), ("/{tmp,var/tmp}/x", False), ("\\*", False),
])
def test_possibly_protected(pattern, protected):
    assert possibly_protected(pattern, HOME) is protected


@pytest.mark.parametrize("command, reason", [
    ('eval "$CMD"', "eval"),
    ("$CMD -x", "command name"),
    ("sudo $CMD", "command name"),
    ("cat x.sh | sh", "piped"),
    ("source <(cat env)", "source"),
    ('bash -c "$S"', "bash runs a script"),
])
def test_what_cannot_be_judged_is_listed(command, reason):
    found = analyze(command).unknown
    assert found and reason in found[0], (command, found)


@pytest.mark.parametrize("command", ["echo hi", "eval 'echo hi'", "bash -c 'ls'", "echo ls | sh", "cat x | grep y",
                                     "bash script.sh", "f() { :; }; f"])
def test_ordinary_lines_are_judgeable(command):
    analysis = analyze(command)
    assert not analysis.unknown and not analysis.errors, command


@pytest.mark.parametrize("command", ["echo 'x", "ls )", "if true; then", "for x in; do", "a && "])
def test_syntax_errors_are_reported(command):
    assert parse(command).errors and analyze(command).errors


def test_a_command_name_with_a_literal_dollar_is_listed_once_not_unwound_forever():
    """A name holding a literal "$" whose pattern differs from its escaped text but has no brace
    (found by the differential fuzz, seed 1): _each_program called _expand_argv with the same
    command again, without end, until Python's recursion limit made the analysis opaque (500
    copies of the command, 10 ms). Now it is listed once and the line is judged."""
    text = ('zq54 \'\x0b!@\'\'c`>b\x0b\' #--x=1 "!/\n\n\\"""\n;/}" | zq55 \'\r-\' $\'\\t\'%=c,\'"}:,\' '
            '$\'\\x41\' \'=\r#\t(\'! || zq56 ,"\n". "\\`=\t9]"">/\x0c"')
    analysis = analyze(text)
    assert not analysis.opaque
    names = [c.argv[0] for c in analysis.commands if c.argv]
    assert len(names) == len(set(names)) < 10, names


def test_wrappers_and_names_unwound_past_the_depth_limit_make_the_line_opaque(monkeypatch):
    """However _expand_argv comes to call itself again (a name, a wrapper), it stops at
    MAX_DEPTH: the line is opaque (the policy asks), never a RecursionError's depth of work."""
    from agent_code.policy import commands

    def again(leaf, shape, redirects, sub_programs, depth, out):  # a name that always expands anew
        commands._expand_argv(leaf, redirects, sub_programs, depth + 1, out, shape)

    monkeypatch.setattr(commands, "_each_program", again)
    analysis = analyze("for c in a b; do ${c}x; done; $'\\x24'{a,b}")
    assert analysis.opaque
    assert len(analysis.commands) <= 4 * (commands.MAX_DEPTH + 2)
