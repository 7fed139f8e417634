"""The output cap: keep the head and the tail of a stream, count what is elided between."""

from __future__ import annotations

__all__ = ["HeadTail"]


class HeadTail:
    """Collects a byte stream in at most ``limit`` bytes: the first half as it came, then a
    rolling tail of the last half. ``elided_bytes`` and ``elided_lines`` count what was lost."""

    def __init__(self, limit: int) -> None:
        self._head_limit = limit // 2
        self._tail_limit = limit - self._head_limit
        self._head = bytearray()
        self._tail = bytearray()
        self.elided_bytes = 0
        self.elided_lines = 0

    def feed(self, data: bytes) -> None:
        room = self._head_limit - len(self._head)
        if room > 0:
            self._head += data[:room]
            data = data[room:]
        self._tail += data
        excess = len(self._tail) - self._tail_limit
        if excess > 0:
            self.elided_bytes += excess
            self.elided_lines += self._tail.count(b"\n", 0, excess)
            del self._tail[:excess]

    def text(self) -> str:
        """What was kept, decoded; a marker says how much was elided in the middle."""
        if not self.elided_bytes:
            return (self._head + self._tail).decode("utf-8", "replace")
        head = self._head.decode("utf-8", "replace")
        tail = self._tail.decode("utf-8", "replace")
        marker = f"[... {self.elided_bytes} bytes ({self.elided_lines} lines) elided ...]"
        return f"{head}\n{marker}\n{tail}"
