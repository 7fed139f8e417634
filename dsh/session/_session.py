"""Sessions: append-only event logs, and the store that creates and finds them.

The model's history is **derived** from the log (:meth:`Session.derive_messages`), never stored
beside it: anything a model sees must be reconstructable from the session.
"""

from __future__ import annotations

import builtins
import itertools
import os
import re
import secrets
import socket
import time
from collections.abc import Callable, Iterable, Mapping, Sequence
from typing import TYPE_CHECKING, Any, cast

from attrs import frozen

from dsh._log import get_logger
from dsh.llm._batches import Deltas, expand
from dsh.session._log import EventLog, Packed, pack, pack_chunk, pack_data, pack_deltas
from dsh.session._store import AsyncBufferedStore, Batch, BufferedStore, LeaseInfo
from dsh.values._content import (
    AgentSource,
    Block,
    Message,
    MessageSource,
    PluginSource,
    Text,
    ToolResult,
)
from dsh.values._errors import DshError
from dsh.values._events import (
    CONTEXT_MESSAGE,
    CORE_EVENT_TYPES,
    HISTORY_PRUNE,
    HISTORY_SUMMARY,
    STEERING_MESSAGE,
    AssistantChunk,
    AssistantMessage,
    RawEventData,
    SessionEvent,
    ToolResultEvent,
    TurnEnd,
    TurnStart,
    UserMessage,
    event_type_of,
)
from dsh.values._value import Value

log = get_logger("dsh.session")

if TYPE_CHECKING:
    from dsh.hooks._caller import Hooks
    from dsh.session._codec import EventCodec
    from dsh.values._chunks import StreamChunk
    from dsh.values._rare_events import (
        ContextMessage,
        EventData,
        HistoryPrune,
        HistorySummary,
        SteeringMessage,
    )

__all__ = [
    "AsyncBufferedStore",
    "Batch",
    "BufferedStore",
    "LeaseInfo",
    "Session",
    "SessionBusy",
    "SessionConflict",
    "SessionRegistry",
    "SessionSummary",
    "Writer",
    "agent_id_of",
    "context_message",
    "derive_history",
    "error_messages",
    "new_session_id",
    "source_label",
    "summary_message",
]


_GENERATED = re.compile(r"-(\d{8}-\d{6}-[0-9a-f]{4}|session)$")


def new_session_id(agent_id: str) -> str:
    """A fresh session id for ``agent_id``: ``<agent_id>-<yyyymmdd-hhmmss>-<4 hex>`` (UTC)."""
    stamp = time.strftime("%Y%m%d-%H%M%S", time.gmtime())
    return f"{agent_id}-{stamp}-{secrets.token_hex(2)}"


def agent_id_of(session_id: str) -> str:
    """The agent id a :func:`new_session_id` (or a ``<agent>-session`` id) was made for, else
    the session id itself."""
    return _GENERATED.sub("", session_id)


def source_label(source: MessageSource) -> str:
    """``user``, ``plugin:<name>`` or ``agent:<id>``."""
    if isinstance(source, PluginSource):
        return f"plugin:{source.name}"
    if isinstance(source, AgentSource):
        return f"agent:{source.agent_id}"
    return "user"


def context_message(content: tuple[Block, ...], source: MessageSource) -> Message:
    """How injected context reaches the model: a user message tagged with where it came from."""
    opening = Text(f'<context source="{source_label(source)}">')
    return Message("user", (opening, *content, Text("</context>")))


def summary_message(summary: str) -> Message:
    """How a compaction summary reaches the model."""
    return Message(
        "user",
        (Text(f"<summary of the earlier conversation>\n{summary}\n</summary>"),),
    )


def _elide(message: Message, notes: dict[str, str]) -> Message:
    """``message`` with the content of the tool results named in ``notes`` replaced."""
    if not any(isinstance(b, ToolResult) and b.tool_call_id in notes for b in message.content):
        return message
    return Message(
        message.role,
        tuple(
            ToolResult(b.tool_call_id, (Text(notes[b.tool_call_id]),), b.is_error)
            if isinstance(b, ToolResult) and b.tool_call_id in notes
            else b
            for b in message.content
        ),
    )


def _project(event: SessionEvent) -> Message | None:
    """The message an event contributes to model history, if any. (The events of a type
    :mod:`dsh.values._rare_events` defines are told by their tag, as their classes may not be
    built: :data:`~dsh.values._events.CORE_EVENT_TYPES` maps the tag to the class.)"""
    data = event.data
    if isinstance(data, UserMessage):
        return Message("user", data.content)
    if isinstance(data, AssistantMessage):
        return Message("assistant", data.content)
    if isinstance(data, ToolResultEvent):
        return Message("user", (ToolResult(data.call_id, data.content, data.is_error),))
    name = event.type
    if name == STEERING_MESSAGE:
        return Message("user", cast("SteeringMessage", data).content)
    if name == CONTEXT_MESSAGE:
        context = cast("ContextMessage", data)
        return context_message(context.content, context.source)
    return None


#: The data of the events that can change the derived history, of the classes always built,
#: and the types of the others (told by their tag, as :func:`_project` does).
_HISTORY_DATA = (UserMessage, AssistantMessage, ToolResultEvent)
_HISTORY_TYPES = frozenset({STEERING_MESSAGE, CONTEXT_MESSAGE, HISTORY_SUMMARY, HISTORY_PRUNE})


def fold_history(seqs: list[int], messages: list[Message], event: SessionEvent) -> None:
    """Fold one event into the history ``messages`` (``seqs``: the seq of the event each came
    from), both in place: a summary or a prune rewrites earlier messages, any other event
    appends at most one. Two lists, not one of pairs: a session keeps its history for as long
    as it lives, and a pair holding a message is one more object the collector tracks."""
    name = event.type
    if name == HISTORY_SUMMARY:
        summary = cast("HistorySummary", event.data)
        kept = [index for index, seq in enumerate(seqs) if seq >= summary.replaces_upto]
        seqs[:] = [event.seq, *(seqs[index] for index in kept)]
        messages[:] = [summary_message(summary.summary), *(messages[index] for index in kept)]
        return
    if name == HISTORY_PRUNE:
        notes = {e.call_id: e.note for e in cast("HistoryPrune", event.data).elided}
        messages[:] = [_elide(m, notes) for m in messages]
        return
    message = _project(event)
    if message is not None:
        seqs.append(event.seq)
        messages.append(message)


def derive_history(events: Iterable[SessionEvent]) -> list[tuple[int, Message]]:
    """The model-visible history of ``events`` in one pass, each message with the seq of its
    event (what :meth:`Session.history` keeps up to date incrementally)."""
    seqs: list[int] = []
    messages: list[Message] = []
    for event in events:
        fold_history(seqs, messages, event)
    return list(zip(seqs, messages, strict=True))


@frozen(repr=False, eq=False)
class Writer(Value):
    """Who holds a session's writer lock: what a refused second writer is told, so that the
    user can find the holder (process id, host name, since when, in epoch seconds)."""

    pid: int
    host: str
    since: float

    @classmethod
    def this_process(cls) -> Writer:
        return cls(os.getpid(), socket.gethostname(), time.time())

    def __str__(self) -> str:
        since = time.strftime("%Y-%m-%d %H:%M:%S UTC", time.gmtime(self.since))
        return f"process {self.pid} on host {self.host!r} (since {since})"


class SessionBusy(DshError):
    """Another writer holds the session: one process (one store instance) writes a session at a
    time. Stores raise it from ``dsh_session_checkpoint``/``dsh_session_flush``."""

    def __init__(self, session_id: str, holder: Writer | None, where: str = "") -> None:
        self.session_id = session_id
        self.holder = holder
        self.where = where
        who = str(holder) if holder is not None else "another process (not yet identified)"
        super().__init__(
            f"session {session_id!r} is open for writing by {who}{where}: a session has one "
            "writer at a time; stop that process (or let it finish) and resume the session again"
        )

    def __reduce__(self) -> tuple[Any, ...]:
        # Pickled with its fields, so that it crosses process boundaries (a cluster's workers).
        return type(self), (self.session_id, self.holder, self.where)


class SessionConflict(DshError):
    """The stored log is not the one this writer continues: another writer changed it since it
    was loaded. Nothing is overwritten or deleted; stores raise it instead."""

    def __init__(self, session_id: str, stored: int, expected: int, where: str = "") -> None:
        self.session_id = session_id
        self.stored = stored
        self.expected = expected
        self.where = where
        super().__init__(
            f"session {session_id!r}{where}: the store holds {stored} event(s) but this process "
            f"continues a log of {expected}; another process wrote it since it was loaded. "
            "Nothing was overwritten: resume the session again to continue from what is stored"
        )

    def __reduce__(self) -> tuple[Any, ...]:
        return type(self), (self.session_id, self.stored, self.expected, self.where)


def _leaves(exc: BaseException) -> tuple[BaseException, ...]:
    return exc.exceptions if isinstance(exc, BaseExceptionGroup) else (exc,)


def error_messages(exc: BaseException) -> str:
    """Every message of ``exc``, an exception group of the stores' hook errors (as a parallel
    hook raises them) or a single exception."""
    return "; ".join(str(leaf) for leaf in _leaves(exc))


def _store_error(session: Session, exc: BaseException) -> DshError:
    """The error a failed claim raises: the store's own :class:`SessionBusy` or
    :class:`SessionConflict` when it raised one, else a :class:`DshError` with every message."""
    for leaf in _leaves(exc):
        cause = getattr(leaf, "error", leaf)
        if isinstance(cause, SessionBusy | SessionConflict):
            return cause
    return DshError(f"cannot open session {session.id!r} for writing: {error_messages(exc)}")


@frozen(repr=False, eq=False)
class SessionSummary(Value):
    """A stored session as listings show it (without reading its events)."""

    id: str
    created: float
    updated: float
    events: int
    title: str = ""
    parent: str | None = None


class Session:
    """An append-only log of :class:`SessionEvent`. ``seq`` is contiguous from 0.

    ``seed`` events come first (resume, fork); ``persisted`` says how many of them a store
    already holds (a resumed session: all of them; a fork: none). ``cwd`` is the directory the
    session was created in; ``parent`` the session it was forked from.
    """

    def __init__(
        self,
        session_id: str,
        seed: Iterable[SessionEvent] = (),
        *,
        hooks: Hooks | None = None,
        parent: str | None = None,
        persisted: int = 0,
        cwd: str | None = None,
        types: Mapping[str, builtins.type[Any]] = CORE_EVENT_TYPES,
    ) -> None:
        self.id = session_id
        self._types = types
        self.parent = parent
        self.created = time.time()
        self.cwd = cwd if cwd is not None else os.getcwd()
        # The log. Most chunk events and plain step events are kept packed: see dsh.session._log.
        self._events: list[SessionEvent | Packed] = []
        #: Where runs of deltas given at once lie (see EventLog).
        self._runs: dict[int, int] = {}
        for expected_seq, event in enumerate(seed):
            if event.seq != expected_seq:
                raise DshError(
                    f"session {session_id!r}: seed event {expected_seq} has seq {event.seq}; "
                    "seq must be contiguous from 0"
                )
            self._events.append(pack(event))
        self.persisted = persisted
        self._hooks = hooks
        # The derived history, kept up to date as events arrive (a fold over the log): the
        # messages (what a request carries), the seq of the event each came from and, once
        # asked for and until the history changes, the messages as a tuple.
        self._derived_seqs: list[int] = []
        self._derived_messages: list[Message] = []
        self._derived_tuple: tuple[Message, ...] | None = ()
        self._derived_upto = 0

    @property
    def events(self) -> EventLog:
        """The log as it is now, read-only: a sequence of the events appended so far (later
        appends do not change it), which builds each event as it is read. Slicing it
        (``session.events[since:]``), reading it backwards and
        :meth:`~dsh.session._log.EventLog.select` build only what they reach."""
        return EventLog(self._events, 0, len(self._events), self._runs)

    def __len__(self) -> int:
        return len(self._events)

    @property
    def last_turn(self) -> int:
        """The number of the last turn started in the log (turns count from 1; 0: none yet)."""
        for event in reversed(self._events):
            if not isinstance(event, tuple) and isinstance(event.data, TurnStart):
                return event.data.turn
        return 0

    def append(self, data: EventData, /) -> SessionEvent:
        """Append an event carrying ``data`` and tell the observers. Its type is the tag of
        ``data``'s class (:func:`~dsh.values._events.event_type_of`), so a value cannot be logged
        under another type's name."""
        return self._add(event_type_of(data, self._types), data, time.time())

    def log(self, data: EventData, /) -> None:
        """:meth:`append` without handing the event back: an event the log keeps packed (a
        stream chunk, a step boundary, a tool call...) that no ``dsh_session_event``
        implementation takes is never built. The loop logs its own events so."""
        name, now, hooks = event_type_of(data, self._types), time.time(), self._hooks
        if hooks is None or not hooks.session_event_observed(type(data)):
            packed = pack_data(name, now, data)
            if packed is not None:
                self._events.append(packed)
                return
        self._add(name, data, now)

    def log_chunk(self, turn: int, step: int, chunk: StreamChunk) -> None:
        """``log(AssistantChunk(turn, step, chunk))``: where nobody takes chunk events, a chunk
        the log keeps packed is packed straight from ``chunk``, with no event and no
        :class:`~dsh.values._events.AssistantChunk` built (the loop logs every streamed chunk
        so)."""
        now, hooks = time.time(), self._hooks
        if hooks is None or not hooks.session_event_observed(AssistantChunk):
            packed = pack_chunk(now, turn, step, chunk)
            if packed is not None:
                self._events.append(packed)
                return
        self._add(AssistantChunk.type, AssistantChunk(turn, step, chunk), now)

    def chunk_batch_log(
        self, turn: int, step: int
    ) -> Callable[[Sequence[StreamChunk | Deltas]], None]:
        """:meth:`log_chunk` bound to step ``step`` of turn ``turn``, for the chunks of one
        stream, a network read's at a time (one chunk, for an adapter that streams chunk by
        chunk; a batch may hold runs of deltas, :class:`~dsh.llm._batches.Deltas`): they are
        logged in order with one clock reading (they arrived together). Whether any
        ``dsh_session_event`` implementation takes chunk events is asked once, here, and where
        none does, each chunk the log keeps packed is packed and appended with no call between
        (a run of deltas packed at once; a plugin registered while the stream runs sees the
        next one's)."""
        hooks = self._hooks
        if hooks is not None and hooks.session_event_observed(AssistantChunk):
            add, now, name = self._add, time.time, AssistantChunk.type

            def log_each(chunks: Sequence[StreamChunk | Deltas]) -> None:
                when = now()
                for chunk in expand(chunks):
                    add(name, AssistantChunk(turn, step, chunk), when)

            return log_each
        events, noted = self._events, self._runs
        append, extend = events.append, events.extend
        now, add, name = time.time, self._add, AssistantChunk.type

        def log(chunks: Sequence[StreamChunk | Deltas]) -> None:
            when = now()
            for chunk in chunks:
                if isinstance(chunk, Deltas):
                    deltas = pack_deltas(when, turn, step, chunk)
                    if len(deltas) > 1:  # noted: a store's batch steps over them at once
                        noted[len(events)] = len(events) + len(deltas)
                    extend(deltas)
                    continue
                packed = pack_chunk(when, turn, step, chunk)
                if packed is None:
                    add(name, AssistantChunk(turn, step, chunk), when)
                else:
                    append(packed)

        return log

    def append_raw(self, type: str, data: Mapping[str, Any]) -> SessionEvent:
        """Append an event of a ``type`` nobody registered, its ``data`` the raw JSON mapping,
        as a log written by a plugin that is no longer installed holds it (the store kit
        checks that such events are stored as they are); the event's ``data`` is a
        :class:`~dsh.values._events.RawEventData` holding it. A registered type takes its class: use
        :meth:`append`."""
        known = self._types.get(type)
        if known is not None:
            raise DshError(
                f"event type {type!r} is registered as {known.__qualname__}: "
                f"append a {known.__qualname__} with append(data)"
            )
        return self._add(type, RawEventData(data), time.time())

    def _add(self, name: str, data: EventData, now: float) -> SessionEvent:
        event = SessionEvent(name, len(self._events), now, data)
        packed = pack_data(name, now, data)  # what pack(event) keeps, without reading it back
        self._events.append(event if packed is None else packed)
        if self._hooks is not None:
            self._hooks.session_event(self, event)
        return event

    def derive_messages(self) -> tuple[Message, ...]:
        """The model-visible history projected from the log.

        The projection is a fold over an append-only log, so it is computed incrementally: each
        event is folded in once, and the tuple is built again only after the history changed
        (a step asks for it once per request, and a long history must not cost a walk in
        Python per step). Compaction events rewrite what was derived before them: a summary
        replaces the messages of earlier events, a prune replaces old tool results by a note.
        """
        self._catch_up()
        if self._derived_tuple is None:
            self._derived_tuple = tuple(self._derived_messages)
        return self._derived_tuple

    def history(self) -> tuple[tuple[int, Message], ...]:
        """The derived messages, each with the seq of the event it came from."""
        self._catch_up()
        return tuple(zip(self._derived_seqs, self._derived_messages, strict=True))

    def _catch_up(self) -> None:
        """Fold the events appended since the last call into the derived history."""
        if self._derived_upto == len(self._events):
            return
        seqs, messages = self._derived_seqs, self._derived_messages
        # A slice, not ``islice``: that would step over every event already folded.
        for event in self._events[self._derived_upto :]:
            if isinstance(event, tuple) or not (
                isinstance(event.data, _HISTORY_DATA) or event.type in _HISTORY_TYPES
            ):
                continue  # most events (chunks, boundaries): a test or two in C, no fold
            fold_history(seqs, messages, event)
            self._derived_tuple = None
        self._derived_upto = len(self._events)

    async def checkpoint(self) -> None:
        """Hand appended events to the OS through ``dsh_session_checkpoint``."""
        if self._hooks is not None:
            await self._hooks.session_checkpoint(self)

    async def flush(self) -> None:
        """Make the log durable through ``dsh_session_flush`` (no-op without persistence)."""
        if self._hooks is not None:
            await self._hooks.session_flush(self)


def open_turn(events: Sequence[SessionEvent]) -> int | None:
    """The number of the turn left open at the end of ``events`` (``None`` if all closed)."""
    turn: int | None = None
    for event in events:
        if isinstance(event.data, TurnStart):
            turn = event.data.turn
        elif isinstance(event.data, TurnEnd):
            turn = None
    return turn


class SessionRegistry:
    """Creates sessions wired to the hooks, finds live ones by id, and reaches stored ones
    through the persistence hooks."""

    def __init__(self, hooks: Hooks, codec: EventCodec) -> None:
        self._hooks = hooks
        self.codec = codec
        self._sessions: dict[str, Session] = {}
        self._counter = itertools.count(1)

    def create(
        self,
        session_id: str | None = None,
        seed: Iterable[SessionEvent] = (),
        *,
        parent: str | None = None,
        persisted: int = 0,
    ) -> Session:
        """A new live session (optionally seeded with events, as for resume and fork)."""
        if session_id is None:
            session_id = next(
                sid for sid in (f"session-{n}" for n in self._counter) if sid not in self._sessions
            )
        if session_id in self._sessions:
            raise DshError(f"session {session_id!r} already exists")
        session = Session(
            session_id,
            seed,
            hooks=self._hooks,
            parent=parent,
            persisted=persisted,
            types=self.codec.types,
        )
        self._sessions[session_id] = session
        self._hooks.session_created(session)
        return session

    def get(self, session_id: str) -> Session | None:
        return self._sessions.get(session_id)

    def list(self) -> builtins.list[Session]:
        """The live sessions of this harness."""
        return list(self._sessions.values())

    async def load(self, session_id: str) -> builtins.list[SessionEvent] | None:
        """The stored events of ``session_id`` from whichever persistence plugin has them."""
        return await self._hooks.session_load(session_id)

    async def stored(
        self, query: str | None = None, limit: int = 50
    ) -> builtins.list[SessionSummary]:
        """Stored sessions, newest first (empty without a persistence plugin)."""
        return await self._hooks.session_list(query, limit) or []

    @property
    def persistent(self) -> bool:
        """Whether a persistence plugin keeps sessions (one implements ``dsh_session_load``),
        so that a session outlives this process and can be resumed."""
        return bool(self._hooks.runtime.impls("dsh_session_load"))

    async def claim(self, session: Session) -> None:
        """Take the writer lock of ``session`` now, so that a session another process writes
        fails here rather than at its first write (resume calls it).

        Stores take a session's lock at its first checkpoint or flush, and this is a checkpoint.
        On failure the session is forgotten (stores release it) and the store's
        :class:`SessionBusy` or :class:`SessionConflict` is raised.
        """
        try:
            await session.checkpoint()
        except Exception as exc:
            if self._sessions.get(session.id) is session:
                del self._sessions[session.id]
                await self._hooks.session_closed(session)
            raise _store_error(session, exc) from exc

    def fork(
        self, source: Session, at_seq: int | None = None, session_id: str | None = None
    ) -> Session:
        """A new session seeded with ``source``'s events up to and including ``at_seq`` (all
        by default). A prefix that ends inside an open turn is refused."""
        events = source.events if at_seq is None else source.events[: at_seq + 1]
        turn = open_turn(events)
        if turn is not None:
            raise DshError(
                f"cannot fork {source.id!r} at seq {len(events) - 1}: turn {turn} is still open "
                "there; fork at a seq after its turn/end"
            )
        return self.create(session_id, events, parent=source.id)

    async def close(self, session: Session) -> None:
        """Flush ``session`` and forget it: plugins release what they keep for it
        (``dsh_session_closed``). A long-running host creates sessions without end; closed
        ones do not stay in memory. A failed flush is logged, never raised. Closing releases
        the session's writer lock."""
        if self._sessions.get(session.id) is not session:
            return
        del self._sessions[session.id]
        try:
            await session.flush()
        except Exception:
            log.exception("session flush failed while closing", session=session.id)
        else:
            # Stored whole: if it is used again, stores continue after these events.
            session.persisted = len(session)
        await self._hooks.session_closed(session)

    async def flush_all(self) -> None:
        for session in list(self._sessions.values()):
            await session.flush()
