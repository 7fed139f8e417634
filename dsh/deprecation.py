"""Old import paths that keep working for one release.

A module whose public names moved keeps a module-level ``__getattr__`` that calls :func:`moved`:
the old import still gives the same object, with a :class:`DeprecationWarning` that names the new
home, so a host sees what to change before the alias goes. ``docs/changelog.md`` lists every
moved name.
"""

from __future__ import annotations

import importlib
import warnings
from collections.abc import Mapping
from typing import Any

__all__ = ["moved"]

_missing = object()


def moved(old: str, name: str, homes: Mapping[str, str] | str) -> Any:
    """Attribute ``name`` of deprecated module ``old``, fetched from its new home.

    ``homes`` maps each moved name to the module it now lives in (``"module:new_name"`` when it
    was renamed too), or is one module for all of them. A name with no new home (and any dunder,
    which import machinery probes) is an ordinary :class:`AttributeError`.
    """
    home = homes if isinstance(homes, str) else homes.get(name)
    if home is None or name.startswith("__"):
        raise AttributeError(f"module {old!r} has no attribute {name!r}")
    module, _, new_name = home.partition(":")
    new_name = new_name or name
    value = getattr(importlib.import_module(module), new_name, _missing)
    if value is _missing:
        raise AttributeError(f"module {old!r} has no attribute {name!r}")
    warnings.warn(
        f"{old}.{name} moved to {module}.{new_name}; import it from there "
        "(the old path goes in the next release)",
        DeprecationWarning,
        stacklevel=3,
    )
    return value
