"""File checkpoints and rewind: an agent changes files in three turns through the file tools,
then the files are put back as they were before turn 2 and the conversation forks there."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from dsh import AgentOptions, DshError, Harness, RewindReport
from dsh.loop._recovery import pending_messages
from dsh.plugin import (
    CheckpointCaps,
    FileBlob,
    FileChange,
    Session,
    SessionRewind,
    digest_of,
    record_change,
    record_failure,
)
from dsh.session._rewind import _put as put
from dsh.session._rewind import changed_files, rewind, turn_diff
from dsh.session._text import describe
from dsh.testing import ScriptedAdapter, text_response, tool_call_response
from dsh.values._content import Text, text_of
from dsh.values._events import ToolResultEvent, TurnCompleted, TurnEnd, TurnStart, UserMessage
from dsh.values._rare_events import ContextMessage, QueuedMessage, WithdrawnMessage
from dsh_plugins.persistence_jsonl import JsonlStore
from dsh_plugins.persistence_sqlite import SqliteStore
from dsh_plugins.tools_fs import FsToolsPlugin
from dsh_plugins.tools_shell import ShellToolPlugin
from tests.test_recovery import FullDisk

#: A store plugin instance for a test's directory.
StoreFactory = Callable[[Path], Any]

STORES: dict[str, StoreFactory] = {
    "jsonl": lambda d: JsonlStore(d / "sessions"),
    "sqlite": lambda d: SqliteStore(d / "sessions.db"),
}


def turn(*calls: tuple[str, dict[str, Any]]) -> list[Any]:
    """A turn's script: each call in a step of its own, then a closing text."""
    steps: list[Any] = [
        tool_call_response(f"c{id(args)}-{n}", name, args) for n, (name, args) in enumerate(calls)
    ]
    return [*steps, text_response("done")]


def script() -> list[Any]:
    return [
        *turn(
            ("write_file", {"path": "a.txt", "content": "alpha\n"}),
            ("write_file", {"path": "b.txt", "content": "bravo\n"}),
            ("write_file", {"path": "keep/k.txt", "content": "kilo\n"}),
        ),
        *turn(
            ("edit_file", {"path": "a.txt", "old": "alpha", "new": "ALPHA"}),
            ("delete_file", {"path": "b.txt"}),
            ("write_file", {"path": "c.txt", "content": "charlie\n"}),
            ("move_file", {"path": "keep/k.txt", "to": "moved/k.txt"}),
            ("shell", {"command": "echo untracked > shell.txt"}),
        ),
        *turn(
            ("edit_file", {"path": "c.txt", "old": "charlie", "new": "CHARLIE"}),
            ("write_file", {"path": "a.txt", "content": "again\n"}),
            ("write_file", {"path": "b.txt", "content": "bravo, back\n"}),
            ("move_file", {"path": "c.txt", "to": "d.txt"}),
        ),
    ]


def tree(root: Path) -> dict[str, bytes]:
    """Every file under ``root`` and its bytes."""
    return {p.relative_to(root).as_posix(): p.read_bytes() for p in root.rglob("*") if p.is_file()}


#: No permission policy is loaded: the tools run unrestricted.
FULL = {"permissions": {"mode": "full"}}


def harness(store: Any) -> Harness:
    plugins = [FsToolsPlugin, ShellToolPlugin, store]
    return Harness(load_entrypoints=False, plugins=plugins, config=FULL)


#: The trees the workspace holds before turns 1, 2, 3 and after turn 3.
Trees = dict[int, dict[str, bytes]]


async def three_turns(tmp_path: Path, make_store: StoreFactory) -> tuple[Path, str, Trees, int]:
    """Run the three turns in a workspace; the workspace, the session id, the tree before
    each turn (4: after the last) and the number of events stored."""
    workspace = tmp_path / "ws"
    workspace.mkdir()
    trees: Trees = {1: {}}
    async with harness(make_store(tmp_path)) as h:
        h.llm.register_adapter(["m"], ScriptedAdapter(script()))
        agent = h.agent_loop.create("a", AgentOptions(model="m", workspace=str(workspace)))
        for n in (1, 2, 3):
            agent.send(f"turn {n}")
            await agent.wait_idle()
            trees[n + 1] = tree(workspace)
        session_id, stored = agent.session.id, len(agent.session)
    return workspace, session_id, trees, stored


async def rewound(
    tmp_path: Path, make_store: StoreFactory, session_id: str, **options: Any
) -> tuple[RewindReport, list[Any], list[Any]]:
    """Resume ``session_id``, rewind it to before turn 2; the report, the events of the
    session the agent continues in and those the original holds now."""
    async with harness(make_store(tmp_path)) as h:
        agent = await h.agent_loop.resume(session_id, AgentOptions(model="m"))
        report = await agent.rewind(2, **options)
        continued = list(agent.session.events)
        await agent.dispose()
        original = await h.sessions.load(session_id)
    assert original is not None
    return report, continued, original


@pytest.mark.parametrize("store", list(STORES))
async def test_rewind_to_turn_2_restores_every_file_and_forks_before_it(
    tmp_path: Path, store: str
) -> None:
    await rewind_scenario(tmp_path, STORES[store])


async def rewind_scenario(tmp_path: Path, make_store: StoreFactory) -> None:
    """The issue's test, for any store: byte-identical files, a fork whose history ends before
    turn 2, the original whole, an outside change kept as a conflict."""
    workspace, session_id, trees, stored = await three_turns(tmp_path, make_store)
    before_turn_2 = trees[2]
    assert tree(workspace) != before_turn_2
    (workspace / "d.txt").write_text("changed outside\n")  # by something else than the tools
    report, fork, original = await rewound(tmp_path, make_store, session_id)

    assert report.conflicts == (str(workspace / "d.txt"),)
    assert report.shell_calls == 1
    assert report.session_id != session_id and report.source == session_id
    expected = dict(before_turn_2, **{"d.txt": b"changed outside\n", "shell.txt": b"untracked\n"})
    assert tree(workspace) == expected
    # The fork ends before turn 2: turn 1 whole, then the rewind; the original keeps it all.
    assert [e.data.turn for e in fork if isinstance(e.data, TurnStart)] == [1]
    assert isinstance(fork[-2].data, TurnEnd) and fork[-2].data.turn == 1
    assert isinstance(fork[-1].data, SessionRewind)
    assert fork[:-1] == original[: len(fork) - 1]
    # All its events, and the end-seed the resume logged: nothing else.
    assert len(original) == stored + 1 and original[-1].type == "session/end-seed"
    assert isinstance(original[len(fork) - 1].data, UserMessage)

    # Forced, the conflict is overwritten too: every file as it was before turn 2.
    (workspace / "shell.txt").unlink()
    report, _, _ = await rewound(tmp_path, make_store, session_id, force=True)
    assert report.conflicts == ()
    assert tree(workspace) == before_turn_2


async def test_a_fork_continues_the_conversation_and_keeps_its_checkpoints(
    tmp_path: Path,
) -> None:
    workspace, session_id, _, _ = await three_turns(tmp_path, STORES["jsonl"])
    async with harness(STORES["jsonl"](tmp_path)) as h:
        h.llm.register_adapter(["m"], ScriptedAdapter(turn(("delete_file", {"path": "a.txt"}))))
        options = AgentOptions(model="m", workspace=str(workspace))
        agent = await h.agent_loop.resume(session_id, options)
        report = await agent.rewind(2)
        assert agent.session.id == report.session_id
        agent.send("turn 2, again")
        await agent.wait_idle()
        assert agent.session.last_turn == 2
        assert not (workspace / "a.txt").exists()
        # The fork holds turn 1's checkpoints: it rewinds to before turn 1 as well.
        await agent.rewind(1, in_place=True)
        fork_id = agent.session.id
    assert tree(workspace) == {"shell.txt": b"untracked\n"}
    async with harness(STORES["jsonl"](tmp_path)) as h:
        events = await h.sessions.load(fork_id)
    assert events is not None
    assert isinstance(events[-1].data, SessionRewind)
    assert isinstance(events[-2].data, ContextMessage)


async def test_in_place_logs_the_rewind_which_can_itself_be_rewound(tmp_path: Path) -> None:
    workspace, session_id, trees, stored = await three_turns(tmp_path, STORES["sqlite"])
    before_turn_2 = trees[2]
    report, events, original = await rewound(tmp_path, STORES["sqlite"], session_id, in_place=True)
    assert report.session_id == session_id
    assert tree(workspace) == dict(before_turn_2, **{"shell.txt": b"untracked\n"})
    assert len(original) == len(events) > stored
    rewind = events[-1].data
    assert isinstance(rewind, SessionRewind) and rewind.to_turn == 2
    assert describe(events[-1]) == (
        f"files of {session_id} rewound to before turn 2: 6 restored, 0 conflict(s) kept, "
        "0 not restorable, 1 shell command(s) not undone"
    )
    assert sorted(rewind.restored) == sorted(report.restored)
    note = events[-2].data
    assert isinstance(note, ContextMessage)
    assert "rewound" in note.content[0].text  # type: ignore[union-attr]
    # Again: every file already is as it was before turn 2.
    report, _, _ = await rewound(tmp_path, STORES["sqlite"], session_id, in_place=True)
    assert sorted(report.restored) == sorted(rewind.restored)
    assert tree(workspace) == dict(before_turn_2, **{"shell.txt": b"untracked\n"})
    # The rewind's own changes are recorded, in the turn it followed (3): rewinding to before
    # turn 3 puts back what turn 2 left, from checkpoints the rewind itself recorded.
    async with harness(STORES["sqlite"](tmp_path)) as h:
        agent = await h.agent_loop.resume(session_id, AgentOptions(model="m"))
        report = await agent.rewind(3, in_place=True)
        await agent.dispose()
    assert report.conflicts == report.lost == ()
    assert tree(workspace) == trees[3]


async def test_content_over_a_cap_is_changed_but_not_restorable_and_the_user_is_told(
    tmp_path: Path,
) -> None:
    workspace = tmp_path / "ws"
    workspace.mkdir()
    (workspace / "big.txt").write_text("x" * 100)
    (workspace / "small.txt").write_text("y" * 10)
    (workspace / "other.txt").write_text("z" * 10)
    caps = {"checkpoint_file_bytes": 50, "checkpoint_session_bytes": 15}
    config = {"tools_fs": caps, **FULL}
    steps = turn(
        ("write_file", {"path": "big.txt", "content": "new"}),
        ("write_file", {"path": "small.txt", "content": "new"}),
        ("write_file", {"path": "other.txt", "content": "new"}),
    )
    async with Harness(load_entrypoints=False, plugins=[FsToolsPlugin], config=config) as h:
        h.llm.register_adapter(["m"], ScriptedAdapter(steps))
        agent = h.agent_loop.create("a", AgentOptions(model="m", workspace=str(workspace)))
        agent.send("go")
        await agent.wait_idle()
        results = [e.data for e in agent.session.events if isinstance(e.data, ToolResultEvent)]
        said = [text_of(r.content) for r in results]
        assert "not kept for rewind (100 bytes, over the cap of 50 per file)" in said[0]
        assert "note" not in said[1]
        assert "the session already keeps 10 bytes, cap 15" in said[2]
        changes = [e.data for e in agent.session.events if isinstance(e.data, FileChange)]
        assert [c.lost is None for c in changes] == [False, True, False]
        report = await agent.rewind(1, in_place=True)
    assert report.lost == (str(workspace / "big.txt"), str(workspace / "other.txt"))
    assert report.restored == (str(workspace / "small.txt"),)
    assert (workspace / "big.txt").read_text() == "new"
    assert (workspace / "small.txt").read_text() == "y" * 10
    assert any("not kept" in line for line in report.lines())


async def test_the_same_content_is_kept_once(tmp_path: Path) -> None:
    workspace = tmp_path / "ws"
    workspace.mkdir()
    steps = turn(
        ("write_file", {"path": "a.txt", "content": "same"}),
        ("write_file", {"path": "a.txt", "content": "other"}),
        ("write_file", {"path": "a.txt", "content": "same"}),
        ("write_file", {"path": "a.txt", "content": "other"}),
        ("write_file", {"path": "b.txt", "content": "x"}),
        ("write_file", {"path": "b.txt", "content": "same"}),
    )
    async with Harness(load_entrypoints=False, plugins=[FsToolsPlugin], config=FULL) as h:
        h.llm.register_adapter(["m"], ScriptedAdapter(steps))
        agent = h.agent_loop.create("a", AgentOptions(model="m", workspace=str(workspace)))
        agent.send("go")
        await agent.wait_idle()
        blobs = [e.data for e in agent.session.events if isinstance(e.data, FileBlob)]
    assert sorted(b.size for b in blobs) == [1, 4, 5]


async def test_a_failed_change_is_recorded_and_the_file_counts_as_unchanged(
    tmp_path: Path,
) -> None:
    workspace = tmp_path / "ws"
    (workspace / "dir").mkdir(parents=True)
    (workspace / "a.txt").write_text("a")
    (workspace / "dir" / "b.txt").write_text("b")
    steps = turn(("move_file", {"path": "a.txt", "to": "dir/b.txt/c.txt"}))
    async with Harness(load_entrypoints=False, plugins=[FsToolsPlugin], config=FULL) as h:
        h.llm.register_adapter(["m"], ScriptedAdapter(steps))
        agent = h.agent_loop.create("a", AgentOptions(model="m", workspace=str(workspace)))
        agent.send("go")
        await agent.wait_idle()
        changes = [e.data for e in agent.session.events if isinstance(e.data, FileChange)]
        assert [c.error is not None for c in changes] == [False, False, True, True]
        report = await agent.rewind(1, in_place=True)
    assert report.conflicts == ()
    assert tree(workspace) == {"a.txt": b"a", "dir/b.txt": b"b"}


async def test_rewind_refuses_an_unknown_turn_and_a_busy_agent(tmp_path: Path) -> None:
    async with Harness(load_entrypoints=False, plugins=[FsToolsPlugin], config=FULL) as h:
        h.llm.register_adapter(["m"], ScriptedAdapter(turn()))
        agent = h.agent_loop.create("a", AgentOptions(model="m", workspace=str(tmp_path)))
        with pytest.raises(DshError, match="there is no turn 1: the session holds no turn"):
            await agent.rewind(1)
        agent.send("go")
        with pytest.raises(DshError, match="rewind it once it is idle"):
            await agent.rewind(1)
        await agent.wait_idle()
        with pytest.raises(DshError, match="there is no turn 2: the session holds turns 1 to 1"):
            await agent.rewind(2)
        report = await agent.rewind(1)
    assert report.lines()[1] == "  no file was changed by the file tools since then"


# -- the checkpoints and the rewind, on a log made by hand -----------------------------------


def in_turn(session: Session, n: int) -> None:
    session.append(UserMessage((Text(f"turn {n}"),)))
    session.append(TurnStart(n))


def end_turn(session: Session, n: int) -> None:
    session.append(TurnEnd(n, TurnCompleted()))


def changed(session: Session, path: Path, content: bytes | None, tool: str = "t") -> None:
    """Record a change of ``path`` to ``content`` and make it, as a file tool does."""
    before = path.read_bytes() if path.exists() else None
    after = None if content is None else digest_of(content)
    record_change(session, tool=tool, path=path, before=before, after=after)
    if content is None:
        path.unlink()
    else:
        path.write_bytes(content)


async def rewind_alone(session: Session, turn: int, **options: Any) -> RewindReport:
    async with Harness(load_entrypoints=False) as h:
        return (await rewind(h.sessions, session, turn, **options))[1]


async def test_what_cannot_be_read_or_written_back_is_a_conflict(tmp_path: Path) -> None:
    session = Session("s")
    in_turn(session, 1)
    dir_now, under_file = tmp_path / "was-a-file", tmp_path / "d" / "x.txt"
    under_file.parent.mkdir()
    under_file.write_bytes(b"x0")
    changed(session, dir_now, b"file")
    changed(session, under_file, b"x")
    end_turn(session, 1)
    in_turn(session, 2)
    changed(session, under_file, None)
    end_turn(session, 2)
    # Since then, by something else: a directory where the file was, a file where "d" was.
    dir_now.unlink()
    (dir_now / "inside").mkdir(parents=True)
    under_file.parent.rmdir()
    under_file.parent.write_text("now a file")
    for in_place in (False, True):
        report = await rewind_alone(session, 1, in_place=in_place, force=True)
        assert report.conflicts == (str(dir_now), str(under_file))
    failed = [e.data for e in session.events if isinstance(e.data, FileChange) and e.data.error]
    assert [(c.tool, c.path) for c in failed] == [("rewind", str(under_file))]


def test_a_failed_write_back_leaves_no_temporary_file(tmp_path: Path) -> None:
    target = tmp_path / "dir"
    (target / "inside").mkdir(parents=True)
    with pytest.raises(IsADirectoryError):
        put(target, b"content")
    assert sorted(p.name for p in tmp_path.iterdir()) == ["dir"]


async def test_a_checkpoint_missing_from_the_log_is_not_restorable(tmp_path: Path) -> None:
    path = tmp_path / "a.txt"
    path.write_text("now")
    session = Session("s")
    in_turn(session, 1)
    session.append(FileChange(1, "t", str(path), digest_of(b"gone"), digest_of(b"now")))
    end_turn(session, 1)
    report = await rewind_alone(session, 1)
    assert report.lost == (str(path),) and path.read_text() == "now"


def test_diffs_and_the_files_each_turn_changed(tmp_path: Path) -> None:
    text, binary, big, same, fresh = (
        tmp_path / n for n in ("t.txt", "b.bin", "big", "same", "fresh")
    )
    binary.write_bytes(b"\xff\xfe")
    big.write_text("big")
    same.write_text("same")
    session = Session("s")
    in_turn(session, 1)
    changed(session, text, b"one\n")
    changed(session, binary, None)
    changed(session, same, b"same")
    changed(session, fresh, b"new\n")
    record_change(session, tool="t", path=big, before=b"big", after=None, caps=CheckpointCaps(1, 1))
    big.unlink()
    record_failure(session, tool="t", path=text, kept=digest_of(b"one\n"), error="boom")
    end_turn(session, 1)
    in_turn(session, 2)
    end_turn(session, 2)
    in_turn(session, 3)
    changed(session, text, b"two\n")
    end_turn(session, 3)
    text.write_text("changed outside\n")
    events = session.events
    assert turn_diff(events, 1) == [
        "--- /dev/null",
        f"+++ b{text}",
        "@@ -0,0 +1 @@",
        "+one",
        f"{binary}: binary content, 2 -> 0 bytes",
        f"{same}: unchanged",
        "--- /dev/null",
        f"+++ b{fresh}",
        "@@ -0,0 +1 @@",
        "+new",
        f"{big}: content not kept ({digest_of(b'big')} -> no file)",
    ]
    assert turn_diff(events, 2) == ["turn 2 changed no file through the file tools"]
    one, two = digest_of(b"one\n"), digest_of(b"two\n")
    assert turn_diff(events, 3) == [f"{text}: content not kept ({one} -> {two})"]
    assert changed_files(events) == [
        "turn 1: 5 file change(s)",
        f"  created {text} [t]",
        f"  deleted {binary} [t]",
        f"  changed {same} [t]",
        f"  created {fresh} [t]",
        f"  deleted {big} [t] (not restorable: 3 bytes, over the cap of 1 per file)",
        "turn 3: 1 file change(s)",
        f"  changed {text} [t]",
    ]
    words = [describe(e) for e in events if e.type.startswith("file/")]
    assert f"not changed (boom) {text} [t]" in words
    assert "kept 2 bytes as sha256:" + digest_of(b"\xff\xfe")[7:19] in words


async def test_a_rewind_whose_fork_cannot_be_saved_says_so_and_stays(tmp_path: Path) -> None:
    workspace = tmp_path / "ws"
    workspace.mkdir()
    store = FullDisk()
    async with Harness(load_entrypoints=False, plugins=[FsToolsPlugin, store], config=FULL) as h:
        h.llm.register_adapter(
            ["m"], ScriptedAdapter(turn(("write_file", {"path": "a", "content": "x"})))
        )
        agent = h.agent_loop.create("a", AgentOptions(model="m", workspace=str(workspace)))
        agent.send("go")
        await agent.wait_idle()
        first = agent.session.id
        store.full.add("flush")
        with pytest.raises(
            DshError,
            match=r"the files were put back, but session .* could not be saved .*No space left",
        ):
            await agent.rewind(1)
        assert agent.session.id == first
        assert [s.id for s in h.sessions.list()] == [first]
        with pytest.raises(DshError, match=r"but session '[^']+' could not be saved"):
            await agent.rewind(1, in_place=True)  # the rewind stays logged, to save later
        assert isinstance(agent.session.events[-1].data, SessionRewind)
        store.full.clear()
    assert not (workspace / "a").exists()


async def test_a_fork_withdraws_what_was_queued_for_a_turn_it_leaves_out(tmp_path: Path) -> None:
    session = Session("s")
    in_turn(session, 1)
    queued = session.append(QueuedMessage((Text("then this"),))).seq  # typed during turn 1
    kept = session.append(QueuedMessage((Text("never answered"),))).seq
    end_turn(session, 1)
    session.append(UserMessage((Text("then this"),), queued_seq=queued))
    session.append(TurnStart(2))
    end_turn(session, 2)
    async with Harness(load_entrypoints=False) as h:
        fork, _ = await rewind(h.sessions, session, 2)
        events = list(fork.events)
    assert isinstance(events[-2].data, WithdrawnMessage) and events[-2].data.queued_seq == queued
    # Resuming the fork does not send turn 2's message again; one never answered still waits.
    assert [m.queued_seq for m in pending_messages(events)] == [kept]
