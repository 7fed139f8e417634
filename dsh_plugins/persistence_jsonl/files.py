"""One live session's file: the events waiting to be written, and how they reach the disk."""

from __future__ import annotations

import contextlib
import os
from pathlib import Path

from dsh.converter import EventCodec
from dsh.errors import DshError
from dsh.events import SessionEvent
from dsh.session import Session
from dsh_plugins.persistence_jsonl.format import (
    COUNT_WIDTH,
    count_offset,
    encode_events,
    header_line,
    title_of,
)

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


class SessionFile:
    """The file of one live session.

    Events wait in ``pending`` until :meth:`write` hands them to the operating system. A session
    that was loaded from this file (``persisted > 0``) is appended to, after cutting a line torn
    by a crash; any other session (new, forked, or loaded from another store) writes a new file,
    seed events included. The header's event count is rewritten in place by :meth:`sync_count`.
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

    def write(self) -> None:
        """Hand the pending events to the operating system (no fsync)."""
        if not self.pending:
            return
        fd = self._fd if self._fd is not None else self._open()
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
        if self._fd is not None:
            self.sync_count()
            os.close(self._fd)
            self._fd = None

    # -- opening ---------------------------------------------------------------------------
    def _open(self) -> int:
        try:
            self.path.parent.mkdir(parents=True, exist_ok=True)
            fd = self._open_for_append() if self.session.persisted else None
            if fd is None:
                fd = self._create()
        except OSError as exc:
            raise DshError(f"cannot open session file {self.path}: {exc}") from exc
        self._fd = fd
        return fd

    def _open_for_append(self) -> int | None:
        """The stored file, its torn tail cut, or ``None`` when it must be written anew."""
        try:
            fd = os.open(self.path, os.O_RDWR)
        except FileNotFoundError:
            return None
        header = first_line(fd)
        if header is None:
            os.close(fd)
            return None
        self._size = last_line_end(fd, os.fstat(fd).st_size)
        os.ftruncate(fd, self._size)
        self._count_at = count_offset(header)
        return fd

    def _create(self) -> int:
        fd = os.open(self.path, os.O_RDWR | os.O_CREAT | os.O_TRUNC, 0o600)
        self.pending = list(self.session.events)
        self._count = 0
        self._count_shown = len(self.pending)  # what the header says once this write is done
        self._header = header_line(self.session, title_of(self.pending), self._count_shown)
        self._count_at = count_offset(self._header)
        self._size = 0
        self._created = True
        return fd
