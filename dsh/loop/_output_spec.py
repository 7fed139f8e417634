"""What a typed result asks the model for (:class:`OutputSpec`, made from an ``output_type``
by :func:`output_spec`) and the state of a turn that asks for one: what
:class:`~dsh.loop._output.OutputPlugin` imports when an agent with an ``output_type`` starts a
turn, so that a harness whose agents answer in text never builds them."""

from __future__ import annotations

import dataclasses
import typing
from collections.abc import Callable, Mapping, Sequence
from typing import Any, Literal, is_typeddict

import attrs
from attrs import frozen

from dsh.session._codec import structure
from dsh.tools._schema import field_shape, shape_of, validate
from dsh.values._request import JsonObject
from dsh.values._value import Value

__all__ = ["Mode", "OutputSpec", "TurnState", "output_spec"]


@frozen(repr=False, eq=False)
class OutputSpec(Value):
    """What the model is asked for: ``schema`` (always an object, as tool parameters must be),
    whether the value is ``wrapped`` in its ``result`` property, and ``convert`` from JSON
    values to the output type."""

    name: str
    schema: JsonObject
    convert: Callable[[Any], Any]
    wrapped: bool = False

    def problems(self, value: Any) -> list[str]:
        """Why ``value`` (what the model sent) is not an answer, each naming the field."""
        found = validate(value, self.schema)
        if found:
            return found
        import cattrs  # imported with the converter that convert uses (dsh.session._codec)

        try:
            self.convert(self.unwrap(value))
        except cattrs.BaseValidationError as exc:  # a validator of the user's type refused it
            return list(cattrs.transform_error(exc, format_exception=_explain))
        return []

    def unwrap(self, value: Any) -> Any:
        return value["result"] if self.wrapped else value


def _explain(exc: BaseException, _: Any) -> str:
    return f"{type(exc).__name__}: {exc}"


def output_spec(output_type: object) -> OutputSpec:
    """The spec of an ``output_type``; raises ``TypeError`` saying what is accepted."""
    if isinstance(output_type, Mapping):
        return _wrapped(output_type.get("title", "result"), dict(output_type), lambda v: v)
    if isinstance(output_type, type) and attrs.has(output_type):
        schema = shape_of(output_type).schema
    elif isinstance(output_type, type) and dataclasses.is_dataclass(output_type):
        schema = _record_schema(output_type, _dataclass_fields(output_type))
    elif isinstance(output_type, type) and is_typeddict(output_type):
        schema = _record_schema(output_type, _typeddict_fields(output_type))
    else:
        raise TypeError(
            f"output_type {output_type!r} is not supported: give an attrs class, a dataclass, "
            "a TypedDict or a JSON Schema dict"
        )
    kind: type = output_type
    return OutputSpec(kind.__name__, schema, lambda v: structure(v, kind))


def _wrapped(name: str, schema: JsonObject, convert: Callable[[Any], Any]) -> OutputSpec:
    if schema.get("type") == "object":
        return OutputSpec(name, schema, convert)
    wrapper = {
        "type": "object",
        "properties": {"result": schema},
        "required": ["result"],
        "additionalProperties": False,
    }
    return OutputSpec(name, wrapper, convert, wrapped=True)


def _dataclass_fields(cls: type) -> list[tuple[str, Any, bool]]:
    hints = typing.get_type_hints(cls, include_extras=True)
    return [
        (f.name, hints[f.name], f.default is f.default_factory is dataclasses.MISSING)
        for f in dataclasses.fields(cls)
        if f.init
    ]


def _typeddict_fields(cls: type) -> list[tuple[str, Any, bool]]:
    hints = typing.get_type_hints(cls, include_extras=True)
    required: frozenset[str] = getattr(cls, "__required_keys__", frozenset())
    return [(name, _not_required(hint), name in required) for name, hint in hints.items()]


def _not_required(hint: Any) -> Any:
    if typing.get_origin(hint) in (typing.Required, typing.NotRequired):
        return typing.get_args(hint)[0]
    return hint


def _record_schema(cls: type, fields: Sequence[tuple[str, Any, bool]]) -> JsonObject:
    properties: dict[str, Any] = {}
    for name, hint, _ in fields:
        nested = dataclasses.is_dataclass(hint) or is_typeddict(hint)
        if nested and isinstance(hint, type):
            properties[name] = output_spec(hint).schema
        else:
            properties[name] = field_shape(name, hint).schema
    schema: JsonObject = {
        "type": "object",
        "properties": properties,
        "required": [name for name, _, required in fields if required],
        "additionalProperties": False,
    }
    if cls.__doc__ and not cls.__doc__.startswith(f"{cls.__name__}("):
        schema["description"] = cls.__doc__.strip()
    return schema


Mode = Literal["tool", "json"]


@attrs.define(repr=False)
class TurnState(Value):
    """A turn that asks for a typed result: how the model is asked (``mode``), the answers sent
    back so far, whether the turn has its answer (or gave up) and what its last one lacked."""

    turn: int
    mode: Mode = "tool"
    attempts: int = 0
    done: bool = False
    last_error: str = ""
