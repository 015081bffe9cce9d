"""The request parser's lone-surrogate check reads the JSON text once (no second serialisation
of the body) and agrees with serialising the parsed body, on every spelling tried."""

from __future__ import annotations

import json
import random

import pytest

from agent_code.gateway.http import HttpError, lone_surrogate_escape, parse_json_body

PIECES = ["\\ud83d", "\\ude00", "\\ud800", "\\udfff", "\\DBFF\\uDFFF", "\\\\", "\\\\ud83d", "a", "\\u0041", "\\\"",
          "é", "\\\\\\ud83d\\ude00", "\\u00e9", "\\uD83D\\uDE00", "\\ud83d\\\\ude00", "\\ud83d \\ude00", "\\/"]


def serialising_finds_one(text: str) -> bool | None:
    """The former check: serialise the parsed value as UTF-8 (None: not JSON)."""
    try:
        value = json.loads(text)
    except ValueError:
        return None
    try:
        json.dumps(value, ensure_ascii=False).encode("utf-8")
    except UnicodeEncodeError:
        return True
    return False


def test_the_check_agrees_with_serialising_the_parsed_body():
    rng = random.Random(11)
    checked = lone = 0
    for _ in range(5000):
        strings = ["".join(rng.choice(PIECES) for _ in range(rng.randrange(0, 6))) for _ in range(3)]
        text = '{"a": "%s", "b": ["%s", {"%s": 1}]}' % tuple(strings)
        expected = serialising_finds_one(text)
        if expected is None:
            continue
        checked += 1
        lone += expected
        assert (lone_surrogate_escape(text) is not None) == expected, text
    assert checked > 3000 and 0 < lone < checked   # both kinds were tried


@pytest.mark.parametrize("body", [b'{"a": "\\ud800"}', b'{"a": "x\\udc00"}', b'{"a": "\\ud83d\\ud83d\\ude00"}',
                                  b'{"\\ud800": 1}', b'["\\\\\\udfff"]'])
def test_a_lone_surrogate_is_a_400(body):
    with pytest.raises(HttpError) as err:
        parse_json_body(body)
    assert err.value.status == 400 and "lone UTF-16 surrogate" in err.value.message


@pytest.mark.parametrize("body, value", [(b'{"a": "\\ud83d\\ude00"}', {"a": "\U0001F600"}),
                                         (b'{"a": "\\\\ud800"}', {"a": "\\ud800"}),
                                         (b'["\\\\\\\\ud800"]', ["\\\\ud800"])])
def test_pairs_and_escaped_backslashes_pass(body, value):
    assert parse_json_body(body) == value
