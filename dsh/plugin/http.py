"""The plugin door's streaming HTTP part: what an LLM adapter over aiohttp uses to read a
Server-Sent Events answer with stall deadlines (:class:`EventReader`, or :class:`PayloadReader`
for the events' data alone), share one connection pool (:class:`HttpClient`) and decode event
data (:func:`decode_json`, :func:`decode_payload`). Separate from :mod:`dsh.plugin` because it
imports aiohttp, which a harness that never calls such an adapter does not pay for.
"""

from __future__ import annotations

from dsh._json import decode_json
from dsh.llm._http import (
    EventReader,
    HttpClient,
    PayloadReader,
    StreamLimits,
    decode_payload,
)
from dsh.llm._sse import SseEvent, SseParser

__all__ = [
    "EventReader",
    "HttpClient",
    "PayloadReader",
    "SseEvent",
    "SseParser",
    "StreamLimits",
    "decode_json",
    "decode_payload",
]
