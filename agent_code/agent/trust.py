"""Settings trust: a settings file takes effect only in a version the user accepted.

Settings can loosen everything (``defaultMode: bypassPermissions``, allow rules) and run
commands (hooks), and the agent — through a command, a process it left running, or an edit
the policy could not see — can write them. So the version of each settings file that takes
effect is one the user trusts, kept in a **trust store** outside the project, in the user's
home: ``~/.agent-code/trust/``, one record per settings file (keyed by its path: the
resolved project root or home, then ``.agent/settings.local.json`` etc. as written, so a
swapped-in symlink or a symlinked ``.agent`` is still the same file), holding the digest and a
copy of the last accepted version (or that the file was absent).

**Folder trust** comes first. A project's files — its two settings files (permissions,
``defaultMode``, hooks), its skills (``.agents/skills``) and its MCP servers (``.mcp.json``) —
are used only in a folder the user trusts: a record in the same store, keyed
``folder:<resolved project root>`` (:func:`folder_key`), written when the user says yes to the
REPL's start-up question (on a terminal), runs with ``--trust-project``, or accepts with
``agent-code settings accept`` on a terminal. Trusting a folder records the current version of
each of its settings files (absent ones too) as accepted, so the per-file tracking below goes
on from there. In a folder not trusted, none of the project's files is used except the deny and
ask rules of its settings files, which can only restrict; nothing of the project is recorded.
The key is the exact resolved root: trusting ``/a`` does not trust ``/a/b`` (a nested project
with its own ``.agent/``), and a symlinked project directory is its real path. A folder that
configures nothing is not asked about (and not recorded): once files appear there, it is.

Then, for the settings files of a trusted folder and for the user's own file, a file version
is trusted when

* it is the version the record holds (the user accepted it, or it was there on first sight);
* the user accepts it: at the REPL's start (which shows what changed), or with
  ``agent-code settings accept`` — both only on a terminal, never from piped input, since an
  agent's command has no terminal;
* **first sight**, for ``~/.agent-code/settings.json`` only: the file has no record and the
  store holds no record at all and the project no earlier session. That first start
  records it (absent too), so a file created or changed while a session ran is never first
  sight. A project file is never first sight: its folder's trust recorded every project
  file, so one without a record was created later, or its record deleted.

A trusted version includes the hook scripts it runs: the digest of each file a hook command
names directly (``./check.sh``, ``bash .agent/hooks/stop.sh``; see :func:`command_scripts`).
A changed, created or removed script is a change to accept too; until then the hooks that
run it do not run.

Any other version — changed, created, removed, or unrecorded — needs acceptance, whoever
made it: the user's own hand edits too (the message says how to accept them). Until then
the **last accepted version** is used instead (none for a new file), together with the
unaccepted version's ``deny`` and ``ask`` rules, which can only restrict. What it does not
stop: an agent that may run any command as the user can write this store (and the user's
shell start-up files) too; the store guards the settings against changes made through the
project, not against an agent given the whole account.
"""

from __future__ import annotations

import hashlib
import json
import os
import stat
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from agent_code.jsonl import write_json_atomic
from agent_code.policy.settings import SettingsError

TRUST_DIR = "trust"
MAX_SETTINGS_BYTES = 1 << 20
ABSENT = "absent"


def version_digest(text: str | None) -> str:
    """``sha256:…`` of a version's bytes; ``absent`` for a missing file."""
    if text is None:
        return ABSENT
    return "sha256:" + hashlib.sha256(text.encode("utf-8")).hexdigest()


def read_version(path: Path, label: str) -> str | None:
    """The text of a settings file, read once (its digest and its parse use the same bytes);
    None when it does not exist. Only a regular file (through symlinks) is read — a FIFO or a
    device could block the start or change between reads — and at most 1 MiB of it."""
    flags = os.O_RDONLY | getattr(os, "O_NONBLOCK", 0) | getattr(os, "O_CLOEXEC", 0) | getattr(os, "O_NOCTTY", 0)
    try:
        fd = os.open(path, flags)
    except FileNotFoundError:
        return None
    except OSError as exc:
        if exc.errno == 20:  # ENOTDIR: .agent is a file, so there is no settings file in it
            return None
        raise SettingsError(f"cannot read {label}: {exc.strerror or exc}") from None
    try:
        if not stat.S_ISREG(os.fstat(fd).st_mode):
            raise SettingsError(f"{label} is not a regular file")
        chunks, size = [], 0
        while True:
            chunk = os.read(fd, 65536)
            if not chunk:
                break
            size += len(chunk)
            if size > MAX_SETTINGS_BYTES:
                raise SettingsError(f"{label} is larger than {MAX_SETTINGS_BYTES // 1024} KiB")
            chunks.append(chunk)
    except OSError as exc:
        raise SettingsError(f"cannot read {label}: {exc.strerror or exc}") from None
    finally:
        os.close(fd)
    try:
        return b"".join(chunks).decode("utf-8")
    except UnicodeDecodeError:
        raise SettingsError(f"cannot read {label}: it is not UTF-8 text") from None


FOLDER_PREFIX = "folder:"
FOLDER_TRUSTED = "trusted"   # the content of a folder record


def folder_key(root_real: Path | str) -> str:
    """The trust store's key of a project folder (its resolved root)."""
    return FOLDER_PREFIX + str(root_real)


@dataclass(frozen=True)
class Record:
    """What the store holds for one settings file: the last accepted version."""

    key: str
    digest: str
    content: str | None      # the accepted text; None: the file was absent (or the record is unreadable)
    scripts: dict[str, str] = field(default_factory=dict)  # the hook scripts it names → their digests
    how: str = ""
    at: str = ""
    readable: bool = True    # False: a damaged record — evidence that a session ran, trusting nothing


class TrustStore:
    """``~/.agent-code/trust/``: one small JSON record per settings file."""

    def __init__(self, directory: Path) -> None:
        self.dir = Path(directory)

    def _file(self, key: str) -> Path:
        return self.dir / (hashlib.sha256(key.encode("utf-8")).hexdigest()[:40] + ".json")

    def get(self, key: str) -> Record | None:
        path = self._file(key)
        try:
            raw = path.read_text(encoding="utf-8")
        except FileNotFoundError:
            return None
        except (OSError, UnicodeDecodeError):
            return Record(key, "", None, readable=False)
        try:
            data = json.loads(raw)
            content = data["content"]
            scripts = data.get("scripts", {})
            if (not isinstance(data, dict) or data.get("path") != key
                    or not (content is None or isinstance(content, str))
                    or data.get("digest") != version_digest(content)
                    or not isinstance(scripts, dict)
                    or not all(isinstance(k, str) and isinstance(v, str) for k, v in scripts.items())):
                raise ValueError
        except (ValueError, KeyError, TypeError, AttributeError):
            return Record(key, "", None, readable=False)
        return Record(key, data["digest"], content, dict(scripts), str(data.get("how", "")), str(data.get("at", "")))

    def has(self, key: str) -> bool:
        return self._file(key).exists()

    def has_any(self) -> bool:
        try:
            return any(p.suffix == ".json" for p in self.dir.iterdir())
        except OSError:
            return False

    def folder(self, root_real: Path | str) -> Record | None:
        """The record of a trusted folder; None when the folder is not trusted (no record, or a
        damaged one: trusting nothing)."""
        record = self.get(folder_key(root_real))
        if record is None or not record.readable or record.content != FOLDER_TRUSTED:
            return None
        return record

    def trust_folder(self, root_real: Path | str, how: str) -> None:
        """Record the folder as trusted; raises OSError."""
        self.put(folder_key(root_real), FOLDER_TRUSTED, how)

    def put(self, key: str, content: str | None, how: str, scripts: dict[str, str] | None = None) -> None:
        """Record ``content`` (and the digests of the hook scripts it names) as the trusted
        version of ``key``; raises OSError."""
        self.dir.mkdir(parents=True, exist_ok=True, mode=0o700)
        record = {"path": key, "digest": version_digest(content), "content": content, "scripts": scripts or {},
                  "how": how,
                  "at": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime())}
        write_json_atomic(self._file(key), record, indent=1)


@dataclass
class SettingsFile:
    """One settings file as this start found it."""

    path: Path
    label: str
    key: str                 # the trust store's key
    group: str               # "user" or "project": first sight is decided per group
    text: str | None         # the current text; None: absent
    scripts: dict[str, str] = field(default_factory=dict)  # hook scripts its hooks name → digests now

    @property
    def digest(self) -> str:
        return version_digest(self.text)


@dataclass
class Change:
    """A settings file whose current version is not the trusted one."""

    file: SettingsFile
    record: Record | None    # the last accepted version (None: no record)
    kind: str                # changed, created, removed, unrecorded, scripts (only hook scripts changed)
    evidence: str = ""       # for unrecorded: what shows that a session ran with it

    @property
    def trusted_text(self) -> str | None:
        return self.record.content if self.record is not None else None

    def headline(self) -> str:
        label = self.file.label
        return {
            "changed": f"{label} changed since you last accepted it",
            "created": f"{label} is new since you last accepted the settings (it did not exist)",
            "removed": f"{label} was removed since you last accepted it",
            "scripts": f"{label} is as you accepted it, but a hook script it runs changed",
            "unrecorded": f"{label} has no usable trust record, but {self.evidence or 'a session ran here before'} "
                          "(was the file created by one, or its record deleted?)",
        }[self.kind]

    def summary(self) -> list[str]:
        """What changed in the keys that matter (see :func:`summarize`) and in the hook scripts."""
        lines = summarize(self.trusted_text, self.file.text) if self.kind != "scripts" else []
        before = self.record.scripts if self.record is not None else {}
        return lines + script_changes(before, self.file.scripts, unrecorded=self.kind == "scripts")


@dataclass
class Review:
    files: list[SettingsFile]
    changes: list[Change] = field(default_factory=list)
    first_sight: list[str] = field(default_factory=list)   # labels recorded as trusted now
    warnings: list[str] = field(default_factory=list)
    folder_trusted: bool = True  # False: the project's files were not reviewed (the folder is not trusted)

    def change_of(self, key: str) -> Change | None:
        return next((c for c in self.changes if c.file.key == key), None)


def review(files: list[SettingsFile], store: TrustStore, *, project_evidence: str | None,
           record_first_sight: bool = True) -> Review:
    """Compare each file's current version with its record; record first sights of the user's
    file (see the module doc). ``files`` holds the project's files only when their folder is
    trusted. ``project_evidence``: what shows that a session ran with the project's files (an
    earlier session of it, or of a project around it), None if nothing does."""
    out = Review(files)
    records = {f.key: store.get(f.key) for f in files}
    store_had_records = store.has_any()
    for group in ("user", "project"):
        members = [f for f in files if f.group == group]
        if not members:
            continue
        if group == "user":  # every start records it: any record, or any session of this project, shows one ran
            evidence = "agent-code has run with this home before" if store_had_records else project_evidence
        else:  # reviewed in a trusted folder only, whose trust recorded every project file: never first sight
            evidence = project_evidence or ("the other project settings file has a record"
                                            if any(records[f.key] is not None for f in members)
                                            else "its folder was trusted, and every project file recorded then")
        for f in members:
            record = records[f.key]
            if record is None:
                if evidence:
                    if f.text is not None:  # created during a session, or its record was deleted
                        out.changes.append(Change(f, None, "unrecorded", evidence))
                    continue  # absent and unrecorded: nothing to load, nothing to ask
                _first_sight(out, f, store, record_first_sight)
                continue
            change = _change_against(f, record, evidence)
            if change is not None:
                out.changes.append(change)
                if not record.readable:  # a damaged record is evidence for the group's later files too
                    evidence = change.evidence
    return out


def _first_sight(out: Review, f: SettingsFile, store: TrustStore, record: bool) -> None:
    """A file no record and no evidence speaks of: trusted as it is, and recorded (``record``)."""
    out.first_sight.append(f.label)
    if not record:
        return
    try:
        store.put(f.key, f.text, "first sight", f.scripts)
    except OSError as exc:
        if not out.warnings:
            out.warnings.append(store_warning(store, exc))


def _change_against(f: SettingsFile, record: Record, evidence: str | None) -> Change | None:
    """How ``f`` differs from its ``record`` (None: it does not)."""
    if record.readable and record.digest == f.digest:
        return Change(f, record, "scripts") if record.scripts != f.scripts else None
    if not record.readable:
        return Change(f, record, "unrecorded", "its record is damaged") if f.text is not None else None
    kind = "created" if record.content is None else "removed" if f.text is None else "changed"
    return Change(f, record, kind, evidence or "")


def store_warning(store: TrustStore, exc: OSError) -> str:
    return (f"cannot save settings trust records in {store.dir} ({exc.strerror or exc}): a settings "
            "change made during this session cannot be told from yours next time")


# --- what changed -------------------------------------------------------------------

def _parse(text: str | None) -> dict[str, Any] | None:
    if text is None:
        return None
    try:
        data = json.loads(text) if text.strip() else {}
    except ValueError:
        return None
    return data if isinstance(data, dict) else None


def visible(text: str) -> str:
    """``text`` with control and format characters escaped (``\\x1b``, ``\\u202e``): what is
    shown for acceptance cannot move the cursor, erase lines or reorder itself on screen."""
    import unicodedata

    return "".join(ch if unicodedata.category(ch)[0] != "C" else
                   (f"\\x{ord(ch):02x}" if ord(ch) < 0x100 else f"\\u{ord(ch):04x}" if ord(ch) < 0x10000
                    else f"\\U{ord(ch):08x}") for ch in text)


def _short(value: object, limit: int = 600) -> str:
    """A rule, hook command or key as shown for acceptance: escaped (:func:`visible`), and cut
    only with a count of what was left out (a long command cannot hide its tail)."""
    text = json.dumps(value, ensure_ascii=False, separators=(",", ":")) if not isinstance(value, str) else value
    text = visible(text)
    return text if len(text) <= limit else f"{text[:limit]}… (+{len(text) - limit} more characters)"


def _mapping(value: object) -> dict[str, Any]:
    """``value`` when it is a JSON object, else an empty one."""
    return value if isinstance(value, dict) else {}


def summarize(old_text: str | None, new_text: str | None) -> list[str]:
    """The differences that matter between two versions of a settings file: the
    ``permissions`` rules and ``defaultMode``, the ``hooks`` (each command added or
    removed), and which other keys changed. Lines like ``permissions.allow: + bash(curl:*)``."""
    old, new = _parse(old_text), _parse(new_text)
    if new_text is not None and new is None:
        return ["(the new version is not a valid settings file)"]
    old, new = old or {}, new or {}
    lines: list[str] = []
    old_p, new_p = _mapping(old.get("permissions")), _mapping(new.get("permissions"))
    if old_p.get("defaultMode") != new_p.get("defaultMode"):
        lines.append(f"permissions.defaultMode: {_short(old_p.get('defaultMode') or '(unset)')} → "
                     f"{_short(new_p.get('defaultMode') or '(unset)')}")
    for behavior in ("allow", "ask", "deny"):
        before = [_short(r) for r in old_p.get(behavior, [])] if isinstance(old_p.get(behavior), list) else []
        after = [_short(r) for r in new_p.get(behavior, [])] if isinstance(new_p.get(behavior), list) else []
        lines += [f"permissions.{behavior}: + {r}" for r in after if r not in before]
        lines += [f"permissions.{behavior}: - {r}" for r in before if r not in after]
    old_h, new_h = _mapping(old.get("hooks")), _mapping(new.get("hooks"))
    for event in sorted(set(old_h) | set(new_h)):
        before = _hook_lines(old_h.get(event))
        after = _hook_lines(new_h.get(event))
        lines += [f"hooks.{_short(event, 80)}: + {h}" for h in after if h not in before]
        lines += [f"hooks.{_short(event, 80)}: - {h}" for h in before if h not in after]
    others = sorted({k for k in set(old) | set(new) if k not in ("permissions", "hooks") and old.get(k) != new.get(k)}
                    | {f"permissions.{k}" for k in set(old_p) | set(new_p)
                       if k not in ("allow", "ask", "deny", "defaultMode") and old_p.get(k) != new_p.get(k)})
    if others:
        lines.append("other keys changed: " + ", ".join(_short(k, 80) for k in others))
    if not lines and old_text != new_text:
        lines.append("(no change to permissions or hooks: layout or formatting only)")
    return lines


def _hook_lines(matchers: object) -> list[str]:
    """One line per hook command: ``[matcher] command`` (raw JSON for odd shapes)."""
    if not isinstance(matchers, list):
        return [] if matchers is None else [_short(matchers)]
    out = []
    for matcher in matchers:
        hooks = matcher.get("hooks") if isinstance(matcher, dict) else None
        if not isinstance(hooks, list):
            out.append(_short(matcher))
            continue
        pattern = matcher.get("matcher") or "*"
        for spec in hooks:
            command = spec.get("command") if isinstance(spec, dict) else None
            out.append(f"[{_short(pattern, 40)}] {_short(command if isinstance(command, str) else spec)}")
    return out


# --- hook scripts ---------------------------------------------------------------------
# A trusted hook that runs ``./check.sh`` or ``python .agent/hooks/stop.py`` runs whatever
# that file holds now: the files a hook command runs directly are part of the trusted
# version (their digests), so a changed script is a change to accept, and until then the
# hooks naming it do not run. Only files named in the command itself are followed: a path
# in command position (``./x.sh``, ``$CLAUDE_PROJECT_DIR/x.sh``, ``~/bin/x``), or the script
# argument of an interpreter (``bash x.sh``, ``python3 -u x.py``, ``source x``); not what a
# program reads on its own (``pytest`` runs conftest.py: not covered).

INTERPRETERS = frozenset({"bash", "sh", "zsh", "dash", "ksh", "fish", "python", "python3", "node", "deno", "bun",
                          "ruby", "perl", "php", "lua", "source", ".", "Rscript"})
WRAPPERS = frozenset({"env", "exec", "nohup", "command", "builtin", "time", "nice", "xargs", "sudo"})
CODE_FLAGS = frozenset({"-c", "-e", "-m", "--eval", "-E", "--command"})
PROJECT_VARS = ("AGENT_CODE_PROJECT_DIR", "CLAUDE_PROJECT_DIR")
MAX_SCRIPT_BYTES = 64 << 20


def hook_commands(data: dict[str, Any] | None) -> list[str]:
    """Every hook command string of a settings object (any shape: unknown parts skipped)."""
    hooks = (data or {}).get("hooks")
    out = []
    for matchers in hooks.values() if isinstance(hooks, dict) else []:
        for matcher in matchers if isinstance(matchers, list) else []:
            specs = matcher.get("hooks") if isinstance(matcher, dict) else None
            for spec in specs if isinstance(specs, list) else []:
                if isinstance(spec, dict) and isinstance(spec.get("command"), str):
                    out.append(spec["command"])
    return out


def command_scripts(command: str) -> list[str]:
    """The words of a hook command that name a file it runs (see above), as written."""
    import shlex

    lexer = shlex.shlex(command, posix=True, punctuation_chars=";&|()<>")
    lexer.whitespace_split = True
    try:
        tokens = list(lexer)
    except ValueError:
        return []
    out: list[str] = []
    expect_command, after_interpreter, skip = True, False, False
    for token in tokens:
        if skip:
            skip = False
            continue
        if token.rstrip("&|") and all(c in "<>" for c in token.rstrip("&|")):
            skip = True  # a redirection's file: data, not a script
            continue
        if token and all(c in ";&|()" for c in token):
            expect_command, after_interpreter = True, False
            continue
        if expect_command:
            name, eq, _ = token.partition("=")
            if eq and name.isidentifier():
                continue  # VAR=value before the command
            if "/" in token:
                out.append(token)
            base = token.rsplit("/", 1)[-1]
            expect_command = base in WRAPPERS
            after_interpreter = base in INTERPRETERS
            continue
        if after_interpreter:
            if token in CODE_FLAGS:
                after_interpreter = False
            elif not token.startswith("-"):
                out.append(token)
                after_interpreter = False
    return out


def script_path(token: str, root: Path, home: Path) -> Path | None:
    """The file a script word names, with the hook's variables put in; None if unknown."""
    for var, value in [*((v, root) for v in PROJECT_VARS), ("HOME", home)]:
        for form in (f"${var}/", f"${{{var}}}/"):
            if token.startswith(form):
                token = f"{value}/{token[len(form):]}"
    if token.startswith("~/"):
        token = f"{home}/{token[2:]}"
    if "$" in token or "`" in token or any(c in token for c in "*?["):
        return None
    path = Path(token)
    return path if path.is_absolute() else Path(root) / path


def file_digest(path: Path) -> str | None:
    """``sha256:…`` of a regular file (through symlinks); None if it is not one."""
    flags = os.O_RDONLY | getattr(os, "O_NONBLOCK", 0) | getattr(os, "O_CLOEXEC", 0) | getattr(os, "O_NOCTTY", 0)
    try:
        fd = os.open(path, flags)
    except OSError:
        return None
    try:
        if not stat.S_ISREG(os.fstat(fd).st_mode):
            return None
        digest, size = hashlib.sha256(), 0
        while chunk := os.read(fd, 1 << 20):
            size += len(chunk)
            if size > MAX_SCRIPT_BYTES:
                return f"size>{MAX_SCRIPT_BYTES}"
            digest.update(chunk)
        return "sha256:" + digest.hexdigest()
    except OSError:
        return None
    finally:
        os.close(fd)


def hook_scripts(data: dict[str, Any] | None, root: Path, home: Path) -> dict[str, str]:
    """The files the hooks of a settings object run → their digests (``absent`` for a named
    file that does not exist: one that appears later is a change too)."""
    out: dict[str, str] = {}
    for command in hook_commands(data):
        for token in command_scripts(command):
            path = script_path(token, root, home)
            if path is not None:
                out[token] = file_digest(path) or ABSENT
    return out


def script_changes(before: dict[str, str], after: dict[str, str], unrecorded: bool = True) -> list[str]:
    """One line per hook script whose digest differs; ``unrecorded``: also those the record
    does not name (a new hook line already shows them otherwise)."""
    lines = []
    for token in sorted(set(before) | set(after)):
        old, new = before.get(token), after.get(token)
        if old == new or new is None:
            continue  # (a script only the old version ran: the hook line says it went)
        if old is None:
            if unrecorded:
                lines.append(f"hook script {_short(token)}: not in the accepted record")
            continue
        state = ("created" if old == ABSENT else "removed" if new == ABSENT else "changed")
        lines.append(f"hook script {_short(token)}: {state} since you accepted the settings")
    return lines


def drop_hooks_running(data: dict[str, Any] | None, tokens: set[str]) -> dict[str, Any] | None:
    """``data`` without the hook commands that run one of ``tokens`` (a copy; None for None)."""
    if data is None or not tokens or not isinstance(data.get("hooks"), dict):
        return data
    hooks: dict[str, Any] = {}
    for event, matchers in data["hooks"].items():
        kept_matchers = []
        for matcher in matchers if isinstance(matchers, list) else []:
            specs = matcher.get("hooks") if isinstance(matcher, dict) else None
            if not isinstance(specs, list):
                kept_matchers.append(matcher)
                continue
            kept = [spec for spec in specs if not (isinstance(spec, dict) and isinstance(spec.get("command"), str)
                                                   and tokens & set(command_scripts(spec["command"])))]
            if kept:
                kept_matchers.append({**matcher, "hooks": kept})
        hooks[event] = kept_matchers
    return {**data, "hooks": hooks}
