"""DeepSeek's event stream, decoded for the SDK: what its own decoder cannot take.

The SDK reads a streamed body with the decoder its client makes (``_make_sse_decoder``); the
client of this adapter (:mod:`.sdk`) makes an :class:`EventDecoder` instead. It turns bytes into
the SDK's ``ServerSentEvent`` values, as the WHATWG event-stream rules say, and adds what only
this API and the proxies in front of it need:

* **Fields other than** ``data`` are ignored. The SDK keeps an ``id:`` for good (so every later
  blank line, e.g. after a ``: keep-alive``, dispatches an empty event it cannot parse) and
  treats an ``event:`` name as a different kind of stream; neither means anything here.
* **Invalid UTF-8** becomes U+FFFD (an incremental decoder, so a character split across two
  reads stays whole); the SDK's strict decoding would fail the stream.
* ``[DONE]`` **with whitespace** around it ends the stream; a body that ends **without**
  ``[DONE]`` was cut off, and raises :class:`MissingDone` (the SDK would end it as complete).
* **Chunk shapes the SDK's stream helper cannot accumulate** are reshaped before it sees them
  (:class:`ChunkShaper`): ``choices`` ``null`` or absent (a usage chunk) becomes ``[]``; only
  the first choice is kept, as choice 0; a ``delta`` that is ``null`` or absent becomes ``{}``;
  tool-call fragments get a dense ``index`` (by wire index, else by id, else the last call),
  ``type: "function"``, and an ``id`` or ``name`` only while the call has none — the helper
  concatenates every string it is sent, so a repeated id would double.
* **Progress**: each network read tells the call's :class:`~.deadline.Deadline` whether it held
  a comment (a queued request's keep-alive) and each dispatched event that data has arrived.

The payload is parsed here once; the event hands the reshaped object to the SDK through its
``json()``. A payload that is not JSON is passed on as it is, so the SDK's own parse raises.
"""

from __future__ import annotations

import codecs
import json
from collections.abc import AsyncIterator, Iterator
from typing import Any

from openai._streaming import ServerSentEvent

from dsh_plugins.llm_openai_sdk.deadline import Deadline

__all__ = ["DONE", "ChunkShaper", "EventDecoder", "MissingDone", "ParsedEvent"]

DONE = "[DONE]"


class MissingDone(Exception):
    """The response body ended before ``data: [DONE]``."""


class ParsedEvent(ServerSentEvent):
    """An event whose payload is already parsed (and reshaped): ``json()`` returns it."""

    def __init__(self, data: str, payload: Any) -> None:
        super().__init__(data=data)
        self._payload = payload

    def json(self) -> Any:
        return self._payload


class ChunkShaper:
    """Reshapes one response's chunk payloads into what the stream helper accumulates (see
    the module docstring). Keeps which wire call is which helper index."""

    def __init__(self) -> None:
        self._positions: dict[Any, int] = {}
        self._last: Any = None
        self._with_id: set[int] = set()
        self._with_name: set[int] = set()

    def shape(self, payload: Any) -> Any:
        """The payload as the helper should see it; anything that is not a chunk object (an
        error object, a list...) is left for the SDK to judge."""
        if not isinstance(payload, dict) or payload.get("error"):
            return payload
        choices = payload.get("choices")
        if choices is None:
            choices = []
        elif isinstance(choices, list) and choices and isinstance(choices[0], dict):
            choices = [self._choice(choices[0])]
        return {"object": "chat.completion.chunk", **payload, "choices": choices}

    def _choice(self, choice: dict[str, Any]) -> dict[str, Any]:
        delta = choice.get("delta") or {}
        if isinstance(delta, dict) and isinstance(delta.get("tool_calls"), list):
            delta = {**delta, "tool_calls": [self._call(part) for part in delta["tool_calls"]]}
        return {**choice, "index": 0, "delta": delta}

    def _call(self, part: Any) -> Any:
        if not isinstance(part, dict):
            return part
        key = part.get("index")
        if key is None:
            key = part.get("id") or self._last
        self._last = key
        position = self._positions.setdefault(key, len(self._positions))
        shaped = {**part, "index": position, "type": "function"}
        function = part.get("function") or {}
        if isinstance(function, dict):
            shaped["function"] = _once(function, "name", position, self._with_name)
        return _once(shaped, "id", position, self._with_id)


def _once(fields: dict[str, Any], name: str, position: int, having: set[int]) -> dict[str, Any]:
    """``fields`` without ``name`` if call ``position`` already has one; marks it when this
    fragment brings a non-empty one."""
    if position in having:
        return {key: value for key, value in fields.items() if key != name}
    if fields.get(name):
        having.add(position)
    return fields


class EventDecoder:
    """The SDK's byte decoder for one streamed response (the ``SSEBytesDecoder`` protocol;
    the async client only calls :meth:`aiter_bytes`)."""

    def __init__(self, deadline: Deadline | None) -> None:
        self._deadline = deadline
        self._shaper = ChunkShaper()
        self._text = codecs.getincrementaldecoder("utf-8")(errors="replace")
        self._line = ""
        self._skip_lf = False
        self._data: list[str] = []
        self._comments = 0
        self.done = False

    async def aiter_bytes(self, iterator: AsyncIterator[bytes]) -> AsyncIterator[ServerSentEvent]:
        """The events of the body, up to ``[DONE]``; :class:`MissingDone` if it never comes."""
        async for data in iterator:
            for event in self.feed(self._text.decode(data)):
                yield event
            if self.done:
                return
        # An event not ended by a blank line is never dispatched: without [DONE] it was cut off.
        raise MissingDone

    def feed(self, text: str) -> Iterator[ServerSentEvent]:
        """The events completed by ``text`` (one network read, decoded)."""
        comments = self._comments
        if self._skip_lf and text.startswith("\n"):
            text = text[1:]
        lines = (self._line + text).replace("\r\n", "\n").replace("\r", "\n").split("\n")
        self._skip_lf = text.endswith("\r")
        self._line = lines.pop()
        events = [event for line in lines if (event := self._line_of(line)) is not None]
        if self._deadline is not None:
            if events:
                self._deadline.data_arrived()
            elif self._comments > comments:
                self._deadline.keep_alive()
        return iter(events)

    def _line_of(self, line: str) -> ServerSentEvent | None:
        if self.done:
            return None
        if not line:
            return self._dispatch()
        if line.startswith(":"):
            self._comments += 1
            return None
        name, _, value = line.partition(":")
        if name == "data":
            self._data.append(value.removeprefix(" "))
        return None

    def _dispatch(self) -> ServerSentEvent | None:
        if not self._data:
            return None
        data, self._data = "\n".join(self._data), []
        if data.strip(" \t\n\r\x0b\x0c") == DONE:  # ASCII whitespace, as dsh.llm._sse
            self.done = True
            return ServerSentEvent(data=DONE)
        try:
            payload = json.loads(data)
        except ValueError:
            return ServerSentEvent(data=data)
        return ParsedEvent(data, self._shaper.shape(payload))
