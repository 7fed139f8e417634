"""The JSONL store's one speed trick, behind one function: the lines of a batch of rows.

:func:`reference_lines` is the definition — each row as compact ASCII JSON
(:func:`dsh.plugin.dumps`) and a newline. :func:`lines` writes the same bytes faster: orjson
writes rows ~3x faster than the standard encoder, but not always the same text, so its output
for the whole batch is checked at once for anything orjson may write otherwise (non-ASCII, a
``null`` that may be a NaN, a float with an exponent or many leading zeros), and a batch the
check does not clear, or with a value orjson refuses, is written by the reference.
``tests/plugins/persistence_jsonl/test_jsonl.py`` holds the two equal with Hypothesis.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import orjson

from dsh.plugin import dumps

__all__ = ["lines", "reference_lines"]

#: Where orjson may write other text than ``dumps``: a byte ``dumps`` escapes and orjson does
#: not (non-ASCII, DEL), ``null`` (orjson's NaN and infinities; ``dumps`` writes ``NaN``, but also
#: a plain ``None``), a float outside 1e-4..1e16 (an exponent: a digit then ``e``; or a small
#: float written without one, ``0.0000...``). Searched for in the bytes mapped by ``_SHAPES``
#: (non-ASCII and DEL to DEL, every digit to 1: one search finds a digit before an ``e``), the
#: small float in the text itself. Text that merely holds one takes the slow way.
_OTHER = (b"\x7f", b"null", b"1e")
_SMALL = b"0.0000"
_SHAPES = bytes.maketrans(bytes(range(0x7F, 0x100)) + b"0123456789", b"\x7f" * 129 + b"1" * 10)
#: Types ``dumps`` refuses go to ``dumps`` (the same error), not to orjson's own encodings.
_PLAIN = (
    orjson.OPT_PASSTHROUGH_DATACLASS
    | orjson.OPT_PASSTHROUGH_DATETIME
    | orjson.OPT_PASSTHROUGH_SUBCLASS
)


def reference_lines(rows: Sequence[Any]) -> bytes:
    """Each row's ``dumps`` text and a newline: what :func:`lines` must write."""
    return "".join(f"{dumps(row)}\n" for row in rows).encode()


def lines(rows: Sequence[Any]) -> bytes:
    """:func:`reference_lines`, by orjson when its text for the batch surely is the same."""
    try:
        parts = [orjson.dumps(row, option=_PLAIN) for row in rows]
    except TypeError:  # orjson.JSONEncodeError: a value orjson refuses
        return reference_lines(rows)
    parts.append(b"")
    text = b"\n".join(parts)
    return text if _as_dumps_writes(text) else reference_lines(rows)


def _as_dumps_writes(fast: bytes) -> bool:
    """Whether orjson's ``fast`` is surely the text ``dumps`` writes for the same value(s)."""
    if _SMALL in fast:
        return False
    shapes = fast.translate(_SHAPES)
    return not any(map(shapes.__contains__, _OTHER))  # no generator frame: once per batch
