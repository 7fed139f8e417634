"""The per-agent inbox: a queued FIFO (drained whole at turn start) and a steering FIFO
(drained between steps)."""

from __future__ import annotations

import asyncio
from collections import deque

from attrs import frozen

from dsh.content import Block, MessageSource, UserSource

__all__ = ["Inbox", "InboxMessage"]


@frozen
class InboxMessage:
    """A message waiting in the inbox; ``queued_seq`` is its ``inbox/queued`` event, if any."""

    content: tuple[Block, ...]
    source: MessageSource = UserSource()
    queued_seq: int | None = None


class Inbox:
    """Two FIFOs. ``enqueue`` wakes a waiter; ``steer`` does not (steering waits for a step)."""

    def __init__(self) -> None:
        self._queued: deque[InboxMessage] = deque()
        self._steering: deque[InboxMessage] = deque()
        self._wake = asyncio.Event()
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
        drained = list(self._queued)
        self._queued.clear()
        return drained

    def drain_steering(self) -> list[InboxMessage]:
        drained = list(self._steering)
        self._steering.clear()
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
