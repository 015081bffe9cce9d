"""The small profile attaches the project files a prompt names (issue 16): their content,
recorded as read, so the edit tools may change them; nothing outside the project, nothing
large, nothing binary."""

from __future__ import annotations

import os

from agent_code.agent.attach import MAX_BYTES, MAX_FILES, attach_mentioned, mentioned_files
from agent_code.tools import ToolContext, default_tools
from agent_code.types import ToolCall


def _project(tmp_path):
    root = tmp_path / "proj"
    (root / "src").mkdir(parents=True)
    (root / "thermo.py").write_text("def f(x):\n    return x * 2\n")
    (root / "src" / "app.ts").write_text("export const a = 1;\n")
    (root / "big.py").write_text("x = 1\n" * (MAX_BYTES // 6 + 10))
    (root / "blob.bin").write_bytes(b"\xff\xfe\x00" * 10)
    (tmp_path / "secret.txt").write_text("outside\n")
    os.symlink(tmp_path / "secret.txt", root / "link.txt")
    return root


def test_named_files_are_attached_and_count_as_read(tmp_path):
    root = _project(tmp_path)
    ctx = ToolContext(root)
    text = attach_mentioned("`f` in thermo.py is wrong; see also src/app.ts.", ctx)
    assert text.startswith("`f` in thermo.py is wrong; see also src/app.ts.\n")
    assert "thermo.py:\n```\ndef f(x):\n    return x * 2\n```" in text
    assert "src/app.ts:\n```\nexport const a = 1;\n```" in text
    tools = default_tools("small")
    done = tools.run(ToolCall("c1", "write_file", {"path": "thermo.py", "content": "def f(x):\n    return x\n"}), ctx)
    assert not done.is_error, done.content  # attached = read: the file may be written at once
    assert (root / "thermo.py").read_text() == "def f(x):\n    return x\n"


def test_what_is_not_attached(tmp_path):
    root = _project(tmp_path)
    ctx = ToolContext(root)
    prompt = "big.py blob.bin ../secret.txt link.txt missing.py /etc/hostname 3.14 e.g. v1.2"
    assert mentioned_files(prompt, ctx) == []
    assert attach_mentioned(prompt, ctx) == prompt and not ctx.files.stamps


def test_at_most_max_files_each_once(tmp_path):
    root = tmp_path / "p"
    root.mkdir()
    names = [f"m{i}.py" for i in range(MAX_FILES + 2)]
    for n in names:
        (root / n).write_text(f"# {n}\n")
    found = mentioned_files(" ".join([names[0], names[0], *names]), ToolContext(root))
    assert [n for n, _ in found] == names[:MAX_FILES]
