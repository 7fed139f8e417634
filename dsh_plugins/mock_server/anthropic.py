"""Deprecated alias of :mod:`dsh.testing.mockserver.anthropic`.

The mock server's engine moved to the test kit. Kept for one release: each name warns
(:class:`DeprecationWarning`) and resolves to the new home.
"""

from __future__ import annotations

from typing import Any

from dsh.deprecation import moved


def __getattr__(name: str) -> Any:
    return moved(__name__, name, "dsh.testing.mockserver.anthropic")
