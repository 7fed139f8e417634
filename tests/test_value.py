"""dsh.values._value.Value: one repr for every attrs class of dsh, the text attrs' own repr
writes."""

from __future__ import annotations

import importlib
import pkgutil
from typing import Any, Generic, TypeVar

import attrs
import pytest
from attrs import define, field, frozen
from hypothesis import given
from hypothesis import strategies as st

import dsh
import dsh_plugins
from dsh.values._value import Value

T = TypeVar("T")

values = st.recursive(
    st.none() | st.booleans() | st.integers() | st.floats() | st.text(),
    lambda inner: st.lists(inner, max_size=3) | st.dictionaries(st.text(max_size=3), inner),
    max_leaves=6,
)


# Each pair: attrs writes the first one's repr, Value the second's; their fields are alike.
@frozen
class Plain:
    a: Any
    b: Any = None


@frozen(repr=False)
class SharedPlain(Value):
    a: Any
    b: Any = None


@frozen
class Hidden:
    shown: Any
    secret: Any = field(default=None, repr=False)
    custom: Any = field(default=0, repr=lambda value: f"<{type(value).__name__}>")
    derived: Any = field(init=False, default=7)


@frozen(repr=False)
class SharedHidden(Value):
    shown: Any
    secret: Any = field(default=None, repr=False)
    custom: Any = field(default=0, repr=lambda value: f"<{type(value).__name__}>")
    derived: Any = field(init=False, default=7)


@frozen
class Boxed(Generic[T]):
    inner: T


@frozen(repr=False)
class SharedBoxed(Value, Generic[T]):
    inner: T


@define
class Node:
    child: Any = None
    unset: Any = field(init=False)


@define(repr=False)
class SharedNode(Value):
    child: Any = None
    unset: Any = field(init=False)


def same(ours: object, theirs: object) -> None:
    """The two reprs are the same after the class's own name."""
    mine, attrs_text = repr(ours), repr(theirs)
    assert mine.startswith(type(ours).__name__ + "(")
    assert mine[len(type(ours).__name__) :] == attrs_text[len(type(theirs).__name__) :]


@given(values, values)
def test_a_shared_repr_is_the_text_attrs_writes(a: Any, b: Any) -> None:
    same(SharedPlain(a, b), Plain(a, b))
    same(SharedHidden(a, b, b), Hidden(a, b, b))
    same(SharedBoxed(Plain(a, b)), Boxed(Plain(a, b)))


def test_a_cycle_an_unset_field_and_a_class_in_a_function_are_written_as_attrs_writes() -> None:
    ours, theirs = SharedNode(), Node()
    ours.child, theirs.child = ours, theirs
    assert repr(ours) == "SharedNode(child=..., unset=NOTHING)"
    same(ours, theirs)

    @frozen
    class Local:
        x: int

    @frozen(repr=False)
    class SharedLocal(Value):
        x: int

    assert repr(SharedLocal(1)) == "SharedLocal(x=1)"
    same(SharedLocal(1), Local(1))


def test_a_field_that_cannot_be_read_fails_as_in_attrs() -> None:
    broken = SharedPlain.__new__(SharedPlain)  # no __init__: its slots were never set
    with pytest.raises(AttributeError):
        repr(broken)
    assert repr(SharedPlain(1)) == "SharedPlain(a=1, b=None)"  # and the next one is written


def _modules() -> list[Any]:
    found = []
    for package in (dsh, dsh_plugins):
        for info in pkgutil.walk_packages(package.__path__, package.__name__ + "."):
            if info.name.endswith("__main__"):
                continue  # runs the command line when imported
            try:
                found.append(importlib.import_module(info.name))
            except ImportError:  # an optional extra this environment lacks
                continue
    return found


def test_every_attrs_class_of_dsh_shares_the_repr() -> None:
    """attrs compiles a repr per class it builds (~0.1 ms each, ~13 ms of every start): every
    attrs class of the core and the built-in plugins declares ``repr=False`` and derives from
    Value, or writes a repr of its own (not object's: ``repr=False`` without Value)."""
    generated = []
    classes = 0
    for module in _modules():
        for value in vars(module).values():
            ours = isinstance(value, type) and value.__module__ == module.__name__
            if ours and attrs.has(value):
                classes += 1
                code = getattr(value.__repr__, "__code__", None)  # None: object's own repr
                if code is None or code.co_filename.startswith("<attrs generated"):
                    generated.append(f"{module.__name__}.{value.__qualname__}")
    assert classes > 100
    assert generated == []
