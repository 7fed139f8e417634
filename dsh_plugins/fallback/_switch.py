"""An agent's switch to a fallback model (:class:`Switch`), imported by the first one: a
harness whose models answer never builds it."""

from __future__ import annotations

from attrs import frozen

from dsh.plugin import Value

__all__ = ["Switch"]


@frozen(repr=False, eq=False)
class Switch(Value):
    """An agent's fallback: ``primary`` runs as ``model`` since attempt ``offset`` of
    ``step`` of ``turn``."""

    primary: str
    model: str
    turn: int
    step: int
    offset: int
