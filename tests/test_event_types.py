"""Event data classes carry their type tag, and ``Session.append`` takes the value alone."""

from __future__ import annotations

import json
import typing
import weakref
from typing import Any

import pytest
from attrs import frozen

from dsh.session._codec import EventCodec
from dsh.session._session import Session
from dsh.values._content import Text
from dsh.values._errors import DshError
from dsh.values._events import (
    CORE_EVENT_TYPES,
    RawEventData,
    SessionEvent,
    StepBoundary,
    StepEnd,
    StepStart,
    TurnStart,
    UserMessage,
    event_type_of,
)
from dsh.values._rare_events import CoreEventData, EventData
from dsh_plugins.budgets import BudgetExceeded, BudgetsPlugin
from dsh_plugins.fallback import FallbackEvent, FallbackPlugin
from dsh_plugins.permissions import ApprovalAsked, PermissionsPlugin

_PLUGIN_CLASSES = {BudgetExceeded, FallbackEvent, ApprovalAsked}


@frozen
class _Untagged:
    """A third-party event class registered without a ``type`` class variable."""

    n: int


def test_every_core_class_is_registered_under_its_own_tag() -> None:
    for name, cls in CORE_EVENT_TYPES.items():
        assert cls.type == name
    assert CORE_EVENT_TYPES["step/start"] is StepStart
    assert CORE_EVENT_TYPES["step/end"] is StepEnd


@pytest.mark.parametrize("plugin", [BudgetsPlugin(), FallbackPlugin(), PermissionsPlugin()])
def test_built_in_plugins_register_their_classes_under_their_tags(plugin: Any) -> None:
    registered: dict[str, type[Any]] = {}
    plugin.dsh_register_event_types(lambda name, cls: registered.__setitem__(name, cls))
    assert registered
    for name, cls in registered.items():
        assert cls.type == name
    assert set(registered.values()) <= _PLUGIN_CLASSES


def test_the_step_split_keeps_the_stored_json() -> None:
    codec = EventCodec()
    for cls in (StepStart, StepEnd):
        event = SessionEvent(cls.type, 3, 1.5, cls(2, 4))
        stored = {"type": cls.type, "seq": 3, "time": 1.5, "data": {"turn": 2, "step": 4}}
        assert codec.encode(event) == stored
        assert codec.encode(SessionEvent(cls.type, 3, 1.5, StepBoundary(2, 4))) == stored
        assert codec.decode(json.loads(json.dumps(stored))) == event
        assert isinstance(cls(2, 4), StepBoundary)


def test_the_tag_of_an_untagged_class_is_its_one_registration() -> None:
    registry = {**CORE_EVENT_TYPES, "kit/untagged": _Untagged}
    assert event_type_of(_Untagged(1), registry) == "kit/untagged"
    assert event_type_of(TurnStart(1), registry) == "turn/start"
    with pytest.raises(DshError, match="no event type is registered"):
        event_type_of(_Untagged(1))
    with pytest.raises(DshError, match=r"registered as \['a', 'b'\]"):
        event_type_of(_Untagged(1), {"a": _Untagged, "b": _Untagged})
    with pytest.raises(DshError, match="give the class a 'type: ClassVar"):
        event_type_of(StepBoundary(1, 1))


def test_append_takes_the_value_alone() -> None:
    session = Session("s", types={**CORE_EVENT_TYPES, "kit/untagged": _Untagged})
    first = session.append(UserMessage((Text("hi"),)))
    second = session.append(_Untagged(7))
    assert [(e.type, e.seq) for e in session.events] == [("user/message", 0), ("kit/untagged", 1)]
    assert (first.data, second.data) == (UserMessage((Text("hi"),)), _Untagged(7))
    with pytest.raises(DshError, match="cannot tell the event type"):
        Session("t").append(_Untagged(7))


def test_raw_data_is_appended_only_for_a_type_nobody_registered() -> None:
    session = Session("s")
    event = session.append_raw("gone/plugin", {"kept": [1, "two"]})
    assert (event.type, event.data, event.seq) == (
        "gone/plugin",
        RawEventData({"kept": [1, "two"]}),
        0,
    )
    assert EventCodec().encode(event)["data"] == {"kept": [1, "two"]}
    with pytest.raises(DshError, match=r"registered as TurnStart: append a TurnStart"):
        session.append_raw("turn/start", {"turn": 1})
    with pytest.raises(DshError, match=r"no type of its own: append it with session.append_raw"):
        session.append(event.data)
    assert len(session) == 1


def test_the_core_union_names_every_built_in_class_once() -> None:
    members = typing.get_args(CoreEventData)
    assert len(set(members)) == len(members) == len(CORE_EVENT_TYPES)
    assert set(members) == set(CORE_EVENT_TYPES.values())
    assert set(typing.get_args(EventData)) >= {*members, RawEventData}


def test_an_unknown_type_loaded_and_stored_again_is_unchanged() -> None:
    codec = EventCodec()
    stored = {"type": "gone/plugin", "seq": 0, "time": 2.5, "data": {"a": [1, {"b": None}]}}
    event = codec.decode(json.loads(json.dumps(stored)))
    assert event.data == RawEventData({"a": [1, {"b": None}]})
    assert json.loads(json.dumps(codec.encode(event))) == stored
    assert Session("s", [event]).events[0].data == event.data


def test_what_a_log_holds_most_of_carries_no_weak_reference_slot() -> None:
    """Events, assistant chunks and the chunks in them are most objects an agent keeps alive:
    without a weak-reference slot each costs 8 bytes less (issue 16, W4)."""
    from dsh.values._chunks import (
        BlockEnd,
        BlockStart,
        Finish,
        FinishStop,
        ReasoningDelta,
        TextDelta,
        TokenUsage,
        ToolCallDelta,
        UsageChunk,
    )
    from dsh.values._events import AssistantChunk

    chunk = TextDelta(0, "a")
    values: list[Any] = [
        SessionEvent(AssistantChunk.type, 0, 1.0, AssistantChunk(1, 1, chunk)),
        AssistantChunk(1, 1, chunk),
        chunk,
        ReasoningDelta(0, "r"),
        ToolCallDelta(0, "c", "{}"),
        BlockStart(0, "text"),
        BlockEnd(0, Text("a")),
        UsageChunk(TokenUsage(1, 2)),
        TokenUsage(1, 2),
        Finish(FinishStop()),
    ]
    for value in values:
        with pytest.raises(TypeError):
            weakref.ref(value)
