"""A cluster host in this process: its harness, sessions, routing answers and event streams,
against the mock DeepSeek server and a real SQLite store (the Ray tests run the same class in
actors, where coverage cannot see it)."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import pytest

from dsh.testing.mock import deepseek_config
from dsh.testing.mockserver import MockServer
from dsh.values._agent import AgentOptions
from dsh.values._approval import AlreadyDecided
from dsh.values._errors import DshError
from dsh.values._events import SessionEvent, ToolCallEvent, ToolResultEvent, TurnEnd
from dsh.values._rare_events import ApprovalRequested
from dsh_plugins.cluster import host as host_module
from dsh_plugins.cluster.host import Beat, Elsewhere, SessionHost
from dsh_plugins.cluster.spec import HostSpec, load_plugin
from tests.plugins.cluster.tools import HostTools

TOOLS = "tests.plugins.cluster.tools:HostTools"


def host_spec(server: MockServer, db: Path, **config: Any) -> HostSpec:
    return HostSpec(
        config={
            **deepseek_config(server),
            "persistence_jsonl": {"enabled": False},
            "persistence_sqlite": {"enabled": True, "path": str(db)},
            **config,
        },
        plugins=(TOOLS,),
        options=AgentOptions(model="deepseek-flash"),
    )


@pytest.fixture
async def host(mock_server: MockServer, tmp_path: Path) -> AsyncIterator[SessionHost]:
    host = SessionHost("host-a", host_spec(mock_server, tmp_path / "sessions.db"))
    yield host
    await host.close()


async def until_turn_end(
    stream: AsyncIterator[SessionEvent | Elsewhere | Beat], seen: list[SessionEvent]
) -> TurnEnd:
    async for item in stream:
        assert isinstance(item, SessionEvent)
        seen.append(item)
        if isinstance(item.data, TurnEnd):
            return item.data
    raise AssertionError("the stream ended before the turn did")


async def test_a_message_is_answered_and_streamed_once_recorded(host: SessionHost) -> None:
    assert await host.send("s1", "echo hello") is None
    stream = host.events("s1")
    seen: list[SessionEvent] = []
    end = await until_turn_end(stream, seen)
    await stream.aclose()
    assert end.reason.type == "completed"
    assert [e.seq for e in seen] == list(range(len(seen)))
    assert any(isinstance(e.data, ToolCallEvent) and e.data.name == "echo" for e in seen)
    # A stream that starts after a seq continues from there, with nothing before it.
    later = host.events("s1", after_seq=seen[2].seq)
    first = await anext(later)
    await later.aclose()
    assert isinstance(first, SessionEvent)
    assert first.seq == seen[3].seq
    assert host.info().sessions == ("s1",)
    assert host.info("node-1").node == "node-1"


async def test_a_session_another_host_holds_is_answered_elsewhere(
    mock_server: MockServer, tmp_path: Path, host: SessionHost
) -> None:
    other = SessionHost("host-b", host_spec(mock_server, tmp_path / "sessions.db"))
    try:
        await host.send("s1", "echo one")
        answer = await other.send("s1", "echo two")
        assert isinstance(answer, Elsewhere)
        assert "one writer at a time" in answer.reason
        stream = other.events("s1")
        assert isinstance(await anext(stream), Elsewhere)
        with pytest.raises(StopAsyncIteration):
            await anext(stream)
        assert isinstance(await other.resume("s1"), Elsewhere)
        # Nothing of it runs on the other host: the abort goes to the lease's holder (SQLite
        # labels a lease with its store's own id).
        holder = await other.abort("s1")
        assert isinstance(holder, Elsewhere)
        assert holder.owner == answer.owner is not None
    finally:
        await other.close()


async def test_a_closed_host_hands_its_sessions_to_the_next(
    mock_server: MockServer, tmp_path: Path, host: SessionHost
) -> None:
    await host.send("s1", "echo one")
    seen: list[SessionEvent] = []
    stream = host.events("s1")
    await until_turn_end(stream, seen)
    await host.close()
    # The stream ends once the session closed there, after every event it recorded.
    rest = [e async for e in stream]
    assert all(isinstance(e, SessionEvent) for e in rest)
    other = SessionHost("host-b", host_spec(mock_server, tmp_path / "sessions.db"))
    try:
        assert await other.resume("s1") is None
        assert await other.resume("s1") is None  # running there already
        assert await other.send("s1", "echo two") is None
        later: list[SessionEvent] = []
        continued = other.events("s1", after_seq=seen[-1].seq)
        end = await until_turn_end(continued, later)
        await continued.aclose()
        assert end.reason.type == "completed"
        assert later[0].seq == seen[-1].seq + 1 + len(rest)
    finally:
        await other.close()


async def test_abort_ends_the_running_turn(host: SessionHost) -> None:
    await host.send("s1", "please hold the door")
    seen: list[SessionEvent] = []
    stream = host.events("s1")
    async for item in stream:
        assert isinstance(item, SessionEvent)
        if isinstance(item.data, ToolCallEvent):
            break
    assert await host.abort("s1", "enough") is None
    end = await until_turn_end(stream, seen)
    await stream.aclose()
    assert end.reason.type == "aborted"
    assert await host.abort("nobody") is None


async def test_a_parked_call_is_listed_and_decided_on_the_host_that_holds_it(
    mock_server: MockServer, tmp_path: Path
) -> None:
    spec = host_spec(mock_server, tmp_path / "s.db", permissions={"approval": "defer"})
    host, other = SessionHost("host-a", spec), SessionHost("host-b", spec)
    try:
        await host.send("s1", "stamp this")
        stream = host.events("s1")
        async for item in stream:
            assert isinstance(item, SessionEvent)
            if isinstance(item.data, ApprovalRequested):
                break
        pending = await host.pending_approvals("s1")
        assert isinstance(pending, list)
        [parked] = pending
        assert (parked.session_id, parked.name) == ("s1", "stamp")
        assert isinstance(await other.pending_approvals("s1"), Elsewhere)
        assert isinstance(await other.decide("s1", parked.call_id, True), Elsewhere)
        assert await host.decide("s1", parked.call_id, True) is None
        end = await until_turn_end(stream, [])
        await stream.aclose()
        assert end.reason.type == "completed"
        with pytest.raises(AlreadyDecided):
            await host.decide("s1", parked.call_id, False)
        assert await host.pending_approvals("s1") == []
    finally:
        await host.close()
        await other.close()


async def test_a_parked_session_is_decided_on_the_next_host_after_its_own_closed(
    mock_server: MockServer, tmp_path: Path
) -> None:
    spec = host_spec(mock_server, tmp_path / "s.db", permissions={"approval": "defer"})
    host = SessionHost("host-a", spec)
    try:
        await host.send("s1", "stamp this")
        stream = host.events("s1")
        async for item in stream:
            assert isinstance(item, SessionEvent)
            if isinstance(item.data, ApprovalRequested):
                break
        await stream.aclose()
    finally:
        await host.close()  # the turn stays parked in the store
    other = SessionHost("host-b", spec)
    try:
        pending = await other.pending_approvals("s1")
        assert isinstance(pending, list)
        [parked] = pending
        assert await other.decide("s1", parked.call_id, False, "not now") is None
        seen: list[SessionEvent] = []
        stream = other.events("s1")
        end = await until_turn_end(stream, seen)
        await stream.aclose()
        assert end.reason.type == "completed"
        [denied] = [
            e.data
            for e in seen
            if isinstance(e.data, ToolResultEvent) and e.data.call_id == parked.call_id
        ]
        assert denied.code == "DENIED"
    finally:
        await other.close()


async def test_resume_of_an_unknown_session_says_so(host: SessionHost) -> None:
    with pytest.raises(DshError, match="no stored session 'ghost'"):
        await host.resume("ghost")


async def test_abort_before_the_host_started_says_so(host: SessionHost) -> None:
    with pytest.raises(DshError, match="has not started"):
        await host.abort("s1")


async def test_a_message_not_recorded_in_time_is_an_error(
    mock_server: MockServer, tmp_path: Path
) -> None:
    host = SessionHost("host-a", host_spec(mock_server, tmp_path / "s.db"), record_timeout_s=0)
    try:
        with pytest.raises(DshError, match="was not recorded within 0 s"):
            await host.send("s1", "echo hello")
    finally:
        await host.close()


@pytest.mark.parametrize(
    ("config", "found"),
    [
        (
            {"persistence_sqlite": {"enabled": False}, "persistence_jsonl": {"enabled": False}},
            "none is enabled",
        ),
        ({"persistence_jsonl": {"enabled": True}}, "persistence_jsonl, persistence_sqlite"),
    ],
)
async def test_a_host_needs_exactly_one_store(
    mock_server: MockServer, tmp_path: Path, config: dict[str, Any], found: str
) -> None:
    config.setdefault("persistence_jsonl", {}).setdefault("dir", str(tmp_path / "jsonl"))
    host = SessionHost("host-a", host_spec(mock_server, tmp_path / "s.db", **config))
    with pytest.raises(DshError, match=found):
        await host.harness()
    await host.close()


async def test_the_owner_label_of_a_store_is_the_host_name(
    mock_server: MockServer, tmp_path: Path
) -> None:
    spec = host_spec(mock_server, tmp_path / "s.db", persistence_postgres={"dsn": "x"})
    host = SessionHost("host-7", spec)
    assert host._config()["persistence_postgres"] == {"dsn": "x", "owner": "host-7"}


def test_host_plugins_are_named_by_module_and_attribute() -> None:
    assert isinstance(load_plugin(TOOLS), HostTools)
    assert load_plugin("asyncio:sleep") is asyncio.sleep
    with pytest.raises(DshError, match="name it as 'module:attribute'"):
        load_plugin("tests.plugins.cluster.tools")
    with pytest.raises(DshError, match="cannot be loaded"):
        load_plugin("tests.plugins.cluster.tools:Missing")
    with pytest.raises(DshError, match="cannot be loaded"):
        load_plugin("no_such_module_here:Thing")


def test_a_spec_keeps_plain_values() -> None:
    spec = HostSpec(config={"a": {"b": 1}}, plugins=[TOOLS])
    assert spec.config == {"a": {"b": 1}}
    assert spec.plugins == (TOOLS,)


async def test_two_calls_for_a_new_session_open_it_once(host: SessionHost) -> None:
    await asyncio.gather(host.send("s1", "echo one"), host.send("s1", "echo two"))
    assert host.info().sessions == ("s1",)


async def test_a_new_session_another_host_claimed_is_answered_elsewhere(
    mock_server: MockServer, tmp_path: Path, host: SessionHost
) -> None:
    watching = host.events("s2")  # opens the session there, with nothing stored yet
    first = asyncio.ensure_future(anext(watching))
    async with asyncio.timeout(10):  # bounds a hang only
        while host.info().sessions != ("s2",):  # noqa: ASYNC110 - no event says it is claimed
            await asyncio.sleep(0.01)
    other = SessionHost("host-b", host_spec(mock_server, tmp_path / "sessions.db"))
    try:
        answer = await other.send("s2", "echo two")
        assert isinstance(answer, Elsewhere)
        assert other.info().sessions == ()
        await host.send("s2", "echo one")
        assert isinstance(await first, SessionEvent)
    finally:
        await watching.aclose()
        await other.close()


async def test_a_quiet_stream_beats(host: SessionHost, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(host_module, "BEAT_S", 0.05)
    await host.send("s1", "echo hello")
    stream = host.events("s1")
    seen: list[SessionEvent] = []
    await until_turn_end(stream, seen)
    assert isinstance(await anext(stream), Beat)  # nothing more to send: the host lives
    assert isinstance(await anext(stream), Beat)
    await stream.aclose()
