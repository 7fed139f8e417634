"""A config section built without cattrs (``dsh.values._config_plain``) is the one cattrs builds,
field type for field type, and whatever cattrs refuses is left to cattrs, so ``Config.load``
reports cattrs' own errors. Checked on sections generated from the types of every config class
dsh and its built-in plugins register: right values, wrong types, numbers out of range, unknown
literals, ints where floats belong, nested tables, missing and unknown keys."""

from __future__ import annotations

import functools
import math
import typing
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Annotated, Any, Literal
from unittest.mock import Mock

import attrs
import pytest
from attrs import field, frozen
from hypothesis import HealthCheck, event, given, settings
from hypothesis import strategies as st
from hypothesis.strategies import SearchStrategy

from dsh import Harness
from dsh.values import _config_plain
from dsh.values._config import Config, _shape_errors, _strict
from dsh.values._config_plain import Unhandled, structure
from dsh.values._errors import ConfigError


@functools.cache
def registered() -> dict[str, Any]:
    """Every config section of a harness with the built-in plugins, and its class."""
    h = Harness()
    h.load()
    return {section: cls for section, (cls, _) in sorted(h.config._classes.items())}


def typed(value: Any) -> Any:
    """``value`` with the type of every value inside it, to compare: two are alike when
    equal and of the same types throughout (a float, not an int; a tuple, not a list). NaN is
    alike to NaN."""
    kind = type(value)
    if attrs.has(kind):
        return kind, tuple(typed(getattr(value, f.name)) for f in attrs.fields(kind))
    if isinstance(value, list | tuple):
        return kind, tuple(typed(item) for item in value)
    if isinstance(value, dict):
        return kind, tuple((key, typed(item)) for key, item in value.items())
    if isinstance(value, float) and math.isnan(value):
        return kind, "nan"
    return kind, value


# -- raw values generated from the declared types ---------------------------------------------

KEYS = st.text(alphabet="abcxyz_", max_size=3)
JSON = st.recursive(
    st.none() | st.booleans() | st.integers() | st.floats() | st.text(max_size=3),
    lambda inner: st.lists(inner, max_size=2) | st.dictionaries(KEYS, inner, max_size=2),
    max_leaves=4,
)
#: A value of the wrong kind almost anywhere (TOML's own types and None).
WRONG = st.one_of(
    st.none(),
    st.booleans(),
    st.integers(-2, 2),
    st.floats(-2, 2),
    st.text(max_size=3),
    st.lists(st.integers(0, 2), max_size=2),
    st.dictionaries(KEYS, st.integers(0, 2), max_size=2),
)


@functools.cache
def raw(tp: Any, wrong: bool) -> SearchStrategy[Any]:
    """Raw values for the type ``tp``: values of its shape (their numbers and literals may
    still be refused), and with ``wrong`` sometimes one of another kind at any depth."""
    fitting = fits(tp, wrong)
    if not wrong:
        return fitting
    return st.integers(0, 5).flatmap(lambda n: WRONG if n == 0 else fitting)


def fits(tp: Any, wrong: bool) -> SearchStrategy[Any]:
    numbers = st.integers(-2, 3) | st.integers()
    scalars: dict[Any, SearchStrategy[Any]] = {
        bool: st.booleans(),
        int: numbers,
        float: st.floats(-2, 3) | numbers | st.floats(),
        str: st.text(max_size=4),
    }
    if tp in scalars:
        return scalars[tp]
    if tp is Any:
        return JSON
    if attrs.has(tp):
        hints = typing.get_type_hints(tp)
        fields = {f.name: raw(hints[f.name], wrong) for f in attrs.fields(tp)}
        table = st.fixed_dictionaries({}, optional=fields)
        return table | table.map(lambda t: {**t, "unknown": 1}) if wrong else table
    args = typing.get_args(tp)
    if typing.get_origin(tp) is Literal:
        return st.sampled_from(args) | st.text(max_size=3) if wrong else st.sampled_from(args)
    if type(None) in args:  # X | None
        return st.none() | raw(args[0], wrong)
    if len(args) == 1 or args[1] is Ellipsis:  # list[X], tuple[X, ...]
        items = st.lists(raw(args[0], wrong), max_size=3)
        return items | items.map(tuple)
    return st.dictionaries(KEYS, raw(args[1], wrong), max_size=3)  # dict[str, X]


@st.composite
def sections(draw: st.DrawFn, wrong: bool) -> tuple[type[Any], Any]:
    section = draw(st.sampled_from(sorted(registered())))
    cls = registered()[section]
    return cls, draw(raw(cls, wrong))


def check(value: Any, cls: type[Any]) -> None:
    """The plain structuring of a section that passed the shape check builds what cattrs
    builds, and declines whatever cattrs refuses."""
    if _shape_errors(value, cls, ""):
        event("refused by the shape check")
        return
    try:
        expected = _strict().structure(value, cls)
    except Exception:
        event("refused by cattrs")
        with pytest.raises(Unhandled):
            structure(value, cls)
        return
    event("built")
    # Generated values are of TOML's own types, which the plain structuring knows.
    assert typed(structure(value, cls)) == typed(expected)


@settings(max_examples=400, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(sections(wrong=False))
def test_a_section_of_the_right_shape_is_built_as_cattrs_builds_it(
    drawn: tuple[type[Any], Any],
) -> None:
    check(drawn[1], drawn[0])


@settings(max_examples=400, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(sections(wrong=True))
def test_a_section_with_wrong_values_is_left_to_cattrs(drawn: tuple[type[Any], Any]) -> None:
    check(drawn[1], drawn[0])


def outcome(raw_config: dict[str, Any], plain: bool) -> list[str] | dict[str, Any]:
    """What loading ``raw_config`` with every built-in section registered gives: its errors,
    or its sections' values."""
    config = Config(raw_config)
    for section, cls in registered().items():
        config.register(section, cls)
    try:
        config._load(plain=plain)
    except ConfigError as exc:
        return exc.errors
    return {name: config.section(name, object) for name in config.sections()}


@st.composite
def configs(draw: st.DrawFn) -> dict[str, Any]:
    wrong = draw(st.booleans())
    chosen = draw(st.lists(st.sampled_from(sorted(registered())), max_size=4, unique=True))
    config = {section: draw(raw(registered()[section], wrong)) for section in chosen}
    if draw(st.integers(0, 9)) == 0:
        config["no_such_section"] = {}
    return config


@settings(max_examples=300, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(configs())
def test_a_config_loads_as_the_cattrs_only_load_loads_it(raw_config: dict[str, Any]) -> None:
    assert typed(outcome(raw_config, plain=True)) == typed(outcome(raw_config, plain=False))


def test_a_right_config_is_built_without_cattrs(monkeypatch: pytest.MonkeyPatch) -> None:
    converter = Mock(side_effect=AssertionError("cattrs asked"))
    monkeypatch.setattr("dsh.values._config._strict", converter)
    raw_config = {
        "llm_deepseek": {"base_url": "http://127.0.0.1:9", "api_key": "x", "idle_timeout_s": 5},
        "agent_loop": {"agents": [{"id": "main", "tools": ["read_file"]}]},
        "permissions": {"mode": "read-only", "rules": [{"action": "allow", "tool": "shell"}]},
    }
    values = outcome(raw_config, plain=True)
    assert isinstance(values, dict)
    assert values["llm_deepseek"].idle_timeout_s == 5.0
    assert type(values["llm_deepseek"].idle_timeout_s) is float
    assert values["agent_loop"].agents[0].tools == ("read_file",)
    assert values["permissions"].rules[0].tool == "shell"
    converter.assert_not_called()


def test_a_wrong_value_reads_as_cattrs_reports_it() -> None:
    raw_config = {
        "agent_loop": {"max_parallel_tools": 0, "agents": [{"model": "m"}]},
        "persistence_jsonl": {"fsync": "sometimes"},
        "retry": {"jitter": 2},
    }
    errors = outcome(raw_config, plain=True)
    assert errors == outcome(raw_config, plain=False)
    # The messages of the cattrs-only load before the plain structuring came.
    assert errors == [
        "[agent_loop] required field missing @ $.agents[0].id",
        "[persistence_jsonl] unknown error (sometimes not in literal "
        "typing.Literal['turn', 'checkpoint', 'never']) @ $.fsync",
        "[retry] jitter must be at most 1, got 2.0",
    ]


# -- types and values outside the config classes' ------------------------------------------------


class Mode:
    """Not a type the plain structuring knows."""


@frozen
class Odd:
    _secret: int = 0  # passed to __init__ as ``secret``
    names: list[str] = field(factory=list)
    table: Mapping[str, float] = field(factory=dict)
    anything: Any = None
    derived: int = field(init=False, default=3)


@frozen
class Needs:
    id: str


def structures_alike(value: Any, tp: Any) -> None:
    assert typed(structure(value, tp)) == typed(_strict().structure(value, tp))


def test_aliases_lists_mappings_and_any_are_built_as_cattrs_builds_them() -> None:
    structures_alike({"_secret": 2, "names": ("a",), "table": {"x": 1}, "anything": [1]}, Odd)
    structures_alike({}, Odd)
    structures_alike([1, 2], list[int])
    structures_alike({"a": 1}, Mapping[str, int])
    structures_alike(None, int | None)
    structures_alike(None, Literal["a", None])


@pytest.mark.parametrize(
    ("value", "tp"),
    [
        (True, int),  # not of the type's own kind
        (1, bool),
        ({"derived": 5}, Odd),  # not an __init__ argument: cattrs calls it an extra key
        ({1: 2}, Odd),
        ({}, Needs),  # a required field missing
        ([], Needs),  # not a table
        ({"id": 5}, Needs),
        (1, int | str),  # a union of several types
        ((1, "a"), tuple[int, str]),
        ("ab", tuple[str, ...]),
        ([1], Sequence[int]),
        ({1: 2}, dict[int, int]),
        ({1: 2}, dict[str, int]),
        ([("a", 1)], dict[str, int]),
        ("x", Path),
        ("x", Mode),
        (1, Annotated[int, "meta"]),
        ("b", Literal["a"]),
        (1.0, Literal[1]),
        (Path("a"), Literal["a"]),
        ("a", Literal["a", Path("a")]),
        ({}, Mode),
    ],
)
def test_what_the_plain_structuring_does_not_know_is_left_to_cattrs(value: Any, tp: Any) -> None:
    with pytest.raises(Unhandled):
        structure(value, tp)


def test_a_class_whose_types_do_not_resolve_is_left_to_cattrs() -> None:
    @frozen
    class Unresolved:
        x: Missing = 0  # type: ignore[name-defined]  # noqa: F821

    with pytest.raises(Unhandled):
        structure({"x": 1}, Unresolved)
    assert Unresolved not in _config_plain._FIELDS


def test_a_class_s_field_types_are_resolved_once() -> None:
    structure({"id": "a"}, Needs)
    fields = _config_plain._FIELDS[Needs]
    structure({"id": "b"}, Needs)
    assert _config_plain._FIELDS[Needs] is fields


def test_an_extra_key_on_an_init_false_field_reads_as_cattrs_reports_it() -> None:
    config = Config({"s": {"derived": 5}})
    config.register("s", Odd)
    with pytest.raises(ConfigError) as info:
        config.load()
    assert info.value.errors == ["[s] extra fields found (derived)"]
