"""The JSONL session file: a header line, then one event per line (or one packed run of deltas).

Lines are written by the core converter (``harness.events.encode``) as compact JSON. Only lines
that end with a newline count: a final line without one was torn by a crash mid-write and is
ignored. Any other line that does not decode is an error naming the file and the line.

A run of streamed deltas of one block (``assistant/chunk`` events carrying ``text-delta``,
``reasoning-delta`` or ``tool-call-delta`` chunks of the same turn, step, index and call id) is
written as one *packed* line with the deltas' texts and times side by side; it unpacks to exactly
the events that were packed.
"""

from __future__ import annotations

import json
from collections.abc import Iterator, Sequence
from pathlib import Path
from typing import Any

from dsh.plugin import (
    AssistantChunk,
    DshError,
    EventCodec,
    ReasoningDelta,
    Session,
    SessionEvent,
    StreamChunk,
    TextDelta,
    ToolCallDelta,
    dumps,
)
from dsh_plugins.persistence_jsonl._fastjson import lines

__all__ = [
    "COUNT_WIDTH",
    "FORMAT",
    "VERSION",
    "Header",
    "SessionFileError",
    "decode_lines",
    "encode_events",
    "encode_lines",
    "header_line",
    "next_seq",
    "parse_header",
    "set_aside",
]

FORMAT = "dsh-session"
VERSION = 1
#: The event count closes the header, right-aligned in this many characters, so that it can be
#: rewritten in place (JSON allows the padding spaces).
COUNT_WIDTH = 12
_COUNT_KEY = b',"events":'


Header = dict[str, Any]


def header_line(session: Session, title: str, count: int) -> bytes:
    """The first line of a session file."""
    fields: Header = {
        "format": FORMAT,
        "version": VERSION,
        "id": session.id,
        "created": session.created,
        "cwd": session.cwd,
        "title": title,
    }
    if session.parent is not None:
        fields["parent"] = session.parent
    return f"{dumps(fields)[:-1]}{_COUNT_KEY.decode()}{count:>{COUNT_WIDTH}}}}\n".encode()


def count_offset(line: bytes) -> int | None:
    """Where the event count of header ``line`` starts, if it closes the header as written."""
    start = len(line) - 2 - COUNT_WIDTH
    if line.endswith(b"}\n") and line[start - len(_COUNT_KEY) : start] == _COUNT_KEY:
        return start
    return None


class SessionFileError(DshError):
    """A session file that cannot be read as one: damaged, or not a dsh session file. The
    message names the file (and the line, when one is at fault), says what is wrong and what
    to do; ``session_id`` is the id its header names, when it names one."""

    def __init__(self, message: str, path: Path, session_id: str | None = None) -> None:
        super().__init__(message)
        self.path = path
        self.session_id = session_id


def set_aside(path: Path) -> str:
    """What to do with a damaged session file: the end of the errors that report one."""
    return (
        f"fix it, or move {path.name} out of {path.parent} to set the session aside "
        "(the other sessions are not affected)"
    )


#: The header's fields but ``format`` and ``version``: what each must be, and whether a header
#: may leave it out.
_FIELDS: tuple[tuple[str, str, bool], ...] = (
    ("id", "a string", True),
    ("created", "a number (seconds since the epoch)", True),
    ("cwd", "a string", False),
    ("title", "a string", False),
    ("parent", "a string or null", False),
    ("events", "a whole number from 0", False),
)


def _fits(name: str, value: Any) -> bool:
    """Whether ``value`` is what header field ``name`` must be (a bool is not a number)."""
    if name in ("id", "cwd", "title"):
        return isinstance(value, str)
    if name == "parent":
        return value is None or isinstance(value, str)
    if isinstance(value, bool):
        return False
    if name == "created":
        return isinstance(value, int | float)
    return isinstance(value, int) and value >= 0


def _shown(value: Any) -> str:
    """``value`` as its JSON text, shortened; a list or an object only by its kind."""
    if isinstance(value, list):
        return "a list"
    if isinstance(value, dict):
        return "an object"
    text = json.dumps(value)
    return text if len(text) <= 40 else f"{text[:36]}...{text[-1]}"


def parse_header(line: bytes, path: Path) -> Header:
    """The header fields of ``line`` (the first line of ``path``), each of the type it must
    be: anything else is a :class:`SessionFileError` naming the file and the field."""
    try:
        header = json.loads(line)
    except (ValueError, RecursionError):  # RecursionError: nested deeper than Python reads
        header = None
    if not isinstance(header, dict) or header.get("format") != FORMAT:
        raise SessionFileError(
            f"{path}:1: not a dsh session file (no {FORMAT!r} header): {set_aside(path)}", path
        )
    session_id = header.get("id")
    known = session_id if isinstance(session_id, str) else None
    version = header.get("version", VERSION)
    if isinstance(version, bool) or not isinstance(version, int) or version < 1:
        raise _bad_field(path, "version", version, "a whole number from 1", known)
    if version > VERSION:
        raise SessionFileError(
            f"{path}:1: session format version {version} is newer than this dsh reads "
            f"({VERSION}); upgrade dsh",
            path,
            known,
        )
    for name, kind, required in _FIELDS:
        if name not in header:
            if required:
                raise SessionFileError(
                    f"{path}:1: the header has no {name!r} field ({kind}): {set_aside(path)}",
                    path,
                    known,
                )
        elif not _fits(name, header[name]):
            raise _bad_field(path, name, header[name], kind, known)
    return header


def _bad_field(
    path: Path, name: str, value: Any, kind: str, session_id: str | None
) -> SessionFileError:
    return SessionFileError(
        f"{path}:1: the header's {name!r} is {_shown(value)}, not {kind}: {set_aside(path)}",
        path,
        session_id,
    )


# -- writing ---------------------------------------------------------------------------------


def encode_lines(events: Sequence[SessionEvent], codec: EventCodec) -> bytes:
    """``events`` as lines, each ending with a newline: the rows :meth:`EventCodec.rows` gives
    (runs of two or more deltas already merged into one row), each the text ``dumps`` writes
    (written fast where that is surely the same text: :mod:`._fastjson`)."""
    return lines(codec.rows(events))


def encode_events(events: Sequence[SessionEvent], codec: EventCodec) -> str:
    """:func:`encode_lines` as text."""
    return encode_lines(events, codec).decode()


#: The kinds of the rows that hold a run of deltas (see ``EventCodec.rows``).
_RUN_KINDS = ("text-delta", "reasoning-delta", "tool-call-delta")


# -- reading ---------------------------------------------------------------------------------


def _unpack(row: dict[str, Any]) -> Iterator[SessionEvent]:
    kind, seq, turn, step, index = (row[k] for k in ("packed", "seq", "turn", "step", "index"))
    for offset, (time, text) in enumerate(zip(row["times"], row["texts"], strict=True)):
        chunk: StreamChunk
        if kind == "text-delta":
            chunk = TextDelta(index, text)
        elif kind == "reasoning-delta":
            chunk = ReasoningDelta(index, text)
        else:
            chunk = ToolCallDelta(index, row["id"], text)
        yield SessionEvent(
            AssistantChunk.type, seq + offset, time, AssistantChunk(turn, step, chunk)
        )


def _decode_line(line: bytes, codec: EventCodec) -> list[SessionEvent]:
    raw = json.loads(line)
    if "packed" in raw:
        if raw["packed"] not in _RUN_KINDS:
            raise ValueError(f"unknown packed run {raw['packed']!r}")
        return list(_unpack(raw))
    return [codec.decode(raw)]


def next_seq(line: bytes, path: Path) -> int:
    """The seq that follows the event(s) of event ``line``: how many events a file holds whose
    last line it is. Reads only the seq (and a packed run's length), not the events."""
    try:
        row = json.loads(line)
        return int(row["seq"]) + (len(row["texts"]) if "packed" in row else 1)
    except (ValueError, TypeError, KeyError, OverflowError, RecursionError) as exc:
        raise SessionFileError(
            f"{path}: the last event line is corrupt: {exc!r}: {set_aside(path)}", path
        ) from exc


def decode_lines(
    lines: Sequence[bytes], codec: EventCodec, path: Path, first_line: int = 2
) -> list[SessionEvent]:
    """The events of complete event ``lines`` (``first_line`` is the number of the first)."""
    events: list[SessionEvent] = []
    for number, line in enumerate(lines, first_line):
        try:
            decoded = _decode_line(line, codec)
        except Exception as exc:
            raise SessionFileError(
                f"{path}:{number}: corrupt session event line: {exc}: {set_aside(path)}", path
            ) from exc
        for event in decoded:
            if event.seq != len(events):
                raise SessionFileError(
                    f"{path}:{number}: expected the event with seq {len(events)}, "
                    f"found seq {event.seq}: {set_aside(path)}",
                    path,
                )
            events.append(event)
    return events
