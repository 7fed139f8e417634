"""How long one streamed call may wait for its next event.

The adapter awaits the SDK's stream helper one event at a time, each under :meth:`Deadline.wait`;
the decoder (:mod:`.framing`), which runs inside that await, reports what each network read
held. So the deadline moves with the wire, not with the helper's events:

* once data has started, only data moves it: each wait may last ``idle_timeout_s``, and
  keep-alive comments never extend it (a server that only sends comments has stalled);
* before the first data event, a read that holds a comment is a queued request still waiting
  for inference: it moves the deadline ``idle_timeout_s`` on, but never past
  ``first_data_timeout_s`` after the response headers. Silence is a stall either way.

:data:`CURRENT` carries the deadline from the adapter to the decoder the SDK's client makes
while the request is sent (``_make_sse_decoder`` takes no arguments).
"""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable
from contextvars import ContextVar
from typing import TypeVar

from dsh.plugin import LlmError

__all__ = ["CURRENT", "Deadline"]

T = TypeVar("T")

#: The deadline of the call being sent in this context, for the decoder its response gets.
CURRENT: ContextVar[Deadline | None] = ContextVar("dsh_llm_openai_sdk_deadline", default=None)


class Deadline:
    """The wait budget of one streamed response, from its headers on."""

    def __init__(self, idle_timeout_s: float, first_data_timeout_s: float) -> None:
        self.idle_timeout_s = idle_timeout_s
        self.first_data_timeout_s = max(first_data_timeout_s, idle_timeout_s)
        self.started = False
        self._loop = asyncio.get_running_loop()
        self._when = self._queue_end = 0.0
        self._scope: asyncio.Timeout | None = None

    def headers_arrived(self) -> None:
        """Start the clock: the first event may come ``idle_timeout_s`` from now, or later as
        long as keep-alives say the request is queued."""
        now = self._loop.time()
        self._when = now + self.idle_timeout_s
        self._queue_end = now + self.first_data_timeout_s

    def keep_alive(self) -> None:
        """A read held a comment and no event: before data, the request is queued."""
        if not self.started:
            self._move(min(self._loop.time() + self.idle_timeout_s, self._queue_end))

    def data_arrived(self) -> None:
        """A read completed an event: from now on only events count."""
        self.started = True

    async def wait(self, step: Awaitable[T]) -> T:
        """``await step`` within the deadline; ``LlmError(TIMEOUT)`` when it passes."""
        if self.started:
            self._when = self._loop.time() + self.idle_timeout_s
        try:
            async with asyncio.timeout_at(self._when) as scope:
                self._scope = scope
                return await step
        except TimeoutError as exc:
            raise LlmError.of("TIMEOUT", self._timed_out()) from exc
        finally:
            self._scope = None

    def _move(self, when: float) -> None:
        self._when = when
        if self._scope is not None:
            self._scope.reschedule(when)

    def _timed_out(self) -> str:
        if self.started or self._when < self._queue_end:
            return f"the stream made no progress for {self.idle_timeout_s} s"
        return (
            f"no data within {self.first_data_timeout_s} s: the request stayed queued "
            "(only keep-alive comments); raise first_data_timeout_s to wait longer"
        )
