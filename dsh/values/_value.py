"""The base of dsh's attrs classes: the ``repr``, ``==`` and ``hash`` attrs writes, as one
function each for all of them.

attrs generates and compiles a ``__repr__``, an ``__eq__`` and a ``__hash__`` for every class
it builds, ~0.2 ms a class: with the ~180 classes of the core and the built-in plugins'
configurations, ~25 ms of every start of dsh (most of what building them costs). A class
declared ``@frozen(repr=False, eq=False)`` that derives from :class:`Value` gets these instead
(a mutable ``@define(repr=False)`` one gets the ``repr``, and keeps attrs' ``==`` without a
hash). They give what attrs' would:

* ``repr``: ``Name(field=value, ...)``, a field declared ``repr=False`` left out, one with a
  ``repr`` callable written by it, and ``...`` for an object already being written higher up
  (a cycle).
* ``==``: equal when the other object is of the very same class and the fields that take
  part in comparison (not declared ``eq=False``) are equal, in declaration order, compared as
  a tuple's items are (an object is equal to itself: the same NaN too, as attrs 23 finds it,
  where attrs 26, comparing field by field, finds it unequal); an object of another class is
  ``NotImplemented``, so Python asks it, then falls back to identity.
* ``hash``: the hash of the class and those fields, so equal values hash alike.

``tests/test_value.py`` checks, with Hypothesis, that the three agree with what attrs writes
for the same classes.
"""

from __future__ import annotations

import threading
from collections.abc import Callable
from operator import attrgetter
from typing import Any

from attrs import NOTHING

__all__ = ["Value"]

_writing = threading.local()


class Value:
    """Derive an attrs class from this (and declare it ``repr=False``) to share its ``repr``."""

    __slots__ = ()

    def __repr__(self) -> str:
        cls = type(self)
        # A class defined in a function writes its own name, not "f.<locals>.Name", as attrs.
        name = cls.__qualname__.rsplit(">.", 1)[-1]
        seen: set[int] | None = getattr(_writing, "seen", None)
        if seen is None:
            seen = _writing.seen = set()
        if id(self) in seen:
            return "..."
        seen.add(id(self))
        try:
            fields = ", ".join(
                f"{field.name}={_text(field.repr, _value(self, field))}"
                for field in cls.__attrs_attrs__  # type: ignore[attr-defined]
                if field.repr is not False
            )
        finally:
            seen.discard(id(self))
        return f"{name}({fields})"

    def __eq__(self, other: object) -> bool:
        cls = type(self)
        if other.__class__ is not cls:
            return NotImplemented
        key = _KEYS.get(cls) or _key_of(cls)
        return key(self) == key(other)

    def __hash__(self) -> int:
        cls = type(self)
        return hash((cls, (_KEYS.get(cls) or _key_of(cls))(self)))


#: Per class: what its instances are compared and hashed by — a tuple of the fields that take
#: part in comparison, read in one call in C (:func:`operator.attrgetter`).
_KEYS: dict[type, Callable[[Any], tuple[Any, ...]]] = {}


def _key_of(cls: type) -> Callable[[Any], tuple[Any, ...]]:
    names = [a.name for a in cls.__attrs_attrs__ if a.eq]  # type: ignore[attr-defined]
    if len(names) == 1:  # attrgetter of one name gives the value, not a 1-tuple
        one = attrgetter(names[0])
        key: Callable[[Any], tuple[Any, ...]] = lambda instance: (one(instance),)  # noqa: E731
    elif names:
        key = attrgetter(*names)
    else:
        key = _nothing
    _KEYS[cls] = key
    return key


def _nothing(instance: Any) -> tuple[Any, ...]:
    return ()


def _value(instance: Any, field: Any) -> Any:
    # A field set by ``__init__`` is read as it is (a slot never set raises, as in attrs'
    # repr); one that is not may be unset, written ``NOTHING``.
    return getattr(instance, field.name) if field.init else getattr(instance, field.name, NOTHING)


def _text(how: Any, value: Any) -> str:
    return repr(value) if how is True else format(how(value))
