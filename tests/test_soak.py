"""A short soak: concurrent agents, faults mixed in, everything checked afterwards."""

from __future__ import annotations

import importlib.util
from pathlib import Path
from typing import Any

from dsh.testing.mockserver import MockServer

SOAK = Path(__file__).parent.parent / "bench" / "soak.py"


def load_soak() -> Any:
    spec = importlib.util.spec_from_file_location("soak", SOAK)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


async def test_a_short_soak_survives_faults() -> None:
    soak = load_soak()
    async with MockServer() as server:

        async def queue(specs: list[Any]) -> None:
            server.queue(*specs)

        report = await soak.soak(
            server.url,
            queue,
            agents=12,
            rounds=2,
            fault_rate=0.25,
            retry_after="0",
            idle_timeout_s=0.2,
        )
    assert report.ok, (report.problems, report.escaped)
    assert report.turns == 24
    assert report.faults_queued > 0 and report.retries > 0
    assert sum(report.outcomes.values()) == 24
