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


@pytest.mark.parametrize("payload", [
    {"text": "lone \ud800 surrogate", "nested": ["\udfff", {"k": "x\ud83d"}]},   # echoed from a hostile request
    {"big": 2**70, "neg": -(2**80), "fine": 12},                                    # past orjson's 64 bits
    {"logprobs": [float("-inf"), -0.5, float("nan"), float("inf")], "n": [1.5e300]},
    {1: "int key", "s": {2.5: "float key", None: "none key", True: "bool key"}},
    {"deep": [[[[{"é": "ünïcode 🙂"}]]]], "empty": {}, "t": (1, 2)},
])
def test_json_bytes_always_writes_valid_utf8_json(payload):
    from agent_code.gateway.http import json_bytes, json_response

    raw = json_bytes(payload)
    text = raw.decode("utf-8")            # valid UTF-8, whatever the payload held
    value = json.loads(text, parse_constant=lambda c: pytest.fail(f"{c} is not JSON"))
    assert isinstance(value, dict) and b", " not in raw and b'": ' not in raw   # compact separators
    flat = json.dumps(value)
    if "logprobs" in payload:             # a float that is not finite is null, never NaN/Infinity
        assert value["logprobs"] == [None, -0.5, None, None] and value["n"] == [1.5e300]
    if "big" in payload:                  # big integers stay exact
        assert value["big"] == 2**70 and value["neg"] == -(2**80)
    if "text" in payload:                 # a lone surrogate is escaped, the rest kept
        assert "\\ud800" in text and "lone" in flat
    if 1 in payload:
        assert value["1"] == "int key" and value["s"]["null"] == "none key" and value["s"]["true"] == "bool key"
    response = json_response(payload, status=201)
    assert response.status_code == 201 and response.body == raw and response.media_type == "application/json"
