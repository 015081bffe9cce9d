"""Training samples as a self-contained HTML page, token by token.

Trained tokens (loss mask 1) are highlighted with their logprob, untrained response tokens
plain, prompt tokens dimmed. Used by ``agent-code inspect --html`` (``cli/inspect.py``) and
by the rollout export (one page per rollout, ``rollout/export.py``); it lives here, below
the CLI, so the rollout does not import the CLI.

Text is decoded across token boundaries: a character whose UTF-8 bytes are split over several
tokens (an emoji, a rare CJK character) is shown once, in the span of the token that completes
it, never as "\ufffd" pieces. The system prompt and the tool block the chat template writes
(found by rendering probe conversations with the same template) are collapsible
(``<details>``), closed at first: they are long and the same in every sample.
"""

from __future__ import annotations

import codecs
import html
import weakref
from typing import TYPE_CHECKING, Any, Callable

from agent_code.trajectory.samples import Sample

if TYPE_CHECKING:
    from agent_code.render.template import Renderer


def by_session(samples: list[Sample]) -> dict[str, list[Sample]]:
    out: dict[str, list[Sample]] = {}
    for s in samples:
        out.setdefault(s.session_id, []).append(s)
    return out


def describe_drift(event: dict[str, Any]) -> str:
    head = f"turn {event.get('turn', '?')} {event.get('kind', '?')}"
    rest = ", ".join(f"{k}={v}" for k, v in event.items() if k not in ("turn", "kind"))
    return head + (f" ({rest})" if rest else "")


_CSS = """
body { font-family: system-ui, sans-serif; margin: 1.5em; color: #222; }
.sample { border: 1px solid #ccc; border-radius: 6px; margin: 1.5em 0; padding: 0.8em; }
.sample h2 { font-size: 1.1em; margin: 0 0 0.4em 0; }
table.fields { border-collapse: collapse; font-size: 0.85em; margin-bottom: 0.6em; }
table.fields td { padding: 1px 8px; border-bottom: 1px solid #eee; vertical-align: top; }
.tokens { font-family: ui-monospace, monospace; font-size: 0.85em; white-space: pre-wrap;
          word-break: break-all; line-height: 1.5; }
.tokens span { border-right: 1px solid rgba(0,0,0,0.07); }
span.p { color: #999; }
span.t { background: #c8f0c8; }
span.u { background: #fff; }
.legend span { padding: 0 4px; margin-right: 8px; }
details.seg { display: inline; }
details.seg[open] { display: block; border-left: 3px solid #ddd; padding-left: 6px; margin: 2px 0; }
details.seg > summary { display: inline; cursor: pointer; color: #555; background: #f0f0f0;
                        font-family: system-ui, sans-serif; border-radius: 3px; padding: 0 4px; }
"""


def _token_texts(renderer: Renderer | None) -> Callable[[int], tuple[str, str]]:
    """id -> (display text, raw token) using the tokenizer; falls back to ``<id>``."""
    cache: dict[int, tuple[str, str]] = {}
    tok = getattr(renderer, "tokenizer", None)

    def text(i: int) -> tuple[str, str]:
        if i not in cache:
            if tok is None:
                cache[i] = (f"<{i}>", str(i))
            else:
                try:
                    raw = tok.convert_ids_to_tokens(int(i))
                    shown = tok.decode([int(i)], skip_special_tokens=False, clean_up_tokenization_spaces=False)
                except Exception:
                    raw, shown = str(i), f"<{i}>"
                cache[i] = (shown, str(raw))
        return cache[i]

    return text


def _byte_decoder() -> dict[str, int]:
    """GPT-2's byte-level alphabet, reversed: the character a byte-level BPE token spells a byte with."""
    bs = list(range(ord("!"), ord("~") + 1)) + list(range(ord("¡"), ord("¬") + 1)) + list(range(ord("®"), ord("ÿ") + 1))
    cs = bs[:]
    n = 0
    for b in range(256):
        if b not in bs:
            bs.append(b)
            cs.append(256 + n)
            n += 1
    return {chr(c): b for b, c in zip(bs, cs)}


_BYTE_DECODER = _byte_decoder()


def _token_bytes(renderer: Renderer | None) -> Callable[[int], bytes | None] | None:
    """id -> the token's bytes, for byte-level BPE tokenizers (Qwen, GPT-2, Llama 3...): added
    tokens are their text; None where a token does not spell bytes. None for other tokenizers."""
    tok = getattr(renderer, "tokenizer", None)
    backend = getattr(tok, "backend_tokenizer", None)
    if tok is None or "ByteLevel" not in type(getattr(backend, "decoder", None)).__name__:
        return None
    added = {int(i): getattr(t, "content", str(t)) for i, t in getattr(tok, "added_tokens_decoder", {}).items()}
    cache: dict[int, bytes | None] = {}

    def of(i: int) -> bytes | None:
        if i not in cache:
            if i in added:
                cache[i] = added[i].encode("utf-8")
            else:
                try:
                    raw = tok.convert_ids_to_tokens(int(i))
                    cache[i] = bytes(_BYTE_DECODER[c] for c in raw) if isinstance(raw, str) else None
                except Exception:
                    cache[i] = None
        return cache[i]

    return of


def span_texts(tokens: list[int], renderer: Renderer | None) -> list[str]:
    """The text each token adds to the decoded sequence, decoding across token boundaries: a
    character split over several tokens belongs to the token whose bytes complete it (the
    tokens before it show nothing of it), so no span shows "\ufffd" for half a character.

    Byte-level tokenizers: incremental UTF-8 decoding of the tokens' bytes. Others: the
    growth of the decoded text, held back while it ends in an incomplete character."""
    if renderer is None or getattr(renderer, "tokenizer", None) is None:
        text_of = _token_texts(renderer)
        return [text_of(t)[0] for t in tokens]
    of = _token_bytes(renderer)
    if of is not None:
        maybe = [of(int(t)) for t in tokens]
        pieces = [p for p in maybe if p is not None]
        if len(pieces) == len(maybe):
            decoder = codecs.getincrementaldecoder("utf-8")(errors="replace")
            last = len(pieces) - 1
            return [decoder.decode(p, final=k == last) for k, p in enumerate(pieces)]
    # vLLM's incremental detokenization: decode a short window (a little context before the
    # new tokens, for tokenizers whose text of a token depends on its neighbour) and emit what
    # it adds once that no longer ends in an incomplete character
    decode = renderer.decode
    out: list[str] = []
    prefix = read = 0
    for k in range(len(tokens)):
        before = decode(tokens[prefix:read])
        text = decode(tokens[prefix:k + 1])
        if len(text) > len(before) and not text.endswith("\ufffd") or k == len(tokens) - 1:
            out.append(text[len(before):])
            prefix, read = read, k + 1
        else:
            out.append("")
    return out


def _segment_probes(renderer: Renderer | None) -> tuple[str, str, str] | None:
    """(system prefix, tool block head, tool block tail) of the renderer's chat template, from
    probe renders: the text before a system message's content, and the first and last lines
    of what declaring tools adds (e.g. Qwen's "# Tools ..." up to "</tool_call>")."""
    if renderer is None or not hasattr(renderer, "render_text"):
        return None
    try:
        if renderer in _PROBES:   # probed before
            return _PROBES[renderer]
    except TypeError:   # a stand-in renderer that cannot be weakly referenced or hashed: probe every time
        pass
    marker = "agent-code-inspect-system-probe"
    tool = {"type": "function", "function": {"name": "agent_code_inspect_probe", "description": "probe",
                                             "parameters": {"type": "object", "properties": {}}}}
    convo = [{"role": "system", "content": marker}, {"role": "user", "content": "u"}]
    result: tuple[str, str, str] | None = None
    try:
        plain = renderer.render_text(convo, None, add_generation_prompt=False)
        with_tools = renderer.render_text(convo, [tool], add_generation_prompt=False)
        system_prefix = plain[:plain.index(marker)] if marker in plain else ""
        p = 0
        while p < min(len(plain), len(with_tools)) and plain[p] == with_tools[p]:
            p += 1
        q = 0
        while q < min(len(plain), len(with_tools)) - p and plain[-1 - q] == with_tools[-1 - q]:
            q += 1
        block = with_tools[p:len(with_tools) - q].strip()
        lines = [line for line in block.splitlines() if line.strip()]
        head, tail = (lines[0], lines[-1]) if len(lines) >= 2 else ("", "")
        if "agent_code_inspect_probe" in head + tail:
            head, tail = "", ""          # the template writes the tools bare: no fixed frame to find
        result = (system_prefix, head, tail)
    except Exception:
        result = None
    try:
        _PROBES[renderer] = result
    except TypeError:
        pass
    return result


# renderer -> its probes (:func:`_segment_probes`), for as long as the renderer lives
_PROBES: weakref.WeakKeyDictionary[Renderer, tuple[str, str, str] | None] = weakref.WeakKeyDictionary()


def _segments(texts: list[str], prompt_length: int, renderer: Renderer | None,
              end_of_turn: set[int], tokens: list[int]) -> list[tuple[str, int, int]]:
    """Collapsible token ranges of a sample's prompt: ("system prompt" | "tools", start, end)."""
    probes = _segment_probes(renderer)
    if probes is None:
        return []
    system_prefix, head, tail = probes
    offsets = [0]
    for t in texts:
        offsets.append(offsets[-1] + len(t))
    prompt_text = "".join(texts[:prompt_length])

    def token_at(char: int) -> int:       # the token whose text holds character `char`
        lo, hi = 0, prompt_length
        while lo < hi:
            mid = (lo + hi) // 2
            if offsets[mid + 1] <= char:
                lo = mid + 1
            else:
                hi = mid
        return lo

    out: list[tuple[str, int, int]] = []
    if system_prefix.strip() and prompt_text.startswith(system_prefix):
        end = next((k for k in range(prompt_length) if tokens[k] in end_of_turn), None)
        if end is not None:
            out.append(("system prompt", 0, end + 1))
    if head and tail:
        at = prompt_text.find(head)
        stop = prompt_text.find(tail, at + len(head)) if at >= 0 else -1
        if at >= 0 and stop >= 0:
            first, last = token_at(at), token_at(stop + len(tail) - 1) + 1
            system = out[0] if out else None
            if system is None or system[1] <= first and last <= system[2]:
                out.append(("tools", first, last))
    return out


def render_html(samples: list[Sample], renderer: Renderer | None = None, *, title: str = "agent-code samples") -> str:
    """A self-contained HTML page (no external assets) showing each sample token by token."""
    out = ["<!DOCTYPE html>", "<html><head><meta charset='utf-8'>", f"<title>{html.escape(title)}</title>",
           f"<style>{_CSS}</style></head><body>", f"<h1>{html.escape(title)}</h1>",
           "<p class='legend'><span class='p'>prompt</span><span class='u'>response, not trained</span>"
           "<span class='t'>trained (loss mask 1; hover: logprob)</span></p>"]
    text = _token_texts(renderer)
    for sid, group in by_session(samples).items():
        out.append(f"<h2>session {html.escape(sid)}</h2>")
        for s in group:
            fields = [("session_id", s.session_id), ("rollout_id", s.rollout_id), ("index", s.index),
                      ("branch", s.branch), ("status", s.status), ("reward", s.reward),
                      ("prompt tokens", s.prompt_length), ("response_length", s.response_length),
                      ("trained tokens", s.trained_tokens)]
            meta = s.metadata
            fields += [(k, meta[k]) for k in ("turns", "turn_indices", "truncated", "use_tool", "shared_turns",
                                              "ill_formed") if k in meta]
            fields += [("drift", "; ".join(describe_drift(e) for e in meta.get("drift") or []) or "none")]
            out.append(f"<div class='sample' id='{html.escape(sid, quote=True)}-{s.index}'>")
            out.append(f"<h2>sample {s.index} · {html.escape(s.branch)} · {html.escape(s.status)}</h2>")
            out.append("<table class='fields'>" + "".join(
                f"<tr><td>{html.escape(str(k))}</td><td>{html.escape(str(v))}</td></tr>" for k, v in fields)
                + "</table>")
            P = s.prompt_length
            texts = span_texts(list(s.tokens), renderer)
            spans = []
            for pos, tid in enumerate(s.tokens):
                _, raw = text(tid)
                if pos < P:
                    cls, tip = "p", f"prompt · id {tid} · {raw}"
                else:
                    r = pos - P
                    if s.loss_mask[r]:
                        cls, tip = "t", f"logprob {s.rollout_log_probs[r]:.4f} · id {tid} · {raw}"
                    else:
                        cls, tip = "u", f"not trained · id {tid} · {raw}"
                spans.append(f"<span class='{cls}' title='{html.escape(tip, quote=True)}'>"
                             f"{html.escape(texts[pos])}</span>")
            eot = set(getattr(renderer, "end_of_turn_ids", None) or [])
            opens: dict[int, list[str]] = {}
            closes: dict[int, int] = {}
            for label, start, end in sorted(_segments(texts, P, renderer, eot, list(s.tokens)),
                                            key=lambda seg: (seg[1], -seg[2])):   # outer first
                opens.setdefault(start, []).append(f"<details class='seg'><summary>{html.escape(label)} · "
                                                   f"{end - start} tokens</summary>")
                closes[end - 1] = closes.get(end - 1, 0) + 1
            for k in set(opens) | set(closes):
                spans[k] = "".join(opens.get(k, [])) + spans[k] + "</details>" * closes.get(k, 0)
            out.append("<div class='tokens'>" + "".join(spans) + "</div></div>")
    out.append("</body></html>")
    return "\n".join(out)
