"""The listing of a ``persistence_jsonl`` directory (``dsh sessions``): a summary of each
session from its file's header, a damaged file listed beside the good ones. Imported when
sessions are first listed: a turn never lists them."""

from __future__ import annotations

import os
from pathlib import Path
from urllib.parse import unquote

from attrs import frozen

from dsh.plugin import DshError, SessionSummary
from dsh_plugins.persistence_jsonl import _unreadable, file_name, log
from dsh_plugins.persistence_jsonl.format import SessionFileError, parse_header

__all__ = ["DamagedSession", "list_sessions"]


@frozen(repr=False, eq=False)
class DamagedSession(SessionSummary):
    """A session file a listing found damaged, listed beside the good ones: ``problem`` says
    what is wrong with it and what to do (loading it raises the same error). Its ``id`` is the
    one its file is named after, so that ``dsh sessions show ID`` finds it; ``created`` and
    ``updated`` are the file's modification time, ``events`` 0."""

    problem: str = ""


def _summary(path: Path, updated: float) -> SessionSummary | None:
    """What the header of ``path`` says; a :class:`DamagedSession` when it cannot be read as a
    session's; ``None`` when a crash tore its header: such a file holds no event."""
    try:
        with path.open("rb") as file:
            line = file.readline()
        if not line.endswith(b"\n"):
            log.info("session file with a torn header skipped", path=str(path))
            return None
        header = parse_header(line, path)
    except OSError as exc:
        return _damaged(path, updated, _unreadable(path, exc), None)
    except SessionFileError as exc:
        return _damaged(path, updated, str(exc), exc.session_id)
    return SessionSummary(
        header["id"],
        header["created"],
        updated,
        header.get("events", 0),
        header.get("title", ""),
        header.get("parent"),
    )


def _damaged(path: Path, updated: float, problem: str, named: str | None) -> DamagedSession:
    """The listing's entry for damaged ``path``: its id is the one the file is named after (the
    header's, when it names one whose file this is: a long id's file name is shortened)."""
    session_id = unquote(path.name.removesuffix(".jsonl"))
    if named is not None and file_name(named) == path.name:
        session_id = named
    log.info("damaged session file", path=str(path), error=problem)
    return DamagedSession(session_id, updated, updated, 0, problem=problem)


def list_sessions(directory: Path, query: str | None, limit: int) -> list[SessionSummary]:
    """Sessions in ``directory``, most recently written first; a damaged file is listed as a
    :class:`DamagedSession`, beside the others. Reads only file metadata and the header lines
    of the files it returns (and of those it skips for ``query``)."""
    try:
        names = [e for e in os.scandir(directory) if e.name.endswith(".jsonl")]
    except FileNotFoundError:
        return []
    except OSError as exc:
        raise DshError(f"cannot list the sessions in {directory}: {exc.strerror}") from exc
    entries: list[tuple[float, str]] = []
    for entry in names:
        try:
            entries.append((entry.stat().st_mtime, entry.path))
        except FileNotFoundError:  # removed since (or a dangling link): no session there
            continue
    found: list[SessionSummary] = []
    for updated, path in sorted(entries, reverse=True):
        if len(found) >= limit:
            break
        summary = _summary(Path(path), updated)
        if summary is not None and (query is None or query in summary.id or query in summary.title):
            found.append(summary)
    return found
