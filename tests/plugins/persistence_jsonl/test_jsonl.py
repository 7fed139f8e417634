"""persistence_jsonl: configuration, the file format, packing, damage, failures and fsync."""

from __future__ import annotations

import asyncio
import dataclasses
import json
import os
import stat
import threading
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import attrs
import pytest
from hypothesis import example, given, settings
from hypothesis import strategies as st

from dsh import AgentOptions, ConfigError, DshError, Harness, HookError
from dsh.session import _log as eventlog
from dsh.session._codec import EventCodec, dumps
from dsh.session._log import pack
from dsh.session._session import Session
from dsh.testing import ScriptedAdapter, text_response
from dsh.testing.strategies import packed_event_data, stream_chunks
from dsh.values._chunks import BlockStart, ReasoningDelta, StreamChunk, TextDelta, ToolCallDelta
from dsh.values._content import Text
from dsh.values._events import AssistantChunk, RawEventData, SessionEvent, UserMessage
from dsh_plugins.persistence_jsonl import (
    DamagedSession,
    JsonlStore,
    _fastjson,
    default_dir,
    file_name,
    list_sessions,
    read_session,
)
from dsh_plugins.persistence_jsonl._fastjson import lines, reference_lines
from dsh_plugins.persistence_jsonl.format import (
    decode_lines,
    encode_events,
)

CODEC = EventCodec()


@dataclasses.dataclass
class Point:
    x: int


def user(text: str) -> UserMessage:
    return UserMessage((Text(text),))


async def store_session(
    store: JsonlStore, session_id: str = "s", texts: tuple[str, ...] = ("hello",), **kwargs: Any
) -> list[SessionEvent]:
    async with Harness(load_entrypoints=False, plugins=[store], **kwargs) as h:
        session = h.sessions.create(session_id)
        for text in texts:
            session.append(user(text))
        await session.flush()
        return list(session.events)


# -- configuration ---------------------------------------------------------------------------


async def test_the_default_directory_follows_xdg_data_home(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("XDG_DATA_HOME", str(tmp_path / "data"))
    assert default_dir() == tmp_path / "data" / "dsh" / "sessions"
    await store_session(JsonlStore())
    assert (tmp_path / "data" / "dsh" / "sessions" / "s.jsonl").is_file()
    monkeypatch.delenv("XDG_DATA_HOME")
    assert default_dir() == Path.home() / ".local" / "share" / "dsh" / "sessions"


async def test_config_places_the_directory_and_can_disable_the_store(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("SOMEWHERE", str(tmp_path))
    config = {"persistence_jsonl": {"dir": "$SOMEWHERE/logs", "fsync": "never"}}
    await store_session(JsonlStore(), config=config)
    assert (tmp_path / "logs" / "s.jsonl").is_file()
    off = {"persistence_jsonl": {"enabled": False}}
    store = JsonlStore()
    async with Harness(load_entrypoints=False, plugins=[store], config=off) as h:
        session = h.sessions.create("off")
        session.append(user("x"))
        await session.checkpoint()
        await session.flush()
        assert await h.sessions.load("s") is None
        assert await h.sessions.stored() == []
    assert store.directory is None
    with pytest.raises(ConfigError, match="fsync"):
        Harness(
            load_entrypoints=False,
            plugins=[JsonlStore()],
            config={"persistence_jsonl": {"fsync": "sometimes"}},
        ).load()


# -- the file --------------------------------------------------------------------------------


async def test_a_header_line_then_one_event_per_line(tmp_path: Path) -> None:
    events = await store_session(JsonlStore(tmp_path), "a/b c", ("Hello\nworld", "again"))
    path = tmp_path / "a%2Fb%20c.jsonl"
    assert stat.S_IMODE(path.stat().st_mode) == 0o600  # conversations are private
    header, *lines = path.read_text().splitlines()
    fields = json.loads(header)
    assert fields["format"] == "dsh-session" and fields["version"] == 1
    assert (fields["id"], fields["title"], fields["events"]) == ("a/b c", "Hello", 2)
    assert fields["cwd"] == os.getcwd() and "parent" not in fields
    assert [CODEC.decode(json.loads(line)) for line in lines] == events
    assert read_session(path, CODEC) == events


def test_long_ids_get_short_file_names() -> None:
    name = file_name("x" * 300)
    assert len(name) < 200 and name.endswith(".jsonl") and name != file_name("x" * 301)


delta_chunks: st.SearchStrategy[StreamChunk] = st.one_of(
    st.builds(TextDelta, st.integers(0, 1), st.text(max_size=3)),
    st.builds(ReasoningDelta, st.integers(0, 1), st.text(max_size=3)),
    st.builds(ToolCallDelta, st.integers(0, 1), st.sampled_from(["a", "b"]), st.text(max_size=3)),
    st.builds(ToolCallDelta, st.integers(0, 1), st.just("a"), st.text(max_size=3), st.just("name")),
    st.builds(BlockStart, st.integers(0, 1), st.just("text")),
)


@given(
    st.lists(
        st.tuples(delta_chunks, st.integers(1, 2), st.floats(0, 1e10, allow_nan=False)),
        max_size=30,
    )
)
def test_packed_runs_of_deltas_unpack_to_exactly_the_same_events(
    chunks: list[tuple[StreamChunk, int, float]],
) -> None:
    events = [
        SessionEvent("assistant/chunk", seq, time, AssistantChunk(1, step, chunk))
        for seq, (chunk, step, time) in enumerate(chunks)
    ]
    text = encode_events(events, CODEC)
    lines = text.encode().split(b"\n")
    assert lines[-1] == b""
    assert decode_lines(lines[:-1], CODEC, Path("x")) == events


def test_runs_of_deltas_are_packed_into_one_line() -> None:
    events = [
        SessionEvent("assistant/chunk", i, float(i), AssistantChunk(1, 1, TextDelta(0, c)))
        for i, c in enumerate("abc")
    ]
    [line] = encode_events(events, CODEC).splitlines()
    assert json.loads(line) == {
        "packed": "text-delta",
        "seq": 0,
        "turn": 1,
        "step": 1,
        "index": 0,
        "times": [0.0, 1.0, 2.0],
        "texts": ["a", "b", "c"],
    }


numbers = st.floats() | st.integers() | st.booleans()
#: Epoch seconds as time.time() gives them: where the fast path writes the times.
epoch_times = st.floats(1e9, 1e10)


#: JSON-ready data as ``unstructure`` gives it, and what orjson writes otherwise or refuses:
#: any text (non-ASCII, DEL, control characters, lone surrogates), NaN, infinities, small and
#: huge floats, integers past 64 bits, keys that are not strings.
json_ready = st.recursive(
    st.none() | st.booleans() | st.integers() | st.floats() | st.text(),
    lambda inner: (
        st.lists(inner, max_size=4)
        | st.dictionaries(st.text(max_size=6) | st.integers(), inner, max_size=4)
    ),
    max_leaves=12,
)


@given(st.lists(json_ready, max_size=6))
def test_the_fast_lines_are_the_reference_lines(rows: list[Any]) -> None:
    """The JSONL store's speed trick (orjson, checked) writes what its plain definition does:
    each row's JSON text in UTF-8 (``dumps``' ASCII text where a lone surrogate is in it), and
    a newline; each line decodes to what ``dumps`` writes decodes to."""
    assert lines(rows) == reference_lines(rows)
    written = reference_lines(rows).split(b"\n")
    assert written.pop() == b""
    assert len(written) == len(rows)
    for line, row in zip(written, rows, strict=True):
        utf8 = json.dumps(row, ensure_ascii=False, separators=(",", ":"))
        try:
            assert line == utf8.encode()
        except UnicodeEncodeError:  # a lone surrogate
            assert line == dumps(row).encode()
        assert _same(json.loads(line), json.loads(dumps(row)))


@given(st.lists(st.floats() | numbers, max_size=8))
def test_a_runs_times_are_written_as_dumps_writes_them(times: list[Any]) -> None:
    assert lines([{"times": times}]) == reference_lines([{"times": times}])


#: What a run of deltas' row may hold where the fast path reads its values instead of its
#: text: times as ``time.time()`` gives them, numbers at the edges where the two write floats
#: otherwise (small, huge, not finite, negative), and anything else there and in its texts.
edge_numbers = st.sampled_from(
    [1e-5, 1e-4, 9.99e-4, 1e-3, 0.0, -1.0, 1e15, 1e16, float("nan"), float("inf"), True, 2**63]
)
run_values = st.lists(
    epoch_times | edge_numbers | st.floats() | st.none() | st.text(max_size=3), max_size=5
)
run_texts = st.lists(
    st.text(max_size=4) | edge_numbers | st.floats() | st.none() | st.integers(), max_size=5
)
run_rows = st.fixed_dictionaries(
    {
        "packed": st.sampled_from(["text-delta", "tool-call-delta"]),
        "seq": st.integers(0, 2**40),
        "times": st.lists(epoch_times, max_size=5) | run_values,
        "texts": st.lists(st.text(max_size=4), max_size=5) | run_texts,
    },
    optional={"id": st.text(max_size=3)},
)
#: Rows almost like a run's: one value of another kind (what the values check must refuse).
odd_rows = st.fixed_dictionaries(
    {
        "seq": st.integers(0, 2**70) | st.booleans() | st.floats() | st.none(),
        "times": st.lists(epoch_times, max_size=3) | st.text(max_size=2) | st.none(),
        "texts": st.lists(st.text(max_size=4), max_size=3) | st.none() | json_ready,
    },
    optional={"extra": json_ready},
)


def _run_row_with(times: list[Any]) -> list[Any]:
    return [{"packed": "text-delta", "seq": 3, "times": times, "texts": ["a", "b"]}]


@settings(max_examples=300)
@given(st.lists(run_rows | odd_rows | json_ready, max_size=5))
@example(_run_row_with([1.7e9, float("nan")]))
@example(_run_row_with([1.7e9, float("inf")]))
@example(_run_row_with([1.7e9, 1e-5]))
@example(_run_row_with([1.7e9, 1e16]))
@example(_run_row_with([]))
def test_a_runs_row_told_sure_from_its_values_is_written_as_dumps_writes_it(
    rows: list[Any],
) -> None:
    with pytest.MonkeyPatch.context() as patch:  # every batch long: runs told from values
        patch.setattr(_fastjson, "_LONG", 0)
        assert lines(rows) == reference_lines(rows)
    assert lines(rows) == reference_lines(rows)


@pytest.mark.parametrize("odd", [1e-5, float("nan"), float("inf"), 1e16, "text", None, 3])
def test_a_long_replys_run_is_written_as_dumps_writes_it_whatever_it_holds(odd: Any) -> None:
    times: list[Any] = [1.7e9 + i / 7 for i in range(1_000)]
    texts: list[Any] = [f"word {i} " for i in range(1_000)]
    plain = {"packed": "text-delta", "seq": 5, "turn": 1, "step": 0, "index": 0}
    rows = [
        {**plain, "times": times, "texts": texts},
        {**plain, "times": [*times[:500], odd, *times[500:]], "texts": [*texts, "x"]},
        {**plain, "times": [*times, 1.7e9], "texts": [*texts[:500], odd, *texts[500:]]},
        {"type": "turn/end", "seq": 3000, "time": 1.7e9, "data": {"usage": None}},
    ]
    assert len(lines(rows)) > _fastjson._LONG
    assert lines(rows) == reference_lines(rows)


def _any_event(seq: int, time: float, kind: int, text: str, value: Any) -> SessionEvent:
    if kind == 0:
        return SessionEvent(UserMessage.type, seq, time, user(text))
    if kind == 1:
        return SessionEvent("x/raw", seq, time, RawEventData({"v": value}))
    return SessionEvent(AssistantChunk.type, seq, time, AssistantChunk(1, 1, TextDelta(0, text)))


@given(
    st.lists(
        st.tuples(st.floats() | epoch_times, st.integers(0, 2), st.text(max_size=6), json_ready),
        max_size=8,
    )
)
def test_a_batch_is_the_text_dumps_writes_line_by_line(
    specs: list[tuple[float, int, str, Any]],
) -> None:
    """Whatever the events hold (any text, any float, what orjson refuses), a batch is written
    as ``dumps`` writes each of its lines: the same as with orjson out of the way."""
    events = [_any_event(seq, *spec) for seq, spec in enumerate(specs)]
    assert encode_events(events, CODEC).encode() == reference_lines(CODEC.rows(events))


@given(
    st.lists(
        st.tuples(delta_chunks | stream_chunks, st.integers(1, 2), epoch_times | st.floats())
        | st.tuples(st.text(), json_ready)
        | st.tuples(packed_event_data),
        max_size=30,
    )
)
def test_a_batch_of_a_sessions_log_is_written_as_its_events_are(
    items: list[tuple[StreamChunk, int, float] | tuple[str, Any] | tuple[Any]],
) -> None:
    """A store's batch is a view of the session's log, whose chunk events, step boundaries, tool
    calls, errors and retries are kept packed: it is written from the packed tuples, to the same
    text as the events it stands for, and no packed event is built on the way."""
    session = Session("s")
    for item in items:
        if len(item) == 1:
            session.append(item[0])
        elif len(item) == 2:
            text, value = item
            session.append(user(text))
            session.append_raw("x/raw", {"v": value})
        else:
            chunk, step, time = item
            event = session.append(AssistantChunk(1, step, chunk))
            session._events[-1] = pack(attrs.evolve(event, time=time))  # a time of any kind
    view = session.events
    expected = encode_events(list(view), CODEC)
    with pytest.MonkeyPatch.context() as patch:
        patch.setattr(eventlog, "unpack", _no_unpacking)
        assert encode_events(view, CODEC) == expected


def _no_unpacking(seq: int, kept: object) -> SessionEvent:
    raise AssertionError(f"event {seq} was built again")


@pytest.mark.parametrize(
    "value",
    [
        {"time": 1.7e9, "text": "plain"},  # the fast way
        {"text": "caf\u00e9 \x7f"},  # escaped by dumps only
        [float("nan"), None, 1e-7, 9.99e-05, 1e16, -0.0],  # written otherwise, or maybe
        [2**64, "\ud800"],  # refused by orjson
        {1: "a", "b": True},
    ],
)
def test_lines_orjson_writes_otherwise_or_refuses_go_to_dumps(value: Any) -> None:
    assert lines([value, {"next": 1}]) == reference_lines([value, {"next": 1}])


@pytest.mark.parametrize("value", [{"when": datetime.now(UTC)}, [Path("p")], {"d": Point(1)}])
def test_a_value_dumps_refuses_is_refused_alike(value: Any) -> None:
    with pytest.raises(TypeError):
        dumps(value)
    with pytest.raises(TypeError):
        lines([value])


@given(st.lists(st.tuples(epoch_times, st.text(max_size=4)), min_size=2, max_size=30))
def test_a_packed_line_is_the_reference_text_of_its_row(
    deltas: list[tuple[float, str]],
) -> None:
    events = [
        SessionEvent("assistant/chunk", 5 + i, time, AssistantChunk(2, 3, ToolCallDelta(1, "c", t)))
        for i, (time, t) in enumerate(deltas)
    ]
    row = {
        "packed": "tool-call-delta",
        "seq": 5,
        "turn": 2,
        "step": 3,
        "index": 1,
        "times": [time for time, _ in deltas],
        "texts": [text for _, text in deltas],
        "id": "c",
    }
    assert encode_events(events, CODEC) == reference_lines([row]).decode()


# -- damage ----------------------------------------------------------------------------------


def write_lines(path: Path, *lines: Any) -> Path:
    path.write_text("".join(f"{json.dumps(line)}\n" for line in lines))
    return path


HEADER = {"format": "dsh-session", "version": 1, "id": "s", "created": 1.0, "cwd": "/", "title": ""}


def event_line(seq: int) -> dict[str, Any]:
    return CODEC.encode(SessionEvent("user/message", seq, 1.0, user("x")))


def test_a_corrupt_line_in_the_middle_names_the_file_and_line(tmp_path: Path) -> None:
    path = write_lines(tmp_path / "s.jsonl", HEADER, event_line(0), event_line(1))
    lines = path.read_text().splitlines()
    path.write_text(f"{lines[0]}\n{lines[1]}\n{{not json\n{lines[2]}\n")
    with pytest.raises(DshError, match=rf"{path}:3: corrupt session event line"):
        read_session(path, CODEC)
    write_lines(path, HEADER, event_line(0), event_line(2))
    with pytest.raises(DshError, match=rf"{path}:3: expected the event with seq 1, found seq 2"):
        read_session(path, CODEC)
    write_lines(path, HEADER, {"packed": "image-delta", "seq": 0})
    with pytest.raises(DshError, match="unknown packed run 'image-delta'"):
        read_session(path, CODEC)


def test_headers_must_be_dsh_sessions_of_a_known_version(tmp_path: Path) -> None:
    path = write_lines(tmp_path / "s.jsonl", {"hello": 1})
    with pytest.raises(DshError, match=rf"{path}:1: not a dsh session file"):
        read_session(path, CODEC)
    path.write_text("not json\n")
    with pytest.raises(DshError, match="not a dsh session file"):
        read_session(path, CODEC)
    write_lines(path, {**HEADER, "version": 99})
    with pytest.raises(DshError, match="version 99 is newer than this dsh reads"):
        read_session(path, CODEC)


async def test_a_torn_header_is_an_empty_session_written_anew_on_resume(tmp_path: Path) -> None:
    (tmp_path / "s.jsonl").write_bytes(b'{"format":"dsh-ses')
    assert read_session(tmp_path / "s.jsonl", CODEC) == []
    seed = [SessionEvent("user/message", 0, 1.0, user("kept"))]
    async with Harness(load_entrypoints=False, plugins=[JsonlStore(tmp_path)]) as h:
        session = h.sessions.create("s", seed, persisted=1)  # as if another store loaded it
        session.append(user("more"))
    assert read_session(tmp_path / "s.jsonl", CODEC) == list(session.events)


async def test_a_resumed_session_without_a_file_here_is_written_whole(tmp_path: Path) -> None:
    seed = [SessionEvent("user/message", 0, 1.0, user("from elsewhere"))]
    async with Harness(load_entrypoints=False, plugins=[JsonlStore(tmp_path)]) as h:
        session = h.sessions.create("s", seed, persisted=1)
        session.append(user("more"))
    assert read_session(tmp_path / "s.jsonl", CODEC) == list(session.events)


async def test_a_torn_tail_longer_than_a_read_block_is_cut(tmp_path: Path) -> None:
    events = await store_session(JsonlStore(tmp_path))
    with (tmp_path / "s.jsonl").open("ab") as file:
        file.write(b"x" * 200_000)
    async with Harness(load_entrypoints=False, plugins=[JsonlStore(tmp_path)]) as h:
        session = h.sessions.create("s", events, persisted=len(events))
        session.append(user("after"))
    assert read_session(tmp_path / "s.jsonl", CODEC) == list(session.events)
    header = (tmp_path / "s.jsonl").read_bytes().split(b"\n")[0]
    assert json.loads(header)["events"] == 2


async def test_a_header_without_a_count_is_appended_to_without_one(tmp_path: Path) -> None:
    path = write_lines(tmp_path / "s.jsonl", HEADER, event_line(0))
    events = read_session(path, CODEC)
    async with Harness(load_entrypoints=False, plugins=[JsonlStore(tmp_path)]) as h:
        session = h.sessions.create("s", events, persisted=1)
        session.append(user("more"))
    assert len(read_session(path, CODEC)) == 2


def test_a_header_longer_than_a_read_block_is_read(tmp_path: Path) -> None:
    path = write_lines(tmp_path / "s.jsonl", {**HEADER, "cwd": "/" + "d" * 100_000})
    from dsh_plugins.persistence_jsonl.files import first_line

    fd = os.open(path, os.O_RDONLY)
    try:
        assert first_line(fd) == path.read_bytes()
    finally:
        os.close(fd)


# -- listing ---------------------------------------------------------------------------------


async def test_listing_reports_what_it_cannot_read_beside_the_good_sessions(
    tmp_path: Path,
) -> None:
    assert list_sessions(tmp_path / "missing", None, 10) == []
    await store_session(JsonlStore(tmp_path), "good")
    (tmp_path / "bad.jsonl").write_text("garbage\n")
    (tmp_path / "notes.txt").write_text("not a session\n")
    good, bad = sorted(list_sessions(tmp_path, None, 10), key=lambda s: s.id, reverse=True)
    assert good.id == "good" and not isinstance(good, DamagedSession)
    assert isinstance(bad, DamagedSession) and bad.id == "bad"
    assert bad.problem.startswith(f"{tmp_path / 'bad.jsonl'}:1: not a dsh session file")


# -- failures --------------------------------------------------------------------------------


async def test_a_directory_that_cannot_be_made_fails_naming_the_file(tmp_path: Path) -> None:
    (tmp_path / "file").write_text("in the way")
    h = Harness(load_entrypoints=False, plugins=[JsonlStore(tmp_path / "file" / "sessions")])
    await h.start()
    session = h.sessions.create("s")
    session.append(user("x"))
    with pytest.raises(ExceptionGroup) as info:
        await session.checkpoint()
    [error] = info.value.exceptions
    assert isinstance(error, HookError)
    assert "cannot open session file" in str(error) and "s.jsonl" in str(error)
    await h.hooks.harness_stop(h)  # closing would flush and fail again


async def test_a_failed_write_leaves_no_partial_line_and_is_retried(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    real_pwrite = os.pwrite
    calls = 0

    def half_then_fail(fd: int, data: Any, offset: int) -> int:
        nonlocal calls
        calls += 1
        if calls == 2:
            raise OSError(28, "No space left on device")
        return real_pwrite(fd, bytes(data)[: max(1, len(data) // 2)], offset)

    async with Harness(load_entrypoints=False, plugins=[JsonlStore(tmp_path)]) as h:
        session = h.sessions.create("s")
        session.append(user("x"))
        monkeypatch.setattr(os, "pwrite", half_then_fail)
        with pytest.raises(ExceptionGroup, match="dsh_session_checkpoint") as info:
            await session.checkpoint()
        assert "No space left on device" in str(info.value.exceptions[0])
        assert (tmp_path / "s.jsonl").read_bytes() == b""  # the half line was cut
        monkeypatch.setattr(os, "pwrite", real_pwrite)
    assert read_session(tmp_path / "s.jsonl", CODEC) == list(session.events)


# -- fsync -----------------------------------------------------------------------------------


@pytest.fixture
def fsyncs(monkeypatch: pytest.MonkeyPatch) -> list[int]:
    synced: list[int] = []
    real = os.fsync

    def record(fd: int) -> None:
        synced.append(fd)
        real(fd)

    monkeypatch.setattr(os, "fsync", record)
    return synced


@pytest.mark.parametrize(("mode", "expected"), [("turn", 3), ("checkpoint", 7), ("never", 0)])
async def test_fsync_modes(tmp_path: Path, fsyncs: list[int], mode: Any, expected: int) -> None:
    store = JsonlStore(tmp_path, fsync=mode)
    async with Harness(load_entrypoints=False, plugins=[store]) as h:
        h.llm.register_adapter(["m"], ScriptedAdapter([text_response("a"), text_response("b")]))
        agent = h.agent_loop.create("a", AgentOptions(model="m"), session_id="a-session")
        agent.send("one")
        await agent.wait_idle()
        agent.send("two")
        await agent.wait_idle()
    # turn: each turn end (+ the new file's directory once), nothing left at close;
    # checkpoint: also before each model request and before each turn's end
    assert len(fsyncs) == expected


async def test_a_flush_with_nothing_new_to_sync_starts_no_worker_thread(
    tmp_path: Path, fsyncs: list[int], monkeypatch: pytest.MonkeyPatch
) -> None:
    threads: list[object] = []
    real = asyncio.to_thread

    def counted(func: Any, /, *args: Any) -> Any:
        threads.append(func)
        return real(func, *args)

    monkeypatch.setattr(asyncio, "to_thread", counted)
    async with Harness(load_entrypoints=False, plugins=[JsonlStore(tmp_path)]) as h:
        session = h.sessions.create("s")
        session.append(user("one"))
        await session.flush()
        assert (len(threads), len(fsyncs)) == (1, 2)  # the file, and its new directory entry
        await session.flush()  # nothing written since: nothing to hand a thread
        await h.sessions.close(session)
        assert (len(threads), len(fsyncs)) == (1, 2)


async def test_a_write_made_while_an_fsync_runs_is_synced_by_the_next(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    store = JsonlStore(tmp_path)
    synced: list[int] = []
    real = os.fsync
    async with Harness(load_entrypoints=False, plugins=[store]) as h:
        session = h.sessions.create("s")
        session.append(user("one"))
        await session.checkpoint()
        file = store._files["s"]
        late = SessionEvent("user/message", 1, 2.0, user("two"))

        def racing(fd: int) -> None:
            if not synced:  # the loop writes the next batch while the first fsync runs
                file.write([late], whole=False)
            synced.append(fd)
            real(fd)

        monkeypatch.setattr(os, "fsync", racing)
        await session.flush()
        assert file.unsynced  # the late write still needs its own fsync
        await asyncio.to_thread(file.fsync)
        assert (file.unsynced, len(synced)) == (False, 3)  # file, directory, file again
        file.fsync()  # nothing written since: nothing to sync
        assert len(synced) == 3

        def failing(fd: int) -> None:
            raise OSError(5, "Input/output error")

        monkeypatch.setattr(os, "fsync", failing)
        file.write([SessionEvent("user/message", 2, 3.0, user("three"))], whole=False)
        with pytest.raises(OSError, match="Input/output"):
            file.fsync()
        assert (file.unsynced, len(synced)) == (True, 3)  # a failed fsync: the next tries again
        monkeypatch.setattr(os, "fsync", real)


async def test_a_flush_while_an_fsync_runs_waits_for_one_of_its_own(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    store = JsonlStore(tmp_path)
    entered, release = threading.Event(), threading.Event()
    synced: list[int] = []
    real = os.fsync

    def slow(fd: int) -> None:
        synced.append(fd)
        if len(synced) == 1:  # the first fsync is still on its way to the disk
            entered.set()
            assert release.wait(10), "the test never released the first fsync"
        real(fd)

    monkeypatch.setattr(os, "fsync", slow)
    async with Harness(load_entrypoints=False, plugins=[store]) as h:
        session = h.sessions.create("s")
        session.append(user("one"))
        first = asyncio.ensure_future(session.flush())
        assert await asyncio.to_thread(entered.wait, 10)
        file = store._files["s"]
        assert file.unsynced  # written, and no fsync has finished: not durable yet
        await session.flush()  # meanwhile: it must not count on the first, unfinished one
        fd = synced[0]
        assert synced[:2] == [fd, fd] and len(synced) == 3  # the file itself, and its directory
        release.set()
        await first
        assert (file.unsynced, len(synced)) == (False, 3)


async def test_an_empty_session_writes_nothing(tmp_path: Path, fsyncs: list[int]) -> None:
    store = JsonlStore(tmp_path)
    async with Harness(load_entrypoints=False, plugins=[store]) as h:
        empty = h.sessions.create("empty")
        await empty.flush()  # nothing to write: no file, no fsync
        await empty.checkpoint()
    assert fsyncs == []
    assert not (tmp_path / "empty.jsonl").exists()


async def test_a_closed_session_used_again_is_written_whole(tmp_path: Path) -> None:
    store = JsonlStore(tmp_path)
    async with Harness(load_entrypoints=False, plugins=[store]) as h:
        session = h.sessions.create("s")
        session.append(user("one"))
        await h.sessions.close(session)
        assert "s" not in store._files
        session.append(user("two"))
        await session.flush()
        assert read_session(tmp_path / "s.jsonl", h.events) == list(session.events)


async def test_a_disabled_store_ignores_sessions(tmp_path: Path) -> None:
    store = JsonlStore()
    config = {"persistence_jsonl": {"enabled": False}}
    async with Harness(load_entrypoints=False, plugins=[store], config=config) as h:
        session = h.sessions.create("s")
        session.append(user("x"))
        await session.checkpoint()
        await h.sessions.close(session)
        session.append(user("y"))
    assert store._files == {}


async def test_a_second_start_of_the_same_store_is_not_needed(tmp_path: Path) -> None:
    # Two harnesses on one directory in one process: each store instance has its own files.
    one, two = JsonlStore(tmp_path), JsonlStore(tmp_path)
    events = await asyncio.gather(store_session(one, "a"), store_session(two, "b"))
    assert read_session(tmp_path / "a.jsonl", CODEC) == events[0]
    assert read_session(tmp_path / "b.jsonl", CODEC) == events[1]


def _same(a: Any, b: Any) -> bool:
    """Equal JSON values, NaN equal to itself."""
    if isinstance(a, float) and isinstance(b, float) and a != a:
        return b != b
    if isinstance(a, list) and isinstance(b, list):
        return len(a) == len(b) and all(map(_same, a, b))
    if isinstance(a, dict) and isinstance(b, dict):
        return a.keys() == b.keys() and all(_same(a[k], b[k]) for k in a)
    return bool(a == b and type(a) is type(b))


def test_text_is_written_as_utf_8_and_a_lone_surrogate_as_an_escape() -> None:
    assert lines([{"t": "héj 日本"}, {"t": None}]) == '{"t":"héj 日本"}\n{"t":null}\n'.encode()
    assert lines([{"t": "a\ud800"}]) == b'{"t":"a\\ud800"}\n'
    assert json.loads(lines([{"t": "a\ud800"}])) == {"t": "a\ud800"}
