from __future__ import annotations

from collections.abc import Iterator

import pytest

from tests.gateway.support import Gateway, LiteLlmProxy, MockThread, litellm_executable


@pytest.fixture(scope="session")
def gateway(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Gateway]:
    """The mock server behind a started LiteLLM proxy, for the whole session."""
    executable = litellm_executable()
    assert executable is not None  # the tests skip without it
    mock = MockThread()
    mock.start()
    proxy = LiteLlmProxy(executable, mock.url, tmp_path_factory.mktemp("litellm"))
    try:
        proxy.start()
        yield Gateway(mock, proxy)
    finally:
        proxy.stop()
        mock.stop()


@pytest.fixture
def mock(gateway: Gateway) -> Iterator[MockThread]:
    """The gateway's mock, with nothing left queued by an earlier case."""
    gateway.mock.drain()
    yield gateway.mock
    gateway.mock.drain()
