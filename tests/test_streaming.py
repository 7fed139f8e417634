"""dsh.llm._http against a real loopback aiohttp server that plays a script of writes and
pauses: the deadlines, the size cap, the broken and the unfinished stream, the pooled client.

The loopback server runs in the test's own event loop, so a loaded machine delays its writes as
much as the reader's deadlines: where writes must keep a stream alive, they come every 50 ms
against an idle timeout of a whole second (:data:`STEADY_S`), and a stall the deadline must end
never ends by itself. Durations are measured from before the request (:func:`open_reader`), so
a lower bound the server's pauses or the reader's deadline impose holds however late the test
runs; upper bounds only say "well short of forever" (:data:`FOREVER_S`)."""

from __future__ import annotations

import asyncio
import time
from collections.abc import AsyncIterator
from typing import Any

import aiohttp
import pytest
from aiohttp import web
from attrs import frozen

from dsh.llm._http import EventReader, HttpClient
from dsh.llm._sse import SseEvent
from dsh.values._errors import LlmError

EVENT = b'data: {"n": 1}\n\n'
DONE = b"data: [DONE]\n\n"
COMMENT = b": keep-alive\n\n"
PING = b"event: ping\ndata: {}\n\n"
FOREVER = 10_000
#: An idle timeout that writes 50 ms apart never reach, however loaded the machine.
STEADY_S = 1.0
#: Longer than any deadline here takes to fire, even on a loaded machine: a stream that ran this
#: long would never have ended.
FOREVER_S = 10.0


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
        #: ``time.monotonic()`` before the last :func:`open_reader` sent its request.
        self.opened_at = 0.0

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
    server.opened_at = time.monotonic()
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


def since_opened(server: Loopback) -> float:
    """Seconds since the last :func:`open_reader` sent its request: at least every pause the
    server made and every deadline the reader waited out."""
    return time.monotonic() - server.opened_at


async def failure_of(
    server: Loopback, reader: EventReader, received: list[SseEvent]
) -> tuple[LlmError, float]:
    """The error reading ended with, and :func:`since_opened` when it did."""
    with pytest.raises(LlmError) as raised:
        await read_into(received, reader)
    return raised.value, since_opened(server)


async def test_events_move_the_deadline(server: Loopback, http: HttpClient) -> None:
    steps: list[Step] = [Every(0.05, EVENT, times=25), DONE]
    reader = await open_reader(server, http, steps, idle_timeout_s=STEADY_S)
    received: list[SseEvent] = []
    await read_into(received, reader)
    assert since_opened(server) > STEADY_S  # longer than one idle period, never idle for one
    assert received == [SseEvent('{"n": 1}')] * 25


async def test_comments_do_not_move_the_deadline_once_data_started(
    server: Loopback, http: HttpClient
) -> None:
    # The comments never stop: only the idle deadline can end the stream.
    steps: list[Step] = [EVENT, Every(0.05, COMMENT)]
    reader = await open_reader(server, http, steps, idle_timeout_s=STEADY_S)
    received: list[SseEvent] = []
    error, elapsed = await failure_of(server, reader, received)
    assert error.failure.code == "TIMEOUT"
    assert error.failure.message == "the stream made no progress for 1.0 s"
    assert received == [SseEvent('{"n": 1}')]
    assert STEADY_S < elapsed < FOREVER_S
    assert reader.parser.comments > 0


async def test_queued_comments_extend_the_deadline_until_data_comes(
    server: Loopback, http: HttpClient
) -> None:
    steps: list[Step] = [Every(0.05, COMMENT, times=25), EVENT, DONE]
    reader = await open_reader(
        server, http, steps, idle_timeout_s=STEADY_S, first_data_timeout_s=FOREVER_S
    )
    received: list[SseEvent] = []
    await read_into(received, reader)
    assert since_opened(server) > STEADY_S  # more than an idle period of comments, then data
    assert received == [SseEvent('{"n": 1}')]


async def test_queued_comments_extend_it_only_up_to_first_data_timeout(
    server: Loopback, http: HttpClient
) -> None:
    # Comments forever: only the first-data deadline can end the stream, once a comment after
    # the first 0.2 s pinned the idle deadline to it.
    steps: list[Step] = [Every(0.05, COMMENT)]
    reader = await open_reader(
        server, http, steps, idle_timeout_s=STEADY_S, first_data_timeout_s=1.2
    )
    error, elapsed = await failure_of(server, reader, [])
    assert error.failure.code == "TIMEOUT"
    assert error.failure.message == (
        "no data within 1.2 s: the request stayed queued (only keep-alive comments); "
        "raise first_data_timeout_s to wait longer"
    )
    assert 1.2 < elapsed < FOREVER_S


async def test_first_data_timeout_is_never_shorter_than_the_idle_timeout(
    server: Loopback, http: HttpClient
) -> None:
    reader = await open_reader(server, http, [HOLD], idle_timeout_s=0.2, first_data_timeout_s=0.0)
    error, elapsed = await failure_of(server, reader, [])
    assert error.failure.message.startswith("no data within 0.2 s: the request stayed queued")
    assert 0.2 < elapsed < FOREVER_S


async def test_silence_is_a_stall_before_data(server: Loopback, http: HttpClient) -> None:
    reader = await open_reader(server, http, [HOLD], idle_timeout_s=0.2)
    error, elapsed = await failure_of(server, reader, [])
    assert error.failure.code == "TIMEOUT"
    assert error.failure.message == "the stream made no progress for 0.2 s"
    assert 0.2 < elapsed < FOREVER_S


async def test_silence_after_queued_comments_is_a_stall(server: Loopback, http: HttpClient) -> None:
    steps: list[Step] = [Every(0.05, COMMENT, times=4), HOLD]
    reader = await open_reader(server, http, steps, idle_timeout_s=0.2)
    error, _ = await failure_of(server, reader, [])
    assert error.failure.message == "the stream made no progress for 0.2 s"


async def test_bytes_that_complete_no_event_are_not_progress(
    server: Loopback, http: HttpClient
) -> None:
    steps: list[Step] = [b"data: ", Every(0.05, b"x")]
    reader = await open_reader(server, http, steps, idle_timeout_s=0.2)
    error, elapsed = await failure_of(server, reader, [])
    assert error.failure.message == "the stream made no progress for 0.2 s"
    assert 0.2 < elapsed < FOREVER_S


async def test_an_event_over_max_event_bytes_fails_the_stream(
    server: Loopback, http: HttpClient
) -> None:
    steps: list[Step] = [EVENT, 0.05, b"data: " + b"x" * 200 + b"\n\n", HOLD]
    reader = await open_reader(server, http, steps, idle_timeout_s=5.0, max_event_bytes=64)
    received: list[SseEvent] = []
    error, _ = await failure_of(server, reader, received)
    assert error.failure.code == "MALFORMED_RESPONSE"
    assert "over 64 bytes (max_event_bytes)" in error.failure.message
    assert received == [SseEvent('{"n": 1}')]


async def test_a_broken_connection_is_stream_closed(server: Loopback, http: HttpClient) -> None:
    steps: list[Step] = [EVENT, b'data: {"n"', 0.05, CLOSE]
    reader = await open_reader(server, http, steps, idle_timeout_s=5.0, end="message_stop")
    received: list[SseEvent] = []
    error, _ = await failure_of(server, reader, received)
    assert error.failure.code == "STREAM_CLOSED"
    assert error.failure.message.startswith("the connection broke before message_stop: ")
    assert received == [SseEvent('{"n": 1}')]


async def test_a_stream_that_ends_before_its_end_is_stream_closed(
    server: Loopback, http: HttpClient
) -> None:
    reader = await open_reader(server, http, [EVENT], idle_timeout_s=5.0)
    error, _ = await failure_of(server, reader, [])
    assert error.failure.code == "STREAM_CLOSED"
    assert error.failure.message == "the stream ended without [DONE]"


def is_ping(event: SseEvent) -> bool:
    return event.event == "ping"


async def test_keepalive_events_are_left_out_and_wait_like_comments(
    server: Loopback, http: HttpClient
) -> None:
    # 0.75 s, not STEADY_S: the test waits two idle periods, and 50 ms gaps stay far from it.
    steps: list[Step] = [Every(0.05, PING, times=16), EVENT, Every(0.05, PING)]
    reader = await open_reader(server, http, steps, idle_timeout_s=0.75, keepalive=is_ping)
    received: list[SseEvent] = []
    error, elapsed = await failure_of(server, reader, received)
    assert received == [SseEvent('{"n": 1}')]
    assert error.failure.message == "the stream made no progress for 0.75 s"
    # The queued pings waited past one idle period; the later ones, forever, did not.
    assert 2 * 0.75 < elapsed < FOREVER_S


async def test_a_stream_of_only_keepalive_events_stayed_queued(
    server: Loopback, http: HttpClient
) -> None:
    steps: list[Step] = [Every(0.05, PING)]
    reader = await open_reader(
        server, http, steps, idle_timeout_s=STEADY_S, first_data_timeout_s=1.2, keepalive=is_ping
    )
    error, _ = await failure_of(server, reader, [])
    assert error.failure.message == (
        "no data within 1.2 s: the request stayed queued (only keep-alives); "
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
