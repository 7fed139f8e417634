"""Per-message results over histories that grow at the end.

An agent's request carries its whole history, and at every step the history is the previous
one plus a few new messages. Whatever is computed per message for a request (its wire form, its
token estimate) is therefore computed again for every message at every step unless it is
remembered; remembering it per message (an ``lru_cache`` keyed by the message) still costs a
hash and a lookup per message per step, in Python, so a long conversation got dearer at every
step. :class:`HistoryMemo` remembers, per key (a session id), the last history seen and the
results of its messages: when the next history starts with it, only the new messages are
computed, and the comparison is one tuple comparison (in C; the messages are the same objects,
which the comparison takes for equal without looking inside them).

A history rewritten in the middle (compaction, a plugin that changes messages) is not an
extension: the messages it kept, the same objects, keep their results; the others are computed.

:class:`HistoryTotal` keeps only the sum of the results (a token estimate): a grown history
costs the comparison and its new messages, not a list extended and summed again whole.
"""

from __future__ import annotations

from collections.abc import Callable, Hashable, Sequence
from typing import Generic, TypeVar

from dsh.values._content import Message

__all__ = ["HistoryMemo", "HistoryTotal"]

T = TypeVar("T")
E = TypeVar("E")


class _PerKey(Generic[E]):
    """Entries ``(history, what is kept of it)`` per key, at most ``limit`` messages held in
    all, the least recently used keys forgotten first."""

    __slots__ = ("_entries", "_held", "limit")

    def __init__(self, limit: int) -> None:
        self.limit = limit
        self._entries: dict[Hashable, tuple[tuple[Message, ...], E]] = {}
        self._held = 0

    def __len__(self) -> int:
        """How many keys are remembered."""
        return len(self._entries)

    def __contains__(self, key: Hashable) -> bool:
        """Whether a history is remembered for ``key``."""
        return key in self._entries

    def _evict(self) -> None:
        while self._held > self.limit and len(self._entries) > 1:
            oldest = next(iter(self._entries))
            self._held -= len(self._entries.pop(oldest)[0])

    def forget(self, key: Hashable) -> None:
        """Drop what is remembered for ``key`` (its session ended)."""
        entry = self._entries.pop(key, None)
        if entry is not None:
            self._held -= len(entry[0])


class HistoryTotal(_PerKey[int]):
    """``sum(each(message) for message in history)``, remembered per key: a history that
    starts with the last one of its key costs ``each`` of its new messages only (a rewritten
    one is summed afresh). At most ``limit`` messages are held in all; a ``None`` key remembers
    nothing. ``each`` must depend on the message alone."""

    __slots__ = ("_each",)

    def __init__(self, each: Callable[[Message], int], limit: int = 65_536) -> None:
        super().__init__(limit)
        self._each = each

    def total(self, key: Hashable | None, messages: Sequence[Message]) -> int:
        history = tuple(messages)
        if key is None:
            return sum(map(self._each, history))
        entry = self._entries.pop(key, None)
        if entry is None:
            total = sum(map(self._each, history))
        else:
            before, known_total = entry
            self._held -= len(before)  # first: if ``each`` raises, the key is forgotten
            known = len(before)
            if len(history) >= known and history[:known] == before:
                total = known_total + sum(map(self._each, history[known:]))
            else:
                total = sum(map(self._each, history))
        self._entries[key] = (history, total)
        self._held += len(history)
        self._evict()
        return total


class HistoryMemo(_PerKey[list[T]]):
    """``each(message)`` for every message of a history, remembered per key.

    At most ``limit`` messages' results are kept in all: the least recently used keys are
    forgotten first (their next history is computed whole). A ``None`` key remembers nothing.
    ``each`` must depend on the message alone.
    """

    __slots__ = ("_each",)

    def __init__(self, each: Callable[[Message], T], limit: int = 65_536) -> None:
        super().__init__(limit)
        self._each = each

    def results(self, key: Hashable | None, messages: Sequence[Message]) -> list[T]:
        """``each`` of every message of ``messages``, in order. The list is the memo's own:
        read it before the next call with the same key, never change it."""
        history = tuple(messages)
        if key is None:
            return [self._each(message) for message in history]
        entry = self._entries.pop(key, None)
        if entry is None:
            results = [self._each(message) for message in history]
        else:
            self._held -= len(entry[0])  # first: if ``each`` raises, the key is forgotten
            results = self._update(entry, history)
        self._entries[key] = (history, results)
        self._held += len(history)
        self._evict()
        return results

    def _update(
        self, entry: tuple[tuple[Message, ...], list[T]], history: tuple[Message, ...]
    ) -> list[T]:
        before, results = entry
        known = len(before)
        if len(history) >= known and history[:known] == before:
            results.extend(self._each(message) for message in history[known:])
            return results
        # Rewritten: reuse the results of the messages kept (``before`` keeps them alive, so
        # their ids cannot have been reused by the new ones).
        kept = {id(message): result for message, result in zip(before, results, strict=True)}
        return [
            kept[id(message)] if id(message) in kept else self._each(message) for message in history
        ]
