"""``agent-code inspect``: tables per session and the token-by-token HTML page."""

from __future__ import annotations

import re
from pathlib import Path

import pytest
from typer.testing import CliRunner

from agent_code.cli.inspect import app, main, render_html
from agent_code.render.template import qwen3_tokenizer_dir
from agent_code.trajectory.records import TurnRecord
from agent_code.trajectory.samples import build_samples
from agent_code.trajectory.store import TurnLog, write_samples

QWEN3_DIR = qwen3_tokenizer_dir()


def rec(index: int, prompt: list[int], output: list[int], parent: int | None = None, **kw) -> TurnRecord:
    return TurnRecord.build(session_id="sess-1", index=index, messages=[{"role": "user", "content": "hi"}],
                            tools=None, prompt_ids=prompt, output_ids=output,
                            logprobs=[-0.5] * len(output), finish_reason="stop",
                            reply={"role": "assistant", "content": "ok"}, parent=parent, **kw)


def records() -> list[TurnRecord]:
    # turn 1's template re-render changed the tail of turn 0's output: one realignment
    return [rec(0, [9707, 11], [1879, 0, 3838]),
            rec(1, [9707, 11, 1879, 0, 2500, 13], [40, 41], parent=0, policy="template")]


def test_inspect_prints_tables(tmp_path: Path) -> None:
    write_samples(build_samples(records(), reward=1.0, rollout_id="r9"), tmp_path)
    result = CliRunner().invoke(app, [str(tmp_path / "samples.jsonl")])
    assert result.exit_code == 0, result.output
    out = result.output
    assert "session sess-1" in out and "rollout r9" in out
    assert "main" in out and "completed" in out
    assert "turn 0 realigned" in out and "masked=1" in out


def test_inspect_turn_log_directory(tmp_path: Path) -> None:
    log = TurnLog(tmp_path)
    for r in records():
        log.append(r)
    result = CliRunner().invoke(app, [str(tmp_path)])
    assert result.exit_code == 0, result.output
    assert "aborted" in result.output and "sess-1" in result.output


def test_inspect_missing_file(tmp_path: Path) -> None:
    with pytest.raises(SystemExit) as exc:
        main([str(tmp_path / "nope.jsonl")])
    assert exc.value.code == 1


def test_render_html_without_tokenizer() -> None:
    [s] = build_samples(records(), reward=1.0)
    page = render_html([s], None, title="t<&>")
    assert "t&lt;&amp;&gt;" in page and "<script" not in page and "http" not in page
    assert page.count("<span class='t' title=") == s.trained_tokens == 4
    assert page.count("<span class='p' title=") == 2


@pytest.mark.skipif(QWEN3_DIR is None, reason="the Qwen3 tokenizer package is not installed")
def test_inspect_html_with_qwen3(tmp_path: Path) -> None:
    from agent_code.render.template import load_renderer

    tok = load_renderer(QWEN3_DIR)
    prompt = tok.encode("Hello <b>world</b> & ")
    out0 = tok.encode("Sure: 1 < 2")
    out1 = tok.encode(" done")
    recs = [rec(0, prompt, out0), rec(1, prompt + out0 + tok.encode("\nok"), out1, parent=0)]
    samples = build_samples(recs, reward=0.5, decode=tok.decode)
    write_samples(samples, tmp_path)
    html_path = tmp_path / "out.html"
    with pytest.raises(SystemExit) as exc:
        main([str(tmp_path / "samples.jsonl"), "--html", str(html_path), "--tokenizer", str(QWEN3_DIR)])
    assert exc.value.code == 0
    page = html_path.read_text(encoding="utf-8")
    trained = re.findall(r"<span class='t' title='([^']*)'>([^<]*)</span>", page)
    assert len(trained) == len(out0) + len(out1)
    assert all(title.startswith("logprob -0.5000") for title, _ in trained)
    assert "".join(text for _, text in trained) == "Sure: 1 &lt; 2 done"
    shown = "".join(re.findall(r"<span class='p' title='[^']*'>([^<]*)</span>", page))
    assert shown == "Hello &lt;b&gt;world&lt;/b&gt; &amp; "     # prompt tokens dimmed and escaped
    assert "<b>" not in page and "src=" not in page and "href=" not in page
