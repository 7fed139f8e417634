"""What every host of a pool runs: :class:`HostSpec`, sent to the hosts when the pool starts
them (it must pickle: plugins are named, not passed)."""

from __future__ import annotations

import importlib
from collections.abc import Iterable, Mapping
from typing import Any

from attrs import field, frozen

from dsh.plugin import AgentOptions, DshError, Value

__all__ = ["HostSpec", "load_plugin"]


def _plain(config: Mapping[str, Any]) -> dict[str, Any]:
    return dict(config)


def _names(names: Iterable[str]) -> tuple[str, ...]:
    return tuple(names)


@frozen(repr=False, eq=False)
class HostSpec(Value):
    """A host's harness: its ``config`` (the mapping a ``dsh.toml`` holds; it must name a store
    every host shares, such as ``persistence_postgres``), the host ``plugins`` beside the
    installed ones, each ``"module:attribute"`` (a class is instantiated), and the
    ``options`` of every agent (model, system prompt)."""

    config: dict[str, Any] = field(factory=dict, converter=_plain)
    plugins: tuple[str, ...] = field(default=(), converter=_names)
    options: AgentOptions = field(factory=AgentOptions)


def load_plugin(name: str) -> object:
    """The plugin ``"module:attribute"`` names: the attribute, or an instance of it if it is a
    class."""
    module, _, attribute = name.partition(":")
    if not module or not attribute:
        raise DshError(f"host plugin {name!r}: name it as 'module:attribute'")
    try:
        found = getattr(importlib.import_module(module), attribute)
    except (ImportError, AttributeError) as exc:
        raise DshError(f"host plugin {name!r} cannot be loaded: {exc}") from exc
    return found() if isinstance(found, type) else found
