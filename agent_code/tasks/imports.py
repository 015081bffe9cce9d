"""What each python file of the baseline imports, read with ``ast`` (nothing is run): the grader
copies this file into the grading sandbox and runs it as the agent user over the baseline's
tracked ``.py`` files before the agent's change is applied (``python imports.py LISTFILE``,
LISTFILE holding the paths, NUL-separated); it prints one JSON object ``{path: scan}``. The
same :func:`scan` reads the hidden tests of a task's ``test_patch`` on the grader's side.

A scan (``support.py`` decides what it means)::

    {"imports": [[module, level, [names]], ...],  # import a.b -> ["a.b", 0, []]; from ..x import y -> ["x", 2, ["y"]]
     "strings": [...],     # dotted names in quotes ("pkg.testing", pytest_plugins, mock.patch targets) and
                           # what import_module()/__import__()/importorskip() are given ("pkg.testing")
     "asserts": bool,      # defines an assert* function or method, or raises AssertionError
     "functions": [...],   # its top-level function names
     "classes": [[name, [base names]], ...]}     # its top-level classes

The body of ``if __name__ == "__main__":`` is skipped (a module that runs its doctests when run as
a script imports ``doctest`` there). A file that does not parse is read line by line for its
import statements. Kept to the python 3.6 standard library: it runs on the task's interpreter.
"""

import ast
import json
import os
import re
import sys

MAX_BYTES = 2000000
_DOTTED = re.compile(r"[A-Za-z_]\w*(?:\.[A-Za-z_]\w*)+(?=:\w+$|$)")
_IMPORT_LINE = re.compile(r"^\s*(?:from\s+(\.*)([\w.]*)\s+import\s+\(?([\w\s,*]+)|import\s+([\w.,\s]+))")


def _text(node):
    """The value of a string constant node, or None."""
    kind = type(node).__name__
    if kind == "Constant":
        value = getattr(node, "value", None)
        return value if isinstance(value, str) else None
    if kind == "Str":                                   # python < 3.8
        return getattr(node, "s", None)
    return None


def _name(node):
    """``f`` of ``f(...)``, ``m.f(...)``: the last name of a call's function or a class's base."""
    if isinstance(node, ast.Name):
        return node.id
    if isinstance(node, ast.Attribute):
        return node.attr
    return ""


def _main_guard(node):
    test = getattr(node, "test", None)
    if not isinstance(node, ast.If) or not isinstance(test, ast.Compare):
        return False
    sides = [test.left] + list(test.comparators)
    return any(isinstance(s, ast.Name) and s.id == "__name__" for s in sides) and any(
        _text(s) == "__main__" for s in sides)


def _import_call(node, strings):
    """``import_module("pkg.testing")``, ``import_module(".testing", package="pkg")``,
    ``__import__("pkg")``, ``pytest.importorskip("pkg.x")``: the module named."""
    if not node.args or "import" not in _name(node.func).lower():
        return
    name = _text(node.args[0])
    if not name:
        return
    package = _text(node.args[1]) if len(node.args) > 1 else None
    for keyword in node.keywords:
        if keyword.arg == "package":
            package = _text(keyword.value)
    if name.startswith(".") and package:
        level = len(name) - len(name.lstrip("."))
        base = package.split(".")[:len(package.split(".")) - (level - 1)] if level > 1 else package.split(".")
        name = ".".join(base + [name.lstrip(".")] if name.lstrip(".") else base)
    strings.add(name)


def scan(text):
    """The scan of one file's source (see the module docstring)."""
    imports, strings, functions, classes = [], set(), [], []
    found = {"asserts": False}
    try:
        tree = ast.parse(text)
    except (SyntaxError, ValueError, RecursionError, MemoryError):
        return scan_lines(text)
    for node in tree.body:
        if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)):
            functions.append(node.name)
        elif isinstance(node, ast.ClassDef):
            classes.append([node.name, [_name(b) for b in node.bases]])
    todo = [tree]
    while todo:
        node = todo.pop()
        if _main_guard(node):
            todo.extend(getattr(node, "orelse", []))
            continue
        todo.extend(ast.iter_child_nodes(node))
        if isinstance(node, ast.Import):
            imports.extend([a.name, 0, []] for a in node.names)
        elif isinstance(node, ast.ImportFrom):
            imports.append([node.module or "", node.level or 0, [a.name for a in node.names]])
        elif isinstance(node, ast.Call):
            _import_call(node, strings)
        elif isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)) and node.name.lower().startswith("assert"):
            found["asserts"] = True
        elif isinstance(node, ast.Raise) and node.exc is not None:
            raised = node.exc.func if isinstance(node.exc, ast.Call) else node.exc
            found["asserts"] = found["asserts"] or _name(raised) == "AssertionError"
        elif isinstance(node, ast.Assign) and any(_name(t) == "pytest_plugins" for t in node.targets):
            strings.update(s for s in map(_text, ast.walk(node.value)) if s)
        else:
            value = _text(node)
            match = _DOTTED.match(value) if value and len(value) < 200 else None
            if match:
                strings.add(match.group(0))
    return {"imports": imports, "strings": sorted(strings), "asserts": found["asserts"], "functions": functions,
            "classes": classes}


def scan_lines(text):
    """The import statements of a file that does not parse (another python's syntax, a fragment
    of a diff), one line at a time."""
    imports = []
    for line in text.splitlines():
        match = _IMPORT_LINE.match(line)
        if not match:
            continue
        dots, module, names, plain = match.groups()
        if plain is not None:
            imports.extend([n.split()[0], 0, []] for n in plain.split(",") if n.strip())
        else:
            imports.append([module, len(dots), [n.split()[0] for n in names.split(",") if n.strip()]])
    return {"imports": imports, "strings": [], "asserts": False, "functions": [], "classes": []}


def main(listfile):
    with open(listfile, "rb") as f:
        paths = [p.decode("utf-8", "surrogateescape") for p in f.read().split(b"\0") if p]
    out = {}
    for path in paths:
        if os.path.islink(path):                        # a link may lead out of the workspace
            continue
        try:
            with open(path, "rb") as f:
                data = f.read(MAX_BYTES + 1)
        except OSError:
            continue
        if len(data) <= MAX_BYTES:
            out[path] = scan(data.decode("utf-8", "replace"))
    print(json.dumps(out))


if __name__ == "__main__":
    main(sys.argv[1])
