"""Classes an attacker found against the permission policy after the tree-sitter parser,
self-protection and the plan-mode shim landed; each row is a spelling of its class, with
the decision it must get now, beside ordinary lines of the same programs that must keep
theirs. Run through the real PermissionPolicy and bash tool, like the decision table."""

from __future__ import annotations

import subprocess
from pathlib import Path

import pytest

from agent_code.policy.commands import normalize, normalize_path
from agent_code.policy.permissions import PermissionPolicy
from agent_code.policy.rules import RuleSet
from agent_code.tools import default_tools

BASH = default_tools().get("bash")


def decision(mode: str, command: str, allow: tuple[str, ...] = (), root: Path | None = None) -> str:
    policy = PermissionPolicy(mode, rules=RuleSet.from_lists(allow=list(allow)), root=root)
    return policy.explain(BASH, {"command": command}).behavior


# A. an allow rule approving a line that changes what the allowed program runs: git's global
#    options and program-valued options, variables set on the line (prefix, env, export, printf -v),
#    archives and patches that write the files they name

def bash_runs_the_marker(spelling: str, tmp_path: Path) -> bool:
    """Whether real bash, running ``spelling`` with ``{marker}`` filled in, creates the marker
    (the proof that a line hid a command)."""
    marker = tmp_path / "ran"
    subprocess.run(["bash", "-c", spelling.format(marker=marker)], capture_output=True, cwd=tmp_path, timeout=30)
    return marker.exists()


RULE_BYPASSES = [
    ("git -c core.fsmonitor='touch /tmp/x' status", "bash(git status:*)"),
    ("git -c diff.external=id diff", "bash(git diff:*)"),
    ("git -c core.pager=id -p log", "bash(git log:*)"),
    ("git --config-env=core.pager=PATH status", "bash(git status:*)"),
    ("git --exec-path=/tmp status", "bash(git status:*)"),
    ("git -C /tmp/evil status", "bash(git status:*)"),
    ("git --git-dir=/tmp/evil status", "bash(git status:*)"),
    ("git --work-tree=/tmp/evil status", "bash(git status:*)"),
    ("git -p log", "bash(git log:*)"),
    ("git diff --ext-diff", "bash(git diff:*)"),
    ("git diff --output=out.txt", "bash(git diff:*)"),
    ("git grep -Ovim x", "bash(git grep:*)"),
    ("GIT_EXTERNAL_DIFF=id git diff", "bash(git diff:*)"),
    ("GIT_CONFIG_GLOBAL=evilcfg git status", "bash(git status:*)"),
    ("GIT_DIR=/tmp/evil/.git git status", "bash(git status:*)"),
    ("GIT_CONFIG_COUNT=1 GIT_CONFIG_KEY_0=core.fsmonitor GIT_CONFIG_VALUE_0=x git status", "bash(git status:*)"),
    ("PATH=.:$PATH ls", "bash(ls:*)"),
    ("LD_PRELOAD=./x.so ls", "bash(ls:*)"),
    ("env PATH=. ls", "bash(ls:*)"),
    ("env LD_PRELOAD=./x.so ls", "bash(ls:*)"),
    ("export PATH=.:$PATH; ls", "bash(ls:*)"),
    ("export LD_PRELOAD=./x.so && ls", "bash(ls:*)"),
    ("PATH=. ; ls", "bash(ls:*)"),
    ("printf -v PATH %s .; ls", "bash(ls:*)"),
    ("CC='rm -rf ~' make", "bash(make:*)"),
    ("tar xf evil.tar", "bash(tar:*)"),
    ("tar -xzf evil.tgz", "bash(tar:*)"),
    ("unzip evil.zip", "bash(unzip:*)"),
    ("patch -p1 -i x.diff", "bash(patch:*)"),
    ("git apply --unsafe-paths x.diff", "bash(git apply:*)"),
    ("git am x.mbox", "bash(git am:*)"),
]

RULE_STILL_ALLOWED = [
    ("git status", "bash(git status:*)"),
    ("git status --short", "bash(git status:*)"),
    ("git --version", "bash(git:*)"),
    ("git --no-pager log -p -3", "bash(git log:*)"),
    ("git log --format=%h -5", "bash(git log:*)"),
    ("git diff HEAD~1 -- src", "bash(git diff:*)"),
    ("cd tests && ls -la", "bash(ls:*)"),  # a directory of the project (tests run from its root)
    ("echo hi && git status --short", "bash(git status:*)"),
    ("tar czf out.tgz src", "bash(tar:*)"),
    ("tar tf x.tar", "bash(tar:*)"),
    ("make test", "bash(make:*)"),
]


@pytest.mark.parametrize("command, rule", RULE_BYPASSES)
def test_an_allow_rule_does_not_approve_a_line_that_changes_what_runs(command, rule):
    assert decision("default", command, (rule,)) == "ask", command


@pytest.mark.parametrize("command, rule", RULE_STILL_ALLOWED)
def test_the_same_rules_still_approve_ordinary_lines(command, rule):
    assert decision("default", command, (rule,)) == "allow", command


# B–D. the built-in deny list (bypassPermissions): abbreviated long options, runners that take a
#      command, /proc aliases of /, power targets, partition tools in script mode, devices written
#      through find, archives and trees unpacked over / or a system directory
DENIED = [
    # getopt_long takes any unique prefix of a long option
    "rm --r /", "rm --r ~", "rm --re -f ~", "rm -f --recu /etc", "rm --forc --rec /", "rm --recur /usr",
    "rm --no-pres --rec /", "mv --targ /tmp /usr", "mv --t=/tmp ~", "mv --target=/tmp /etc", "chmod --rec 000 /",
    "chown --recu nobody /",
    # commands hidden in a program's arguments
    "git -c alias.x='!rm -rf /' x", "git -c alias.x='!shutdown now' x", "git -c core.fsmonitor='rm -rf /' status",
    "git -c core.pager='shutdown now' -p log", "git -c diff.external='mkfs.ext4 /dev/sda' diff",
    "git -c core.sshCommand='rm -rf ~' fetch", "fakeroot rm -rf /", "fakeroot shutdown now",
    "screen -dm rm -rf /", "screen -S x -dm mkfs.ext4 /dev/sda", "proxychains rm -rf ~", "ltrace rm -rf /",
    # /proc/PID/root is /, /proc/PID/cwd and open descriptors may be any directory
    "rm -rf /proc/self/root/", "rm -rf /proc/self/root", "rm -rf /proc/1/root/etc", "rm -rf /proc//1//root//",
    "rm -rf /proc/1/task/1/root", "rm -rf /proc/1/cwd/", "rm -rf /proc/self/cwd/..", "rm -rf /proc/self/fd/3",
    "rm -rf /dev/fd/3/",
    # power and partitions
    "systemctl start reboot.target", "systemctl start poweroff.target", "systemctl restart halt.target",
    "systemctl start ctrl-alt-del.target", "systemctl start suspend.target", "systemctl start kexec",
    "parted -s /dev/sda mklabel gpt", "parted /dev/sda -s mkpart p 0 100%", "parted -s /dev/sda rm 1",
    "busctl call org.freedesktop.login1 /org/freedesktop/login1 org.freedesktop.login1.Manager PowerOff b false",
    # devices written by find's output options
    "find / -fls /dev/sda", "find / -fprintf /dev/sda x", "find /tmp -fprint /dev/sda",
    # unpacking or copying over / or a system directory
    "tar xf x.tar -C /", "tar -C / -xf /tmp/x.tar", "tar --extract -f x.tar --directory=/etc", "tar -xf x.tar -C/usr",
    "unzip -o x.zip -d /", "unzip x.zip -d /etc", "cp -r x/. /", "cp -a x/. /usr", "rsync -a x/ /usr",
]

ASKED = [  # what runs is only known when it runs: the REPL asks, headless refuses
    "PROMPT_COMMAND='rm -rf /' bash -i", "PROMPT_COMMAND='shutdown now' bash -i", "BASH_ENV=/tmp/x bash -c :",
    "ENV=/tmp/x sh -i", "export BASH_ENV=./x; bash -c true", "tmux new -d 'rm -rf /'", "tmux new-session -d 'agent-code'",
    "tmux send-keys -t 0 'rm -rf /' Enter", "vim -c '!rm -rf /'", "vi +'!shutdown now' x", "make -f /dev/stdin <<< 'all:;rm -rf /'",
    "make -f - <<< 'all:;rm -rf /'", "make --eval='all:;rm -rf /'", "git --config-env=alias.x=CMD x",
]

STILL_ALLOWED = [
    "rm --r build", "rm --recursive --force dist", "mv --t=dist build", "cp --rec a b", "git log -p", "git -c color.ui=always log",
    "vim file.py", "tmux ls", "screen -ls", "make test", "cat /proc/self/status", "rm -rf /proc/self/cwd/build",
    "systemctl status nginx", "systemctl restart nginx", "systemctl list-units --type=target", "parted -l",
    "parted /dev/sda print", "tar xf x.tar", "tar czf /tmp/a.tgz src", "tar xf x.tar -C build", "tar -C / -cf /tmp/root.tar etc",
    "unzip x.zip -d out", "cp -r src dst", "rsync -a src/ /tmp/backup", "find . -fprint list.txt",
]


@pytest.mark.parametrize("command", DENIED)
def test_denied_in_every_mode(command):
    assert decision("bypassPermissions", command) == "deny", command
    assert decision("default", command, ("bash",)) == "deny", command


@pytest.mark.parametrize("command", ASKED)
def test_asked_even_in_bypass(command):
    assert decision("bypassPermissions", command) == "ask", command


@pytest.mark.parametrize("command", STILL_ALLOWED)
def test_ordinary_lines_stay_allowed_in_bypass(command):
    assert decision("bypassPermissions", command) == "allow", command


def test_abbreviations_and_proc_aliases_are_normalized():
    assert normalize(("rm", "--rec", "--forc", "x")).flags == (("-r", None), ("-f", None))
    assert normalize(("mv", "--t=/tmp", "x")).flags == (("-t", "/tmp"),)
    assert normalize(("rm", "--re", "x")).flags == (("-r", None),)          # unique prefix of --recursive only
    assert normalize(("rm", "--v", "x")).flags == (("--v", None),)          # --verbose or --version: left as written
    assert normalize_path("/proc/self/root/etc/../usr") == "/usr"
    assert normalize_path("/proc/1/cwd/build") == "$UNKNOWN_DIRECTORY/build"
    assert normalize_path("/proc/1/cwd/../x") == "$UNKNOWN_DIRECTORY"
    assert normalize_path("/proc/self/status") == "/proc/self/status"


# A′. an allow rule approving an allowed program run in another directory, whose config it
#     reads: `cd /tmp/evil && git status` runs the fsmonitor a planted repository names
CHDIR_BYPASSES = [
    "cd {evil} && git status", "cd {evil}; git status", "(cd {evil} && git status)", "pushd {evil} && git status",
    "cd {evil} || git status", "{{ cd {evil}; git status; }}", "cd src && cd {evil} && git status",
    "cd {link} && git status", "cd sub && git status", "cd sub/inner && git status", "cd .. && git status",
    "cd src/../.. && git status", "cd $OLDPWD && git status", "cd ~ && git status", "cd && git status",
    "cd - && git status", "popd && git status", "cd not-there && git status", "cd {evil}/../{evil} && git status",
    "env -C {evil} git status", "env --chdir={evil} git status", "env --ch {evil} git status",
    "env -iC{evil} git status", "unshare --wd={evil} git status", "timeout 5 env -C {evil} git status",
    "cd {evil_rel} && git status", "cd src && git status && cd {evil} && git status", "cd s* && git status",
    "cd $(echo {evil}) && git status", "cd `echo {evil}` && git status", "cd {{src,{evil}}} && git status",
]
CHDIR_STILL_ALLOWED = ["cd src && git status", "cd {root} && git status", "cd ./src/ && git status --short",
                       "cd {root}/src && git status", "git status", "timeout 5 git status"]


@pytest.fixture
def planted(tmp_path: Path) -> dict[str, str]:
    """A project (with a nested repository and a symlink out) and, beside it, a repository
    whose config names an fsmonitor program."""
    root, evil = tmp_path / "project", tmp_path / "evil"
    (root / "src").mkdir(parents=True)
    (root / "sub" / "inner").mkdir(parents=True)
    subprocess.run(["git", "init", "-q", str(root)], check=True)
    subprocess.run(["git", "init", "-q", str(root / "sub")], check=True)
    subprocess.run(["git", "init", "-q", str(evil)], check=True)
    subprocess.run(["git", "-C", str(evil), "config", "core.fsmonitor", f"touch {tmp_path}/ran"], check=True)
    (root / "link").symlink_to(evil)
    return {"root": str(root), "evil": str(evil), "link": "link", "evil_rel": "../evil"}


@pytest.mark.parametrize("template", CHDIR_BYPASSES)
def test_an_allow_rule_does_not_approve_a_line_that_runs_it_elsewhere(template, planted):
    command = template.format(**planted)
    assert decision("default", command, ("bash(git status:*)",), Path(planted["root"])) == "ask", command


@pytest.mark.parametrize("template", CHDIR_STILL_ALLOWED)
def test_an_allow_rule_still_approves_it_within_the_project(template, planted):
    command = template.format(**planted)
    assert decision("default", command, ("bash(git status:*)",), Path(planted["root"])) == "allow", command


def test_the_planted_repository_really_runs_its_program(planted, tmp_path):
    """The attack is real: git status in the planted repository runs the fsmonitor."""
    subprocess.run(["bash", "-c", f"cd {planted['evil']} && git status"], capture_output=True, timeout=60)
    assert (tmp_path / "ran").exists()


# A″. plan mode's read-only check: a line that shlex reads as one harmless word while bash
#     runs a second command ($'…' quoting, which shlex does not know)
SHLEX_MISREADS = [
    "echo $'\\'' ; touch pwned #'",
    "true $'\\'' && touch pwned #'",
    "echo $'a\\'b' | touch pwned #'",
    "cat $'\\'' || touch pwned; false #'",
    "grep -r x $'\\'' ; touch pwned #' .",
]


@pytest.mark.parametrize("command", SHLEX_MISREADS)
def test_plan_mode_does_not_take_a_misread_line_for_a_reader(command, tmp_path):
    from agent_code.policy.readonly import read_only_command_problem

    subprocess.run(["bash", "-c", command], cwd=tmp_path, capture_output=True, timeout=30)
    assert (tmp_path / "pwned").exists(), "the attack must be real: bash runs the second command"
    assert read_only_command_problem(command) is not None, command


# L. a word of escaped blanks: tree-sitter-bash reads "\ " (also tab, vertical tab, form feed
#    after a backslash) as whitespace, so such a word is in no node, while bash passes it on (an
#    argument " ", a command of that name). A line holding one cannot be judged from the tree:
#    asked, even in bypassPermissions, and no allow rule approves it. (Found when lines came to be
#    parsed with a final newline: "chmod -R 000 \ " at the end of a line had been a syntax error.)
#    The same grammar reads backslash, carriage return, newline as a line continuation; bash reads
#    an escaped carriage return, then the end of the command: "echo a\<CR><LF>rm -rf ~" runs rm
#    (tests/test_policy_attacks.py runs it below), and was approved in bypassPermissions.
UNREAD_WORDS = [
    "chmod -R 000 \\ ",                  # at the end of the line: " " may be a link to .git
    "chmod -R 000 \\  x",                # in the middle
    "chmod -R 000 \\\t",                 # an escaped tab
    "chmod -R 000 \\\x0b x",             # vertical tab
    "chmod -R 000 \\\x0c x",             # form feed
    "chmod -R 000 \\ ; ls",
    "chmod -R 000 \\ \nls",
    "\\  rm -rf build",                  # the command name itself
    "sudo \\  id",
    "( chmod 000 \\  )",                 # in a subshell
    "{ chmod 000 \\ ; }",                # in a group
    "echo $(chmod 000 \\ )",             # in a command substitution
    "bash -c 'chmod 000 \\ '",           # in a script a shell runs
    "ls | xargs chmod 000 \\ ",
    "for f in \\ ; do chmod 000 \"$f\"; done",
    "echo a\\\r\nrm -rf ~",                # a carriage return escaped: bash ends the echo there
    "echo a \\\r\nrm -rf ~",
    "echo \"x\" \\\r\nrm -rf ~",
    "(echo a\\\r\nrm -rf ~)",
    "echo $(true\\\r\nrm -rf ~)",
    "bash -c \"echo a\\\r\nrm -rf ~\"",
    "git status \\\r\nrm -rf build",
    "echo a\r# ; rm -rf ~",                 # a carriage return is no blank for bash: "#" starts no comment
    "echo a\x0b# ; rm -rf ~",               # nor a vertical tab
    "echo a\x0c# ; rm -rf ~",               # nor a form feed
    "git status\r#; rm -rf build",
    "ls\r",                                 # bash runs a program named "ls<CR>"
    "echo a\r\nls\r\n",                     # Windows line ends: the same
    "(echo a\r# ; rm -rf ~)",
    "echo $(echo a\r# ; rm -rf ~)",
    "bash -c 'echo a\r# ; rm -rf ~'",
    "[[ a\r== a ]] && rm -rf ~",              # inside a test, an arithmetic, a case pattern, a redirection
    "x=$((1\r#))\nrm -rf ~",
    "case a in a\r#) ;; esac; rm -rf ~",
    "echo a >\r# f; rm -rf ~",
    "echo a\\\x0c\nrm -rf ~",                # an escaped form feed before a newline
    "chmod 000 \\\\\\  \\ ",               # after a word that ends in an escaped backslash and blank
]
READ_WORDS = [  # a backslash-blank inside a word, a string, a comment or a here-document is read
    "ls a\\ b", "echo \"x\\ y\"", "echo $'a\\ b'", "echo ok # a\\ b", "cat <<EOF\na\\ b\nEOF",
    "echo \\\\ x", "ls my\\ dir/", "echo 'a\\ b'",
    "chmod 000 \\\\\\ ",   # one word: an escaped backslash, then an escaped blank (bash: "\\ ")
    "echo \"a\\\r\nb\"", "make \\\n  all", "echo 'a\rb\x0bc\x0cd'", "echo ok # a\rb", "cat <<EOF\na\rb\nEOF",
]


@pytest.mark.parametrize("command", UNREAD_WORDS)
def test_a_word_the_parser_cannot_read_is_asked(command):
    assert decision("bypassPermissions", command) in ("ask", "deny"), command
    assert decision("default", command, ("bash(chmod:*)", "bash(ls:*)", "bash(echo:*)", "bash(sudo:*)",
                                         "bash(bash:*)", "bash(rm:*)", "bash(git status:*)")) != "allow", command


@pytest.mark.parametrize("spelling", ["echo a\\\r\ntouch {marker}", "echo a\r# ; touch {marker}",
                                      "echo a\x0b# ; touch {marker}", "echo a\x0c# ; touch {marker}"])
def test_bash_runs_what_the_grammar_reads_as_a_continuation_or_a_comment(spelling, tmp_path):
    """What the rows above guard against, run for real: bash ends the first command at the
    escaped carriage return, and reads "#" after a carriage return, vertical tab or form feed
    as part of a word; the second command runs."""
    marker = tmp_path / "ran"
    subprocess.run(["bash", "-c", spelling.format(marker=marker)], check=True, capture_output=True)
    assert marker.exists()


@pytest.mark.parametrize("command", READ_WORDS)
def test_escaped_blanks_inside_words_strings_and_comments_are_read(command):
    assert decision("bypassPermissions", command) == "allow", command


# M. a line break read as a blank: after a pipeline of three or more stages, tree-sitter-bash
#    sometimes reads on over a newline into the next line, when that line is a list (`&&`,
#    `||`): "ls | grep x | head -n 1<LF>rm -rf ~ && true" came out as the pipeline
#    "ls | (grep x | head -n 1 rm -rf ~) && true", with no syntax error, so rm was an argument
#    of head: approved in bypassPermissions and by `bash(ls:*)`, `bash(head:*)`… while bash ends
#    the command at the newline and runs rm (run for real below). Found by the differential run
#    of tests/test_policy_bash_differential.py. Any newline the parser reads as a blank inside a
#    statement makes the line one the tree cannot judge: asked, and no allow rule approves it.
JOINED_LINES = [
    "ls | grep x | head -n 1\nrm -rf ~ && true",
    "ls | grep x | head -n 1\nrm -rf ~ || true",
    "ls | grep x | head 1\nrm -rf ~ && true",
    "ls | grep x | head -n a\nrm -rf ~ && true",
    "ls | grep x | sort | head -n 1\nrm -rf ~ && true",         # four stages
    "ls |& grep x |& head -n 1\nrm -rf ~ && true",             # |&
    "ls 2>&1 | grep x | head -n 1\nrm -rf ~ && true",          # a redirection in the pipeline
    "ls | grep x | head -n 1 2>&1\nrm -rf ~ && true",          # … on its last stage
    "ls | grep x | head <<<x\nrm -rf ~ && true",               # a here-string
    "git status | grep x | wc -l\nrm -rf ~ && true",
    "( ls | grep x | head -n 1\nrm -rf ~ && true )",           # in a subshell
    "{ ls | grep x | head -n 1\nrm -rf ~ && true\n}",          # in a group
    "echo $(ls | grep x | head -n 1\nrm -rf ~ && true)",       # in a command substitution
    "for f in a; do ls | grep x | head -n 1\nrm -rf ~ && true\ndone",
    "if true; then ls | grep x | head -n 1\nrm -rf ~ && true\nfi",
    "bash -c 'ls | grep x | head -n 1\nrm -rf ~ && true'",     # in a script a shell runs
    "ls | grep x | head -n 1\nrm -rf ~ && true\n",              # a final newline of its own
]
STILL_READ_LINES = [  # newlines bash reads on over, or inside text: no question
    "ls | grep x | head -n 1\nrm -rf build; true",
    "ls | grep x |\nhead -n 1",
    "ls | grep x | # a comment\nhead -n 1",
    "ls &&\ngit status",
    "make \\\n  all",
    "echo \"a\nb\"",
    "cat <<EOF | grep x | head -n 1\nrm -rf ~ && true\nEOF",       # a here-document's body is text
    "if true\nthen ls\nfi",
    "x=(1\n2) && echo ok",
    "case a in\n a) ls;;\nesac",
]


@pytest.mark.parametrize("command", JOINED_LINES)
def test_a_line_break_the_parser_reads_as_a_blank_is_asked(command):
    assert decision("bypassPermissions", command) in ("ask", "deny"), command
    assert decision("default", command, ("bash(ls:*)", "bash(head:*)", "bash(grep:*)", "bash(true:*)",
                                         "bash(git status:*)", "bash(wc:*)", "bash(echo:*)", "bash(bash:*)",
                                         "bash(sort:*)", "bash(rm:*)")) != "allow", command


def test_bash_runs_the_line_after_the_pipeline(tmp_path):
    """What the rows above guard against, run for real: the newline ends head's command."""
    marker = tmp_path / "ran"
    subprocess.run(["bash", "-c", f"ls / | grep x | head -n 1\ntouch {marker} && true"], check=True,
                   capture_output=True)
    assert marker.exists()


@pytest.mark.parametrize("command", STILL_READ_LINES)
def test_line_breaks_bash_reads_on_over_are_read(command):
    assert decision("bypassPermissions", command) == "allow", command


def test_a_line_the_analysis_fails_on_is_asked_not_a_crash(monkeypatch):
    """A bug in the analysis must neither crash the agent (the check raised IndexError on a
    redirected assignment in a pipeline, `zq1 |& while false; do v=1 ||<LF>zq2 2>/dev/null;
    done`) nor let the line through: the line is one it cannot judge."""
    line = 'zq1 |& while false; do v="a b" ||\nzq2 15 2>/dev/null; done |& zq3'
    assert decision("bypassPermissions", line) == "allow"  # the bug itself is fixed: read, and harmless
    from agent_code.policy import commands

    def broken(*args, **kwargs):
        raise IndexError("tuple index out of range")

    monkeypatch.setattr(commands, "_walk_script", broken)
    commands.clear_caches()
    assert decision("bypassPermissions", "ls") == "ask"
    assert decision("default", "ls", ("bash(ls:*)",)) == "ask"
    assert any("could not be analysed" in e for e in commands.analyze("ls").errors)


# N. a word glued to a backslash escape: tree-sitter-bash ends a word before a backslash that
#    follows a quote, an expansion or a substitution ("r"\m, $x\m, `a`\m) or a line continuation
#    inside a word (r\<LF>m), and starts another; for bash it is one word. `"r"\m -rf ~` ran
#    `rm -rf ~` while the analysis saw the program "r"; `echo x > "/etc/pass"\wd` wrote
#    /etc/passwd to the target "/etc/pass" (both approved in bypassPermissions). Found by the
#    word-level run of tests/test_policy_bash_differential.py.
GLUED_WORDS = [
    '"r"\\m -rf ~', "'r'\\m -rf ~", "$'r'\\m -rf ~", 'r""\\m -rf ~', '""\\r\\m -rf ~', "r\\\nm -rf ~",
    '$X\\m -rf ~', '${X}\\m -rf ~', '$(echo r)\\m -rf ~', '`echo r`\\m -rf ~',
    'echo x > "/etc/pass"\\wd', 'echo x >"/etc/"\\passwd', 'tee "/etc/"\\passwd < x', 'rm -rf "/tm"\\p/../..',
    'sudo "r"\\m -rf ~', 'ls && "r"\\m -rf ~', '( "r"\\m -rf ~ )', 'echo $("r"\\m -rf ~)', "bash -c '\"r\"\\m -rf ~'",
    'for x in a; do "r"\\m -rf ~; done', 'export X="a"\\b; rm -rf ~',
]
GLUED_READ = ["echo a\\ b", "echo \\m", "ls my\\ dir/", "printf '%s\\n' a", "echo a\\\\b", "make \\\n  all",
              "sed -e 's/a\\/b/c/'", "echo ${x#\\*}", "grep -e \\-x f", "echo a;\\\nls"]


@pytest.mark.parametrize("command", GLUED_WORDS)
def test_a_word_the_parser_splits_before_a_backslash_is_asked(command):
    assert decision("bypassPermissions", command) in ("ask", "deny"), command
    assert decision("default", command, ("bash(echo:*)", "bash(tee:*)", "bash(ls:*)", "bash(r:*)", "bash(sudo:*)",
                                         "bash(bash:*)", "bash(export:*)", "bash(rm:*)")) != "allow", command


@pytest.mark.parametrize("command", GLUED_READ)
def test_backslashes_bash_reads_as_the_parser_does_are_read(command):
    assert decision("bypassPermissions", command) == "allow", command


# O. a $'…' string the grammar runs on past its quote: tree-sitter-bash took the quote after
#    an escaped backslash ($'\\') for an escaped quote, so `echo $'\\'<LF>rm -rf ~<LF>echo '`
#    was one echo of a string (approved in bypassPermissions) while bash runs rm.
ANSI_C_MISREADS = ["echo $'\\\\'\nrm -rf ~\necho '", "echo $'a\\\\'\nrm -rf ~\necho '", "echo $'\\\\\\\\'\nrm -rf ~\necho '",
                   "ls $'\\\\'\nrm -rf ~\nls '", "(echo $'\\\\'\nrm -rf ~\necho ')"]
ANSI_C_READ = ["echo $'a\\\\\\'b'", "echo $'\\n\\t'", "echo $'it\\'s'", "echo $'a' $'b\\\\'", "printf $'%s\\\\n' a"]


@pytest.mark.parametrize("command", ANSI_C_MISREADS)
def test_a_dollar_quote_the_parser_ends_elsewhere_is_asked(command):
    assert decision("bypassPermissions", command) in ("ask", "deny"), command
    assert decision("default", command, ("bash(echo:*)", "bash(ls:*)", "bash(rm:*)")) != "allow", command


@pytest.mark.parametrize("command", ANSI_C_READ)
def test_dollar_quotes_read_as_bash_reads_them_are_read(command):
    assert decision("bypassPermissions", command) == "allow", command


# P. here-documents: tree-sitter-bash took `EOF;` (also `EOF|…`, `EOF>f`, `EOF&&…`) for the
#    delimiter of `<<EOF;`, so the body ran on past the line "EOF" where bash ends it and runs the
#    lines after; it hung words after the delimiter on the redirection, where the analysis lost
#    them (`rm <<EOF -rf ~`: rm's arguments); it does not open `…` in an unquoted body, nor read
#    the body after `<<$X` or a tab-indented `<<-` one; with `<<E'O'F` and a $(…) in the body it
#    took the following lines for the end line. All approved in bypassPermissions.
HEREDOC_MISREADS = [
    "cat <<EOF;\nx\nEOF\nrm -rf ~\nEOF;", "cat <<EOF>x\nx\nEOF\nrm -rf ~\nEOF>x", "cat <<EOF|cat\nx\nEOF\nrm -rf ~\nEOF|cat",
    "cat <<EOF&&ls\nx\nEOF\nrm -rf ~\nEOF&&ls", "cat <<-EOF;\n\tx\n\tEOF\nrm -rf ~\nEOF;",
    "rm <<EOF -rf ~\nx\nEOF", "cat <<EOF\n`rm -rf ~`\nEOF", "cat <<EOF > notes.md\nrun `rm -rf ~` first\nEOF",
    "cat <<-EOF\n\t$(rm -rf ~)\nEOF", "cat <<$X\n$(rm -rf ~)\n$X", "cat <<E'O'F\n$(date)\nEOF\nrm -rf ~\nEOF",
    "(cat <<EOF;\nx\nEOF\nrm -rf ~\nEOF;\n)",
]
HEREDOC_READ = ["cat <<EOF\nplain $x\nEOF", "cat <<'EOF' > a.py\nprint(`x`)\nEOF", "cat <<-EOF\n\tx\n\tEOF",
                'cat <<"E O"\nx\nE O', "cat <<\\EOF\n`x`\nEOF", "python3 - <<'EOF'\nimport json\nEOF",
                "cat <<EOF > f\n$(date)\nEOF", "cat <<EOF | grep x\na\nEOF"]


@pytest.mark.parametrize("command", HEREDOC_MISREADS)
def test_a_here_document_the_parser_reads_otherwise_is_asked_or_refused(command):
    assert decision("bypassPermissions", command) in ("ask", "deny"), command
    assert decision("default", command, ("bash(cat:*)", "bash(rm:*)")) != "allow", command


@pytest.mark.parametrize("command", HEREDOC_READ)
def test_here_documents_read_as_bash_reads_them_are_read(command):
    assert decision("bypassPermissions", command) == "allow", command


@pytest.mark.parametrize("spelling", ['"t"\\ouch {marker}', "t\\\nouch {marker}", "echo $'\\\\'\ntouch {marker}\necho '",
                                      "cat <<EOF;\nx\nEOF\ntouch {marker}\nEOF;", "cat <<EOF\n`touch {marker}`\nEOF",
                                      "cat <<-EOF\n\t$(touch {marker})\nEOF", "cat <<$X\n$(touch {marker})\n$X"])
def test_bash_runs_what_the_grammar_misread(spelling, tmp_path):
    """What sections N–P guard against, run for real: bash runs the command the tree hid."""
    assert bash_runs_the_marker(spelling, tmp_path), spelling


# Q. code in a value that bash evaluates (agent_code/policy/evaluated.py): an array subscript is
#    expanded when bash evaluates it, and arithmetic evaluates a variable's value as an
#    expression, so `x='a[$(rm -rf ~)]'; echo $((x))` runs rm though the line shows a quoted
#    string; builtins that take a variable name evaluate a subscript in it (`test -v`,
#    `printf -v`, `read`…), `${x@P}` runs the $(…) in a value. All approved in
#    bypassPermissions, and `test -v 'a[$'"(rm -rf ~)]"` in plan mode (the quotes split the
#    `$(` its read-only check looked for). Found by the attacker review.
EVALUATED = [
    "test -v 'a[$'\"(rm -rf ~)]\"", "printf -v 'a[$'\"(rm -rf ~)]\" x", "x='$(rm -rf ~)'; echo \"${x@P}\"",
    "x='a[$(rm -rf ~)]'; echo $((x))", "x='a[$(rm -rf ~)]'; ((x))", "x='a[$(rm -rf ~)]'; [[ $x -eq 1 ]]",
    "x='a[$(rm -rf ~)]'; let x", "x='a[$(rm -rf ~)]'; declare -i y=x", "x='a[$(rm -rf ~)]'; echo ${a[x]}",
    "x='a[$(rm -rf ~)]'; for ((i=x;0;)); do :; done", "x='a[$(rm -rf ~)]'; ls | head -n $((x))",
    "declare -n r='a[$(rm -rf ~)]'; echo $r", "test -v 'a[$(rm -rf ~)]'", "[ -v 'a[$(rm -rf ~)]' ]",
    "[[ -v 'a[$(rm -rf ~)]' ]]", "printf -v 'a[$(rm -rf ~)]' x", "read 'a[$(rm -rf ~)]' </dev/null",
    "test -v 'a[`rm -rf ~`]'", "printf -v x '%s' '$(rm -rf ~)'; echo \"${x@P}\"", "x=\"a[\\$(rm -rf ~)]\"; echo $((x))",
    "echo $(( $(cat n.txt) + 1 ))", "read n < n.txt; echo $((n))", "for f in *; do echo $((f)); done",
    "x=$(cat f); echo ${s:x}", "echo ${!x}", "mapfile -t a < f; echo $((a))", "x='a[$(rm -rf ~)]'; echo $[x]",
    # values read when the line runs, followed through the line's assignments
    "read x; y=$x; echo $((y))", "while read -r n; do echo $((n+1)); done < f", "IFS=, read a b <<< \"$s\"; echo $((a))",
    "a=(*); echo $((a))", "x=\"${y:-$(cat f)}\"; echo $((x))", "declare x=$(cat f); echo $((x))", "x=`cat f`; echo $((x))",
    "read -a arr; echo $((arr[0]))", "(( x = $(cat f) ))", "let \"x=$(cat f)\"", "set -- $(cat f); echo $(( $1 ))",
    "declare -i x; x=$(cat f)", "cat f | while read x; do echo $((x)); done", "echo ${x:=$(cat f)}; echo $((x))",
    "read x; echo ${a[x]}", "read x; [[ $x -gt 1 ]]", "for f in *; do a[f]=1; done", "read i; echo ${s:i:2}",
    "x='a[$((0))$(rm -rf ~)]'; echo $((x))", "x='a[ $(rm -rf ~) ]'; echo $((x))",
]
EVALUATED_STILL_READ = [
    "echo $((1+2))", "i=0; echo $((i+1))", "n=$(( $(ls tests | wc -l) + 1 )); echo $n", "for i in 1 2 3; do echo $((i*2)); done",
    "[[ $# -eq 0 ]] && echo none", "echo ${#x}", "echo ${x:0:3}", "echo ${x:-default}", "grep -rn '\\$(' src",
    "test -f x && echo y", "echo $(( $(nproc) * 2 ))", "make -j$(( $(nproc) + 1 ))", "echo \"${a[@]}\"",
    "for i in $(seq 1 3); do echo $((i)); done", "echo ${!a[@]}", "x=5; echo $((x*2))",
    "i=0; while [ $i -lt 3 ]; do i=$((i+1)); done", "n=$(ls | wc -l); echo $((n+1))", "x=5; y=$x; echo $((y))",
    "for f in $(git diff --name-only); do echo $f; done; echo $((1+2))", "a[$((i+1))]=1",
]


@pytest.mark.parametrize("command", EVALUATED)
def test_code_in_a_value_bash_evaluates_is_asked(command):
    assert decision("bypassPermissions", command) in ("ask", "deny"), command
    assert decision("plan", command) != "allow", command
    assert decision("default", command, ("bash(echo:*)", "bash(test:*)", "bash(printf:*)", "bash(read:*)", "bash(ls:*)",
                                         "bash(declare:*)", "bash(let:*)", "bash(mapfile:*)", "bash([:*)")) != "allow", command


@pytest.mark.parametrize("command", EVALUATED_STILL_READ)
def test_arithmetic_on_numbers_is_still_read(command):
    assert decision("bypassPermissions", command) == "allow", command


@pytest.mark.parametrize("spelling", ["x='a[$(touch {marker})]'; echo $((x))", "test -v 'a[$'\"(touch {marker})]\"",
                                      "x='$(touch {marker})'; echo \"${{x@P}}\"", "printf -v 'a[$(touch {marker})]' x",
                                      "echo 'a[$(touch {marker})]' > n.txt; echo $(( $(cat n.txt) ))"])
def test_bash_runs_the_code_in_an_evaluated_value(spelling, tmp_path):
    assert bash_runs_the_marker(spelling, tmp_path), spelling


# R. glob brackets: a POSIX class (`/[[:alpha:]]*`, every top directory) was read as the
#    bracket "[[:alpha:]" and a literal "]", matching no protected path (approved in
#    bypassPermissions); a reversed range (`rm -f /[z-a]`) made the regex compiler raise, which
#    ended the agent's run (the attacker review of the fast paths). And any error inside the
#    policy is a call it cannot judge: asked, never a crash.
GLOB_CLASSES = ["rm -rf /[[:alpha:]]*", "rm -rf /[[:lower:]]tc", "chmod -R 777 /[[:alnum:]]*", "rm -rf ~/[[:alpha:]]*",
                "rm -rf /[[:alpha:][:digit:]]*", "rm -rf /[![:digit:]]*", "rm -rf /[]e]tc"]


@pytest.mark.parametrize("command", GLOB_CLASSES)
def test_a_glob_class_that_may_match_a_protected_path_is_refused(command):
    assert decision("bypassPermissions", command) == "deny", command


@pytest.mark.parametrize("command", ["rm -f /[z-a]", "rm -rf ./[b-a]x", "chmod 777 /[9-0]", "ls /[[:alpha:]"])
def test_a_malformed_bracket_is_judged_not_a_crash(command):
    assert decision("bypassPermissions", command) in ("allow", "ask", "deny")


def test_an_error_inside_the_policy_asks_instead_of_crashing(monkeypatch):
    from agent_code.policy import denylist

    def broken(*args, **kwargs):
        raise ValueError("boom")

    monkeypatch.setattr(denylist, "first_hit", broken)
    policy = PermissionPolicy("bypassPermissions")
    explained = policy.explain(BASH, {"command": "ls"})
    assert explained.behavior == "ask" and "could not judge" in explained.reason
    assert not policy.check(BASH, {"command": "ls"}).allowed  # nobody to ask: refused


# S. the second attacker review: a redirection on the last stage of a pipeline hangs on the
#    whole pipeline in the tree, and the $(…) in its target or here-document was never walked
#    (`true | cat > $(rm -rf ~)/x` was approved in bypassPermissions, though `cat > $(rm -rf
#    ~)/x` was refused); glob brackets with an escaped "]" or an unclosed "[="; code in values
#    spelled with $'\x5b\x24(' (no "[" or "$(" in the text), in contexts the first patterns
#    missed (`a=([x]=1)`, `${@:x}`, `\let`, `declare '-i'`, `test -v "$n"`); prompt and startup
#    variables set with +=, printf -v or read; builtins that run what they are given
#    (mapfile -C, compgen -W/-C, trap -- '-;…' EXIT) or rebind a name (hash -p, BASH_CMDS).
SECOND_REVIEW = [
    "true | cat > $(rm -rf ~)/dev/null", "true | cat <<E\n$(rm -rf ~)\nE", "true | cat <<E\n`rm -rf ~`\nE",
    "true | cat <<E\n${v:-$(rm -rf ~)}\nE", "{ ls; } > $(rm -rf ~)", "( ls ) > $(rm -rf ~)", "ls | sort | cat > $(rm -rf ~)",
    "rm -rf /[e\\]]tc", "rm -rf /[[=e]tc",
    "x=a$'\\x5b\\x24(rm -rf ~)]'; echo $((x))", "x=a$'\\x5b\\x24(rm -rf ~)]'; [[ x -eq 0 ]]", "x=a$'\\x5b\\x24(rm -rf ~)]'; a[x]=1",
    "x=a$'\\x5b\\x24(rm -rf ~)]'; echo ${x:x}", "x=a$'\\x5b\\x24(rm -rf ~)]'; case 1 in $((x))) ;; esac",
    "x='b[$(rm -rf ~)]'; a=([x]=1)", "x='b[$(rm -rf ~)]'; set -- q; echo ${@:x}", "x='b[$(rm -rf ~)]'; echo ${1:x}",
    "x='b[$(rm -rf ~)]'; \\let x", "x='b[$(rm -rf ~)]'; \\declare -i y; y=x", "x='b[$(rm -rf ~)]'; declare '-i' y; y=x",
    "test -v $'a\\x5b\\x24(rm -rf ~)]'", "n=a$'\\x5b''$(rm -rf ~)]'; test -v \"$n\"", "n=a$'\\x5b''$(rm -rf ~)]'; [[ -v $n ]]",
    "test -- = -- -o -v $'a\\x5b\\x24(rm -rf ~)]'",
    "PS4+='$(rm -rf ~)'; set -x; :", "printf -v PS4 %s '$(rm -rf ~)'; set -x; :", "read PS4 <<< '$(rm -rf ~)'; set -x; :",
    "BASH_ENV+='$(rm -rf ~)' bash -c :", "export BASH_ENV+='$(rm -rf ~)'; bash -c :",
    "printf 'a\\n' | mapfile -C 'rm -rf ~;:' -c 1 arr", "compgen -W '$(rm -rf ~)' x", "compgen -C 'rm -rf ~' x",
    "trap -- '-;rm -rf ~' EXIT", "hash -p /bin/rm ls; ls -rf ~", "BASH_CMDS[ls]=/bin/rm; ls -rf ~",
    "shopt -s expand_aliases; BASH_ALIASES[ls]='rm -rf ~'\nls",
]
SECOND_REVIEW_STILL_READ = ["ls | cat > out.txt", "echo $ENV_FILE", "env | grep PS1", "trap - EXIT", "mapfile -t a < f",
                            "compgen -c | head", "hash -r", "rm -f build/[a-z]*.o", "sort a | uniq > b.txt",
                            # -p/-v of other commands, "read" and "local" inside other words (were asked at first)
                            'mkdir -p "$(dirname "$f")" && printf \'%s\' \'{"a": [1]}\' > "$f"', 'grep -v "$x" f',
                            "python3 - <<'PY'\nimport urllib.request\nr = urllib.request.urlopen('http://localhost:1/a')\n"
                            "print(r.read()[:40])\nPY"]


@pytest.mark.parametrize("command", SECOND_REVIEW)
def test_what_the_second_review_found_is_refused_or_asked(command):
    assert decision("bypassPermissions", command) in ("ask", "deny"), command
    assert decision("plan", command) != "allow", command
    assert decision("default", command, ("bash(ls:*)", "bash(true:*)", "bash(cat:*)", "bash(test:*)", "bash(echo:*)",
                                         "bash(printf:*)", "bash(compgen:*)", "bash(trap:*)", "bash(hash:*)")) != "allow"


@pytest.mark.parametrize("command", SECOND_REVIEW_STILL_READ)
def test_ordinary_lines_beside_the_second_review_stay_allowed(command):
    assert decision("bypassPermissions", command) == "allow", command


@pytest.mark.parametrize("spelling", ["true | cat > $(touch {marker})/dev/null", "true | cat <<E\n$(touch {marker})\nE",
                                      "x=a$'\\x5b\\x24(touch {marker})]'; echo $((x))", "trap -- '-;touch {marker}' EXIT",
                                      "printf 'a\\n' | mapfile -C 'touch {marker};:' -c 1 arr"])
def test_bash_runs_what_the_second_review_hid(spelling, tmp_path):
    assert bash_runs_the_marker(spelling, tmp_path), spelling


# T. the third attacker review: a value built with printf escapes ('a\x5b$\x28…\x29]' prints
#    "a[$(…)]", which no pattern sees in the line) reached arithmetic through a bare-name copy
#    (y=x), an implicit variable (REPLY, MAPFILE, $_), positional parameters, a bundled
#    printf -vx, an offset after a subscript (${a[@]:x}), declare +r -i or with options from a
#    variable, a line continuation inside "((", or a name given by an expansion (read "$n",
#    unset "$n"). Arithmetic now trusts only names the line sets to numbers (or copies of such
#    names) and names it never sets; a command that binds a name only known when it runs is
#    asked about.
_P = "$(printf 'a\\x5b$\\x28rm -rf ~\\x29]')"
THIRD_REVIEW = [
    "printf -vx 'a\\x5b$\\x28rm -rf ~\\x29]'; echo $((x))", f"x={_P}; y=x; echo $((y))", f"x={_P}; y[0]=x; echo $((y))",
    f"x={_P}; declare -a y=(x); echo $((y))", f'read <<< "{_P}"; echo $((REPLY))', f'mapfile <<< "{_P}"; echo $((MAPFILE))',
    f': "{_P}"; echo $((_))', f'f() {{ echo $(($1)); }}; f "{_P}"', f'set -- "{_P}"; for x; do echo $((x)); done',
    f"x={_P}; a=(1); echo ${{a[@]:x}}", f"x={_P}; declare +r -i y; y=x", f"x={_P}; o=-i; declare $o y; y=x",
    f"x={_P}; (\\\n(x))", f'n={_P}; read "$n" <<< 1', f'n={_P}; printf -v"$n" 1', f'n={_P}; declare "$n"=1',
    f'n={_P}; o=-n; declare $o r="$n"; echo $r', f'a=(1); n={_P}; unset "$n"', "read x < f; echo $((x))",
]
THIRD_REVIEW_STILL_READ = ["local i=0; while [ $i -lt 3 ]; do i=$((i+1)); done", 'read -p "$msg" x; echo $x',
                           'export PATH="$HOME/bin:$PATH"', "declare -i n=0; n=$((n+1))", "x=abc; echo $((x))",
                           'while read -r line; do echo "$line"; done < f', "i=0; echo $((i+1))"]


@pytest.mark.parametrize("command", THIRD_REVIEW)
def test_what_the_third_review_found_is_asked(command):
    assert decision("bypassPermissions", command) in ("ask", "deny"), command
    assert decision("plan", command) != "allow", command


@pytest.mark.parametrize("command", THIRD_REVIEW_STILL_READ)
def test_arithmetic_on_numbers_the_line_sets_is_still_read(command):
    assert decision("bypassPermissions", command) == "allow", command


def test_bash_runs_a_value_built_by_printf_escapes(tmp_path):
    marker = tmp_path / "ran"
    line = f"x=$(printf 'a\\x5b$\\x28touch {marker}\\x29]'); y=x; echo $((y))"
    subprocess.run(["bash", "-c", line], capture_output=True, cwd=tmp_path)
    assert marker.exists()


# U. the fourth attacker review (29 lines, each approved before, 27 proved by bash running a
#    marker as nobody): builtins and options that run a command they are given as a word (fc
#    with history -s/-r, strace/ltrace -o '|CMD', flock -c, sed's e command and s///e, w,
#    split --filter, tar's --checkpoint-action=exec= / -I / --to-command); variables whose value
#    git, an editor, less or a child bash runs (GIT_CONFIG_PARAMETERS, GIT_CONFIG_COUNT+KEY+VALUE,
#    LESSOPEN, BASH_FUNC_ls%%); evaluated values that slipped past the number tests (a nameref
#    after +x, `$((1))+…+$((0))`, an array value with nested parentheses, wc/nproc/seq defined as
#    functions, `read <<<"…" x` and `read<<<`); `rm -rf ~/.*` (every dot-file of the home); and
#    under an allow rule, variables set without "=" (for HOME in …, xargs --process-slot-var,
#    strace -EVAR=) and a wrapper's own output file (strace -o FILE).
FOURTH_REVIEW = [
    "history -s 'rm -rf ~'; fc -s", "history -s x; fc -e 'rm -rf ~;:'", "echo 'rm -rf ~' > h; history -r h; fc -s",
    "env 'BASH_FUNC_ls%%=() { rm -rf ~; }' bash -c ls",
    f"v={_P}; declare +x -n r=$v; echo $r", "declare +x -n r=PS$((4)); r='$(rm -rf ~)'; set -x; :",
    "f() { local +r -n r=PS$((4)); r='$(rm -rf ~)'; }; f; set -x; :",
    f"x=$((1))+{_P}+$((0)); echo $((x))", f'a=("{_P}"); echo $((a))', f'a+=("{_P}"); echo $((a))',
    "wc() { printf 'a\\x5b$\\x28rm -rf ~\\x29]'; }; x=$(echo | wc -l); echo $((x))",
    "nproc() { printf 'a\\x5b$\\x28rm -rf ~\\x29]'; }; x=$(nproc); echo $((x))",
    "seq() { printf 'a\\x5b$\\x28rm -rf ~\\x29]'; }; x=$(seq 1); echo $((x))",
    f'read -r <<<"{_P}" x; echo $((x))', f'read<<<"{_P}" x; echo $((x))',
    "strace -o '|rm -rf ~' true", "flock f -c 'rm -rf ~'", "sed -n '1e rm -rf ~' <<< x", "sed 's/x/rm -rf ~/e' f",
    "sed 's/[/]/a;b/e' f", "sed 's/a/b/w .agent/settings.json' f", "split --filter='rm -rf ~' /etc/hostname",
    "tar cf /dev/null --checkpoint=1 --checkpoint-action=exec='rm -rf ~' /etc/hostname", "tar -I 'rm -rf ~;:' -cf x f",
    "LESSOPEN='|rm -rf ~ %s' less /etc/hostname", "GIT_CONFIG_PARAMETERS=\"'core.fsmonitor=rm -rf ~ #'\" git status",
    "GIT_EDITOR='rm -rf ~;:' git commit", "rm -rf ~/.*", "rm -rf ~/.??*", "rm -rf ~/.[!.]*", "rm -rf /.*",
    # getopt_long's abbreviations and option bundles of the same options
    "sed -n -e s/a/b/ -ne '1e rm -rf ~' f", "sed --expr='1e rm -rf ~' f", "sed -- '1e rm -rf ~' f",
    "split --filt='rm -rf ~' f", "tar --checkpoint-act=exec='rm -rf ~' -cf x f", "tar --to-comm='rm -rf ~' -xf x",
    "strace --out='|rm -rf ~' ls", "flock -xc 'rm -rf ~' f", "flock f --comm 'rm -rf ~'",
]
FOURTH_REVIEW_UNDER_A_RULE = [
    "for HOME in /tmp/evil; do git status; done", "for PATH in /tmp/evil; do git status; done",
    "xargs --process-slot-var=GIT_CONFIG_GLOBAL git status </dev/null", "strace -o /dev/null -EGIT_CONFIG_GLOBAL=0 git status",
    "strace -o '|touch x' git status", "strace -f -o ./straceout git status", "command time -o ~/.bashrc git status",
    "strace --out=./x git status", "xargs --process-slot=GIT_CONFIG_GLOBAL git status </dev/null",
]
FOURTH_REVIEW_STILL_READ = [
    "GIT_EDITOR=true git rebase --continue", "GIT_PAGER=cat git log -3", "fc -l", "flock /tmp/build.lock make",
    "sed -n '/start/,/end/{p}' f", "sed -i.bak -e 's/a/b/g' -e '/^#/d' f", "sed 's/[[:space:]]*$//' f",
    "sed '1i header' f", "sed 's|/usr|/opt|g; s/x/y/2' f", "split -l 100 big.txt part_", "tar czf dist.tgz src",
    "tar -xzf dist.tgz -C out", "strace -c ls", "rm -rf build/.cache", "rm -f ~/.*.swp", "rm -rf .pytest_cache/.*",
    "x=$((1+2)); echo $((x))", 'read -r a b <<< "$line"; echo "$a"', "j=$(( $(nproc) * 2 )); make -j$j",
    "sed -n -e 's/a/b/p' f", "sed -ni.bak p f", "sed --in-place=.bak s/a/b/ f", "sed -z -s p f",
]


@pytest.mark.parametrize("command", FOURTH_REVIEW)
def test_what_the_fourth_review_found_is_refused_or_asked(command):
    assert decision("bypassPermissions", command) in ("ask", "deny"), command
    assert decision("plan", command) != "allow", command


@pytest.mark.parametrize("command", FOURTH_REVIEW_UNDER_A_RULE)
def test_what_the_fourth_review_found_is_not_approved_by_a_rule_for_what_it_wraps(command):
    assert decision("default", command, ("bash(git status:*)",)) != "allow", command


@pytest.mark.parametrize("command", FOURTH_REVIEW_STILL_READ)
def test_ordinary_lines_beside_the_fourth_review_stay_allowed(command):
    assert decision("bypassPermissions", command) == "allow", command


def test_loop_variables_that_are_no_environment_variable_keep_a_rule():
    assert decision("default", 'for f in *.py; do git diff "$f"; done', ("bash(git diff:*)",)) == "allow"


@pytest.mark.parametrize("spelling", [
    "history -s 'touch {marker}'; fc -s", "sed -n '1e touch {marker}' <<< x", "split --filter='touch {marker}' /etc/hostname",
    "tar cf /dev/null --checkpoint=1 --checkpoint-action=exec='touch {marker}' /etc/hostname",
    "flock {marker}.lock -c 'touch {marker}'", "env 'BASH_FUNC_ls%%=() {{ touch {marker}; }}' bash -c ls",
    "x=$((1))+$(printf 'a\\x5b$\\x28touch {marker}\\x29]')+$((0)); echo $((x))",
    "read -r <<<\"$(printf 'a\\x5b$\\x28touch {marker}\\x29]')\" x; echo $((x))",
])
def test_bash_runs_what_the_fourth_review_hid(spelling, tmp_path):
    assert bash_runs_the_marker(spelling, tmp_path), spelling


# V. a fifth review, of section U's code (28 lines, each proved by bash as nobody): sed labels end
#    at ";" or a blank and addresses hold escaped delimiters and brackets (`:x;1e …`,
#    `\%x\%b%!e …`, `/[/b/]/!e …`), as a hand-written address reader now reads them; fc -s and
#    -e run even with -l; strace's -o and -E inside an option bundle (-fo'|…', -fEVAR=…); a
#    variable's name spelled with quotes or a backslash (GIT_CONFIG_PARAMETER''S=, the name bash
#    and env see after quote removal: the startup-variable and assignment checks read the line
#    after quote removal); for/select and a glued printf -vNAME binding one; TAR_OPTIONS,
#    PERL5OPT, RUBYOPT, NODE_OPTIONS; npx -c; fakeroot's eval'd --faked/-s/-l/-i/-b.
FIFTH_REVIEW = [
    "sed ':x;1e rm -rf ~' /etc/hostname",
    "sed ': x;1e rm -rf ~' /etc/hostname",
    "sed ':x;s|.*|rm -rf ~|e' /etc/hostname",
    "sed '\\%x\\%b%!e rm -rf ~' /etc/hostname",
    "sed '/[/b/]/!e rm -rf ~' /etc/hostname",
    "set -o history; history -s 'rm -rf ~'\nfc -ls",
    "set -o history; history -s 'rm -rf ~'\nfc -l -s",
    "set -o history; history -s 'rm -rf ~'\nfc -l -e -",
    "strace -fo '|rm -rf ~' true",
    "strace -qfo '!rm -rf ~' true",
    "strace -fo'|rm -rf ~' git status",
    'env GIT_CONFIG_PARAMETER\'\'S="\'core.fsmonitor\'=\'rm -rf ~\'" git status',
    'env "GIT_CONFIG_PARAMETER"S="\'core.fsmonitor\'=\'rm -rf ~\'" git status',
    'strace -fEGIT_CONFIG_PARAMETERS="\'core.fsmonitor\'=\'rm -rf ~\'" git status',
    'strace -qqfEGIT_CONFIG_PARAMETER\'\'S="\'core.fsmonitor\'=\'rm -rf ~\'" git status',
    "env GIT_SSH_COMMAN''D='rm -rf ~' git ls-remote ssh://x/y",
    "declare -x GIT_SSH_COMMAN\\D='rm -rf ~'; git ls-remote ssh://x/y",
    'export GIT_SSH_COMMAN""D=\'rm -rf ~\'; git ls-remote ssh://x/y',
    "env BASH_FUN''C_ls%%='() { rm -rf ~; }' bash -c ls",
    "set -a; for GIT_SSH_COMMAND in 'rm -rf ~'; do git ls-remote ssh://x/y; done",
    "set -a; printf -vGIT_SSH_COMMAND %s 'rm -rf ~'; git ls-remote ssh://x/y",
    "printf -vPS4 %s '$(rm -rf ~)'; set -x; :",
    "for PS4 in '$(rm -rf ~)'; do set -x; :; done",
    'TAR_OPTIONS="--to-command=\'rm -rf ~\'" tar xf /tmp/atk5/t.tar',
    'TAR_OPTIONS="--checkpoint=1 \'--checkpoint-action=exec=rm -rf ~\'" tar cf /tmp/atk5/run/b.tar /etc/hostname',
    "env PERL5OPT='-Mbase;system(q(rm -rf ~))' perl /dev/null",
    "npx -c 'rm -rf ~'",
    "fakeroot --faked 'rm -rf ~;' git status",
]
FIFTH_REVIEW_STILL_READ = ["fc -l", "fc -ln -5", "strace -f -c ls", "strace -e trace=open ls", "npx prettier --check .",
                           "sed ':a;N;$!ba;s/\\n/ /g' f", "sed '/^[[:space:]]*$/d' f", "sed -n '\\%usr%p' f",
                           "sed -e :a -e '$!N;s/\\n//;ta' f", "export PYTHONPATH=src", "for f in *.py; do wc -l \"$f\"; done"]


@pytest.mark.parametrize("command", FIFTH_REVIEW)
def test_what_the_fifth_review_found_is_asked(command):
    assert decision("bypassPermissions", command) in ("ask", "deny"), command
    assert decision("default", command, ("bash(git status:*)", "bash(git ls-remote:*)")) != "allow", command


@pytest.mark.parametrize("command", FIFTH_REVIEW_STILL_READ)
def test_ordinary_lines_beside_the_fifth_review_stay_allowed(command):
    assert decision("bypassPermissions", command) == "allow", command


@pytest.mark.parametrize("spelling", ["sed ':x;1e touch {marker}' /etc/hostname",
                                      "sed '/[/b/]/!e touch {marker}' /etc/hostname",
                                      "set -o history; history -s 'touch {marker}'\nfc -l -s",
                                      "env BASH_FUN''C_ls%%='() {{ touch {marker}; }}' bash -c ls"])
def test_bash_runs_what_the_fifth_review_hid(spelling, tmp_path):
    assert bash_runs_the_marker(spelling, tmp_path), spelling


# the next spellings an attacker would try for sections U and V (a path or a wrapper before the
# program, ANSI-C or split quotes around the script, an option that only reads, the variable
# exported first, the script fed on stdin)
NEXT_VARIANTS = [
    "/usr/bin/sed -n '1e rm -rf ~' f", "busybox sed '1e rm -rf ~' f", "sed --posix -n '1e rm -rf ~' f",
    "command fc -s", "\\fc -e - ", "nice sed 's/x/rm -rf ~/e' f", "sed -n $'1e rm -rf ~' f", "sed -n '1'e' rm -rf ~' f",
    "env -i LESSOPEN='|rm -rf ~ %s' less f", "export LESSOPEN='|rm -rf ~ %s'; less f",
    "timeout 5 strace --output='|rm -rf ~' true", "xargs -a f sed '1e rm -rf ~'", "sed -f - f <<< '1e rm -rf ~'",
    "gtar --to-command='rm -rf ~' -xf x", "tar -xf x --use-compress-prog='rm -rf ~;:'",
]


@pytest.mark.parametrize("command", NEXT_VARIANTS)
def test_the_next_variants_of_the_fourth_and_fifth_reviews_are_asked(command):
    assert decision("bypassPermissions", command) in ("ask", "deny"), command
