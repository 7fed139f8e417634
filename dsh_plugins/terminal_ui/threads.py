"""The two threads of ``dsh chat`` and what passes between them.

The terminal keeps the main thread: GNU readline edits lines there, and only there does Ctrl-C
interrupt a blocking read. The harness runs on an asyncio loop in a second thread
(:class:`LoopThread`), so answers stream and steering messages are read at the same time.
Everything the terminal waits for arrives through one :class:`Pump`: lines typed on stdin,
messages posted by the loop thread, and Ctrl-C.
"""

from __future__ import annotations

import asyncio
import concurrent.futures
import os
import select
import signal
import threading
from collections import deque
from collections.abc import Coroutine, Sequence
from contextlib import suppress
from typing import Any, TypeVar

from attrs import frozen

from dsh.plugin import Value

__all__ = [
    "Approval",
    "Done",
    "Draft",
    "Eof",
    "Idle",
    "Interrupt",
    "Line",
    "LoopThread",
    "Message",
    "OutputClosed",
    "Pump",
]

T = TypeVar("T")


@frozen(repr=False, eq=False)
class Line(Value):
    """A line typed on stdin, without its line break."""

    text: str


@frozen(repr=False, eq=False)
class Eof(Value):
    """Stdin ended (Ctrl-D on a terminal)."""


@frozen(repr=False, eq=False)
class Interrupt(Value):
    """Ctrl-C."""


@frozen(repr=False, eq=False)
class Idle(Value):
    """The agent finished working: nothing queued, no turn running."""


@frozen(eq=False, repr=False)
class Approval(Value):
    """A policy asks whether a tool call may run: ask ``question``, resolve ``answer``."""

    question: str
    answer: concurrent.futures.Future[bool]


@frozen(repr=False, eq=False)
class Draft(Value):
    """Steering the user's abort kept from the model: offered at the next prompt to send or
    drop."""

    text: str


@frozen(eq=False, repr=False)
class Done(Value):
    """A coroutine submitted to the loop thread finished (or was cancelled)."""

    future: concurrent.futures.Future[Any]


@frozen(repr=False, eq=False)
class OutputClosed(Value):
    """Nobody reads the chat's output any more (a pipe whose reader went away)."""


Message = Line | Eof | Interrupt | Idle | Approval | Done | Draft | OutputClosed


class Pump:
    """The terminal thread's one place to wait. ``post`` may be called from any thread and from
    signal handlers; ``next`` blocks until a message was posted or (``stdin=True``) a line was
    typed."""

    def __init__(self, fd: int) -> None:
        self.fd = fd
        self.eof = False
        self._messages: deque[Message] = deque()
        self._typed = b""
        self._wake_read, self._wake_write = os.pipe()
        os.set_blocking(self._wake_read, False)
        os.set_blocking(self._wake_write, False)

    def post(self, message: Message) -> None:
        self._messages.append(message)
        with suppress(BlockingIOError):  # the pipe is full: the reader is awake anyway
            os.write(self._wake_write, b"\0")

    def push_back(self, messages: Sequence[Message]) -> None:
        """Return messages taken out of order, to be the next ``next`` answers."""
        self._messages.extendleft(reversed(messages))

    def take_interrupt(self) -> bool:
        """Remove a queued Ctrl-C, if there is one (the readline prompt, which does not read
        the pump, checks for one that came as the previous wait ended)."""
        return self.take(Interrupt)

    def take(self, kind: type[Message]) -> bool:
        """Remove the first queued message of type ``kind``, if there is one."""
        for message in self._messages:
            if isinstance(message, kind):
                self._messages.remove(message)
                return True
        return False

    def take_interrupts(self) -> bool:
        """Remove the Ctrl-Cs waiting at the head of the queue (without blocking); whether
        there were any. ``popleft`` alone is safe against a concurrent ``post``."""
        found = False
        while self._messages and isinstance(self._messages[0], Interrupt):
            self._messages.popleft()
            found = True
        return found

    def next(self, *, stdin: bool) -> Message:
        while True:
            if self._messages:
                return self._messages.popleft()
            if stdin:
                line = self._typed_line()
                if line is not None:
                    return line
                if self.eof:
                    return Eof()
            self._wait(stdin)

    def _typed_line(self) -> Line | None:
        head, newline, rest = self._typed.partition(b"\n")
        if not newline and not (self.eof and head):
            return None
        self._typed = rest
        return Line(head.decode(errors="replace").removesuffix("\r"))

    def _wait(self, stdin: bool) -> None:
        watched = [self._wake_read, self.fd] if stdin else [self._wake_read]
        ready, _, _ = select.select(watched, [], [])
        if self._wake_read in ready:
            with suppress(BlockingIOError):  # one read empties a default-sized pipe
                os.read(self._wake_read, 1 << 16)
        if self.fd in ready:
            data = os.read(self.fd, 4096)
            self._typed += data
            self.eof = not data

    def close(self) -> None:
        os.close(self._wake_read)
        os.close(self._wake_write)


class LoopThread:
    """An asyncio event loop on a daemon thread. ``submit`` runs a coroutine there."""

    def __init__(self) -> None:
        self.loop = asyncio.new_event_loop()
        self._thread = threading.Thread(target=self._run, name="dsh-chat-loop", daemon=True)

    def start(self) -> None:
        self._thread.start()

    def submit(self, coro: Coroutine[Any, Any, T]) -> concurrent.futures.Future[T]:
        return asyncio.run_coroutine_threadsafe(coro, self.loop)

    def stop(self) -> None:
        """Stop the loop, cancel what still runs on it, and wait for the thread to end."""
        self.loop.call_soon_threadsafe(self.loop.stop)
        self._thread.join()

    def _run(self) -> None:
        # Ctrl-C must reach the main thread, where it interrupts the terminal's wait.
        signal.pthread_sigmask(signal.SIG_BLOCK, {signal.SIGINT})
        asyncio.set_event_loop(self.loop)
        try:
            self.loop.run_forever()
        finally:
            tasks = asyncio.all_tasks(self.loop)
            for task in tasks:
                task.cancel()
            self.loop.run_until_complete(asyncio.gather(*tasks, return_exceptions=True))
            self.loop.run_until_complete(self.loop.shutdown_asyncgens())
            self.loop.close()
