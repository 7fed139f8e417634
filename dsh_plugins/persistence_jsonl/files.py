"""One live session's file: the events waiting to be written, and how they reach the disk."""

from __future__ import annotations

import contextlib
import os
from pathlib import Path

from dsh.converter import EventCodec
from dsh.errors import DshError
from dsh.events import SessionEvent
from dsh.session import Session, SessionConflict
from dsh_plugins.persistence_jsonl.format import (
    COUNT_WIDTH,
    count_offset,
    encode_events,
    header_line,
    next_seq,
    title_of,
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
    """The file of one live session.

    :meth:`claim` takes the session's writer lock (at the first checkpoint or flush); a session
    another process holds raises :class:`~dsh.session.SessionBusy`. Events wait in ``pending``
    until :meth:`write` hands them to the operating system. A session that was loaded from this
    file (``persisted > 0``) is appended to, after cutting a line torn by a crash — if the file
    still holds exactly the events it was loaded with; if not, another writer changed it and
    :class:`~dsh.session.SessionConflict` is raised, the file untouched. Any other session (new,
    forked, or loaded from another store) writes a new file, seed events included. The header's
    event count (that of the last flush) is rewritten in place by :meth:`sync_count`.
    """

    def __init__(self, path: Path, session: Session, codec: EventCodec) -> None:
        self.path = path
        self.session = session
        self.codec = codec
        self.pending: list[SessionEvent] = list(session.events[session.persisted :])
        self._fd: int | None = None
        self._size = 0
        self._header = b""
        self._count = session.persisted
        self._count_shown = session.persisted
        self._count_at: int | None = None
        self._created = False
        self._unsynced = False
        self._lock: WriterLock | None = None

    def claim(self) -> None:
        """Take the writer lock (if not held yet) and open a resumed session's file, checking
        that it holds what the session was loaded with."""
        if self._lock is not None:
            return
        try:
            self.path.parent.mkdir(parents=True, exist_ok=True)
            lock = WriterLock.acquire(lock_path(self.path), self.session.id)
        except OSError as exc:
            raise DshError(f"cannot open session file {self.path} for writing: {exc}") from exc
        try:
            if self.session.persisted:
                self._fd = self._open_for_append()
        except BaseException:
            lock.release()
            raise
        self._lock = lock

    def write(self) -> None:
        """Hand the pending events to the operating system (no fsync)."""
        self.claim()
        if not self.pending:
            return
        fd = self._fd if self._fd is not None else self._create()
        data = self._header + encode_events(self.pending, self.codec).encode()
        try:
            _write_all(fd, data, self._size)
        except OSError as exc:
            with contextlib.suppress(OSError):
                os.ftruncate(fd, self._size)  # no half-written line before the next attempt
            raise DshError(
                f"cannot write session {self.session.id!r} to {self.path}: {exc}"
            ) from exc
        self._size += len(data)
        self._unsynced = True
        self._count += len(self.pending)
        self._header = b""
        self.pending.clear()

    def sync_count(self) -> None:
        """Rewrite the header's event count if it is behind (listings read it)."""
        if self._fd is None or self._count_at is None or self._count == self._count_shown:
            return
        os.pwrite(self._fd, f"{self._count:>{COUNT_WIDTH}}".encode(), self._count_at)
        self._count_shown = self._count
        self._unsynced = True

    def fsync(self) -> None:
        """Make what was written durable (if anything was since the last time); a new file's
        directory entry too, once."""
        if self._fd is None or not self._unsynced:
            return
        os.fsync(self._fd)
        self._unsynced = False
        if self._created:
            directory = os.open(self.path.parent, os.O_RDONLY)
            try:
                os.fsync(directory)
            finally:
                os.close(directory)
            self._created = False

    def close(self) -> None:
        """Close the file and release the writer lock."""
        try:
            if self._fd is not None:
                self.sync_count()
                os.close(self._fd)
                self._fd = None
        finally:
            if self._lock is not None:
                self._lock.release()
                self._lock = None

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

    def _create(self) -> int:
        try:
            fd = os.open(self.path, os.O_RDWR | os.O_CREAT | os.O_TRUNC | os.O_CLOEXEC, 0o600)
        except OSError as exc:
            raise DshError(f"cannot open session file {self.path}: {exc}") from exc
        self._fd = fd
        self.pending = list(self.session.events)
        self._count = 0
        # The count says what a flush made sure of: 0 until the first one rewrites it.
        self._count_shown = 0
        self._header = header_line(self.session, title_of(self.pending), self._count_shown)
        self._count_at = count_offset(self._header)
        self._size = 0
        self._created = True
        return fd
