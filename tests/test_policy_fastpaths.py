"""Fast paths of the policy package against the general paths they stand in for.

The permission check runs on every bash call, so some of its steps take a shorter way for
the usual case (a word that names nothing that exists, …). Each test here runs the same
inputs through the fast path and through the general one (the fast path switched off, or a
copy of the code it replaced) and requires the same answer on inputs chosen to trip it:
symlinks into protected places, dangling links, link loops, ``..`` after a link, files used
as directories, unreadable directories, over-long names, globs, ``~``."""

from __future__ import annotations

import os
import posixpath
import stat
from pathlib import Path

import pytest

from agent_code.policy import denylist as dl
from agent_code.policy import self_protection as sp
from agent_code.policy.shell_syntax import UNKNOWN, UNKNOWN_QUOTED, escape


# --- _real: os.access before os.lstat ---------------------------------------------------

def _real_by_lstat(path: str, cache: dict[str, str]) -> str:
    """``self_protection._real`` as it was before the os.access shortcut: one lstat per
    new component, the errors caught."""
    known = cache.get(path)
    if known is not None:
        return known
    parent, _, name = path.rpartition("/")
    if not name:
        real = path
    else:
        parent = parent or "/"
        above = cache.get(parent) or _real_by_lstat(parent, cache)
        full = above + "/" + name if above != "/" else "/" + name
        if sp._ABSENT + above in cache:
            is_link = False
            cache[sp._ABSENT + full] = full
        else:
            try:
                is_link = stat.S_ISLNK(os.lstat(full).st_mode)
            except (FileNotFoundError, NotADirectoryError):
                is_link = False
                cache[sp._ABSENT + full] = full
            except (OSError, ValueError):
                is_link = False
        real = os.path.realpath(full) if is_link else full
    cache[path] = real
    return real


@pytest.fixture
def tree(tmp_path: Path):
    """A project full of traps, and the home directory beside it."""
    root = tmp_path / "project"
    home = tmp_path / "home"
    (root / ".agent").mkdir(parents=True)
    (root / ".agent" / "settings.json").write_text("{}")
    (root / ".git" / "hooks").mkdir(parents=True)
    (root / ".git" / "config").write_text("[core]\n")
    (root / "src" / "deep").mkdir(parents=True)
    (root / "file.txt").write_text("x")               # a file used as a directory: ENOTDIR
    (home / ".agent-code").mkdir(parents=True)
    links = {
        "to_agent": ".agent",                             # a link to a protected directory
        "to_settings": ".agent/settings.json",            # … to a protected file
        "dangling_into_agent": ".agent/new-file",         # dangling, its target would be created there
        "dangling": "nowhere/deeper",                     # dangling, into nothing
        "loop1": "loop2", "loop2": "loop1",               # ELOOP
        "self": "self",
        "abs_to_git": str(root / ".git" / "hooks"),       # absolute target
        "src/up_to_git": "../.git",                       # a relative target with ..
        "src/deep/up2": "../../to_agent",                 # a link to a link
        "to_home_dir": str(home / ".agent-code"),
        "to_file_txt": "file.txt",
        "plus+link": ".agent",                            # names _PLAIN leaves to the general path
        "paren(1)": ".git",
        "dangling_dir/x": None,                           # (made below: a link inside a missing dir)
    }
    for name, target in links.items():
        if target is not None:
            os.symlink(target, root / name)
    locked = root / "locked"
    (locked / "inner").mkdir(parents=True)
    os.symlink("../../.agent", locked / "inner" / "to_agent")
    locked.chmod(0)                                       # EACCES below it (when not root)
    yield root, home
    locked.chmod(0o755)


def _paths(root: Path, home: Path) -> list[str]:
    names = ["to_agent", "to_settings", "dangling_into_agent", "dangling", "loop1", "loop2", "self",
             "abs_to_git", "src/up_to_git", "src/deep/up2", "src/deep", "src", "to_home_dir", "to_file_txt",
             "file.txt", "missing", "missing/deeper", "locked", "locked/inner", "locked/inner/to_agent",
             ".agent", ".git", "dangling_dir", "x" * 300, "src/" + "y" * 300 + "/z"]
    tails = ["", "/child", "/child/grandchild", "/settings.json", "/hooks", "/hooks/pre-commit", "/x/y/z"]
    out = [str(root), str(home), "/", str(root.parent)]
    for name in names:
        for tail in tails:
            out.append(f"{root}/{name}{tail}")
    out += [f"{home}/.agent-code/trust", f"{home}/missing/x", "/nonexistent/a/b", "/etc/passwd", "/proc/self/root"]
    return out


def test_real_takes_the_same_answer_as_lstat_alone(tree):
    root, home = tree
    paths = _paths(root, home)
    for path in paths:  # each from a fresh cache
        assert sp._real(path, {}) == _real_by_lstat(path, {}), path
    fast: dict[str, str] = {}
    slow: dict[str, str] = {}
    for order in (paths, list(reversed(paths)), paths):  # one cache each: what earlier paths left counts
        for path in order:
            assert sp._real(path, fast) == _real_by_lstat(path, slow), path


def test_real_matches_realpath(tree):
    """Without ``..`` a resolved path is ``os.path.realpath``'s (which follows every link)."""
    root, home = tree
    for path in _paths(root, home):
        try:
            expected = os.path.realpath(path)
        except OSError:
            continue
        if "loop" in path or "/self" in path:
            continue  # realpath leaves a loop as it stands; _real keeps what it could resolve
        assert sp._real(path, {}) == expected, path


def _words(root: Path, home: Path) -> list[str]:
    rel = ["to_agent", "to_agent/settings.json", "to_settings", "dangling_into_agent", "dangling", "dangling/x",
           "loop1/x", "self", "abs_to_git/pre-commit", "src/up_to_git/config", "src/deep/up2/x", "src/deep/../..",
           "src/../.agent", "to_agent/..", "to_agent/../file.txt", "file.txt/x", "locked/inner/to_agent/x",
           "missing/../.git/config", "./to_agent", "src//up_to_git", "src/", "src/app.py", "-q", "--output=x",
           "to_home_dir/settings.json", "to_file_txt", ".", "..", "../project/.agent", "x" * 300,
           "to_ag*", "to_agent/*", "src/*/up2", ".ag*", "~/.agent-code", "~/x", "~root/x", "$HOME/.gitconfig",
           "{to_agent,src}/x", "src/{a,b}", "+(x)", "print(1)", "+%Y%m%d", "a b", "s/a/b/g",
           "plus+link", "plus+link/settings.json", "paren(1)/config", "paren(1)", "+x/.git/../y", "x/.agent/../+y",
           "a@b", "!x", "@(x)", "!(x)", "x/+(y)", "(x", "x)", ".+x", "+/.x", "a+b/.agent", "/tmp/+x", "+%s",
           # globs and expansions of relative words (their verdict in an unknown directory)
           "*.pyc", "src/*.py", "--exclude=*.pyc", "*/.git", "x/.g*", "to_agent/*.json", "[t]o_agent/x", ".[g]it",
           "$X", "$X/y", "a$(b)/c", "`x`/.git", "src/$X", "to_agent/$X", "x$HOME", "x/$(y)*", "*$X", "@(.git)/x",
           "+(to_agent)", "x/!(y)", "?", "[", "x[", "-*", "$HOME/x", "$HOME/*.py", "${HOME}/x", "$PWD/x",
           "s/VERSION = .*/VERSION = '$(cat VERSION)'"]
    absolute = [f"{root}/{w}" for w in rel[:20]] + [f"{home}/.gitconfig", "/tmp/x", "/"]
    return rel + absolute


def _general_paths_only(monkeypatch) -> None:
    """Every shortcut of self-protection off."""
    monkeypatch.setattr(sp, "_ACCESS_NOFOLLOW", False)
    monkeypatch.setattr(sp, "_SKIP_REPEATS", False)
    monkeypatch.setattr(sp, "_is_plain", lambda word: sp._PLAIN.fullmatch(word) is not None)
    monkeypatch.setattr(sp, "_ONLY_READERS", frozenset())
    # (a data descriptor on the class: read before the field each Places holds in its __dict__)
    monkeypatch.setattr(sp.Places, "root_is_plain", property(lambda self: False), raising=False)


@pytest.mark.parametrize("via_link", [False, True])
@pytest.mark.parametrize("cwd_unknown", [False, True])
def test_words_are_judged_the_same_without_the_shortcut(tree, monkeypatch, cwd_unknown, via_link):
    root, home = tree
    if via_link:  # the project reached through a symlink: every word's real path differs from its text
        os.symlink(root, root.parent / "link_to_project")
        root = root.parent / "link_to_project"
    places = sp.Places.of(root, home)
    words = _words(root, home)

    def judge_all() -> list[object]:
        shell = sp._Shell(places, places.root, cwds=(places.root, root / "src") if not cwd_unknown
                          else (places.root,), cwd_unknown=cwd_unknown)
        shared = [sp.judge_word(w, shell) for w in words]
        alone = [sp.judge_word(w, sp._Shell(places, places.root)) for w in words]
        edits = [sp.protected_path(w, places) for w in words]
        return [shared, alone, edits]

    fast = judge_all()
    _general_paths_only(monkeypatch)
    assert judge_all() == fast
    assert any(v is not None and v[0] == "deny" for v in fast[0])  # the traps are there


# --- the deny list: possibly_protected and is_protected ---------------------------------

def _is_protected_before(word: str, home: str | None = None) -> bool:
    """``denylist.is_protected`` before it judged a word without a home prefix once and
    normalized the home once."""
    path = dl.normalize_path(word)
    for candidate in (path, dl.normalize_path(dl._with_home(word, home))):
        base = candidate.removesuffix("/*")
        if base in ("", "/") or candidate == "/*":
            return True
        if base in dl.SYSTEM_DIRS:
            return True
        if base in ("~", "$HOME"):
            return True
        if home and base in (dl.normalize_path(home), posixpath.dirname(dl.normalize_path(home))):
            return True
        if dl._DOTDOTS.fullmatch(base):
            return True
        if base == dl.UNKNOWN_DIRECTORY:
            return True
    return False


def _protected_names_before(home: str | None) -> frozenset[str]:
    names = {d.rsplit("/", 1)[1] for d in dl.SYSTEM_DIRS}
    if home:
        names.add(dl.normalize_path(home).rsplit("/", 1)[-1])
    return frozenset(names)


def _alternative_protected_before(p: str, home: str | None) -> bool:
    """``denylist._alternative_protected`` before a literal last name skipped its regex and
    the candidates were made once: every name tried through the glob's regex."""
    tilde = dl._TILDE.match(p)
    if tilde:
        user = tilde.group(1)
        if user == "":
            p = escape(home) + p[1:] if home else p
        else:
            p = UNKNOWN_QUOTED + p[tilde.end():]
    if UNKNOWN in p or UNKNOWN_QUOTED in p:
        comps = p.split("/")
        while len(comps) > 1 and comps[-1] in ("", "."):
            comps.pop()
        last = comps[-1]
        if UNKNOWN in last or UNKNOWN_QUOTED in last or last in ("..", "", "~"):
            return True
        regex = dl._glob_regex(last)
        return any(regex.fullmatch(name) for name in _protected_names_before(home))
    if not dl._is_glob(p):
        return _is_protected_before(dl._unescape(p), home)
    path = dl._SLASHES.sub("/", p)
    path = dl._DOT_DIRS.sub(dl._GROUP_1, path)
    path = path.rstrip("/") or "/"
    if ".." in path.split("/"):
        path = posixpath.normpath(path)
    regex = dl._glob_regex(path)
    candidates = ["/", *dl.SYSTEM_DIRS, "..", "../..", "../../..", "./.."]
    if home:
        candidates += [dl.normalize_path(home), posixpath.dirname(dl.normalize_path(home))]
    if any(regex.fullmatch(c) for c in candidates):
        return True
    parent, _, last = path.rpartition("/")
    parent = parent or ("/" if path.startswith("/") else ".")
    if dl._is_glob(last) and not dl._is_glob(parent) and _is_protected_before(dl._unescape(parent), home):
        last_regex = dl._glob_regex(last)
        return (sum(bool(last_regex.fullmatch(probe)) for probe in dl._PROBES) >= 3
                or sum(bool(last_regex.fullmatch(probe)) for probe in dl._DOT_PROBES) >= 3)
    return False


def _possibly_protected_before(pattern: str, home: str | None = None) -> bool:
    if UNKNOWN not in pattern and UNKNOWN_QUOTED not in pattern and not dl._SPECIAL.search(pattern):
        return _is_protected_before(pattern, home)
    return any(_alternative_protected_before(alt, home) for alt in dl.brace_alternatives(pattern))


_LASTS = ["build", "etc", "usr", "bin", "alice", "root", "home", "b\\in", "e\\tc", "\\*", "\\[x", "x\\",
          "\\\\", "\\\\*", "\\\\\\*", "[", "[ab]", "[!a]", "[e]tc", "e?c", "*", "?", "*.py", "u*", "us?", "al*",
          "..", ".", "", "~", "~alice", "a]b", "\\]", "*\\", "lib64", "snap", "Users", "\n", "a\nb", ".*",
          ".??*", ".[!.]*", ".s*"]
_HEADS = ["", "/", "//", "./", "../", "/tmp/", "/tmp/../", "~/", "~", "~alice/", "~+/", "$HOME/", "${HOME}/",
          UNKNOWN, UNKNOWN_QUOTED, UNKNOWN + "/", UNKNOWN_QUOTED + "/", "/" + UNKNOWN + "/", "a/" + UNKNOWN + "/x/",
          "/home/", "/home/alice/", "{/,/tmp/}", "{a,b}/", "/e\\tc/", "/proc/1/cwd/", "/dev/fd/3/"]
_TAILS = ["", "/", "/.", "/*", "/..", "/./", "//"]


@pytest.mark.parametrize("home", [None, "", "/home/alice", "/home/alice/", "/root", "/", "/Users/x y"])
def test_possibly_protected_is_what_it_was(home):
    patterns = {head + last + tail for head in _HEADS for last in _LASTS for tail in _TAILS}
    for pattern in sorted(patterns):
        assert dl.possibly_protected.__wrapped__(pattern, home) == _possibly_protected_before(pattern, home), \
            (pattern, home)
        assert dl.is_protected.__wrapped__(pattern, home) == _is_protected_before(pattern, home), (pattern, home)
    assert any(_possibly_protected_before(p, home) for p in patterns)
    assert not all(_possibly_protected_before(p, home) for p in patterns)


# --- whole command lines: self-protection and the deny list with every shortcut off -----

_TRICKY_LINES = [
    "cat -o .git/config x", "ls --output=.agent/x", "grep -o .agent x", "head -n 3 .git/config", "wc -l < .git/config",
    "echo x > .git/config", "echo x >> to_agent/settings.json", "cat x | tee .git/hooks/pre-commit", "cat x > y",
    "sudo cat .git/config", "env -C .agent cat x", "xargs cat < list", "printf '%s' x -o .agent/a",
    "sort -o .git/config x", "sort --output=to_agent/x y", "cd to_agent && cat settings.json > out",
    "cd \"$(git rev-parse --show-toplevel)\" && ls -o to_settings && echo done -O .git/x", "tree -o .agents/skills/x",
    "du --output .git/x", "echo $(cat .git/config) > src/out", "comm -o ~/.gitconfig a b", "test -o .git/x",
    "find . -name '*.pyc' -delete", "rm -rf build dist", "cd /tmp && rm -rf *", "cd $X && rm -rf etc",
    "cd $X && rm -rf build", "cd / && chmod -R 777 usr", "cd /dev && tee sda < x", "cd /etc && rm passwd",
    "cd \"$D\" && mv * /tmp", "cd ~ && rm -rf *", "pushd $X && find . -delete", "cd $X; tee ../../etc/passwd",
    # the deny list's second look under a cd's directory, known and unknown
    "cd $X && tee sda", "cd \"$X/dev\" && tee sda", "cd \"$X\"/dev && shred sda1", "cd /dev && shred sda1",
    "cd $X && dd if=x of=sda", "cd /dev && dd if=x of=sda", "cd $(pwd)/dev && truncate -s 0 nvme0n1",
    "cd $X && cp x passwd", "cd /etc && cp x passwd", "cd \"$X/etc\" && rm passwd", "cd ${X}etc && mv a passwd",
    "cd $(pwd)/../../etc && sed -i s/a/b/ passwd", "cd /etc && sed -i s/a/b/ shadow", "cd $X && tee -a sudoers",
    "cd /proc/sys && tee kernel/x", "cd $X && echo 1 > sysrq-trigger", "cd /proc && tee sysrq-trigger",
    "cd / && tar xf x.tar", "cd $X && tar xf x.tar -C .", "cd $X && chmod -R 777 .", "cd $X && chown -R a *",
    "cd ~alice && rm -rf *", "cd - && rm -rf *", "cd $X && rm -rf ../..", "cd $X && find . -exec rm {} +",
    "cd $X && rsync -a --delete src/ .", "cd $X && mv etc /tmp", "cd $X && cp -r x/. /", "cd $X && systemctl reboot",
    "cd $X && mkfs.ext4 sda", "cd $X && install x /usr/bin/y", "cd $X && ln -sf x passwd", "cd \"$X\" && tee ../dev/sda",
    # words with "+", "@", "!", "(" (no extglob) that are judged as plain ones
    "rm plus+link/settings.json", "touch 'paren(1)/config'", "rm +x/.git/../y", "chmod +x paren\\(1\\)/hooks/x",
    "cd $X && touch plus+link/x", "date +%s > out", "touch 'a@b' '!x'", "rm '+(x)' '@(.git)' '!(x)'",
]


def _corpus() -> list[str]:
    import sys

    sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
    from bench.policy_parse import PIECES, command_line, typical_lines
    from tests import test_policy_decision_table as table
    from tests import test_self_protection as selfp

    lines = [*_TRICKY_LINES, *_REPEATS, command_line(2048), *PIECES, *typical_lines(2048).values()]
    lines += [command for command, _, _ in table.TABLE]
    lines += [*selfp.DENIED_COMMANDS, *selfp.MAYBE_COMMANDS, *selfp.NOT_ALLOWED_COMMANDS, *selfp.ALLOWED_COMMANDS]
    return list(dict.fromkeys(lines))


def test_command_lines_are_judged_the_same_without_the_shortcuts(tree, monkeypatch):
    """Self-protection's findings and the deny list's hits for several hundred lines (the
    decision table, the self-protection tests', the bench's) in a project full of links."""
    from agent_code.policy.commands import analyze, clear_caches

    root, home = tree
    places = sp.Places.of(root, home)
    lines = _corpus()
    assert len(lines) > 400

    def judge_all() -> list[object]:
        clear_caches()
        out: list[object] = []
        for line in lines:
            analysis = analyze(line)
            out.append((sp.check_command(analysis, places), list(dl.hits(analysis, str(home)))))
        return out

    fast = judge_all()
    _general_paths_only(monkeypatch)
    monkeypatch.setattr(dl, "_SAME_UNDER_ANY_BASE", frozenset())
    monkeypatch.setattr(dl, "_SAME_UNDER_AN_UNKNOWN_BASE", frozenset())
    assert judge_all() == fast
    assert sum(finding is not None and finding.severity == "deny" for finding, _ in fast) > 50
    assert sum(bool(hits) for _, hits in fast) > 100


class _Everything:
    """A set that holds every name (turns a ``name not in SET`` shortcut off)."""

    def __contains__(self, item: object) -> bool:
        return True


def test_command_lines_are_analysed_the_same_without_the_shortcuts(monkeypatch):
    """commands.analyze: an ordinary program's command made in _simple, as _expand_argv makes it."""
    from agent_code.policy import commands

    lines = _corpus() + ["/bin/rm -rf /", "$X -rf /", "\\rm x", "'' x", "for c in ls rm; do $c -rf /; done",
                         "x=$(ls) y", "git -c core.pager=less log", "make -f - < x", "bash -c 'rm -rf /'", "nice rm x"]

    def analyse_all() -> list[object]:
        commands.clear_caches()
        out = []
        for line in lines:
            analysis = commands.analyze(line)
            out.append((analysis, [c.program for c in analysis.commands]))
        return out

    fast = analyse_all()
    monkeypatch.setattr(commands, "_NOT_ORDINARY", _Everything())
    assert analyse_all() == fast


def _glob_regex_source_before(pattern: str) -> str:
    """``denylist._glob_regex``'s regex before runs of literal characters were escaped at
    once: one character at a time (brackets read as it reads them now: classes, "]" first)."""
    import re

    out, i = [], 0
    while i < len(pattern):
        c = pattern[i]
        at_start = i == 0 or pattern[i - 1] == "/"
        if c == "\\" and i + 1 < len(pattern):
            out.append(re.escape(pattern[i + 1]))
            i += 2
            continue
        if c == "*":
            out.append(("(?!\\.)" if at_start else "") + "[^/]*")
        elif c == "?":
            out.append(("(?!\\.)" if at_start else "") + "[^/]")
        elif c == "[":
            end = dl._bracket_end(pattern, i)
            if end == -1:
                out.append(re.escape(c))
            else:
                body = pattern[i + 1:end].replace("\\", "\\\\")
                if body.startswith("!"):
                    body = "^" + body[1:]
                out.append(dl._bracket(body))
                i = end + 1
                continue
        else:
            out.append(re.escape(c))
        i += 1
    return "".join(out)


def test_glob_regex_is_what_it_was():
    patterns = {head + last + tail for head in _HEADS for last in _LASTS for tail in _TAILS}
    patterns |= {"a.b-c+d(e)|f^g$h", "[]x]", "[!]x]*", "x\\", "\\", "[", "[a", "a[b]c", "é*ü?", "\x00*", "a\\\nb",
                 "[[:alpha:]]*", "[z-a]", "[[:alpha:]", "[![:digit:]x]"}
    for pattern in sorted(patterns):
        assert dl._glob_regex.__wrapped__(pattern).pattern == _glob_regex_source_before(pattern), pattern


def _normalize_before(argv: tuple[str, ...], paths: bool):
    """``commands._normalize`` before it spared normalize_path the words it leaves as they are."""
    from agent_code.policy import commands as c

    program = c.program_name(argv[0])
    aliases = c.FLAG_ALIASES.get(program, {})
    takes_value = c.VALUE_OPTIONS.get(program, frozenset())
    flags: list[tuple[str, str | None]] = []
    operands: list[str] = []
    i, options_done = 1, False
    while i < len(argv):
        word = argv[i]
        i += 1
        if options_done or word == "-" or not word.startswith("-") or len(word) == 1:
            operands.append(c.normalize_path(word) if paths else word)
            continue
        if word == "--":
            options_done = True
            continue
        if word.startswith("--"):
            name, eq, value = word.partition("=")
            name = c.long_option(program, name)
            if not eq and name in takes_value and i < len(argv):
                value, eq = argv[i], "="
                i += 1
            flags.append((aliases.get(name, name), value if eq else None))
            continue
        if word[:2] in takes_value:
            if len(word) > 2:
                flags.append((word[:2], word[2:]))
            elif i < len(argv):
                flags.append((word, argv[i]))
                i += 1
            else:
                flags.append((word, None))
            continue
        if word[1:].isalpha() and program not in c.SINGLE_DASH_LONG:
            for letter in word[1:]:
                flag = "-" + letter
                flags.append((aliases.get(flag, flag), None))
        else:
            flags.append((aliases.get(word, word), None))
    return c.Invocation(program, tuple(flags), tuple(operands))


def test_normalize_and_with_home_are_what_they_were():
    from agent_code.policy import commands as c

    words = ["x", "-", "--", "-r", "-rf", "--rec", "--target-directory=d", "-t", "d", ".", "..", "./x", "x/", "//x",
             "/proc/1/root/etc", "/proc/self/cwd/x", "/dev/fd/3", "~", "~/x", "~alice", "$HOME", "${HOME}", "${HOME}/x",
             "a${HOME}", "a${X}b", "$X/..", "a$b", "x//y/./z/..", "${", "-C", "dir", "-Cdir", "-n5", "-O2", "é/../x",
             UNKNOWN, UNKNOWN_QUOTED + "/x", "\\$HOME", "$(x)", "--", "-x", "-"]
    programs = ["rm", "/bin/rm", "git", "mv", "cp", "find", "chmod", "ln", "tar", "sed", "x"]
    argvs = [(p, *words[k:k + 5]) for p in programs for k in range(len(words))]
    from agent_code.policy.commands import analyze

    for line in _corpus():
        for command in analyze(line).commands:
            if command.argv:
                argvs += [command.argv, command.patterns or command.argv]
    for argv in argvs:
        for paths in (True, False):
            assert c._normalize.__wrapped__(tuple(argv), paths) == _normalize_before(tuple(argv), paths), argv
    for word in words:
        for home in (None, "", "/home/alice", "/"):
            expected = word
            if home:
                for lead in ("~", "$HOME", "${HOME}"):
                    if word == lead or word.startswith(lead + "/"):
                        expected = home.rstrip("/") + word[len(lead):]
                        break
            assert dl._with_home(word, home) == expected, (word, home)
    assert dl._CHECKS_WRITING.keys() | dl._CHECKS_NOT_WRITING.keys() == {p for p, _ in dl._CHECKS_BY_PROGRAM}
    for (program, writes), checks in dl._CHECKS_BY_PROGRAM.items():
        assert (dl._CHECKS_WRITING if writes else dl._CHECKS_NOT_WRITING)[program] == checks


# --- the deny list's loop over commands: an equal command's hits again, words joined -----

def _hits_before(analysis, home: str):
    """``denylist.hits`` as it was before it yielded an equal command's hits again and told
    writing commands by substring tests: every command judged on its own, the words
    searched with the regex."""
    import re

    from agent_code.policy.commands import normalize

    output_word = re.compile(r"^(-o|--output|--file|of=|-O)", re.MULTILINE)
    if analysis.opaque:
        yield dl.Hit("too-deep", "commands nested too deeply to check", analysis.text[:200])
    if analysis.fork_bomb:
        yield dl.Hit("fork-bomb", "a fork bomb", analysis.text)
    download = dl._download_to_shell(analysis)
    if download is not None:
        yield download
    bases = dl._directories_changed_to(analysis, home)
    for command in analysis.commands:
        argv = command.argv
        writes = any(op in dl.WRITE_REDIRECTIONS and target not in dl._HARMLESS_TARGETS
                     for op, target in command.redirects) \
            or (len(argv) > 1 and output_word.search("\n".join(argv[1:])) is not None)
        checks = dl._compute_checks(command.program, writes)
        if not checks:
            continue
        inv = normalize(argv)
        moves = bases if command.program in dl._PATH_PROGRAMS else ()
        for rule, check in checks:
            reason = check(command, inv, home)
            if reason is None:
                for base in moves:
                    rebased = dl._rebased(command, base)
                    reason = check(rebased, inv, home) if rebased is not None else None
                    if reason is not None:
                        reason += f" (after cd {dl._unescape(base)})"
                        break
            if reason is not None:
                yield dl.Hit(rule, reason, dl._shown(command))


_REPEATS = [
    # equal commands (their hits again), commands that differ only in a pattern, a redirection
    # or a wrapper, and output words hidden after a newline inside a word
    "rm -rf / ; rm -rf / ; rm -rf /", "rm -rf /; rm -rf '/'; rm -rf \"$X\"; rm -rf $X; rm -rf $X",
    "echo x > /dev/sda; echo x > /dev/sda; echo x > /dev/null", "dd if=x of=/dev/sda; sudo dd if=x of=/dev/sda",
    "tee /etc/passwd < x; tee /etc/passwd < x > /dev/sda", "cd / && rm -rf *; rm -rf *; cd /tmp && rm -rf *",
    "cat x $'a\\n-o' /etc/passwd", "cat x $'a\\nof=/dev/sda'", "x $'\\n--output=/etc/shadow'",
    "x $'y\\n-O' /etc/hosts",
    "x '\n--file=/etc/passwd'", "x --file=/etc/passwd; x --file=/etc/passwd",
    "curl -o /etc/passwd u; curl -o /etc/passwd u",
    "x -o/boot/vmlinuz", "x -Oo /dev/sda", "sort -o /etc/passwd x", "gcc -o/usr/bin/ls x.c", "x a-o /etc/passwd",
    "x 2>&1 > /dev/null", "x > /dev/stdout 2> /dev/sda", "x >> /etc/fstab; x >| /etc/fstab", "x &> /dev/sda",
    "bash -c 'rm -rf /'; bash -c 'rm -rf /'", "xargs rm -rf < l; xargs rm -rf < l", "find / -delete; find / -delete",
    "dcfldd if=x of=/etc/passwd", "cd $X && rm -f foo; rm -f foo", "cd $X && rm -rf etc; cd \"$X\" && rm -rf etc",
    "mkfs.ext4 /dev/sda; mkfs.ext4 /dev/sda",
    # self-protection: an equal command after a wrapper (fed by xargs) or after an ask, words
    # of code, redirections that differ
    "rm x; xargs rm x < l", "xargs rm x < l; rm x", "touch x; sudo touch x; xargs touch x", "cat x; xargs cat x",
    "tee a < x; tee a < x > .git/config", "echo x > a; echo x > to_agent/y", "cd $X && touch a; touch a; touch .git",
    "python -c 'open(\".git/config\")'; python -c 'open(\".git/config\")'",
    "rm -rf src; rm -rf src; rm to_agent",
    "find . -delete; find . -delete; cp -r src/ .", "cp -r to_agent/ x; cp -r to_agent/ x",
    "ln -s .git x; ln -s .git x",
]


def test_hits_are_what_they_were(tree):
    """Every hit (all of them, in order) of the corpus and of lines that repeat commands, by
    ``denylist.hits`` and by the loop it replaced; and first_hit is the first of them."""
    from agent_code.policy.commands import analyze, clear_caches

    _, home = tree
    clear_caches()
    lines = _corpus() + _REPEATS + [" ; ".join(_REPEATS), " && ".join(_TRICKY_LINES)]
    found = 0
    for line in lines:
        analysis = analyze(line)
        for h in (str(home), "/root", ""):
            now = list(dl.hits(analysis, h))
            assert now == list(_hits_before(analysis, h)), line
            assert dl.first_hit(analysis, h) == (now[0] if now else None)
            found += len(now) > 1
    assert found > 20  # lines with more than one hit are there


def test_a_trailing_slash_is_judged_as_normpath_drops_it(tree):
    """``protected_path("src/")`` takes ``root/src`` without normpath: the same answer as
    ``src/.``, which still goes through normpath (and so did ``src/`` before)."""
    root, home = tree
    places = sp.Places.of(root, home)
    words = [w for w in _words(root, home) if "//" not in w and "/." not in w and not w.startswith(".")]
    words += ["src", "to_agent", "to_settings", "abs_to_git", "src/up_to_git", "dangling", "loop1", "file.txt",
              str(root), str(home), f"{home}/.config", "/", "/tmp", "-q"]
    assert len(words) > 60
    for cwd in (None, places.root, root / "src", Path("/")):
        for w in words:
            cache: dict[str, str] = {}
            assert sp.protected_path(w + "/", places, cwd, cache) == sp.protected_path(w + "/.", places, cwd, {}), w
    assert sp.protected_path("to_agent/", places) is not None


def test_option_subscript_is_the_pattern_s_search():
    """evaluated._option_subscript tries _OPTION_SUBSCRIPT only where a match can start: the same
    answer as the pattern's search at every character, on random lines of the pieces it reads."""
    import random

    from agent_code.policy import evaluated

    pieces = ["test", "printf", "wait", "[", "[[", "]]", "]", " ", " ", "\t", "\n", ";", "&", "|", "-v", "-p",
              "-vx", "a", "a[", "$x", "$(", "x", "_test", "atest", "-", "v", "p", "é", "\u00a0", "=", "'", "1",
              " -v ", " -p a[", "test ", "[ ", " x[", " $y"]
    rng = random.Random(7)
    found = 0
    for _ in range(20000):
        text = "".join(rng.choice(pieces) for _ in range(rng.randint(1, 14)))
        expected = evaluated._OPTION_SUBSCRIPT.search(text) is not None
        assert evaluated._option_subscript(text) is expected, text
        found += expected
    assert found > 500  # the lines were ones the pattern finds, often enough to compare


def test_assignments_are_the_pattern_s_finditer():
    """evaluated._assignments tries _ASSIGNED only at the start of a name before an "=": the
    same matches as the pattern's finditer at every character, on random lines of the pieces
    it reads (subscripts with "[" and "]" inside, "+=", values that run over later "=")."""
    import random

    from agent_code.policy import evaluated

    pieces = ["a", "x1", "_", "9", "=", "+=", "+", "[", "]", "[i]", "a[", "]=", " ", "\t", "\n", ";", "&", "|", "(",
              ")", "{", "}", "`", "$((", "))", "$", '"', "'", "<", "é", "\u00a0", "\x1c", "x=", " y=1", "a[b]=", "-"]
    rng = random.Random(11)
    found = 0
    for _ in range(20000):
        text = "".join(rng.choice(pieces) for _ in range(rng.randint(1, 16)))
        expected = [(m.span(), m.groups()) for m in evaluated._ASSIGNED.finditer(text)]
        assert [(m.span(), m.groups()) for m in evaluated._assignments(text)] == expected, text
        found += len(expected)
    assert found > 5000


# --- Command and Invocation: their own __init__ fills __dict__ at once ---------------------

def test_commands_built_the_short_way_behave_as_frozen_dataclasses():
    """``Command`` and ``Invocation`` set their fields with one write of ``__dict__`` instead of
    the frozen dataclass's setattr per field: they stay frozen, equal and hashed by their
    compared fields (``program`` is derived, not compared), ``replace`` derives ``program``
    again, and copies and pickles are equal to the original, ``program`` included."""
    import copy
    import dataclasses
    import pickle

    from agent_code.policy import commands as c

    found = c.analyze("sudo /bin/rm -rf -- / | tee log").commands
    assert [x.program for x in found] == ["sudo", "rm", "tee"]
    b = c.Command(("/bin/rm", "-rf", "--", "/"))
    assert b.program == "rm" and c.Command((), (("<", "f"),)).program == ""
    with pytest.raises(dataclasses.FrozenInstanceError):
        b.argv = ()  # type: ignore[misc]
    assert found[1] == c.Command(("/bin/rm", "-rf", "--", "/"), patterns=found[1].patterns)
    assert len({found[1], c.Command(found[1].argv, patterns=found[1].patterns)}) == 1
    assert b != b.argv and b != c.Command(b.argv, wrapper="sudo") and b != c.Command(b.argv, patterns=("x",))
    assert c.Command(b.argv, program="other") == b  # the derived name takes no part in equality
    assert hash(b) == hash(c.Command(b.argv))
    assert dataclasses.replace(b, argv=("ls",)).program == "ls"
    invocation = c.normalize(b.argv)
    assert invocation == c.Invocation("rm", (("-r", None), ("-f", None)), ("/",))
    assert repr(invocation) == "Invocation(program='rm', flags=(('-r', None), ('-f', None)), operands=('/',))"
    for x in (b, found[0], invocation):
        for y in (copy.copy(x), copy.deepcopy(x), pickle.loads(pickle.dumps(x))):
            assert y == x and type(y) is type(x) and repr(y) == repr(x), (x, y)
            assert y.program == x.program
