"""The status line on a terminal: a spinner, what is being waited for and for how long.

``⠹ waiting for the model · 4s`` until the first token, ``thinking`` while hidden reasoning
streams, ``running shell`` while a tool runs. It is drawn over itself on the notes stream
(:meth:`.render.Lines.status`) by a task on the running event loop, and erased by the next
line written. Without a terminal there is no status line at all: nothing to erase in a file.
"""

from __future__ import annotations

import asyncio
import os
import time
from collections.abc import Callable
from typing import TYPE_CHECKING, TextIO

if TYPE_CHECKING:
    from dsh_plugins.terminal_ui.render import Lines

__all__ = ["FRAMES", "Progress", "wants_progress"]

FRAMES = "⠋⠙⠹⠸⠼⠴⠦⠧⠇⠏"


def wants_progress(stream: TextIO) -> bool:
    """A status line only on a terminal that can move its cursor back (not ``TERM=dumb``)."""
    return stream.isatty() and os.environ.get("TERM") != "dumb"


class Progress:
    """What the agent is waiting for. ``start(label)`` (again with the same label keeps the
    clock running), ``stop()``. The line appears only after ``delay_s``, so quick waits do
    not flicker, and is redrawn every ``interval_s``."""

    def __init__(
        self,
        lines: Lines,
        *,
        enabled: bool,
        clock: Callable[[], float] = time.monotonic,
        interval_s: float = 0.1,
        delay_s: float = 0.3,
    ) -> None:
        self.lines = lines
        self.enabled = enabled
        self.label: str | None = None
        self._clock = clock
        self._interval_s = interval_s
        self._delay_s = delay_s
        self._since = 0.0
        self._frame = 0
        self._task: asyncio.Task[None] | None = None

    def start(self, label: str) -> None:
        if not self.enabled:
            return
        if label != self.label:
            self.label, self._since = label, self._clock()
        if self._task is None or self._task.done():
            self._task = asyncio.get_running_loop().create_task(self._spin())

    def stop(self) -> None:
        self.label = None
        self.lines.clear_status()

    def text(self) -> str:
        """The status line as it is drawn now (the next spinner frame)."""
        elapsed = int(self._clock() - self._since)
        frame = FRAMES[self._frame % len(FRAMES)]
        self._frame += 1
        return f"{frame} {self.label} · {elapsed}s"

    async def _spin(self) -> None:
        while self.label is not None:
            if self._clock() - self._since >= self._delay_s:
                self.lines.status(self.lines.style.dim(self.text()))
            await asyncio.sleep(self._interval_s)
