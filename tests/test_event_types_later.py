"""The built-in event types defined when first needed (:mod:`dsh.values._rare_events`) are
answered as the eager definition answered them: the registry by tag, the public names, and
every test that tells them apart by their tag instead of their class (the session's history
fold, ``for_events``, ``select``, the budgets' bill), for every event type, the plugins' and an
unknown one's included."""

from __future__ import annotations

import sys
import types
import typing
from typing import Any

import pytest
from attrs import frozen
from hypothesis import given, settings
from hypothesis import strategies as st

from dsh.hooks._caller import _takes
from dsh.hooks._markers import for_events
from dsh.session import _session
from dsh.session._codec import EventCodec
from dsh.session._session import Session
from dsh.testing.stores import event_data
from dsh.values import _events
from dsh.values._events import (
    CORE_EVENT_TYPES,
    LATER,
    AssistantMessage,
    EventTypes,
    RawEventData,
    SessionEvent,
    ToolResultEvent,
    UserMessage,
    defined_classes,
    event_type_of,
)
from dsh.values._rare_events import (
    ContextMessage,
    CoreEventData,
    HistoryPrune,
    HistorySummary,
    SteeringMessage,
    SubagentEnd,
)
from dsh_plugins import budgets
from dsh_plugins.budgets import BudgetExceeded
from dsh_plugins.fallback import FallbackEvent
from dsh_plugins.permissions import ApprovalAsked

#: The eager definition: every built-in class by its tag, from the union of all of them.
REFERENCE: dict[str, type[Any]] = {cls.type: cls for cls in typing.get_args(CoreEventData)}


@frozen
class _Prune(HistoryPrune):
    """A plugin's subclass of a rare type, keeping its tag."""

    why: str = ""


#: Every class an event's data may be of: the core's, the default plugins', a subclass.
CLASSES = [*REFERENCE.values(), BudgetExceeded, FallbackEvent, ApprovalAsked, _Prune]

#: What the session's history fold and the budgets tested with ``isinstance`` before.
OLD_HISTORY_DATA = (
    UserMessage,
    SteeringMessage,
    AssistantMessage,
    ToolResultEvent,
    ContextMessage,
    HistorySummary,
    HistoryPrune,
)
OLD_BILLED = (AssistantMessage, HistorySummary, SubagentEnd)


def _codec() -> EventCodec:
    codec = EventCodec()
    for cls in (BudgetExceeded, FallbackEvent, ApprovalAsked):
        codec.register(cls.type, cls)
    return codec


def _events_of(data: Any) -> list[SessionEvent]:
    """The event carrying ``data`` as appended, and as a stored log reads it back."""
    codec = _codec()
    if isinstance(data, RawEventData):
        appended = Session("s", types=codec.types).append_raw("gone/plugin", data.fields)
    else:
        appended = Session("s", types=codec.types).append(data)
    return [appended, codec.decode(codec.encode(appended))]


_any_data = st.sampled_from(CLASSES).flatmap(event_data) | st.builds(
    RawEventData, st.dictionaries(st.text(max_size=4), st.integers(), max_size=2)
)
_wanted = st.lists(st.sampled_from([*LATER, *CLASSES]), min_size=1, max_size=4)


def test_the_registry_holds_every_tag_of_the_eager_definition_in_its_order() -> None:
    assert list(CORE_EVENT_TYPES) == list(REFERENCE)
    assert dict(CORE_EVENT_TYPES.items()) == REFERENCE
    rare = {tag for tag, cls in REFERENCE.items() if cls.__module__.endswith("_rare_events")}
    assert set(LATER) == rare
    assert all(REFERENCE[tag].__name__ == name for tag, name in LATER.items())


@settings(max_examples=60)
@given(st.sampled_from(sorted(REFERENCE)) | st.text(max_size=12))
def test_a_registry_not_yet_looked_up_answers_as_the_eager_definition(tag: str) -> None:
    fresh = EventTypes({name: LATER.get(name, cls) for name, cls in REFERENCE.items()})
    assert (tag in fresh) == (tag in REFERENCE)
    assert fresh.get(tag) is REFERENCE.get(tag)
    assert fresh.get(tag, "default") == REFERENCE.get(tag, "default")
    if tag in REFERENCE:
        assert fresh[tag] is REFERENCE[tag]
    else:
        with pytest.raises(KeyError):
            fresh[tag]


def test_a_copy_of_the_registry_takes_plugin_types_alone() -> None:
    copy = CORE_EVENT_TYPES.copy()
    copy["kit/budget"] = BudgetExceeded
    assert copy["kit/budget"] is BudgetExceeded and "kit/budget" not in CORE_EVENT_TYPES
    assert len(copy) == len(CORE_EVENT_TYPES) + 1
    del copy["kit/budget"]
    assert dict(copy) == dict(CORE_EVENT_TYPES)
    assert repr(EventTypes({"a": "HistoryPrune"})) == "EventTypes({'a': 'HistoryPrune'})"


def test_the_public_names_are_the_classes_defined_later() -> None:
    from dsh.plugin import HistoryPrune as public
    from dsh.values._events import EventData
    from dsh.values._events import HistoryPrune as private

    assert public is private is HistoryPrune
    assert set(typing.get_args(EventData)) >= {*REFERENCE.values(), RawEventData}
    with pytest.raises(AttributeError, match="no attribute 'Nothing'"):
        _events.Nothing  # noqa: B018


@settings(max_examples=300)
@given(_any_data)
def test_a_tag_tells_the_events_apart_as_their_class_did(data: Any) -> None:
    for event in _events_of(data):
        for tag in LATER:
            assert (event.type == tag) == isinstance(event.data, REFERENCE[tag])
        in_history = isinstance(event.data, _session._HISTORY_DATA) or (
            event.type in _session._HISTORY_TYPES
        )
        assert in_history == isinstance(event.data, OLD_HISTORY_DATA)
        billed = isinstance(event.data, AssistantMessage) or event.type in budgets._BILLED_LATER
        assert billed == isinstance(event.data, OLD_BILLED)


@settings(max_examples=200)
@given(_any_data, _wanted)
def test_a_tag_for_events_and_select_take_is_its_class(data: Any, wanted: list[Any]) -> None:
    classes = tuple(REFERENCE[item] if isinstance(item, str) else item for item in wanted)
    event = _events_of(data)[0]
    assert isinstance(event.data, defined_classes(wanted)) == isinstance(event.data, classes)
    assert _takes(tuple(wanted), type(event.data)) == issubclass(type(event.data), classes)
    session = Session("s", [event])
    assert list(session.events.select(*wanted)) == list(session.events.select(*classes))


def test_a_tag_whose_class_is_not_defined_names_no_class(monkeypatch: pytest.MonkeyPatch) -> None:
    """Before :mod:`dsh.values._rare_events` is imported (or while it is), no value of its
    classes exists: a tag stands for nothing."""
    monkeypatch.delitem(sys.modules, "dsh.values._rare_events")
    assert defined_classes(["compaction/prune", UserMessage]) == (UserMessage,)
    monkeypatch.setitem(sys.modules, "dsh.values._rare_events", types.ModuleType("half"))
    assert defined_classes(["compaction/prune"]) == ()


def test_only_the_tag_of_a_type_defined_later_names_events() -> None:
    with pytest.raises(TypeError, match="'turn/end' is not the tag"):
        for_events("turn/end")
    with pytest.raises(TypeError, match="'kit/x' is not the tag"):
        list(Session("s").events.select("kit/x"))


def test_an_untagged_class_is_still_found_among_the_types_defined_later() -> None:
    @frozen
    class Untagged:
        n: int

    types_ = CORE_EVENT_TYPES.copy()
    types_["kit/untagged"] = Untagged
    assert event_type_of(Untagged(1), types_) == "kit/untagged"
