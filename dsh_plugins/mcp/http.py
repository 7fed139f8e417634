"""The streamable HTTP transport of MCP servers, with bounded reads.

The SDK's transport reads a JSON response whole (``response.aread()``), however long it is, and
caps an event of an SSE response at its own default (1 MiB), not at dsh's limit. Here a
message is at most ``max_message_bytes`` long either way: the SDK is told the limit for SSE
events (``max_sse_event_size``), and :class:`BoundedTransport` stops reading a response of any
other kind once its body passes the limit (before reading any when its ``Content-Length``
says it will). Either way the call that asked for it fails with an error naming the limit:
an event over it ends the event stream (the connection is opened again on the next call), a
body over it fails that request alone.
"""

from __future__ import annotations

from collections.abc import AsyncIterator, Mapping

import httpx2

__all__ = ["BoundedBody", "BoundedTransport", "http_client"]

#: The SDK's timeouts for one request: 30 s to connect or send, 5 minutes between reads.
TIMEOUT = httpx2.Timeout(30.0, read=300.0)


def too_long(limit: int, size: str) -> httpx2.StreamError:
    """What a response over ``limit`` raises (the SDK reports a ``StreamError`` as the failed
    request's error)."""
    return httpx2.StreamError(
        f"the server sent a message of {size} bytes, over max_message_bytes ({limit:,} bytes)"
    )


class BoundedBody(httpx2.AsyncByteStream):
    """A response body that raises :func:`too_long` once more than ``limit`` bytes came, or
    before reading any when the response declared more (``declared``, its ``Content-Length``).
    Raised while the body is read, where the SDK turns it into the request's error."""

    def __init__(self, body: httpx2.AsyncByteStream, limit: int, declared: int | None) -> None:
        self._body = body
        self._limit = limit
        self._declared = declared

    async def __aiter__(self) -> AsyncIterator[bytes]:
        if self._declared is not None and self._declared > self._limit:
            raise too_long(self._limit, f"{self._declared:,}")
        seen = 0
        async for part in self._body:
            seen += len(part)
            if seen > self._limit:
                raise too_long(self._limit, f"more than {self._limit:,}")
            yield part

    async def aclose(self) -> None:
        await self._body.aclose()


class BoundedTransport(httpx2.AsyncBaseTransport):
    """HTTP whose responses other than event streams are at most ``limit`` bytes long."""

    def __init__(self, limit: int, inner: httpx2.AsyncBaseTransport | None = None) -> None:
        self._limit = limit
        self._inner = inner if inner is not None else httpx2.AsyncHTTPTransport()

    async def handle_async_request(self, request: httpx2.Request) -> httpx2.Response:
        response = await self._inner.handle_async_request(request)
        kind = response.headers.get("content-type", "").lower()
        if kind.startswith("text/event-stream"):  # each event is bounded by the SDK
            return response
        length = response.headers.get("content-length", "")
        declared = int(length) if length.isdigit() else None
        assert isinstance(response.stream, httpx2.AsyncByteStream)  # from an async transport
        return httpx2.Response(
            response.status_code,
            headers=response.headers,
            stream=BoundedBody(response.stream, self._limit, declared),
            extensions=response.extensions,
        )

    async def aclose(self) -> None:
        await self._inner.aclose()


def http_client(headers: Mapping[str, str], limit: int) -> httpx2.AsyncClient:
    """The client an HTTP server is reached with: ``headers`` on every request, no response
    longer than ``limit`` bytes."""
    return httpx2.AsyncClient(
        headers=dict(headers), timeout=TIMEOUT, transport=BoundedTransport(limit)
    )
