"""One conversation of a real client is one sample: the conformance suite for Codex and Qwen Code
(issue 20; Claude Code's is tests/test_client_conformance.py).

Each real CLI does a scripted multi-step fix through a real gateway with every tool kind it has,
and for every request the assistant messages it echoes back are compared with the replies the
gateway holds for that request's chain (``turn.reply`` of its ancestors).

**Codex 0.171** (``codex exec``, the harness's config.toml, no model catalog) offers
``exec_command``, ``write_stdin``, ``request_user_input``, ``view_image``, the goal tools and the
``multi_agent_v1`` sub-agent functions — no todo/plan tool (``update_plan`` is not offered) and no
search tool. The fix: a sub-agent (``spawn_agent``; the child reads hello.py and answers, and its
completion comes back to the parent as a ``<subagent_notification>`` user message), read
(``cat``), search (``grep``), edit and new file (``apply_patch`` heredocs, which Codex applies
itself), a shell command with a ``cd <workdir> &&`` prefix and one with ``workdir`` instead.
With a model catalog Codex offers ``apply_patch`` as a freeform custom tool: the second test.

**Qwen Code 0.24** (headless, the harness's settings) offers ``read_file``, ``grep_search``,
``glob``, ``edit``, ``write_file``, ``run_shell_command``, ``agent``, ``tool_search``/``tool_call``
(deferred tools) and others — no todo tool (``tool_search`` for "todo" finds none). The fix
uses each of those, the sub-agent in the foreground (``run_in_background: false``; the default,
background, works the same but its notification lands wherever it falls).

Observed (the tests pin it): neither client rewrites a tool call it echoes — every echoed
assistant message, parsed, equals the held reply, so no row of ``echo.REWRITES`` applies (no
notes), a ``cd <workdir> &&`` prefix comes back as generated, and Qwen Code leaves a schema
default (``tool_search``'s ``max_results``) out as the model did. On the wire (:class:`Wire`)
Codex echoes every argument string byte for byte; Qwen Code re-serialises each as compact JSON
(keys in the model's order) and sends the empty content back as ``null`` — differences the
gateway's parsing already removes. Neither sends a side request headless (Qwen Code's title
request is for interactive sessions with a fast model configured). So: one
``main`` sample holding every work turn, the sub-agent its own root and sample, token-exact,
zero drift. Codex's sub-agent has the parent's system prompt (only its first user message and
its tools differ): its other tool set is what labels it ``sub-agent``.
"""

from __future__ import annotations

import contextlib
import json
import os
import subprocess
from pathlib import Path
from typing import Any, Callable

import pytest

import gateway_fixtures
from gateway_fixtures import check_token_exact, qwen25_renderer, scripted_gateway, typo_project
from rollout_fixtures import call, say
from test_codex import codex_binary, run_codex
from test_qwen_code import qwen_binary

from agent_code.harness.base import Launch
from agent_code.harness.codex import model_catalog
from agent_code.harness.qwen_code import SETTINGS, QwenCodeHarness
from agent_code.trajectory.samples import build_samples
from agent_code.trajectory.verify import verify_samples

FIXED = 'def greet(name):\n    return "Hello, " + name\n'
UPDATE = """*** Begin Patch
*** Update File: hello.py
@@
-    return "Helo, " + name
+    return "Hello, " + name
*** End Patch"""
ADD = """*** Begin Patch
*** Add File: NOTES.md
+Fixed the greeting.
*** End Patch"""
heredoc = lambda body: f"apply_patch <<'EOF'\n{body}\nEOF"  # noqa: E731
REVIEW = "Review hello.py: is the greeting right?"
FINAL = "Fixed the typo in hello.py and noted it in NOTES.md."


# ---------------------------------------------------------------- what the tests check

def chain(turns: list, index: int) -> list:
    """The turn and its ancestors, root first."""
    out = [turns[index]]
    while out[0].parent is not None:
        out.insert(0, turns[out[0].parent])
    return out


def echo_differences(turns: list) -> list[dict[str, Any]]:
    """Every place a request's history differs from the replies held for its chain: the
    k-th assistant message a client sent must be its chain's k-th reply, as generated."""
    found = []
    for turn in turns:
        held = [t.reply for t in chain(turns, turn.index)[:-1]]
        echoed = [m for m in turn.messages if m.get("role") == "assistant"]
        if len(held) != len(echoed):
            found.append({"turn": turn.index, "held": len(held), "echoed": len(echoed)})
        found += [{"turn": turn.index, "position": k, "held": h, "echoed": e}
                  for k, (h, e) in enumerate(zip(held, echoed)) if h != e]
    return found


def tools_of(turn) -> list[str]:
    return [c["function"]["name"] for c in turn.reply.get("tool_calls") or []]


def check_one_conversation(session: str, turns: list, samples: list, sub_root: int | None) -> tuple[Any, Any]:
    """One ``main`` sample holding every work turn, the sub-agent (rooted at ``sub_root``) one
    sample of its own, no side requests, no other roots, no drift, token-exact, nothing echoed
    rewritten. Returns (main sample, sub-agent sample or None)."""
    sub_turns = [t.index for t in turns if sub_root is not None and chain(turns, t.index)[0].index == sub_root]
    work_turns = [t.index for t in turns if t.index not in sub_turns]
    roots = [t.index for t in turns if t.parent is None]
    assert roots == sorted([0] + ([sub_root] if sub_root is not None else [])), [(t.index, t.parent) for t in turns]
    assert all(t.tools for t in turns)          # no tool-less request: no side request

    layout = [(s.branch, s.metadata["turn_indices"]) for s in samples]
    assert [(s.branch, s.metadata["turn_indices"]) for s in build_samples(turns, reward=1.0)] == layout
    main = [s for s in samples if s.branch == "main"]
    assert len(main) == 1 and main[0].metadata["turn_indices"] == work_turns, layout
    others = [s for s in samples if s.branch != "main"]
    if sub_root is None:
        assert others == [], layout
    else:
        assert len(others) == 1 and others[0].metadata["turn_indices"] == sub_turns, layout
        assert others[0].branch not in ("main", "side", "retry", "template-drift"), layout
    assert "side" not in {s.branch for s in samples}

    assert all(s.metadata["drift"] == [] for s in samples)
    assert all(not t.drift for t in turns)
    assert echo_differences(turns) == []        # every echo is the held reply, as generated
    assert [n for t in turns for n in t.notes] == []   # so no tolerated rewrite was needed
    assert all(t.prefix_reused > 0 for t in turns if t.parent is not None)
    check_token_exact(samples, turns)
    assert verify_samples(samples, {session: turns}) == []
    return main[0], (others[0] if others else None)


class Wire:
    """The raw request and response bodies of every HTTP exchange with the gateway (to see what
    a client echoes byte for byte, before the gateway parses it)."""

    def __init__(self) -> None:
        self.exchanges: list[tuple[dict[str, Any], str]] = []   # (request JSON, response text)

    def wrap(self, app):
        async def logged(scope, receive, send):
            if scope["type"] != "http":
                return await app(scope, receive, send)
            request, response = bytearray(), bytearray()

            async def rcv():
                message = await receive()
                request.extend(message.get("body", b""))
                return message

            async def snd(message):
                if message["type"] == "http.response.body":
                    response.extend(message.get("body", b""))
                await send(message)

            await app(scope, rcv, snd)
            if request:
                self.exchanges.append((json.loads(request), response.decode()))
        return logged

    @contextlib.contextmanager
    def installed(self):
        create = gateway_fixtures.create_app
        with pytest.MonkeyPatch.context() as mp:
            mp.setattr(gateway_fixtures, "create_app", lambda gateway, **kw: self.wrap(create(gateway, **kw)))
            yield self

    def generated(self, of: Callable[[dict[str, Any]], bool]) -> list[str]:
        """The argument strings of the tool calls the gateway sent back, in order, for the
        requests ``of`` selects (Chat Completions or Responses streams)."""
        out = []
        for request, response in self.exchanges:
            if not of(request):
                continue
            calls: dict[int, str] = {}
            for line in response.splitlines():
                event = json.loads(line[5:]) if line.startswith("data: {") else {}
                for choice in event.get("choices") or []:
                    for c in (choice.get("delta") or {}).get("tool_calls") or []:
                        calls[c.get("index", 0)] = calls.get(c.get("index", 0), "") + c["function"].get("arguments", "")
                item = event.get("item") if event.get("type") == "response.output_item.done" else None
                if item and item["type"] in ("function_call", "custom_tool_call"):
                    calls[len(calls)] = item.get("arguments", item.get("input"))
            out += [calls[k] for k in sorted(calls)]
        return out

    def last(self, of: Callable[[dict[str, Any]], bool]) -> dict[str, Any]:
        return [r for r, _ in self.exchanges if of(r)][-1]

    def echoed(self, of: Callable[[dict[str, Any]], bool]) -> list[str]:
        """The argument strings of the tool calls the client echoed in the last request ``of``
        selects."""
        last = self.last(of)
        if "messages" in last:
            return [c["function"]["arguments"] for m in last["messages"] if m["role"] == "assistant"
                    for c in m.get("tool_calls") or []]
        return [i.get("arguments", i.get("input")) for i in last["input"] if i.get("type") in ("function_call", "custom_tool_call")]


def codex_parent(request: dict[str, Any]) -> bool:
    """A Codex request of the conversation itself (its sub-agents get no multi-agent tools)."""
    return any(t.get("name") == "multi_agent_v1" for t in request.get("tools") or [])


def qwen_parent(request: dict[str, Any]) -> bool:
    return request["messages"][0]["content"].startswith("You are Qwen Code")


# ---------------------------------------------------------------- Codex

def codex_fix(tmp_path: Path, session: str = "codex-conf", wire: Wire | None = None):
    codex = codex_binary()
    work, target = typo_project(tmp_path)
    child = f"<|im_start|>user\n{REVIEW}"        # only the sub-agent's own prompt has it as a user turn
    script = [
        call("multi_agent_v1__spawn_agent", {"message": REVIEW}),                      # sub-agent
        call("exec_command", {"cmd": "cat hello.py"}) | {"when": child},               # sub-agent: read
        say('It returns "Hello, " + name: right.', when=child),                        # sub-agent: answer
        call("exec_command", {"cmd": "cat hello.py"}) | {"delay": 3},                  # read (the child ends meanwhile)
        call("exec_command", {"cmd": "grep -rn Helo ."}),                              # search
        call("exec_command", {"cmd": heredoc(UPDATE)}),                                # edit
        call("exec_command", {"cmd": heredoc(ADD)}),                                   # write a new file
        call("exec_command", {"cmd": f"cd {work} && python3 -c 'import hello; print(hello.greet(\"x\"))'"}),
        call("exec_command", {"cmd": "python3 -c 'import hello; print(hello.greet(\"y\"))'",
                              "workdir": str(work)}),                                  # shell, no cd
        say(FINAL),
    ]
    with (wire or Wire()).installed(), scripted_gateway(tmp_path, script, qwen25_renderer()) as (url, gateway):
        proc = run_codex(codex, "Fix the typo in hello.py", work, url, session, "served-model")
        turns = list(gateway.store.get(session).turns)
        samples = gateway.finish_session(session, reward=1.0)
        left = gateway.engine.remaining
    return proc, work, target, turns, samples, left


@pytest.fixture(scope="module")
def codex_run(tmp_path_factory):
    wire = Wire()
    return (*codex_fix(tmp_path_factory.mktemp("codex-conf"), wire=wire), wire)


def codex_sub_root(turns: list) -> int:
    (sub_root,) = [t.index for t in turns if t.parent is None and t.index != 0]
    return sub_root


def test_codex_conversation_is_one_sample(codex_run):
    proc, work, target, turns, samples, left, wire = codex_run
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-2000:]
    assert left == 0
    assert target.read_text() == FIXED and (work / "NOTES.md").read_text() == "Fixed the greeting.\n"
    items = [json.loads(line)["item"] for line in proc.stdout.splitlines() if '"item.completed"' in line]
    assert items[-1] == {**items[-1], "type": "agent_message", "text": FINAL}

    sub_root = codex_sub_root(turns)
    main, sub = check_one_conversation("codex-conf", turns, samples, sub_root)
    assert [tools_of(turns[i]) for i in main.metadata["turn_indices"]] == [
        ["multi_agent_v1__spawn_agent"], *[["exec_command"]] * 6, []]
    assert [tools_of(turns[i]) for i in sub.metadata["turn_indices"]] == [["exec_command"], []]
    # the sub-agent: the parent's system prompt, its own first user message, no multi-agent tools
    child = turns[sub_root]
    assert child.messages[-1] == {"role": "user", "content": REVIEW}
    assert child.messages[0] == turns[0].messages[0]
    assert not any(name.startswith("multi_agent_v1__") for name in (t["function"]["name"] for t in child.tools))
    # its completion reached the parent inside the main conversation
    assert any("<subagent_notification>" in json.dumps(turns[i].messages) for i in main.metadata["turn_indices"])
    # the cd prefix came back as generated (Claude Code drops it; Codex does not)
    last = turns[main.metadata["turn_indices"][-1]]
    assert any(f"cd {work} && python3" in json.dumps(m) for m in last.messages if m["role"] == "assistant")
    # on the wire too: Codex echoes each call's arguments byte for byte as the gateway sent them
    generated, echoed = wire.generated(codex_parent), wire.echoed(codex_parent)
    assert len(echoed) == 7 and generated == echoed


def test_codex_sub_agent_is_labelled_sub_agent(codex_run):
    _, _, _, turns, samples, _, _ = codex_run
    sub_root = codex_sub_root(turns)
    (sub,) = [s for s in samples if s.metadata["turn_indices"][0] == sub_root]
    assert sub.branch == "sub-agent"


def test_codex_freeform_apply_patch_conversation_is_one_sample(tmp_path):
    """With a model catalog entry, edits and new files go through Codex's freeform ``apply_patch``
    custom tool: its echoed ``custom_tool_call`` items are the held calls too."""
    codex = codex_binary()
    work, target = typo_project(tmp_path)
    catalog = model_catalog("served-model", "You are a coding agent. Edit files with apply_patch.")
    script = [
        call("exec_command", {"cmd": "cat hello.py"}),
        call("apply_patch", {"input": UPDATE + "\n"}),
        call("apply_patch", {"input": ADD + "\n"}),
        call("exec_command", {"cmd": f"cd {work} && python3 -c 'import hello; print(hello.greet(\"x\"))'"}),
        say(FINAL),
    ]
    with Wire().installed() as wire, scripted_gateway(tmp_path, script, qwen25_renderer()) as (url, gateway):
        proc = run_codex(codex, "Fix the typo in hello.py", work, url, "codex-free", "served-model", catalog)
        turns = list(gateway.store.get("codex-free").turns)
        samples = gateway.finish_session("codex-free", reward=1.0)
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-2000:]
    assert target.read_text() == FIXED and (work / "NOTES.md").exists()
    main, _ = check_one_conversation("codex-free", turns, samples, None)
    assert [tools_of(turns[i]) for i in main.metadata["turn_indices"]] == [
        ["exec_command"], ["apply_patch"], ["apply_patch"], ["exec_command"], []]
    # the patches come back as custom_tool_call inputs, byte for byte
    everything = lambda request: True  # noqa: E731
    echoed = wire.echoed(everything)
    assert wire.generated(everything) == echoed and echoed[1:3] == [UPDATE + "\n", ADD + "\n"]


# ---------------------------------------------------------------- Qwen Code

def run_qwen_conf(qwen: str, prompt: str, work: Path, url: str, session: str, model: str):
    """Qwen Code headless with the harness's settings and environment (test_qwen_code.run_qwen,
    with room for more turns)."""
    home = work.parent / "home"
    (home / ".qwen").mkdir(parents=True)
    (home / ".qwen/settings.json").write_text(json.dumps(SETTINGS))
    launch = Launch(base_url=url, session_id=session, model=model, prompt=prompt, workdir=str(work), home=str(home))
    env = {"PATH": os.environ["PATH"], "HOME": str(home), **QwenCodeHarness().env(launch)}
    return subprocess.run([qwen, "--yolo", "--output-format", "stream-json", "--max-session-turns", "30", "-m", model],
                          input=prompt, cwd=work, env=env, capture_output=True, text=True, timeout=180)


def test_qwen_code_conversation_is_one_sample(tmp_path):
    qwen = qwen_binary()
    work, target = typo_project(tmp_path)
    child = "general-purpose subagent working for a parent agent"   # the sub-agent's system prompt
    script = [
        call("read_file", {"file_path": str(target)}),                                          # read
        call("grep_search", {"pattern": "Helo", "path": str(work)}),                            # search
        call("glob", {"pattern": "*.py"}),                                                      # search (files)
        call("tool_search", {"query": "todo"}),                                                 # no todo tool
        call("edit", {"file_path": str(target), "old_string": "Helo", "new_string": "Hello"}),  # edit
        call("write_file", {"file_path": str(work / "NOTES.md"), "content": "Fixed the greeting.\n"}),  # write
        call("run_shell_command", {"command": f"cd {work} && python3 -c 'import hello; print(hello.greet(\"x\"))'",
                                   "description": "Check the greeting"}),                       # shell, cd prefix
        call("run_shell_command", {"command": "python3 -c 'import hello; print(hello.greet(\"y\"))'",
                                   "description": "Check it again"}),                           # shell, no cd
        call("agent", {"description": "Review the fix", "prompt": REVIEW, "subagent_type": "general-purpose",
                       "run_in_background": False}),                                            # sub-agent
        call("read_file", {"file_path": str(target)}) | {"when": child},                       # sub-agent: read
        say('It returns "Hello, " + name: right.', when=child),                                 # sub-agent: answer
        say(FINAL),
    ]
    with Wire().installed() as wire, scripted_gateway(tmp_path, script, qwen25_renderer()) as (url, gateway):
        proc = run_qwen_conf(qwen, "Fix the typo in hello.py", work, url, "qwen-conf", "served-model")
        sessions = set(gateway.store.sessions)
        turns = list(gateway.store.get("qwen-conf").turns)
        samples = gateway.finish_session("qwen-conf", reward=1.0)
        left = gateway.engine.remaining

    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-2000:]
    assert left == 0 and sessions == {"qwen-conf"}
    events = [json.loads(line) for line in proc.stdout.splitlines() if line.startswith("{")]
    assert events[-1]["type"] == "result" and events[-1]["result"] == FINAL
    assert target.read_text() == FIXED and (work / "NOTES.md").read_text() == "Fixed the greeting.\n"

    (sub_root,) = [t.index for t in turns if t.parent is None and t.index != 0]
    main, sub = check_one_conversation("qwen-conf", turns, samples, sub_root)
    assert sub.branch == "sub-agent"
    assert [tools_of(turns[i]) for i in main.metadata["turn_indices"]] == [
        ["read_file"], ["grep_search"], ["glob"], ["tool_search"], ["edit"], ["write_file"],
        ["run_shell_command"], ["run_shell_command"], ["agent"], []]
    assert [tools_of(turns[i]) for i in sub.metadata["turn_indices"]] == [["read_file"], []]
    assert child in turns[sub_root].messages[0]["content"]
    # Qwen Code has no todo tool, not even a deferred one
    todo_turn = main.metadata["turn_indices"][4]
    assert "No tools found matching 'todo'" in json.dumps(turns[todo_turn].messages[-1])
    # echoed as generated: tool_search's schema default (max_results: 5) stays out, the cd prefix stays in
    last = turns[main.metadata["turn_indices"][-1]]
    echoed = [c["function"] for m in last.messages if m["role"] == "assistant" for c in m.get("tool_calls") or []]
    assert {"query": "todo"} in [f["arguments"] for f in echoed if f["name"] == "tool_search"]
    assert any(f["name"] == "run_shell_command" and f["arguments"]["command"].startswith(f"cd {work} && ")
               for f in echoed)
    # the sub-agent's answer came back to the parent as the agent tool's result
    assert "right." in json.dumps(turns[main.metadata["turn_indices"][-1]].messages[-1])
    # on the wire, Qwen Code re-serialises every call's arguments (compact JSON, keys in the
    # model's order) and echoes the empty content as null: what the gateway parses is unchanged
    generated, echoed = wire.generated(qwen_parent), wire.echoed(qwen_parent)
    assert len(echoed) == 9 and len(generated) == 9
    for g, e in zip(generated, echoed):
        assert e != g and e == json.dumps(json.loads(g), ensure_ascii=False, separators=(",", ":"))
    assert {m["content"] for m in wire.last(qwen_parent)["messages"] if m["role"] == "assistant"} == {None}
