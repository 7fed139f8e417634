"""The fast framing of events' data agrees with the reference SSE parser, read for read.

:class:`~dsh.llm._framing.PayloadFraming` is a speed trick: its reference is
:class:`~dsh.llm._sse.SseParser`. On any stream, split into reads anyhow, each read gives the
data the reference's events carry (the bytes decoded as the reference decodes a data line), the
same ``done``, the same failure (an event over the bound) at the same read; ``comments`` agree
wherever the stream read so far ends at a blank line (the fast side counts a comment when its
event ends, the reference when its line does), and at the end.
"""

from __future__ import annotations

import pytest
from hypothesis import example, given
from hypothesis import strategies as st

from dsh._json import decode_json
from dsh.llm._framing import PayloadFraming, payload_text
from dsh.llm._http import decode_payload
from dsh.llm._sse import DONE, SseParser
from dsh.values._errors import LlmError

_TEXT = st.text(
    alphabet=st.characters(blacklist_characters="\r\n", blacklist_categories=["Cs"]), max_size=12
)


@st.composite
def _events(draw: st.DrawFn) -> bytes:
    """One event or stray line: mostly the plain ``data: {...}`` shape the fast path takes,
    and every other shape the reference knows."""
    text = draw(_TEXT)
    kind = draw(
        st.sampled_from(
            [
                "plain",
                "plain",
                "plain",
                "json",
                "json-run",
                "json-run",
                "nospace",
                "two-data",
                "named",
                "id",
                "retry",
                "comment",
                "comment-in-event",
                "blank",
                "unterminated-line",
                "done",
                "done-spaced",
                "bad-utf8",
                "bare-data",
                "empty-data",
            ]
        )
    )
    raw = {
        "plain": f"data: {text}\n\n",
        "json": f'data: {{"t": "{text!r}"}}\n\n',
        # event after event of JSON objects: the read the fast path splits at once
        "json-run": "".join(f'data: {{"t": {i}, "u": "{text!r}"}}\n\n' for i in range(5)),
        "nospace": f"data:{text}\n\n",
        "two-data": f"data: {text}\ndata: {text}\n\n",
        "named": f"event: {text}\ndata: {text}\n\n",
        "id": f"id: {text}\ndata: x\n\n",
        "retry": f"retry: 5\ndata: {text}\n\n",
        "comment": f": {text}\n\n",
        "comment-in-event": f": {text}\ndata: {text}\n\n",
        "blank": "\n",
        "unterminated-line": f"data: {text}\n",
        "done": f"data: {DONE}\n\n",
        "done-spaced": f"data:  {DONE} \n\n",
        "bare-data": "data\n\n",
        "empty-data": "data: \n\n",
        "bad-utf8": "",
    }[kind]
    if kind == "bad-utf8":
        return b"data: \xff\xfe" + text.encode() + b"\n\n"
    return raw.encode()


@st.composite
def _streams(draw: st.DrawFn) -> bytes:
    stream = b"".join(draw(st.lists(_events(), max_size=25)))
    if draw(st.integers(0, 9)) == 0:  # now and then: line ends the fast path hands over
        ending = draw(st.sampled_from([b"\r\n", b"\r"]))
        at = draw(st.integers(0, len(stream)))
        stream = stream[:at] + stream[at:].replace(b"\n", ending)
    if draw(st.integers(0, 9)) == 0:
        stream = b"\xef\xbb\xbf" + stream
    return stream


def _reads(stream: bytes, cuts: list[int]) -> list[bytes]:
    points = sorted({cut % (len(stream) + 1) for cut in cuts})
    return [stream[a:b] for a, b in zip([0, *points], [*points, len(stream)], strict=True)]


def _outcome(feed: object, read: bytes) -> object:
    try:
        return feed(read)  # type: ignore[operator]
    except LlmError as exc:
        return ("failed", exc.failure)


@given(
    _streams(),
    st.lists(st.integers(min_value=0), max_size=20),
    st.one_of(st.none(), st.integers(1, 60)),
)
@example(b"\n\n\xef\xbb\xbfdata: x\n\n", [2], None)
@example(b": a\n", [], None)
@example(b"data: x\n\n\ndata: y\n\n", [], None)
@example(b"data: x\n\n\n\ndata: y\n\n", [8], 9)
def test_fast_framing_agrees_with_the_reference_read_for_read(
    stream: bytes, cuts: list[int], bound: int | None
) -> None:
    reference, fast = SseParser(bound), PayloadFraming(bound)
    read_so_far = b""
    for read in _reads(stream, cuts):
        read_so_far += read
        expected = _outcome(lambda data: [e.data for e in reference.feed(data)], read)
        got = _outcome(lambda data: [payload_text(p) for p in fast.feed(data)], read)
        assert got == expected
        if isinstance(expected, tuple):
            return  # both failed: the stream is over
        assert fast.done == reference.done
        if read_so_far.endswith((b"\n\n", b"\r\r", b"\r\n\r\n")) or fast.done:
            assert fast.comments == reference.comments
        assert fast.comments <= reference.comments or fast.done


def test_plain_events_come_as_their_bytes_and_others_as_the_reference_reads_them() -> None:
    fast = PayloadFraming()
    assert fast.feed(b'data: {"a": 1}\n\n: keep-alive\n\nevent: x\ndata: 2\n\ndata: 3') == [
        b'{"a": 1}',
        "2",
    ]
    assert fast.comments == 1
    assert fast.feed(b"\n\ndata: [DONE]\n\ndata: 4\n\n") == [b"3"]
    assert fast.done
    assert fast.feed(b"data: 5\n\n") == []


def test_a_carriage_return_hands_the_rest_of_the_stream_to_the_reference() -> None:
    fast = PayloadFraming()
    assert fast.feed(b"data: 1\n\ndata: 2\r\n") == ["1"]  # this read already
    assert fast.feed(b"\r\ndata: 3\n\n") == ["2", "3"]
    assert fast.feed(b"data: [DONE]\r\r") == []
    assert fast.done


def test_a_leading_byte_order_mark_is_skipped_as_the_reference_skips_it() -> None:
    fast = PayloadFraming()
    assert fast.feed(b"\xef\xbb") == []
    assert fast.feed(b"\xbfdata: 1\n\n") == ["1"]


def test_an_event_over_the_bound_fails_as_the_reference_fails() -> None:
    with pytest.raises(LlmError) as raised:
        PayloadFraming(8).feed(b"data: 123\n\n")
    assert raised.value.failure.code == "MALFORMED_RESPONSE"
    assert "over 8 bytes" in raised.value.failure.message
    with pytest.raises(LlmError):
        PayloadFraming(8).feed(b"data: 1234")  # an event that has not ended yet counts too
    assert PayloadFraming(8).feed(b"data: 1\n\n") == [b"1"]


def test_done_inside_an_event_of_another_shape_ends_the_stream() -> None:
    fast = PayloadFraming()
    assert fast.feed(b"event: end\ndata: [DONE]\n\ndata: 1\n\n") == []
    assert fast.done


@pytest.mark.parametrize(
    ("payload", "value"),
    [
        (b'{"a": "\xc3\xa9"}', {"a": "é"}),
        ('{"a": 1}', {"a": 1}),
        (b'{"a": NaN}', None),  # orjson refuses, json.loads reads it
        (b'{"a": "\xff"}', {"a": "\ufffd"}),  # invalid UTF-8, replaced as the parser does
    ],
)
def test_decode_payload_reads_what_decode_json_reads_from_the_reference_text(
    payload: bytes | str, value: object
) -> None:
    expected = decode_json(payload_text(payload))
    assert decode_payload(payload, "X") == expected or value is None
    if value is not None:
        assert expected == value


def test_a_payload_that_is_not_json_fails_naming_the_sender_and_quoting_it() -> None:
    with pytest.raises(LlmError) as raised:
        decode_payload(b"not json \xff", "DeepSeek")
    assert raised.value.failure.code == "MALFORMED_RESPONSE"
    assert raised.value.failure.message == (
        "DeepSeek sent an event that is not JSON: not json \ufffd"
    )
