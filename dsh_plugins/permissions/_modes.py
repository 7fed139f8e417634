"""Each session's latest ``permissions/mode``, kept as its events are appended.

An agent's tool calls are judged in the mode of the last ``permissions/mode`` event of its
session (and of the sessions of the agents above it). :func:`scan_mode` finds it the plain way,
reading the log back from its end: it is the reference, what every answer of
:class:`ModeTracker` equals. It costs a walk over the whole log whenever no mode was logged
(most sessions), and it runs at every tool call and every model request: over a long run, time
quadratic in the number of steps. :class:`ModeTracker` keeps the answer per session instead:

* A session created through the hooks the plugin is registered with (a fresh one, a fork, a
  resumed one): its log is read once, when ``dsh_session_created`` announces it (a resumed or
  forked session's past modes count). From then on every event appended to it is announced to
  ``dsh_session_event`` — a ``permissions/mode`` event is never one the log keeps packed
  without announcing it — and the tracker records each mode change there. A lookup is a
  dictionary lookup, whatever the length of the log.
* Any other session (made without hooks, or before the plugin was registered, or used again
  after ``dsh_session_closed``): the tracker remembers how far it has read the log and reads
  only the events appended since. The log only grows (compaction appends its events; it never
  rewrites the log), so what was read stays read.

``tests/plugins/permissions/test_modes.py`` checks, with Hypothesis, that the two agree for
any sequence of appended events, resumes, forks, closes and sub-agents.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, cast
from weakref import WeakKeyDictionary

from dsh.plugin import PERMISSION_MODE

if TYPE_CHECKING:
    from dsh.plugin import PermissionModeChange, Session

__all__ = ["ModeTracker", "scan_mode"]


def scan_mode(session: Session) -> str | None:
    """The reference: the mode of the last ``permissions/mode`` event of ``session``'s log
    (``None``: none), read back from the end of the whole log."""
    last = next(session.events.select(PERMISSION_MODE, reverse=True), None)
    if last is None:
        return None
    change = cast("PermissionModeChange", last.data)  # what select() gives
    return change.mode


class _Latest:
    """What the tracker knows of one session: the ``seq`` and ``mode`` of its latest
    ``permissions/mode`` event (``-1`` and ``None``: none), and how many of its events it has
    read itself (``None``: it need not read any, every event appended is announced to it)."""

    __slots__ = ("mode", "read", "seq")

    def __init__(self, seq: int, mode: str | None, read: int | None) -> None:
        self.seq = seq
        self.mode = mode
        self.read = read


class ModeTracker:
    """Each session's latest logged permission mode, kept up to date as events are appended.
    The plugin hands it the sessions its hooks announce (:meth:`created`, :meth:`appended`,
    :meth:`closed`) and asks it for a session's mode (:meth:`mode`). It holds no session alive."""

    def __init__(self) -> None:
        self._sessions: WeakKeyDictionary[Session, _Latest] = WeakKeyDictionary()

    def created(self, session: Session) -> None:
        """``session`` was created, and every event appended to it from now on is announced
        (:meth:`appended`): read what it holds already, once."""
        seq, mode = _last(session, 0)
        self._sessions[session] = _Latest(seq, mode, None)

    def appended(self, session: Session, seq: int, mode: str) -> None:
        """Event ``seq`` of ``session`` switched it to ``mode``."""
        latest = self._sessions.get(session)
        # An observer may append while it is told of an event, so a later event can be
        # announced before an earlier one: the latest stays the latest.
        if latest is not None and seq > latest.seq:
            latest.seq, latest.mode = seq, mode

    def closed(self, session: Session) -> None:
        """``session`` was closed: forget it (if it is used again, :meth:`mode` reads it)."""
        self._sessions.pop(session, None)

    def mode(self, session: Session) -> str | None:
        """What :func:`scan_mode` says of ``session`` now."""
        latest = self._sessions.get(session)
        if latest is None:  # never announced: read it here, and later only what is new
            latest = self._sessions[session] = _Latest(-1, None, 0)
        if latest.read is not None and latest.read < len(session):
            seq, mode = _last(session, latest.read)
            if seq > latest.seq:
                latest.seq, latest.mode = seq, mode
            latest.read = len(session)
        return latest.mode


def _last(session: Session, start: int) -> tuple[int, str | None]:
    """The seq and mode of the last ``permissions/mode`` event of ``session`` from event
    ``start`` on (``-1`` and ``None``: none there)."""
    last = next(session.events[start:].select(PERMISSION_MODE, reverse=True), None)
    if last is None:
        return -1, None
    change = cast("PermissionModeChange", last.data)  # what select() gives
    return last.seq, change.mode
