"""dsh.streaming against a real loopback aiohttp server that plays a script of writes and
pauses: the deadlines, the size cap, the broken and the unfinished stream, the pooled client."""

from __future__ import annotations

import asyncio
import time
from collections.abc import AsyncIterator
from typing import Any

import aiohttp
import pytest
from aiohttp import web
from attrs import frozen

from dsh.errors import LlmError
from dsh.sse import SseEvent
from dsh.streaming import EventReader, HttpClient

EVENT = b'data: {"n": 1}\n\n'
DONE = b"data: [DONE]\n\n"
COMMENT = b": keep-alive\n\n"
PING = b"event: ping\ndata: {}\n\n"
FOREVER = 10_000


@frozen
class Every:
    """Write ``data`` every ``interval_s``, ``times`` times (or until the test ends)."""

    interval_s: float
    data: bytes
    times: int = FOREVER


CLOSE = "close"  # drop the connection mid-stream
HOLD = "hold"  # send nothing more until the test ends
Step = bytes | float | Every | str


class Loopback:
    """Serves ``POST /<name>``: the script registered under that name, as an event stream."""

    def __init__(self) -> None:
        self.scripts: dict[str, list[Step]] = {}
        self.bodies: dict[str, bytes] = {}
        self.peers: list[Any] = []
        self.stop = asyncio.Event()
        self.url = ""

    async def handle(self, request: web.Request) -> web.StreamResponse:
        self.peers.append(request.transport.get_extra_info("peername") if request.transport else 0)
        name = request.match_info["name"]
        if name in self.bodies:
            return web.Response(body=self.bodies[name], content_type="text/event-stream")
        response = web.StreamResponse(headers={"Content-Type": "text/event-stream"})
        await response.prepare(request)
        try:
            for step in self.scripts[name]:
                await self._play(step, request, response)
        except ConnectionError:
            pass  # the client went away: what the test wanted
        return response

    async def _play(self, step: Step, request: web.Request, response: web.StreamResponse) -> None:
        if isinstance(step, bytes):
            await response.write(step)
        elif isinstance(step, float):
            await asyncio.sleep(step)
        elif isinstance(step, Every):
            for _ in range(step.times):
                if self.stop.is_set():
                    return
                await response.write(step.data)
                await asyncio.sleep(step.interval_s)
        elif step == CLOSE:
            assert request.transport is not None
            request.transport.close()
            await self.stop.wait()
        else:
            await self.stop.wait()


@pytest.fixture
async def server() -> AsyncIterator[Loopback]:
    loopback = Loopback()
    app = web.Application()
    app.router.add_post("/{name}", loopback.handle)
    runner = web.AppRunner(app)
    await runner.setup()
    await web.TCPSite(runner, "127.0.0.1", 0).start()
    loopback.url = f"http://127.0.0.1:{runner.addresses[0][1]}"
    yield loopback
    loopback.stop.set()
    await runner.cleanup()


@pytest.fixture
async def http() -> AsyncIterator[HttpClient]:
    client = HttpClient(connect_timeout_s=5.0)
    yield client
    await client.aclose()


async def open_reader(
    server: Loopback, http: HttpClient, steps: list[Step], **options: Any
) -> EventReader:
    name = f"s{len(server.scripts)}"
    server.scripts[name] = steps
    response = await http.session().post(f"{server.url}/{name}")
    options.setdefault("first_data_timeout_s", 5.0)
    return EventReader(response, **options)


async def read_into(received: list[SseEvent], reader: EventReader) -> None:
    """Read until the parser saw ``[DONE]`` (or the reader raised)."""
    try:
        while not reader.parser.done:
            received.extend(await reader.read())
    finally:
        reader.finish(complete=reader.parser.done)


async def failure_of(reader: EventReader, received: list[SseEvent]) -> tuple[LlmError, float]:
    """The error reading ended with, and how long reading took."""
    start = time.monotonic()
    with pytest.raises(LlmError) as raised:
        await read_into(received, reader)
    return raised.value, time.monotonic() - start


async def test_events_move_the_deadline(server: Loopback, http: HttpClient) -> None:
    steps: list[Step] = [EVENT, 0.1, EVENT, 0.1, EVENT, 0.1, EVENT, 0.1, EVENT, 0.1, EVENT, DONE]
    reader = await open_reader(server, http, steps, idle_timeout_s=0.3)
    received: list[SseEvent] = []
    start = time.monotonic()
    await read_into(received, reader)
    assert time.monotonic() - start > 0.3  # longer than one idle period, never idle for one
    assert received == [SseEvent('{"n": 1}')] * 6


async def test_comments_do_not_move_the_deadline_once_data_started(
    server: Loopback, http: HttpClient
) -> None:
    steps: list[Step] = [EVENT, Every(0.05, COMMENT)]
    reader = await open_reader(server, http, steps, idle_timeout_s=0.3)
    received: list[SseEvent] = []
    error, elapsed = await failure_of(reader, received)
    assert error.failure.code == "TIMEOUT"
    assert error.failure.message == "the stream made no progress for 0.3 s"
    assert received == [SseEvent('{"n": 1}')]
    assert 0.25 < elapsed < 2.0
    assert reader.parser.comments > 0


async def test_queued_comments_extend_the_deadline_until_data_comes(
    server: Loopback, http: HttpClient
) -> None:
    steps: list[Step] = [Every(0.05, COMMENT, times=12), EVENT, DONE]
    reader = await open_reader(server, http, steps, idle_timeout_s=0.2, first_data_timeout_s=3.0)
    received: list[SseEvent] = []
    start = time.monotonic()
    await read_into(received, reader)
    assert time.monotonic() - start > 0.4  # two idle periods of comments, then data
    assert received == [SseEvent('{"n": 1}')]


async def test_queued_comments_extend_it_only_up_to_first_data_timeout(
    server: Loopback, http: HttpClient
) -> None:
    steps: list[Step] = [Every(0.05, COMMENT)]
    reader = await open_reader(server, http, steps, idle_timeout_s=0.2, first_data_timeout_s=0.5)
    error, elapsed = await failure_of(reader, [])
    assert error.failure.code == "TIMEOUT"
    assert error.failure.message == (
        "no data within 0.5 s: the request stayed queued (only keep-alive comments); "
        "raise first_data_timeout_s to wait longer"
    )
    assert 0.45 < elapsed < 2.0


async def test_first_data_timeout_is_never_shorter_than_the_idle_timeout(
    server: Loopback, http: HttpClient
) -> None:
    reader = await open_reader(server, http, [HOLD], idle_timeout_s=0.2, first_data_timeout_s=0.0)
    error, elapsed = await failure_of(reader, [])
    assert error.failure.message.startswith("no data within 0.2 s: the request stayed queued")
    assert elapsed > 0.15


async def test_silence_is_a_stall_before_data(server: Loopback, http: HttpClient) -> None:
    reader = await open_reader(server, http, [HOLD], idle_timeout_s=0.2)
    error, elapsed = await failure_of(reader, [])
    assert error.failure.code == "TIMEOUT"
    assert error.failure.message == "the stream made no progress for 0.2 s"
    assert elapsed < 2.0


async def test_silence_after_queued_comments_is_a_stall(server: Loopback, http: HttpClient) -> None:
    steps: list[Step] = [Every(0.05, COMMENT, times=4), HOLD]
    reader = await open_reader(server, http, steps, idle_timeout_s=0.2)
    error, _ = await failure_of(reader, [])
    assert error.failure.message == "the stream made no progress for 0.2 s"


async def test_bytes_that_complete_no_event_are_not_progress(
    server: Loopback, http: HttpClient
) -> None:
    steps: list[Step] = [b"data: ", Every(0.05, b"x")]
    reader = await open_reader(server, http, steps, idle_timeout_s=0.2)
    error, elapsed = await failure_of(reader, [])
    assert error.failure.message == "the stream made no progress for 0.2 s"
    assert elapsed < 2.0


async def test_an_event_over_max_event_bytes_fails_the_stream(
    server: Loopback, http: HttpClient
) -> None:
    steps: list[Step] = [EVENT, 0.05, b"data: " + b"x" * 200 + b"\n\n", HOLD]
    reader = await open_reader(server, http, steps, idle_timeout_s=5.0, max_event_bytes=64)
    received: list[SseEvent] = []
    error, _ = await failure_of(reader, received)
    assert error.failure.code == "MALFORMED_RESPONSE"
    assert "over 64 bytes (max_event_bytes)" in error.failure.message
    assert received == [SseEvent('{"n": 1}')]


async def test_a_broken_connection_is_stream_closed(server: Loopback, http: HttpClient) -> None:
    steps: list[Step] = [EVENT, b'data: {"n"', 0.05, CLOSE]
    reader = await open_reader(server, http, steps, idle_timeout_s=5.0, end="message_stop")
    received: list[SseEvent] = []
    error, _ = await failure_of(reader, received)
    assert error.failure.code == "STREAM_CLOSED"
    assert error.failure.message.startswith("the connection broke before message_stop: ")
    assert received == [SseEvent('{"n": 1}')]


async def test_a_stream_that_ends_before_its_end_is_stream_closed(
    server: Loopback, http: HttpClient
) -> None:
    reader = await open_reader(server, http, [EVENT], idle_timeout_s=5.0)
    error, _ = await failure_of(reader, [])
    assert error.failure.code == "STREAM_CLOSED"
    assert error.failure.message == "the stream ended without [DONE]"


def is_ping(event: SseEvent) -> bool:
    return event.event == "ping"


async def test_keepalive_events_are_left_out_and_wait_like_comments(
    server: Loopback, http: HttpClient
) -> None:
    steps: list[Step] = [Every(0.05, PING, times=10), EVENT, Every(0.05, PING)]
    reader = await open_reader(server, http, steps, idle_timeout_s=0.2, keepalive=is_ping)
    received: list[SseEvent] = []
    error, elapsed = await failure_of(reader, received)
    assert received == [SseEvent('{"n": 1}')]
    assert error.failure.message == "the stream made no progress for 0.2 s"
    assert elapsed > 0.4  # the queued pings waited past one idle period; the later ones did not


async def test_a_stream_of_only_keepalive_events_stayed_queued(
    server: Loopback, http: HttpClient
) -> None:
    steps: list[Step] = [Every(0.05, PING)]
    reader = await open_reader(
        server, http, steps, idle_timeout_s=0.2, first_data_timeout_s=0.4, keepalive=is_ping
    )
    error, _ = await failure_of(reader, [])
    assert error.failure.message == (
        "no data within 0.4 s: the request stayed queued (only keep-alives); "
        "raise first_data_timeout_s to wait longer"
    )


async def test_finish_pools_a_complete_connection_and_drops_any_other(
    server: Loopback, http: HttpClient
) -> None:
    server.bodies["whole"] = EVENT + DONE
    server.scripts["held"] = [EVENT, HOLD]
    for name, complete in (("whole", True), ("whole", True), ("held", False), ("whole", True)):
        response = await http.session().post(f"{server.url}/{name}")
        reader = EventReader(response, idle_timeout_s=5.0, first_data_timeout_s=5.0)
        assert await reader.read() == [SseEvent('{"n": 1}')]
        reader.finish(complete=complete)
    first, second, third, fourth = server.peers
    assert first == second == third  # a complete stream's connection went back to the pool
    assert fourth != third  # the unfinished one was dropped, not reused


def test_the_client_times_out_connecting_only() -> None:
    async def session_of(client: HttpClient) -> aiohttp.ClientSession:
        session = client.session()
        assert client.session() is session  # one per client
        assert isinstance(session.connector, aiohttp.TCPConnector)
        assert session.connector.limit == 7
        await client.aclose()
        return session

    client = HttpClient(connect_timeout_s=3.0, max_connections=7)
    session = asyncio.run(session_of(client))
    assert session.closed
    assert session.timeout == aiohttp.ClientTimeout(total=None, connect=3.0, sock_read=None)
    assert HttpClient(connect_timeout_s=1.0).max_connections == 100


async def test_the_client_reopens_after_aclose_and_closes_once() -> None:
    client = HttpClient(connect_timeout_s=1.0)
    await client.aclose()  # nothing open: nothing to do
    first = client.session()
    await client.aclose()
    second = client.session()
    assert first.closed and not second.closed and second is not first
    await client.aclose()
    await client.aclose()
    assert second.closed
