"""``@dsh.tool``: a tool from a plain function, its JSON Schema built from type hints and docstring.

::

    @dsh.tool
    async def add(a: int, b: int = 0) -> str:
        \"""Add two numbers.

        Args:
            a: The first number.
            b: The second number.
        \"""
        return str(a + b)

The description is the docstring's text before its first section; parameter descriptions come
from a Google (``Args:``), NumPy (``Parameters`` + dashes) or Sphinx (``:param a:``) section. A
parameter named ``execution`` (or annotated :class:`~dsh.tools.ToolExecution`) receives the call
and is not part of the schema. Arguments are checked with :func:`validate` before the tool runs
(the registry does this for every tool), then turned into the annotated Python values: attrs
instances, enum members, tuples. ``docs/tools.md`` lists every supported annotation.
"""

from __future__ import annotations

import enum
import inspect
import json
import re
import types
import typing
from collections.abc import Callable, Mapping, MutableSequence, Sequence
from typing import Annotated, Any, Literal, overload

import attrs

from dsh.content import Image, Text
from dsh.request import JsonObject, ToolSchema
from dsh.tools import Effect, Tool, ToolContent, ToolExecution, as_content

__all__ = ["Docstring", "parse_docstring", "tool", "validate"]

Convert = Callable[[Any], Any]


def _same(value: Any) -> Any:
    return value


# ---------------------------------------------------------------------------------------------
# The decorator.
# ---------------------------------------------------------------------------------------------


@overload
def tool(fn: Callable[..., Any], /) -> Tool: ...
@overload
def tool(
    *,
    name: str | None = None,
    description: str | None = None,
    strict: bool = False,
    timeout_s: float | None = None,
    concurrency_safe: bool = False,
    effect: Effect = "other",
) -> Callable[[Callable[..., Any]], Tool]: ...
def tool(
    fn: Callable[..., Any] | None = None,
    /,
    *,
    name: str | None = None,
    description: str | None = None,
    strict: bool = False,
    timeout_s: float | None = None,
    concurrency_safe: bool = False,
    effect: Effect = "other",
) -> Tool | Callable[[Callable[..., Any]], Tool]:
    """Turn a function (``async def`` or ``def``, which runs directly in the event loop) into
    a :class:`~dsh.tools.Tool`; use it bare (``@tool``) or with options.

    ``name`` and ``description`` default to the function's name and docstring. ``strict``
    makes the schema follow strict function calling: every object lists all its properties in
    ``required`` and forbids others; a parameter with a default then also accepts ``null``,
    which means "use the default". ``timeout_s``, ``concurrency_safe`` and ``effect`` are the
    :class:`~dsh.tools.Tool` fields of the same names. Raises ``TypeError`` for an annotation
    that has no JSON Schema.
    """

    def build(function: Callable[..., Any]) -> Tool:
        doc = parse_docstring(function.__doc__)
        tool_name = name or function.__name__
        try:
            arguments, execution_param = _signature(function, strict, doc.params)
        except TypeError as exc:
            raise TypeError(f"@dsh.tool {tool_name!r}: {exc}") from exc
        text = doc.description if description is None else description
        schema = ToolSchema(tool_name, text, arguments.schema, strict)
        execute = _executor(function, arguments.convert, execution_param)
        return Tool(schema, execute, timeout_s, concurrency_safe, effect)

    return build if fn is None else build(fn)


def _executor(
    function: Callable[..., Any], convert: Convert, execution_param: str | None
) -> Callable[[Any, ToolExecution], Any]:
    async def execute(args: Any, execution: ToolExecution) -> ToolContent:
        kwargs = convert(args)
        if execution_param is not None:
            kwargs[execution_param] = execution
        result = function(**kwargs)
        if inspect.isawaitable(result):
            result = await result
        return _content(result)

    return execute


def _content(value: Any) -> ToolContent:
    """What the function returned as tool content: text and images as they are, ``None`` as no
    text, bytes decoded as UTF-8, anything else as JSON (objects by their ``str``)."""
    if isinstance(value, str):
        return value
    if isinstance(value, Text | Image):
        return (value,)
    if (
        isinstance(value, list | tuple)
        and value
        and all(isinstance(v, Text | Image) for v in value)
    ):
        return tuple(value)
    if value is None:
        return ""
    if isinstance(value, bytes | bytearray | memoryview):
        return as_content(value)  # UTF-8 text, else a ToolError
    return json.dumps(value, ensure_ascii=False, default=str)


# ---------------------------------------------------------------------------------------------
# From annotations to shapes: a JSON Schema plus how a valid JSON value becomes a Python value.
# ---------------------------------------------------------------------------------------------


@attrs.frozen
class _Shape:
    schema: JsonObject
    convert: Convert = _same


@attrs.frozen
class _Property:
    name: str
    shape: _Shape
    required: bool
    description: str = ""


_SCALARS: dict[Any, _Shape] = {
    bool: _Shape({"type": "boolean"}),
    int: _Shape({"type": "integer"}, int),
    float: _Shape({"type": "number"}, float),
    str: _Shape({"type": "string"}),
    type(None): _Shape({"type": "null"}),
    None: _Shape({"type": "null"}),
    Any: _Shape({}),
    object: _Shape({}),
}
_ARRAYS = {list, tuple, Sequence, MutableSequence}
_MAPPINGS = {dict, Mapping}


def _signature(
    function: Callable[..., Any], strict: bool, docs: Mapping[str, str]
) -> tuple[_Shape, str | None]:
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


def _field_shape(name: str, annotation: Any, strict: bool, seen: tuple[type, ...]) -> _Shape:
    try:
        return _shape(annotation, strict, seen)
    except TypeError as exc:
        raise TypeError(f"parameter {name!r}: {exc}") from None


def _shape(annotation: Any, strict: bool, seen: tuple[type, ...]) -> _Shape:
    """The shape of one annotation; ``seen`` holds the attrs classes being built (recursion)."""
    origin = typing.get_origin(annotation)
    args = typing.get_args(annotation)
    if origin is Annotated:  # first: its metadata may not be hashable
        return _annotated(args, strict, seen)
    if annotation in _SCALARS:
        return _SCALARS[annotation]
    if origin is Literal:
        return _Shape(_enum_schema(args))
    if origin in (typing.Union, types.UnionType):
        return _union(args, strict, seen)
    if isinstance(annotation, type) and issubclass(annotation, enum.Enum):
        return _Shape(_enum_schema([member.value for member in annotation]), annotation)
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


def _annotated(args: tuple[Any, ...], strict: bool, seen: tuple[type, ...]) -> _Shape:
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


def _union(members: tuple[Any, ...], strict: bool, seen: tuple[type, ...]) -> _Shape:
    shapes = [_shape(member, strict, seen) for member in members]

    def convert(value: Any) -> Any:
        # Validation already passed, so one member matches: convert with the first that does.
        fits = next((s.convert for s in shapes if not validate(value, s.schema)), _same)
        return fits(value)

    return _Shape({"anyOf": [s.schema for s in shapes]}, convert)


def _array(is_tuple: bool, args: tuple[Any, ...], strict: bool, seen: tuple[type, ...]) -> _Shape:
    if is_tuple and args and args[-1] is not Ellipsis:
        return _fixed_tuple(args, strict, seen)
    item = _shape(args[0], strict, seen) if args else _SCALARS[Any]
    container: Callable[[Any], Any] = tuple if is_tuple else list
    schema: JsonObject = {"type": "array"}
    if item.schema:
        schema["items"] = item.schema
    return _Shape(schema, lambda value: container(item.convert(v) for v in value))


def _fixed_tuple(args: tuple[Any, ...], strict: bool, seen: tuple[type, ...]) -> _Shape:
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
    return _Shape(
        schema, lambda value: tuple(s.convert(v) for s, v in zip(shapes, value, strict=True))
    )


def _mapping(args: tuple[Any, ...], strict: bool, seen: tuple[type, ...]) -> _Shape:
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
    return _Shape(schema, lambda data: {k: item.convert(v) for k, v in data.items()})


def _attrs_object(cls: type, strict: bool, seen: tuple[type, ...]) -> _Shape:
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
) -> _Shape:
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

    return _Shape(schema, convert)


def _property_schema(prop: _Property, strict: bool) -> JsonObject:
    schema = prop.shape.schema
    if strict and not prop.required and validate(None, schema):
        schema = {"anyOf": [schema, {"type": "null"}]}
    if prop.description:
        schema = {**schema, "description": prop.description}
    return schema


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


def validate(value: Any, schema: Mapping[str, Any], path: str = "") -> list[str]:
    """Every way the JSON ``value`` breaks ``schema``, each message naming the field and why.

    Understands ``type``, ``enum``, ``anyOf``, ``properties``, ``required``,
    ``additionalProperties``, ``items``, ``prefixItems``, ``minItems`` and ``maxItems``; other
    keywords are ignored (they accept everything).
    """
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
    names = [expected] if isinstance(expected, str) else expected
    return any(_TYPE_TESTS.get(name, _accept)(value) for name in names)


def _accept(value: Any) -> bool:
    return True


def _equal(value: Any, choice: Any) -> bool:
    return bool(value == choice) and isinstance(value, bool) == isinstance(choice, bool)


def _any_of(value: Any, branches: Sequence[Mapping[str, Any]], path: str) -> list[str]:
    results = [validate(value, branch, path) for branch in branches]
    if not all(results):
        return []
    # When the value has the type of exactly one branch, that branch's details say more.
    typed = [
        r
        for b, r in zip(branches, results, strict=True)
        if "type" in b and _has_type(value, b["type"])
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
        elif isinstance(items, Mapping):
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


def _describe(schema: Mapping[str, Any]) -> str:
    if "enum" in schema:
        return "one of " + ", ".join(json.dumps(choice) for choice in schema["enum"])
    if "type" in schema:
        return _names(schema["type"])
    return "a value of another shape"


def _show(value: Any) -> str:
    kind = _JSON_TYPES.get(type(value), type(value).__name__)
    text = json.dumps(value, ensure_ascii=False, default=str)
    return f"{kind} {text if len(text) <= 60 else text[:57] + '...'}"


# ---------------------------------------------------------------------------------------------
# Docstrings: the description, and per-parameter text in Google, NumPy or Sphinx style.
# ---------------------------------------------------------------------------------------------


@attrs.frozen
class Docstring:
    """A docstring's ``description`` (the text before its first section) and the text of each
    documented parameter."""

    description: str
    params: dict[str, str]


_PARAM_SECTIONS = {
    "args",
    "arguments",
    "attributes",
    "keyword args",
    "keyword arguments",
    "other parameters",
    "parameters",
    "params",
}
_OTHER_SECTIONS = {
    "example",
    "examples",
    "note",
    "notes",
    "raises",
    "references",
    "return",
    "returns",
    "see also",
    "todo",
    "warning",
    "warnings",
    "yield",
    "yields",
}
_GOOGLE_HEADER = re.compile(r"^\s*([A-Za-z][A-Za-z ]*):\s*$")
_GOOGLE_ENTRY = re.compile(r"^\*{0,2}(?P<name>\w+)\s*(?:\([^)]*\))?\s*:\s*(?P<text>.*)$")
_NUMPY_RULE = re.compile(r"^\s*-{3,}\s*$")
_NUMPY_ENTRY = re.compile(r"^\*{0,2}(?P<name>\w+)\s*(?::.*)?$")
_SPHINX_FIELD = re.compile(r"^:(?P<kind>\w+)(?P<args>[^:]*):\s*(?P<text>.*)$")
_SPHINX_PARAMS = {"param", "parameter", "arg", "argument", "key", "keyword", "ivar", "var"}


def parse_docstring(doc: str | None) -> Docstring:
    """Split ``doc`` (a raw ``__doc__``: it is cleaned here) into its description and its
    parameters' text, in any of the three styles."""
    lines = inspect.cleandoc(doc or "").splitlines()
    start = next((i for i in range(len(lines)) if _starts_section(lines, i)), len(lines))
    params = {**_numpy_params(lines), **_sphinx_params(lines), **_google_params(lines)}
    return Docstring("\n".join(lines[:start]).strip(), params)


def _starts_section(lines: Sequence[str], index: int) -> bool:
    line = lines[index]
    header = _GOOGLE_HEADER.match(line)
    if header and header[1].strip().lower() in _PARAM_SECTIONS | _OTHER_SECTIONS:
        return True
    return bool(_SPHINX_FIELD.match(line)) or _is_numpy_header(lines, index)


def _is_numpy_header(lines: Sequence[str], index: int) -> bool:
    following = lines[index + 1] if index + 1 < len(lines) else ""
    return bool(lines[index].strip()) and bool(_NUMPY_RULE.match(following))


def _google_params(lines: Sequence[str]) -> dict[str, str]:
    params: dict[str, str] = {}
    for index, line in enumerate(lines):
        header = _GOOGLE_HEADER.match(line)
        if header and header[1].strip().lower() in _PARAM_SECTIONS:
            params.update(_entries(_indented_block(lines, index + 1, _indent(line)), _GOOGLE_ENTRY))
    return params


def _numpy_params(lines: Sequence[str]) -> dict[str, str]:
    params: dict[str, str] = {}
    for index in range(len(lines)):
        if _is_numpy_header(lines, index) and lines[index].strip().lower() in _PARAM_SECTIONS:
            end = next(
                (j for j in range(index + 2, len(lines)) if _is_numpy_header(lines, j)),
                len(lines),
            )
            params.update(_entries(lines[index + 2 : end], _NUMPY_ENTRY))
    return params


def _sphinx_params(lines: Sequence[str]) -> dict[str, str]:
    params: dict[str, str] = {}
    current: str | None = None
    for line in lines:
        field = _SPHINX_FIELD.match(line)
        if field:
            words = field["args"].split()
            current = words[-1] if field["kind"] in _SPHINX_PARAMS and words else None
            if current is not None:
                params[current] = field["text"].strip()
        elif current is not None and line[:1].isspace() and line.strip():
            params[current] = f"{params[current]} {line.strip()}".strip()
        else:
            current = None
    return params


def _indent(line: str) -> int:
    return len(line) - len(line.lstrip())


def _indented_block(lines: Sequence[str], start: int, indent: int) -> list[str]:
    """The lines from ``start`` that are blank or indented deeper than ``indent``, dedented."""
    block: list[str] = []
    for line in lines[start:]:
        if line.strip() and _indent(line) <= indent:
            break
        block.append(line)
    depth = min((_indent(line) for line in block if line.strip()), default=0)
    return [line[depth:] for line in block]


def _entries(block: Sequence[str], entry: re.Pattern[str]) -> dict[str, str]:
    """Entries start at column 0 (``name ...``); deeper lines continue the current one."""
    params: dict[str, str] = {}
    current: str | None = None
    for line in block:
        match = entry.match(line) if line[:1].strip() else None
        if match:
            current = match["name"]
            params[current] = (match.groupdict().get("text") or "").strip()
        elif current is not None and line.strip():
            params[current] = f"{params[current]} {line.strip()}".strip()
    return params
