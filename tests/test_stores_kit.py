"""The session-store conformance kit, run on the in-memory reference store of dsh.testing."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
from hypothesis import given

from dsh.converter import EventCodec, structure, unstructure
from dsh.events import CORE_EVENT_TYPES
from dsh.testing import MemoryStore
from dsh.testing.stores import KitEvent, SessionStoreContract, event_data, event_logs


class TestMemoryStore(SessionStoreContract):
    """A "restart" is a new MemoryStore over the same stored sessions (its disk)."""

    disks: dict[Path, tuple[dict[str, Any], dict[str, Any], dict[str, Any]]] = {}

    def make_store(self, directory: Path) -> object:
        store = MemoryStore()
        store.stored, store.parents, store.writers = self.disks.setdefault(directory, ({}, {}, {}))
        return store


def test_make_store_must_be_implemented(tmp_path: Path) -> None:
    with pytest.raises(TypeError, match="make_store"):
        SessionStoreContract()  # type: ignore[abstract]

    class Untearable(SessionStoreContract):
        def make_store(self, directory: Path) -> object:
            return MemoryStore()

    assert Untearable().tear(tmp_path, "x") is False


@given(event_logs(CORE_EVENT_TYPES))
def test_event_logs_hold_only_what_the_converter_round_trips(pairs: list[tuple[str, Any]]) -> None:
    codec = EventCodec()
    for type_, data in pairs:
        data_cls = codec.types.get(type_)
        if data_cls is None:
            assert isinstance(data, dict)
        else:
            assert structure(unstructure(data), data_cls) == data


@given(event_data(KitEvent))
def test_event_data_builds_any_attrs_class(data: KitEvent) -> None:
    assert all(isinstance(tag, str) for tag in data.tags)
