"""File checkpoints and rewind: what the built-in file tools record before they change a file,
and how a session's files are put back as they were before one of its turns.

A file tool calls :func:`record_change` before it writes, deletes or moves: the file's previous
content is logged once per session as a ``file/blob`` event (:class:`~dsh.values._events.FileBlob`,
content-addressed by SHA-256, so the same content is kept once) and the change as a
``file/changed`` event (:class:`~dsh.values._events.FileChange`) naming the digests before and
after. The checkpoints are events of the log: they are written, made durable and forked with
it by whichever store holds the session. Content over a cap (per file, per session) is not kept:
the change is logged with ``lost`` saying why, and that file cannot be rewound.

:func:`rewind` reads those events: for every path changed since turn ``N`` began, its state
before the first of those changes is the one to restore, and the file must still be in one of
the states those changes left it in (normally the last one; an earlier one where a rewind of a
fork put it back) — else something else changed it since, and it is kept as a conflict unless
``force``.
"""

from __future__ import annotations

import base64
import contextlib
import hashlib
import os
import secrets
from collections.abc import Collection, Iterable, Sequence
from pathlib import Path
from typing import TYPE_CHECKING
from weakref import WeakKeyDictionary

from attrs import field, frozen

from dsh.session._session import error_messages
from dsh.session._text import file_change
from dsh.values._config import at_least
from dsh.values._content import Text
from dsh.values._errors import DshError
from dsh.values._events import SessionEvent, ToolCallEvent, ToolResultEvent, TurnStart, UserMessage
from dsh.values._rare_events import (
    ContextMessage,
    FileBlob,
    FileChange,
    SessionRewind,
    SteeringMessage,
    WithdrawnMessage,
)
from dsh.values._value import Value

if TYPE_CHECKING:
    from dsh.session._log import EventLog
    from dsh.session._session import Session, SessionRegistry
    from dsh.tools._registry import ToolRegistry

__all__ = [
    "CheckpointCaps",
    "RewindReport",
    "changed_files",
    "digest_of",
    "file_content",
    "record_change",
    "record_failure",
    "rewind",
    "shell_tools",
    "turn_changes",
    "turn_diff",
    "turn_start",
]

#: What a digest starts with: the hash it was made with.
DIGEST_PREFIX = "sha256:"


def digest_of(data: bytes) -> str:
    """The content address of ``data``: ``sha256:<hex>``."""
    return DIGEST_PREFIX + hashlib.sha256(data).hexdigest()


def file_content(path: Path) -> bytes | None:
    """The bytes of the file at ``path``, or ``None`` when there is none. Raises ``OSError``
    for anything else (a directory, no permission)."""
    try:
        return path.read_bytes()
    except (FileNotFoundError, NotADirectoryError):  # not there, or under a file
        return None


@frozen(repr=False, eq=False)
class CheckpointCaps(Value):
    """How much previous file content a session keeps: at most ``max_file_bytes`` of one file
    and ``max_session_bytes`` in all (distinct contents counted once). Content beyond either is
    not kept, and the file it belonged to cannot be rewound."""

    max_file_bytes: int = field(default=10_000_000, validator=at_least(0))
    max_session_bytes: int = field(default=100_000_000, validator=at_least(0))


def record_change(
    session: Session,
    *,
    tool: str,
    path: Path,
    before: bytes | None,
    after: str | None,
    call_id: str | None = None,
    caps: CheckpointCaps = CheckpointCaps(),
) -> str | None:
    """Log that ``tool`` is about to change the file at ``path`` from content ``before``
    (``None``: no file) to the content of digest ``after`` (``None``: no file), in the
    session's last turn: a ``file/blob`` with ``before`` unless the session already holds one
    of its digest, then the ``file/changed``. Returns ``None``, or — when ``before`` was over a
    cap and not kept — a sentence for the user saying so."""
    digest = lost = None
    if before is not None:
        digest = digest_of(before)  # once: a SHA-256 of up to max_file_bytes
        held = _BLOBS.held(session)
        if digest not in held.sizes:
            lost = _over_cap(len(before), held.total, caps)
            if lost is None:
                encoded = base64.b64encode(before).decode("ascii")
                session.append(FileBlob(digest, len(before), encoded))
    turn = session.last_turn
    session.append(FileChange(turn, tool, str(path), digest, after, call_id, lost))
    if lost is None:
        return None
    return f"the previous content of {path.name} was not kept for rewind ({lost})"


class HeldBlobs:
    """The ``file/blob`` contents a session's log holds: their sizes by digest, and the total
    (each digest counted once) — what :func:`record_change` weighs a new blob against."""

    __slots__ = ("read", "sizes", "total")

    def __init__(self) -> None:
        self.sizes: dict[str, int] = {}
        self.total = 0
        #: How many of the session's events have been read.
        self.read = 0

    def add(self, events: EventLog) -> None:
        """Count the blobs of ``events``, the next events of the log."""
        for event in events.select(FileBlob):
            blob = event.data
            assert isinstance(blob, FileBlob)  # what select() gives
            if blob.digest not in self.sizes:
                self.sizes[blob.digest] = blob.size
                self.total += blob.size
        self.read += len(events)


def scan_blobs(session: Session) -> HeldBlobs:
    """The reference: the blobs of ``session``'s whole log, read from its start."""
    held = HeldBlobs()
    held.add(session.events)
    return held


class BlobTally:
    """Each session's :class:`HeldBlobs`, kept as its log grows: a call reads only the events
    appended since the last one (a log only grows), where :func:`scan_blobs` reads them all —
    at every file change, time quadratic in the length of a session. It holds no session
    alive; ``tests/test_rewind_blobs.py`` checks that it agrees with the scan."""

    def __init__(self) -> None:
        self._sessions: WeakKeyDictionary[Session, HeldBlobs] = WeakKeyDictionary()

    def held(self, session: Session) -> HeldBlobs:
        held = self._sessions.get(session)
        if held is None:
            held = self._sessions[session] = HeldBlobs()
        held.add(session.events[held.read :])
        return held


_BLOBS = BlobTally()


def _over_cap(size: int, held: int, caps: CheckpointCaps) -> str | None:
    if size > caps.max_file_bytes:
        return f"{size:,} bytes, over the cap of {caps.max_file_bytes:,} per file"
    if held + size > caps.max_session_bytes:
        return f"the session already keeps {held:,} bytes, cap {caps.max_session_bytes:,}"
    return None


def record_failure(
    session: Session,
    *,
    tool: str,
    path: Path,
    kept: str | None,
    error: str,
    call_id: str | None = None,
) -> None:
    """Log that the change :func:`record_change` announced failed: the file kept the content of
    digest ``kept`` (``None``: there is still no file)."""
    turn = session.last_turn
    session.append(FileChange(turn, tool, str(path), kept, kept, call_id, error=error))


# -- reading the checkpoints ---------------------------------------------------------------


def turn_start(events: Sequence[SessionEvent], turn: int) -> int:
    """The seq at which turn ``turn`` begins: its ``turn/start``, or the user messages just
    before it that it answers. Raises :class:`DshError` for a turn the log does not hold."""
    starts = [e.seq for e in events if isinstance(e.data, TurnStart) and e.data.turn == turn]
    if not starts:
        last = max((e.data.turn for e in events if isinstance(e.data, TurnStart)), default=0)
        held = f"turns 1 to {last}" if last else "no turn"
        raise DshError(f"there is no turn {turn}: the session holds {held}")
    seq = starts[0]
    while seq > 0 and isinstance(events[seq - 1].data, UserMessage):
        seq -= 1
    return seq


@frozen(repr=False, eq=False)
class PathChanges(Value):
    """What the file tools did to one path since a turn: its digest ``before`` the first change
    (``None``: no file), why that was not kept (``lost``), its digest ``after`` the last, and
    every state the changes ``passed`` through (a file in one of them was not changed by
    anything else: a fork's rewind, say, put it back there)."""

    path: str
    before: str | None
    after: str | None
    lost: str | None
    passed: frozenset[str | None]


def turn_changes(
    events: Iterable[SessionEvent], since_turn: int, until: int | None = None
) -> list[PathChanges]:
    """Every path the file tools changed in turn ``since_turn`` and later (up to turn
    ``until``), in the order of their first change."""
    found: dict[str, PathChanges] = {}
    last = until if until is not None else float("inf")
    for event in events:
        data = event.data
        if not isinstance(data, FileChange) or not since_turn <= data.turn <= last:
            continue
        first = found.get(data.path)
        states = frozenset((data.before, data.after))
        if first is None:
            found[data.path] = PathChanges(data.path, data.before, data.after, data.lost, states)
        else:
            passed = first.passed | states
            found[data.path] = PathChanges(data.path, first.before, data.after, first.lost, passed)
    return list(found.values())


def changes_by_turn(events: Iterable[SessionEvent]) -> dict[int, list[FileChange]]:
    """The ``file/changed`` events of a log by turn (failed changes left out)."""
    turns: dict[int, list[FileChange]] = {}
    for event in events:
        if isinstance(event.data, FileChange) and event.data.error is None:
            turns.setdefault(event.data.turn, []).append(event.data)
    return turns


def _blobs(events: Iterable[SessionEvent]) -> dict[str, bytes]:
    return {
        e.data.digest: base64.b64decode(e.data.data) for e in events if isinstance(e.data, FileBlob)
    }


def shell_tools(tools: ToolRegistry) -> set[str]:
    """The names of the tools that run commands (effect ``execute``): what they change is not
    tracked, so a rewind counts their calls."""
    return {name for name in tools.names() if getattr(tools.get(name), "effect", "") == "execute"}


def changed_files(events: Sequence[SessionEvent]) -> list[str]:
    """For each turn in which the file tools changed files, a line naming the turn and one
    line per change (``created``, ``changed``, ``deleted``, by which tool), for a person."""
    lines: list[str] = []
    for turn, changes in sorted(changes_by_turn(events).items()):
        lines.append(f"turn {turn}: {len(changes)} file change(s)")
        lines += [f"  {file_change(change)}" for change in changes]
    return lines


def turn_diff(events: Sequence[SessionEvent], turn: int) -> list[str]:
    """What turn ``turn``'s file changes did on disk, as unified diffs (a line for binary or
    content that was not kept): each path from its state before the turn to its state after
    it — the state a later change found, or the file on disk now if it still is in it."""
    turn_start(events, turn)  # an unknown turn is an error
    blobs = _blobs(events)  # content-addressed: a later change's "before" is this one's "after"
    lines: list[str] = []
    for change in turn_changes(events, turn, until=turn):
        after, path = change.after, Path(change.path)
        if after is not None and after not in blobs and _state(path)[0] == after:
            blobs[after] = file_content(path) or b""
        lines += _diff(change.path, change.before, after, blobs)
    return lines or [f"turn {turn} changed no file through the file tools"]


def _diff(path: str, before: str | None, after: str | None, blobs: dict[str, bytes]) -> list[str]:
    if (before is not None and before not in blobs) or (after is not None and after not in blobs):
        return [f"{path}: content not kept ({before or 'no file'} -> {after or 'no file'})"]
    old = b"" if before is None else blobs[before]
    new = b"" if after is None else blobs[after]
    try:
        old_text, new_text = old.decode(), new.decode()
    except UnicodeDecodeError:
        return [f"{path}: binary content, {len(old)} -> {len(new)} bytes"]
    import difflib  # only `dsh sessions diff` needs it: not at every start

    diff = difflib.unified_diff(
        old_text.splitlines(keepends=True),
        new_text.splitlines(keepends=True),
        "/dev/null" if before is None else f"a{path}",
        "/dev/null" if after is None else f"b{path}",
    )
    return [line.rstrip("\n") for line in diff] or [f"{path}: unchanged"]


# -- rewinding -----------------------------------------------------------------------------


@frozen(repr=False, eq=False)
class RewindReport(Value):
    """What a rewind did: session ``source`` was rewound to before turn ``to_turn`` and the
    conversation continues in ``session_id`` (a fork, or ``source`` itself in place).
    ``restored``: the files now as they were before that turn; ``conflicts``: files changed
    since by something else, kept as they are; ``lost``: files whose earlier content was over a
    cap, kept; ``shell_calls``: shell commands run since, whose effects stay."""

    session_id: str
    source: str
    to_turn: int
    restored: tuple[str, ...] = ()
    conflicts: tuple[str, ...] = ()
    lost: tuple[str, ...] = ()
    shell_calls: int = 0

    def lines(self) -> list[str]:
        """The report in words, one line each, for a person."""
        where = "in place" if self.session_id == self.source else f"as {self.session_id}"
        said = [f"rewound {self.source} to before turn {self.to_turn} {where}"]
        said += [f"  restored   {path}" for path in self.restored]
        said += [
            f"  conflict   {path} (changed since by something else; kept)"
            for path in self.conflicts
        ]
        said += [
            f"  not kept   {path} (its earlier content was over a cap; kept)" for path in self.lost
        ]
        if not (self.restored or self.conflicts or self.lost):
            said.append("  no file was changed by the file tools since then")
        if self.shell_calls:
            said.append(
                f"  {self.shell_calls} shell command(s) ran since then: their effects stay "
                "(shell commands are not tracked)"
            )
        return said


def _state(path: Path) -> tuple[str | None, str | None]:
    """The digest of the file at ``path`` now (``None``: no file), or a problem reading it."""
    try:
        content = file_content(path)
    except OSError as exc:
        return None, exc.strerror or str(exc)
    return (None if content is None else digest_of(content)), None


def _put(path: Path, content: bytes | None) -> None:
    """Give ``path`` the ``content`` (``None``: remove it), through a new file renamed over it."""
    if content is None:
        path.unlink(missing_ok=True)
        return
    path.parent.mkdir(parents=True, exist_ok=True)
    temporary = path.parent / f".{path.name}.{secrets.token_hex(6)}.dsh-tmp"
    try:
        temporary.write_bytes(content)
        os.replace(temporary, path)
    except BaseException:
        with contextlib.suppress(OSError):
            temporary.unlink()
        raise


def _restore(
    session: Session | None,
    changes: list[PathChanges],
    blobs: dict[str, bytes],
    force: bool,
) -> tuple[list[str], list[str], list[str]]:
    """Put every path back to its state before the changes; ``session``: log each change
    first, as a file tool would (an in-place rewind)."""
    restored: list[str] = []
    conflicts: list[str] = []
    lost: list[str] = []
    for change in changes:
        path = Path(change.path)
        now, problem = _state(path)
        if change.lost is not None or (change.before is not None and change.before not in blobs):
            lost.append(change.path)
        elif problem is None and now == change.before:
            restored.append(change.path)
        elif problem is not None or (now not in change.passed and not force):
            conflicts.append(change.path)
        else:
            done = _restore_one(session, path, now, change.before, blobs)
            (restored if done else conflicts).append(change.path)
    return restored, conflicts, lost


def _restore_one(
    session: Session | None,
    path: Path,
    now: str | None,
    before: str | None,
    blobs: dict[str, bytes],
) -> bool:
    """Put ``before`` back at ``path``; whether that could be done (a failure is logged in
    ``session`` after the change it announced)."""
    if session is not None:
        previous = None if now is None else file_content(path)
        record_change(session, tool="rewind", path=path, before=previous, after=before)
    try:
        _put(path, None if before is None else blobs[before])
    except OSError as exc:
        if session is not None:
            record_failure(session, tool="rewind", path=path, kept=now, error=str(exc))
        return False
    return True


def _answered_later(events: EventLog, start: int) -> list[int]:
    """The ``inbox/queued`` messages before ``start`` that a message at or after it answered:
    a fork ending at ``start`` withdraws them, so that resuming it does not send them again."""
    later = [e.data for e in events[start:] if isinstance(e.data, UserMessage | SteeringMessage)]
    return sorted(
        {m.queued_seq for m in later if m.queued_seq is not None and m.queued_seq < start}
    )


#: The codes of a call's result that say its tool never ran.
NOT_RUN = frozenset(
    {"DENIED", "APPROVAL_TIMEOUT", "ABORTED_BEFORE_DISPATCH", "UNKNOWN_TOOL", "INVALID_ARGS"}
)


def _ran(events: EventLog, turn: int, tools: Collection[str]) -> int:
    """How many calls of ``tools`` in turn ``turn`` and later ran (were not refused)."""
    calls = [e.data for e in events.select(ToolCallEvent, ToolResultEvent)]
    refused = {c.call_id for c in calls if isinstance(c, ToolResultEvent) and c.code in NOT_RUN}
    return sum(
        1
        for c in calls
        if isinstance(c, ToolCallEvent)
        and c.turn >= turn
        and c.name in tools
        and c.call_id not in refused
    )


async def rewind(
    sessions: SessionRegistry,
    source: Session,
    turn: int,
    *,
    in_place: bool = False,
    force: bool = False,
    shell_tools: Collection[str] = (),
    fork_id: str | None = None,
) -> tuple[Session, RewindReport]:
    """Put every file the file tools changed in ``source`` since turn ``turn`` began back as it
    was before it, and say where the conversation continues: a fork of ``source`` whose log
    ends before that turn (id ``fork_id``, stored at once; ``source`` is left as it is), or,
    ``in_place``, ``source`` itself, which logs the changes, a note for the model and the
    ``session/rewind``. Files changed since by anything else are kept (conflicts) unless
    ``force``; ``shell_tools`` names the tools whose calls since are counted as untracked."""
    events = source.events
    start = turn_start(events, turn)
    changes = turn_changes(events, turn)
    shell_calls = _ran(events, turn, shell_tools)
    target = source if in_place else sessions.fork(source, start - 1, fork_id)
    if not in_place:
        for seq in _answered_later(events, start):
            target.append(WithdrawnMessage(seq))
    restored, conflicts, lost = _restore(
        source if in_place else None, changes, _blobs(events), force
    )
    report = RewindReport(
        target.id, source.id, turn, tuple(restored), tuple(conflicts), tuple(lost), shell_calls
    )
    if in_place:
        note = "\n".join(report.lines())
        target.append(ContextMessage((Text(f"[the user rewound the files]\n{note}"),)))
    target.append(
        SessionRewind(source.id, turn, report.restored, report.conflicts, report.lost, shell_calls)
    )
    try:
        await target.flush()
    except Exception as exc:
        if not in_place:
            await sessions.close(target)  # given up: the agent stays where it was
        raise DshError(
            f"the files were put back, but session {target.id!r} could not be saved "
            f"({error_messages(exc)}): {'; '.join(report.lines())}"
        ) from exc
    return target, report
