"""The mock DeepSeek server in tests: the ``mock_server`` fixture and :func:`deepseek_config`.

``mock_server`` is a started :class:`dsh.testing.mockserver.MockServer` on a free loopback port,
closed after the test; queue scenarios on it (``mock_server.queue("rate-limit", "text")``) and
inspect ``mock_server.requests``. The pytest plugin of ``dsh.testing`` exposes it, so tests of
third-party plugins get it too. The server is imported when the fixture runs, so importing this
module costs nothing.
"""

from __future__ import annotations

from collections.abc import AsyncIterator
from typing import TYPE_CHECKING, Any

import pytest

if TYPE_CHECKING:
    from dsh.testing.mockserver import MockServer

__all__ = ["deepseek_config", "mock_server"]


@pytest.fixture
async def mock_server() -> AsyncIterator[MockServer]:
    """A started mock DeepSeek server, closed after the test."""
    from dsh.testing.mockserver import MockServer

    async with MockServer() as server:
        yield server


def deepseek_config(server: MockServer, **options: Any) -> dict[str, Any]:
    """Harness config that points the DeepSeek adapter at ``server``; ``options`` are more
    ``[llm_deepseek]`` settings (e.g. ``idle_timeout_s=0.05``)."""
    section = {"base_url": server.url, "api_key": server.api_key or "mock-key", **options}
    return {"llm_deepseek": section}
