"""JSON value checks shared by every protocol's validation: names as JSON Schema says them
(``null``, ``boolean``, ``number``, ``string``, ``array``, ``object``) for error messages."""

from __future__ import annotations

import math
from typing import Any

_NAMES = ((bool, "boolean"), ((int, float), "number"), (str, "string"), (list, "array"), (dict, "object"))


def type_name(value: Any) -> str:
    if value is None:
        return "null"
    return next((name for kind, name in _NAMES if isinstance(value, kind)), type(value).__name__)


def is_int(value: Any) -> bool:
    return isinstance(value, int) and not isinstance(value, bool)


def is_number(value: Any) -> bool:
    return isinstance(value, (int, float)) and not isinstance(value, bool) and math.isfinite(value)
