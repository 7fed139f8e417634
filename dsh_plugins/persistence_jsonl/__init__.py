"""``persistence_jsonl``: the embedded default session store, one JSONL file per session.

Buffers each event in ``dsh_session_event`` (cheap: the loop's hot path), hands the buffer to
the operating system at every ``dsh_session_checkpoint`` (before each model request and tool
call) and fsyncs it at every ``dsh_session_flush`` (turn end, harness close) — configurable with
``fsync``. One writer per session: the first checkpoint or flush takes an OS file lock beside
the session file (:mod:`dsh_plugins.persistence_jsonl.lock`), held until the session is closed.
Loads and lists stored sessions for resume and fork. Configured by section
``persistence_jsonl``; see ``docs/plugins/persistence_jsonl.md``.
"""

from __future__ import annotations

import asyncio
import hashlib
import os
from collections.abc import Awaitable, Callable
from pathlib import Path
from typing import TYPE_CHECKING, Any
from urllib.parse import quote

import structlog
from attrs import frozen

from dsh.converter import EventCodec
from dsh.errors import DshError
from dsh.events import SessionEvent
from dsh.markers import hookimpl
from dsh.session import Session, SessionSummary
from dsh.store import Batch, BufferedStore, Fsync
from dsh.value import Value
from dsh_plugins.persistence_jsonl.files import SessionFile
from dsh_plugins.persistence_jsonl.format import decode_lines, parse_header

if TYPE_CHECKING:
    from dsh.harness import Harness

__all__ = [
    "SECTION",
    "Fsync",
    "JsonlConfig",
    "JsonlStore",
    "default_dir",
    "file_name",
    "list_sessions",
    "read_session",
]

SECTION = "persistence_jsonl"
log = structlog.get_logger("dsh_plugins.persistence_jsonl")


@frozen(repr=False)
class JsonlConfig(Value):
    """Section ``persistence_jsonl``. ``dir`` defaults to ``$XDG_DATA_HOME/dsh/sessions``
    (``~/.local/share/dsh/sessions``). ``fsync``: ``turn`` (at turn end and close), also at
    every ``checkpoint``, or ``never`` (a killed process still loses nothing checkpointed; a
    power cut may)."""

    enabled: bool = True
    dir: str = ""
    fsync: Fsync = "turn"


def default_dir() -> Path:
    """``$XDG_DATA_HOME/dsh/sessions``, read now."""
    data_home = os.environ.get("XDG_DATA_HOME") or os.path.join("~", ".local", "share")
    return Path(data_home).expanduser() / "dsh" / "sessions"


def file_name(session_id: str) -> str:
    """The file of ``session_id``: the id percent-encoded, hashed when it would be too long."""
    name = quote(session_id, safe="")
    if len(name) > 200:
        digest = hashlib.sha256(session_id.encode()).hexdigest()[:16]
        name = f"{name[:160]}~{digest}"
    return f"{name}.jsonl"


def read_session(path: Path, codec: EventCodec) -> list[SessionEvent]:
    """The events stored in ``path``; a torn final line is ignored. A file with fewer events
    than its header says a flush made durable lost lines: an error, never a short log."""
    lines = path.read_bytes().split(b"\n")
    complete = lines[:-1]  # the last piece is empty, or a line torn by a crash
    if not complete:
        return []
    header = parse_header(complete[0], path)
    events = decode_lines(complete[1:], codec, path)
    flushed = header.get("events", 0)
    if len(events) < flushed:
        raise DshError(
            f"{path}: session {header.get('id')!r} holds {len(events)} event(s) but its header "
            f"says {flushed} were written: the file lost lines (damage, or an outside edit). "
            "Restore it from a backup; to accept the loss, set the header's events to "
            f"{len(events)}"
        )
    return events


def _summary(path: Path, updated: float) -> SessionSummary | None:
    """What the header of ``path`` says; ``None`` (and a warning) when it is unreadable."""
    try:
        with path.open("rb") as file:
            header = parse_header(file.readline(), path)
        return SessionSummary(
            header["id"],
            header["created"],
            updated,
            header["events"],
            header["title"],
            header.get("parent"),
        )
    except (OSError, DshError, KeyError) as exc:
        log.warning("unreadable session file skipped", path=str(path), error=str(exc))
        return None


def list_sessions(directory: Path, query: str | None, limit: int) -> list[SessionSummary]:
    """Sessions in ``directory``, most recently written first. Reads only file metadata and
    the header lines of the files it returns (and of those it skips for ``query``)."""
    try:
        entries = [
            (e.stat().st_mtime, e.path) for e in os.scandir(directory) if e.name.endswith(".jsonl")
        ]
    except FileNotFoundError:
        return []
    found: list[SessionSummary] = []
    for updated, path in sorted(entries, reverse=True):
        if len(found) >= limit:
            break
        summary = _summary(Path(path), updated)
        if summary is not None and (query is None or query in summary.id or query in summary.title):
            found.append(summary)
    return found


class JsonlStore(BufferedStore):
    """The JSONL session store. ``directory`` and ``fsync``, when given, win over the config; a
    store given a ``directory`` is enabled whatever the config says (a host that places it
    wants it)."""

    def __init__(self, directory: str | Path | None = None, *, fsync: Fsync | None = None) -> None:
        super().__init__()
        self._explicit_dir = None if directory is None else Path(directory)
        self._explicit_fsync = fsync
        self.directory: Path | None = None
        self._codec = EventCodec()
        self._files: dict[str, SessionFile] = {}

    @property
    def enabled(self) -> bool:
        return self.directory is not None

    @hookimpl
    def dsh_register_config(self, register: Callable[[str, type[Any]], Any]) -> None:
        register(SECTION, JsonlConfig)

    @hookimpl
    def dsh_harness_start(self, harness: Harness) -> None:
        config = harness.config.section(SECTION, JsonlConfig)
        self._codec = harness.events
        self.fsync = self._explicit_fsync or config.fsync
        if not (config.enabled or self._explicit_dir):
            return
        configured = Path(os.path.expandvars(config.dir)).expanduser() if config.dir else None
        self.directory = self._explicit_dir or configured or default_dir()

    # -- the medium (see dsh.store.BufferedStore) ------------------------------------------
    def _path(self, session_id: str) -> Path:
        assert self.directory is not None, "only an enabled store reaches its files"
        return self.directory / file_name(session_id)

    def acquire(self, session: Session) -> int:
        file = SessionFile.claim(self._path(session.id), session, self._codec)
        self._files[session.id] = file
        return file.stored

    def replace(self, batch: Batch) -> None:
        self._files[batch.session.id].write(batch.events, whole=True)

    def append(self, batch: Batch) -> None:
        self._files[batch.session.id].write(batch.events, whole=False)

    def sync(self, session_id: str, flush: bool) -> Awaitable[None] | None:
        file = self._files[session_id]
        if flush:
            file.sync_count()
        if not (file.unsynced and self.durable(flush)):
            return None  # nothing to sync: no worker thread (a close's flush after a turn's)
        return asyncio.to_thread(file.fsync)

    def release(self, session_id: str) -> None:
        self._files.pop(session_id).close()

    def load(self, session_id: str) -> list[SessionEvent] | None:
        path = self._path(session_id)
        return read_session(path, self._codec) if path.is_file() else None

    def list_sessions(self, query: str | None, limit: int) -> list[SessionSummary]:
        assert self.directory is not None, "only an enabled store lists sessions"
        return list_sessions(self.directory, query, limit)
