"""An in-memory session store (exported by :mod:`dsh.testing`)."""

from __future__ import annotations

from collections.abc import Awaitable

from dsh.hooks._markers import hookimpl
from dsh.session._session import (
    Batch,
    BufferedStore,
    Session,
    SessionBusy,
    SessionConflict,
    SessionSummary,
    Writer,
)
from dsh.session._store import title_of
from dsh.values._events import SessionEvent

__all__ = ["MemoryStore"]


class MemoryStore(BufferedStore):
    """An in-memory session store plugin: what a persistence plugin does, minus the disk — the
    smallest complete :class:`~dsh.session._session.BufferedStore`.

    Events count as stored once a checkpoint or flush ran (``written(session)`` says how
    many), so a test can "crash" a harness by dropping it and resume another from ``stored``.
    Stores that share ``stored``, ``parents`` and ``writers`` act as processes sharing a disk:
    one writer per session (``writers``: the store holding each session, taken at its first
    checkpoint or flush, released when it is closed or the harness stops). ``checkpoints`` and
    ``flushes`` count the hook calls.
    """

    def __init__(self) -> None:
        super().__init__()
        self.stored: dict[str, list[SessionEvent]] = {}
        self.parents: dict[str, str | None] = {}
        self.writers: dict[str, tuple[MemoryStore, Writer]] = {}
        self.checkpoints = 0
        self.flushes = 0

    @hookimpl
    def dsh_session_checkpoint(self, session: Session) -> Awaitable[None] | None:
        self.checkpoints += 1
        return super().dsh_session_checkpoint(session)

    @hookimpl
    def dsh_session_flush(self, session: Session) -> Awaitable[None] | None:
        self.flushes += 1
        return super().dsh_session_flush(session)

    def acquire(self, session: Session) -> int:
        holder = self.writers.get(session.id)
        if holder is not None and holder[0] is not self:
            raise SessionBusy(session.id, holder[1])
        stored = self.stored.get(session.id)
        if session.persisted and stored is not None and len(stored) != session.persisted:
            raise SessionConflict(session.id, len(stored), session.persisted)
        self.writers[session.id] = (self, Writer.this_process())
        return session.persisted if stored is not None else 0

    def replace(self, batch: Batch) -> None:
        self.stored[batch.session.id] = list(batch.events)
        self.parents[batch.session.id] = batch.session.parent

    def append(self, batch: Batch) -> None:
        stored = self.stored[batch.session.id]
        if len(stored) != batch.stored:
            raise SessionConflict(batch.session.id, len(stored), batch.stored)
        stored.extend(batch.events)

    def release(self, session_id: str) -> None:
        self.writers.pop(session_id, None)

    def load(self, session_id: str) -> list[SessionEvent] | None:
        events = self.stored.get(session_id)
        return None if events is None else list(events)

    def list_sessions(self, query: str | None, limit: int) -> list[SessionSummary]:
        found = [
            SessionSummary(
                sid,
                events[0].time,
                events[-1].time,
                len(events),
                title_of(events),
                self.parents.get(sid),
            )
            for sid, events in self.stored.items()
            if events
        ]
        if query is not None:
            found = [s for s in found if query in s.id or query in s.title]
        return sorted(found, key=lambda s: s.updated, reverse=True)[:limit]
