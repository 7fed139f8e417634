"""Configuration: TOML (or a dict) structured by cattrs into the attrs class each plugin
registered for its own section. A bad config fails at start with every error listed."""

from __future__ import annotations

import tomllib
from collections.abc import Mapping
from pathlib import Path
from typing import Any, TypeVar

import cattrs
from attrs import frozen
from cattrs.errors import ClassValidationError

from dsh.errors import ConfigError

__all__ = ["AgentConfig", "AgentLoopConfig", "Config", "load_toml"]

T = TypeVar("T")

# Config is user input: unknown keys are errors (a typo must not be silently ignored).
_strict = cattrs.Converter(forbid_extra_keys=True)


@frozen
class AgentConfig:
    """An agent created when the harness starts."""

    id: str
    model: str = ""
    system_prompt: str = ""


@frozen
class AgentLoopConfig:
    """Section ``agent_loop``. ``max_parallel_tools`` bounds how many concurrency-safe tool
    calls of one step run at once."""

    agents: tuple[AgentConfig, ...] = ()
    max_parallel_tools: int = 8


def load_toml(path: str | Path) -> dict[str, Any]:
    """Read a TOML config file; a missing or malformed file is a :class:`ConfigError`."""
    try:
        with open(path, "rb") as file:
            return tomllib.load(file)
    except OSError as exc:
        raise ConfigError([f"cannot read {path}: {exc.strerror}"]) from exc
    except tomllib.TOMLDecodeError as exc:
        raise ConfigError([f"{path} is not valid TOML: {exc}"]) from exc


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
        errors: list[str] = []
        for section, value in self.raw.items():
            if section not in self._classes:
                known = ", ".join(sorted(self._classes))
                errors.append(f"[{section}]: unknown section (known sections: {known})")
                continue
            try:
                self._values[section] = _strict.structure(value, self._classes[section][0])
            except ClassValidationError as exc:
                errors.extend(f"[{section}] {msg}" for msg in cattrs.transform_error(exc))
            except Exception as exc:
                errors.append(f"[{section}]: {exc}")
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

    def dump(self) -> dict[str, Any]:
        """Every registered section with its effective values (defaults filled in)."""
        return {name: _strict.unstructure(self.section(name, object)) for name in self.sections()}
