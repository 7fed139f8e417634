"""The client side of agents hosted on a cluster: what a web replica holds to reach them.

A host application that outgrows one process runs its agents on a pool of hosts (the built-in
``cluster`` plugin runs them as Ray actors) and reaches them through a :class:`Pool`:
``pool = await dsh.cluster.connect()``, then ``send``, ``steer``, ``abort``, ``resume``,
``events``, ``pending_approvals`` and ``decide`` by session id, from any replica, in any
order. The pool routes each call to the host that writes the session; the host's store keeps
the log, so a session outlives its host.

The engine is found through the ``dsh.cluster`` entry-point group, never imported here: the
core stays free of any cluster engine, and a single-process install needs none. See
``docs/scaling.md``.
"""

from __future__ import annotations

import abc
from collections.abc import AsyncGenerator
from types import TracebackType
from typing import TYPE_CHECKING, Any

from dsh.hooks._entrypoints import entry_points
from dsh.values._errors import DshError

if TYPE_CHECKING:
    from dsh.values._agent import Content
    from dsh.values._approval import PendingApproval
    from dsh.values._events import SessionEvent

__all__ = ["ENTRY_POINT_GROUP", "HostLost", "Pool", "connect"]

#: The entry-point group a cluster engine registers its ``connect`` coroutine function under.
ENTRY_POINT_GROUP = "dsh.cluster"


class HostLost(DshError):
    """The host died while it took a message, so whether the message was recorded is unknown.

    ``send`` and ``steer`` are not repeated on their own (a repeat could deliver the message
    twice): read the session's events to see whether it arrived, then send it again if not.
    """

    def __init__(self, session_id: str, cause: BaseException) -> None:
        self.session_id = session_id
        super().__init__(
            f"the host of session {session_id!r} stopped while taking a message ({cause}); "
            "read the session's events (pool.events) to see whether the message was recorded "
            "before sending it again"
        )


class Pool(abc.ABC):
    """A pool of agent hosts, addressed by session id.

    Each session has one writer at a time: the pool sends every call for a session to the host
    that holds the session's writer lease, or, when no host does, to the host the session's id
    hashes to, which resumes it from the store (a turn its last host left open is closed
    ``interrupted``, queued messages run). A session id that was never used starts a new
    session.
    """

    @abc.abstractmethod
    async def send(self, session_id: str, message: Content) -> None:
        """Queue ``message`` for the session's agent; returns once it is recorded in the store
        (a host dying later cannot lose it). Raises :class:`HostLost` if the host died first."""

    @abc.abstractmethod
    async def steer(self, session_id: str, message: Content) -> None:
        """Steer the running turn (or queue the message when idle), recorded like ``send``."""

    @abc.abstractmethod
    async def abort(self, session_id: str, reason: str = "aborted") -> None:
        """Abort the session's running turn (nothing happens when it is idle)."""

    @abc.abstractmethod
    async def resume(self, session_id: str) -> None:
        """Make sure the session runs on a live host (after its host died, this closes the turn
        it left open and re-queues its queued messages); raises
        :class:`~dsh.values._errors.DshError` when no store holds the session."""

    @abc.abstractmethod
    async def pending_approvals(self, session_id: str) -> list[PendingApproval]:
        """The session's tool calls parked for a decision (and those of its live sub-agents)."""

    @abc.abstractmethod
    async def decide(
        self, session_id: str, call_id: str, allow: bool, reason: str | None = None
    ) -> None:
        """Decide the session's parked call ``call_id`` on the host that writes the session;
        returns once the decision is recorded (the turn then goes on there). Raises
        :class:`~dsh.values._approval.AlreadyDecided` when it was decided already."""

    @abc.abstractmethod
    def events(self, session_id: str, after_seq: int = -1) -> AsyncGenerator[SessionEvent, None]:
        """The session's events with a seq after ``after_seq``, in order, then each new one as
        the store records it, without end (stop iterating to stop). Only recorded events are
        sent, so a stream that continues on another host after a failure has no gap and no
        repeat."""

    @abc.abstractmethod
    async def close(self) -> None:
        """Let go of the pool's connections (the hosts and their agents keep running)."""

    async def __aenter__(self) -> Pool:
        return self

    async def __aexit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        await self.close()


async def connect(engine: str = "ray", **options: Any) -> Pool:
    """A :class:`Pool` of the cluster ``engine`` (``ray``: the ``cluster`` plugin, installed
    with ``pip install 'dsh-harness[ray]'``); ``options`` go to the engine (the Ray engine's
    are in ``docs/scaling.md``)."""
    found = [ep for ep in entry_points(group=ENTRY_POINT_GROUP) if ep.name == engine]
    if not found:
        names = sorted(ep.name for ep in entry_points(group=ENTRY_POINT_GROUP))
        raise DshError(
            f"no cluster engine {engine!r} is installed (installed: {', '.join(names) or 'none'})"
            f"; install it with pip install 'dsh-harness[{engine}]'"
        )
    try:
        factory = found[0].load()
    except ImportError as exc:
        raise DshError(
            f"cluster engine {engine!r} cannot be loaded: {exc}; install what it needs with "
            f"pip install 'dsh-harness[{engine}]'"
        ) from exc
    pool: Pool = await factory(**options)
    return pool
