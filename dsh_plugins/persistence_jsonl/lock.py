"""The writer lock of one session file: an OS file lock (``flock``) on ``<file>.lock``.

The lock is held while the session is open for writing and released when it is closed. The
operating system releases it when the holder dies, however it dies, so a crash never leaves a
session locked. The lock file holds who took it (process id, host, since when) so that a
refused second writer can name the holder. A holder removes the file when it releases the lock;
a taker that locked a file just removed (it opened it before the removal) sees that the path now
names another file, or none, and tries again.
"""

from __future__ import annotations

import contextlib
import fcntl
import json
import os
from pathlib import Path

from dsh.plugin import SessionBusy, Writer

__all__ = ["WriterLock", "lock_path"]


def lock_path(session_path: Path) -> Path:
    """The lock file beside a session file."""
    return session_path.with_name(f"{session_path.name}.lock")


def _holder(fd: int) -> Writer | None:
    """Who the lock file says holds it; ``None`` if it does not say yet (or says nonsense)."""
    try:
        raw = json.loads(os.pread(fd, 4096, 0))
        return Writer(int(raw["pid"]), str(raw["host"]), float(raw["since"]))
    except (ValueError, TypeError, KeyError):
        return None


def _names(fd: int, path: Path) -> bool:
    """Whether ``path`` still names the file open as ``fd``."""
    try:
        found = os.stat(path)
    except FileNotFoundError:
        return False
    mine = os.fstat(fd)
    return (found.st_dev, found.st_ino) == (mine.st_dev, mine.st_ino)


class WriterLock:
    """A held lock; :meth:`acquire` takes one, :meth:`release` lets it go."""

    def __init__(self, path: Path, fd: int) -> None:
        self.path = path
        self._fd: int | None = fd

    @classmethod
    def acquire(cls, path: Path, session_id: str) -> WriterLock:
        """Lock ``path`` (created if missing) for ``session_id``, or raise :class:`SessionBusy`
        naming the holder. Never waits."""
        while True:
            fd = os.open(path, os.O_RDWR | os.O_CREAT | os.O_CLOEXEC, 0o600)
            try:
                fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
            except BlockingIOError:
                holder = _holder(fd)
                os.close(fd)
                raise SessionBusy(session_id, holder, f" (lock file {path})") from None
            if _names(fd, path):
                break
            os.close(fd)  # released and removed between our open and our lock: try again
        writer = Writer.this_process()
        record = json.dumps({"pid": writer.pid, "host": writer.host, "since": writer.since})
        data = record.encode()
        with contextlib.suppress(OSError):  # who holds it is a courtesy: a full disk skips it
            os.pwrite(fd, data, 0)
            # Then cut what a dead holder's longer record left. Never truncate to zero first:
            # ext4 writes a file truncated to zero back at its close, which makes releasing a
            # lock cost ~50 us instead of ~7.
            os.ftruncate(fd, len(data))
        return cls(path, fd)

    @property
    def held(self) -> bool:
        return self._fd is not None

    def release(self) -> None:
        """Remove the lock file, then unlock it (closing it unlocks). Idempotent."""
        if self._fd is None:
            return
        with contextlib.suppress(FileNotFoundError):
            os.unlink(self.path)
        os.close(self._fd)
        self._fd = None
