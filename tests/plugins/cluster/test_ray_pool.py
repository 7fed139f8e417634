"""The pool on a real local Ray cluster (a head and three one-CPU worker nodes, dashboard off,
on this machine) with the sessions in a real PostgreSQL and the mock DeepSeek server as the
model: routing, two replicas writing one session, a node killed mid-turn, and a load of 500
agents with a node killed halfway.

Every node, the GCS and the driver are on 127.0.0.1 (conftest.py sets the variable that makes
Ray take the loopback address; the fixture checks it), as are PostgreSQL and the mock server.
"""

from __future__ import annotations

import asyncio
import contextlib
import os
import secrets
from collections import Counter
from collections.abc import AsyncIterator, Iterator
from pathlib import Path
from typing import Any

import pytest

from dsh.app._harness import Harness
from dsh.cluster import HostLost, connect
from dsh.session._session import open_turn
from dsh.session._verify import verify
from dsh.testing.mock import deepseek_config
from dsh.testing.mockserver import MockServer
from dsh.values._agent import AgentOptions
from dsh.values._approval import AlreadyDecided
from dsh.values._content import text_of
from dsh.values._errors import DshError
from dsh.values._events import SessionEvent, ToolCallEvent, ToolResultEvent, TurnEnd, UserMessage
from dsh.values._rare_events import ApprovalRequested

ray = pytest.importorskip(
    "ray", reason="the cluster tests need Ray: pip install 'dsh-harness[ray]'"
)
asyncpg = pytest.importorskip("asyncpg", reason="the cluster tests need asyncpg (extra postgres)")
DSN = os.environ.get("DSH_TEST_POSTGRES_DSN")
pytestmark = [
    pytest.mark.skipif(
        not DSN, reason="DSH_TEST_POSTGRES_DSN is unset: the cluster tests need PostgreSQL"
    ),
    pytest.mark.timeout(300),
]

from ray.cluster_utils import Cluster  # noqa: E402 (after the skip: Ray may be missing)

from dsh_plugins.cluster import cli  # noqa: E402
from dsh_plugins.cluster.host import HostInfo  # noqa: E402
from dsh_plugins.cluster.pool import RayHost, RayPool, ensure_connected, host_names  # noqa: E402
from dsh_plugins.cluster.spec import HostSpec  # noqa: E402
from tests.plugins.cluster.tools import CRASH_CUE  # noqa: E402

ROOT = str(Path(__file__).resolve().parents[3])
TOOLS = "tests.plugins.cluster.tools:HostTools"
CRASH = "tests.plugins.cluster.tools:CrashOnCue"
#: Hosts run only on the worker nodes, which offer this resource: the head is never killed.
HOST_RESOURCES = {"dsh_host": 0.001}
FAST_FAILURE_DETECTION = {
    "health_check_initial_delay_ms": 0,
    "health_check_period_ms": 500,
    "health_check_failure_threshold": 4,
}


@pytest.fixture(scope="module")
def cluster() -> Iterator[Cluster]:
    cluster = Cluster(
        initialize_head=True,
        head_node_args={
            "num_cpus": 1,
            "include_dashboard": False,
            "_system_config": FAST_FAILURE_DETECTION,
        },
    )
    for _ in range(3):
        cluster.add_node(num_cpus=1, resources={"dsh_host": 1})
    # The tests' plugins are found on every node through the runtime environment.
    ensure_connected(cluster.address, "dsh-tests", {"env_vars": {"PYTHONPATH": ROOT}})
    # No network but loopback: every node of the cluster, its GCS included, is on 127.0.0.1.
    assert cluster.address.startswith("127.0.0.1:")
    assert {node["NodeManagerAddress"] for node in ray.nodes()} == {"127.0.0.1"}
    try:
        yield cluster
    finally:
        ray.shutdown()
        cluster.shutdown()


@pytest.fixture
async def schema() -> AsyncIterator[str]:
    name = f"cluster_{secrets.token_hex(4)}"
    yield name
    connection = await asyncpg.connect(DSN)
    try:
        await connection.execute(f"DROP SCHEMA IF EXISTS {name} CASCADE")
    finally:
        await connection.close()


def store_config(schema: str) -> dict[str, Any]:
    return {
        "persistence_jsonl": {"enabled": False},
        "persistence_postgres": {
            "enabled": True,
            "dsn": DSN,
            "schema": schema,
            "pool_size": 8,
        },
    }


def spec_for(server: MockServer, schema: str) -> HostSpec:
    return HostSpec(
        config={**deepseek_config(server), **store_config(schema)},
        plugins=(TOOLS, CRASH),
        options=AgentOptions(model="deepseek-flash"),
    )


@pytest.fixture
async def pool(cluster: Cluster, mock_server: MockServer, schema: str) -> AsyncIterator[RayPool]:
    prefix = f"host-{secrets.token_hex(3)}"
    pool = await connect(
        spec=spec_for(mock_server, schema),
        prefix=prefix,
        namespace="dsh-tests",
        resources=HOST_RESOURCES,
    )
    assert isinstance(pool, RayPool)
    try:
        yield pool
    finally:
        await stop_hosts(pool)


async def stop_hosts(pool: RayPool) -> None:
    for name in pool.names:
        try:
            handle = ray.get_actor(name, namespace=pool.namespace)
        except ValueError:  # killed for good by the test
            continue
        with contextlib.suppress(Exception):  # one that cannot stop cleanly is killed anyway
            await asyncio.wait_for(handle.stop.remote(), 20)
        ray.kill(handle, no_restart=True)
    await pool.close()


async def stored(schema: str, session_id: str) -> list[SessionEvent]:
    async with Harness(config=store_config(schema)) as harness:
        events = await harness.sessions.load(session_id)
    assert events is not None
    return events


def node_of(cluster: Cluster, node_id: str) -> Any:
    return next(n for n in cluster.worker_nodes if n.node_id == node_id)


async def kill_node_of(cluster: Cluster, pool: RayPool, session_id: str) -> None:
    """Kill (not stop) the node that runs the session's host, and add a fresh one."""
    info = await ray.get_actor(pool.route(session_id), namespace=pool.namespace).info.remote()
    cluster.remove_node(node_of(cluster, info.node), allow_graceful=False)
    cluster.add_node(num_cpus=1, resources={"dsh_host": 1})


async def until(stream: AsyncIterator[SessionEvent], seen: list[SessionEvent], test: Any) -> Any:
    async for event in stream:
        seen.append(event)
        if test(event):
            return event.data
    raise AssertionError("the stream ended")


def ends_turn(event: SessionEvent) -> bool:
    return isinstance(event.data, TurnEnd)


# -- routing and the hosts ---------------------------------------------------------------------
async def test_a_session_is_answered_and_replayed(pool: RayPool, schema: str) -> None:
    await pool.send("chat-1", "echo hello")
    seen: list[SessionEvent] = []
    stream = pool.events("chat-1")
    end = await until(stream, seen, ends_turn)
    await stream.aclose()
    assert end.reason.type == "completed"
    assert [e.seq for e in seen] == list(range(len(seen)))
    assert [e.seq for e in await stored(schema, "chat-1")] == [e.seq for e in seen]
    assert verify(seen).ok
    infos = await pool.info()
    assert all(isinstance(i, HostInfo) for i in infos)
    assert {i.name for i in infos if isinstance(i, HostInfo)} == set(pool.names)
    assert any("chat-1" in i.sessions for i in infos if isinstance(i, HostInfo))
    alive = {n["NodeID"] for n in ray.nodes() if n["Alive"]}
    assert {i.node for i in infos if isinstance(i, HostInfo)} <= alive


async def test_abort_and_resume_reach_the_host(pool: RayPool) -> None:
    await pool.send("chat-2", "please hold the door")
    seen: list[SessionEvent] = []
    stream = pool.events("chat-2")
    await until(stream, seen, lambda e: isinstance(e.data, ToolCallEvent))
    await pool.steer("chat-2", "echo meanwhile")  # recorded now, delivered after the tool
    await until(stream, seen, lambda e: e.type == "inbox/queued")
    waiting = asyncio.ensure_future(anext(stream))
    await asyncio.sleep(2.5)  # the stream only beats while the tool holds (unseen: no event)
    assert not waiting.done()
    await pool.abort("chat-2", "enough")
    seen.append(await waiting)
    end = await until(stream, seen, ends_turn)
    await stream.aclose()
    assert end.reason.type == "aborted"
    await pool.resume("chat-2")
    with pytest.raises(DshError, match="no stored session"):
        await pool.resume("never-used")


async def test_a_parked_call_is_decided_through_the_pool(
    cluster: Cluster, mock_server: MockServer, schema: str
) -> None:
    spec = spec_for(mock_server, schema)
    deferring = HostSpec(
        config={**spec.config, "permissions": {"approval": "defer"}},
        plugins=spec.plugins,
        options=spec.options,
    )
    pool = await connect(
        spec=deferring,
        prefix=f"host-{secrets.token_hex(3)}",
        namespace="dsh-tests",
        resources=HOST_RESOURCES,
    )
    assert isinstance(pool, RayPool)
    try:
        await pool.send("parked-1", "stamp this")
        seen: list[SessionEvent] = []
        stream = pool.events("parked-1")
        await until(stream, seen, lambda e: isinstance(e.data, ApprovalRequested))
        [parked] = await pool.pending_approvals("parked-1")
        assert parked.name == "stamp"
        await pool.decide("parked-1", parked.call_id, True)
        end = await until(stream, seen, ends_turn)
        await stream.aclose()
        assert end.reason.type == "completed"
        with pytest.raises(AlreadyDecided):
            await pool.decide("parked-1", parked.call_id, False)
        assert await pool.pending_approvals("parked-1") == []
    finally:
        await stop_hosts(pool)


async def test_two_replicas_write_one_session_one_writer_at_a_time(
    cluster: Cluster, pool: RayPool, schema: str
) -> None:
    other = await connect(prefix=pool.names[0].rsplit("-", 1)[0], namespace=pool.namespace)
    assert isinstance(other, RayPool)
    assert other.names == pool.names
    session = "shared-1"
    await pool.send(session, "echo first")
    # The second replica has a stale idea of where the session runs: the host it asks first
    # answers that another host holds the lease, and it goes there.
    wrong = next(name for name in pool.names if name != pool.route(session))
    other._routes[session] = wrong
    texts = {
        replica: [f"echo from {name} {i}" for i in range(3)]
        for replica, name in ((pool, "a"), (other, "b"))
    }

    async def write(replica: RayPool) -> None:
        for text in texts[replica]:
            await replica.send(session, text)

    await asyncio.gather(write(pool), write(other))
    assert other.route(session) == pool.route(session)
    other._routes[session] = wrong  # its stream, too, is told where the session runs
    seen: list[SessionEvent] = []
    stream = other.events(session)
    while sum(isinstance(e.data, UserMessage) for e in seen) < 7:
        await until(stream, seen, ends_turn)
    await stream.aclose()
    events = await stored(schema, session)
    said = [text_of(e.data.content) for e in events if isinstance(e.data, UserMessage)]
    assert said[0] == "echo first"
    assert sorted(said[1:]) == sorted(texts[pool] + texts[other])
    for replica in (pool, other):  # each replica's messages in the order it sent them
        assert [t for t in said if t in texts[replica]] == texts[replica]
    assert all(e.data.reason.type == "completed" for e in events if isinstance(e.data, TurnEnd))
    assert [e.seq for e in events] == list(range(len(events)))
    assert verify(events).ok
    await other.close()


# -- failure -----------------------------------------------------------------------------------
async def test_a_node_killed_mid_turn_moves_the_session_without_losing_events(
    cluster: Cluster, pool: RayPool, schema: str
) -> None:
    session = "failover-1"
    await pool.send(session, "please hold the line")
    seen: list[SessionEvent] = []
    stream = pool.events(session)
    await until(stream, seen, lambda e: isinstance(e.data, ToolCallEvent))
    before = pool.route(session)
    await kill_node_of(cluster, pool, session)
    await pool.resume(session)  # repeated until the restarted host takes it
    end = await until(stream, seen, ends_turn)
    assert end.reason.type == "interrupted"
    results = [e.data for e in seen if isinstance(e.data, ToolResultEvent)]
    assert results[-1].code == "TOOL_OUTCOME_UNKNOWN"
    # The next message is answered, on the host that took the session over.
    await pool.send(session, "echo again")
    end = await until(stream, seen, ends_turn)
    await stream.aclose()
    assert end.reason.type == "completed"
    assert pool.route(session) == before  # the same name: Ray restarted it elsewhere
    # The caller saw every event once, in order, and exactly what the store holds.
    assert [e.seq for e in seen] == list(range(len(seen)))
    events = await stored(schema, session)
    assert [(e.seq, e.type) for e in events] == [(e.seq, e.type) for e in seen]
    assert verify(events).ok


async def test_a_message_to_a_host_that_dies_taking_it_is_not_repeated(
    pool: RayPool, schema: str
) -> None:
    await pool.send("lost-1", "echo hello")
    with pytest.raises(HostLost, match="read the session's events"):
        await pool.send("lost-1", CRASH_CUE)
    # The session goes on, on the restarted host: the caller decides about the message.
    await pool.resume("lost-1")
    await pool.send("lost-1", "echo again")
    seen: list[SessionEvent] = []
    stream = pool.events("lost-1")
    while sum(isinstance(e.data, UserMessage) for e in seen) < 2:
        await until(stream, seen, ends_turn)
    await stream.aclose()
    assert verify(await stored(schema, "lost-1")).ok


async def test_load_500_agents_with_a_node_killed_halfway(
    cluster: Cluster, mock_server: MockServer, pool: RayPool, schema: str
) -> None:
    sessions = [f"load-{i}" for i in range(500)]
    step = {"name": "tool-loop", "steps": 5, "tool": "pause"}  # each step's tool takes 2 s
    mock_server.queue(*([step] * (len(sessions) * 6 + 200)))
    limit = asyncio.Semaphore(50)

    async def send(session: str) -> None:
        async with limit:
            await pool.send(session, "go")

    await asyncio.gather(*(send(s) for s in sessions))
    await halfway(mock_server, len(sessions) * 3)
    await kill_node_of(cluster, pool, sessions[0])
    # Every session runs again (those of the dead host are resumed where they are routed now).
    await asyncio.gather(*(pool.resume(s) for s in sessions))
    reasons = await turn_ends(schema, sessions)
    assert set(reasons) == set(sessions)
    kinds = {r for rs in reasons.values() for r in rs}
    assert kinds <= {"completed", "interrupted"}
    assert "interrupted" in kinds


async def halfway(server: MockServer, requests: int) -> None:
    """Return once the server has answered ``requests`` requests (it has no event for it)."""
    for _ in range(3000):
        if len(server.requests) >= requests:
            return
        await asyncio.sleep(0.1)
    raise AssertionError(f"the hosts sent only {len(server.requests)} requests")


async def turn_ends(schema: str, sessions: list[str]) -> dict[str, list[str]]:
    """Each session's turn end reasons, once every stored session's last turn ended; every
    stored session replays."""
    async with Harness(config=store_config(schema)) as harness:
        loop = asyncio.get_running_loop()
        deadline = loop.time() + 200
        while True:
            logs = {s: await harness.sessions.load(s) for s in sessions}
            if all(log and open_turn(log) is None for log in logs.values()):
                break
            if loop.time() > deadline:
                last = Counter(log[-1].type if log else "nothing" for log in logs.values())
                raise AssertionError(f"some turns never ended: last events {last}")
            await asyncio.sleep(1)
    for log in logs.values():
        assert log is not None
        assert verify(log).ok
    return {
        s: [e.data.reason.type for e in log if isinstance(e.data, TurnEnd)]
        for s, log in logs.items()
        if log is not None
    }


# -- the actor class in this process ---------------------------------------------------------
async def test_a_ray_host_reports_its_node(
    cluster: Cluster, mock_server: MockServer, schema: str
) -> None:
    host = RayHost("host-x", spec_for(mock_server, schema))
    await host.harness()
    assert host.info().node == ray.get_runtime_context().get_node_id()
    assert host.info("given").node == "given"
    await host.stop()


async def test_a_pool_needs_a_host(cluster: Cluster) -> None:
    with pytest.raises(DshError, match="at least one host"):
        await connect(hosts=0)
    assert host_names(2, "p") == ["p-0", "p-1"]


async def test_a_host_gone_for_good_leaves_the_ring(cluster: Cluster, pool: RayPool) -> None:
    gone = pool.route("ring-1")
    ray.kill(ray.get_actor(gone, namespace=pool.namespace), no_restart=True)
    pool._handles.clear()
    await pool.send("ring-1", "echo hello")
    assert pool.route("ring-1") != gone
    infos = await pool.info()
    assert f"{gone}: gone from the pool" in infos
    fresh = RayPool(list(pool.names), pool.namespace)  # a replica that has not heard yet
    stream = fresh.events("ring-1")
    assert isinstance(await anext(stream), SessionEvent)
    await stream.aclose()


# -- dsh cluster -------------------------------------------------------------------------------
def cluster_args(*argv: str) -> Any:
    import argparse

    parser = argparse.ArgumentParser()
    cli.configure(parser)
    return parser.parse_args(list(argv))


async def test_dsh_cluster_up_status_down(
    cluster: Cluster, mock_server: MockServer, schema: str, tmp_path: Path
) -> None:
    import io
    import json

    config = tmp_path / "dsh.toml"
    lines = []
    for section, values in {**deepseek_config(mock_server), **store_config(schema)}.items():
        lines.append(f"[{section}]")
        lines += [f"{key} = {json.dumps(value)}" for key, value in values.items()]
    config.write_text("\n".join(lines) + "\n")
    prefix = f"cli-{secrets.token_hex(3)}"
    common = ("--hosts", "2", "--prefix", prefix, "--namespace", "dsh-tests")
    out, err = io.StringIO(), io.StringIO()
    up = cluster_args("up", *common, "--config", str(config), "--plugin", TOOLS)
    assert await cli.run(up, out, err) == 0, err.getvalue()
    assert f"{prefix}-0: node" in out.getvalue()
    assert f"{prefix}-1: node" in out.getvalue()
    pool = RayPool(host_names(2, prefix), "dsh-tests")
    await pool.send("cli-1", "echo hello")
    out = io.StringIO()
    assert await cli.run(cluster_args("status", *common), out, err) == 0
    assert "cli-1" in out.getvalue()
    out = io.StringIO()
    assert await cli.run(cluster_args("down", *common), out, err) == 0
    assert out.getvalue().count(": stopped") == 2
    out = io.StringIO()
    assert await cli.run(cluster_args("down", *common), out, err) == 0
    assert out.getvalue().count(": not running") == 2
    out = io.StringIO()
    assert await cli.run(cluster_args("status", *common), out, err) == 1
    assert "gone from the pool" in out.getvalue()


async def test_dsh_cluster_says_what_is_wrong(
    cluster: Cluster, monkeypatch: pytest.MonkeyPatch
) -> None:
    import io

    err = io.StringIO()
    assert await cli.run(cluster_args("up", "--hosts", "0"), io.StringIO(), err) == 1
    assert "at least one host" in err.getvalue()
    monkeypatch.setitem(__import__("sys").modules, "ray", None)  # as if Ray were not installed
    err = io.StringIO()
    assert await cli.run(cluster_args("status"), io.StringIO(), err) == 1
    assert "MISSING_DEPENDENCY: pip install 'dsh-harness[ray]'" in err.getvalue()


async def test_a_stream_continues_when_its_host_stops(pool: RayPool) -> None:
    await pool.send("stop-1", "echo hello")
    seen: list[SessionEvent] = []
    stream = pool.events("stop-1")
    await until(stream, seen, ends_turn)
    await ray.get_actor(pool.route("stop-1"), namespace=pool.namespace).stop.remote()
    # The host closed the session (the stream ended there); the next call opens it again.
    await pool.send("stop-1", "echo again")
    await until(stream, seen, ends_turn)
    await stream.aclose()
    assert [e.seq for e in seen] == list(range(len(seen)))


async def test_a_session_held_outside_the_pool_is_waited_for_then_refused(
    pool: RayPool, schema: str
) -> None:
    config = store_config(schema)
    config["persistence_postgres"] = {**config["persistence_postgres"], "owner": "outsider"}
    async with Harness(config=config) as outsider:
        session = outsider.sessions.create("held-1")
        await outsider.sessions.claim(session)
        pool.route_timeout_s = 1.0
        with pytest.raises(DshError, match="no host took it within 1 s"):
            await pool.send("held-1", "echo hello")


async def test_the_plugin_contributes_the_command(cluster: Cluster) -> None:
    import argparse
    import io
    from contextlib import redirect_stderr

    from dsh_plugins.cluster import ClusterPlugin

    commands: list[Any] = []
    ClusterPlugin().dsh_register_commands(commands.append)
    [command] = commands
    parser = argparse.ArgumentParser()
    command.configure(parser)
    err = io.StringIO()
    with redirect_stderr(err):
        assert await command.run(parser.parse_args(["up", "--hosts", "0"])) == 1
    assert "at least one host" in err.getvalue()


# -- examples/cluster -----------------------------------------------------------------------
async def test_the_example_web_front_streams_a_session(pool: RayPool, aiohttp_client: Any) -> None:
    import importlib.util

    path = Path(ROOT) / "examples" / "cluster" / "web.py"
    module_spec = importlib.util.spec_from_file_location("cluster_web_example", path)
    assert module_spec is not None and module_spec.loader is not None
    web = importlib.util.module_from_spec(module_spec)
    module_spec.loader.exec_module(web)
    client = await aiohttp_client(web.make_app(pool))
    answer = await client.post("/sessions/web-1/messages", json={"text": "echo hello"})
    assert answer.status == 202
    assert (await client.post("/sessions/web-1/messages", json={"text": 3})).status == 400
    assert (await client.get("/sessions/web-1/events?after=x")).status == 400
    frames: list[dict[str, str]] = []
    async with client.get("/sessions/web-1/events") as response:
        frame: dict[str, str] = {}
        async for raw in response.content:
            line = raw.decode().rstrip("\n")
            if line:
                key, _, value = line.partition(": ")
                frame[key] = value
                continue
            frames.append(frame)
            frame = {}
            if frames[-1]["event"] == "turn/end":
                break
    assert [int(f["id"]) for f in frames] == list(range(len(frames)))
    assert '"completed"' in frames[-1]["data"]
    # A reconnecting browser continues after the last id it saw.
    headers = {"Last-Event-ID": frames[-2]["id"]}
    async with client.get("/sessions/web-1/events", headers=headers) as response:
        async for raw in response.content:
            assert raw.decode() == f"id: {frames[-1]['id']}\n"
            break
    assert (await client.post("/sessions/web-1/abort")).status == 202
