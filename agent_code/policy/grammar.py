"""tree-sitter's bash grammar, as the policy package uses it: the language, one parser per
process, and each node kind's name by its id (``KIND[node.kind_id]`` is ``node.type``,
interned, without building a new str on every access: a hot path)."""

from __future__ import annotations

import sys
from functools import lru_cache

import tree_sitter
import tree_sitter_bash

LANGUAGE = tree_sitter.Language(tree_sitter_bash.language())
Node = tree_sitter.Node

KIND = {i: sys.intern(LANGUAGE.node_kind_for_id(i) or "") for i in range(LANGUAGE.node_kind_count)}
KIND[0xFFFF] = "ERROR"  # (tree-sitter's id of an ERROR node)


@lru_cache(maxsize=1)
def parser() -> tree_sitter.Parser:
    """The bash parser (built once)."""
    return tree_sitter.Parser(LANGUAGE)
