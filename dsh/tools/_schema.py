"""JSON Schema from Python type hints, and the checks of a JSON value against such a schema.

:func:`arguments_shape` turns a function's parameters into the arguments object of a tool: a
:class:`Shape` holds the JSON Schema and how a valid JSON value becomes the Python value the
annotation names (attrs instances, enum members, tuples). :func:`validate` checks a value against
the JSON Schema subset this module generates, with messages a model can act on; the tool
registry runs it before every tool, and :func:`schema_problem` checks a tool's schema once, when
it is registered. ``@dsh.tool`` (:mod:`dsh.tools._define`) and typed results
(:mod:`dsh.loop._output`) build on both; ``docs/tools.md`` lists every supported annotation.
"""

from __future__ import annotations

import enum
import inspect
import json
import types
import typing
from collections.abc import Callable, Mapping, MutableSequence, Sequence
from typing import Annotated, Any, Literal

import attrs

from dsh.tools._docstrings import parse_docstring
from dsh.tools._registry import ToolExecution
from dsh.values._request import JsonObject
from dsh.values._value import Value

__all__ = [
    "MAX_SCHEMA_DEPTH",
    "Convert",
    "Shape",
    "arguments_shape",
    "describe_problem",
    "field_shape",
    "schema_problem",
    "shape_of",
    "validate",
]

Convert = Callable[[Any], Any]


def _same(value: Any) -> Any:
    return value


# ---------------------------------------------------------------------------------------------
# From annotations to shapes: a JSON Schema plus how a valid JSON value becomes a Python value.
# ---------------------------------------------------------------------------------------------


@attrs.frozen(repr=False, eq=False)
class Shape(Value):
    """A JSON Schema, and ``convert``: how a JSON value valid against it becomes the Python
    value the annotation names."""

    schema: JsonObject
    convert: Convert = _same


@attrs.frozen(repr=False, eq=False)
class _Property(Value):
    name: str
    shape: Shape
    required: bool
    description: str = ""


_SCALARS: dict[Any, Shape] = {
    bool: Shape({"type": "boolean"}),
    int: Shape({"type": "integer"}, int),
    float: Shape({"type": "number"}, float),
    str: Shape({"type": "string"}),
    type(None): Shape({"type": "null"}),
    None: Shape({"type": "null"}),
    Any: Shape({}),
    object: Shape({}),
}
_ARRAYS = {list, tuple, Sequence, MutableSequence}
_MAPPINGS = {dict, Mapping}


def arguments_shape(
    function: Callable[..., Any], strict: bool, docs: Mapping[str, str]
) -> tuple[Shape, str | None]:
    """The arguments object of ``function`` (converting to keyword arguments), and the name of
    its execution parameter if it has one."""
    # Tool modules often import ToolExecution for type checking only: resolve it regardless.
    local = {"ToolExecution": ToolExecution}
    hints = typing.get_type_hints(function, localns=local, include_extras=True)
    properties: list[_Property] = []
    execution_param: str | None = None
    for param in inspect.signature(function).parameters.values():
        if param.kind not in (param.POSITIONAL_OR_KEYWORD, param.KEYWORD_ONLY):
            raise TypeError(f"parameter {param.name!r}: tools take named parameters only")
        if param.name == "execution" or hints.get(param.name) is ToolExecution:
            execution_param = param.name
            continue
        shape = _field_shape(param.name, _annotation(hints, param.name), strict, ())
        required = param.default is param.empty
        properties.append(_Property(param.name, shape, required, docs.get(param.name, "")))
    return _object(properties, strict, dict), execution_param


def _annotation(hints: Mapping[str, Any], name: str) -> Any:
    if name not in hints:
        raise TypeError(f"parameter {name!r} has no type annotation; annotate it")
    return hints[name]


def _field_shape(name: str, annotation: Any, strict: bool, seen: tuple[type, ...]) -> Shape:
    try:
        return _shape(annotation, strict, seen)
    except TypeError as exc:
        raise TypeError(f"parameter {name!r}: {exc}") from None


def _shape(annotation: Any, strict: bool, seen: tuple[type, ...]) -> Shape:
    """The shape of one annotation; ``seen`` holds the attrs classes being built (recursion)."""
    origin = typing.get_origin(annotation)
    args = typing.get_args(annotation)
    if origin is Annotated:  # first: its metadata may not be hashable
        return _annotated(args, strict, seen)
    if annotation in _SCALARS:
        return _SCALARS[annotation]
    if origin is Literal:
        return Shape(_enum_schema(args))
    if origin in (typing.Union, types.UnionType):
        return _union(args, strict, seen)
    if isinstance(annotation, type) and issubclass(annotation, enum.Enum):
        return Shape(_enum_schema([member.value for member in annotation]), annotation)
    if isinstance(annotation, type) and attrs.has(annotation):
        return _attrs_object(annotation, strict, seen)
    if annotation in _ARRAYS or origin in _ARRAYS:
        return _array(annotation is tuple or origin is tuple, args, strict, seen)
    if annotation in _MAPPINGS or origin in _MAPPINGS:
        return _mapping(args, strict, seen)
    raise TypeError(
        f"no JSON Schema for {annotation!r}: use str, int, float, bool, Literal, an Enum, "
        "X | None, list[X], tuple[...], dict[str, X] or an attrs class"
    )


def _annotated(args: tuple[Any, ...], strict: bool, seen: tuple[type, ...]) -> Shape:
    """``Annotated[X, "text"]``: X, described by the first string in its metadata."""
    shape = _shape(args[0], strict, seen)
    text = next((m for m in args[1:] if isinstance(m, str)), None)
    return (
        shape if text is None else attrs.evolve(shape, schema={**shape.schema, "description": text})
    )


_JSON_TYPES: dict[type, str] = {
    type(None): "null",
    bool: "boolean",
    int: "integer",
    float: "number",
    str: "string",
    list: "array",
    dict: "object",
}


def _enum_schema(values: Sequence[Any]) -> JsonObject:
    kinds = {_JSON_TYPES.get(type(value)) for value in values}
    if None in kinds or kinds & {"array", "object"}:
        raise TypeError(f"choices {list(values)!r} must be strings, numbers, booleans or None")
    schema: JsonObject = {"enum": list(values)}
    return {"type": kinds.pop(), **schema} if len(kinds) == 1 else schema


def _union(members: tuple[Any, ...], strict: bool, seen: tuple[type, ...]) -> Shape:
    shapes = [_shape(member, strict, seen) for member in members]

    def convert(value: Any) -> Any:
        # Validation already passed, so one member matches: convert with the first that does.
        fits = next((s.convert for s in shapes if not validate(value, s.schema)), _same)
        return fits(value)

    return Shape({"anyOf": [s.schema for s in shapes]}, convert)


def _array(is_tuple: bool, args: tuple[Any, ...], strict: bool, seen: tuple[type, ...]) -> Shape:
    if is_tuple and args and args[-1] is not Ellipsis:
        return _fixed_tuple(args, strict, seen)
    item = _shape(args[0], strict, seen) if args else _SCALARS[Any]
    container: Callable[[Any], Any] = tuple if is_tuple else list
    schema: JsonObject = {"type": "array"}
    if item.schema:
        schema["items"] = item.schema
    return Shape(schema, lambda value: container(item.convert(v) for v in value))


def _fixed_tuple(args: tuple[Any, ...], strict: bool, seen: tuple[type, ...]) -> Shape:
    if strict:
        raise TypeError(
            "a fixed-length tuple cannot be strict (strict schemas allow no minItems/maxItems): "
            "use list[X] or an attrs class"
        )
    shapes = [_shape(arg, strict, seen) for arg in args]
    schema = {
        "type": "array",
        "prefixItems": [s.schema for s in shapes],
        "minItems": len(shapes),
        "maxItems": len(shapes),
    }
    return Shape(
        schema, lambda value: tuple(s.convert(v) for s, v in zip(shapes, value, strict=True))
    )


def _mapping(args: tuple[Any, ...], strict: bool, seen: tuple[type, ...]) -> Shape:
    if strict:
        raise TypeError(
            "a dict cannot be strict (a strict object lists all its properties): use an attrs class"
        )
    key, value = args or (str, Any)
    if key is not str:
        raise TypeError(f"JSON object keys are strings, not {key!r}")
    item = _shape(value, strict, seen)
    schema: JsonObject = {"type": "object"}
    if item.schema:
        schema["additionalProperties"] = item.schema
    return Shape(schema, lambda data: {k: item.convert(v) for k, v in data.items()})


def _attrs_object(cls: type, strict: bool, seen: tuple[type, ...]) -> Shape:
    if cls in seen:
        raise TypeError(f"{cls.__name__} contains itself; recursive types have no schema here")
    hints = typing.get_type_hints(cls, include_extras=True)
    doc = parse_docstring(cls.__doc__)
    properties = []
    for field in attrs.fields(cls):
        if not field.init:
            continue
        name = field.alias or field.name
        shape = _field_shape(name, _annotation(hints, field.name), strict, (*seen, cls))
        text = field.metadata.get("description") or doc.params.get(name, "")
        properties.append(_Property(name, shape, field.default is attrs.NOTHING, text))
    shape = _object(properties, strict, lambda kwargs: cls(**kwargs))
    if doc.description:
        shape = attrs.evolve(shape, schema={**shape.schema, "description": doc.description})
    return shape


def _object(
    properties: Sequence[_Property], strict: bool, build: Callable[[dict[str, Any]], Any]
) -> Shape:
    """A closed object: only the listed properties. ``build`` receives the converted fields."""
    by_name = {p.name: p for p in properties}
    schema: JsonObject = {
        "type": "object",
        "properties": {p.name: _property_schema(p, strict) for p in properties},
        "required": [p.name for p in properties if strict or p.required],
        "additionalProperties": False,
    }

    def convert(value: Mapping[str, Any]) -> Any:
        fields = {
            name: by_name[name].shape.convert(item)
            for name, item in value.items()
            if not (strict and item is None and not by_name[name].required)
        }
        return build(fields)

    return Shape(schema, convert)


def _property_schema(prop: _Property, strict: bool) -> JsonObject:
    schema = prop.shape.schema
    if strict and not prop.required and validate(None, schema):
        schema = {"anyOf": [schema, {"type": "null"}]}
    if prop.description:
        schema = {**schema, "description": prop.description}
    return schema


def shape_of(annotation: Any, strict: bool = False) -> Shape:
    """The shape of a value annotated ``annotation``; ``TypeError`` if it has no JSON Schema."""
    return _shape(annotation, strict, ())


def field_shape(name: str, annotation: Any, strict: bool = False) -> Shape:
    """:func:`shape_of` for the field or parameter ``name`` (named in the ``TypeError``)."""
    return _field_shape(name, annotation, strict, ())


# ---------------------------------------------------------------------------------------------
# Validation: the JSON Schema subset the decorator generates, with messages a model can act on.
# ---------------------------------------------------------------------------------------------

_TYPE_TESTS: dict[str, Callable[[Any], bool]] = {
    "null": lambda v: v is None,
    "boolean": lambda v: isinstance(v, bool),
    "integer": lambda v: (
        (isinstance(v, int) and not isinstance(v, bool))
        or (isinstance(v, float) and v.is_integer())
    ),
    "number": lambda v: isinstance(v, int | float) and not isinstance(v, bool),
    "string": lambda v: isinstance(v, str),
    "array": lambda v: isinstance(v, list),
    "object": lambda v: isinstance(v, dict),
}


def validate(value: Any, schema: Mapping[str, Any] | bool, path: str = "") -> list[str]:
    """Every way the JSON ``value`` breaks ``schema``, each message naming the field and why.

    Understands ``type``, ``enum``, ``anyOf``, ``properties``, ``required``,
    ``additionalProperties``, ``items``, ``prefixItems``, ``minItems`` and ``maxItems``; other
    keywords are ignored (they accept everything). ``true`` and ``false`` are the schemas that
    accept every value and none. The schema is assumed sound (see :func:`schema_problem`).
    """
    if isinstance(schema, bool):
        return [] if schema else [f"{_where(path)}: no value is allowed here, got {_show(value)}"]
    if not _has_type(value, schema.get("type")):
        return [f"{_where(path)}: expected {_names(schema['type'])}, got {_show(value)}"]
    if "enum" in schema and not any(_equal(value, choice) for choice in schema["enum"]):
        choices = ", ".join(json.dumps(choice) for choice in schema["enum"])
        return [f"{_where(path)}: expected one of {choices}, got {_show(value)}"]
    if "anyOf" in schema:
        problems = _any_of(value, schema["anyOf"], path)
        if problems:
            return problems
    if isinstance(value, dict):
        return _object_problems(value, schema, path)
    if isinstance(value, list):
        return _array_problems(value, schema, path)
    return []


def _has_type(value: Any, expected: str | list[str] | None) -> bool:
    if expected is None:
        return True
    if isinstance(expected, str):  # the common case: one type
        return _TYPE_TESTS.get(expected, _accept)(value)
    return any(_TYPE_TESTS.get(name, _accept)(value) for name in expected)


def _accept(value: Any) -> bool:
    return True


def _equal(value: Any, choice: Any) -> bool:
    return bool(value == choice) and isinstance(value, bool) == isinstance(choice, bool)


def _any_of(value: Any, branches: Sequence[Mapping[str, Any] | bool], path: str) -> list[str]:
    results = [validate(value, branch, path) for branch in branches]
    if not all(results):
        return []
    # When the value has the type of exactly one branch, that branch's details say more.
    typed = [
        r
        for b, r in zip(branches, results, strict=True)
        if isinstance(b, Mapping) and "type" in b and _has_type(value, b["type"])
    ]
    if len(typed) == 1:
        return typed[0]
    expected = " or ".join(_describe(branch) for branch in branches)
    return [f"{_where(path)}: expected {expected}, got {_show(value)}"]


def _object_problems(value: dict[str, Any], schema: Mapping[str, Any], path: str) -> list[str]:
    properties: Mapping[str, Any] = schema.get("properties", {})
    problems = [
        f"{_where(_join(path, name))}: required field is missing"
        for name in schema.get("required", ())
        if name not in value
    ]
    extra = schema.get("additionalProperties", True)
    for name, item in value.items():
        where = _join(path, name)
        if name in properties:
            problems += validate(item, properties[name], where)
        elif extra is False:
            allowed = ", ".join(properties) or "none"
            problems.append(f"{_where(where)}: unexpected field (allowed fields: {allowed})")
        elif isinstance(extra, Mapping):
            problems += validate(item, extra, where)
    return problems


def _array_problems(value: list[Any], schema: Mapping[str, Any], path: str) -> list[str]:
    problems = []
    low, high = schema.get("minItems", 0), schema.get("maxItems")
    if len(value) < low or (high is not None and len(value) > high):
        problems.append(f"{_where(path)}: expected {_count(low, high)} items, got {len(value)}")
    prefix: Sequence[Any] = schema.get("prefixItems", ())
    items = schema.get("items")
    for index, item in enumerate(value):
        where = f"{path}[{index}]"
        if index < len(prefix):
            problems += validate(item, prefix[index], where)
        elif isinstance(items, Mapping | bool):
            problems += validate(item, items, where)
    return problems


def _count(low: int, high: int | None) -> str:
    if high is None:
        return f"at least {low}"
    return f"exactly {low}" if low == high else f"{low} to {high}"


def _where(path: str) -> str:
    return path or "arguments"


def _join(path: str, name: str) -> str:
    return f"{path}.{name}" if path else name


def _names(expected: str | list[str]) -> str:
    return expected if isinstance(expected, str) else " or ".join(expected)


def _describe(schema: Mapping[str, Any] | bool) -> str:
    if isinstance(schema, bool):  # false: true accepts everything, so it never failed
        return "no value"
    if "enum" in schema:
        return "one of " + ", ".join(json.dumps(choice) for choice in schema["enum"])
    if "type" in schema:
        return _names(schema["type"])
    return "a value of another shape"


def _show(value: Any) -> str:
    if value is None:  # its kind and its text are both "null": say it once
        return "null"
    kind = _JSON_TYPES.get(type(value), type(value).__name__)
    text = json.dumps(value, ensure_ascii=False, default=str)
    return f"{kind} {text if len(text) <= 60 else text[:57] + '...'}"


# ---------------------------------------------------------------------------------------------
# Checking a tool's schema once, when the tool is registered.
# ---------------------------------------------------------------------------------------------

#: How deeply a tool's input schema may nest (JSON objects and arrays, the root being level 1).
MAX_SCHEMA_DEPTH = 64

_TYPE_NAMES = tuple(_TYPE_TESTS)
#: Keywords whose value is one schema (``true``/``false`` included).
_ONE_SCHEMA = (
    "additionalProperties",
    "additionalItems",
    "unevaluatedProperties",
    "unevaluatedItems",
    "propertyNames",
    "contains",
    "not",
    "if",
    "then",
    "else",
)
#: Keywords whose value is a non-empty array of schemas.
_SCHEMA_LISTS = ("anyOf", "oneOf", "allOf", "prefixItems")
#: Keywords whose value is an object of schemas.
_SCHEMA_MAPS = ("properties", "patternProperties", "$defs", "definitions", "dependentSchemas")
_COUNTS = ("minItems", "maxItems", "minLength", "maxLength", "minProperties", "maxProperties")
_NUMBERS = ("minimum", "maximum", "exclusiveMinimum", "exclusiveMaximum", "multipleOf")
_TEXTS = ("description", "title", "pattern", "format", "$ref", "$schema", "$id")


def schema_problem(schema: object) -> tuple[str, str] | None:
    """Why ``schema`` cannot be a tool's input schema, or ``None`` when it can: the first
    problem found, as its place (a JSON pointer, RFC 6901; the root's is ``""``) and what is
    wrong there.

    The schema must be JSON (objects with string keys, arrays, strings, numbers, booleans,
    null) nested at most :data:`MAX_SCHEMA_DEPTH` levels; its root an object schema (``type``,
    when given, is ``"object"``); and every keyword :func:`validate` reads, or that holds
    schemas, has the shape the JSON Schema specification gives it, so that no call can fail on
    the schema itself. Keywords it does not know are left alone.
    """
    problem = _json_problem(schema)
    if problem is not None:
        return problem
    if not isinstance(schema, Mapping):
        return "", f"expected a JSON object (an object schema), got {_show(schema)}"
    problem = _schema_problem(schema, "")
    if problem is None and schema.get("type", "object") != "object":
        kind = _show(schema["type"])
        return "/type", f'a tool\'s arguments are a JSON object: expected "object", got {kind}'
    return problem


def describe_problem(problem: tuple[str, str]) -> str:
    """A :func:`schema_problem` as text: ``at <pointer>: <what>``."""
    pointer, what = problem
    return f"at {pointer or 'the root'}: {what}"


def _json_problem(document: object) -> tuple[str, str] | None:
    """Whether ``document`` is JSON nested at most :data:`MAX_SCHEMA_DEPTH` deep (iteratively:
    a document too deep for recursion is refused, not a ``RecursionError``)."""
    stack: list[tuple[object, str, int]] = [(document, "", 1)]
    while stack:
        value, pointer, depth = stack.pop()
        children: list[tuple[object, object]]
        if isinstance(value, Mapping):
            children = list(value.items())
        elif isinstance(value, list | tuple):
            children = list(enumerate(value))
        elif value is None or isinstance(value, str | int | float):
            continue
        else:
            return pointer, f"a {type(value).__name__} is not a JSON value"
        if depth > MAX_SCHEMA_DEPTH:
            return pointer, f"the schema nests deeper than {MAX_SCHEMA_DEPTH} levels"
        for key, child in children:
            if isinstance(value, Mapping) and not isinstance(key, str):
                return pointer, f"the key {key!r} is not a string"
            stack.append((child, f"{pointer}/{_escape(str(key))}", depth + 1))
    return None


def _escape(key: str) -> str:
    """A key as a JSON pointer reference token (RFC 6901)."""
    return key.replace("~", "~0").replace("/", "~1")


def _schema_problem(schema: object, pointer: str) -> tuple[str, str] | None:
    """The first problem of the (sub)schema at ``pointer``: a JSON object or a boolean."""
    if isinstance(schema, bool):
        return None
    if not isinstance(schema, Mapping):
        return pointer, f"expected a schema (a JSON object or a boolean), got {_show(schema)}"
    for check in (_type_problem, _keyword_problem, _subschemas_problem):
        problem = check(schema, pointer)
        if problem is not None:
            return problem
    return None


def _type_problem(schema: Mapping[str, Any], pointer: str) -> tuple[str, str] | None:
    if "type" not in schema:
        return None
    kind = schema["type"]
    names = [kind] if isinstance(kind, str) else kind
    if isinstance(names, list | tuple) and names and all(n in _TYPE_NAMES for n in names):
        return None
    expected = ", ".join(f'"{name}"' for name in _TYPE_NAMES)
    return f"{pointer}/type", f"expected one of {expected} or an array of them, got {_show(kind)}"


def _keyword_problem(schema: Mapping[str, Any], pointer: str) -> tuple[str, str] | None:
    """The keywords whose values are not schemas: lists, names, counts, numbers, texts."""
    for key, value in schema.items():
        expected = _expected(key, value)
        if expected is not None:
            return f"{pointer}/{_escape(key)}", f"expected {expected}, got {_show(value)}"
    return None


def _expected(key: str, value: object) -> str | None:
    """What ``key``'s value should be, when it is not."""
    if key == "enum" and not isinstance(value, list | tuple):
        return "an array of the allowed values"
    if key == "required" and not (
        isinstance(value, list | tuple) and all(isinstance(v, str) for v in value)
    ):
        return "an array of property names"
    if key in _COUNTS and not (
        isinstance(value, int) and not isinstance(value, bool) and value >= 0
    ):
        return "a non-negative integer"
    if key in _NUMBERS and not (isinstance(value, int | float) and not isinstance(value, bool)):
        return "a number"
    if key in _TEXTS and not isinstance(value, str):
        return "a string"
    return None


def _subschemas_problem(schema: Mapping[str, Any], pointer: str) -> tuple[str, str] | None:
    """The keywords that hold schemas, each checked in turn."""
    for key, value in schema.items():
        where = f"{pointer}/{_escape(key)}"
        if key in _ONE_SCHEMA or (key == "items" and not isinstance(value, list | tuple)):
            found = [(where, value)]
        elif key in _SCHEMA_MAPS:
            if not isinstance(value, Mapping):
                return where, f"expected an object of schemas by name, got {_show(value)}"
            found = [(f"{where}/{_escape(name)}", s) for name, s in value.items()]
        elif key in _SCHEMA_LISTS or key == "items":  # items: before 2020-12, a list too
            if not isinstance(value, list | tuple) or not value:
                return where, f"expected a non-empty array of schemas, got {_show(value)}"
            found = [(f"{where}/{index}", s) for index, s in enumerate(value)]
        else:
            continue
        for place, subschema in found:
            problem = _schema_problem(subschema, place)
            if problem is not None:
                return problem
    return None
