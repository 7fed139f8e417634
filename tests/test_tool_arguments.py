"""A tool call's arguments are read by orjson where it reads them as ``json.loads`` does, and by
``json.loads`` (the reference) everywhere else: the same values, of the same types, and the same
refusals."""

from __future__ import annotations

import json
from typing import Any

import pytest
from hypothesis import example, given
from hypothesis import strategies as st

from dsh._json import decode_json_exact
from dsh.tools._registry import ToolExecution

values = st.recursive(
    st.none() | st.booleans() | st.integers() | st.floats() | st.text(),
    lambda children: (
        st.lists(children, max_size=4) | st.dictionaries(st.text(max_size=8), children, max_size=4)
    ),
    max_leaves=20,
)


def read(reader: Any, text: str) -> tuple[str, Any]:
    """What ``reader`` makes of ``text``: its value as ``json.dumps`` writes it (``1`` and
    ``1.0`` apart, NaN equal to NaN), or the kind of error it raised."""
    try:
        return "value", json.dumps(reader(text))
    except ValueError:
        return "error", None


@given(values, st.booleans())
@example(2**64, False)  # one past orjson's 64 bits
@example(-(2**63) - 1, False)
@example({"id": 10**30, "x": [1.5, -0.0]}, True)
@example(float("nan"), False)
@example("a\ud800b", False)
def test_arguments_are_read_as_json_loads_reads_them(value: Any, ascii: bool) -> None:
    text = json.dumps(value, ensure_ascii=ascii)
    assert read(decode_json_exact, text) == read(json.loads, text)


@given(st.text(alphabet='0123456789.eE+-"[]{},: tnrufalsNIy', max_size=40) | st.text(max_size=40))
@example("1e400")
@example("[Infinity, 12345678901234567890123]")
@example('{"a": 1, "a": 2}')
@example(" 7 ")
@example("01")
def test_any_text_is_read_or_refused_as_json_loads_does(text: str) -> None:
    assert read(decode_json_exact, text) == read(json.loads, text)


def test_a_call_s_arguments_keep_a_long_integer_exact() -> None:
    call = ToolExecution("c", "t", '{"id": 123456789012345678901234567890}')
    assert call.parsed_arguments() == {"id": 123456789012345678901234567890}
    with pytest.raises(ValueError, match="Expecting property name"):
        ToolExecution("c", "t", "{not json").parsed_arguments()
