"""JSON value checks shared by every protocol's validation: names as JSON Schema says them
(``null``, ``boolean``, ``number``, ``string``, ``array``, ``object``) for error messages; and
telling apart values that ``==`` calls equal across JSON types (``1 == 1.0 == True``)."""

from __future__ import annotations

import math
from collections.abc import Sequence

import orjson

# where in a JSON value: object keys and array indexes, from the top
JsonPath = tuple[str | int, ...]
# a value's number/bool/null places and their types (:func:`scalar_paths`)
ScalarPaths = Sequence[tuple[JsonPath, type]]

_NAMES = ((bool, "boolean"), ((int, float), "number"), (str, "string"), (list, "array"), (dict, "object"))


def type_name(value: object) -> str:
    if value is None:
        return "null"
    return next((name for kind, name in _NAMES if isinstance(value, kind)), type(value).__name__)


def is_int(value: object) -> bool:
    return isinstance(value, int) and not isinstance(value, bool)


def is_number(value: object) -> bool:
    return isinstance(value, (int, float)) and not isinstance(value, bool) and math.isfinite(value)


def scalar_paths(value: object, path: JsonPath = ()) -> list[tuple[JsonPath, type]]:
    """Where a JSON value holds something other than a string, dict or list, and its type."""
    if isinstance(value, dict):
        return [found for k, v in value.items() for found in scalar_paths(v, (*path, k))]
    if isinstance(value, list):
        return [found for i, v in enumerate(value) for found in scalar_paths(v, (*path, i))]
    return [] if isinstance(value, str) else [(path, type(value))]


def same_scalar_types(value: object, paths: ScalarPaths) -> bool:
    """For a value ``==`` to the one ``paths`` came from: the same type at each of those places
    (``==`` already made everything else alike: only numbers, bools and null can be equal
    across types)."""
    for path, kind in paths:
        node = value
        for step in path:
            if isinstance(node, dict):
                node = node[step]
            elif isinstance(node, list) and isinstance(step, int):
                node = node[step]
            else:   # not the shape ``paths`` came from (cannot happen for an ``==`` value)
                return False
        if type(node) is not kind:
            return False
    return True


def same_key_order(value: object, other: object) -> bool:
    """For two values that are ``==`` with the same number/bool/null types: whether they also
    write the same JSON text, every object listing its keys in the same order (what a chat
    template rendering them with ``tojson`` shows; ``==`` ignores it). Written with orjson
    (~25 µs for Claude Code's tools); a value it cannot write (an integer past 64 bits) is
    walked."""
    if value is other:
        return True
    try:
        return orjson.dumps(value) == orjson.dumps(other)
    except (TypeError, orjson.JSONEncodeError):
        return _same_key_order(value, other)


def _same_key_order(value: object, other: object) -> bool:
    if isinstance(value, dict) and isinstance(other, dict):
        return list(value) == list(other) and all(_same_key_order(v, other[k]) for k, v in value.items())
    if isinstance(value, list) and isinstance(other, list):
        return len(value) == len(other) and all(_same_key_order(v, w) for v, w in zip(value, other))
    return value == other and type(value) is type(other)
