"""The permission system: whether a tool call may run.

One package, below the agent loop and above the tools it judges:

- ``shell_syntax`` — bash parsed with tree-sitter's grammar into pipelines, commands
  and words (quoting, substitutions, here-documents opened up), no process started;
- ``misreads`` — where tree-sitter-bash and bash read a line differently (asked about);
- ``commands`` — what a command line would run, at any depth, unwrapped and normalized;
- ``evaluated`` — text bash evaluates later (arithmetic, subscripts, namerefs, ``${x@P}``);
- ``runners`` — commands and options that run a command given as a word (``sed e``,
  ``strace -o '|…'``, ``fc`` …), and the variables programs take code from;
- ``denylist`` — the built-in deny list, on in every mode;
- ``rules`` — ``allow``/``ask``/``deny`` rules (``bash(git diff:*)``, ``read_file(src/**)``);
- ``settings`` — the ``permissions`` section of a settings file;
- ``self_protection`` — the agent's own settings, hooks, skills and ``.git``, which no
  call may change outside bypassPermissions;
- ``readonly`` — which commands plan mode runs as reading (git with its executable
  config neutralised);
- ``permissions`` — the modes and the decision, :class:`PermissionPolicy` (its
  :meth:`~PermissionPolicy.explain`: the decision and why, without asking anyone).

The names below are the public face: what the loop, the CLI and the settings loader use.
The submodules stay importable for tests and benchmarks.
"""

from agent_code.policy.permissions import Decision, Explanation, PermissionMode, PermissionPolicy
from agent_code.policy.rules import RuleError, RuleSet, parse_rule, subject_of, suggest_rules
from agent_code.policy.settings import MODES, PermissionSettings, SettingsError, read_permissions

__all__ = ["Decision", "Explanation", "MODES", "PermissionMode", "PermissionPolicy", "PermissionSettings", "RuleError",
           "RuleSet", "SettingsError", "parse_rule", "read_permissions", "subject_of", "suggest_rules"]
