"""The per-agent inbox: a queued FIFO (drained whole at turn start) and a steering FIFO
(drained between steps)."""

from __future__ import annotations

import asyncio

from attrs import frozen

from dsh.values._content import Block, MessageSource, UserSource
from dsh.values._value import Value

__all__ = ["Inbox", "InboxMessage", "Signal"]


@frozen(repr=False, eq=False)
class InboxMessage(Value):
    """A message waiting in the inbox; ``queued_seq`` is its ``inbox/queued`` event, if any."""

    content: tuple[Block, ...]
    source: MessageSource = UserSource()
    queued_seq: int | None = None


class Signal:
    """:class:`asyncio.Event`'s ``set``/``clear``/``is_set``/``wait``, without its deque of
    waiters (760 bytes, made with every event; an agent has two, and a host may keep thousands
    of agents): the waiters share one future, made when the first of them waits. A cancelled
    waiter leaves the others waiting (each waits through :func:`asyncio.shield`)."""

    __slots__ = ("_flag", "_future")

    def __init__(self) -> None:
        self._flag = False
        self._future: asyncio.Future[None] | None = None

    def is_set(self) -> bool:
        return self._flag

    def set(self) -> None:
        """Set the flag and wake every waiter."""
        self._flag = True
        future, self._future = self._future, None
        # A future of a closed loop has nobody waiting any more (its waiters were closed with
        # the loop), and setting it would raise: an agent's task finalised after its loop closed.
        if future is not None and not future.done() and not future.get_loop().is_closed():
            future.set_result(None)

    def clear(self) -> None:
        self._flag = False

    async def wait(self) -> None:
        """Return once the flag is set (at once if it is)."""
        if self._flag:
            return
        if self._future is None:
            self._future = asyncio.get_running_loop().create_future()
        await asyncio.shield(self._future)


class Inbox:
    """Two FIFOs. ``enqueue`` wakes a waiter; ``steer`` does not (steering waits for a step).
    Each is drained whole, so a list is enough (and smaller than a deque)."""

    __slots__ = ("_queued", "_steering", "_wake", "closed")

    def __init__(self) -> None:
        self._queued: list[InboxMessage] = []
        self._steering: list[InboxMessage] = []
        self._wake = Signal()
        self.closed = False

    @property
    def has_queued(self) -> bool:
        return bool(self._queued)

    @property
    def has_steering(self) -> bool:
        return bool(self._steering)

    def enqueue(self, message: InboxMessage) -> None:
        self._queued.append(message)
        self._wake.set()

    def steer(self, message: InboxMessage) -> None:
        self._steering.append(message)

    def drain_queued(self) -> list[InboxMessage]:
        drained, self._queued = self._queued, []
        return drained

    def drain_steering(self) -> list[InboxMessage]:
        drained, self._steering = self._steering, []
        return drained

    def close(self) -> None:
        """Release the waiter for good (the agent is being disposed)."""
        self.closed = True
        self._wake.set()

    async def wait_for_queued(self) -> None:
        """Return once something is queued or the inbox is closed."""
        while not (self._queued or self.closed):
            self._wake.clear()
            await self._wake.wait()
