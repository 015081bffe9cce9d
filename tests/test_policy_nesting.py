"""Nested command lines cost the policy work in proportion to their length.

An attack on the check itself: `echo $(echo $(echo … x))` twenty levels deep (166 bytes) once
took 10 s to judge and every further level doubled it, because the `$(echo WORDS)` folding read
each inner word, and ``word`` then read it again for its substitutions (2^depth readings). A
model that sends such a line stalls the agent (or a rollout worker) without running anything.

Each nesting the shell or tree-sitter's tree has is built at two depths; the reader's work
(counted calls, not time) at the double depth may be at most a little over double. Deep lines
of every kind are then judged all the way, to a decision that does not allow them.
"""

from __future__ import annotations

import functools
import json
import subprocess
import sys
from pathlib import Path

import pytest

from agent_code.policy import shell_syntax
from agent_code.policy.commands import clear_caches
from agent_code.policy.permissions import PermissionPolicy
from agent_code.policy.rules import RuleSet
from agent_code.tools import default_tools


def nested(n: int) -> dict[str, str]:
    """A line nested ``n`` levels deep for each way a command line nests."""
    return {
        "dollar-paren": "echo " + "$(echo " * n + "x" + ")" * n,
        "quoted-dollar-paren": "echo " + '"$(echo ' * n + "x" + ')"' * n,
        "echo-args": "echo " + "$(echo a b " * n + "x" + ")" * n,
        "backquotes-in-dollar-paren": "echo " + "$(echo `echo " * n + "x" + "`)" * n,
        "subshell": "( " * n + "true" + " )" * n,
        "group": "{ " * n + "true; " + "}; " * (n - 1) + "}",
        "and-list": " && ".join(["true"] * n),
        "pipeline": " | ".join(["cat"] * n),
        "arith-parens": "echo $(( " + "(" * n + "1" + ")" * n + " ))",
        "arith-plus": "echo $(( " + "+".join(["1"] * n) + " ))",
        "arith-unary": "echo $(( " + "-" * n + "1 ))",
        "arith-ternary": "echo $(( " + "1?" * n + "1" + ":1" * n + " ))",
        "expansion-default": "echo " + "${a:-" * n + "x" + "}" * n,
        "expansion-sub": "echo " + "${a:-$(echo " * n + "x" + ")}" * n,
        "process-sub": "cat " + "<(cat " * n + "x" + ")" * n,
        "if": "if true; then " * n + "true" + "; fi" * n,
        "while": "while false; do " * n + "true" + "; done" * n,
        "for": "for i in 1; do " * n + "true" + "; done" * n,
        "case": "case x in x) " * n + "true" + ";; esac" * n,
        "function": "f() { " * n + "true; " + "}; " * (n - 1) + "}",
        "test-parens": "[[ " + "( " * n + "-n x" + " )" * n + " ]]",
        "test-and": "[[ " + " && ".join(["-n x"] * n) + " ]]",
        "array": "a=( " + "$(echo " * n + "x" + ")" * n + " )",
        "assign-chain": "a=" + "$(b=" * n + "x" + ")" * n,
        "heredoc-sub": "cat <<EOF\n" + "$(echo " * n + "x" + ")" * n + "\nEOF",
        "herestring": "cat <<< " + "$(cat <<< " * n + "x" + ")" * n,
        "old-arith": "echo " + "$[" * n + "1" + "]" * n,
        "redirect-sub": "echo x > " + "$(echo " * n + "x" + ")" * n,
        "subscript": "echo " + "${a[" * n + "1" + "]}" * n,
        "declare-sub": "declare a=" + "$(declare b=" * n + "x" + ")" * n,
        "quote-mix": "echo " + "\"'$(" * n + "x" + ")'\"" * n,
        # not nesting in the tree, but in what the checks after it do: brace groups and nested
        # braces (expanded word by word), and copies of copies evaluated as arithmetic
        "brace-groups": "echo x > " + "{}" * n,
        "brace-nest": "echo x > " + "{a," * n + "b" + "}" * n,
        "brace-words": "echo x > " + "{a}" * n,             # the next spellings of the groups
        "brace-empty-alternatives": "echo x > " + "{,}" * n,
        "copy-chain": "; ".join(f"x{i}=$x{i + 1}" for i in range(n)) + f"; x{n}=1; echo $((x0))",
    }


COUNTED = ("container", "word", "_parts", "_opened", "_echoed", "command")


@pytest.fixture
def reader_calls(monkeypatch: pytest.MonkeyPatch) -> list[int]:
    """A one-item list: how many times the reader's recursive methods were entered."""
    calls = [0]
    for name in COUNTED:
        original = getattr(shell_syntax._Reader, name)

        @functools.wraps(original)
        def counted(self, *args, _original=original, **kwargs):  # type: ignore[no-untyped-def]
            calls[0] += 1
            return _original(self, *args, **kwargs)

        monkeypatch.setattr(shell_syntax._Reader, name, counted)
    return calls


def reader_work(kind: str, calls: list[int]) -> dict[int, int]:
    """The reader's counted calls for the ``kind`` line nested 6 and 12 levels deep."""
    work = {}
    for n in (6, 12):
        clear_caches()
        calls[0] = 0
        shell_syntax.parse(nested(n)[kind])
        work[n] = calls[0]
    return work


@pytest.mark.parametrize("kind", sorted(nested(2)))
def test_reading_a_nested_line_costs_work_in_proportion_to_its_depth(kind, reader_calls):
    work = reader_work(kind, reader_calls)
    assert work[6] > 0, "the counted methods were not called: the count measures nothing"
    assert work[12] <= 2.5 * work[6] + 20, f"{kind}: {work} reader calls at depth 6 and 12 (grows faster than the line)"


def test_the_count_sees_a_doubling_reader(reader_calls, monkeypatch):
    """The control: a reader that reads every substitution twice (the old folding) fails the bound."""
    original = shell_syntax._Reader._opened

    def twice(self, node):  # type: ignore[no-untyped-def]
        original(self, node)
        return original(self, node)

    monkeypatch.setattr(shell_syntax._Reader, "_opened", twice)
    work = reader_work("dollar-paren", reader_calls)
    assert work[12] > 2.5 * work[6] + 20


@pytest.mark.parametrize("mode", ["default", "bypassPermissions"])
def test_deeply_nested_lines_of_every_kind_are_judged_and_not_allowed_unseen(mode):
    """300 levels (past what the analysis follows): each line gets a decision at once, and no
    `rm -rf /` hidden at the bottom is allowed, even with an allow rule for the outer program."""
    bash = default_tools().get("bash")
    rules = RuleSet.from_lists(allow=["bash(echo:*)", "bash(cat:*)", "bash(true:*)"])
    policy = PermissionPolicy(mode, rules=rules, ask=lambda tool, arguments: False)
    judged = 0
    for kind, line in nested(300).items():
        if kind.startswith(("test-", "arith-", "old-arith", "subscript", "pipeline")):
            continue  # no command at the bottom (a test, a number, a last `cat`)
        if "x" in line:  # the innermost word, in a substitution: a command of its own there
            hidden = line.replace("x", "$(rm -rf /)", 1)
        else:  # the innermost `true`
            before, _, after = line.rpartition("true")
            hidden = before + "rm -rf /" + after
        judged += 1
        decision = policy.check(bash, {"command": hidden})
        assert not decision.allowed, f"{kind}: allowed {hidden[:80]!r}…"
    assert judged >= 20


# the next spellings after the fix: an `echo` argument that may run a substitution is no longer
# folded, so the folded output must not be what lets `rm -rf /` through (bypassPermissions, with
# `rm` allowed by a rule: only the deny list stands between the line and the machine)
FOLDING_VARIANTS = [
    ("rm -rf $(echo /)", "deny"),                           # folded: the output is /
    ("rm -rf $(echo / $(true))", "deny"),                   # an argument runs a substitution
    ("rm -rf $(echo / \\$\\(x\\))", "deny"),                # escaped: text that looks like one
    ("rm -rf $(echo /`true`)", "deny"),
    ("rm -rf $(echo <(true) /)", "deny"),
    ("rm -rf $(echo \"/\" >(true))", "deny"),
    ("rm -rf $(echo ${a:-/})", "deny"),
    ("rm -rf \"$(echo \"/$(true)\")\"", "deny"),
    ("rm -rf $(echo -n /$(echo))", "deny"),
    ("rm -rf \"$(echo / '$(x)')\"", "allow"),               # one path, `/ $(x)`: not /
    ("rm -rf $(echo $'/\\x24(x)')", "allow"),               # prints `/$(x)`, never run again
]


@pytest.mark.parametrize("line, expected", FOLDING_VARIANTS)
def test_echo_folding_variants_keep_their_decision(line, expected):
    bash = default_tools().get("bash")
    policy = PermissionPolicy("bypassPermissions", rules=RuleSet.from_lists(allow=["bash(rm:*)"]))
    assert policy.explain(bash, {"command": line}).behavior == expected


@pytest.mark.parametrize("joint", [" && ", " || ", "; ", "\n", " | ", " & "])
def test_a_chain_of_any_length_is_read_to_its_end(joint):
    """`a && b && …` is a list inside a list in tree-sitter's tree, as deep as the chain is
    long; the reader walks it with a stack, so neither form gives up on a long chain (a chain
    is no nesting: the MAX_NESTING bound is not for it), and what is at its end is judged."""
    bash = default_tools().get("bash")
    policy = PermissionPolicy("bypassPermissions", ask=lambda tool, arguments: False)
    chain = joint.join(["true"] * (4 * shell_syntax.MAX_NESTING))
    assert policy.explain(bash, {"command": chain}).behavior == "allow"
    explained = policy.explain(bash, {"command": chain + joint + "rm -rf /"})
    assert explained.behavior == "deny" and "nested" not in explained.reason, explained.reason


# --- the evaluated values' scans (policy/evaluated.py) -------------------------------------------
# Each of those scans reads from where its construct starts to where it ends, so many starts that
# share one far end cost the square of the line: 10 kB of these took a quarter of a second to over
# a second, 64 kB up to a minute, before the scans were costed first (evaluated._scan_cost).

def scan_floods(size: int) -> dict[str, str]:
    """Lines of about ``size`` bytes whose starts share one far end, for each scan."""
    n = size // 10
    return {
        "declare-sub": "declare a=" + "$(declare b=" * n + "x" + ")" * n,      # _at_words, _bindings
        "declarers": "declare " + "declare x " * n,
        "readers": "read " + "read x " * n,                                      # _bindings
        "lets": "let " + "let x " * n,                                           # _at_words(let)
        "takers": "unset " + "unset a[1] " * n,                                  # _TAKER_SUBSCRIPT
        "tests": "test " + "test -v x " * n,                                     # _option_subscript
        "arithmetic-tests": "[ 1 " + "-eq 1 " * n + "]",                         # -eq … to its separator
        "nested-parens": "echo $(( " + "(" * (4 * n) + "1" + ")" * (4 * n) + " ))",  # "((" to its ")"
        "open-parens": "echo $((" + "((" * (4 * n),
        "subscripts": "echo " + "${a[" * (2 * n) + "1" + "]}" * (2 * n),        # _PLANTED: "[" to "]"
        "open-brackets": "echo " + "${a[" * (2 * n),
        # (an attack review's next ones: openers a line never closes, one a line, which the
        # searches of `$[…]`, `${a[…]}` and `[…]=` read past each newline to the end)
        "old-arithmetic-lines": '$""[\n' * (2 * n),
        "subscript-lines": "${a[\n" * (2 * n),
        "assigned-lines": "a[\n" * (3 * n) + "]=1",
        "arithmetic-test-lines": "-eq\n" * (2 * n),
        # the next spellings: the words split by quotes (the scans read the line after quote
        # removal), and a declarer behind each command start the scans accept
        "quoted-readers": "read " + "r''ea\"\"d x " * n,
        "declarers-in-groups": "{ local " + "{ local x " * n,
    }


@pytest.fixture
def scan_work(monkeypatch: pytest.MonkeyPatch) -> list[int]:
    """A one-item list: what the scans of policy/evaluated.py read (words bound, characters
    matched at command starts, characters of arithmetic found)."""
    from agent_code.policy import evaluated

    work = [0]
    bind, at_words, arithmetic = evaluated._bind, evaluated._at_words, evaluated._arithmetic_texts

    def counted_bind(command, words, bound):  # type: ignore[no-untyped-def]
        work[0] += len(words)
        return bind(command, words, bound)

    def counted_at_words(text, words, pattern):  # type: ignore[no-untyped-def]
        found = at_words(text, words, pattern)
        work[0] += sum(m.end() - m.start() for m in found)
        return found

    def counted_arithmetic(text):  # type: ignore[no-untyped-def]
        found = arithmetic(text)
        work[0] += sum(len(part) for part in found)
        return found

    monkeypatch.setattr(evaluated, "_bind", counted_bind)
    monkeypatch.setattr(evaluated, "_at_words", counted_at_words)
    monkeypatch.setattr(evaluated, "_arithmetic_texts", counted_arithmetic)
    return work


def scans_at(kind: str, work: list[int], sizes: tuple[int, int] = (8000, 32000)) -> dict[int, int]:
    from agent_code.policy.evaluated import read_values

    out = {}
    for size in sizes:
        work[0] = 0
        read_values(scan_floods(size)[kind])
        out[size] = work[0]
    return out


@pytest.mark.parametrize("kind", sorted(scan_floods(100)))
def test_the_evaluated_scans_cost_in_proportion_to_the_line(kind, scan_work):
    """Four times the line, at most a little over four times the scans' reading; and a long
    flood is one whose values cannot be followed (asked), found before it is scanned."""
    from agent_code.policy.evaluated import TOO_TANGLED, read_values

    work = scans_at(kind, scan_work)
    assert work[32000] <= 4.5 * work[8000] + 1000, f"{kind}: {work} (grows with the square of the line)"
    if kind not in ONE_PASS_FLOODS:
        assert read_values(scan_floods(64000)[kind]) == (TOO_TANGLED, True)


# the floods the one-pass scans read (the costing has nothing to count): read as any line
ONE_PASS_FLOODS = ("old-arithmetic-lines", "assigned-lines", "arithmetic-test-lines")


@pytest.mark.parametrize("kind", ONE_PASS_FLOODS)
def test_floods_of_one_pass_scans_are_read_in_full(kind, monkeypatch):
    from agent_code.policy import evaluated

    line = scan_floods(64000)[kind]
    costed = evaluated.read_values(line)
    assert costed[0] != evaluated.TOO_TANGLED
    monkeypatch.setattr(evaluated, "COSTED_LENGTH", 10**9)
    assert evaluated.read_values(line) == costed


@pytest.mark.parametrize("kind", ["declare-sub", "readers", "nested-parens", "quoted-readers", "declarers-in-groups"])
def test_the_scan_count_sees_the_square_without_the_costing(kind, scan_work, monkeypatch):
    """The control: with the costing off, the same floods break the bound above."""
    from agent_code.policy import evaluated

    monkeypatch.setattr(evaluated, "COSTED_LENGTH", 10**9)
    work = scans_at(kind, scan_work, (2000, 8000))   # (the square shows at a quarter of the size, in a sixteenth of the time)
    assert work[2000] > 0 and work[8000] > 4.5 * work[2000] + 1000, work


def benign_long_lines() -> dict[str, str]:
    """Long lines of the shapes a model sends, none of them a flood: they keep every check."""
    import json
    import sys
    from pathlib import Path

    sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "bench"))
    from policy_parse import PIECES

    prose = ("Read the local config for each test, let the worker select a port, then export the "
             "report [draft] for review; wait for CI (it reads $HOME) before the next step. ") * 160
    code = "\n".join(f"for i in range({k}):\n    values[{k}] = [x[{k}] for x in rows if x]  # (({k}))"
                     for k in range(700))
    return {
        "script": "\n".join(PIECES * 40),
        "commit-message": f"git commit -q -m '{prose}'",
        "python-heredoc": f"python3 - <<'EOF'\n{code}\nEOF",
        "json": "curl -s -d '" + json.dumps({"rows": [[k, [k, [k]]] for k in range(3000)]}) + "' localhost:8080",
        "old-arithmetic-lines": "\n".join(f"echo $[{k} + 1] $[{k} * 2]" for k in range(1500)),
        # (an attack review's: brackets a line never closes, colour codes)
        "unclosed-brackets": 'echo "' + "ok[1 " * 1500 + '"',
        "colour-codes": 'printf "' + "\\033[1;32mok\\033[0m " * 300 + '\\n"; echo $(( $[1] + x[1] ))',
        "colour-heredoc": "cat > c.sh <<'EOF'\n" + "".join(f'echo -e "\\033[0;3{k % 8}m{k}\\033[0m"\n' for k in range(160))
                          + "EOF\nsed -i 's/\\$[0-9]*//' c.sh",
    }


@pytest.mark.parametrize("kind", sorted(benign_long_lines()))
def test_long_ordinary_lines_are_read_as_before(kind, monkeypatch):
    """Past COSTED_LENGTH an ordinary long line (a script, a long commit message, code in a
    here-document, JSON) is scanned as it was without the costing: the same values, read."""
    from agent_code.policy import evaluated

    line = benign_long_lines()[kind]
    assert len(line) > evaluated.COSTED_LENGTH
    costed = evaluated.read_values(line)
    assert costed[0] != evaluated.TOO_TANGLED
    monkeypatch.setattr(evaluated, "COSTED_LENGTH", 10**9)
    assert evaluated.read_values(line) == costed


@pytest.mark.parametrize("size", [20000, 60000])
def test_old_arithmetic_nested_past_the_readers_depth_is_not_parsed(size):
    """tree-sitter-bash does not know `$[…]` and recovers from an error at each level: nested,
    the square of the depth (8 s for 60 kB). Past MAX_NESTING the line is not parsed: it is as
    deep as the reader's limit, denied; `$[…]` side by side (any number) is read as before."""
    bash = default_tools().get("bash")
    policy = PermissionPolicy("bypassPermissions", rules=RuleSet.from_lists(allow=["bash(echo:*)"]))
    k = size // 3
    for line in ("echo " + "$[" * k + "1" + "]" * k, "echo " + "$[" * k, "echo " + "$[a[" * (k // 2)):
        with pytest.raises(RecursionError):
            shell_syntax.parse(line)
        explained = policy.explain(bash, {"command": line})
        assert explained.behavior == "deny" and "nested" in explained.reason, explained.reason
    depth = shell_syntax.MAX_NESTING
    assert shell_syntax.parse("echo " + "$[" * depth + "1" + "]" * depth).pipelines  # up to the limit: read
    side_by_side = "echo " + " ".join(f"$[{i}]" for i in range(size // 6))
    assert shell_syntax.parse(side_by_side).pipelines
    assert policy.explain(bash, {"command": side_by_side}).behavior != "deny"


@pytest.mark.parametrize("line", [
    "echo $[1] " + "[" * 160 + " x",                                      # one `$[`, many brackets
    'printf "' + "\\033[1;32mok\\033[0m " * 300 + '"; echo $[1]',
    benign_long_lines()["colour-heredoc"],
    "echo $[" + "[" * 20000,
])
def test_brackets_beside_old_arithmetic_are_read_as_before(line):
    """Only `$[` nested in `$[` counts toward the parse's limit: colour codes and other
    brackets beside one `$[` are parsed and judged as they were (asked, not denied)."""
    bash = default_tools().get("bash")
    assert shell_syntax._old_arithmetic_depth(line) <= 1
    assert shell_syntax.parse(line) is not None
    assert PermissionPolicy("default").explain(bash, {"command": line}).behavior == "ask"


def _regex_forms_corpus() -> list[str]:
    import random

    rng = random.Random(13)
    alphabet = ["[", "]", "$[", "$(", "$((", "`", "\n", "=", "+=", "a", " ", "'", '"', "\\", "(", ")", "x[1]", "]="]
    lines = ["".join(rng.choice(alphabet) for _ in range(rng.randint(0, 30))) for _ in range(4000)]
    return lines + [line for lines_ in (scan_floods(400), benign_long_lines()) for line in lines_.values()]


def test_the_one_pass_scans_find_what_their_searches_found():
    """_planted, _old_arithmetic and _subscripts_assigned read each character a bounded number
    of times; on random bracket soup and every flood and long line above they give what the
    regex searches they replace gave."""
    from agent_code.policy import evaluated

    for text in _regex_forms_corpus():
        assert evaluated._planted(text) is (evaluated._PLANTED.search(text) is not None), text
        assert evaluated._old_arithmetic(text) == evaluated._OLD_ARITHMETIC.findall(text), text
        assert evaluated._subscripts_assigned(text) == evaluated._SUBSCRIPT_ASSIGNED.findall(text), text


@pytest.mark.parametrize("spelling", [
    lambda k: 'echo "' + "$[" * k + '1"',                 # in double quotes (bash expands it there)
    lambda k: "echo $(( " + "$[" * k + "1 ))",            # inside the new arithmetic
    lambda k: "echo " + "$[$(( " * k,                     # alternating with it
    lambda k: "bash -c 'echo " + "$[" * k + "'",          # the script of a shell
    lambda k: "cat <<EOF | bash\n" + "$[" * k + "\nEOF",   # a here-document fed to one
])
def test_old_arithmetic_nested_in_other_spellings_is_denied_unparsed(spelling):
    """The next spellings of nested `$[`: counted as written, so quotes, `$((`, a shell's
    script or a here-document around them do not hide the depth from the guard."""
    bash = default_tools().get("bash")
    line = spelling(4 * shell_syntax.MAX_NESTING)
    assert shell_syntax._old_arithmetic_depth(line) > shell_syntax.MAX_NESTING
    with pytest.raises(RecursionError):
        shell_syntax.parse(line)
    explained = PermissionPolicy("bypassPermissions", rules=RuleSet.from_lists(allow=["bash(echo:*)", "bash(cat:*)",
                                                                                       "bash(bash:*)"])).explain(
        bash, {"command": line})
    assert explained.behavior == "deny", explained.reason


# Judged in a thread with a small stack (a worker thread's, or a host's that sets one): every
# nesting kind 5000 levels deep with `rm -rf /` at the bottom. A crash (a C stack overflowing
# in the parser or a regex) kills the child: rc < 0.
_DEEP_CHILD = r"""
import json, sys, threading
sys.path.insert(0, sys.argv[1])
from test_policy_nesting import nested
from agent_code.policy.permissions import PermissionPolicy
from agent_code.policy.rules import RuleSet
from agent_code.tools import default_tools

bash = default_tools().get("bash")
rules = RuleSet.from_lists(allow=["bash(echo:*)", "bash(cat:*)"])
out = {"allowed": [], "judged": 0, "plain": 0}

# (self-protection, which bypassPermissions skips, has recursions of its own; the kinds left
# out at depth 5000 cost time that grows with the square of the depth, in the text scans of
# the evaluated values: seconds there, not the point here)
SLOW = ("declare-sub", "old-arith", "subscript", "arith-parens", "for")

def judge():
    for mode, depth in (("bypassPermissions", 150), ("bypassPermissions", 151), ("bypassPermissions", 5000),
                        ("default", 5000)):
        policy = PermissionPolicy(mode, rules=rules, ask=lambda tool, arguments: True)
        for kind, line in nested(depth).items():
            if depth > 1000 and kind in SLOW:
                continue
            if mode == "default":  # the line as it is: the deny list would stop the one below first
                policy.explain(bash, {"command": line})
                out["plain"] += 1
            hidden = line.replace("x", "$(rm -rf /)", 1) if "x" in line else line.replace("true", "rm -rf /", 1)
            if hidden == line:
                continue  # no command at the bottom (a number, a last `cat`)
            out["judged"] += 1
            if policy.explain(bash, {"command": hidden}).behavior == "allow":
                out["allowed"].append((mode, depth, kind))

threading.stack_size(int(sys.argv[2]) * 1024)
thread = threading.Thread(target=judge)
thread.start()
thread.join()
print(json.dumps(out))
"""


def test_deep_lines_are_judged_on_a_small_thread_stack():
    tests = Path(__file__).resolve().parent
    done = subprocess.run([sys.executable, "-c", _DEEP_CHILD, str(tests), "512"], capture_output=True,
                          text=True, cwd=tests.parent, timeout=300)
    assert done.returncode == 0, f"the check crashed (rc {done.returncode}): {done.stderr[-2000:]}"
    out = json.loads(done.stdout)
    assert out["judged"] >= 4 * 20 and out["plain"] >= 25
    assert out["allowed"] == []
