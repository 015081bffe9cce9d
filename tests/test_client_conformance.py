"""One conversation of a real client is one sample: the conformance suite (issue 20).

The real Claude Code CLI does a scripted multi-step fix through the gateway with every tool kind
it has — read, edit, write, a shell command with and without a ``cd <project> &&`` prefix, a
search through the shell, a todo, a sub-agent — while it also asks for a session title beside
the conversation. Claude Code echoes some tool calls back rewritten (``echo.py``'s table), so
without the tolerated rewrites the work turns fell apart into roots, ``retry`` and ``sub-agent``
samples (``retry`` chains forking off the last turn that still matched). Under the token policy: exactly one ``main`` sample holding every work turn, the title
request ``side``, the sub-agent ``sub-agent``, token-exact, zero drift, each rewrite noted.
Codex and Qwen Code: tests/test_client_conformance_codex_qwen.py.
"""

from __future__ import annotations

import json

from gateway_fixtures import check_token_exact, qwen25_renderer, scripted_gateway, typo_project
from test_claude_code import call, claude_binary, run_claude

from agent_code.trajectory.verify import verify_samples

TITLE = "sentence-case title"       # in Claude Code's title request's system prompt


def run_headline_fix(tmp_path, policy: str = "tokens"):
    claude = claude_binary()
    work, target = typo_project(tmp_path)
    script = [
        {"text": "Fix the hello typo", "when": TITLE},                               # side request
        call("Read", {"file_path": str(target)}),                                    # 1 read
        call("Bash", {"command": "grep -n Helo hello.py", "description": "Find the typo"}),   # 2 search
        call("TaskCreate", {"subject": "Fix typo", "description": "Helo -> Hello in hello.py"}),  # 3 todo
        call("Edit", {"file_path": str(target), "old_string": "Helo", "new_string": "Hello"}),  # 4 edit
        call("Write", {"file_path": str(work / "NOTES.md"), "content": "Fixed the greeting.\n"}),  # 5 write
        call("Bash", {"command": f"cd {work} && python -c 'import hello; print(hello.greet(\"x\"))'",
                      "description": "Check the greeting"}),                                # 6 shell, cd prefix
        call("Agent", {"description": "Review the fix", "prompt": "Read hello.py and say if it is right.",
                       "subagent_type": "general-purpose"}),                                # 7 sub-agent
        call("Read", {"file_path": str(target)}),                                    # sub-agent turn 1
        {"text": "It reads Hello now: right."},                                      # sub-agent answer
        {"text": "Fixed the typo in hello.py and noted it in NOTES.md."},            # 8 final answer
    ]
    with scripted_gateway(tmp_path, script, qwen25_renderer()) as (url, gateway):
        gateway.history_policy = policy
        proc = run_claude(claude, "Fix the typo in hello.py", work, url, "cc-conf", "served-model",
                          essential_only=False)
        turns = list(gateway.store.get("cc-conf").turns)
        samples = gateway.finish_session("cc-conf", reward=1.0)
    return proc, work, target, turns, samples


def test_claude_code_conversation_is_one_sample(tmp_path):
    proc, work, target, turns, samples = run_headline_fix(tmp_path)
    assert proc.returncode == 0, proc.stderr[-2000:]
    assert "Hello" in target.read_text() and (work / "NOTES.md").exists()
    assert json.loads(proc.stdout.splitlines()[-1])["result"].startswith("Fixed the typo")

    by_branch: dict[str, list] = {}
    for s in samples:
        by_branch.setdefault(s.branch, []).append(s)
    assert sorted(by_branch) == ["main", "side", "sub-agent"], [(s.branch, s.metadata["turn_indices"]) for s in samples]
    assert [len(v) for k, v in sorted(by_branch.items())] == [1, 1, 1]
    (main,), (side,), (sub,) = by_branch["main"], by_branch["side"], by_branch["sub-agent"]
    tools_of = lambda i: [c["function"]["name"] for c in turns[i].reply.get("tool_calls") or []]  # noqa: E731
    assert [tools_of(i) for i in main.metadata["turn_indices"]] == [
        ["Read"], ["Bash"], ["TaskCreate"], ["Edit"], ["Write"], ["Bash"], ["Agent"], []]
    assert [tools_of(i) for i in sub.metadata["turn_indices"]] == [["Read"], []]
    assert len(side.metadata["turn_indices"]) == 1 and not turns[side.metadata["turn_indices"][0]].tools
    # every turn is in exactly one sample; no unexplained roots
    assert sorted(i for s in samples for i in s.metadata["turn_indices"]) == list(range(len(turns)))
    roots = [t.index for t in turns if t.parent is None]
    assert len(roots) == 3
    # token-exact, no drift
    assert all(s.metadata["drift"] == [] for s in samples)
    assert all(not t.drift for t in turns)
    check_token_exact(samples, turns)
    assert verify_samples(samples, {"cc-conf": turns}) == []
    # the rewrites Claude Code made were tolerated and noted: Edit's default, the cd prefix
    notes = [n for t in turns for n in t.notes]
    assert {(n["tool"], r) for n in notes for r in n["rewrites"]} == {
        ("Edit", "Claude Code: fills in arguments whose schema has a default"),
        ("Bash", "Claude Code: drops a leading `cd <cwd> &&` from the command")}, notes
    assert main.metadata["client_rewrites"] == notes       # and the sample carries them
    edit = next(n for n in notes if n["tool"] == "Edit")
    assert "replace_all" not in edit["generated"] and edit["echoed"]["replace_all"] is False
    # the prompts reuse what the model sampled, not the client's rewrite
    bash_turn = main.metadata["turn_indices"][5]
    assert f"cd {work} &&" in json.dumps(turns[bash_turn].reply)
    assert all(t.prefix_reused > 0 for t in turns if t.parent is not None)


def test_without_the_tolerated_rewrites_the_conversation_falls_apart(tmp_path, monkeypatch):
    """The same run with the rewrite table emptied: the work turns no longer chain (what
    users saw before) — so the one-sample result above is the table's doing."""
    from agent_code.trajectory import echo

    monkeypatch.setattr(echo, "REWRITES", ())
    monkeypatch.setattr(echo.echo_args, "__defaults__", ((),))
    proc, _, _, turns, samples = run_headline_fix(tmp_path)
    assert proc.returncode == 0, proc.stderr[-2000:]
    main = [s for s in samples if s.branch == "main"]
    assert len(main) == 1 and len(main[0].metadata["turn_indices"]) < 8, [
        (s.branch, s.metadata["turn_indices"]) for s in samples]
    # each rewritten echo forks the chain off the last turn that still matches: "retry" samples
    assert len(samples) > 3 and "retry" in {s.branch for s in samples}
    assert all(not t.notes for t in turns)


def test_under_the_template_policy_the_rewrites_are_drift_with_their_cause(tmp_path):
    """Re-rendering the echoed history cannot reproduce what the model sampled where Claude Code
    rewrote a call: each such turn is realigned (its tokens masked), and the cause names the rewrite."""
    proc, _, _, turns, samples = run_headline_fix(tmp_path, policy="template")
    assert proc.returncode == 0, proc.stderr[-2000:]
    causes = [d["cause"] for t in turns for d in t.drift if d["kind"] == "realigned"]
    assert any("fills in arguments whose schema has a default" in c for c in causes), causes
    assert any("drops a leading `cd <cwd> &&`" in c for c in causes), causes
