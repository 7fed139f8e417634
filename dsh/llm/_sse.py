"""An incremental Server-Sent Events parser: feed it network reads, get complete events back.

Every streaming adapter needs the same framing, so it lives here, public::

    parser = SseParser()
    async for data in response.content.iter_any():
        for event in parser.feed(data):
            handle(json.loads(event.data))
        if parser.done:
            break

It follows the WHATWG event-stream rules: lines end in CRLF, LF or CR (a read may split any of
them, including a CRLF pair or a multi-byte character); ``data:`` lines of one event are joined
with ``"\\n"``; one space after the colon is optional; lines starting with ``:`` are comments
(``: keep-alive``), counted in :attr:`SseParser.comments` and never returned as events; an event
that is not terminated by a blank line before the end of the stream is never dispatched.

It also knows the one convention of OpenAI-style APIs: an event whose data is ``[DONE]`` (proxies
may add whitespace around it) ends the stream. It is not returned; :attr:`SseParser.done` becomes
true and everything after it is ignored.

``SseParser(max_event_bytes=n)`` bounds the bytes of one event (its lines, comments included, and
the unfinished line): a server that never ends an event would otherwise grow the buffer without
limit. Past the bound, :meth:`SseParser.feed` raises ``LlmError`` ``MALFORMED_RESPONSE``, so an
adapter fails the stream with it as it is.
"""

from __future__ import annotations

import re

from attrs import frozen

from dsh.values._errors import LlmError
from dsh.values._value import Value

__all__ = ["DONE", "SseEvent", "SseParser", "event_too_big", "parse_sse"]

DONE = "[DONE]"
_LINE_END = re.compile(rb"\r\n|\r|\n")
_BOM = b"\xef\xbb\xbf"
#: What may stand around ``[DONE]`` (ASCII whitespace only: ``str.strip()`` would also take
#: control characters such as U+001F, which a proxy never adds).
_ASCII_SPACE = " \t\n\r\x0b\x0c"


@frozen(repr=False, eq=False)
class SseEvent(Value):
    """One dispatched event. ``id`` is the last event id seen so far on the stream."""

    data: str
    event: str = "message"
    id: str = ""


class SseParser:
    """Bytes in, events out. Keeps only the unfinished line and the event being built."""

    def __init__(self, max_event_bytes: int | None = None) -> None:
        self.done = False
        #: The most bytes one event may take (``None``: no bound).
        self.max_event_bytes = max_event_bytes
        #: How many comment lines (e.g. ``: keep-alive``) were seen: traffic that is not data.
        self.comments = 0
        #: The reconnection time the server asked for with ``retry:``, in milliseconds.
        self.retry_ms: int | None = None
        self._partial: list[bytes] = []
        self._skip_lf = False
        self._at_start = True
        self._data: list[str] = []
        self._event = ""
        self._last_id = ""
        self._event_bytes = 0
        self._partial_bytes = 0

    def feed(self, data: bytes) -> list[SseEvent]:
        """The events completed by ``data`` (one network read of any size)."""
        if self.done or not data:
            return []
        if self._skip_lf:
            self._skip_lf = False
            if data[:1] == b"\n":
                data = data[1:]
        self._partial.append(data)
        self._partial_bytes += len(data)
        if b"\n" not in data and b"\r" not in data:
            self._check_size()
            return []
        buffer = b"".join(self._partial)
        lines = _LINE_END.split(buffer) if b"\r" in buffer else buffer.split(b"\n")
        # A trailing CR ended its line, but the LF of a CRLF pair may come in the next read.
        self._skip_lf = buffer.endswith(b"\r")
        rest = lines.pop()
        self._partial, self._partial_bytes = [rest], 0
        events = self._lines(lines)
        self._partial_bytes = len(rest)
        self._check_size()
        return events

    def _check_size(self) -> None:
        """Fail once the event being built (with the unfinished line) is over the bound."""
        if self.max_event_bytes is None or self.done:
            return
        if self._event_bytes + self._partial_bytes > self.max_event_bytes:
            raise event_too_big(self.max_event_bytes)

    def _lines(self, lines: list[bytes]) -> list[SseEvent]:
        if self._at_start:
            self._at_start = False
            if lines[0].startswith(_BOM):
                lines[0] = lines[0][len(_BOM) :]
        events: list[SseEvent] = []
        bounded = self.max_event_bytes is not None
        data = self._data
        for line in lines:
            if line:
                self._event_bytes += len(line) + 1
                if bounded:
                    self._check_size()
                if line[:5] == b"data:":  # nearly every line: parsed here, without a call
                    value = line[6:] if line[5:6] == b" " else line[5:]
                    data.append(value.decode("utf-8", "replace"))
                else:
                    self._field(line)
                continue
            self._event_bytes = 0
            event = self._dispatch()
            data = self._data  # the next event's (dispatching started a new list)
            if event is None:
                continue
            if event.data.strip(_ASCII_SPACE) == DONE:
                self.done = True
                break
            events.append(event)
        return events

    def _field(self, line: bytes) -> None:
        if line[:1] == b":":
            self.comments += 1
            return
        name, colon, value = line.partition(b":")
        if colon and value[:1] == b" ":
            value = value[1:]
        if name == b"data":
            self._data.append(value.decode("utf-8", "replace"))
        elif name == b"event":
            self._event = value.decode("utf-8", "replace")
        elif name == b"id":
            if b"\0" not in value:
                self._last_id = value.decode("utf-8", "replace")
        elif name == b"retry" and value.isdigit():
            self.retry_ms = int(value)

    def _dispatch(self) -> SseEvent | None:
        """End the event being built: the event, or ``None`` if it carried no data."""
        data, event = self._data, self._event
        self._data, self._event = [], ""
        if not data:
            return None
        return SseEvent("\n".join(data), event or "message", self._last_id)


def event_too_big(max_event_bytes: int) -> LlmError:
    """The failure of a stream with an event over ``max_event_bytes``."""
    return LlmError.of(
        "MALFORMED_RESPONSE",
        f"one server-sent event is over {max_event_bytes} bytes (max_event_bytes): "
        "the stream is not a well-formed event stream",
    )


def parse_sse(stream: bytes) -> list[SseEvent]:
    """Every event of a complete byte stream (handy in tests and for recorded streams)."""
    return SseParser().feed(stream)
