"""Configuration: TOML (or a dict) structured into the attrs class each plugin registered for
its own section. A bad config fails at start with every error listed.

A section is built by :mod:`dsh.values._config_plain` exactly as cattrs would build it; a value
it cannot vouch for (a wrong one, or of a type it does not know) is structured by cattrs, whose
errors are the ones reported. cattrs is imported only then (and by :meth:`Config.dump`): a start
with a right config does without it.

Values are checked against the field types before cattrs sees them, because cattrs converts
what it can: ``"false"`` would become ``True`` and the string ``"abc"`` where a list of names
belongs would become ``("a", "b", "c")``. A field's range is checked by its attrs validator
(:func:`at_least`, :func:`greater_than`), so ``max_parallel_tools = 0`` fails at start too.
"""

from __future__ import annotations

import functools
import os
import types
import typing
from collections.abc import Callable, Mapping, Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any, TypeVar

import attrs
from attrs import field, frozen

from dsh.values import _config_plain
from dsh.values._agent import PermissionMode
from dsh.values._errors import ConfigError
from dsh.values._value import Value

if TYPE_CHECKING:
    import cattrs

__all__ = [
    "CONFIG_ENV",
    "CONFIG_FILE",
    "AgentConfig",
    "AgentLoopConfig",
    "Config",
    "OutOfRange",
    "at_least",
    "find_config",
    "greater_than",
    "load_toml",
]

T = TypeVar("T")


@functools.cache
def _strict() -> cattrs.Converter:
    """The converter of config values, made when first needed (a wrong value, a dump).
    Config is user input: unknown keys are errors (a typo must not be silently ignored)."""
    import cattrs

    return cattrs.Converter(forbid_extra_keys=True)


Validator = Callable[[Any, "attrs.Attribute[Any]", Any], None]


class OutOfRange(ValueError):
    """A config value of the right type outside the range its field allows."""


def _format_error(exc: BaseException, type_: type[Any] | None) -> str:
    if isinstance(exc, OutOfRange):
        return str(exc)
    import cattrs.v

    return cattrs.v.format_exception(exc, type_)


def at_least(minimum: float) -> Validator:
    """An attrs validator: the field is a number ``>= minimum`` (NaN is refused)."""

    def check(instance: Any, attribute: attrs.Attribute[Any], value: Any) -> None:
        if not value >= minimum:
            raise OutOfRange(f"{attribute.name} must be at least {minimum}, got {value!r}")

    return check


def greater_than(bound: float) -> Validator:
    """An attrs validator: the field is a number ``> bound`` (NaN is refused; ``inf`` is
    accepted, where a field documents it as "no bound")."""

    def check(instance: Any, attribute: attrs.Attribute[Any], value: Any) -> None:
        if not value > bound:
            raise OutOfRange(f"{attribute.name} must be greater than {bound}, got {value!r}")

    return check


def at_most(maximum: float) -> Validator:
    """An attrs validator: the field is a number ``<= maximum`` (NaN is refused); combine it
    with :func:`at_least` or :func:`greater_than` for a ratio."""

    def check(instance: Any, attribute: attrs.Attribute[Any], value: Any) -> None:
        if not value <= maximum:
            raise OutOfRange(f"{attribute.name} must be at most {maximum}, got {value!r}")

    return check


@frozen(repr=False, eq=False)
class AgentConfig(Value):
    """An agent created when the harness starts."""

    id: str
    model: str = ""
    system_prompt: str = ""
    #: The tools it may call (``None``: every tool); see ``AgentOptions.tools``.
    tools: tuple[str, ...] | None = None
    #: The import path (``package.module:Name``) of its answer's type, see ``dsh.loop._output``.
    output_type: str | None = None
    #: Its permission mode (``None``: ``[permissions] mode``); a sub-agent made from it runs
    #: under the stricter of this and its parent's mode (see ``docs/subagents.md``).
    permission_mode: PermissionMode | None = None


@frozen(repr=False, eq=False)
class AgentLoopConfig(Value):
    """Section ``agent_loop``. ``max_parallel_tools`` bounds how many concurrency-safe tool
    calls of one step run at once (1 or more); ``max_depth`` how deep sub-agents nest (a
    child of a top-level agent is at depth 1)."""

    agents: tuple[AgentConfig, ...] = ()
    max_parallel_tools: int = field(default=8, validator=at_least(1))
    max_depth: int = field(default=3, validator=at_least(0))


#: The environment variable naming the config file when none is given explicitly.
CONFIG_ENV = "DSH_CONFIG"
#: The file looked for in the working directory when neither names one.
CONFIG_FILE = "dsh.toml"


def find_config(explicit: str | Path | None = None) -> str | Path | None:
    """The config file the command line and ``dsh.run`` use: ``explicit`` if given, else the
    file ``$DSH_CONFIG`` names (it must exist), else ``./dsh.toml`` when present, else none."""
    if explicit is not None:
        return explicit
    named = os.environ.get(CONFIG_ENV)
    if named:
        if not Path(named).is_file():
            raise ConfigError([f"{CONFIG_ENV}={named}: no such file"])
        return named
    return CONFIG_FILE if Path(CONFIG_FILE).is_file() else None


def load_toml(path: str | Path) -> dict[str, Any]:
    """Read a TOML config file; a missing or malformed file is a :class:`ConfigError`.
    ``tomllib`` is imported here: a harness configured by a mapping never reads TOML."""
    import tomllib

    try:
        with open(path, "rb") as file:
            return tomllib.load(file)
    except OSError as exc:
        raise ConfigError([f"cannot read {path}: {exc.strerror}"]) from exc
    except tomllib.TOMLDecodeError as exc:
        raise ConfigError([f"{path} is not valid TOML: {exc}"]) from exc
    except UnicodeDecodeError as exc:
        raise ConfigError([f"{path} is not valid TOML: not UTF-8 text ({exc.reason})"]) from exc


class Config:
    """Registered sections and their structured values."""

    def __init__(self, raw: Mapping[str, Any] | None = None) -> None:
        self.raw: dict[str, Any] = dict(raw or {})
        self._classes: dict[str, tuple[type[Any], str]] = {}
        self._values: dict[str, Any] = {}

    def register(self, section: str, cls: type[Any], owner: str = "dsh") -> None:
        known = self._classes.get(section)
        if known is not None and known[0] is not cls:
            raise ConfigError(
                [f"config section {section!r} is claimed by {known[1]!r} and {owner!r}"]
            )
        self._classes[section] = (cls, owner)

    def load(self) -> None:
        """Structure every registered section; raise one :class:`ConfigError` listing all
        problems (including sections nobody registered)."""
        self._load(plain=True)

    def _load(self, *, plain: bool) -> None:
        """:meth:`load`; with ``plain=False`` every section is structured by cattrs (the
        reference the plain structuring is tested against)."""
        errors: list[str] = []
        for section, value in self.raw.items():
            if section not in self._classes:
                known = ", ".join(sorted(self._classes))
                errors.append(f"[{section}]: unknown section (known sections: {known})")
                continue
            cls = self._classes[section][0]
            shape = _shape_errors(value, cls, "")
            if shape:
                errors.extend(f"[{section}] {msg}" for msg in shape)
                continue
            if plain:
                try:
                    self._values[section] = _config_plain.structure(value, cls)
                    continue
                except _config_plain.Unhandled:
                    pass
            try:
                self._values[section] = _strict().structure(value, cls)
            except Exception as exc:
                errors.extend(f"[{section}]{msg}" for msg in _cattrs_errors(exc))
        if errors:
            raise ConfigError(errors)

    def section(self, name: str, cls: type[T]) -> T:
        """The structured value of section ``name``, a ``cls`` (its defaults if not given)."""
        value = self._values.get(name)
        if value is None:
            value = self._values[name] = self._classes[name][0]()
        if not isinstance(value, cls):
            raise ConfigError(
                [f"config section {name!r} holds {type(value).__name__}, not {cls.__name__}"]
            )
        return value

    def sections(self) -> list[str]:
        return sorted(self._classes)

    def owner(self, section: str) -> str:
        """Who registered ``section``: a plugin's name, or ``"dsh"`` for the core's own."""
        known = self._classes.get(section)
        if known is None:
            known_sections = ", ".join(sorted(self._classes)) or "none"
            raise ConfigError(
                [f"config section {section!r} is not registered (known: {known_sections})"]
            )
        return known[1]

    def dump(self) -> dict[str, Any]:
        """Every registered section with its effective values (defaults filled in)."""
        converter = _strict()
        return {name: converter.unstructure(self.section(name, object)) for name in self.sections()}


def _cattrs_errors(exc: Exception) -> list[str]:
    """What cattrs' failure to structure a section says, each message to follow the section."""
    import cattrs

    if not isinstance(exc, cattrs.ClassValidationError):
        return [f": {exc}"]
    messages = cattrs.transform_error(exc, format_exception=_format_error)
    return [f" {msg.removesuffix(' @ $')}" for msg in messages]


# -- the shape of raw values -------------------------------------------------------------------

_SCALARS: dict[Any, tuple[str, Callable[[Any], bool]]] = {
    bool: ("true or false", lambda v: isinstance(v, bool)),
    int: ("an integer", lambda v: isinstance(v, int) and not isinstance(v, bool)),
    float: ("a number", lambda v: isinstance(v, int | float) and not isinstance(v, bool)),
    str: ("a string", lambda v: isinstance(v, str)),
}
_SEQUENCES = (tuple, list, set, frozenset, Sequence)
_MAPPINGS = (dict, Mapping)


def _shape_errors(value: Any, tp: Any, path: str) -> list[str]:
    """What is wrong with the raw ``value`` for the type ``tp`` (an attrs class, a scalar, a
    sequence, an optional), each error prefixed by where it is. Other types are left to
    cattrs."""
    if attrs.has(tp):
        return _table_errors(value, tp, path)
    if tp in _SCALARS:
        expected, fits = _SCALARS[tp]
        return [] if fits(value) else [_wrong(path, expected, value)]
    origin, args = typing.get_origin(tp), typing.get_args(tp)
    if origin in _SEQUENCES:
        return _sequence_errors(value, origin, args, path)
    if origin in _MAPPINGS:
        return _mapping_errors(value, args, path)
    if origin in (typing.Union, types.UnionType):
        return _union_errors(value, args, path)
    return []


def _table_errors(value: Any, cls: type[Any], path: str) -> list[str]:
    if not isinstance(value, Mapping):
        return [_wrong(path, f"a table of {cls.__name__} settings", value)]
    hints = typing.get_type_hints(cls)
    errors: list[str] = []
    extra = sorted(set(map(str, value)) - {attribute.name for attribute in attrs.fields(cls)})
    if extra:
        errors.append(f"{f'{path}: ' if path else ''}extra fields found ({', '.join(extra)})")
    for attribute in attrs.fields(cls):
        if attribute.name in value:
            name = f"{path}.{attribute.name}" if path else attribute.name
            errors += _shape_errors(value[attribute.name], hints[attribute.name], name)
    return errors


def _sequence_errors(value: Any, origin: Any, args: tuple[Any, ...], path: str) -> list[str]:
    if not isinstance(value, list | tuple):
        return [_wrong(path, "a list", value)]
    fixed = origin is tuple and not (len(args) == 2 and args[1] is Ellipsis)
    if fixed and len(args) != len(value):
        return [_wrong(path, f"a list of {len(args)} items", value)]
    item_types = args if fixed else [args[0]] * len(value)
    errors: list[str] = []
    for index, (item, item_type) in enumerate(zip(value, item_types, strict=True)):
        errors += _shape_errors(item, item_type, f"{path}[{index}]")
    return errors


def _mapping_errors(value: Any, args: tuple[Any, ...], path: str) -> list[str]:
    """A table of named values: each value checked like a field (``tools = "no"`` under a
    model name must fail, not become ``True``)."""
    if not isinstance(value, Mapping):
        return [_wrong(path, "a table", value)]
    errors: list[str] = []
    for key, item in value.items():
        errors += _shape_errors(item, args[1], f"{path}.{key}" if path else str(key))
    return errors


def _union_errors(value: Any, args: tuple[Any, ...], path: str) -> list[str]:
    options = [arg for arg in args if arg is not type(None)]
    if value is None and len(options) < len(args):
        return []
    found = [_shape_errors(value, option, path) for option in options]
    if any(not errors for errors in found):
        return []
    return found[0] if len(found) == 1 else [_wrong(path, _one_of(options), value)]


def _one_of(options: list[Any]) -> str:
    names = [_SCALARS[o][0] if o in _SCALARS else getattr(o, "__name__", str(o)) for o in options]
    return " or ".join(names)


def _wrong(path: str, expected: str, value: Any) -> str:
    shown = repr(value) if len(repr(value)) <= 60 else repr(value)[:57] + "..."
    where = f"{path}: " if path else ""
    return f"{where}expected {expected}, got {type(value).__name__} {shown}"
