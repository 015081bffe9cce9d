"""git with the repository's executable config neutralised, for plan mode's read-only commands.

A "read-only" ``git status`` or ``git diff`` runs the programs that git's config names: the
fsmonitor hook (``core.fsmonitor``), textconv and external diff drivers (``diff.<driver>.*``
picked by ``.gitattributes``, ``diff.external``), clean/smudge filters (``filter.<driver>.*``:
``git status`` re-hashes files through them), pagers, hooks, gpg for signatures, ssh and
credential helpers for anything that reaches a remote. The repository's ``.git/config`` is
not something the user wrote: plan mode must not run it.

When the bash tool runs a command allowed only because it is read-only, ``git`` on its PATH is
a small shim that runs this file (``python -I -S readonly_git.py ARGS``, standard library only,
so it starts fast and imports nothing from the project's environment). For each git
invocation the shim

1. reads the effective config of the repository that invocation will use (same global
   options, so ``git -C other`` is judged on ``other``), includes resolved, with
   ``git config --list``, which runs nothing;
2. overrides every key that names a program with a harmless value through
   ``GIT_CONFIG_COUNT``/``GIT_CONFIG_KEY_n``/``GIT_CONFIG_VALUE_n`` (command-line scope: above
   every config file): textconv → ``cat``, external diff and gpg → ``false``, filters →
   empty (no filter), fsmonitor off, hooks from ``/dev/null``, pagers ``cat``, credential
   helpers cleared, every transport protocol ``never``; see :func:`neutralise`;
3. refuses (exit 128, with the key named) when the config holds a key that may name a
   program and is not one it knows how to neutralise — refusing is safer than guessing —
   and when the git is too old to honour ``GIT_CONFIG_COUNT`` (a probe key shows it);
4. runs the real git with ``--no-ext-diff`` added to ``diff``/``log``/``show``/``stash show``.

``GIT_EXEC_PATH`` points at the shim's directory too, so a git that git itself starts (the
``git status`` it runs inside each submodule, whose config is the submodule's own, and which
git starts with the ``GIT_CONFIG_*`` variables cleared) goes through the shim again. The
other git programs are not there: a read-only command needs none of them, and the ones that
reach remotes stay unreachable. ``GIT_CONFIG_PARAMETERS`` (``git -c``, which would outrank the
overrides) is removed, and the shim refuses ``-c``, ``--config-env`` and ``--exec-path``.
"""

from __future__ import annotations

import os
import sys

REAL_GIT_VAR = "AGENT_CODE_REAL_GIT"
PROBE_KEY = "agentcode.readonly"

# always set, whatever the config says
STATIC_OVERRIDES: tuple[tuple[str, str], ...] = (
    ("core.fsmonitor", "false"),
    ("core.hooksPath", "/dev/null"),
    ("core.pager", "cat"),
    ("core.editor", "false"),
    ("sequence.editor", "false"),
    ("core.askPass", ""),
    ("core.sshCommand", "false"),
    ("credential.helper", ""),  # an empty value clears the list of helpers
    ("gpg.program", "false"),
    ("gpg.openpgp.program", "false"),
    ("gpg.x509.program", "false"),
    ("gpg.ssh.program", "false"),
    ("log.showSignature", "false"),
    ("protocol.allow", "never"),
)

# (section, subsection given?, name) -> the harmless value; names and sections lower-case
_NEUTRAL: dict[tuple[str, bool, str], str] = {
    ("diff", True, "textconv"): "cat",         # the file as it is
    ("diff", True, "cachetextconv"): "false",  # would write refs/notes/textconv/*
    ("diff", True, "command"): "false",        # external diff driver: fails instead of running
    ("diff", False, "external"): "false",
    ("filter", True, "clean"): "",              # empty: no filter
    ("filter", True, "smudge"): "",
    ("filter", True, "process"): "",
    ("filter", True, "required"): "false",
    ("credential", False, "helper"): "",
    ("credential", True, "helper"): "",
    ("gpg", False, "program"): "false",
    ("gpg", True, "program"): "false",
    ("gpg", True, "defaultkeycommand"): "false",
    ("protocol", True, "allow"): "never",
    ("interactive", False, "difffilter"): "false",
    ("core", False, "fsmonitor"): "false",
    ("core", False, "usebuiltinfsmonitor"): "false",
    ("core", False, "hookspath"): "/dev/null",
    ("core", False, "pager"): "cat",
    ("core", False, "editor"): "false",
    ("core", False, "askpass"): "",
    ("core", False, "sshcommand"): "false",
    ("sequence", False, "editor"): "false",
}
# sections whose programs the read-only subcommands never start: other git commands
# (difftool, mergetool, send-email, gui; help/man/browser, as the shim refuses --help), or
# transports (remotes, url rewriting, proxies), which protocol.allow=never and
# GIT_ALLOW_PROTOCOL keep closed
_UNREACHABLE_SECTIONS = frozenset({
    "difftool", "mergetool", "sendemail", "gui", "guitool", "citool", "instaweb", "man",
    "browser", "web", "help", "remote", "url", "http", "https", "ssh", "uploadpack", "receive",
    "fetch", "push", "transfer", "clone", "submodule", "merge", "rebase", "am", "format", "gc",
    "maintenance", "include", "includeif", "lfs", "trace2", "fsmonitor",
})
_UNREACHABLE_KEYS = frozenset({("core", "gitproxy"), ("core", "alternaterefscommand"), ("diff", "tool"),
                               ("diff", "guitool")})
# a key whose name holds one of these may name a program: unknown ones are refused
_PROGRAM_WORDS = ("command", "cmd", "program", "helper", "hook", "textconv", "driver", "editor", "pager",
                  "askpass", "proxy", "process", "clean", "smudge", "browser", "viewer", "exec", "fsmonitor",
                  "filter", "tool", "shell")


def split_key(key: str) -> tuple[str, str | None, str]:
    """``diff.My.Driver.textconv`` → ``("diff", "My.Driver", "textconv")`` (section and name
    lower-cased, the subsection as written)."""
    section, _, rest = key.partition(".")
    sub, _, name = rest.rpartition(".")
    return section.lower(), (sub or None), name.lower()


def neutralise(keys: list[str]) -> tuple[list[tuple[str, str]], str | None]:
    """The overrides for a config holding ``keys`` (static ones first), and why git must not
    run at all (None: it may, with the overrides)."""
    overrides = list(STATIC_OVERRIDES)
    seen = set()
    for key in keys:
        section, sub, name = split_key(key)
        value = _NEUTRAL.get((section, sub is not None, name))
        if value is not None:
            if key not in seen:
                seen.add(key)
                overrides.append((key, value))
            continue
        if section in _UNREACHABLE_SECTIONS or (section, name) in _UNREACHABLE_KEYS:
            continue
        if section == "pager" and sub is None:  # pager.<command>: a pager for that command
            overrides.append((key, "false"))
            continue
        if section == "alias":  # an empty alias fails ("'' is not a git command") and runs nothing
            overrides.append((key, ""))
            continue
        if any(word in name for word in _PROGRAM_WORDS) or section == "hook":
            return overrides, (f"git config key {key} may name a program, and plan mode cannot neutralise it; "
                               "ask the user to run this git command, or leave plan mode")
    return overrides, None


def config_env(overrides: list[tuple[str, str]]) -> dict[str, str]:
    env = {"GIT_CONFIG_COUNT": str(len(overrides))}
    for i, (key, value) in enumerate(overrides):
        env[f"GIT_CONFIG_KEY_{i}"] = key
        env[f"GIT_CONFIG_VALUE_{i}"] = value
    return env


def without_config_env(environ: dict[str, str] | os._Environ) -> dict[str, str]:
    """``environ`` minus every variable that adds config above the files (``git -c``)."""
    return {k: v for k, v in environ.items()
            if k not in ("GIT_CONFIG_PARAMETERS", "GIT_CONFIG_COUNT", "GIT_CONFIG")
            and not k.startswith(("GIT_CONFIG_KEY_", "GIT_CONFIG_VALUE_"))}


# global options (before the subcommand) that take the next word as their value
_GLOBAL_WITH_VALUE = frozenset({"-C", "-c", "--git-dir", "--work-tree", "--namespace", "--config-env",
                                "--super-prefix", "--attr-source"})
_GLOBAL_REFUSED = ("-c", "--config-env", "--exec-path")


def subcommand_index(args: list[str]) -> int:
    """Where the subcommand is in git's arguments (``len(args)``: there is none)."""
    i = 0
    while i < len(args) and args[i].startswith("-"):
        i += 2 if args[i] in _GLOBAL_WITH_VALUE else 1
    return min(i, len(args))


def refused_global(globals_: list[str]) -> str | None:
    for arg in globals_:
        if arg in _GLOBAL_REFUSED or arg.startswith(tuple(o + "=" for o in _GLOBAL_REFUSED)):
            return arg
    return None


def config_keys(listing: bytes) -> list[str]:
    """The keys of ``git config --list -z`` output (``key\\nvalue\\0``, or ``key\\0``)."""
    keys = []
    for record in listing.split(b"\0"):
        if record:
            keys.append(record.split(b"\n", 1)[0].decode("utf-8", errors="replace"))
    return keys


def with_no_ext_diff(args: list[str], at: int) -> list[str]:
    """``args`` with ``--no-ext-diff`` right after a diff-producing subcommand."""
    if at >= len(args):
        return args
    sub = args[at]
    if sub in ("diff", "log", "show"):
        return args[:at + 1] + ["--no-ext-diff"] + args[at + 1:]
    if sub == "stash" and args[at + 1:at + 2] == ["show"]:
        return args[:at + 2] + ["--no-ext-diff"] + args[at + 2:]
    return args


def _capture(argv: list[str], env: dict[str, str]) -> tuple[int, bytes, bytes]:
    """Run ``argv`` (stdin from /dev/null); its exit code, stdout and stderr. (posix_spawn
    rather than subprocess, whose import alone costs the shim more than git does.)"""
    out_r, out_w = os.pipe()
    err_r, err_w = os.pipe()
    actions = [(os.POSIX_SPAWN_OPEN, 0, os.devnull, os.O_RDONLY, 0),
               (os.POSIX_SPAWN_DUP2, out_w, 1), (os.POSIX_SPAWN_DUP2, err_w, 2)]
    try:
        pid = os.posix_spawn(argv[0], argv, env, file_actions=actions)
    finally:
        os.close(out_w)
        os.close(err_w)
    chunks: dict[int, list[bytes]] = {out_r: [], err_r: []}
    for fd in (out_r, err_r):  # git config writes little to stderr: reading stdout first cannot block
        while chunk := os.read(fd, 65536):
            chunks[fd].append(chunk)
        os.close(fd)
    _, status = os.waitpid(pid, 0)
    return os.waitstatus_to_exitcode(status), b"".join(chunks[out_r]), b"".join(chunks[err_r])


def _refuse(message: str) -> int:
    sys.stderr.write(f"agent-code (plan mode): git was not run: {message}\n")
    return 128


def main(args: list[str]) -> int:
    real = os.environ.get(REAL_GIT_VAR)
    if not real:
        return _refuse(f"{REAL_GIT_VAR} is not set")
    at = subcommand_index(args)
    bad = refused_global(args[:at])
    if bad is not None:
        return _refuse(f"git option {bad} is not allowed (it can change what git runs)")
    if args[at:at + 1] == ["help"] or "--help" in args[at:]:
        return _refuse("git help starts a manual viewer or browser that git's config can name")
    env = without_config_env(os.environ)
    # the probe shows that this git honours GIT_CONFIG_COUNT (git 2.31 and later): an older
    # one would ignore every override
    probe = {**env, **config_env([(PROBE_KEY, "1")])}
    code, listing, errors = _capture([real, *args[:at], "config", "--list", "-z", "--includes"], probe)
    if code != 0:
        sys.stderr.write(errors.decode("utf-8", errors="replace"))
        return _refuse("its config could not be read")
    keys = config_keys(listing)
    if PROBE_KEY not in keys:
        return _refuse("this git is too old to have its config overridden (GIT_CONFIG_COUNT needs git 2.31)")
    overrides, refusal = neutralise([k for k in keys if k != PROBE_KEY])
    if refusal is not None:
        return _refuse(refusal)
    env.update(config_env(overrides))
    sys.stdout.flush()
    os.execve(real, [real, *with_no_ext_diff(args, at)], env)
    return 127  # not reached


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
