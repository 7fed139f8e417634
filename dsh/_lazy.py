"""Names a package offers without importing the modules that hold them until they are used.

A package keeps a module-level ``__getattr__`` that calls :func:`imported` (its type checker
sees the names through ``if TYPE_CHECKING:`` imports): ``import dsh`` stays cheap, and loading
an adapter plugin does not import its HTTP client. A name, once looked up, is kept by its
package: Python calls ``__getattr__`` only for names a module does not hold, ~1.2 µs a call,
and a harness start with every default plugin reads ~600 names through them (~110 distinct).
"""

from __future__ import annotations

import importlib
import sys
from collections.abc import Mapping
from typing import Any

__all__ = ["imported"]


def imported(package: str, name: str, homes: Mapping[str, str]) -> Any:
    """Attribute ``name`` of ``package``, taken from the module ``homes`` maps it to (imported
    now, if it was not yet; ``"module:other"`` when it has another name there), and from now
    on held by ``package`` itself. A name ``homes`` does not list is an
    :class:`AttributeError`."""
    home = homes.get(name)
    if home is None:
        raise AttributeError(f"module {package!r} has no attribute {name!r}")
    module, _, there = home.partition(":")
    value = getattr(importlib.import_module(module), there or name)
    setattr(sys.modules[package], name, value)
    return value
