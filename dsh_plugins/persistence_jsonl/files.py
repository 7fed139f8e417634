"""One live session's file: the events waiting to be written, and how they reach the disk."""

from __future__ import annotations

import contextlib
import os
from collections.abc import Sequence
from pathlib import Path

from dsh.plugin import DshError, EventCodec, Session, SessionConflict, SessionEvent, title_of
from dsh_plugins.persistence_jsonl.format import (
    COUNT_WIDTH,
    count_offset,
    encode_lines,
    header_line,
    next_seq,
)
from dsh_plugins.persistence_jsonl.lock import WriterLock, lock_path

__all__ = ["SessionFile", "first_line", "last_line_end"]

_BLOCK = 1 << 16


def first_line(fd: int) -> bytes | None:
    """The first line of the file (with its newline), or ``None`` if it is not complete."""
    data = b""
    while True:
        block = os.pread(fd, _BLOCK, len(data))
        end = block.find(b"\n")
        if end >= 0:
            return data + block[: end + 1]
        if not block:
            return None
        data += block


def last_line_end(fd: int, size: int) -> int:
    """The offset just after the last newline before ``size``; called once the header line is
    known to be complete, so there is one."""
    end = size
    while end > 0:
        start = max(0, end - _BLOCK)
        found = os.pread(fd, end - start, start).rfind(b"\n")
        if found >= 0:
            return start + found + 1
        end = start
    raise AssertionError("a session file with a complete header has a newline")


def _write_all(fd: int, data: bytes, offset: int) -> None:
    view = memoryview(data)
    while view:
        written = os.pwrite(fd, view, offset)
        view = view[written:]
        offset += written


def _stored_count(fd: int, header_end: int, size: int, path: Path) -> int:
    """How many events the complete lines after the header hold (the seq after the last)."""
    if size == header_end:
        return 0
    start = last_line_end(fd, size - 1)
    return next_seq(os.pread(fd, size - start, start), path)


class SessionFile:
    """The file of one live session, open for writing.

    :meth:`claim` takes the session's writer lock (at the first checkpoint or flush) and opens
    the file; a session another process holds raises :class:`~dsh.plugin.SessionBusy`. A
    session that was loaded from this file (``persisted > 0``) is appended to, after cutting a
    line torn by a crash — if the file still holds exactly the events it was loaded with; if
    not, another writer changed it and :class:`~dsh.plugin.SessionConflict` is raised,
    the file untouched. Any other session (new, forked, or loaded from another store) is written
    whole to a new file, seed events included (:meth:`write` with ``whole``). The header's event
    count (that of the last flush) is rewritten in place by :meth:`sync_count`.
    """

    def __init__(self, path: Path, session: Session, codec: EventCodec, lock: WriterLock) -> None:
        self.path = path
        self.session = session
        self.codec = codec
        self._lock = lock
        self._fd: int | None = None
        self._size = 0
        self._header = b""
        self._count = session.persisted
        self._count_shown = session.persisted
        self._count_at: int | None = None
        self._created = False
        #: Writes handed to the operating system, and how many of them an fsync has finished for.
        self._writes = 0
        self._synced = 0

    @classmethod
    def claim(cls, path: Path, session: Session, codec: EventCodec) -> SessionFile:
        """Take the writer lock of ``session`` and open its file if it was loaded from it,
        checking that the file holds what the session was loaded with."""
        try:
            path.parent.mkdir(parents=True, exist_ok=True)
            lock = WriterLock.acquire(lock_path(path), session.id)
        except OSError as exc:
            raise DshError(f"cannot open session file {path} for writing: {exc}") from exc
        file = cls(path, session, codec, lock)
        try:
            if session.persisted:
                file._fd = file._open_for_append()
        except BaseException:
            lock.release()
            raise
        return file

    @property
    def stored(self) -> int:
        """How many events the file holds that the session continues (0: it is written
        whole, to a new file)."""
        return self._count if self._fd is not None else 0

    def write(self, events: Sequence[SessionEvent], whole: bool) -> None:
        """Hand ``events`` to the operating system (no fsync): appended, or (``whole``) as the
        first events of a new file that replaces any old one."""
        fd = self._create(events) if whole else self._fd
        assert fd is not None, "a session file is created before it is appended to"
        data = self._header + encode_lines(events, self.codec)
        try:
            _write_all(fd, data, self._size)
        except OSError as exc:
            with contextlib.suppress(OSError):
                os.ftruncate(fd, self._size)  # no half-written line before the next attempt
            raise DshError(
                f"cannot write session {self.session.id!r} to {self.path}: {exc}"
            ) from exc
        self._size += len(data)
        self._writes += 1
        self._count += len(events)
        self._header = b""

    def sync_count(self) -> None:
        """Rewrite the header's event count if it is behind (listings read it)."""
        if self._fd is None or self._count_at is None or self._count == self._count_shown:
            return
        os.pwrite(self._fd, f"{self._count:>{COUNT_WIDTH}}".encode(), self._count_at)
        self._count_shown = self._count
        self._writes += 1

    @property
    def unsynced(self) -> bool:
        """Whether something was written that no finished fsync covers (one still running in a
        worker thread does not count: a flush meanwhile must sync, and wait, itself)."""
        return self._fd is not None and self._synced != self._writes

    def fsync(self) -> None:
        """Make what was written durable (if anything was since the last time); a new file's
        directory entry too, once. Runs in a worker thread: a write made while it runs stays
        unsynced, for the next call."""
        writes = self._writes
        if self._fd is None or self._synced == writes:
            return
        os.fsync(self._fd)
        if self._created:
            directory = os.open(self.path.parent, os.O_RDONLY)
            try:
                os.fsync(directory)
            finally:
                os.close(directory)
            self._created = False
        # Synced only now, the directory entry too; two fsyncs may finish in either order.
        self._synced = max(self._synced, writes)

    def close(self) -> None:
        """Close the file and release the writer lock."""
        try:
            if self._fd is not None:
                self.sync_count()
                os.close(self._fd)
                self._fd = None
        finally:
            self._lock.release()

    # -- opening ---------------------------------------------------------------------------
    def _open_for_append(self) -> int | None:
        """The stored file, its torn tail cut; ``None`` when it holds no event (none, or a
        header torn by a crash: the session was loaded from another store, and is written
        anew — which loses nothing)."""
        try:
            fd = os.open(self.path, os.O_RDWR | os.O_CLOEXEC)
        except FileNotFoundError:
            return None
        except OSError as exc:
            raise DshError(f"cannot open session file {self.path}: {exc}") from exc
        try:
            header = first_line(fd)
            size = last_line_end(fd, os.fstat(fd).st_size) if header is not None else 0
            stored = 0 if header is None else _stored_count(fd, len(header), size, self.path)
            if stored and stored != self.session.persisted:
                raise SessionConflict(
                    self.session.id, stored, self.session.persisted, f" ({self.path})"
                )
        except BaseException:
            os.close(fd)
            raise
        if header is None or not stored:
            os.close(fd)
            return None
        os.ftruncate(fd, size)
        self._size = size
        self._count_at = count_offset(header)
        return fd

    def _create(self, events: Sequence[SessionEvent]) -> int:
        try:
            fd = os.open(self.path, os.O_RDWR | os.O_CREAT | os.O_TRUNC | os.O_CLOEXEC, 0o600)
        except OSError as exc:
            raise DshError(f"cannot open session file {self.path}: {exc}") from exc
        self._fd = fd
        self._count = 0
        # The count says what a flush made sure of: 0 until the first one rewrites it.
        self._count_shown = 0
        self._header = header_line(self.session, title_of(events), self._count_shown)
        self._count_at = count_offset(self._header)
        self._size = 0
        self._created = True
        return fd
