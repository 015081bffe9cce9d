"""Compile the permission policy's hot modules to C with mypyc (optional; pure Python otherwise).

The policy judges every bash call; on a 2 kB line most of its time is Python walking the
tree-sitter tree and the commands in it. mypyc (shipped with mypy, a dev dependency) compiles
the same, type-annotated sources to a C extension. The build goes to
``agent_code/policy/_native/`` (git-ignored) with ``STAMP.json``: the SHA-256 of each source
it was built from and the interpreter's ABI. :mod:`agent_code.policy` uses the build only
when every stamp matches (an edited source makes the whole package pure Python again until
the next build) and ``AGENT_CODE_PURE_PYTHON`` is not set; ``agent_code.policy.NATIVE`` says
which ran. Both forms pass the same policy tests (``scripts/test.sh`` runs them on each).

Run: .venv/bin/python scripts/build_native.py [--force] [--check]
  exit 0: built or already current; 1: the build failed (no C compiler, mypyc missing …);
  --check: only say whether the build is current (exit 0) or not (exit 3).
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))

from agent_code.policy.native import COMPILED, GROUP, NATIVE_DIR, STAMP, build_matches, stamp_for  # noqa: E402


def build() -> int:
    with tempfile.TemporaryDirectory(prefix="agent-code-native-") as tmp:
        work = Path(tmp)
        # the whole package (mypy follows the policy's imports), compiled: the hot modules only
        shutil.copytree(REPO / "agent_code", work / "agent_code",
                        ignore=shutil.ignore_patterns("__pycache__", "_native", "*.so"))
        paths = [f"agent_code/policy/{name}.py" for name in COMPILED]
        setup = work / "setup_native.py"
        setup.write_text(
            "from setuptools import setup\n"
            "from mypyc.build import mypycify\n"
            f"setup(name='agent-code-policy-native', ext_modules=mypycify({paths!r}, opt_level='3', "
            f"group_name={GROUP.removesuffix('__mypyc')!r}))\n")  # (mypyc appends __mypyc)
        env = {**os.environ, "MYPY_CACHE_DIR": str(work / ".mypy_cache")}
        done = subprocess.run([sys.executable, str(setup), "build_ext", "--inplace"], cwd=work, env=env,
                              capture_output=True, text=True)
        if done.returncode != 0:
            print(done.stdout[-3000:] + done.stderr[-3000:], file=sys.stderr)
            return 1
        built = sorted((work / "agent_code" / "policy").glob("*.so"))
        if len(built) != len(COMPILED) + 1:  # a module each, and the group's shared library
            print(f"build_native: expected {len(COMPILED) + 1} extension files, got {[p.name for p in built]}",
                  file=sys.stderr)
            return 1
        staged = NATIVE_DIR.with_name("_native.new")
        shutil.rmtree(staged, ignore_errors=True)
        staged.mkdir()
        for path in built:
            shutil.copy2(path, staged / path.name)
        # the stamp names the sources as they were copied (an edit during the build: stale at once)
        (staged / STAMP).write_text(json.dumps(stamp_for(work / "agent_code", staged), indent=1, sort_keys=True))
        shutil.rmtree(NATIVE_DIR, ignore_errors=True)
        staged.rename(NATIVE_DIR)
    return 0


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--force", action="store_true", help="build even when the build is current")
    ap.add_argument("--check", action="store_true", help="only say whether the build is current")
    args = ap.parse_args()
    if args.check:
        fresh = build_matches()
        print("the permission policy: " + ("compiled (a current build)" if fresh
                                           else "pure Python (no compiled build, or one of older sources)"))
        return 0 if fresh else 3
    if build_matches() and not args.force:
        return 0
    print("setup: compiling the permission policy with mypyc (about a minute)", file=sys.stderr)
    status = build()
    if status:
        print("build_native: the build failed; the policy runs as pure Python", file=sys.stderr)
    return status


if __name__ == "__main__":
    sys.exit(main())
