"""Server-sent events framed for their data alone, fast: what :class:`~dsh.llm._sse.SseParser`
returns, without building its events.

A streamed completion is tens of thousands of events of one shape, ``data: {json}`` and a blank
line. :class:`~dsh.llm._sse.SseParser`, the reference, reads them line by line, decodes each
data line to text and builds an :class:`~dsh.llm._sse.SseEvent`: as much CPU per chunk as
decoding its JSON. :class:`PayloadFraming` splits a read at its blank lines and hands each plain
event's payload on as the bytes it was sent in (a JSON decoder reads bytes directly); every
event of another shape (several lines, other fields, a line without the space after
``data:``... ) goes through a reference parser of its own, and a stream with a carriage return
or a byte-order mark is read by the reference parser from there on. What it returns, the bytes
decoded as the reference decodes them (UTF-8, invalid bytes replaced), is the data of the
events the reference returns, read for read, with the same ``done`` and ``comments``, the same
bound on an event's bytes and the same failure past it (``tests/test_framing.py`` checks this on
any bytes, split anyhow).
"""

from __future__ import annotations

from typing import cast

from dsh.llm._sse import _ASCII_SPACE, _BOM, DONE, SseParser, event_too_big

__all__ = ["PayloadFraming", "payload_text"]

_DONE = DONE.encode()
_DATA = b"data: "
_NEXT_DATA = b"\n\n" + _DATA
_SPACE = _ASCII_SPACE.encode()


def payload_text(payload: bytes | str) -> str:
    """A payload as the reference parser gives it: text, invalid UTF-8 replaced."""
    return payload if isinstance(payload, str) else payload.decode("utf-8", "replace")


class PayloadFraming:
    """Bytes in, the data of each complete event out (``bytes``, or ``str`` for an event the
    reference parser read). ``done``, ``comments`` and ``max_event_bytes`` mean what they mean
    on :class:`~dsh.llm._sse.SseParser`."""

    def __init__(self, max_event_bytes: int | None = None) -> None:
        self.max_event_bytes = max_event_bytes
        # Reads the events of other shapes, each fed whole; the whole stream once it has a CR
        # or starts with a byte-order mark (``_whole``).
        self._reference = SseParser(max_event_bytes)
        self._whole = False
        self._rest = b""
        self._done = False
        self._comments = 0

    @property
    def done(self) -> bool:
        return self._done or self._reference.done

    @property
    def comments(self) -> int:
        return self._comments + self._reference.comments

    def feed(self, data: bytes) -> list[bytes | str]:
        """The data of the events completed by ``data`` (one network read of any size)."""
        if self._whole:
            return [event.data for event in self._reference.feed(data)]
        if self.done or not data:
            return []
        buffer = self._rest + data if self._rest else data
        reference = self._reference
        if b"\r" in buffer or (reference._at_start and buffer[:1] == _BOM[:1]):
            # Line ends other than LF (a CR may end a line of its own, or pair with an LF of
            # the next read), or a stream that may open with a byte-order mark: the reference
            # reads the rest, from where the last complete event ended.
            self._whole = True
            self._rest = b""
            return [event.data for event in reference.feed(buffer)]
        if reference._at_start and b"\n" in buffer:
            reference._at_start = False  # a line has ended: a mark from now on is text
        bound = self.max_event_bytes
        # Asked of each event only where the read could hold one past the bound, or the end.
        limit = bound if bound is not None and len(buffer) >= bound else None
        out: list[bytes | str] = []
        if limit is None and buffer[:6] == _DATA:
            # The common read: event after event of one ``data:`` line, each a JSON object.
            # Split where one ends and the next begins: the pieces before the last such place
            # are the payloads of plain events if no newline is left among them, and none is
            # the end (``[DONE]``, spaces around it or not: a piece that sorts below ``{``).
            # What follows that place (an event, maybe more, maybe a part of one) is read below.
            pieces = buffer.split(_NEXT_DATA)
            last = pieces.pop()
            if pieces:
                pieces[0] = pieces[0][6:]
                if min(pieces)[:1] == b"{" and buffer.count(
                    b"\n", 0, len(buffer) - len(last)
                ) == 2 * len(pieces):
                    out = cast("list[bytes | str]", pieces)
                    buffer = _DATA + last
        ends = _DONE in buffer
        pieces = buffer.split(b"\n\n")
        rest = pieces.pop()
        for piece in pieces:
            if piece[:1] == b"\n":
                piece = piece[1:]  # a run of blank lines leaves one at most
            if not piece:
                continue  # a blank line between events
            if limit is not None and len(piece) + 1 > limit:
                raise event_too_big(limit)
            if b"\n" not in piece:
                if piece[:6] == _DATA:
                    payload = piece[6:]
                    if ends and payload.strip(_SPACE) == _DONE:
                        self._done = True
                        self._rest = b""
                        return out
                    out.append(payload)
                    continue
                if piece[:1] == b":":
                    self._comments += 1
                    continue
            # Another shape: the reference reads it, as one whole event.
            for event in reference.feed(piece + b"\n\n"):
                out.append(event.data)
            if reference.done:
                self._rest = b""
                return out
        self._rest = rest
        if bound is not None and len(rest.lstrip(b"\n")) > bound:
            raise event_too_big(bound)
        return out
