"""The writer leases of ``persistence_sqlite``: the ``writers`` row of a session (:class:`Lease`)
and whether the process holding it still runs. Imported by an enabled store, once it is
started: a harness whose SQLite store is off (the default) never builds the class."""

from __future__ import annotations

import os
import socket
from pathlib import Path

from attrs import frozen

from dsh.plugin import Value, Writer

__all__ = ["PROC", "Lease", "process_alive", "started_self"]

#: Where :func:`process_alive` reads a process's state and start time (Linux).
PROC = Path("/proc")


def _process_stat(pid: int) -> tuple[str, int] | None:
    """``(state, start time in clock ticks after boot)`` of ``pid`` from ``/proc``, or ``None``
    where there is no ``/proc``."""
    try:
        stat = (PROC / str(pid) / "stat").read_text()
    except OSError:
        return None
    fields = stat[stat.rindex(")") + 2 :].split()  # the name before ")" may hold spaces
    return fields[0], int(fields[19])


def process_alive(pid: int, started: int | None) -> bool:
    """Whether process ``pid`` of this host runs — the one that took a lease when ``started``
    (its start time) is known, not a later process given the same id. A zombie is dead."""
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        pass  # it exists, owned by someone else
    stat = _process_stat(pid)
    if stat is None:
        return True
    state, start = stat
    return state != "Z" and (started is None or start == started)


@frozen(repr=False, eq=False)
class Lease(Value):
    """A session's writer lease, as the ``writers`` row holds it.

    The holder takes it in the transaction of its first write and renews it (``renewed``) in
    every later one. Another store may take it over when the holder is gone: on the same host
    when the holder's process is no longer alive (at once, after a crash); from another host,
    where liveness cannot be checked, when the lease was not renewed for ``lease_seconds``. A
    holder whose lease was taken over fails its next write with :class:`SessionBusy`: the check
    runs in the same transaction as the write, so nothing it wrote is ever interleaved.
    """

    owner: str
    pid: int
    started: int | None
    host: str
    since: float
    renewed: float

    def stale(self, now: float, lease_seconds: float) -> bool:
        if self.host == socket.gethostname():
            return not process_alive(self.pid, self.started)
        return now - self.renewed > lease_seconds

    def writer(self) -> Writer:
        return Writer(self.pid, self.host, self.since)


def started_self() -> int | None:
    stat = _process_stat(os.getpid())
    return None if stat is None else stat[1]
