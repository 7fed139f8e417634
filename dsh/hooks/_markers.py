"""Markers for hook specifications and implementations, and the ``Stop`` value of waterfalls.

``hookimpl`` is pluggy's implementation marker for the ``dsh`` project. ``spec(style)`` marks a
hook specification and stamps its call style, which the runtime reads to decide how to call it.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any, Generic, Literal, TypeVar, get_args

import pluggy
from attrs import frozen

from dsh.values._events import check_wanted
from dsh.values._value import Value

__all__ = [
    "PROJECT",
    "STYLES",
    "Stop",
    "Style",
    "event_types_of",
    "for_events",
    "hookimpl",
    "hookspec",
    "spec",
    "style_of",
]

PROJECT = "dsh"
hookspec = pluggy.HookspecMarker(PROJECT)
hookimpl = pluggy.HookimplMarker(PROJECT)

Style = Literal["register", "notify", "notify-sync", "waterfall", "middleware", "first", "parallel"]
STYLES: tuple[str, ...] = get_args(Style)
SYNC_STYLES = frozenset({"register", "notify-sync"})
_STYLE_ATTR = "dsh_call_style"
_EVENTS_ATTR = "dsh_event_types"

T = TypeVar("T")
F = TypeVar("F", bound=Callable[..., Any])


@frozen(repr=False, eq=False)
class Stop(Value, Generic[T]):
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


def for_events(*types: type[Any] | str) -> Callable[[F], F]:
    """Mark a ``dsh_session_event`` implementation as wanting only the events whose ``data``
    is an instance of one of ``types``: the hook runtime does not call it for the others. Most
    of a step's events are streamed chunks, which most observers skip at once; this skips them
    without a call. On a hook that carries no event the marker is refused when the plugin
    loads::

        @hookimpl
        @for_events(AssistantMessage, TurnEnd, HISTORY_SUMMARY)
        def dsh_session_event(self, session, event): ...

    A built-in event type whose class is defined when first needed (a history rewrite, a
    sub-agent's, a permission mode's: :data:`~dsh.values._events.LATER`) may be named by its
    tag (``HISTORY_SUMMARY``, ``"compaction/summary"``): the same events, and a plugin that
    loads does not build the class.
    """
    if not types:
        raise TypeError("for_events() needs at least one event data class")
    check_wanted(types)

    def mark(fn: F) -> F:
        setattr(fn, _EVENTS_ATTR, types)
        return fn

    return mark


def event_types_of(fn: Callable[..., Any]) -> tuple[type[Any] | str, ...] | None:
    """The data classes (and built-in type tags) :func:`for_events` gave ``fn`` (a function or
    a bound method), or ``None``: every event."""
    types: tuple[type[Any] | str, ...] | None = getattr(fn, _EVENTS_ATTR, None)
    return types
