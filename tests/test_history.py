"""The derived history kept up to date as events arrive equals the history derived from the
whole log at once, whatever the events (compaction summaries and prunes included), wherever it
is asked for, and after a fork or a resume; and the tuple a request carries is built again only
when the history changed."""

from __future__ import annotations

import gc
from typing import Any

from hypothesis import given, settings
from hypothesis import strategies as st

from dsh.session._session import Session, context_message, derive_history, summary_message
from dsh.values._content import AgentSource, Message, Text, ToolResult
from dsh.values._events import (
    AssistantMessage,
    SessionEvent,
    StepStart,
    ToolResultEvent,
    UserMessage,
)
from dsh.values._rare_events import (
    ContextMessage,
    ElidedResult,
    HistoryPrune,
    HistorySummary,
    SteeringMessage,
)

CALL_IDS = ("a", "b", "c")
texts = st.text(alphabet="xyz ", max_size=4).map(lambda t: (Text(t),))
events: st.SearchStrategy[Any] = st.one_of(
    texts.map(UserMessage),
    texts.map(lambda c: AssistantMessage(1, 1, c)),
    st.builds(lambda i, c: ToolResultEvent(1, 1, i, c), st.sampled_from(CALL_IDS), texts),
    texts.map(lambda c: SteeringMessage(1, c)),
    texts.map(lambda c: ContextMessage(c, AgentSource("boss"))),
    st.just(StepStart(1, 1)),
    st.builds(
        lambda upto, s: HistorySummary(upto, s, 10, 1),
        st.integers(0, 30),
        st.text("sum", max_size=3),
    ),
    st.lists(st.sampled_from(CALL_IDS), max_size=2).map(
        lambda ids: HistoryPrune(tuple(ElidedResult(i, f"elided {i}") for i in ids))
    ),
)
#: An event to append, or None: ask for the history here.
steps = st.lists(st.none() | events, max_size=40)


def spec(log: list[SessionEvent]) -> tuple[Message, ...]:
    """The history as the contract states it."""
    return tuple(m for _, m in spec_pairs(log))


def spec_pairs(log: list[SessionEvent]) -> list[tuple[int, Message]]:
    """The history as the contract states it, each message with the seq of its event, written
    out plainly."""
    derived: list[tuple[int, Message]] = []
    for event in log:
        data = event.data
        if isinstance(data, HistorySummary):
            kept = [(seq, m) for seq, m in derived if seq >= data.replaces_upto]
            derived = [(event.seq, summary_message(data.summary)), *kept]
        elif isinstance(data, HistoryPrune):
            notes = {e.call_id: e.note for e in data.elided}
            derived = [(seq, elided(m, notes)) for seq, m in derived]
        elif isinstance(data, UserMessage | SteeringMessage):
            derived.append((event.seq, Message("user", data.content)))
        elif isinstance(data, AssistantMessage):
            derived.append((event.seq, Message("assistant", data.content)))
        elif isinstance(data, ToolResultEvent):
            block = ToolResult(data.call_id, data.content, data.is_error)
            derived.append((event.seq, Message("user", (block,))))
        elif isinstance(data, ContextMessage):
            derived.append((event.seq, context_message(data.content, data.source)))
    return derived


def elided(message: Message, notes: dict[str, str]) -> Message:
    return Message(
        message.role,
        tuple(
            ToolResult(b.tool_call_id, (Text(notes[b.tool_call_id]),), b.is_error)
            if isinstance(b, ToolResult) and b.tool_call_id in notes
            else b
            for b in message.content
        ),
    )


@settings(max_examples=200, deadline=None)
@given(steps, st.integers(0, 40))
def test_incremental_history_equals_the_whole_derivation(plan: list[Any], cut: int) -> None:
    session = Session("s")
    for step in plan:
        if step is None:
            assert session.derive_messages() == spec(list(session.events))
        else:
            session.append(step)
    log = list(session.events)
    assert session.derive_messages() == spec(log)
    assert list(session.history()) == spec_pairs(log)
    assert derive_history(log) == spec_pairs(log)
    # A resumed session (every event seeded) and a fork (a prefix seeded) derive the same.
    assert Session("r", log, persisted=len(log)).derive_messages() == spec(log)
    fork = Session("f", log[:cut])
    assert fork.derive_messages() == spec(log[:cut])
    for event in log[cut:]:  # the fork, continued as the original went on
        fork.append(event.data)
    assert fork.derive_messages() == spec(log)


def test_the_history_tuple_is_built_again_only_after_a_change() -> None:
    session = Session("s")
    assert session.derive_messages() == ()
    session.append(UserMessage((Text("q"),)))
    first = session.derive_messages()
    assert session.derive_messages() is first
    session.append(StepStart(1, 1))  # no message: the history is the same tuple
    assert session.derive_messages() is first
    session.append(AssistantMessage(1, 1, (Text("a"),)))
    second = session.derive_messages()
    assert second is not first and second[:1] == first
    assert second[0] is first[0]  # the messages themselves are kept, not rebuilt
    session.append(HistorySummary(3, "short", 10, 1))  # replaces seq 0-2
    assert session.derive_messages() == (summary_message("short"),)


def test_the_history_keeps_no_object_per_message_besides_the_message() -> None:
    """A session keeps its history for as long as it lives: a pair (seq, message) per message
    would be one more object the collector tracks, per message, per session."""
    session = Session("s")
    for i in range(50):
        session.append(UserMessage((Text(f"m{i}"),)))
    messages = session.derive_messages()
    assert len(session.history()) == 50
    seen, todo, held = {id(session)}, [session], []
    while todo:  # what the session holds, down to (not into) its messages
        for found in gc.get_referents(todo.pop()):
            if id(found) in seen or not gc.is_tracked(found) or isinstance(found, type | Message):
                continue
            seen.add(id(found))
            held.append(found)
            todo.append(found)
    with_messages = [o for o in held if isinstance(o, tuple) and any(type(x) is Message for x in o)]
    assert with_messages == [messages]  # the tuple a request carries, and no pair
