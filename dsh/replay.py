"""Deprecated alias of :mod:`dsh.verify`: renamed for what it does: it verifies a session log.

Kept for one release: each name warns (:class:`DeprecationWarning`) and resolves to the new home.
"""

from __future__ import annotations

from typing import Any

from dsh.deprecation import moved

__all__: list[str] = []


def __getattr__(name: str) -> Any:
    return moved(__name__, name, "dsh.verify")
