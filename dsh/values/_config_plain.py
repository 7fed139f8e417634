"""Config sections built without cattrs: a start need not import it (~6 ms of CPU) to load a
config that is right.

:func:`structure` builds a raw value that already passed ``_shape_errors`` exactly as the
config's cattrs converter (``cattrs.Converter(forbid_extra_keys=True)``) would, for the types
config classes use: attrs classes, ``str``/``int``/``float``/``bool``, ``X | None``,
``tuple[X, ...]``, ``list[X]``, ``dict[str, X]``/``Mapping[str, X]``, ``Literal[...]`` and
``Any``. Anything else, and any value it cannot vouch for (a Literal value not among the
literals, an unknown key, a missing required field, a class or validator that raises...),
raises :class:`Unhandled`, and ``Config.load`` asks cattrs, whose errors it reports as before.
``tests/test_config_plain.py`` holds the two equal on generated sections.
"""

from __future__ import annotations

import types
import typing
from collections.abc import Mapping
from typing import Any

import attrs

__all__ = ["Unhandled", "structure"]


class Unhandled(Exception):
    """The value or its type is not one :func:`structure` builds as cattrs would."""


#: The types cattrs structures by calling them on the value, and the exact types of the raw
#: values each accepts here (an ``int`` for a ``float`` becomes a ``float``, as cattrs makes it).
_SCALARS: dict[Any, tuple[type[Any], ...]] = {
    bool: (bool,),
    int: (int,),
    float: (int, float),
    str: (str,),
}
#: The types a ``Literal`` value is taken from here (an Enum member is left to cattrs).
_LITERALS = (str, int, bool, type(None))
_UNIONS = (typing.Union, types.UnionType)


def structure(value: Any, tp: Any) -> Any:
    """``value`` as a ``tp``, built as cattrs would; :class:`Unhandled` if not sure to (also
    when a class's ``__init__``, a validator or a converter raises: cattrs reports it)."""
    try:
        return _build(value, tp)
    except Exception:
        raise Unhandled from None


def _build(value: Any, tp: Any) -> Any:
    scalar = _SCALARS.get(tp)
    if scalar is not None:
        if type(value) not in scalar:
            raise Unhandled
        return tp(value)
    if tp is Any:
        return value
    if isinstance(tp, type) and attrs.has(tp):
        return _instance(value, tp)
    origin, args = typing.get_origin(tp), typing.get_args(tp)
    if origin is typing.Literal:
        return _literal(value, args)
    if origin in _UNIONS and len(args) == 2 and type(None) in args:
        if value is None:
            return None
        return _build(value, args[0] if args[1] is type(None) else args[1])
    if origin is tuple and len(args) == 2 and args[1] is Ellipsis:
        return tuple(_items(value, args[0]))
    if origin is list and len(args) == 1:
        return _items(value, args[0])
    if origin in (dict, Mapping) and len(args) == 2 and args[0] is str:
        return _table(value, args[1])
    raise Unhandled


def _literal(value: Any, args: tuple[Any, ...]) -> Any:
    if type(value) not in _LITERALS or any(type(arg) not in _LITERALS for arg in args):
        raise Unhandled
    if not any(type(arg) is type(value) and arg == value for arg in args):
        raise Unhandled
    return value


def _items(value: Any, item_type: Any) -> list[Any]:
    if type(value) not in (list, tuple):
        raise Unhandled
    return [_build(item, item_type) for item in value]


def _table(value: Any, value_type: Any) -> dict[str, Any]:
    if type(value) is not dict or any(type(key) is not str for key in value):
        raise Unhandled
    return {key: _build(item, value_type) for key, item in value.items()}


#: A field cattrs fills from a table: its name (the key), alias (the ``__init__`` argument),
#: type, and whether it is required.
_Field = tuple[str, str, Any, bool]
_FIELDS: dict[type[Any], tuple[tuple[_Field, ...], frozenset[str]]] = {}


def _fields(cls: type[Any]) -> tuple[tuple[_Field, ...], frozenset[str]]:
    """The fields cattrs fills from a table (those ``__init__`` takes) and their names; the
    types are resolved once per class."""
    known = _FIELDS.get(cls)
    if known is not None:
        return known
    hints = typing.get_type_hints(cls, include_extras=True)
    found = tuple(
        (a.name, a.alias, hints[a.name], a.default is attrs.NOTHING)
        for a in attrs.fields(cls)
        if a.init
    )
    known = _FIELDS[cls] = found, frozenset(name for name, *_ in found)
    return known


def _instance(value: Any, cls: type[Any]) -> Any:
    if type(value) is not dict:
        raise Unhandled
    fields, names = _fields(cls)
    if not all(type(key) is str and key in names for key in value):
        raise Unhandled
    arguments: dict[str, Any] = {}
    for name, alias, tp, required in fields:
        if name in value:
            arguments[alias] = _build(value[name], tp)
        elif required:
            raise Unhandled
    return cls(**arguments)
