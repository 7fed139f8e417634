"""HistoryMemo: per-message results over histories that grow at the end, computed once per
message and session, equal to computing them afresh whatever the sequence of histories."""

from __future__ import annotations

import gc

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from dsh.values._content import Message, Text
from dsh.values._memo import HistoryMemo, HistoryTotal
from dsh.values._request import LlmRequest
from dsh.values._tokens import TokenMeter, estimate_tokens, message_tokens

POOL = tuple(Message("user", (Text(f"m{i}" * i),)) for i in range(8))


class Counting:
    """``len`` of a message's first text, counting the calls."""

    def __init__(self) -> None:
        self.calls: list[Message] = []

    def __call__(self, message: Message) -> int:
        self.calls.append(message)
        text = message.content[0]
        assert isinstance(text, Text)
        return len(text.text)


def test_a_grown_history_computes_only_its_new_messages() -> None:
    each = Counting()
    memo = HistoryMemo(each)
    assert memo.results("s", POOL[:3]) == [0, 2, 4]
    assert memo.results("s", POOL[:5]) == [0, 2, 4, 6, 8]
    assert each.calls == list(POOL[:5])
    assert memo.results("s", POOL[:5]) == [0, 2, 4, 6, 8]  # the same history: nothing new
    assert len(each.calls) == 5


def test_a_rewritten_history_reuses_the_messages_it_kept() -> None:
    each = Counting()
    memo = HistoryMemo(each)
    memo.results("s", POOL[:4])
    summary = Message("user", (Text("summary"),))
    assert memo.results("s", (summary, POOL[2], POOL[3])) == [7, 4, 6]
    assert each.calls == [*POOL[:4], summary]
    # An equal message that is another object is taken for the same (its result is the same).
    assert memo.results("s", (summary, Message("user", (Text("m2m2"),)), POOL[3], POOL[4]))[-1] == 8


def test_keys_are_apart_none_remembers_nothing_and_forget_drops_a_key() -> None:
    each = Counting()
    memo = HistoryMemo(each)
    memo.results("a", POOL[:2])
    memo.results("b", POOL[:2])
    assert len(each.calls) == 4 and len(memo) == 2 and "a" in memo and "c" not in memo
    memo.results(None, POOL[:2])
    memo.results(None, POOL[:2])
    assert len(each.calls) == 8 and len(memo) == 2
    memo.forget("a")
    memo.forget("unknown")
    assert len(memo) == 1
    memo.results("a", POOL[:2])
    assert len(each.calls) == 10


def test_the_least_recently_used_keys_go_first_past_the_limit() -> None:
    each = Counting()
    memo = HistoryMemo(each, limit=4)
    memo.results("a", POOL[:2])
    memo.results("b", POOL[:2])
    memo.results("a", POOL[:3])  # 5 held: "b", used least recently, is forgotten
    assert len(memo) == 1
    memo.results("c", POOL[:6])  # alone past the limit: kept, "a" forgotten
    assert len(memo) == 1
    memo.results("c", POOL[:6])
    assert len(each.calls) == 2 + 2 + 1 + 6
    memo.forget("c")
    memo.results("d", POOL[:1])
    memo.results("e", POOL[:1])
    assert len(memo) == 2  # the count held went down with what was forgotten


def test_a_failing_computation_forgets_the_key_and_keeps_the_count_right() -> None:
    memo = HistoryMemo(Counting(), limit=4)
    memo.results("a", POOL[:3])
    with pytest.raises(IndexError):
        memo.results("a", (*POOL[:3], Message("user", ())))  # no text: Counting fails
    assert "a" not in memo
    memo.results("b", POOL[:2])
    memo.results("c", POOL[:2])
    assert len(memo) == 2  # 4 held, not 7: what "a" held left the count with it


histories = st.lists(st.lists(st.sampled_from(POOL), max_size=8), min_size=1, max_size=12)


@settings(max_examples=100, deadline=None)
@given(histories, st.lists(st.sampled_from("ab"), min_size=12, max_size=12), st.integers(1, 20))
def test_results_equal_computing_afresh(
    plan: list[list[Message]], keys: list[str], limit: int
) -> None:
    memo = HistoryMemo(Counting(), limit=limit)
    fresh = Counting()
    for history, key in zip(plan, keys, strict=False):
        assert memo.results(key, history) == [fresh(m) for m in history]


def test_a_total_adds_the_new_messages_of_a_grown_history_and_sums_a_rewritten_one() -> None:
    each = Counting()
    totals = HistoryTotal(each, limit=6)
    assert totals.total("s", POOL[:3]) == 0 + 2 + 4
    assert totals.total("s", POOL[:5]) == 0 + 2 + 4 + 6 + 8
    assert each.calls == list(POOL[:5])  # grown: only its new messages
    assert totals.total("s", POOL[1:3]) == 2 + 4  # rewritten: summed afresh
    assert len(each.calls) == 7
    assert totals.total(None, POOL[:2]) == 2 and "s" in totals and len(totals) == 1
    totals.total("t", POOL[:5])  # 7 held: "s", used least recently, is forgotten
    assert "s" not in totals and len(totals) == 1
    totals.forget("t")
    totals.forget("unknown")
    assert len(totals) == 0


@settings(max_examples=100, deadline=None)
@given(
    histories,
    st.lists(st.sampled_from(["a", "b", None]), min_size=12, max_size=12),
    st.integers(1, 20),
)
def test_totals_equal_summing_afresh(
    plan: list[list[Message]], keys: list[str | None], limit: int
) -> None:
    """The reference: the sum of ``each`` over the whole history, every time."""
    totals = HistoryTotal(Counting(), limit=limit)
    fresh = Counting()
    for history, key in zip(plan, keys, strict=False):
        assert totals.total(key, history) == sum(fresh(m) for m in history)


def test_the_token_meter_estimates_each_message_of_a_session_once() -> None:
    meter = TokenMeter()
    first = LlmRequest("m", POOL[:3], system="sys", session_id="s")
    grown = LlmRequest("m", POOL[:6], system="sys", session_id="s")
    assert meter.raw(first) == estimate_tokens(first)
    assert meter.raw(grown) == estimate_tokens(grown)
    assert meter.raw(grown) == len("sys") // 4 + 1 + sum(map(message_tokens, POOL[:6]))
    meter.forget("s")
    assert meter.raw(LlmRequest("m", POOL[:2], session_id="s")) == estimate_tokens(
        LlmRequest("m", POOL[:2])
    )


def test_hashing_a_message_leaves_no_object_for_the_collector() -> None:
    """A history's messages are memoised by identity, and the adapter's cache of wire forms
    hashes each message once: a cached hash (attrs keeps it in an ``int`` subclass the
    collector tracks) would be one more tracked object per message, for every message a
    session keeps, and save nothing."""
    message = Message("user", (Text("hello"),))
    assert hash(message) == hash(Message("user", (Text("hello"),)))
    kept = {id(held) for held in gc.get_referents(message) if gc.is_tracked(held)}
    assert kept == {id(Message), id(message.content)}  # its class and its blocks, no more
