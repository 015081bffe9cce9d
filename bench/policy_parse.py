"""Permission check of a long command line: the policy's cost per bash call.

It builds a realistic ~2 kB command line (pipelines, ``&&`` chains, ``$(…)`` and backtick
substitutions, arithmetic, quoting of every kind, a loop, a function, a here-document)
and times, in the same run, on the same line:

* bypass    — the full policy check of the bash tool (``PermissionPolicy.check``) in
              bypassPermissions with an allow rule: it parses with tree-sitter, walks every
              command, runs the built-in deny list and the rules (self-protection is off)
* default   — the same check in the default mode, with an asker that approves: the deny
              list, the rules and self-protection (every word judged as a path)
* … cold    — each of them with the policy's memoised per-word and per-command results
              (``commands.clear_caches``) forgotten before every check: a line whose words
              the session has never seen. Nothing is cached per line, so the warm rows are
              no replay of a cached decision: they only reuse what a session's earlier
              commands would have left (a normalized ``rm -rf build``, a glob's regex)
* evaluate  — ``RuleSet.evaluate`` alone (the deny list and the rules, parse included)
* parse     — a bare tree-sitter parse of the line (the floor for any tree-sitter design)
* shlex     — ``shlex.split`` of the line (a baseline: the cheapest possible tokenizing,
              which sees none of the structure)

The policy is pure Python (its one form). The bench then times the default-mode cold check
of three typical long lines (a here-document, ``python -c``, a commit with a long message),
and prints each in ms per check (median wall clock, and the CPU time of the least disturbed
batch, which is what the code costs on a shared machine), the ratios of each
check against the two baselines (timed in the same run, batch by batch beside the checks),
and whether each check meets the target of under 3 ms (CPU): the check precedes a model
call of seconds. It exits 0 when both modes meet it, cold.

Run: .venv/bin/python bench/policy_parse.py [--iterations 2000] [--size 2048]
"""

from __future__ import annotations

import argparse
import os
import shlex
import statistics
import sys
import time
from typing import Callable
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from agent_code.policy.commands import analyze, clear_caches  # noqa: E402
from agent_code.policy.permissions import PermissionPolicy  # noqa: E402
from agent_code.policy.rules import RuleSet  # noqa: E402
from agent_code.policy.shell_syntax import parser  # noqa: E402
from agent_code.tools import default_tools  # noqa: E402

TARGET_MS = 3.0  # per check, CPU time, on the 2 kB bench line

# (in an order where every line break is one tree-sitter-bash reads as bash does: after a
# pipeline of three stages, a newline before a list is read as a blank by the grammar, a line
# the policy then asks about; shell_syntax._joined; main() refuses to time such a line)
PIECES = [
    "cd \"$(git rev-parse --show-toplevel)\" && git status --short | grep -v '^??' | wc -l",
    "for f in $(git diff --name-only HEAD~1 -- 'src/*.py'); do python -m py_compile \"$f\" || echo \"bad: $f\"; done",
    "find . -name '*.pyc' -not -path './.venv/*' -print0 | xargs -0 rm -f",
    "export PYTHONPATH=\"$PWD/src:${PYTHONPATH:-}\" BUILD_ID=`date +%s`",
    "n=$(( $(ls tests | wc -l) + 1 )); echo \"tests: $n\" >> build.log 2>&1",
    "grep -rn --include='*.py' -e 'TODO' -e 'FIXME' src/ | awk -F: '{print $1}' | sort | uniq -c | sort -rn | head -20",
    "git log --since='2 weeks ago' --pretty=format:'%h %an %s' | grep -i fix | head -n 15",
    "if [ -f requirements.txt ]; then pip install -q -r requirements.txt; else echo 'no requirements'; fi",
    "report() { printf '%s\\t%s\\n' \"$1\" \"$(wc -l < \"$1\")\"; }; report setup.py",
    "case \"$(uname -s)\" in Linux) echo linux;; Darwin) echo mac;; *) echo other;; esac",
    "diff <(sort a.txt) <(sort b.txt) > diff.txt || true",
    "tar czf dist/src-$(date +%Y%m%d).tgz --exclude='*.pyc' src/ && ls -la dist/",
    "python3 - <<'EOF'\nimport json, sys\nprint(json.dumps({'ok': True, 'argv': sys.argv}))\nEOF",
    "sed -i.bak -e 's/old_name/new_name/g' -e \"s/VERSION = .*/VERSION = '$(cat VERSION)'/\" src/app/*.py",
    "pytest -q -x tests/ -k 'not slow' --maxfail=3 2>&1 | tee pytest.log | tail -n 30",
    "echo $'line one\\nline two' | while read -r line; do echo \">> $line\"; done",
    "docker build -t app:${TAG:-dev} . && docker run --rm app:${TAG:-dev} python -c 'print(1)'",
    "[[ -n \"${CI:-}\" ]] && curl -s -o coverage.json https://ci.example.com/api/coverage || echo 'local run'",
    "rm -rf build/ dist/ *.egg-info && make -j\"$(nproc)\" all",
]


def typical_lines(size: int) -> dict[str, str]:
    """Long lines of the shapes agents send most: a file written through a here-document, a
    script passed to ``python -c``, a commit with a long message (each ~``size`` bytes)."""
    code = "\n".join(f"def f{i}(x):\n    return x * {i} + len(str(x))  # step {i}" for i in range(size // 48))
    words = " ".join(f"change{i}" for i in range(size // 9))
    return {
        "heredoc": f"cat > src/generated.py <<'EOF'\n{code[:size]}\nEOF",
        "python -c": f"python3 -c \"import sys\n{code[:size - 40]}\nprint(sys.argv)\"",
        "git commit": f"cd /work/repo && git add -A && git commit -q -m '{words[:size - 80]}' && git log -1 --stat",
    }


def command_line(size: int) -> str:
    parts: list[str] = []
    i = 0
    while len(" && ".join(parts)) < size:
        parts.append(PIECES[i % len(PIECES)])
        i += 1
    return "\n".join(parts)


def timed(fns: dict[str, Callable[[], object]], iterations: int, batches: int = 50) -> dict[str, tuple[float, float]]:
    """Seconds per call of each of ``fns`` over ``iterations`` calls in ``batches`` rounds:
    the median wall-clock time and the least CPU time of a batch. Each round runs one batch
    of every function in turn, so a noisy stretch of a shared machine (its neighbours vary
    the speed of the same code by a fifth from one minute to the next) falls on all of them
    alike, and the ratios between them hold; the CPU time of the least disturbed batch is
    what the code costs (the wall clock also counts other processes, and even CPU time grows
    when another process shares the core's caches)."""
    batch = max(1, iterations // batches)
    wall: dict[str, list[float]] = {name: [] for name in fns}
    cpu: dict[str, list[float]] = {name: [] for name in fns}
    for _ in range(batches):
        for name, fn in fns.items():
            start, start_cpu = time.perf_counter(), time.process_time()
            for _ in range(batch):
                fn()
            wall[name].append((time.perf_counter() - start) / batch)
            cpu[name].append((time.process_time() - start_cpu) / batch)
    return {name: (statistics.median(wall[name]), min(cpu[name])) for name in fns}


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--iterations", type=int, default=2000)
    ap.add_argument("--size", type=int, default=2048, help="approximate length of the command line in bytes")
    args = ap.parse_args()

    line = command_line(args.size)
    unread = analyze(line).errors
    if unread:  # the check would stop at its built-in ask: not the full path this bench times
        print(f"the bench line is one the parser cannot read as bash does: {unread}", file=sys.stderr)
        return 2
    bash = default_tools().get("bash")
    rules = RuleSet.from_lists(allow=["bash(git:*)", "bash(make:*)"])
    bypass = PermissionPolicy("bypassPermissions", rules=rules)
    default = PermissionPolicy("default", rules=rules, ask=lambda tool, arguments: True)
    arguments = {"command": line}
    decisions = {name: policy.check(bash, arguments) for name, policy in (("bypass", bypass), ("default", default))}
    explained = default.explain(bash, arguments)  # what the default mode decided before asking
    verdict = rules.evaluate(bash, arguments)
    source = line.encode()
    ts = parser()

    def cold(policy: PermissionPolicy):
        def check() -> None:
            clear_caches()
            policy.check(bash, arguments)
        return check

    rows = timed({
        "bypass": lambda: bypass.check(bash, arguments),
        "bypass cold": cold(bypass),
        "default": lambda: default.check(bash, arguments),
        "default cold": cold(default),
        "evaluate": lambda: rules.evaluate(bash, arguments),
        "parse": lambda: ts.parse(source),
        "shlex": lambda: shlex.split(line),
    }, args.iterations)

    print(f"command line: {len(source)} bytes, {line.count(chr(10)) + 1} lines; "
          f"bypassPermissions: {'allow' if decisions['bypass'].allowed else 'refuse'} "
          f"(verdict {verdict.behavior if verdict else 'none: the mode decides'}); "
          f"default: {explained.behavior} ({explained.stage}), then "
          f"{'allowed' if decisions['default'].allowed else 'refused'} by the asker")
    print(f"{'':13} {'wall ms':>9} {'cpu ms':>9}   (per check; wall: median, cpu: best batch)")
    for name, (wall, cpu) in rows.items():
        print(f"{name:13} {wall * 1000:9.3f} {cpu * 1000:9.3f}")
    parse, split = rows["parse"], rows["shlex"]
    print(f"{'':13} {'/ parse':>15} {'/ shlex':>15}   (cpu, wall)")
    for name in ("bypass", "bypass cold", "default", "default cold"):
        wall, cpu = rows[name]
        print(f"{name:13} {cpu / parse[1]:6.1f}x {wall / parse[0]:6.1f}x {cpu / split[1]:6.1f}x {wall / split[0]:6.1f}x")
    met = {}
    for name in ("bypass", "bypass cold", "default", "default cold"):
        met[name] = rows[name][1] * 1000 < TARGET_MS
        print(f"target: {name:13} policy check < {TARGET_MS:g} ms (cpu) on the {len(source)} B line: "
              f"{'met' if met[name] else 'NOT met'} ({rows[name][1] * 1000:.3f} ms cpu, "
              f"{rows[name][0] * 1000:.3f} ms wall; {rows[name][1] / parse[1]:.1f}x a bare parse, "
              f"{rows[name][1] / split[1]:.1f}x shlex.split, same run)")
    print(f"typical {args.size // 1024} kB lines (default mode, cold; the same checks):")
    typical = typical_lines(args.size)

    def check_typical(text: str) -> Callable[[], None]:
        typical_args = {"command": text}

        def check() -> None:
            clear_caches()
            default.check(bash, typical_args)
        return check
    typical_rows = timed({name: check_typical(text) for name, text in typical.items()}, args.iterations)
    for name, text in typical.items():
        wall, cpu = typical_rows[name]
        print(f"  {name:11} {len(text):5d} B, {text.count(chr(10)) + 1:3d} lines: {cpu * 1000:6.3f} ms cpu "
              f"({cpu / rows['parse'][1]:.1f}x the dense line's bare parse)")
    print(f"load average {', '.join(f'{x:.1f}' for x in os.getloadavg())} on {os.cpu_count()} cpus")
    return 0 if met["bypass cold"] and met["default cold"] else 1


if __name__ == "__main__":
    sys.exit(main())
