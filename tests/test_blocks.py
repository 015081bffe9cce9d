"""A small model's fix written as a code block (issue 16): which file a block is for, what is
written (the whole file, or the functions it replaces), and that the write goes through the
permission policy and the write_file tool's own checks like any call."""

from __future__ import annotations

import json
import sys

import pytest

from agent_code.agent import Agent
from agent_code.agent.autotest import auto_test, with_test_report
from agent_code.agent.blocks import block_edits, find_edits, fix_request
from agent_code.providers.scripted import ScriptedProvider
from agent_code.tools import ToolContext, default_tools

SOURCE = '''"""Temperatures."""

import os

FREEZING = 32.0


def to_c(f):
    return (f - FREEZING) * 9 / 5


@staticmethod
def helper(x):
    return x


class Station:
    name = "a"
'''

FIXED = SOURCE.replace("* 9 / 5", "* 5 / 9")


def test_a_whole_file_block_named_on_the_line_before_is_the_new_file():
    text = f"Here is the fix.\n\nthermo.py:\n```python\n{FIXED}```\n"
    [edit] = find_edits(text, {"thermo.py": SOURCE, "other.py": "x = 1\n"})
    assert (edit.path, edit.content, edit.how) == ("thermo.py", FIXED, "whole file")


@pytest.mark.parametrize("text", [
    f"```python thermo.py\n{FIXED}```",                   # in the fence line
    f"**thermo.py**\n```py\n{FIXED}```",                   # bold, one line before
    f"`src/thermo.py`:\n\n```\n{FIXED}```",                 # two lines before, a longer path
    f"```python\n{FIXED}```",                              # the one Python file read
])
def test_the_file_a_block_is_for(text):
    [edit] = find_edits(text, {"src/thermo.py": SOURCE, "README.md": "# r\n"})
    assert edit.path == "src/thermo.py" and edit.content == FIXED


def test_no_edit_without_a_file_read_this_session_or_with_two_candidates():
    block = f"```python\n{FIXED}```"
    assert find_edits(block, {}) == []
    assert find_edits(block, {"a.py": SOURCE, "b.py": SOURCE}) == []      # which one? not guessed
    assert find_edits(f"secret.py:\n{block}", {"thermo.py": SOURCE}) == []  # names a file not read
    assert find_edits("no block here, thermo.py is fine", {"thermo.py": SOURCE}) == []


def test_a_block_of_one_function_replaces_that_function_only():
    text = "The bug is in to_c:\n```python\ndef to_c(f):\n    return (f - FREEZING) * 5 / 9\n```"
    [edit] = find_edits(text, {"thermo.py": SOURCE})
    assert edit.content == FIXED and edit.how == "replaced to_c"


def test_a_replaced_function_keeps_its_decorators_and_new_imports_go_after_the_last():
    text = "```python\nimport math\nimport os\n\n@staticmethod\ndef helper(x):\n    return math.floor(x)\n```"
    [edit] = find_edits(text, {"thermo.py": SOURCE})
    assert edit.content == SOURCE.replace("import os\n", "import os\nimport math\n").replace(
        "    return x\n", "    return math.floor(x)\n")
    assert edit.content.count("@staticmethod") == 1 and edit.content.count("import os") == 1


@pytest.mark.parametrize("body", [
    "def to_c(f:\n    return 1\n",                     # not Python
    "print(to_c(212))\n",                             # a usage example
    "def test_to_c():\n    assert to_c(212) == 100\n",  # a new function: a test, not the file's
    "def to_c(f):\n    return f\nprint(to_c(1))\n",    # a function and more
    "x = 1\n",                                        # no function at all
])
def test_blocks_that_are_not_a_fix_of_the_file_are_left_as_text(body):
    assert find_edits(f"thermo.py:\n```python\n{body}```", {"thermo.py": SOURCE}) == []


def test_a_non_python_file_is_rewritten_only_when_the_block_names_it():
    assert find_edits("```\nnew text\n```", {"notes.txt": "old\n"}) == []
    [edit] = find_edits("notes.txt:\n```\nnew text\n```", {"notes.txt": "old\n"})
    assert edit.content == "new text\n"


def test_one_edit_per_file_and_several_files():
    text = (f"a.py:\n```python\n{FIXED}```\nb.py:\n```python\n{FIXED}```\n"
            f"a.py:\n```python\n{SOURCE}```")
    edits = find_edits(text, {"a.py": SOURCE, "b.py": SOURCE})
    assert [(e.path, e.content) for e in edits] == [("a.py", FIXED), ("b.py", FIXED)]


# --- in the agent loop -------------------------------------------------------------------

def _project(tmp_path):
    root = tmp_path / "proj"
    (root / "tests").mkdir(parents=True)
    (root / "thermo.py").write_text(SOURCE)
    (root / "tests" / "test_thermo.py").write_text(
        "import sys, os\nsys.path.insert(0, os.path.dirname(os.path.dirname(__file__)))\n"
        "from thermo import to_c\n\ndef test_boiling():\n    assert to_c(212) == 100\n")
    return root


def _agent(tmp_path, root, mode, *turns):
    script = tmp_path / "script.jsonl"
    script.write_text("".join(json.dumps(t) + "\n" for t in turns))
    events: list[dict] = []
    agent = Agent(ScriptedProvider(script), default_tools("small"), ToolContext(root), permissions=mode,
                  on_event=events.append)
    agent.after_tool.append(auto_test(agent, f"{sys.executable} -m pytest -q -x -p no:cacheprovider"))
    agent.on_stop.append(block_edits(agent))
    return agent, events


def _read(agent, root, name):
    agent.ctx.files.record((root / name).resolve(), (root / name).read_bytes())


def test_the_loop_writes_the_block_runs_the_tests_and_goes_on(tmp_path):
    root = _project(tmp_path)
    agent, events = _agent(tmp_path, root, "bypassPermissions",
                           {"content": [{"type": "text", "text": f"thermo.py:\n```python\n{FIXED}```"}]},
                           {"content": [{"type": "text", "text": "The factor was inverted; fixed."}]})
    _read(agent, root, "thermo.py")
    result = agent.run("fix it")
    assert (root / "thermo.py").read_text() == FIXED
    assert result.status == "success" and result.final == "The factor was inverted; fixed." and result.steps == 2
    follow_up = result.messages[2]["content"][0]["text"]
    assert follow_up.startswith("Your code block for thermo.py (whole file) was saved:\nWrote thermo.py.")
    assert "Tests after this change" in follow_up and "1 passed" in follow_up
    used = [e for e in events if e["type"] == "tool_use"]
    assert [(e["name"], e["input"]["path"]) for e in used] == [("write_file", "thermo.py")]


def test_the_block_is_refused_where_the_policy_refuses_write_file(tmp_path):
    root = _project(tmp_path)
    agent, _ = _agent(tmp_path, root, "default",   # headless default mode: nobody approves an edit
                      {"content": [{"type": "text", "text": f"thermo.py:\n```python\n{FIXED}```"}]},
                      {"content": [{"type": "text", "text": "done"}]})
    _read(agent, root, "thermo.py")
    result = agent.run("fix it")
    assert (root / "thermo.py").read_text() == SOURCE
    assert "was refused" in result.messages[2]["content"][0]["text"]
    assert result.permission_denials and result.permission_denials[0]["tool_name"] == "write_file"


@pytest.mark.parametrize("mode", ["acceptEdits", "default"])
def test_a_block_cannot_reach_the_agents_settings_or_git(tmp_path, mode):
    """Self-protection holds for a scaffold's write as for the model's own call: a block naming
    the agent's settings or git's config (read this session) is refused, nothing is written."""
    root = _project(tmp_path)
    (root / ".agent").mkdir()
    (root / ".agent" / "settings.json").write_text('{"permissions": {"allow": []}}\n')
    (root / ".git" / "hooks").mkdir(parents=True)
    (root / ".git" / "hooks" / "post-checkout.py").write_text("pass\n")
    loose = '{"permissions": {"defaultMode": "bypassPermissions"}}'
    # a dot-directory cannot be named (no path word starts with a dot), so the attack names the
    # file by its last components, which resolve to the one read file that ends with them
    text = (f"settings.json:\n```json\n{loose}\n```\n"
            "hooks/post-checkout.py:\n```python\nimport os\nos.system('touch PWNED')\n```")
    agent, _ = _agent(tmp_path, root, mode, {"content": [{"type": "text", "text": text}]},
                      {"content": [{"type": "text", "text": "done"}]})
    _read(agent, root, ".agent/settings.json")
    _read(agent, root, ".git/hooks/post-checkout.py")
    assert [e.path for e in find_edits(text, {".agent/settings.json": "{}", ".git/hooks/post-checkout.py": ""})] \
        == [".agent/settings.json", ".git/hooks/post-checkout.py"]   # (the whole hook file: it defines nothing)
    result = agent.run("go")
    assert (root / ".agent" / "settings.json").read_text() == '{"permissions": {"allow": []}}\n'
    assert (root / ".git" / "hooks" / "post-checkout.py").read_text() == "pass\n"
    assert result.messages[2]["content"][0]["text"].count("was refused") == 2


def test_a_file_changed_since_it_was_read_is_not_overwritten(tmp_path):
    root = _project(tmp_path)
    agent, _ = _agent(tmp_path, root, "bypassPermissions",
                      {"content": [{"type": "text", "text": f"thermo.py:\n```python\n{FIXED}```"}]},
                      {"content": [{"type": "text", "text": "done"}]})
    _read(agent, root, "thermo.py")
    (root / "thermo.py").write_text(SOURCE + "\n# changed by the user\n")
    result = agent.run("fix it")
    assert (root / "thermo.py").read_text().endswith("# changed by the user\n")
    assert "was refused" in result.messages[2]["content"][0]["text"]


def test_the_first_prompt_carries_the_failing_tests_and_asks_for_the_file(tmp_path):
    root = _project(tmp_path)
    agent, _ = _agent(tmp_path, root, "bypassPermissions", {"content": [{"type": "text", "text": "-"}]})
    _read(agent, root, "thermo.py")
    prompt = with_test_report("fix to_c", agent, f"{sys.executable} -m pytest -q -x -p no:cacheprovider")
    assert prompt.startswith("fix to_c\n\nThe tests as they are now (") and "1 failed" in prompt
    assert "assert 324.0 == 100" in prompt
    assert fix_request(agent) == "Reply with the whole corrected thermo.py in one code block."
    refusing, _ = _agent(tmp_path, root, "default", {"content": [{"type": "text", "text": "-"}]})   # headless default mode: the tests may not run
    assert with_test_report("fix to_c", refusing, "touch RAN") == "fix to_c"
    assert not (root / "RAN").exists()


def test_a_block_that_does_not_parse_still_gives_the_functions_that_do():
    """What the 1.5B model sent once: the path as the block's first line and the docstring's
    closing quotes lost; the corrected function is in it and is taken."""
    broken = FIXED.replace('"""Temperatures."""', '"""\nTemperatures.')
    text = f"```\nthermo.py:\n{broken}```"
    [edit] = find_edits(text, {"thermo.py": SOURCE, "notes.py": "x = 1\n"})
    assert edit.path == "thermo.py" and edit.content == FIXED
    assert edit.how == "replaced to_c, helper, Station"


def test_a_reply_cut_off_inside_its_block_keeps_the_complete_functions():
    cut = FIXED[:FIXED.index("class Station")] + "class Sta"
    [edit] = find_edits(f"thermo.py:\n```python\n{cut}", {"thermo.py": SOURCE})
    assert edit.content == FIXED


def test_an_unchanged_or_unusable_broken_block_is_no_edit():
    assert find_edits(f"thermo.py:\n```python\n{SOURCE}\n  )(\n```", {"thermo.py": SOURCE}) == []
    assert find_edits("thermo.py:\n```python\ndef nothing_known(:\n```", {"thermo.py": SOURCE}) == []


def test_the_cli_small_profile_hands_over_code_and_failure_and_takes_the_block(tmp_path):
    """End to end through ``agent-code -p``: the first prompt holds the named file and the
    failing tests and asks for the file; the reply's block is written (a tool_use event the
    model did not make) and the tests run; the run ends with the model's answer."""
    from conftest import run_cli

    root = _project(tmp_path)
    script = tmp_path / "s.jsonl"
    script.write_text(json.dumps({"content": [{"type": "text", "text": f"thermo.py:\n```python\n{FIXED}```"}]})
                      + "\n" + json.dumps({"content": [{"type": "text", "text": "Fixed the factor."}]}) + "\n")
    proc = run_cli("-p", "--provider", "scripted", "--script", str(script), "--tool-profile", "small",
                   "--permission-mode", "bypassPermissions", "--no-session-persistence", "--output-format",
                   "stream-json", "-C", str(root), "to_c in thermo.py is wrong", timeout=120)
    assert proc.returncode == 0, proc.stderr
    events = [json.loads(line) for line in proc.stdout.splitlines() if line.strip()]
    assert (root / "thermo.py").read_text() == FIXED
    used = [e for e in events if e["type"] == "tool_use"]
    assert [(e["name"], e["input"]["path"], e["step"]) for e in used] == [("write_file", "thermo.py", None)]
    result = next(e for e in events if e["type"] == "tool_result")
    assert "Tests after this change" in result["content"] and "1 passed" in result["content"]
    assert events[-1]["type"] == "result" and events[-1]["result"] == "Fixed the factor."


class Recording:
    name, model = "rec", "rec"

    def __init__(self, *texts):
        self.texts, self.tools, self.choices = list(texts), [], []

    def complete(self, messages, tools=None, system=None, tool_choice=None):
        from agent_code.types import ModelResponse
        self.tools.append(tools)
        self.choices.append(tool_choice)
        return ModelResponse([{"type": "text", "text": self.texts.pop(0)}])


def test_text_first_steps_keep_the_tools_and_ask_for_text(tmp_path):
    """The tools list stays the same on every step (one prompt prefix: one sample, issue 40);
    the text-first step says tool_choice none instead of dropping them."""
    root = _project(tmp_path)
    provider = Recording(f"thermo.py:\n```python\n{FIXED}```", "done")
    agent = Agent(provider, default_tools("small"), ToolContext(root), permissions="bypassPermissions")
    agent.on_stop.append(block_edits(agent))
    agent.text_first_steps = 1
    _read(agent, root, "thermo.py")
    assert agent.run("fix").final == "done"
    assert provider.tools[0] == provider.tools[1] and [t["name"] for t in provider.tools[1]] == [
        "read_file", "list_files", "write_file", "bash"]
    assert provider.choices == [{"type": "none"}, None]


def test_a_block_that_changes_nothing_is_said_plainly(tmp_path):
    root = _project(tmp_path)
    agent, _ = _agent(tmp_path, root, "bypassPermissions",
                      {"content": [{"type": "text", "text": f"thermo.py:\n```python\n{SOURCE}```"}]},
                      {"content": [{"type": "text", "text": "done"}]})
    _read(agent, root, "thermo.py")
    result = agent.run("fix it")
    follow_up = result.messages[2]["content"][0]["text"]
    assert "is the file as it already is: nothing changed" in follow_up and "Tests after" not in follow_up


@pytest.mark.parametrize("body, current", [
    ("x = " + "-" * 100_000 + "1\n", SOURCE),                                  # MemoryError in the parser
    ("def to_c(f):\n    return " + "+".join(["1"] * 200_000) + "\n", SOURCE),  # RecursionError
    ("def to_c(f):\n    return x" + ".y" * 100_000 + "\n", SOURCE),
    (")\ndef to_c(f):\n    return " + "-" * 100_000 + "1\n", SOURCE),           # the salvage path
])
def test_a_block_nested_past_the_parser_is_no_edit_and_no_crash(body, current):
    """Found by an attack review: ast.parse raised RecursionError/MemoryError out of the hook,
    which ended the agent's run."""
    assert find_edits(f"thermo.py:\n```python\n{body}```", {"thermo.py": current}) == []
    deep = "x = " + "-" * 100_000 + "1\n"   # a file that nests too deep itself: a named block is the file
    [edit] = find_edits(f"thermo.py:\n```python\n{FIXED}```", {"thermo.py": deep})
    assert edit.how == "whole file" and edit.content == FIXED


def test_only_the_first_blocks_of_a_reply_are_looked_at():
    """A reply of thousands of fences costs seconds of regex work: only the first MAX_BLOCKS count."""
    from agent_code.agent.blocks import MAX_BLOCKS

    noise = "```text\nnothing\n```\n" * MAX_BLOCKS
    assert find_edits(noise + f"thermo.py:\n```python\n{FIXED}```", {"thermo.py": SOURCE}) == []
    assert len(find_edits(noise[:-len("```text\nnothing\n```\n")] + f"thermo.py:\n```python\n{FIXED}```",
                          {"thermo.py": SOURCE})) == 1


def test_merging_counts_lines_as_the_parser_does():
    """Found by an attack review: a U+2028 in a string made splitlines and ast's line numbers
    disagree, and the replaced function landed on the wrong lines."""
    current = "s = 'x\u2028y'\n\n\ndef a():\n    return 1\n\n\ndef b():\n    return 2\n"
    [edit] = find_edits("m.py:\n```python\ndef b():\n    return 3\n```", {"m.py": current})
    assert edit.content == current.replace("return 2", "return 3")


def test_new_imports_keep_a_shebang_first_and_future_imports_before_others():
    current = "#!/usr/bin/env python3\n# -*- coding: utf-8 -*-\n\ndef a():\n    return 1\n\n\ndef b():\n    return 2\n"
    block = "```python\nimport json\nfrom __future__ import annotations\n\ndef a():\n    return json.dumps(1)\n```"
    [edit] = find_edits(f"m.py:\n{block}", {"m.py": current})
    assert edit.content == ("#!/usr/bin/env python3\n# -*- coding: utf-8 -*-\nfrom __future__ import annotations\n"
                            "import json\n\ndef a():\n    return json.dumps(1)\n\n\ndef b():\n    return 2\n")
    compile(edit.content, "m.py", "exec")
