"""The base of dsh's attrs classes: the ``repr`` attrs writes, as one function for all of them.

attrs generates and compiles a ``__repr__`` for every class it builds, ~0.1 ms a class: with
the ~160 classes of the core and the built-in plugins' configurations, ~13 ms of every start of
dsh (a third of what building them costs). A class declared ``@frozen(repr=False)`` (or
``@define(repr=False)``) that derives from :class:`Value` gets this one instead, which writes
the same text: ``Name(field=value, ...)``, a field declared ``repr=False`` left out, one with a
``repr`` callable written by it, and ``...`` for an object already being written higher up
(a cycle).
"""

from __future__ import annotations

import threading
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


def _value(instance: Any, field: Any) -> Any:
    # A field set by ``__init__`` is read as it is (a slot never set raises, as in attrs'
    # repr); one that is not may be unset, written ``NOTHING``.
    return getattr(instance, field.name) if field.init else getattr(instance, field.name, NOTHING)


def _text(how: Any, value: Any) -> str:
    return repr(value) if how is True else format(how(value))
