"""One host of a pool: a :class:`SessionHost` runs one :class:`~dsh.plugin.Harness` with the
agents of many sessions, one agent per session.

The pool runs it as a Ray actor; it is a plain class, so it is also tested (and measured) in
the test process. A host opens a session on the first call that needs it: it resumes a stored
one (a turn a dead host left open is closed ``interrupted``, queued messages run again) or
starts a new one, after taking the session's writer lease. When another host holds the lease,
the call is answered :class:`Elsewhere` with the holder's label, and the pool goes there.

Only what the store has recorded leaves a host: :meth:`SessionHost.events` streams a session's
events up to what its store holds, and :meth:`SessionHost.send` returns once the message is
recorded. So a caller that continues on another host after a failure finds the same log, with
no gap and nothing it saw rewritten.
"""

from __future__ import annotations

import asyncio
import contextlib
import os
import socket
from collections.abc import AsyncGenerator, Awaitable
from typing import TYPE_CHECKING, Any

from attrs import frozen

from dsh.plugin import (
    AsyncBufferedStore,
    BufferedStore,
    DshError,
    Harness,
    SessionBusy,
    SessionConflict,
    Value,
    get_logger,
    hookimpl,
)
from dsh_plugins.cluster.spec import HostSpec, load_plugin

if TYPE_CHECKING:
    from dsh.plugin import Agent, Content, PendingApproval, Session, SessionEvent

__all__ = ["BEAT_S", "OWNER_SECTIONS", "POLL_S", "Beat", "Elsewhere", "HostInfo", "SessionHost"]

log = get_logger("dsh_plugins.cluster.host")

#: How often a waiter looks at the store's progress while events wait to be written (a store
#: whose writes finish after the checkpoint hook returns is seen by this, at the latest).
POLL_S = 0.05
#: How often an event stream with nothing to send says that it is alive (:class:`Beat`): a
#: caller that hears nothing for a few beats takes the stream for lost and opens it again.
BEAT_S = 2.0
#: Config sections whose ``owner`` is set to the host's name, so that lease holders name hosts.
OWNER_SECTIONS = ("persistence_postgres",)


@frozen(repr=False, eq=False)
class Elsewhere(Value):
    """The answer of a host that cannot take a session: another writer holds its lease.
    ``owner``: the holder's label (a host's name when the store labels leases with it), or
    ``None`` when the store does not say."""

    owner: str | None
    reason: str


@frozen(repr=False, eq=False)
class Beat(Value):
    """Sent on an event stream that had nothing to send for :data:`BEAT_S`: the host lives."""


@frozen(repr=False, eq=False)
class HostInfo(Value):
    """What ``dsh cluster status`` shows of a host."""

    name: str
    pid: int
    hostname: str
    node: str
    sessions: tuple[str, ...]


class _Progress:
    """A host plugin that wakes whoever waits for a session's writes when a write ends."""

    def __init__(self, host: SessionHost) -> None:
        self._host = host

    @hookimpl
    def dsh_session_checkpoint(self, session: Session) -> Awaitable[None]:
        # A coroutine: it runs once every store's write of this checkpoint has been started.
        return self._wake(session)

    @hookimpl
    def dsh_session_flush(self, session: Session) -> Awaitable[None]:
        return self._wake(session)

    @hookimpl
    def dsh_session_closed(self, session: Session) -> None:
        self._host.changed(session.id)

    async def _wake(self, session: Session) -> None:
        self._host.changed(session.id)


class SessionHost:
    """Runs the agents of the sessions routed to it (see the module's docstring). ``name`` is
    the host's label in the pool; ``record_timeout_s`` bounds the wait for a message to be
    recorded."""

    def __init__(self, name: str, spec: HostSpec, record_timeout_s: float = 30.0) -> None:
        self.name = name
        self.spec = spec
        self.record_timeout_s = record_timeout_s
        self._harness: Harness | None = None
        self._store: BufferedStore | AsyncBufferedStore | None = None
        self._starting = asyncio.Lock()
        self._agents: dict[str, Agent] = {}
        self._opening: dict[str, asyncio.Lock] = {}
        self._signals: dict[str, asyncio.Event] = {}
        self._resuming: asyncio.Task[None] | None = None

    # -- lifetime ----------------------------------------------------------------------------
    async def harness(self) -> Harness:
        """The host's harness, started on first use (a Ray actor's constructor cannot await)."""
        async with self._starting:
            if self._harness is None:
                harness = Harness(plugins=self._plugins(), config=self._config())
                await harness.start()
                try:
                    self._store = _store_of(harness)
                except DshError:
                    await harness.close()
                    raise
                self._harness = harness
                self._resuming = asyncio.create_task(self._resume_held(self._store))
            return self._harness

    async def _resume_held(self, store: BufferedStore | AsyncBufferedStore) -> None:
        """Resume at once every session whose lease still names this host: a host restarted
        under its name (its actor, or its node, died) closes the turns its previous life left
        open and runs the messages queued there, without waiting for a caller to ask. A
        session that cannot be resumed here is left to the next call that reaches it."""
        for session_id in await store.sessions_held_by(self.name):
            try:
                await self._agent(session_id, create=False)
            except DshError as exc:
                log.warning(
                    "host.resume_failed", host=self.name, session=session_id, error=str(exc)
                )

    def _config(self) -> dict[str, Any]:
        config = dict(self.spec.config)
        for section in OWNER_SECTIONS:
            if section in config:
                config[section] = {**config[section], "owner": self.name}
        return config

    def _plugins(self) -> list[object]:
        return [*(load_plugin(name) for name in self.spec.plugins), _Progress(self)]

    async def close(self) -> None:
        """Stop every agent (a running turn ends ``disposed``), write and release the
        sessions."""
        if self._resuming is not None:
            self._resuming.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await self._resuming
            self._resuming = None
        if self._harness is not None:
            await self._harness.close()
            self._harness = None
            self._agents.clear()

    def info(self, node: str = "") -> HostInfo:
        live = tuple(sorted(sid for sid, a in self._agents.items() if not a.disposing))
        return HostInfo(self.name, os.getpid(), socket.gethostname(), node, live)

    # -- calls -------------------------------------------------------------------------------
    async def send(
        self, session_id: str, content: Content, steer: bool = False
    ) -> Elsewhere | None:
        """Queue ``content`` (steer the running turn with ``steer``), and return once the
        store has recorded it."""
        agent = await self._agent(session_id)
        if isinstance(agent, Elsewhere):
            return agent
        before = len(agent.session)
        (agent.steer if steer else agent.send)(content)
        await self._recorded(agent, before + 1)
        return None

    async def abort(self, session_id: str, reason: str = "aborted") -> Elsewhere | None:
        """Abort the running turn of a session this host runs; ``Elsewhere`` when another
        writer holds it (a session nobody runs has no turn to abort)."""
        agent = self._agents.get(session_id)
        if agent is not None and not agent.disposing:
            agent.abort(reason)
            return None
        store = self._ready_store()
        holder = await store.lease_holder(session_id)
        if holder is not None and holder.owner != self.name:
            return Elsewhere(holder.owner, f"session {session_id!r} is held by {holder.owner}")
        return None

    async def resume(self, session_id: str) -> Elsewhere | None:
        """Run the stored session here unless it runs already; ``DshError`` when no store
        holds it."""
        agent = await self._agent(session_id, create=False)
        return agent if isinstance(agent, Elsewhere) else None

    async def pending_approvals(self, session_id: str) -> list[PendingApproval] | Elsewhere:
        """The session's parked calls (the stored session is resumed here first)."""
        agent = await self._agent(session_id, create=False)
        return agent if isinstance(agent, Elsewhere) else agent.pending_approvals()

    async def decide(
        self, session_id: str, call_id: str, allow: bool, reason: str | None = None
    ) -> Elsewhere | None:
        """Decide the session's parked call ``call_id``; returns once it is recorded."""
        agent = await self._agent(session_id, create=False)
        if isinstance(agent, Elsewhere):
            return agent
        await agent.decide(call_id, allow, reason)
        return None

    async def events(
        self, session_id: str, after_seq: int = -1
    ) -> AsyncGenerator[SessionEvent | Elsewhere | Beat, None]:
        """The recorded events of the session after ``after_seq``, then each one the store
        records, until the session closes here (the host stops), with a :class:`Beat` after
        each :data:`BEAT_S` without one; a single :class:`Elsewhere` when another writer
        holds it."""
        agent = await self._agent(session_id)
        if isinstance(agent, Elsewhere):
            yield agent
            return
        harness = await self.harness()
        session = agent.session
        seq = after_seq + 1
        loop = asyncio.get_running_loop()
        quiet_since = loop.time()
        while True:
            signal = self._signal(session_id)
            written = self._ready_store().written(session)
            while seq < written:
                yield session.events[seq]
                seq += 1
                quiet_since = loop.time()
            if harness.sessions.get(session_id) is not session:
                return  # closed: everything it held was written
            if loop.time() - quiet_since >= BEAT_S:
                yield Beat()
                quiet_since = loop.time()
            await self._wait(signal, POLL_S if written < len(session) else BEAT_S)

    # -- sessions ----------------------------------------------------------------------------
    async def _agent(self, session_id: str, create: bool = True) -> Agent | Elsewhere:
        agent = self._agents.get(session_id)
        if agent is not None and not agent.disposing:
            return agent
        async with self._opening.setdefault(session_id, asyncio.Lock()):
            agent = self._agents.get(session_id)
            if agent is not None and not agent.disposing:
                return agent
            try:
                agent = await self._open(session_id, create)
            except (SessionBusy, SessionConflict) as exc:
                holder = await self._ready_store().lease_holder(session_id)
                return Elsewhere(None if holder is None else holder.owner, str(exc))
            self._agents[session_id] = agent
            return agent

    async def _open(self, session_id: str, create: bool) -> Agent:
        """Resume the stored session, or start a new one; the writer lease is taken first."""
        harness = await self.harness()
        options = self.spec.options
        if create and await harness.sessions.load(session_id) is None:
            agent = harness.agent_loop.create(session_id, options, session_id=session_id)
            try:
                await harness.sessions.claim(agent.session)
            except DshError:
                await agent.dispose()
                raise
            return agent
        agent = await harness.agent_loop.resume(session_id, options, agent_id=session_id)
        # What the resume closed (a turn left open) is recorded now, not at the next turn:
        # the callers' streams are waiting for it.
        await agent.session.flush()
        return agent

    def _ready_store(self) -> BufferedStore | AsyncBufferedStore:
        if self._store is None:
            raise DshError(f"host {self.name!r} has not started")
        return self._store

    # -- progress ----------------------------------------------------------------------------
    def changed(self, session_id: str) -> None:
        """Wake whoever waits for the session (a write ended, or it closed)."""
        signal = self._signals.pop(session_id, None)
        if signal is not None:
            signal.set()

    def _signal(self, session_id: str) -> asyncio.Event:
        return self._signals.setdefault(session_id, asyncio.Event())

    @staticmethod
    async def _wait(signal: asyncio.Event, within: float) -> None:
        with contextlib.suppress(TimeoutError):
            await asyncio.wait_for(signal.wait(), within)

    async def _recorded(self, agent: Agent, count: int) -> None:
        """Wait until the store holds ``count`` events of the agent's session."""
        loop = asyncio.get_running_loop()
        deadline = loop.time() + self.record_timeout_s
        while True:
            signal = self._signal(agent.session.id)
            if self._ready_store().written(agent.session) >= count:
                return
            if loop.time() >= deadline:
                raise DshError(
                    f"host {self.name!r}: the message to session {agent.session.id!r} was not "
                    f"recorded within {self.record_timeout_s:g} s; is the store reachable? "
                    "(it stays queued, and is recorded with the next write that succeeds)"
                )
            await self._wait(signal, POLL_S)


def _store_of(harness: Harness) -> BufferedStore | AsyncBufferedStore:
    """The enabled store of ``harness``; a host without one could not hand a session on."""
    stores = {
        name: plugin
        for name, plugin in ((n, harness.plugins.get(n)) for n in harness.plugins.names())
        if isinstance(plugin, BufferedStore | AsyncBufferedStore) and plugin.enabled
    }
    if len(stores) == 1:
        return next(iter(stores.values()))
    found = f"found: {', '.join(sorted(stores))}" if stores else "none is enabled"
    raise DshError(
        "a cluster host needs exactly one session store, one that every host shares "
        "(persistence_postgres, or persistence_sqlite on a file all hosts reach), so that a "
        f"session survives its host ({found}; disable the others, e.g. persistence_jsonl)"
    )
