"""Markers for hook specifications and implementations, and the ``Stop`` value of waterfalls.

``hookimpl`` is pluggy's implementation marker for the ``dsh`` project. ``spec(style)`` marks a
hook specification and stamps its call style, which the runtime reads to decide how to call it.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any, Generic, Literal, TypeVar, get_args

import pluggy
from attrs import frozen

__all__ = ["PROJECT", "STYLES", "Stop", "Style", "hookimpl", "hookspec", "spec", "style_of"]

PROJECT = "dsh"
hookspec = pluggy.HookspecMarker(PROJECT)
hookimpl = pluggy.HookimplMarker(PROJECT)

Style = Literal["register", "notify", "notify-sync", "waterfall", "middleware", "first", "parallel"]
STYLES: tuple[str, ...] = get_args(Style)
SYNC_STYLES = frozenset({"register", "notify-sync"})
_STYLE_ATTR = "dsh_call_style"

T = TypeVar("T")
F = TypeVar("F", bound=Callable[..., Any])


@frozen
class Stop(Generic[T]):
    """Returned by a waterfall implementation: the chain ends here and ``value`` is its result."""

    value: T


def spec(style: Style) -> Callable[[F], F]:
    """Mark a function as a hook specification called in ``style``."""

    def mark(fn: F) -> F:
        setattr(fn, _STYLE_ATTR, style)
        marked: F = hookspec(fn)
        return marked

    return mark


def style_of(fn: Callable[..., Any]) -> Style:
    """The call style stamped on a hook specification by :func:`spec`."""
    style: Style = getattr(fn, _STYLE_ATTR)
    return style
