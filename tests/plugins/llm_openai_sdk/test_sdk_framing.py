"""The event decoder the SDK client is given: WHATWG framing, proxy variants, the [DONE] check
and the chunk reshaping the stream helper needs."""

from __future__ import annotations

import asyncio
import json
from collections.abc import AsyncIterator
from typing import Any

import pytest
from hypothesis import given
from hypothesis import strategies as st

from dsh.values._errors import LlmError
from dsh_plugins.llm_openai_sdk.deadline import Deadline
from dsh_plugins.llm_openai_sdk.framing import ChunkShaper, EventDecoder, MissingDone
from dsh_plugins.llm_openai_sdk.sdk import make_client


async def chunks(*items: bytes) -> AsyncIterator[bytes]:
    for item in items:
        yield item


async def decoded(*items: bytes) -> list[Any]:
    """What the SDK gets from the decoder: each event's parsed payload, or its raw data."""
    out: list[Any] = []
    async for event in EventDecoder(None).aiter_bytes(chunks(*items)):
        try:
            out.append(event.json())
        except ValueError:
            out.append(event.data)
    return out


CHUNK = b'data: {"choices": [{"index": 0, "delta": {"content": "hi"}}]}\n\n'
SHAPED = {"object": "chat.completion.chunk", "choices": [{"index": 0, "delta": {"content": "hi"}}]}


async def test_the_client_makes_this_decoder() -> None:
    client = make_client("http://127.0.0.1:9", "k", 1.0, 1.0)
    try:
        assert isinstance(client._make_sse_decoder(), EventDecoder)
    finally:
        await client.close()


async def test_a_stream_ends_at_done_and_ignores_what_follows() -> None:
    assert await decoded(CHUNK, b"data: [DONE]\n\n", CHUNK) == [SHAPED, "[DONE]"]


async def test_a_stream_that_ends_before_done_raises() -> None:
    with pytest.raises(MissingDone):
        await decoded(CHUNK, b"data: [DONE]")


async def test_point8_id_retry_and_event_fields_are_ignored() -> None:
    """The SDK's decoder keeps an id for good, so a later keep-alive dispatched an empty event."""
    framed = b"id: 7\nretry: 100\nevent: message\n" + CHUNK + b": keep-alive\n\n"
    assert await decoded(framed, b"id: 8\n\ndata: [DONE]\n\n") == [SHAPED, "[DONE]"]


async def test_point8_done_with_whitespace_ends_the_stream() -> None:
    assert await decoded(CHUNK, b"data:  [DONE] \t\n\n") == [SHAPED, "[DONE]"]


async def test_point8_invalid_utf8_becomes_replacement_characters() -> None:
    euro = "€".encode()
    body = b'data: {"choices": [{"delta": {"content": "a\xff' + euro[:1]
    events = await decoded(body, euro[1:] + b'"}}]}\n\n', b"data: [DONE]\n\n")
    assert events[0]["choices"][0]["delta"]["content"] == "a\ufffd€"


async def test_line_ends_of_every_kind_and_crlf_split_across_reads() -> None:
    events = await decoded(b"data: 1\r", b"\ndata: 2\r\n\r", b"data: 3\n\ndata: [DONE]\r\n\r\n")
    assert events == ["1\n2", 3, "[DONE]"]


async def test_a_payload_that_is_not_json_is_left_for_the_sdk_to_refuse() -> None:
    assert await decoded(b"data: {oops\n\ndata: [DONE]\n\n") == ["{oops", "[DONE]"]


def test_point8_usage_chunks_without_choices_get_an_empty_list() -> None:
    shaper = ChunkShaper()
    usage = {"usage": {"prompt_tokens": 1}}
    assert shaper.shape({**usage, "choices": None})["choices"] == []
    assert shaper.shape(usage)["choices"] == []
    assert shaper.shape({**usage, "choices": []})["choices"] == []


def test_only_the_first_choice_is_kept_as_choice_zero_with_a_delta() -> None:
    shaped = ChunkShaper().shape(
        {"object": "x", "choices": [{"index": 3, "delta": None}, {"index": 4}]}
    )
    assert shaped == {"object": "x", "choices": [{"index": 0, "delta": {}}]}


def test_error_objects_and_odd_shapes_are_left_alone() -> None:
    shaper = ChunkShaper()
    error = {"error": {"message": "busy"}}
    assert shaper.shape(error) is error
    assert shaper.shape([1]) == [1]
    assert shaper.shape({"choices": "abc"})["choices"] == "abc"
    assert shaper.shape({"choices": [1]})["choices"] == [1]
    odd = {"delta": {"tool_calls": [5, {"index": 0, "function": "f"}]}}
    assert shaper.shape({"choices": [odd]})["choices"][0]["delta"]["tool_calls"] == [
        5,
        {"index": 0, "type": "function", "function": "f"},
    ]


def test_tool_call_fragments_get_dense_indexes_and_an_id_and_name_once() -> None:
    shaper = ChunkShaper()

    def calls(*fragments: dict[str, Any]) -> list[dict[str, Any]]:
        chunk = {"choices": [{"delta": {"tool_calls": list(fragments)}}]}
        shaped: list[dict[str, Any]] = shaper.shape(chunk)["choices"][0]["delta"]["tool_calls"]
        return shaped

    first = calls({"index": 5, "id": "a", "function": {"name": "f", "arguments": "{"}})
    assert first == [
        {"index": 0, "id": "a", "type": "function", "function": {"name": "f", "arguments": "{"}}
    ]
    again = calls({"index": 5, "id": "a", "function": {"name": "f", "arguments": "}"}})
    assert again == [{"index": 0, "type": "function", "function": {"arguments": "}"}}]
    by_id = calls({"id": "b", "function": {"arguments": ""}}, {"function": {"name": "g"}})
    assert by_id == [
        {"index": 1, "id": "b", "type": "function", "function": {"arguments": ""}},
        {"index": 1, "type": "function", "function": {"name": "g"}},
    ]
    assert calls({"index": 9}) == [{"index": 2, "type": "function", "function": {}}]


FRAME = st.builds(
    lambda text: "data: " + json.dumps({"choices": [{"delta": {"content": text}}]}) + "\n\n",
    st.text(max_size=20),
)


@given(
    st.lists(FRAME | st.just(": keep-alive\n\n") | st.just("id: 1\n\n"), max_size=6),
    st.sampled_from(["\n", "\r\n", "\r"]),
    st.lists(st.integers(min_value=0, max_value=400), max_size=8),
)
async def test_how_the_body_is_split_and_which_line_ends_it_uses_never_matter(
    frames: list[str], newline: str, cuts: list[int]
) -> None:
    body = ("".join(frames) + "data: [DONE]\n\n").replace("\n", newline).encode()
    points = sorted({min(cut, len(body)) for cut in cuts})
    pieces = [body[a:b] for a, b in zip([0, *points], [*points, len(body)], strict=True)]
    whole = await decoded(body)
    assert await decoded(*pieces) == whole
    contents = [event["choices"][0]["delta"]["content"] for event in whole[:-1]]
    assert contents == [
        json.loads(frame[6:])["choices"][0]["delta"]["content"]
        for frame in frames
        if frame.startswith("data")
    ]


async def test_lines_after_done_in_the_same_read_are_not_decoded() -> None:
    assert await decoded(b"data: [DONE]\n\ndata: {oops\n\n") == ["[DONE]"]


async def test_the_decoder_tells_the_deadline_what_each_read_held() -> None:
    deadline = Deadline(0.2, 1.0)
    deadline.headers_arrived()
    decoder = EventDecoder(deadline)
    moved: list[str] = []
    deadline.keep_alive = lambda: moved.append("keep-alive")  # type: ignore[method-assign]
    assert list(decoder.feed("data: {")) == []
    assert list(decoder.feed("}\n: keep-alive\n")) == []
    assert (moved, deadline.started) == (["keep-alive"], False)
    assert len(list(decoder.feed("\n"))) == 1
    assert deadline.started


async def test_keep_alives_move_the_deadline_only_before_data_and_never_past_the_queue() -> None:
    deadline = Deadline(idle_timeout_s=0.05, first_data_timeout_s=0.0)
    assert deadline.first_data_timeout_s == 0.05
    deadline.headers_arrived()
    deadline.keep_alive()  # outside a wait: only remembered

    async def queued() -> str:
        # Without the cap each keep-alive would move the deadline on, and this would return.
        for _ in range(5):
            await asyncio.sleep(0.02)
            deadline.keep_alive()
        return "never"

    with pytest.raises(LlmError, match=r"no data within 0\.05 s"):
        await deadline.wait(queued())
    deadline.data_arrived()
    deadline.keep_alive()
    # Ready at the next turn of the loop, however late: only a deadline already passed fails it.
    assert await deadline.wait(asyncio.sleep(0, "data")) == "data"
