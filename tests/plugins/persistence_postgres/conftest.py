from __future__ import annotations

from collections.abc import Iterator

import pytest

from tests.plugins.persistence_postgres.pg import DSN, drop_test_schemas


@pytest.fixture(autouse=True, scope="session")
def _drop_test_schemas() -> Iterator[None]:
    """Leave the test server as it was found."""
    yield
    if DSN:
        drop_test_schemas()
