"""persistence_jsonl: one writer per session (the file lock), conflicts, counts that must hold."""

from __future__ import annotations

import fcntl
import json
import os
import stat
from pathlib import Path
from typing import Any

import pytest

from dsh import DshError, Harness
from dsh.session._codec import EventCodec
from dsh.session._session import SessionBusy, SessionConflict
from dsh.values._chunks import TextDelta
from dsh.values._content import Text
from dsh.values._events import AssistantChunk, SessionEvent, UserMessage
from dsh_plugins.persistence_jsonl import JsonlStore, read_session
from dsh_plugins.persistence_jsonl.format import next_seq
from dsh_plugins.persistence_jsonl.lock import WriterLock, lock_path

CODEC = EventCodec()


def user(text: str) -> UserMessage:
    return UserMessage((Text(text),))


def events(*texts: str) -> list[SessionEvent]:
    return [SessionEvent("user/message", n, 1.0, user(t)) for n, t in enumerate(texts)]


async def store(directory: Path, session_id: str, *texts: str) -> list[SessionEvent]:
    async with Harness(load_entrypoints=False, plugins=[JsonlStore(directory)]) as h:
        session = h.sessions.create(session_id, events(*texts))
    return list(session.events)


async def test_the_lock_file_names_the_holder_while_the_session_is_open(tmp_path: Path) -> None:
    async with Harness(load_entrypoints=False, plugins=[JsonlStore(tmp_path)]) as h:
        session = h.sessions.create("s")
        session.append(user("x"))
        await session.checkpoint()
        lock = lock_path(tmp_path / "s.jsonl")
        assert lock == tmp_path / "s.jsonl.lock"
        assert stat.S_IMODE(lock.stat().st_mode) == 0o600
        holder = json.loads(lock.read_text())
        assert holder["pid"] == os.getpid() and holder["host"] and holder["since"] > 0
        await h.sessions.close(session)
        assert not lock.exists()  # released and removed
    assert read_session(tmp_path / "s.jsonl", CODEC) == list(session.events)


def test_a_holder_that_has_not_said_who_it_is_is_still_a_holder(tmp_path: Path) -> None:
    path = tmp_path / "s.jsonl.lock"
    fd = os.open(path, os.O_RDWR | os.O_CREAT, 0o600)
    fcntl.flock(fd, fcntl.LOCK_EX)  # another process, between its lock and its record
    try:
        with pytest.raises(SessionBusy, match="not yet identified") as busy:
            WriterLock.acquire(path, "s")
        assert busy.value.holder is None and str(path) in str(busy.value)
        os.write(fd, b'{"pid": "nonsense"}')
        with pytest.raises(SessionBusy, match="not yet identified"):
            WriterLock.acquire(path, "s")
    finally:
        os.close(fd)
    lock = WriterLock.acquire(path, "s")  # released: taken
    assert lock.held
    lock.release()
    lock.release()  # twice: nothing more happens
    assert (lock.held, path.exists()) == (False, False)


def test_a_lock_file_removed_between_open_and_lock_is_not_trusted(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    path = tmp_path / "s.jsonl.lock"
    real = fcntl.flock
    locked: list[int] = []

    def released_meanwhile(fd: int, operation: int) -> None:
        if not locked:  # the holder released (and removed) it after our open
            os.unlink(path)
        locked.append(fd)
        real(fd, operation)

    monkeypatch.setattr(fcntl, "flock", released_meanwhile)
    lock = WriterLock.acquire(path, "s")
    assert len(locked) == 2  # the removed file was dropped, the new one locked
    assert json.loads(path.read_text())["pid"] == os.getpid()
    lock.release()


def test_a_dead_holders_longer_record_is_replaced_whole(tmp_path: Path) -> None:
    path = tmp_path / "s.jsonl.lock"  # left by a holder that died (nobody locks it)
    stale = {"pid": 1, "host": "an-old-host-with-a-long-name" * 4, "since": 0.0}
    path.write_text(json.dumps(stale))
    lock = WriterLock.acquire(path, "s")
    record = json.loads(path.read_text())  # no tail of the old record after the new one
    assert record["pid"] == os.getpid() and record["host"] != stale["host"]
    lock.release()


def test_who_holds_it_is_a_courtesy_a_full_disk_skips(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    def full(fd: int, data: Any, offset: int) -> int:
        raise OSError(28, "No space left on device")

    monkeypatch.setattr(os, "pwrite", full)
    lock = WriterLock.acquire(tmp_path / "s.jsonl.lock", "s")
    assert lock.held and (tmp_path / "s.jsonl.lock").read_bytes() == b""
    lock.release()


async def test_a_file_written_since_the_session_was_loaded_is_a_conflict_left_untouched(
    tmp_path: Path,
) -> None:
    stored = await store(tmp_path, "s", "a", "b")
    before = (tmp_path / "s.jsonl").read_bytes()
    async with Harness(load_entrypoints=False, plugins=[JsonlStore(tmp_path)]) as h:
        late = h.sessions.create("s", stored[:1], persisted=1)  # loaded before "b" was added
        with pytest.raises(SessionConflict, match="the store holds 2 event") as conflict:
            await h.sessions.claim(late)
        assert str(tmp_path / "s.jsonl") in str(conflict.value)
        assert not lock_path(tmp_path / "s.jsonl").exists()  # the lock was let go
    assert (tmp_path / "s.jsonl").read_bytes() == before


async def test_a_corrupt_last_line_is_an_error_not_a_count(tmp_path: Path) -> None:
    stored = await store(tmp_path, "s", "a")
    with (tmp_path / "s.jsonl").open("ab") as file:
        file.write(b'{"seq": "x"}\n')
    async with Harness(load_entrypoints=False, plugins=[JsonlStore(tmp_path)]) as h:
        session = h.sessions.create("s", stored, persisted=1)
        with pytest.raises(DshError, match="the last event line is corrupt"):
            await h.sessions.claim(session)


def test_the_seq_after_a_line_counts_a_packed_run() -> None:
    packed = {"packed": "text-delta", "seq": 4, "texts": ["a", "b", "c"], "times": [1, 2, 3]}
    assert next_seq(json.dumps(packed).encode(), Path("f")) == 7
    assert next_seq(json.dumps({"seq": 4}).encode(), Path("f")) == 5


async def test_a_resumed_session_ending_in_a_packed_run_is_appended_to(tmp_path: Path) -> None:
    chunks = [
        SessionEvent("assistant/chunk", n, 1.0, AssistantChunk(1, 1, TextDelta(0, c)))
        for n, c in enumerate("abc")
    ]
    async with Harness(load_entrypoints=False, plugins=[JsonlStore(tmp_path)]) as h:
        h.sessions.create("s", chunks)
    loaded = read_session(tmp_path / "s.jsonl", CODEC)
    async with Harness(load_entrypoints=False, plugins=[JsonlStore(tmp_path)]) as h:
        session = h.sessions.create("s", loaded, persisted=len(loaded))
        session.append(user("after"))
    assert read_session(tmp_path / "s.jsonl", CODEC) == list(session.events)


async def test_a_file_that_lost_lines_is_an_error_naming_the_session(tmp_path: Path) -> None:
    await store(tmp_path, "s", "a", "b", "c")
    path = tmp_path / "s.jsonl"
    header, *lines = path.read_bytes().splitlines(keepends=True)
    assert json.loads(header)["events"] == 3  # the count of the last flush
    path.write_bytes(header + lines[0])
    with pytest.raises(DshError, match=r"session .s. holds 1 event.* header says 3 were written"):
        read_session(path, CODEC)


async def test_a_new_file_counts_nothing_until_a_flush(tmp_path: Path) -> None:
    async with Harness(load_entrypoints=False, plugins=[JsonlStore(tmp_path)]) as h:
        session = h.sessions.create("s", events("a", "b"))
        await session.checkpoint()
        header = (tmp_path / "s.jsonl").read_bytes().split(b"\n")[0]
        assert json.loads(header)["events"] == 0  # a torn first write cannot claim two
        await session.flush()
        header = (tmp_path / "s.jsonl").read_bytes().split(b"\n")[0]
        assert json.loads(header)["events"] == 2


async def test_a_session_file_that_cannot_be_opened_fails_naming_it(tmp_path: Path) -> None:
    (tmp_path / "s.jsonl").mkdir()
    async with Harness(load_entrypoints=False, plugins=[JsonlStore(tmp_path)]) as h:
        resumed = h.sessions.create("s", events("a"), persisted=1)
        with pytest.raises(DshError, match=r"cannot open session file .*s.jsonl"):
            await h.sessions.claim(resumed)


async def test_a_file_that_holds_no_event_is_written_anew(tmp_path: Path) -> None:
    header = {"format": "dsh-session", "version": 1, "id": "s", "created": 1.0, "cwd": "/"}
    (tmp_path / "s.jsonl").write_text(json.dumps({**header, "title": ""}) + "\n")  # no event
    async with Harness(load_entrypoints=False, plugins=[JsonlStore(tmp_path)]) as h:
        resumed = h.sessions.create("s", events("from elsewhere"), persisted=1)
        resumed.append(user("more"))
    assert read_session(tmp_path / "s.jsonl", CODEC) == list(resumed.events)


async def test_a_new_session_file_that_cannot_be_created_fails_naming_it(tmp_path: Path) -> None:
    (tmp_path / "s.jsonl").mkdir()
    async with Harness(load_entrypoints=False, plugins=[JsonlStore(tmp_path)]) as h:
        session = h.sessions.create("s", events("a"))
        with pytest.raises(DshError, match=r"cannot open session file .*s.jsonl"):
            await h.sessions.claim(session)
