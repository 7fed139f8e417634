"""Tool schemas closed as DeepSeek's strict function calling (beta) requires.

In strict mode the API checks every function's schema: each object must set
``additionalProperties: false`` and list every one of its properties in ``required``, nested
objects included. A request with any strict tool sends every tool strict, each schema closed by
:func:`closed`, so a plain tool beside a strict one does not get the request refused. The policy
is ``llm_deepseek``'s (both adapters must send the same bodies); this is a separate
implementation of it:

* an object is a schema whose ``type`` is or lists ``"object"``, or that has ``properties``;
  it gets ``required`` = its property names in order (``[]`` without properties) and
  ``additionalProperties: false`` (replacing a schema given there);
* the walk descends through the keywords that hold schemas — the values of ``properties``,
  ``$defs`` and ``definitions``; ``items`` (one schema or a list), ``prefixItems``, ``anyOf``,
  ``oneOf``, ``allOf`` and ``not`` — and keeps every other keyword as it is;
* the tool's own schema is never modified: the result is a new value.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from typing import Any

__all__ = ["closed", "names_an_object"]

_NAMED_SCHEMAS = frozenset({"properties", "$defs", "definitions"})
_NESTED_SCHEMAS = frozenset({"items", "prefixItems", "anyOf", "oneOf", "allOf", "not"})


def names_an_object(schema: Mapping[str, Any]) -> bool:
    """Whether a schema describes an object (and must be closed)."""
    kind = schema.get("type")
    listed = isinstance(kind, list) and "object" in kind
    return kind == "object" or listed or "properties" in schema


def closed(schema: Any) -> Any:
    """``schema`` with every object in it closed; values that are not schemas pass through."""
    if not isinstance(schema, Mapping):
        return schema
    result = {keyword: _walk(keyword)(value) for keyword, value in schema.items()}
    if names_an_object(schema):
        properties = result.get("properties")
        result["required"] = [*properties] if isinstance(properties, Mapping) else []
        result["additionalProperties"] = False
    return result


def _walk(keyword: str) -> Callable[[Any], Any]:
    """How the value of ``keyword`` is closed."""
    if keyword in _NAMED_SCHEMAS:
        return _each_named
    if keyword in _NESTED_SCHEMAS:
        return _each_nested
    return _kept


def _each_named(value: Any) -> Any:
    if isinstance(value, Mapping):
        return {name: closed(schema) for name, schema in value.items()}
    return value


def _each_nested(value: Any) -> Any:
    if isinstance(value, list):
        return [closed(schema) for schema in value]
    return closed(value)


def _kept(value: Any) -> Any:
    return value
