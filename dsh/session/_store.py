"""The skeleton every session store shares: :class:`BufferedStore` (re-exported by
:mod:`dsh.session._session`, where store authors import it from).

A store plugin answers six hooks, and all but two of them do the same thing in every store:
``dsh_session_created`` notes where the session's unwritten events start,
``dsh_session_checkpoint`` and ``dsh_session_flush`` take the session's writer lock at the first
write and write the events appended since the last write as one batch, ``dsh_session_closed``
and ``dsh_harness_stop`` release the lock. Nothing runs per event: the session's log is the
buffer. :class:`BufferedStore` implements those hooks once; a store implements only what
touches its medium — take and release the writer lock (:meth:`~BufferedStore.acquire`,
:meth:`~BufferedStore.release`), write a batch in one transaction
(:meth:`~BufferedStore.append`, :meth:`~BufferedStore.replace`), read (:meth:`~BufferedStore.load`,
:meth:`~BufferedStore.list_sessions`) — and, where a commit is not durable by itself, a
:meth:`~BufferedStore.sync`. :class:`AsyncBufferedStore` is the same skeleton for a medium
reached through asyncio (a database server), and :class:`LeaseInfo` what either base answers to
``await store.lease_holder(session_id)``. See "Writing a store" in ``docs/sessions.md``.
"""

from __future__ import annotations

import abc
import asyncio
import builtins
from collections.abc import Awaitable, Sequence
from typing import TYPE_CHECKING, Literal

from attrs import frozen

from dsh.hooks._markers import hookimpl
from dsh.values._content import text_of
from dsh.values._events import UserMessage
from dsh.values._value import Value

if TYPE_CHECKING:
    from dsh.session._session import Session, SessionSummary
    from dsh.values._events import SessionEvent

__all__ = [
    "TITLE_CHARS",
    "AsyncBufferedStore",
    "Batch",
    "BufferedStore",
    "Fsync",
    "LeaseInfo",
    "title_of",
]

#: When a store makes what it wrote durable (``fsync`` in the stores' config sections): at
#: every flush (turn end, close), also at every checkpoint, or never.
Fsync = Literal["turn", "checkpoint", "never"]
#: How much of a session's first user line listings keep as its title.
TITLE_CHARS = 120


def title_of(events: Sequence[SessionEvent]) -> str:
    """The first line of the first user message's text (shortened): a session's title in
    listings; ``""`` before the first user message."""
    for event in events:
        if isinstance(event.data, UserMessage):
            return text_of(event.data.content).strip().split("\n", 1)[0][:TITLE_CHARS]
    return ""


@frozen(repr=False, eq=False)
class Batch(Value):
    """Events of one session to write in one transaction: ``events`` is a read-only sequence
    (a view of the session's log, which :func:`dsh.session._log.runs` reads without building its
    chunk events again).

    ``stored`` is how many events of the session the store holds before them (the seq of the
    first one): an :meth:`~BufferedStore.append` checks that the store holds exactly that many
    and raises :class:`~dsh.session._session.SessionConflict` if not. ``durable``: the commit must
    survive a power cut (the store's ``fsync`` setting asks for it at this point).
    """

    session: Session
    events: Sequence[SessionEvent]
    stored: int
    durable: bool


@frozen(repr=False, eq=False)
class LeaseInfo(Value):
    """Who holds a session's writer lease, as a store answers :meth:`BufferedStore.lease_holder`
    (a router sends a session's messages to the place that holds it).

    ``owner`` is the holder's label (a store's ``owner`` setting, or an id of its own);
    ``token`` the fencing token of this acquisition (it grows with every acquisition, so a
    write carrying an older one is refused), ``None`` where the store has none; ``expires_at``
    (epoch seconds) when another writer may take the session over unless the holder renews it.
    """

    owner: str
    token: int | None
    expires_at: float


class _Buffers:
    """What both store bases share: which sessions they write, and how far."""

    fsync: Fsync = "turn"

    def __init__(self) -> None:
        #: The ids of the live sessions this store writes: each one's events after
        #: :meth:`written` are pending (the session's log is the buffer).
        self.live: set[str] = set()
        #: For each session whose writer lock this store holds: how many events it has stored.
        self._held: dict[str, int] = {}

    def written(self, session: Session) -> int:
        """How many of ``session``'s events this store holds: those before the first it has
        still to write (all of a session it does not write, closed or never seen)."""
        if session.id not in self.live:
            return len(session)
        return self._held.get(session.id, session.persisted)

    @property
    def enabled(self) -> bool:
        """Whether this store stores sessions (for example: it was given a location)."""
        return True

    @property
    def session_hooks_active(self) -> bool:
        """A store that stores nothing is left out of the session hooks (dsh.hooks._caller)."""
        return self.enabled

    def durable(self, flush: bool) -> bool:
        """Whether a flush (``flush``), or a checkpoint, must be durable, by :attr:`fsync`."""
        return self.fsync == "checkpoint" or (flush and self.fsync == "turn")

    async def lease_holder(self, session_id: str) -> LeaseInfo | None:
        """Who holds the writer lease of ``session_id`` now, or ``None`` when nobody does (or
        the store keeps no leases another process could read: the default). Asynchronous in
        both bases, so that a caller asks any store the same way."""
        return None

    async def sessions_held_by(self, owner: str) -> list[str]:
        """The ids of the sessions whose writer lease names ``owner`` — expired leases too: a
        holder that died holds them until somebody takes them over. A host restarted under its
        old name resumes these at once instead of waiting for a caller. Empty by default (a
        store that labels no leases cannot tell)."""
        return []

    @hookimpl
    def dsh_session_created(self, session: Session) -> None:
        if self.enabled:
            self.live.add(session.id)

    def _taken(self, session: Session) -> bool:
        """Whether this store writes ``session``: a live one, or one closed and then used
        again (appended to since), taken up after what its close stored."""
        if session.id in self.live:
            return True
        if not self.enabled or len(session) == session.persisted:
            return False
        self.live.add(session.id)
        return True


class BufferedStore(_Buffers, abc.ABC):
    """A session store's hooks, over the few methods that touch its medium.

    Events appended to a session wait until a checkpoint or flush writes them as one
    :class:`Batch` (:meth:`written` says where they start). The first write of a session takes
    its writer lock (:meth:`acquire`), which says where the store's log of it stands; the lock
    is held until the session is closed or the harness stops (:meth:`release`). The first batch
    of a log that is written whole (a new session, a fork, a session loaded from another store)
    goes to :meth:`replace`, every later one to :meth:`append`. A session closed and then used
    again (a host reusing it) is taken up at its next write like a new one, after the events its
    close stored.

    :attr:`fsync` (``"turn"`` by default) chooses which writes are durable; a subclass sets it
    from its configuration, and :attr:`enabled` says whether the store is configured to store
    anything (a disabled store ignores every session and answers no load or listing).
    """

    # -- what a store implements -----------------------------------------------------------
    @abc.abstractmethod
    def acquire(self, session: Session) -> int:
        """Take the writer lock of ``session`` (never waiting) and say how many of its events
        the store holds: ``session.persisted`` when it holds exactly the log the session was
        loaded with (later batches are appended to it), ``0`` when the session is written
        whole (a new session, a fork, one the store does not hold). Raise
        :class:`~dsh.session._session.SessionBusy` when another writer holds the lock, and
        :class:`~dsh.session._session.SessionConflict` when the store holds another number of events
        than a loaded session was loaded with (another writer changed it since)."""

    @abc.abstractmethod
    def replace(self, batch: Batch) -> None:
        """Write ``batch`` (the whole log, from seq 0) in one transaction, replacing whatever
        the store held under the session's id. A lease-based lock is renewed (or found taken
        over: :class:`~dsh.session._session.SessionBusy`) in the same transaction."""

    @abc.abstractmethod
    def append(self, batch: Batch) -> None:
        """Add ``batch`` to the stored log in one transaction, after checking that the store
        holds ``batch.stored`` events (else :class:`~dsh.session._session.SessionConflict`, nothing
        written). A lease-based lock is renewed in the same transaction."""

    @abc.abstractmethod
    def release(self, session_id: str) -> None:
        """Let go of the writer lock taken by :meth:`acquire`."""

    @abc.abstractmethod
    def load(self, session_id: str) -> builtins.list[SessionEvent] | None:
        """The stored events of ``session_id``, checked (damage is an error naming the
        session, never a shorter log); ``None`` if the store does not hold it."""

    @abc.abstractmethod
    def list_sessions(self, query: str | None, limit: int) -> builtins.list[SessionSummary]:
        """Stored sessions, newest first: at most ``limit``, only those whose id or title
        contains ``query`` when given."""

    def sync(self, session_id: str, flush: bool) -> Awaitable[None] | None:
        """Called after each write of a session whose lock this store holds (``flush``: of a
        flush, else of a checkpoint), to make what was written durable when
        :meth:`durable` says so. A store whose transactions commit durably when
        :attr:`Batch.durable` asks does nothing here (the default); a file store returns
        its fsync, run in a worker thread."""
        return None

    def close(self) -> None:
        """Release what the store holds open (files, connections) when the harness stops,
        after every lock was released."""

    # -- the skeleton ----------------------------------------------------------------------
    @hookimpl
    def dsh_session_checkpoint(self, session: Session) -> Awaitable[None] | None:
        # A plain function: an ``async def`` would cost a task per call, twice per step.
        return self._save(session, flush=False)

    @hookimpl
    def dsh_session_flush(self, session: Session) -> Awaitable[None] | None:
        return self._save(session, flush=True)

    def _save(self, session: Session, flush: bool) -> Awaitable[None] | None:
        """Take the lock at the first write, write what is pending as one batch, sync."""
        if not self._taken(session):
            return None
        stored = self._held.get(session.id)
        if stored is None:
            stored = self.acquire(session)
            self._held[session.id] = stored  # 0: written whole, its seed too
        if len(session) > stored:
            events = session.events[stored:]
            batch = Batch(session, events, stored, self.durable(flush))
            (self.append if stored else self.replace)(batch)
            self._held[session.id] = stored + len(events)
        return self.sync(session.id, flush)

    @hookimpl
    def dsh_session_closed(self, session: Session) -> None:
        self.live.discard(session.id)
        if self._held.pop(session.id, None) is not None:
            self.release(session.id)

    @hookimpl
    def dsh_harness_stop(self) -> None:
        held = builtins.list(self._held)
        self.live.clear()
        self._held.clear()
        try:
            for session_id in held:
                self.release(session_id)
        finally:
            self.close()

    @hookimpl
    def dsh_session_load(self, session_id: str) -> builtins.list[SessionEvent] | None:
        return self.load(session_id) if self.enabled else None

    @hookimpl
    def dsh_session_list(
        self, query: str | None, limit: int
    ) -> builtins.list[SessionSummary] | None:
        return self.list_sessions(query, limit) if self.enabled else None


class AsyncBufferedStore(_Buffers, abc.ABC):
    """:class:`BufferedStore` for a medium reached through asyncio (a database server): the
    same skeleton, whose medium methods are coroutines, awaited by the hooks that the harness
    already awaits (checkpoint, flush, close, stop, load, list). Nothing blocks the loop.

    Because a write now yields to the loop, two writes of one session could overlap (a
    checkpoint and a claim, say): each session's writes run one after the other under a lock
    of its own, and a batch is cut from its buffer only once it is written, so events
    appended meanwhile wait for the next write and a failed write loses nothing.
    """

    def __init__(self) -> None:
        super().__init__()
        self._locks: dict[str, asyncio.Lock] = {}

    # -- what a store implements -----------------------------------------------------------
    @abc.abstractmethod
    async def acquire(self, session: Session) -> int:
        """:meth:`BufferedStore.acquire`, awaited."""

    @abc.abstractmethod
    async def replace(self, batch: Batch) -> None:
        """:meth:`BufferedStore.replace`, awaited."""

    @abc.abstractmethod
    async def append(self, batch: Batch) -> None:
        """:meth:`BufferedStore.append`, awaited."""

    @abc.abstractmethod
    async def release(self, session_id: str) -> None:
        """:meth:`BufferedStore.release`, awaited."""

    @abc.abstractmethod
    async def load(self, session_id: str) -> builtins.list[SessionEvent] | None:
        """:meth:`BufferedStore.load`, awaited."""

    @abc.abstractmethod
    async def list_sessions(self, query: str | None, limit: int) -> builtins.list[SessionSummary]:
        """:meth:`BufferedStore.list_sessions`, awaited."""

    async def close(self) -> None:
        """Release connections when the harness stops, after every lock was released."""

    # -- the skeleton ----------------------------------------------------------------------
    @hookimpl
    def dsh_session_checkpoint(self, session: Session) -> Awaitable[None] | None:
        return self._save(session, flush=False) if self._taken(session) else None

    @hookimpl
    def dsh_session_flush(self, session: Session) -> Awaitable[None] | None:
        return self._save(session, flush=True) if self._taken(session) else None

    async def _save(self, session: Session, flush: bool) -> None:
        """Take the lock at the first write, write what is pending as one batch."""
        async with self._locks.setdefault(session.id, asyncio.Lock()):
            if session.id not in self.live:  # closed while this write waited for the lock
                return
            stored = self._held.get(session.id)
            if stored is None:
                stored = await self.acquire(session)
                self._held[session.id] = stored  # 0: written whole, its seed too
            # What was appended by now; what is appended during the write waits for the next.
            if len(session) > stored:
                events = session.events[stored:]  # a view: later appends are not in it
                batch = Batch(session, events, stored, self.durable(flush))
                await (self.append if stored else self.replace)(batch)
                self._held[session.id] = stored + len(events)

    @hookimpl
    async def dsh_session_closed(self, session: Session) -> None:
        async with self._locks.setdefault(session.id, asyncio.Lock()):
            self.live.discard(session.id)
            if self._held.pop(session.id, None) is not None:
                await self.release(session.id)
        self._locks.pop(session.id, None)

    @hookimpl
    async def dsh_harness_stop(self) -> None:
        held = builtins.list(self._held)
        self.live.clear()
        self._held.clear()
        self._locks.clear()
        try:
            for session_id in held:
                await self.release(session_id)
        finally:
            await self.close()

    @hookimpl
    async def dsh_session_load(self, session_id: str) -> builtins.list[SessionEvent] | None:
        return await self.load(session_id) if self.enabled else None

    @hookimpl
    async def dsh_session_list(
        self, query: str | None, limit: int
    ) -> builtins.list[SessionSummary] | None:
        return await self.list_sessions(query, limit) if self.enabled else None
