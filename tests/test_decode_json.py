"""dsh._json.decode_json: orjson's speed, json.loads's answers."""

from __future__ import annotations

import json
import math
from typing import Any

import pytest
from hypothesis import given
from hypothesis import strategies as st

from dsh._json import decode_json

#: JSON values within what orjson reads exactly as json.loads does (integers up to 64 bits).
values = st.recursive(
    st.none()
    | st.booleans()
    | st.integers(min_value=-(2**63), max_value=2**63 - 1)
    | st.floats()
    | st.text(),
    lambda children: (
        st.lists(children, max_size=4) | st.dictionaries(st.text(max_size=8), children, max_size=4)
    ),
    max_leaves=20,
)


def same(a: Any, b: Any) -> bool:
    """Equal, NaN equal to NaN (``json.dumps`` writes both the same)."""
    return json.dumps(a) == json.dumps(b)


@given(values, st.booleans(), st.booleans())
def test_any_value_decodes_as_json_loads_decodes_it(value: Any, ascii: bool, raw: bool) -> None:
    text = json.dumps(value, ensure_ascii=ascii)
    data: str | bytes = text.encode() if raw else text
    assert same(decode_json(data), json.loads(data))


def test_a_streamed_chunk_decodes() -> None:
    chunk = '{"choices":[{"index":0,"delta":{"content":"tok "},"finish_reason":null}]}'
    assert decode_json(chunk) == {
        "choices": [{"index": 0, "delta": {"content": "tok "}, "finish_reason": None}]
    }


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        ("NaN", math.nan),
        ("[Infinity, -Infinity]", [math.inf, -math.inf]),
        ("[1e400]", [math.inf]),
        ('"\\ud800"', "\ud800"),
    ],
)
def test_what_orjson_refuses_json_loads_still_reads(text: str, expected: Any) -> None:
    assert same(decode_json(text), expected)


@pytest.mark.parametrize("text", ["", "{", '{"a": }', "[1,]", "nul", "{'a': 1}"])
def test_malformed_json_raises_json_loads_error(text: str) -> None:
    with pytest.raises(json.JSONDecodeError) as caught:
        decode_json(text)
    with pytest.raises(json.JSONDecodeError) as reference:
        json.loads(text)
    assert type(caught.value) is type(reference.value)
    assert str(caught.value) == str(reference.value)
