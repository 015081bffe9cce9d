"""The gateway's request-body reader: orjson first, the standard library's strict reading when
orjson refuses or would change a value — the same values and the same refusals either way."""

from __future__ import annotations

import json
import random

import pytest

from agent_code.gateway import http
from agent_code.gateway.http import HttpError, parse_json_body


def stdlib_only(raw: bytes, monkeypatch) -> object:
    with monkeypatch.context() as m:
        m.setattr(http, "orjson", None)
        return parse_json_body(raw)


def random_value(rng: random.Random, depth: int = 0):
    kind = rng.randrange(9 if depth < 4 else 6)
    if kind == 0:
        return rng.choice([0, -1, 7, 2**63 - 1, -2**63, 2**64 - 1, 10**19, 10**25, -10**30, 10**300])
    if kind == 1:
        return rng.choice([0.0, -0.0, 1.5, 1e-300, 1e300, 2.5e-320, 3.141592653589793, 1e19])
    if kind == 2:
        return rng.choice([True, False, None])
    if kind in (3, 4, 5):
        return "".join(rng.choice(["a", "é", "😀", "\\", '"', "\n", "\u2028", "\x00", "12345678901234567890", " "])
                       for _ in range(rng.randrange(12)))
    if kind in (6, 7):
        return [random_value(rng, depth + 1) for _ in range(rng.randrange(5))]
    return {f"k{rng.randrange(6)}": random_value(rng, depth + 1) for _ in range(rng.randrange(5))}


def test_the_same_values_as_the_standard_library(monkeypatch):
    rng = random.Random(11)
    for _ in range(400):
        value = {"messages": [random_value(rng) for _ in range(3)]}
        for raw in (json.dumps(value).encode(), json.dumps(value, ensure_ascii=False).encode()):
            got = parse_json_body(raw)
            assert got == stdlib_only(raw, monkeypatch) == json.loads(raw)
            # same types too, however deep (1 == 1.0 == True would hide a changed value)
            assert json.dumps(got) == json.dumps(json.loads(raw))


@pytest.mark.parametrize("raw,kept", [
    (b'{"id": 123456789012345678901234567890}', 123456789012345678901234567890),   # orjson: a float
    (b'{"id": -98765432109876543210}', -98765432109876543210),
    (b'{"id": 18446744073709551616}', 18446744073709551616),
    (b'{"id": -9223372036854775809}', -9223372036854775809),                       # 19 digits, below int64
    (b'{"id": -9999999999999999999}', -9999999999999999999),
    (b'{"id": [1, -9223372036854775809]}', [1, -9223372036854775809]),
    (b'\xef\xbb\xbf{"id": 1}', 1),                                                   # a BOM
])
def test_what_orjson_would_change_or_refuse_is_read_as_before(raw, kept):
    value = parse_json_body(raw)["id"]
    assert value == kept and type(value) is type(kept) and json.dumps(value) == json.dumps(kept)   # ints, not floats


@pytest.mark.parametrize("raw,says", [
    (b'{"a": NaN}', "not valid JSON"), (b'{"a": Infinity}', "not valid JSON"), (b'{"a": -1e400}', "out of range"),
    (b'{"a": 1' + b'0' * 400 + b'}', "out of range"), (b'{"a": "\\ud800"}', "lone UTF-16 surrogate"),
    (b'{"a": "\\udc00x"}', "lone UTF-16 surrogate"), (b'{"a": "\xed\xa0\x80"}', "not valid UTF-8"),
    (b'{"a": "\xff"}', "not valid UTF-8"), (b'{"a": 1} {"b": 2}', "not valid JSON"), (b'[' * 100_000, "nested too deeply"),
    (b'   ', "empty"),
])
def test_refusals_are_the_strict_readers(raw, says, monkeypatch):
    for read in (parse_json_body, lambda r: stdlib_only(r, monkeypatch)):
        with pytest.raises(HttpError) as caught:
            read(raw)
        assert caught.value.status == 400 and says in caught.value.message
