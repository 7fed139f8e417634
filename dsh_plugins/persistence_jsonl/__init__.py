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

from attrs import frozen

from dsh.plugin import (
    Batch,
    BufferedStore,
    EventCodec,
    Fsync,
    Session,
    SessionEvent,
    SessionSummary,
    Value,
    get_logger,
    hookimpl,
    imported,
)
from dsh_plugins.persistence_jsonl.files import SessionFile
from dsh_plugins.persistence_jsonl.format import (
    SessionFileError,
    decode_lines,
    parse_header,
    set_aside,
)

if TYPE_CHECKING:
    from dsh.plugin import Harness
    from dsh_plugins.persistence_jsonl.listing import DamagedSession, list_sessions

__all__ = [
    "SECTION",
    "DamagedSession",
    "Fsync",
    "JsonlConfig",
    "JsonlStore",
    "SessionFileError",
    "default_dir",
    "file_name",
    "list_sessions",
    "read_session",
]

SECTION = "persistence_jsonl"
log = get_logger("dsh_plugins.persistence_jsonl")
# The listing loads when sessions are listed (``dsh sessions``): a turn never needs it.
_HOMES = {
    "DamagedSession": "dsh_plugins.persistence_jsonl.listing",
    "list_sessions": "dsh_plugins.persistence_jsonl.listing",
}


def __getattr__(name: str) -> Any:
    return imported(__name__, name, _HOMES)


@frozen(repr=False, eq=False)
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
    than its header says a flush made durable lost lines: an error, never a short log. Every
    damage is a :class:`SessionFileError` naming the file and what is wrong."""
    try:
        lines = path.read_bytes().split(b"\n")
    except OSError as exc:
        raise SessionFileError(_unreadable(path, exc), path) from exc
    complete = lines[:-1]  # the last piece is empty, or a line torn by a crash
    if not complete:
        return []
    header = parse_header(complete[0], path)
    events = decode_lines(complete[1:], codec, path)
    flushed = header.get("events", 0)
    if len(events) < flushed:
        raise SessionFileError(
            f"{path}: session {header['id']!r} holds {len(events)} event(s) but its header "
            f"says {flushed} were written: the file lost lines (damage, or an outside edit). "
            "Restore it from a backup; to accept the loss, set the header's events to "
            f"{len(events)}",
            path,
            header["id"],
        )
    return events


def _unreadable(path: Path, exc: OSError) -> str:
    return f"cannot read session file {path}: {exc.strerror}: {set_aside(path)}"


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

    def session_file(self, session_id: str) -> Path | None:
        """The file ``session_id`` is (or would be) stored in; ``None`` while disabled."""
        return None if self.directory is None else self.directory / file_name(session_id)

    # -- the medium (see dsh.plugin.BufferedStore) -------------------------------------------
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
        from dsh_plugins.persistence_jsonl.listing import list_sessions

        return list_sessions(self.directory, query, limit)
