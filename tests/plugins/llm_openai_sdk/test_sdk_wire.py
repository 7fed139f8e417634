"""The wire as the API and the proxies in front of it send it, from a bare loopback server:
queued requests (point 2), the request id (point 3), an HTTP 200 that is not an event stream
(point 4) and proxy framing (point 8) — each variant checked against its plain form, and against
the hand-rolled adapter on the same bytes."""

from __future__ import annotations

import asyncio
import json
from collections.abc import Awaitable, Callable, Sequence
from types import SimpleNamespace
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from dsh.testing.mockserver.wire import DONE_FRAME, KEEP_ALIVE, ChunkStyle, usage_json
from dsh.values._chunks import Finish, FinishError, StreamChunk
from dsh.values._errors import LlmError
from dsh_plugins.llm_deepseek import DeepSeekAdapter, DeepSeekConfig

from .conftest import RawHandler
from .support import HELLO, adapter_at, collect, failure_from, failure_of

RawServer = Callable[[RawHandler], Awaitable[str]]
STYLE = ChunkStyle("id-1", "deepseek-v4-flash", 1786782779, "fp")
SSE = "text/event-stream"
Part = bytes | float


def answering(
    parts: Sequence[Part],
    content_type: str | None = SSE,
    status: str = "200 OK",
    headers: str = "",
) -> RawHandler:
    """A handler that answers with ``parts``: bytes are written, numbers are pauses (s)."""

    async def handler(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        await reader.readuntil(b"\r\n\r\n")
        typed = f"Content-Type: {content_type}\r\n" if content_type else ""
        writer.write(f"HTTP/1.1 {status}\r\n{typed}{headers}Connection: close\r\n\r\n".encode())
        try:
            for part in parts:
                if isinstance(part, float):
                    await asyncio.sleep(part)
                else:
                    writer.write(part)
                    await writer.drain()
        except ConnectionError:
            pass
        writer.close()

    return handler


async def sdk_chunks(url: str, **options: Any) -> list[StreamChunk]:
    adapter = adapter_at(url, **options)
    try:
        return await collect(adapter)
    finally:
        await adapter.aclose()


async def hand_rolled_chunks(url: str) -> list[StreamChunk]:
    adapter = DeepSeekAdapter(DeepSeekConfig(base_url=url, api_key="k"))
    try:
        return [chunk async for chunk in adapter.stream(HELLO)]
    finally:
        await adapter.aclose()


def frame(payload: dict[str, Any], *fields: str) -> bytes:
    return "".join(f"{field}\n" for field in fields).encode() + (
        f"data: {json.dumps(payload)}\n\n".encode()
    )


TEXT = json.loads(STYLE.chunk({"content": "Hello"})[6:])
MORE = json.loads(STYLE.chunk({"content": " world"})[6:])
FINISH = json.loads(STYLE.chunk({}, "stop")[6:])
USAGE = usage_json(5, 2)
PLAIN = [
    frame(TEXT),
    frame(MORE),
    frame(FINISH),
    frame({**TEXT, "choices": [], "usage": USAGE}),
    DONE_FRAME.encode(),
]


def variant(**changes: bytes) -> list[bytes]:
    """:data:`PLAIN` with frames replaced by position name."""
    names = ["text", "more", "finish", "usage", "done"]
    return [changes.get(name, part) for name, part in zip(names, PLAIN, strict=True)]


# -- point 8: framing only proxies send --------------------------------------------------------

VARIANTS = {
    "id-retry-event-fields": variant(
        text=frame(TEXT, "id: 1", "retry: 3000", "event: message"),
        more=frame(MORE, "id: 2") + KEEP_ALIVE.encode() + b"event: ping\n\n",
        finish=KEEP_ALIVE.encode() + frame(FINISH, "id: 3"),
    ),
    "done-with-whitespace": variant(done=b"data:  [DONE]  \r\n\r\n"),
    "usage-with-null-choices": variant(usage=frame({**TEXT, "choices": None, "usage": USAGE})),
    "usage-without-choices": variant(
        usage=frame({key: v for key, v in TEXT.items() if key != "choices"} | {"usage": USAGE})
    ),
}


@pytest.mark.parametrize("name", VARIANTS)
async def test_point8_each_proxy_framing_gives_the_chunks_of_its_plain_form(
    name: str, raw_server: RawServer
) -> None:
    plain = await sdk_chunks(await raw_server(answering(PLAIN)))
    framed_url = await raw_server(answering(VARIANTS[name]))
    assert await sdk_chunks(framed_url) == plain
    assert await hand_rolled_chunks(framed_url) == plain


async def test_point8_invalid_utf8_in_content_becomes_u_fffd(raw_server: RawServer) -> None:
    clean = frame({**TEXT, "choices": [{"index": 0, "delta": {"content": "a\ufffdb"}}]})
    garbled = clean.replace("\ufffd".encode(), b"\xff").replace(b"\\ufffd", b"\xff")
    plain = await sdk_chunks(await raw_server(answering(variant(text=clean))))
    url = await raw_server(answering(variant(text=garbled)))
    assert await sdk_chunks(url) == plain
    assert await hand_rolled_chunks(url) == plain


# -- point 2: queued requests -------------------------------------------------------------------

# Keep-alives 50 ms apart, against idle timeouts of 0.5 s they never come near on a loaded
# machine (0.5 s also leaves the headers time: they come under the same timeout).
PAUSED_KEEP_ALIVES: list[Part] = [KEEP_ALIVE.encode(), 0.05] * 15  # 0.75 s of them
QUEUED: list[Part] = [*PAUSED_KEEP_ALIVES, *PLAIN]
#: Keep-alives that never end (the handler stops when the client has gone).
ENDLESS_KEEP_ALIVES: list[Part] = [KEEP_ALIVE.encode(), 0.05] * 100_000
#: A pause that outlasts any test: silence only a deadline can end.
SILENCE = 3600.0


async def test_point2_keep_alives_before_the_first_data_wait_up_to_first_data_timeout(
    raw_server: RawServer,
) -> None:
    url = await raw_server(answering(QUEUED))
    chunks = await sdk_chunks(url, idle_timeout_s=5.0, first_data_timeout_s=30.0)
    assert chunks == await sdk_chunks(await raw_server(answering(PLAIN)))


async def test_point2_a_queue_longer_than_first_data_timeout_is_a_timeout(
    raw_server: RawServer,
) -> None:
    url = await raw_server(answering(ENDLESS_KEEP_ALIVES))
    failure = failure_of(await sdk_chunks(url, idle_timeout_s=2.0, first_data_timeout_s=3.0))
    assert failure.code == "TIMEOUT"
    assert failure.message == (
        "no data within 3.0 s: the request stayed queued (only keep-alive comments); raise "
        "first_data_timeout_s to wait longer"
    )


async def test_point2_silence_before_data_and_keep_alives_after_it_stay_stalls(
    raw_server: RawServer,
) -> None:
    # The answer's headers come under the same timeout: 2 s leaves them time on a loaded
    # machine (a CI run with other work beside it once took longer than 0.15 s).
    silent = await raw_server(answering([SILENCE, *PLAIN]))
    failure = failure_of(await sdk_chunks(silent, idle_timeout_s=2.0))
    assert (failure.code, failure.message) == (
        "TIMEOUT",
        "the stream made no progress for 2.0 s",
    )
    stalled = await raw_server(answering([PLAIN[0], *ENDLESS_KEEP_ALIVES]))
    chunks = await sdk_chunks(stalled, idle_timeout_s=2.0, first_data_timeout_s=30.0)
    assert failure_of(chunks).message == "the stream made no progress for 2.0 s"


def test_point2_first_data_timeout_defaults_to_ten_minutes() -> None:
    from dsh_plugins.llm_openai_sdk import OpenAISdkConfig

    assert OpenAISdkConfig().first_data_timeout_s == 600.0


# -- point 3: the request id -------------------------------------------------------------------


async def test_point3_the_trace_id_is_the_request_id_before_other_names(
    raw_server: RawServer,
) -> None:
    both = "x-request-id: gateway-1\r\nx-ds-trace-id: trace-9\r\n"
    body = b'{"error": {"message": "Rate Limit Reached", "type": "rate_limit_reached_error"}}'
    url = await raw_server(answering([body], "application/json", "429 Too Many Requests", both))
    failure = await failure_from(adapter_at(url))
    assert (failure.code, failure.request_id) == ("RATE_LIMIT", "trace-9")
    fallback = "x-request-id: gateway-1\r\n"
    url = await raw_server(answering([body], "application/json", "429 Too Many", fallback))
    assert (await failure_from(adapter_at(url))).request_id == "gateway-1"


# -- point 4: an HTTP 200 that is not an event stream ------------------------------------------

TRACE = "x-ds-trace-id: trace-4\r\n"


@pytest.mark.parametrize(
    ("content_type", "body", "code", "message"),
    [
        (
            "application/json",
            b'{"error": {"message": "Rate limit reached", "type": "rate_limit_error"}}',
            "RATE_LIMIT",
            "DeepSeek answered HTTP 200: Rate limit reached",
        ),
        (
            "application/json; charset=utf-8",
            b'{"error": {"message": "maximum context length", "code": "invalid_request_error"}}',
            "CONTEXT_WINDOW_EXCEEDED",
            "DeepSeek answered HTTP 200: maximum context length",
        ),
        (
            "application/json",
            b'{"error": {"message": "no", "type": "invalid_request_error"}}',
            "INVALID_REQUEST",
            "DeepSeek answered HTTP 200: no",
        ),
        (
            "application/json",
            b'{"error": "busy"}',
            "SERVER",
            "DeepSeek answered HTTP 200: busy",
        ),
        (
            "application/json",
            b'{"error": null}',
            "MALFORMED_RESPONSE",
            'DeepSeek answered HTTP 200 without an event stream: application/json body {"error"',
        ),
        (
            "application/json",
            b'{"object": "chat.completion", "choices": []}',
            "MALFORMED_RESPONSE",
            'DeepSeek answered HTTP 200 without an event stream: application/json body {"object"',
        ),
        (
            "text/html",
            b"<html>" + b"x" * 500,
            "MALFORMED_RESPONSE",
            "DeepSeek answered HTTP 200 without an event stream: text/html body <html>xxx",
        ),
        (
            None,
            b"",
            "MALFORMED_RESPONSE",
            "DeepSeek answered HTTP 200 without an event stream: no type body (an empty body)",
        ),
    ],
)
async def test_point4_a_200_that_is_not_an_event_stream_keeps_the_server_s_words(
    content_type: str | None, body: bytes, code: str, message: str, raw_server: RawServer
) -> None:
    url = await raw_server(answering([body], content_type, headers=TRACE))
    chunks = await sdk_chunks(url)
    failure = failure_of(chunks)
    assert len(chunks) == 1
    assert (failure.code, failure.status, failure.request_id) == (code, 200, "trace-4")
    assert failure.message.startswith(message)
    assert len(failure.message) < len(message) + 200
    with pytest.raises(LlmError) as raised:
        await hand_rolled_chunks(url)
    assert raised.value.failure == failure


async def test_point4_a_huge_or_broken_body_is_quoted_from_what_arrived(
    raw_server: RawServer,
) -> None:
    huge = await raw_server(answering([b"<p>" * 100_000], "text/html"))
    assert (await failure_from(adapter_at(huge))).message.endswith("<p>" * 66 + "<p")
    cut = b"HTTP/1.1 200 OK\r\nContent-Type: text/plain\r\nContent-Length: 99\r\n\r\nbusy"

    async def broken(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        await reader.readuntil(b"\r\n\r\n")
        writer.write(cut)
        await writer.drain()
        writer.close()

    failure = await failure_from(adapter_at(await raw_server(broken)))
    assert failure.message.endswith("text/plain body busy")


async def test_point4_a_bug_while_reading_the_body_propagates() -> None:
    from dsh_plugins.llm_openai_sdk.completion import _not_a_stream

    async def pieces() -> Any:
        yield b"x"
        raise RuntimeError("bug")

    raw: Any = SimpleNamespace(
        response=SimpleNamespace(headers={"content-type": "text/html"}, aiter_bytes=pieces)
    )
    with pytest.raises(RuntimeError, match="bug"):
        await _not_a_stream(raw)


# -- both adapters on any chunk sequence ---------------------------------------------------------

TEXTS = st.sampled_from(["", "a", " b", "é", None])
FRAGMENTS = st.fixed_dictionaries(
    {},
    optional={
        "index": st.integers(0, 2),
        "id": st.sampled_from(["call_1", "call_2", ""]),
        "function": st.fixed_dictionaries(
            {}, optional={"name": st.sampled_from(["f", "g", ""]), "arguments": TEXTS}
        ),
    },
)
DELTAS = st.fixed_dictionaries(
    {},
    optional={
        "reasoning_content": TEXTS,
        "content": TEXTS,
        "tool_calls": st.lists(FRAGMENTS, max_size=2),
    },
)
CHUNKS = st.lists(
    st.fixed_dictionaries(
        {"delta": DELTAS},
        optional={"finish_reason": st.sampled_from(["stop", "length", "tool_calls", None])},
    ).map(lambda choice: {"object": "chat.completion.chunk", "choices": [choice]})
    | st.just({"object": "chat.completion.chunk", "choices": [], "usage": USAGE}),
    max_size=6,
)


async def both_on(body: bytes) -> tuple[list[StreamChunk], list[StreamChunk]]:
    async def handler(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        await answering([body])(reader, writer)

    server = await asyncio.start_server(handler, "127.0.0.1", 0)
    url = f"http://127.0.0.1:{server.sockets[0].getsockname()[1]}"
    try:
        return await sdk_chunks(url), await in_band(url)
    finally:
        server.close()


async def in_band(url: str) -> list[StreamChunk]:
    """The hand-rolled adapter's chunks, a raised failure as the ``finish`` it stands for."""
    adapter = DeepSeekAdapter(DeepSeekConfig(base_url=url, api_key="k"))
    chunks: list[StreamChunk] = []
    try:
        async for chunk in adapter.stream(HELLO):
            chunks.append(chunk)
    except LlmError as raised:
        chunks.append(Finish(FinishError(raised.failure)))
    finally:
        await adapter.aclose()
    return chunks


@settings(max_examples=60, deadline=None)
@given(CHUNKS)
async def test_both_adapters_give_the_same_chunks_for_any_chunk_sequence(
    chunks: list[dict[str, Any]],
) -> None:
    body = b"".join(frame(chunk) for chunk in chunks) + DONE_FRAME.encode()
    sdk, hand_rolled = await both_on(body)
    assert sdk == hand_rolled
