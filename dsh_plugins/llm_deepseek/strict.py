"""Closing a JSON Schema the way DeepSeek's strict function calling (beta) requires.

In strict mode every function must be strict, and the API checks each schema: every object sets
``additionalProperties: false`` and lists all its properties in ``required``. When any tool of a
request is strict, the adapter sends every tool strict with its schema closed by
:func:`close_schema`, so a plain tool beside a strict one does not get the request refused.

The closure, exactly (another adapter for the same API must send the same bodies):

* an *object schema* is a mapping whose ``type`` is ``"object"`` (or a list naming it), or that
  has ``properties``;
* every object schema gets ``additionalProperties: false`` (a schema-valued
  ``additionalProperties`` is replaced) and ``required`` = every key of its ``properties``, in
  order (``[]`` when it has none);
* closure recurses into ``properties`` values, ``items`` (a schema or a list of them),
  ``prefixItems``, ``anyOf``, ``oneOf``, ``allOf``, ``not``, ``$defs`` and ``definitions``;
* everything else is kept as it is, and the input is never modified.

A property that was optional becomes required: the model then always fills it in. Tools built
with ``@dsh.tool(strict=True)`` are closed already (their optional parameters accept ``null``).
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

__all__ = ["SUBSCHEMA_LISTS", "SUBSCHEMA_MAPS", "close_schema", "is_object_schema"]

#: Keywords whose value is a mapping of name → schema.
SUBSCHEMA_MAPS = ("properties", "$defs", "definitions")
#: Keywords whose value is a list of schemas (``items`` may also be one schema).
SUBSCHEMA_LISTS = ("items", "prefixItems", "anyOf", "oneOf", "allOf", "not")


def is_object_schema(schema: Mapping[str, Any]) -> bool:
    """Whether ``schema`` describes an object (``type: "object"``, or ``properties``)."""
    kind = schema.get("type")
    names_object = kind == "object" or (isinstance(kind, list) and "object" in kind)
    return names_object or "properties" in schema


def close_schema(schema: Any) -> Any:
    """``schema`` with every object in it closed (a new value; ``schema`` is not modified)."""
    if not isinstance(schema, Mapping):
        return schema
    closed: dict[str, Any] = {}
    for key, value in schema.items():
        if key in SUBSCHEMA_MAPS and isinstance(value, Mapping):
            closed[key] = {name: close_schema(sub) for name, sub in value.items()}
        elif key in SUBSCHEMA_LISTS and isinstance(value, list):
            closed[key] = [close_schema(sub) for sub in value]
        elif key in SUBSCHEMA_LISTS:
            closed[key] = close_schema(value)
        else:
            closed[key] = value
    if is_object_schema(schema):
        properties = closed.get("properties")
        closed["required"] = list(properties) if isinstance(properties, Mapping) else []
        closed["additionalProperties"] = False
    return closed
