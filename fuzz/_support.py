"""What the fuzz targets share: JSON values built from the fuzzer's bytes, and the rule that a
target may fail only with dsh's own errors."""

from __future__ import annotations

from typing import Any

import atheris

#: Keys the targets' inputs are likely to need (schema and header words), beside random ones.
WORDS = (
    "type",
    "properties",
    "required",
    "items",
    "enum",
    "anyOf",
    "oneOf",
    "additionalProperties",
    "minimum",
    "maxLength",
    "object",
    "array",
    "string",
    "integer",
    "number",
    "boolean",
    "null",
    "format",
    "version",
    "events",
    "session_id",
    "seq",
    "data",
)


def json_value(data: atheris.FuzzedDataProvider, depth: int = 0) -> Any:
    """A JSON value whose shape the fuzzer's bytes choose (nesting at most 6 deep)."""
    kind = data.ConsumeIntInRange(0, 8 if depth < 6 else 5)
    if kind == 0:
        return None
    if kind == 1:
        return data.ConsumeBool()
    if kind == 2:
        return data.ConsumeIntInRange(-(2**40), 2**40)
    if kind == 3:
        return data.ConsumeFloat()
    if kind == 4:
        return data.ConsumeUnicodeNoSurrogates(data.ConsumeIntInRange(0, 12))
    if kind == 5:
        return WORDS[data.ConsumeIntInRange(0, len(WORDS) - 1)]
    if kind == 6:
        return [json_value(data, depth + 1) for _ in range(data.ConsumeIntInRange(0, 4))]
    return {key(data): json_value(data, depth + 1) for _ in range(data.ConsumeIntInRange(0, 4))}


def key(data: atheris.FuzzedDataProvider) -> str:
    if data.ConsumeBool():
        return WORDS[data.ConsumeIntInRange(0, len(WORDS) - 1)]
    return str(data.ConsumeUnicodeNoSurrogates(data.ConsumeIntInRange(0, 8)))
