"""persistence_jsonl: a damaged session file is a clear error naming it, never a bare
``TypeError``, and never hides the other sessions (issue #33, point 7). Property-tested: any JSON
value in any header field, any JSON value or bytes as an event line."""

from __future__ import annotations

import json
import os
import tempfile
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from dsh import DshError, Harness
from dsh.session._codec import EventCodec
from dsh.values._content import Text
from dsh.values._events import SessionEvent, UserMessage
from dsh_plugins.persistence_jsonl import (
    DamagedSession,
    JsonlStore,
    SessionFileError,
    file_name,
    list_sessions,
    read_session,
)
from dsh_plugins.persistence_jsonl.format import next_seq, parse_header

CODEC = EventCodec()
HEADER: dict[str, Any] = {
    "format": "dsh-session",
    "version": 1,
    "id": "s",
    "created": 1.5,
    "cwd": "/",
    "title": "hello",
    "events": 2,
}
FIELDS = [*HEADER, "parent", "extra"]
ABSENT = object()

json_values = st.recursive(
    st.none()
    | st.booleans()
    | st.integers()
    | st.floats(allow_nan=True, allow_infinity=True)
    | st.text(max_size=50),
    lambda inner: (
        st.lists(inner, max_size=3) | st.dictionaries(st.text(max_size=5), inner, max_size=3)
    ),
    max_leaves=6,
)


def event_line(seq: int, text: str = "x") -> str:
    event = SessionEvent(UserMessage.type, seq, 1.0, UserMessage((Text(text),)))
    return json.dumps(CODEC.encode(event))


def write(path: Path, header: Any, *lines: str) -> Path:
    path.write_text("".join(f"{line}\n" for line in [json.dumps(header), *lines]))
    return path


def attempt(call: Callable[[], Any]) -> tuple[Any, SessionFileError | None]:
    """What ``call`` returns, or the :class:`SessionFileError` it raises; anything else it
    raises (a bare ``TypeError``...) fails the test."""
    try:
        return call(), None
    except SessionFileError as exc:
        return None, exc


def check_types(summary: Any) -> None:
    assert isinstance(summary.id, str) and isinstance(summary.title, str)
    assert isinstance(summary.created, int | float) and not isinstance(summary.created, bool)
    assert isinstance(summary.events, int) and not isinstance(summary.events, bool)
    assert summary.parent is None or isinstance(summary.parent, str)


# -- properties ------------------------------------------------------------------------------


@settings(max_examples=300, deadline=None)
@given(field=st.sampled_from(FIELDS), value=st.one_of(st.just(ABSENT), json_values))
def test_any_value_in_any_header_field_loads_or_is_an_error_naming_the_file(
    field: str, value: Any
) -> None:
    with tempfile.TemporaryDirectory() as name:
        header = dict(HEADER)
        if value is ABSENT:
            header.pop(field, None)
        else:
            header[field] = value
        path = write(Path(name) / "s.jsonl", header, event_line(0), event_line(1))
        events, error = attempt(lambda: read_session(path, CODEC))
        problem = None if error is None else str(error)
        if error is None:
            assert [e.seq for e in events] == [0, 1]
        else:
            assert str(path) in str(error) and error.path == path
        [listed] = list_sessions(Path(name), None, 10)  # never raises: one entry, good or not
        check_types(listed)
        if isinstance(listed, DamagedSession):
            assert listed.problem == problem and listed.id == "s"
        elif problem is not None:  # damage only loading finds: more events said than held
            assert "the file lost lines" in problem


@settings(max_examples=200, deadline=None)
@given(value=json_values | st.binary(max_size=30).map(lambda b: b.decode("latin-1")))
def test_any_event_line_loads_or_is_an_error_naming_the_file_and_line(value: Any) -> None:
    with tempfile.TemporaryDirectory() as name:
        header = {k: v for k, v in HEADER.items() if k != "events"}
        line = json.dumps(value) if not isinstance(value, str) else value.replace("\n", " ")
        path = write(Path(name) / "s.jsonl", header, event_line(0), line, event_line(9))
        with pytest.raises(SessionFileError) as info:  # seq 9 never follows: always an error
            read_session(path, CODEC)
        assert str(info.value).startswith((f"{path}:3: ", f"{path}:4: "))
        count, error = attempt(lambda: next_seq(line.encode(), path))
        if error is None:
            assert isinstance(count, int)
        else:
            assert str(error).startswith(f"{path}: the last event line is corrupt: ")


@settings(max_examples=200, deadline=None)
@given(line=st.binary(max_size=60))
def test_any_bytes_as_a_header_line_parse_or_are_an_error_naming_the_file(line: bytes) -> None:
    path = Path("/sessions/s.jsonl")
    header, error = attempt(lambda: parse_header(line, path))
    if error is None:
        assert header["format"] == "dsh-session"
    else:
        assert str(error).startswith(f"{path}:1: ")


# -- the fuzzer's finds, and what each error says --------------------------------------------


@pytest.mark.parametrize(
    ("field", "value", "said"),
    [
        ("version", "x", """the header's 'version' is "x", not a whole number from 1"""),
        ("version", True, "the header's 'version' is true, not a whole number from 1"),
        ("version", 0, "the header's 'version' is 0, not a whole number from 1"),
        ("events", None, "the header's 'events' is null, not a whole number from 0"),
        ("events", "1", """the header's 'events' is "1", not a whole number from 0"""),
        ("events", False, "the header's 'events' is false, not a whole number from 0"),
        ("created", True, "the header's 'created' is true, not a number"),
        ("events", -1, "the header's 'events' is -1, not a whole number from 0"),
        ("events", [1], "the header's 'events' is a list, not a whole number from 0"),
        ("id", {"a": 1}, "the header's 'id' is an object, not a string"),
        ("created", "x" * 80, f"""the header's 'created' is "{"x" * 35}..." """.strip()),
        ("title", 5, "the header's 'title' is 5, not a string"),
        ("parent", 5, "the header's 'parent' is 5, not a string or null"),
        ("id", ABSENT, "the header has no 'id' field (a string)"),
        ("created", ABSENT, "the header has no 'created' field (a number"),
    ],
)
def test_a_header_field_of_the_wrong_type_is_named_with_what_to_do(
    tmp_path: Path, field: str, value: Any, said: str
) -> None:
    header = dict(HEADER, events=0)
    if value is ABSENT:
        del header[field]
    else:
        header[field] = value
    path = write(tmp_path / "s.jsonl", header)
    with pytest.raises(SessionFileError) as info:
        read_session(path, CODEC)
    message = str(info.value)
    assert message.startswith(f"{path}:1: {said}")
    assert message.endswith(
        f"fix it, or move s.jsonl out of {tmp_path} to set the session aside "
        "(the other sessions are not affected)"
    )


def test_what_a_header_may_leave_out_and_what_it_may_hold() -> None:
    path = Path("/s.jsonl")
    minimal = {"format": "dsh-session", "id": "s", "created": 1}
    assert parse_header(json.dumps(minimal).encode(), path) == minimal  # no version: this one
    full = {**HEADER, "parent": None, "created": 2, "later": [1]}
    assert parse_header(json.dumps(full).encode(), path) == full
    deep = b"[" * 100_000 + b"]" * 100_000  # deeper than Python's JSON reader goes
    with pytest.raises(SessionFileError, match="not a dsh session file"):
        parse_header(deep, path)


def test_a_newer_version_says_upgrade_and_keeps_the_id(tmp_path: Path) -> None:
    path = write(tmp_path / "s.jsonl", dict(HEADER, version=99))
    with pytest.raises(SessionFileError) as info:
        read_session(path, CODEC)
    assert str(info.value) == (
        f"{path}:1: session format version 99 is newer than this dsh reads (1); upgrade dsh"
    )
    assert info.value.session_id == "s"


def test_an_unreadable_file_is_an_error_naming_it(tmp_path: Path) -> None:
    (tmp_path / "s.jsonl").mkdir()
    with pytest.raises(SessionFileError, match=f"cannot read session file {tmp_path}/s.jsonl: "):
        read_session(tmp_path / "s.jsonl", CODEC)


# -- listing ---------------------------------------------------------------------------------


def test_one_damaged_file_never_hides_the_others(tmp_path: Path) -> None:
    write(tmp_path / "good.jsonl", dict(HEADER, id="good", events=1), event_line(0))
    for name, value in [("version", "x"), ("events", None), ("events", "1")]:
        write(tmp_path / f"bad-{name}-{value}.jsonl", dict(HEADER, **{name: value}))
    os.utime(tmp_path / "good.jsonl", (1, 1))  # the oldest: listed after the damaged ones
    listed = list_sessions(tmp_path, None, 10)
    assert [s.id for s in listed][-1] == "good"
    damaged = [s for s in listed if isinstance(s, DamagedSession)]
    assert sorted(s.id for s in damaged) == ["bad-events-1", "bad-events-None", "bad-version-x"]
    for summary in damaged:
        assert summary.problem.startswith(f"{tmp_path / summary.id}.jsonl:1: the header's ")
        assert (summary.events, summary.title, summary.created) == (0, "", summary.updated)
    # The query and the limit count damaged files as the sessions they are.
    assert [s.id for s in list_sessions(tmp_path, "version", 10)] == ["bad-version-x"]
    assert len(list_sessions(tmp_path, None, 2)) == 2


def test_a_long_ids_damaged_file_is_listed_under_its_id(tmp_path: Path) -> None:
    long_id = "x" * 300
    path = write(tmp_path / file_name(long_id), dict(HEADER, id=long_id, events="1"))
    [listed] = list_sessions(tmp_path, None, 10)
    assert isinstance(listed, DamagedSession) and listed.id == long_id
    # A header naming another session: listed under the name of the file.
    write(path, dict(HEADER, id="other", events="1"))
    [listed] = list_sessions(tmp_path, None, 10)
    assert listed.id == path.name.removesuffix(".jsonl")


def test_torn_gone_and_unreadable_files(tmp_path: Path) -> None:
    (tmp_path / "torn.jsonl").write_bytes(b'{"format":"dsh-ses')  # a crash tore the header
    (tmp_path / "empty.jsonl").write_bytes(b"")
    (tmp_path / "gone.jsonl").symlink_to(tmp_path / "nowhere")
    (tmp_path / "dir.jsonl").mkdir()
    [listed] = list_sessions(tmp_path, None, 10)  # a torn header holds no event: not listed
    assert isinstance(listed, DamagedSession) and listed.id == "dir"
    assert listed.problem.startswith(f"cannot read session file {tmp_path / 'dir.jsonl'}: ")
    assert read_session(tmp_path / "torn.jsonl", CODEC) == []  # nor loaded as damage


def test_a_sessions_directory_that_cannot_be_listed_is_an_error_naming_it(
    tmp_path: Path,
) -> None:
    (tmp_path / "file").write_text("not a directory")
    with pytest.raises(DshError, match=f"cannot list the sessions in {tmp_path}/file: "):
        list_sessions(tmp_path / "file", None, 10)


async def test_the_store_lists_the_damaged_and_loading_one_says_what_to_do(
    tmp_path: Path,
) -> None:
    write(tmp_path / "bad.jsonl", dict(HEADER, id="bad", events=None))
    async with Harness(load_entrypoints=False, plugins=[JsonlStore(tmp_path)]) as h:
        session = h.sessions.create("good")
        session.append(UserMessage((Text("hi"),)))
        await session.flush()
        listed = {s.id: s for s in await h.sessions.stored()}
        assert set(listed) == {"good", "bad"}
        assert isinstance(listed["bad"], DamagedSession)
        with pytest.raises(DshError) as info:
            await h.sessions.load("bad")
        assert str(info.value).endswith(listed["bad"].problem)
        assert await h.sessions.load("good") == list(session.events)
