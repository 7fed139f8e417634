"""A host restarted under its name (its actor or its node died) resumes the sessions its
previous life held at once: the turn left open is closed ``interrupted`` without a caller
asking. Against the real PostgreSQL store (whose leases carry the host's name) and the mock
server, in this process, where coverage sees it."""

from __future__ import annotations

import asyncio
import os
import secrets
from collections.abc import AsyncIterator, Sequence
from typing import Any

import pytest
from structlog.testing import capture_logs

from dsh.testing.mock import deepseek_config
from dsh.testing.mockserver import MockServer
from dsh.values._agent import AgentOptions
from dsh.values._events import SessionEvent, ToolCallEvent, TurnEnd
from dsh_plugins.cluster.host import SessionHost
from dsh_plugins.cluster.spec import HostSpec

pytest.importorskip("asyncpg", reason="the restart tests need asyncpg (extra postgres)")
DSN = os.environ.get("DSH_TEST_POSTGRES_DSN", "")
pytestmark = pytest.mark.skipif(
    not DSN, reason="DSH_TEST_POSTGRES_DSN is unset: the restart tests need PostgreSQL"
)
TOOLS = "tests.plugins.cluster.tools:HostTools"


@pytest.fixture
async def schema() -> AsyncIterator[str]:
    import asyncpg  # type: ignore[import-untyped,unused-ignore]

    name = f"restart_{secrets.token_hex(4)}"
    yield name
    db: Any = await asyncpg.connect(DSN)
    try:
        await db.execute(f"DROP SCHEMA IF EXISTS {name} CASCADE")
    finally:
        await db.close()


def spec(server: MockServer, schema: str) -> HostSpec:
    return HostSpec(
        config={
            **deepseek_config(server),
            "persistence_jsonl": {"enabled": False},
            "persistence_postgres": {"enabled": True, "dsn": DSN, "schema": schema},
        },
        plugins=(TOOLS,),
        options=AgentOptions(model="deepseek-flash"),
    )


async def until(events: Sequence[SessionEvent], cls: type[Any]) -> None:
    for _ in range(400):
        if any(isinstance(e.data, cls) for e in events):
            return
        await asyncio.sleep(0.05)
    raise AssertionError(f"no {cls.__name__} within 20 s")


async def test_a_restarted_host_resumes_what_it_held_without_being_asked(
    mock_server: MockServer, schema: str
) -> None:
    before = SessionHost("host-1", spec(mock_server, schema))
    await before.send("s1", "please hold the door")  # the model calls `hold`: it runs on
    harness = await before.harness()
    session = harness.sessions.get("s1")
    assert session is not None
    await until(session.events, ToolCallEvent)
    await session.checkpoint()
    # The previous life dies: its store stops (no heartbeat, no release), its turn never ends.
    store = before._ready_store()
    await store.close()  # type: ignore[misc]
    after = SessionHost("host-1", spec(mock_server, schema))
    try:
        await after.harness()
        assert after._resuming is not None
        await after._resuming
        assert after.info().sessions == ("s1",)
        resumed = (await after.harness()).sessions.get("s1")
        assert resumed is not None
        ends = [e.data for e in resumed.events if isinstance(e.data, TurnEnd)]
        assert [end.reason.type for end in ends] == ["interrupted"]
    finally:
        await after.close()
        await before.close()  # its writes are refused (stale token): nothing it says lands
    reader = SessionHost("reader", spec(mock_server, schema))
    try:
        stored = await (await reader.harness()).sessions.load("s1")
        assert stored is not None
        ends = [e.data for e in stored if isinstance(e.data, TurnEnd)]
        assert [end.reason.type for end in ends] == ["interrupted"]
    finally:
        await reader.close()


async def test_a_session_that_cannot_be_resumed_is_left_to_the_next_call(
    mock_server: MockServer, schema: str
) -> None:
    host = SessionHost("host-2", spec(mock_server, schema))
    harness = await host.harness()
    store = host._ready_store()
    # A lease naming this host for a session the store has no log of (it was never written).
    held = await store.sessions_held_by("host-2")
    assert held == []
    original = store.sessions_held_by

    async def phantom(owner: str) -> list[str]:
        return ["never-written", *await original(owner)]

    store.sessions_held_by = phantom  # type: ignore[method-assign]
    try:
        with capture_logs() as logs:
            await host._resume_held(store)
        assert [(e["event"], e["session"]) for e in logs] == [
            ("host.resume_failed", "never-written")
        ]
        assert harness.sessions.get("never-written") is None
    finally:
        await host.close()
