"""Files a prompt names, attached to it (the small-model profile).

A prompt such as "``fahrenheit_to_celsius`` in thermo.py is wrong" names the file to look at;
a model of a few billion parameters or less often edits it from imagination instead of reading
it first. :func:`attach_mentioned` appends the content of each project file the prompt names
(like an ``@file`` mention) and records it as read, so the model starts from the real text and
may write the file at once. At most :data:`MAX_FILES` files of :data:`MAX_BYTES` each; anything
not attached is left to the tools.

Attaching is reading, so it refuses at least what ``read_file`` would (``tools/paths.py``,
``tools/files.py``, the permission policy), and more where a prompt should never need it:

* the file must be inside the project by its real path, reached by a name without ``.``/``..``
  segments and without a hidden component (``.agent``, ``.git``, ``.env*``, ...) as written or
  as resolved: the agent's settings, git's config and secrets kept in dot-files are not pasted
  into a prompt because a word looks like their path;
* it is opened component by component from the project root without following a symlink swapped
  in after resolving, without waiting on a FIFO or device, and must be a regular file with one
  link (a hard link may be a file outside the project), read bounded to :data:`MAX_BYTES` (a file
  that grew since its size was taken is refused), UTF-8 without NUL bytes (read_file calls those
  binary); its read stamp is taken from the open file, so it is the stamp of what was shown;
* the permission policy's answer for ``read_file`` of that path must be ``allow``, for the name as
  written and for the real path: deny and ask rules (headless nobody can approve an ask) and
  PreToolUse hooks. The CLI passes the session's own policy, its settings applied; without a
  ``policy`` (another caller) the rules are read here from every settings file, in its current version and its
  last accepted one (the session uses one of them, and both versions' deny and ask rules count);
  a settings file that cannot be read, or a PreToolUse hook that concerns ``read_file``, means
  nothing is attached (the hook would run when the model reads the file itself).
"""

from __future__ import annotations

import hashlib
import os
import re
import stat
from pathlib import Path
from typing import TYPE_CHECKING, Callable

from agent_code.tools.base import FileStamp, ToolContext

if TYPE_CHECKING:
    from agent_code.policy.permissions import PermissionPolicy

_FENCE_LANGUAGES = {"py": "python"}
MAX_FILES = 3
MAX_BYTES = 16_000
MAX_NAME_CHARS = 1024
# a path-like word with an extension: thermo.py, src/app/main.ts, `pager.py`
_PATH = re.compile(r"(?<![\w/.-])([\w][\w./-]*\.[A-Za-z0-9]{1,6})(?![\w/-])")
_DIR_FLAGS = os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW | os.O_CLOEXEC
_FILE_FLAGS = os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK | os.O_CLOEXEC | getattr(os, "O_NOCTTY", 0)


def _plain(parts: tuple[str, ...] | list[str]) -> bool:
    """No empty, ``.``/``..`` or hidden (dot-) component."""
    return bool(parts) and all(p and not p.startswith(".") for p in parts)


def _read_inside(root: Path, name: str) -> tuple[Path, bytes, FileStamp] | None:
    """(real path, content, stamp) of the project file ``name``, or None (module doc)."""
    if len(name) > MAX_NAME_CHARS or "\x00" in name or not _plain(name.split("/")):
        return None
    try:
        real = Path(os.path.realpath(root / name))
        rel = real.relative_to(root)
    except (OSError, ValueError, RuntimeError):
        return None
    if not _plain(rel.parts):
        return None
    fd = -1
    try:
        fd = os.open(root, _DIR_FLAGS)
        for part in rel.parts[:-1]:  # a component swapped for a symlink since: ELOOP/ENOTDIR
            inner = os.open(part, _DIR_FLAGS, dir_fd=fd)
            os.close(fd)
            fd = inner
        inner = os.open(rel.parts[-1], _FILE_FLAGS, dir_fd=fd)
        os.close(fd)
        fd = inner
        st = os.fstat(fd)
        if not stat.S_ISREG(st.st_mode) or st.st_nlink != 1 or st.st_size > MAX_BYTES:
            return None
        chunks, size = [], 0
        while size <= MAX_BYTES:
            chunk = os.read(fd, MAX_BYTES + 1 - size)
            if not chunk:
                break
            chunks.append(chunk)
            size += len(chunk)
        data = b"".join(chunks)
        after = os.fstat(fd)
    except (OSError, ValueError):
        return None
    finally:
        if fd >= 0:
            os.close(fd)
    if len(data) > MAX_BYTES or after.st_size != len(data) or after.st_nlink != 1:
        return None
    return real, data, FileStamp(after.st_mtime_ns, after.st_size, hashlib.sha256(data).hexdigest())


def _settings_policy(root: Path) -> "PermissionPolicy | None":
    """A policy with the deny and ask rules of every version of the settings files that a
    session may use (module doc); None when nothing may be attached."""
    from agent_code.agent.settings import current_settings, merge_settings, parse_settings_text, trust_store
    from agent_code.policy import PermissionMode, PermissionPolicy, RuleSet

    try:
        store = trust_store()
        rules = []
        for f in current_settings(root):
            versions = [(f.label, f.text)]
            record = store.get(f.key)
            if record is not None and record.readable and record.content != f.text:
                versions.append((f"{f.label} (last accepted version)", record.content))
            for label, text in versions:
                data = parse_settings_text(text, label)
                if data is None:
                    continue
                merged = merge_settings([(label, data)])
                if any(m.matches("read_file") for m in merged.hooks.get("PreToolUse", [])):
                    return None
                rules += [r for r in merged.rules.rules if r.behavior in ("deny", "ask")]
    except Exception:  # a settings file that cannot be read could hold a deny rule: attach nothing
        return None
    return PermissionPolicy(PermissionMode.DEFAULT, rules=RuleSet(rules), root=root)


def _reads_allowed(root: Path, policy: "PermissionPolicy | None") -> Callable[[str], bool] | None:
    """Whether the policy lets read_file read a path (None: no file may be attached)."""
    from agent_code.tools.files import read_file

    if policy is None:
        policy = _settings_policy(root)
        if policy is None:
            return None
    hook = policy.pre_tool_use

    def allowed(path: str) -> bool:
        arguments = {"path": path}
        try:
            if policy.explain(read_file, arguments).behavior != "allow":
                return False
            return hook is None or hook(read_file, dict(arguments)) is None
        except Exception:
            return False

    return allowed


def mentioned_files(prompt: str, ctx: ToolContext, policy: "PermissionPolicy | None" = None) -> list[tuple[str, str]]:
    """(path as written, content) of each project file ``prompt`` names, in order of mention.
    ``policy``: the session's permission policy (None: the project's settings, see the module doc)."""
    found: list[tuple[str, str]] = []
    root = Path(os.path.realpath(ctx.root))
    allowed: Callable[[str], bool] | None = None
    seen: set[Path] = set()
    tried: set[str] = set()
    for match in _PATH.finditer(prompt):
        name = match.group(1).rstrip(".")
        if name in tried:
            continue
        tried.add(name)
        got = _read_inside(root, name)
        if got is None or got[0] in seen:
            continue
        real, data, stamp = got
        if b"\x00" in data:
            continue
        try:
            text = data.decode("utf-8")
        except UnicodeDecodeError:
            continue
        if allowed is None:
            allowed = _reads_allowed(root, policy)
            if allowed is None:
                return []
        if not all(allowed(p) for p in dict.fromkeys([name, real.relative_to(root).as_posix()])):
            continue
        seen.add(real)
        ctx.files.stamps[real] = stamp  # seen, as it was read: the edit tools may change it
        found.append((name, text))
        if len(found) == MAX_FILES:
            break
    return found


def attach_mentioned(prompt: str, ctx: ToolContext, policy: "PermissionPolicy | None" = None) -> str:
    """``prompt`` with the files it names appended (see the module doc); unchanged if none."""
    files = mentioned_files(prompt, ctx, policy)
    if not files:
        return prompt
    parts = [prompt, "", "The files named above, as they are now:"]
    for name, text in files:
        longest = max((len(run) for run in re.findall(r"`+", text)), default=0)
        fence = "`" * max(3, longest + 1)  # no line of the file can close it early
        language = _FENCE_LANGUAGES.get(name.rpartition(".")[2].lower(), "")  # a small model answers in kind
        parts += ["", f"{name}:", fence + language, text.rstrip("\n"), fence]
    return "\n".join(parts)
