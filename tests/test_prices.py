"""Prices by the hour: flat prices, peak/off-peak schedules, and the price book that prefers
configured prices to those an adapter publishes."""

from __future__ import annotations

from collections.abc import AsyncIterator
from datetime import UTC, datetime, timedelta, timezone

from hypothesis import given
from hypothesis import strategies as st

from dsh import Harness
from dsh.llm._service import ModelInfo
from dsh.values._chunks import StreamChunk, TokenUsage
from dsh.values._request import LlmRequest
from dsh.values._tokens import PeakHours, Price, PriceBook, PriceSchedule

PEAK = Price(input=2.0, output=8.0, cache_read=0.5)
OFF_PEAK = Price(input=1.0, output=4.0, cache_read=0.25)
# 10:00-12:00 on a clock two hours ahead of UTC, Monday to Friday.
HOURS = PeakHours(windows=((600, 720),), utc_offset_minutes=120)
SCHEDULE = PriceSchedule(PEAK, OFF_PEAK, HOURS)
MILLION = TokenUsage(1_000_000, 1_000_000, cache_read_tokens=1_000_000)


def at(text: str) -> float:
    """Epoch seconds of a UTC time like ``2026-11-30 08:00``."""
    return datetime.fromisoformat(text).replace(tzinfo=UTC).timestamp()


def test_a_flat_price_is_the_same_at_every_hour() -> None:
    assert PEAK.price_at(at("2026-11-30 08:00")) is PEAK
    assert PEAK.price_at(0.0) is PEAK


def test_peak_hours_are_read_on_the_provider_s_clock() -> None:
    # Monday 2026-11-30: 08:00 UTC is 10:00 on the provider's clock.
    assert not HOURS.contains(at("2026-11-30 07:59:59"))
    assert HOURS.contains(at("2026-11-30 08:00"))
    assert HOURS.contains(at("2026-11-30 09:59:59"))
    assert not HOURS.contains(at("2026-11-30 10:00"))
    # Saturday: no peak at all.
    assert not HOURS.contains(at("2026-12-05 09:00"))
    # The weekday is the provider's too: Sunday 23:00 UTC is Monday 01:00 there.
    night = PeakHours(windows=((0, 120),), utc_offset_minutes=120)
    assert night.contains(at("2026-11-29 23:00"))
    assert not night.contains(at("2026-12-04 23:00"))  # Saturday 01:00 there


def test_weekdays_can_be_chosen() -> None:
    every_day = PeakHours(windows=((0, 1440),), weekdays=range(7))
    assert every_day.weekdays == frozenset(range(7))
    assert every_day.contains(at("2026-12-05 12:00"))


def test_a_schedule_charges_the_price_of_the_hour() -> None:
    assert SCHEDULE.price_at(at("2026-11-30 08:30")) == PEAK
    assert SCHEDULE.price_at(at("2026-11-30 10:30")) == OFF_PEAK
    assert SCHEDULE.price_at(at("2026-11-30 08:30")).cost(MILLION) == 10.5


@given(st.floats(min_value=0, max_value=4_102_444_800))  # 1970 to 2100
def test_every_moment_has_one_of_the_two_prices(when: float) -> None:
    price = SCHEDULE.price_at(when)
    assert price == (PEAK if HOURS.contains(when) else OFF_PEAK)
    local = datetime.fromtimestamp(when, UTC)
    if local.weekday() == 6 or (local.weekday() == 5 and local.hour < 22):
        assert price == OFF_PEAK  # the weekend, on the provider's clock


def test_the_price_book_prefers_configured_prices() -> None:
    published = {"m": SCHEDULE, "n": SCHEDULE}
    book = PriceBook({"m": Price(1.0, 1.0)}, published.get)
    peak_hour = at("2026-11-30 08:30")
    assert book.cost("m", MILLION, peak_hour) == 2.0
    assert book.cost("n", MILLION, peak_hour) == 10.5
    assert book.cost("x", MILLION, peak_hour) is None
    assert book.cost(None, MILLION, peak_hour) is None
    assert PriceBook({}).cost("n", MILLION, peak_hour) is None


class Described:
    """An adapter that publishes its model's metadata."""

    def model_info(self, model: str) -> ModelInfo | None:
        return ModelInfo(context_window=10, pricing=SCHEDULE) if model == "d" else None

    async def stream(self, request: LlmRequest) -> AsyncIterator[StreamChunk]:
        yield  # type: ignore[misc]  # never called


class Silent:
    async def stream(self, request: LlmRequest) -> AsyncIterator[StreamChunk]:
        yield  # type: ignore[misc]  # never called


def test_the_llm_service_reports_what_adapters_publish() -> None:
    harness = Harness(load_entrypoints=False)
    harness.llm.register_adapter(["d", "e"], Described())
    harness.llm.register_adapter(["s"], Silent())
    assert harness.llm.pricing("d") is SCHEDULE
    assert harness.llm.pricing("e") is None
    assert harness.llm.pricing("s") is None
    assert harness.llm.pricing("unknown") is None
    info = harness.llm.model_info("d")
    assert info is not None and (info.image_input, info.thinking_default) == (None, None)


@given(
    seconds=st.integers(min_value=-4_000_000_000, max_value=40_000_000_000),
    offset=st.integers(min_value=-720, max_value=840),
    start=st.integers(min_value=0, max_value=1439),
    length=st.integers(min_value=1, max_value=1440),
    weekdays=st.frozensets(st.integers(min_value=0, max_value=6)),
)
def test_peak_hours_count_the_days_as_the_calendar_does(
    seconds: int, offset: int, start: int, length: int, weekdays: frozenset[int]
) -> None:
    """``contains`` counts days and minutes from the epoch; the calendar agrees. (A quarter
    second past: ``fromtimestamp`` rounds to microseconds, which the count does not.)"""
    when = seconds + 0.25
    hours = PeakHours(((start, start + length),), weekdays, utc_offset_minutes=offset)
    local = datetime.fromtimestamp(when, timezone(timedelta(minutes=offset)))
    minute = local.hour * 60 + local.minute
    expected = local.weekday() in weekdays and start <= minute < start + length
    assert hours.contains(when) == expected
