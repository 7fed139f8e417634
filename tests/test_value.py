"""dsh.values._value.Value: one repr, ``==`` and hash for every attrs class of dsh, giving
what attrs' own generated methods give."""

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


@frozen(repr=False, eq=False)
class SharedPlain(Value):
    a: Any
    b: Any = None


@frozen
class Hidden:
    shown: Any
    secret: Any = field(default=None, repr=False)
    custom: Any = field(default=0, repr=lambda value: f"<{type(value).__name__}>")
    derived: Any = field(init=False, default=7)


@frozen(repr=False, eq=False)
class SharedHidden(Value):
    shown: Any
    secret: Any = field(default=None, repr=False)
    custom: Any = field(default=0, repr=lambda value: f"<{type(value).__name__}>")
    derived: Any = field(init=False, default=7)


@frozen
class Boxed(Generic[T]):
    inner: T


@frozen(repr=False, eq=False)
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


@frozen
class Compared:
    a: Any
    ignored: Any = field(default=None, eq=False)
    c: Any = 0


@frozen(repr=False, eq=False)
class SharedCompared(Value):
    a: Any
    ignored: Any = field(default=None, eq=False)
    c: Any = 0


@frozen
class Empty:
    pass


@frozen(repr=False, eq=False)
class SharedEmpty(Value):
    pass


@frozen(repr=False, eq=False)
class OtherCompared(Value):
    a: Any
    ignored: Any = field(default=None, eq=False)
    c: Any = 0


hashable = st.recursive(
    st.none() | st.booleans() | st.integers() | st.floats(allow_nan=False) | st.text(),
    lambda inner: st.tuples(inner, inner) | st.frozensets(inner, max_size=3),
    max_leaves=6,
)
FIELDS = st.tuples(hashable, hashable, hashable)


@given(FIELDS, FIELDS)
def test_shared_equality_and_hash_agree_with_attrs(
    one: tuple[Any, Any, Any], two: tuple[Any, Any, Any]
) -> None:
    """The reference: the same fields in a class attrs writes ``==`` and ``hash`` for."""
    ours, theirs = SharedCompared(*one), Compared(*one)
    ours_2, theirs_2 = SharedCompared(*two), Compared(*two)
    assert (ours == ours_2) == (theirs == theirs_2)
    assert (ours != ours_2) == (theirs != theirs_2)
    assert ours == SharedCompared(*one) and hash(ours) == hash(SharedCompared(*one))
    if ours == ours_2:
        assert hash(ours) == hash(ours_2)
    assert (SharedPlain(one, two) == SharedPlain(one, two)) == (Plain(one, two) == Plain(one, two))
    assert SharedBoxed(one) == SharedBoxed(one) and hash(SharedBoxed(one)) == hash(SharedBoxed(one))


def test_another_class_is_never_equal_and_nan_is_not_equal_to_itself() -> None:
    assert SharedCompared(1) != OtherCompared(1)  # same fields, another class: as attrs
    assert Compared(1) != SharedCompared(1) and SharedCompared(1) != Compared(1)
    assert SharedCompared(1).__eq__(1) is NotImplemented
    assert SharedEmpty() == SharedEmpty() and Empty() == Empty()
    assert hash(SharedEmpty()) == hash(SharedEmpty())
    # Fields are compared as a tuple's items are: an object is equal to itself, a NaN too
    # (as attrs 23 compares; attrs 26 compares field by field with ``==`` and finds the same
    # NaN unequal), and two NaNs are not equal.
    nan = float("nan")
    assert SharedPlain(nan) == SharedPlain(nan)
    assert SharedPlain(nan) != SharedPlain(float("nan"))
    assert {SharedCompared(1, "x"), SharedCompared(1, "y")} == {SharedCompared(1)}


def test_a_mutable_shared_class_keeps_attrs_equality_and_no_hash() -> None:
    one, two = SharedNode(), SharedNode()
    one.unset = two.unset = 1
    assert one == two and SharedNode.__eq__ is not Value.__eq__
    with pytest.raises(TypeError):
        hash(one)


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


def _generated(method: Any) -> bool:
    """Whether ``method`` is attrs' generated code or object's own (no ``__code__``)."""
    code = getattr(method, "__code__", None)
    return code is None or code.co_filename.startswith("<attrs generated")


def test_every_attrs_class_of_dsh_shares_the_repr_and_a_frozen_one_the_equality() -> None:
    """attrs compiles a repr, an ``==`` and a hash per class it builds (~0.2 ms each, ~25 ms of
    every start): every attrs class of the core and the built-in plugins declares
    ``repr=False`` and derives from Value, or writes a repr of its own (not object's:
    ``repr=False`` without Value); every frozen one declares ``eq=False`` too and shares
    Value's ``==`` and hash (a mutable one keeps attrs' ``==``, and is not hashable)."""
    generated = []
    classes = 0
    for module in _modules():
        for value in vars(module).values():
            ours = isinstance(value, type) and value.__module__ == module.__name__
            if ours and attrs.has(value):
                classes += 1
                name = f"{module.__name__}.{value.__qualname__}"
                if _generated(value.__repr__):
                    generated.append(f"{name}.__repr__")
                frozen_class = value.__setattr__ is not object.__setattr__
                if frozen_class and (value.__eq__ is not Value.__eq__ or value.__hash__ is None):
                    generated.append(f"{name}.__eq__")
    assert classes > 100
    assert generated == []
