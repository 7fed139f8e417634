"""The aiohttp side of a streaming adapter: an event reader with stall deadlines, and the client.

:mod:`dsh.llm._sse` frames bytes into events and knows nothing of the network; this module reads
those bytes off an ``aiohttp`` response and decides when a stream has stalled, so every adapter that
streams server-sent events (built in or third party) fails the same way::

    http = HttpClient(connect_timeout_s=10.0, max_connections=16)
    response = await http.session().post(url, json=body)
    reader = EventReader(response, idle_timeout_s=60.0, first_data_timeout_s=600.0)
    try:
        while not reader.parser.done:
            for event in await reader.read():
                handle(decode_json(event.data))
    finally:
        reader.finish(complete=reader.parser.done)

Deadlines: ``idle_timeout_s`` of silence fails the stream with ``TIMEOUT``. Once data has
started only real events move the deadline: keep-alive comments are traffic, not progress.
Before the first data event, keep-alives do extend it (each by ``idle_timeout_s``), up to
``first_data_timeout_s`` after the headers: a request waiting in a provider's queue is not a
stall. A connection that breaks or ends before the stream's end fails with ``STREAM_CLOSED``.
"""

from __future__ import annotations

import asyncio
from collections.abc import AsyncGenerator, Callable
from typing import Any, Protocol, Self

import aiohttp
import orjson

from dsh._json import decode_json
from dsh.llm._batches import ChunkBatch
from dsh.llm._framing import PayloadFraming, payload_text
from dsh.llm._sse import DONE, SseEvent, SseParser
from dsh.values._errors import LlmError

__all__ = [
    "EventReader",
    "HttpClient",
    "PayloadReader",
    "StreamLimits",
    "decode_payload",
]


class HttpClient:
    """One aiohttp session per adapter, opened on first use and closed by :meth:`aclose`.

    Only connecting has a timeout: a streamed answer may rightly last long, and its silences are
    :class:`EventReader`'s to judge, so neither a total nor a socket-read timeout applies."""

    def __init__(self, *, connect_timeout_s: float, max_connections: int = 100) -> None:
        self.connect_timeout_s = connect_timeout_s
        self.max_connections = max_connections
        self._session: aiohttp.ClientSession | None = None

    def session(self) -> aiohttp.ClientSession:
        """The open session (opened now if there is none, e.g. after :meth:`aclose`)."""
        if self._session is None:
            timeout = aiohttp.ClientTimeout(
                total=None, connect=self.connect_timeout_s, sock_read=None
            )
            connector = aiohttp.TCPConnector(limit=self.max_connections)
            self._session = aiohttp.ClientSession(timeout=timeout, connector=connector)
        return self._session

    async def aclose(self) -> None:
        """Close the session, if one is open (an adapter's ``aclose`` awaits this)."""
        if self._session is not None:
            await self._session.close()
            self._session = None


class StreamLimits(Protocol):
    """The stream settings every adapter's config carries (see :class:`EventReader`)."""

    @property
    def idle_timeout_s(self) -> float: ...
    @property
    def first_data_timeout_s(self) -> float: ...
    @property
    def max_event_bytes(self) -> int | None: ...


class _Reader:
    """The deadlines and the network reads of a streamed answer (see the module docstring); a
    subclass frames what is read."""

    def __init__(
        self,
        response: aiohttp.ClientResponse,
        *,
        idle_timeout_s: float,
        first_data_timeout_s: float,
        end: str,
        keepalives: str,
    ) -> None:
        self._response = response
        self._idle_timeout_s = idle_timeout_s
        self._first_data_timeout_s = max(first_data_timeout_s, idle_timeout_s)
        self._end = end
        self._keepalives = keepalives
        self._loop = asyncio.get_running_loop()
        now = self._loop.time()
        self._deadline = now + idle_timeout_s
        self._queue_deadline = now + self._first_data_timeout_s
        self._started = False

    @classmethod
    def limited(
        cls, response: aiohttp.ClientResponse, limits: StreamLimits, **options: Any
    ) -> Self:
        """A reader with an adapter config's deadlines and event size bound (``options``: the
        reader's other keyword arguments)."""
        settings: dict[str, Any] = {
            "idle_timeout_s": limits.idle_timeout_s,
            "first_data_timeout_s": limits.first_data_timeout_s,
            "max_event_bytes": limits.max_event_bytes,
        }
        return cls(response, **settings, **options)

    async def _read(self) -> bytes:
        """The next network read (never empty): what has arrived, or, if nothing has, what
        arrives before the deadline (a deadline is armed only for a read that waits)."""
        content = self._response.content
        try:
            data = content.read_nowait()
            if not data:
                async with asyncio.timeout_at(self._deadline):
                    data = await content.readany()
        except TimeoutError as exc:
            raise LlmError.of("TIMEOUT", self._timeout_message()) from exc
        except aiohttp.ClientError as exc:
            raise LlmError.of(
                "STREAM_CLOSED",
                f"the connection broke before {self._end}: {type(exc).__name__}: {exc}",
            ) from exc
        if not data:
            raise LlmError.of("STREAM_CLOSED", f"the stream ended without {self._end}")
        return data

    def _progress(self, data: bool, done: bool, traffic: bool) -> None:
        """Move the deadline after a read: ``data`` events or the end are progress; before
        any, other ``traffic`` (keep-alives, events without data) extends the wait up to the
        first-data deadline."""
        now = self._loop.time()
        if data or done:
            self._started = True
            self._deadline = now + self._idle_timeout_s
        elif not self._started and traffic:
            self._deadline = min(now + self._idle_timeout_s, self._queue_deadline)

    def finish(self, *, complete: bool) -> None:
        """Let the response go: after a complete stream its connection may return to the pool;
        after anything else (a failure, a cancelled consumer) it is dropped at once."""
        if complete:
            self._response.release()
        else:
            self._response.close()

    def _timeout_message(self) -> str:
        if self._started or self._deadline < self._queue_deadline:
            return f"the stream made no progress for {self._idle_timeout_s} s"
        return (
            f"no data within {self._first_data_timeout_s} s: the request stayed queued "
            f"(only {self._keepalives}); raise first_data_timeout_s to wait longer"
        )


class EventReader(_Reader):
    """Reads SSE events off a response with an idle deadline that only data events move once
    data has started (see the module docstring).

    ``end`` names what ends the stream in the failure messages (``[DONE]``, ``message_stop``).
    ``keepalive`` tells events that are keep-alives rather than data (e.g. the Messages API's
    ``ping``): they are treated like comments and not returned. An adapter that reads only the
    events' data uses :class:`PayloadReader`, which frames faster."""

    def __init__(
        self,
        response: aiohttp.ClientResponse,
        *,
        idle_timeout_s: float,
        first_data_timeout_s: float,
        max_event_bytes: int | None = None,
        end: str = DONE,
        keepalive: Callable[[SseEvent], bool] | None = None,
    ) -> None:
        super().__init__(
            response,
            idle_timeout_s=idle_timeout_s,
            first_data_timeout_s=first_data_timeout_s,
            end=end,
            keepalives="keep-alive comments" if keepalive is None else "keep-alives",
        )
        self.parser = SseParser(max_event_bytes=max_event_bytes)
        self._keepalive = keepalive

    async def read(self) -> list[SseEvent]:
        """The data events of the next network read (possibly none)."""
        data = await self._read()
        comments = self.parser.comments
        received = self.parser.feed(data)
        events = self._data_events(received)
        traffic = bool(received) or self.parser.comments > comments
        self._progress(bool(events), self.parser.done, traffic)
        return events

    def _data_events(self, received: list[SseEvent]) -> list[SseEvent]:
        if self._keepalive is None:
            return received
        keepalive = self._keepalive
        return [event for event in received if not keepalive(event)]


class PayloadReader(_Reader):
    """:class:`EventReader` for an adapter that reads only the events' data (every
    OpenAI-style stream ends at ``[DONE]``): :meth:`read` gives the data of each data event of
    a read as the bytes it was sent in, framed without building events
    (:class:`~dsh.llm._framing.PayloadFraming`; an event of an unusual shape comes as text),
    and :func:`decode_payload` decodes one as :func:`~dsh._json.decode_json` decodes the
    event's data."""

    def __init__(
        self,
        response: aiohttp.ClientResponse,
        *,
        idle_timeout_s: float,
        first_data_timeout_s: float,
        max_event_bytes: int | None = None,
    ) -> None:
        super().__init__(
            response,
            idle_timeout_s=idle_timeout_s,
            first_data_timeout_s=first_data_timeout_s,
            end=DONE,
            keepalives="keep-alive comments",
        )
        self.parser = PayloadFraming(max_event_bytes)

    async def read(self) -> list[bytes | str]:
        """The data of the data events of the next network read (possibly none)."""
        data = await self._read()
        comments = self.parser.comments
        payloads = self.parser.feed(data)
        self._progress(bool(payloads), self.parser.done, self.parser.comments > comments)
        return payloads

    async def batches(
        self,
        translate: Callable[[list[bytes | str], ChunkBatch], None],
        stop: Callable[[], bool] = lambda: False,
    ) -> AsyncGenerator[ChunkBatch, None]:
        """What ``translate(payloads, batch)`` appends to a new batch for each read's
        payloads, a read's together, until the stream's end (or ``stop()``): what an adapter
        returns as :class:`~dsh.llm._batches.ChunkBatches`. A read that fails part way gives
        what ``translate`` appended before the failure, then raises it."""
        while not self.parser.done and not stop():
            batch: ChunkBatch = []
            try:
                translate(await self.read(), batch)
            except Exception:
                if batch:
                    yield batch  # what streamed before the failure is kept
                raise
            yield batch


def decode_payload(payload: bytes | str, sender: str) -> Any:
    """:func:`~dsh._json.decode_json` of the text the payload's event carries (its bytes
    decoded as the SSE parser decodes a data line: UTF-8, invalid bytes replaced), reading
    valid bytes directly. Data that is not JSON fails the stream: ``LlmError``
    ``MALFORMED_RESPONSE``, quoting it and naming the ``sender``."""
    try:
        return orjson.loads(payload)
    except orjson.JSONDecodeError:
        text = payload_text(payload)
        try:
            return decode_json(text)
        except ValueError as exc:
            raise LlmError.of(
                "MALFORMED_RESPONSE", f"{sender} sent an event that is not JSON: {text:.200}"
            ) from exc
