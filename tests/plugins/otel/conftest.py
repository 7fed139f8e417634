"""Fixtures for the otel plugin tests. The SDK is imported only by the fixtures that need it,
so that the tests of the plugin without the OpenTelemetry packages run where they are missing
(tox env ``nootel``), while those needing the SDK skip there."""

from __future__ import annotations

from collections.abc import AsyncIterator, Iterator
from typing import TYPE_CHECKING

import pytest

from dsh import Harness
from dsh_plugins.retry import RetryPlugin

if TYPE_CHECKING:
    from tests.plugins.otel.support import Telemetry


@pytest.fixture
def telemetry() -> Iterator[Telemetry]:
    from tests.plugins.otel.support import Telemetry

    found = Telemetry()
    yield found
    found.tracer_provider.shutdown()
    found.meter_provider.shutdown()


@pytest.fixture
async def harness(telemetry: Telemetry) -> AsyncIterator[Harness]:
    from tests.plugins.otel.support import Clock

    plugins = [telemetry.plugin(), RetryPlugin(random=lambda: 0.0)]
    async with Harness(load_entrypoints=False, plugins=plugins, sleep=Clock().sleep) as h:
        yield h
