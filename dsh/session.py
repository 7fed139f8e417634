"""Sessions: append-only event logs, and the store that creates and finds them.

The model's history is **derived** from the log (:meth:`Session.derive_messages`), never stored
beside it: anything a model sees must be reconstructable from the session.
"""

from __future__ import annotations

import builtins
import itertools
import time
from collections.abc import Callable, Iterable, Sequence
from typing import TYPE_CHECKING, Any

from dsh.content import (
    AgentSource,
    Block,
    Message,
    MessageSource,
    PluginSource,
    Text,
    ToolResult,
)
from dsh.errors import DshError
from dsh.events import (
    AssistantMessage,
    ContextMessage,
    SessionEvent,
    SteeringMessage,
    ToolResultEvent,
    UserMessage,
)

if TYPE_CHECKING:
    from dsh.converter import EventCodec
    from dsh.hooks import Hooks

__all__ = ["Session", "SessionStore", "context_message", "source_label"]


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


def _project(event: SessionEvent) -> Message | None:
    """The message an event contributes to model history, if any."""
    data = event.data
    if isinstance(data, UserMessage | SteeringMessage):
        return Message("user", data.content)
    if isinstance(data, AssistantMessage):
        return Message("assistant", data.content)
    if isinstance(data, ToolResultEvent):
        return Message("user", (ToolResult(data.call_id, data.content, data.is_error),))
    if isinstance(data, ContextMessage):
        return context_message(data.content, data.source)
    return None


class Session:
    """An append-only log of :class:`SessionEvent`. ``seq`` is contiguous from 0.

    ``on_append`` is called with every new event (the store wires it to ``dsh_session_event``).
    """

    def __init__(
        self,
        session_id: str,
        seed: Iterable[SessionEvent] = (),
        *,
        on_append: Callable[[Session, SessionEvent], None] | None = None,
        flusher: Callable[[Session], Any] | None = None,
        parent: str | None = None,
    ) -> None:
        self.id = session_id
        self.parent = parent
        self.created = time.time()
        self._events: list[SessionEvent] = []
        for expected_seq, event in enumerate(seed):
            if event.seq != expected_seq:
                raise DshError(
                    f"session {session_id!r}: seed event {expected_seq} has seq {event.seq}; "
                    "seq must be contiguous from 0"
                )
            self._events.append(event)
        self._on_append = on_append
        self._flusher = flusher
        self._derived: list[Message] = []
        self._derived_upto = 0

    @property
    def events(self) -> Sequence[SessionEvent]:
        """The log, read-only."""
        return tuple(self._events)

    def __len__(self) -> int:
        return len(self._events)

    def append(self, type: str, data: Any) -> SessionEvent:
        """Append an event of ``type`` carrying ``data`` and tell the observers."""
        event = SessionEvent(type, len(self._events), time.time(), data)
        self._events.append(event)
        if self._on_append is not None:
            self._on_append(self, event)
        return event

    def derive_messages(self) -> tuple[Message, ...]:
        """The model-visible history projected from the log.

        The projection is a fold over an append-only log, so it is computed incrementally.
        """
        derived = self._derived
        for event in itertools.islice(self._events, self._derived_upto, None):
            message = _project(event)
            if message is not None:
                derived.append(message)
        self._derived_upto = len(self._events)
        return tuple(derived)

    async def flush(self) -> None:
        """Make the log durable through ``dsh_session_flush`` (no-op without persistence)."""
        if self._flusher is not None:
            await self._flusher(self)


class SessionStore:
    """Creates sessions wired to the hooks, and finds them by id."""

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
    ) -> Session:
        """A new session (optionally seeded with events, as for resume and fork)."""
        if session_id is None:
            session_id = next(
                sid for sid in (f"session-{n}" for n in self._counter) if sid not in self._sessions
            )
        if session_id in self._sessions:
            raise DshError(f"session {session_id!r} already exists")
        session = Session(
            session_id,
            seed,
            on_append=self._hooks.session_event,
            flusher=self._hooks.session_flush,
            parent=parent,
        )
        self._sessions[session_id] = session
        self._hooks.session_created(session)
        return session

    def get(self, session_id: str) -> Session | None:
        return self._sessions.get(session_id)

    def list(self) -> builtins.list[Session]:
        return list(self._sessions.values())

    async def load(self, session_id: str) -> builtins.list[SessionEvent] | None:
        """The stored events of ``session_id`` from whichever persistence plugin has them."""
        return await self._hooks.session_load(session_id)

    def fork(
        self, source: Session, upto: int | None = None, session_id: str | None = None
    ) -> Session:
        """A new session seeded with ``source``'s events ``[0, upto)`` (all by default)."""
        events = source.events if upto is None else source.events[:upto]
        return self.create(session_id, events, parent=source.id)

    async def flush_all(self) -> None:
        for session in self._sessions.values():
            await session.flush()
