"""pytest plugin (entry point ``pytest11``): fixtures for testing code that uses dsh.

* ``dsh_harness`` — a started :class:`~dsh.Harness` with no entry-point plugins, closed after
  the test.
* ``dsh_harness_factory`` — ``await factory(plugins=..., config=..., **kwargs)`` for harnesses
  built your way; every one is closed after the test.
* ``mock_server`` — a started mock DeepSeek server on loopback (:mod:`dsh.testing.mock`).

Async fixtures need pytest-asyncio (``asyncio_mode = "auto"``) or an equivalent runner.
Imports of dsh happen inside the fixtures, so loading this plugin costs nothing.
"""

from __future__ import annotations

from collections.abc import AsyncIterator, Awaitable, Callable
from typing import TYPE_CHECKING, Any

import pytest

from dsh.testing.mock import mock_server

if TYPE_CHECKING:
    from dsh.app._harness import Harness

__all__ = ["dsh_harness", "dsh_harness_factory", "mock_server"]


@pytest.fixture
async def dsh_harness_factory() -> AsyncIterator[Callable[..., Awaitable[Harness]]]:
    from dsh.app._harness import Harness

    made: list[Harness] = []

    async def factory(**kwargs: Any) -> Harness:
        kwargs.setdefault("load_entrypoints", False)
        harness = Harness(**kwargs)
        await harness.start()
        made.append(harness)
        return harness

    yield factory
    for harness in reversed(made):
        await harness.close()


@pytest.fixture
async def dsh_harness(
    dsh_harness_factory: Callable[..., Awaitable[Harness]],
) -> Harness:
    return await dsh_harness_factory()
