"""The JSONL store's one speed trick, behind one function: the lines of a batch of rows.

:func:`reference_lines` is the definition — each row as compact JSON in UTF-8 (the text
``json.dumps`` writes with ``separators=(",", ":")`` and ``ensure_ascii=False``; a row holding
a lone surrogate, which UTF-8 cannot hold, as :func:`dsh.plugin.dumps` writes it, ASCII with
escapes) and a newline. :func:`lines` writes the same bytes faster: orjson writes rows several
times faster than the standard encoder, but not always the same text, so its output for the
whole batch is checked at once for anything orjson may write otherwise (a ``null`` that may be
a NaN, a float with an exponent or many leading zeros); in a batch the check does not clear,
each row it does not clear is written by the reference, and a batch with a value orjson
refuses (a lone surrogate among them) is written by the reference. The row of a run of deltas
is cleared from its values instead (strings, integers, and times that are finite plain
decimals), not searched: its texts are most of a long reply's bytes.
``tests/plugins/persistence_jsonl/test_jsonl.py`` holds the two equal with Hypothesis.
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from math import isfinite
from typing import Any

import orjson

from dsh.plugin import dumps

__all__ = ["lines", "reference_lines"]

#: Where orjson may write other text than the reference: ``null`` (orjson's NaN and infinities;
#: the reference writes ``NaN``, but also a plain ``None``), a float outside 1e-4..1e16 (an
#: exponent: a digit then ``e``; or a small float written without one, ``0.0000...``). Searched
#: for in the bytes mapped by ``_SHAPES`` (every digit to 1: one search finds a digit before an
#: ``e``), the small float in the text itself. Text that merely holds one takes the slow way.
_OTHER = (b"null", b"1e")
_SMALL = b"0.0000"
_SHAPES = bytes.maketrans(b"0123456789", b"1" * 10)
#: Types the reference refuses go to it (the same error), not to orjson's own encodings.
_PLAIN = (
    orjson.OPT_PASSTHROUGH_DATACLASS
    | orjson.OPT_PASSTHROUGH_DATETIME
    | orjson.OPT_PASSTHROUGH_SUBCLASS
)
#: A batch this long (a long reply's run of deltas) has its runs' rows told sure from their
#: values: searching text costs ~3 ns a byte, telling a run's row ~1 µs and ~35 ns a delta.
_LONG = 4096
_UTF8 = json.JSONEncoder(ensure_ascii=False, separators=(",", ":"), check_circular=False).encode


def _reference_line(row: Any) -> bytes:
    try:
        return f"{_UTF8(row)}\n".encode()
    except UnicodeEncodeError:  # a lone surrogate: an escape holds it, UTF-8 cannot
        return f"{dumps(row)}\n".encode()


def reference_lines(rows: Sequence[Any]) -> bytes:
    """Each row's text and a newline: what :func:`lines` must write."""
    return b"".join(map(_reference_line, rows))


def lines(rows: Sequence[Any]) -> bytes:
    """:func:`reference_lines`, by orjson where its text surely is the same: for the whole
    batch if it is, else for each row that is (one ``null`` sends a row, not its batch, the
    slow way: a long reply's run of deltas has none). A run of deltas' row is told sure from
    its values (:func:`_plain_run`), not searched: its texts are most of a long reply's
    bytes, and searching them cost more than orjson writing them."""
    try:
        parts = [orjson.dumps(row, option=_PLAIN) for row in rows]
    except TypeError:  # orjson.JSONEncodeError: a value orjson refuses
        return reference_lines(rows)
    parts.append(b"")
    text = b"\n".join(parts)
    sure: list[bool] | None = None
    if len(text) < _LONG:  # searched at once for less than telling a run's row from its values
        searched = text
    else:
        sure = [row.__class__ is dict and "texts" in row and _plain_run(row) for row in rows]
        searched = b"\n".join([part for part, known in zip(parts, sure, strict=False) if not known])
    if _as_reference_writes(searched):
        return text
    return b"".join(
        part + b"\n" if known or _as_reference_writes(part) else _reference_line(row)
        for part, row, known in zip(parts, rows, sure or [False] * len(rows), strict=False)
    )


def _plain_run(row: dict[str, Any]) -> bool:
    """Whether orjson surely writes ``row`` as the reference does, told from its values: each
    an integer, a string, or (under ``texts``) a list of strings or (under ``times``) a list of
    :func:`_plain_numbers` (the row of a run of deltas, ``EventCodec.rows``)."""
    for key, value in row.items():
        kind = value.__class__
        if kind is int or kind is str:
            continue
        if kind is not list:
            return False
        if key == "texts":
            try:
                "".join(value)  # strings, each of them (in C: a long reply's are thousands)
            except TypeError:
                return False
        elif key != "times" or not _plain_numbers(value):
            return False
    return True


def _plain_numbers(values: list[Any]) -> bool:
    """Whether ``values`` are numbers both write in plain decimals, alike: finite (their sum is;
    a NaN or an infinity makes it not), none below 0.001 (orjson writes a small float without
    the exponent the reference writes) nor at 1e15 or above. Epoch seconds are."""
    if not values:
        return True
    try:
        finite = isfinite(sum(values))
    except (TypeError, OverflowError):  # not numbers, or too large for a float
        return False
    return finite and min(values) >= 1e-3 and max(values) < 1e15


def _as_reference_writes(fast: bytes) -> bool:
    """Whether orjson's ``fast`` is surely the text the reference writes for the same value(s)."""
    if _SMALL in fast:
        return False
    shapes = fast.translate(_SHAPES)
    return not any(map(shapes.__contains__, _OTHER))  # no generator frame: once per batch
