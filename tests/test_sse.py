"""The public SSE parser: framing rules, [DONE], and invariance under any split of the stream."""

from __future__ import annotations

import pytest
from hypothesis import given
from hypothesis import strategies as st

from dsh.llm._sse import DONE, SseEvent, SseParser, parse_sse
from dsh.values._errors import LlmError


def feed_all(parser: SseParser, *reads: bytes) -> list[SseEvent]:
    return [event for data in reads for event in parser.feed(data)]


def test_lf_framed_events() -> None:
    assert parse_sse(b"data: one\n\ndata: two\n\n") == [SseEvent("one"), SseEvent("two")]


def test_crlf_and_cr_line_endings() -> None:
    assert parse_sse(b"data: a\r\n\r\ndata: b\r\rdata: c\n\r\n") == [
        SseEvent("a"),
        SseEvent("b"),
        SseEvent("c"),
    ]


def test_crlf_split_between_two_reads_is_one_line_end() -> None:
    parser = SseParser()
    assert feed_all(parser, b"data: a\r", b"\n\r", b"\ndata: b\r\n\r\n") == [
        SseEvent("a"),
        SseEvent("b"),
    ]


def test_a_cr_ending_a_read_is_a_whole_line_end_when_no_lf_follows() -> None:
    parser = SseParser()
    assert feed_all(parser, b"data: a\r", b"\rdata: b\r", b"\r") == [SseEvent("a"), SseEvent("b")]


def test_a_read_of_only_the_lf_of_a_crlf_adds_nothing() -> None:
    parser = SseParser()
    assert feed_all(parser, b"data: a\r", b"\n", b"\r\n") == [SseEvent("a")]


def test_multi_line_data_is_joined_with_newlines() -> None:
    assert parse_sse(b"data: first\ndata:second\ndata\n\n") == [SseEvent("first\nsecond\n")]


def test_the_space_after_the_colon_is_optional_and_only_one_is_removed() -> None:
    assert parse_sse(b"data:x\n\ndata:  y\n\n") == [SseEvent("x"), SseEvent(" y")]


def test_comments_and_keep_alives_are_counted_not_returned() -> None:
    parser = SseParser()
    events = parser.feed(b": keep-alive\n\n:\n\ndata: x\n: inside an event\n\n")
    assert events == [SseEvent("x")]
    assert parser.comments == 3


def test_event_id_and_retry_fields() -> None:
    parser = SseParser()
    events = parser.feed(b"event: ping\nid: 7\nretry: 1500\ndata: x\n\ndata: y\n\n")
    assert events == [SseEvent("x", "ping", "7"), SseEvent("y", "message", "7")]
    assert parser.retry_ms == 1500


def test_invalid_id_and_retry_values_and_unknown_fields_are_ignored() -> None:
    parser = SseParser()
    events = parser.feed(b"id: a\0b\nretry: soon\nfoo: bar\ndata: x\n\n")
    assert events == [SseEvent("x")]
    assert parser.retry_ms is None


def test_an_event_without_data_is_not_dispatched() -> None:
    assert parse_sse(b"event: nothing\n\ndata: x\n\n") == [SseEvent("x")]


def test_done_ends_the_stream_and_everything_after_it_is_ignored() -> None:
    parser = SseParser()
    events = parser.feed(b"data: a\n\ndata: [DONE]\n\ndata: b\n\n")
    assert events == [SseEvent("a")]
    assert parser.done
    assert parser.feed(b"data: c\n\n") == []


def test_done_is_only_the_exact_data() -> None:
    parser = SseParser()
    assert parser.feed(b"data: [DONE]x\n\ndata: [DONE] ]\n\n") == [
        SseEvent("[DONE]x"),
        SseEvent("[DONE] ]"),
    ]
    assert not parser.done


@pytest.mark.parametrize(
    "frame", [b"data: [DONE] \n\n", b"data:[DONE]\t\r\n\r\n", b"data:  [DONE]\n\n"]
)
def test_done_with_whitespace_around_it_ends_the_stream_as_proxies_send_it(frame: bytes) -> None:
    parser = SseParser()
    assert parser.feed(frame + b"data: later\n\n") == []
    assert parser.done


def test_an_unterminated_final_event_is_never_dispatched() -> None:
    parser = SseParser()
    assert parser.feed(b"data: a\n\ndata: b\n") == [SseEvent("a")]
    assert parser.feed(b"") == []


def test_a_leading_byte_order_mark_is_skipped_even_when_split() -> None:
    parser = SseParser()
    assert feed_all(parser, b"\xef\xbb", b"\xbfdata: a\n\n") == [SseEvent("a")]
    assert parse_sse(b"data: \xef\xbb\xbfa\n\n") == [SseEvent("\ufeffa")]


def test_multi_byte_characters_split_across_reads() -> None:
    raw = "data: 北京 😊\n\n".encode()
    parser = SseParser()
    assert feed_all(parser, *(raw[i : i + 1] for i in range(len(raw)))) == [SseEvent("北京 😊")]


def test_invalid_utf8_is_replaced_not_fatal() -> None:
    assert parse_sse(b"data: \xff\n\n") == [SseEvent("\ufffd")]


def test_long_lines_fed_byte_by_byte() -> None:
    payload = "x" * 5000
    raw = f"data: {payload}\n\n".encode()
    parser = SseParser()
    assert feed_all(parser, *(raw[i : i + 1] for i in range(len(raw)))) == [SseEvent(payload)]


# -- the property: any split of the byte stream into reads gives the same events ----------------

_LINE_ENDS = st.sampled_from(["\n", "\r\n", "\r"])
_TEXT = st.text(
    alphabet=st.characters(blacklist_characters="\r\n", blacklist_categories=["Cs"]), max_size=12
)


@st.composite
def _lines(draw: st.DrawFn) -> str:
    kind = draw(st.sampled_from(["data", "data-nospace", "event", "id", "comment", "blank"]))
    text = draw(_TEXT)
    line = {
        "data": f"data: {text}",
        "data-nospace": f"data:{text}",
        "event": f"event: {text}",
        "id": f"id: {text}",
        "comment": f": {text}",
        "blank": "",
    }[kind]
    return line + draw(_LINE_ENDS)


@st.composite
def _streams(draw: st.DrawFn) -> bytes:
    lines = draw(st.lists(_lines(), max_size=30))
    if draw(st.booleans()):
        lines.insert(draw(st.integers(0, len(lines))), f"\ndata: {DONE}\n\n")
    return "".join(lines).encode()


@given(_streams(), st.lists(st.integers(min_value=0), max_size=20))
def test_any_split_into_reads_gives_identical_events(stream: bytes, cuts: list[int]) -> None:
    whole = SseParser()
    expected = whole.feed(stream)
    points = sorted({cut % (len(stream) + 1) for cut in cuts})
    reads = [stream[a:b] for a, b in zip([0, *points], [*points, len(stream)], strict=True)]
    split = SseParser()
    assert feed_all(split, *reads) == expected
    assert (split.done, split.comments) == (whole.done, whole.comments)


# -- the size bound of one event ------------------------------------------------------------------


def test_an_event_over_max_event_bytes_fails_the_stream_as_malformed() -> None:
    parser = SseParser(max_event_bytes=20)
    assert parser.feed(b"data: 0123456789\n\n") == [SseEvent("0123456789")]
    with pytest.raises(LlmError) as raised:
        parser.feed(b"data: 0123456789\ndata: 0123456789\n\n")
    assert raised.value.failure.code == "MALFORMED_RESPONSE"
    assert "over 20 bytes (max_event_bytes)" in raised.value.failure.message


def test_a_line_that_never_ends_is_bounded_too() -> None:
    parser = SseParser(max_event_bytes=64)
    parser.feed(b"data: " + b"x" * 50)
    with pytest.raises(LlmError):
        parser.feed(b"x" * 20)


def test_the_bound_is_per_event_and_counts_comments() -> None:
    parser = SseParser(max_event_bytes=16)
    many = b"".join(b"data: abc\n\n: keep-alive\n\n" for _ in range(100))
    assert len(parser.feed(many)) == 100
    with pytest.raises(LlmError):
        parser.feed(b": a very long comment line\n\n")


def test_nothing_after_done_counts_and_no_bound_by_default() -> None:
    bounded = SseParser(max_event_bytes=16)
    assert bounded.feed(b"data: [DONE]\n\n" + b"x" * 100) == []
    assert bounded.done
    assert SseParser().feed(b"data: " + b"x" * 100_000 + b"\n\n") == [SseEvent("x" * 100_000)]


@given(_streams(), st.lists(st.integers(min_value=0), max_size=10))
def test_the_bound_fails_exactly_when_an_event_is_over_it(stream: bytes, cuts: list[int]) -> None:
    # The largest event, counted as the parser counts it: its lines, each with one line end.
    largest = max(
        (sum(len(line) + 1 for line in event.split(b"\n") if line) for event in _events(stream)),
        default=0,
    )
    points = sorted({cut % (len(stream) + 1) for cut in cuts})
    reads = [stream[a:b] for a, b in zip([0, *points], [*points, len(stream)], strict=True)]
    assert feed_all(SseParser(max_event_bytes=largest), *reads) == parse_sse(stream)
    if largest:
        with pytest.raises(LlmError):
            feed_all(SseParser(max_event_bytes=largest - 1), stream)


def _events(stream: bytes) -> list[bytes]:
    """The raw events of a stream up to [DONE], line ends made LF, split at blank lines."""
    text = stream.replace(b"\r\n", b"\n").replace(b"\r", b"\n")
    events = text.split(b"\n\n")
    for position, event in enumerate(events):
        # [DONE] ends the stream when it is the event's whole data (its data lines joined).
        data = [
            line.partition(b":")[2].removeprefix(b" ")
            for line in event.split(b"\n")
            if line.partition(b":")[0] == b"data"
        ]
        if data and b"\n".join(data).strip() == DONE.encode():
            return events[: position + 1]
    return events


def test_only_ascii_whitespace_may_stand_around_done() -> None:
    # str.strip() would also take U+001F; a control character makes the data something else.
    parser = SseParser()
    events = parser.feed(b"data: \x1f[DONE]\n\ndata: [DONE] \r\n\r\n")
    assert events == [SseEvent("\x1f[DONE]")]
    assert parser.done
