"""``agent-code inspect``: tables per session and the token-by-token HTML page."""

from __future__ import annotations

import re
from pathlib import Path

import pytest
from typer.testing import CliRunner

from agent_code.cli.inspect import app, main
from agent_code.render.template import qwen3_tokenizer_dir
from agent_code.rollout.inspect_html import render_html
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


class _Texts(__import__("html.parser").parser.HTMLParser):
    """The text of the token spans, keyed by the <details> labels around it (outermost first)."""

    def __init__(self) -> None:
        super().__init__(convert_charrefs=True)
        self.stack: list[str] = []
        self.where = ""
        self.out: dict[tuple[str, ...], str] = {}
        self.in_summary = self.in_tokens = False
        self.spans = 0
        self.text = ""         # all of it, in page order

    def handle_starttag(self, tag, attrs):
        if tag == "details":
            self.stack.append("?")
        elif tag == "summary":
            self.in_summary = True
        elif tag == "div" and ("class", "tokens") in attrs:
            self.in_tokens = True
        elif tag == "span" and self.in_tokens:
            self.spans += 1

    def handle_endtag(self, tag):
        if tag == "details":
            self.stack.pop()
        elif tag == "summary":
            self.in_summary = False
        elif tag == "div":
            self.in_tokens = False

    def handle_data(self, data):
        if self.in_summary:
            self.stack[-1] = data.split(" · ")[0]
        elif self.in_tokens:
            key = tuple(self.stack)
            self.out[key] = self.out.get(key, "") + data
            self.text += data


@pytest.mark.skipif(QWEN3_DIR is None, reason="the Qwen3 tokenizer package is not installed")
def test_html_decodes_characters_split_across_tokens() -> None:
    """A character whose UTF-8 bytes span several tokens shows once, in the span of the token
    that completes it — never as "\ufffd" pieces — across the prompt/response boundary too."""
    from agent_code.rollout.inspect_html import span_texts
    from agent_code.render.template import load_renderer

    tok = load_renderer(QWEN3_DIR)
    prompt_text, reply_text = "emoji 🫠 and 𝔘 ", "ꯍ then 🦜 done"
    prompt, output = tok.encode(prompt_text), tok.encode(reply_text)
    assert "\ufffd" in "".join(tok.decode([i]) for i in output)        # one token at a time: broken
    [s] = build_samples([rec(0, prompt, output)], reward=1.0, decode=tok.decode)
    page = render_html([s], tok)
    assert "\ufffd" not in page and "&#xfffd;" not in page.lower()
    parsed = _Texts()
    parsed.feed(page)
    assert parsed.spans == len(prompt) + len(output)                     # still one span per token
    assert parsed.text == prompt_text + reply_text
    texts = span_texts(prompt + output, tok)
    assert "🫠" in texts and "𝔘" in texts and "ꯍ" in texts                # the completing token holds it

    class NoBytes:          # a tokenizer that does not spell bytes: the decoded text's growth
        tokenizer = object()
        decode = staticmethod(tok.decode)

    fallback = span_texts(prompt + output, NoBytes())
    assert "".join(fallback) == prompt_text + reply_text and not any("\ufffd" in t for t in fallback)


@pytest.mark.skipif(QWEN3_DIR is None, reason="the Qwen3 tokenizer package is not installed")
def test_html_system_prompt_and_tool_block_are_collapsible() -> None:
    from agent_code.render.template import load_renderer

    tok = load_renderer(QWEN3_DIR)
    tools = [{"type": "function", "function": {"name": "Read", "description": "Read a file.",
                                               "parameters": {"type": "object", "properties": {}}}}]
    messages = [{"role": "system", "content": "You are a careful coding agent."},
                {"role": "user", "content": "Fix the bug."}]
    prompt = tok.render(messages, tools)
    output = tok.encode("On it.") + tok.end_of_turn_ids
    record = TurnRecord.build(session_id="sess-1", index=0, messages=messages, tools=tools, prompt_ids=prompt,
                              output_ids=output, logprobs=[-0.5] * len(output), finish_reason="stop",
                              reply={"role": "assistant", "content": "On it."})
    [s] = build_samples([record], reward=1.0, decode=tok.decode)
    page = render_html([s], tok)
    parsed = _Texts()
    parsed.feed(page)
    system, tool_block = parsed.out[("system prompt",)], parsed.out[("system prompt", "tools")]
    assert system.startswith("<|im_start|>system\nYou are a careful coding agent.") and "<|im_end|>" in system
    assert tool_block.startswith("# Tools") and '"name": "Read"' in tool_block
    assert tool_block.rstrip().endswith("</tool_call>")
    rest = parsed.out[()]
    assert "Fix the bug." in rest and "On it." in rest and "# Tools" not in rest
    assert parsed.text == tok.decode(prompt + output)       # nothing lost or doubled around the folds
    n_system = prompt.index(tok.end_of_turn_ids[0]) + 1
    assert f"<summary>system prompt · {n_system} tokens</summary>" in page
    assert page.count("<details class='seg'>") == 2
    # without a tokenizer there is nothing to find: plain spans
    assert "<details" not in render_html([s], None)
