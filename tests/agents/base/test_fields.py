"""agents/base/fields.py: the one JSON decoder reads every line as the standard library does.

orjson decodes; what it refuses goes to ``json.loads``. So the switch to orjson changes how
fast a line is read, not what it reads as nor whether it is malformed, with one exception
documented in ``decode_json``: an integer wider than 64 bits reads as a float.
"""

from __future__ import annotations

import json
import math
from typing import Any

import pytest
from hypothesis import given
from hypothesis import strategies as st

from threadspindle.agents.base.fields import MalformedInput, decode_json, load_object

JSON_VALUES = st.recursive(
    st.none()
    | st.booleans()
    | st.integers(min_value=-(2**63), max_value=2**64 - 1)
    | st.floats(allow_nan=False, allow_infinity=False)
    | st.text(),
    lambda inner: st.lists(inner, max_size=4) | st.dictionaries(st.text(), inner, max_size=4),
    max_leaves=20,
)


@given(JSON_VALUES, st.booleans())
def test_decodes_what_the_standard_library_decodes(value: Any, ascii_only: bool) -> None:
    text = json.dumps(value, ensure_ascii=ascii_only)
    # Compared through dumps: 1 == 1.0 == True in Python, but not in a parser's type checks.
    assert json.dumps(decode_json(text)) == json.dumps(json.loads(text))


@pytest.mark.parametrize(
    "text",
    [
        '{"n": NaN, "i": Infinity}',
        "[" * 600 + "]" * 600,  # deeper than orjson's limit, within the standard library's
    ],
)
def test_what_orjson_refuses_reads_as_the_standard_library_reads_it(text: str) -> None:
    expected = json.loads(text)
    got = decode_json(text)
    if isinstance(expected, dict) and "n" in expected:
        assert math.isnan(got["n"]) and got["i"] == math.inf
    else:
        assert got == expected


@pytest.mark.parametrize("text", ["", "   ", "not json", '{"a": 1', "[1, 2]", '"text"', "{" * 5000])
def test_load_object_refuses_what_is_not_one_object(text: str) -> None:
    with pytest.raises(MalformedInput):
        load_object(text)


def test_an_integer_wider_than_64_bits_reads_as_a_float() -> None:
    """The one difference from ``json.loads`` (orjson's choice): no CLI prints such numbers
    in a field a parser reads as an integer (token counts, ids and indexes are far smaller)."""
    assert decode_json('{"big": 123456789012345678901234567890}') == {"big": 1.2345678901234568e29}
    assert decode_json('{"max": 18446744073709551615}') == {"max": 2**64 - 1}


def test_load_object_reads_an_object() -> None:
    assert load_object('{"type": "x", "n": 1.5}') == {"type": "x", "n": 1.5}


def test_a_lone_surrogate_escape_in_agent_output_becomes_a_replacement_character() -> None:
    # orjson refuses the escape; the standard library's decoding keeps it, and no log row,
    # page or platform call could hold such a string.
    line = '{"type": "text", "text": "cut \\ud83d here", "\\udc00": ["\\ud800"]}'
    assert load_object(line) == {"type": "text", "text": "cut \ufffd here", "\ufffd": ["\ufffd"]}
    assert decode_json(line) == load_object(line)
