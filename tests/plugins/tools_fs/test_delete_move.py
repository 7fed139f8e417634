"""``delete_file`` and ``move_file``, and what every file tool records for rewind."""

from __future__ import annotations

import json
import os
from pathlib import Path

import pytest

from dsh import AgentOptions, Harness, ToolExecution
from dsh.plugin import FileBlob, FileChange, ToolError, digest_of
from dsh_plugins.permissions import PermissionsPlugin
from dsh_plugins.tools_fs import FsToolsPlugin, files
from tests.plugins.tools_fs.support import Call, failed, ok, text
from tests.test_recovery import FullDisk


async def test_delete_file_removes_a_file_and_refuses_the_rest(call: Call, workspace: Path) -> None:
    (workspace / "a.txt").write_text("a")
    (workspace / "dir").mkdir()
    os.mkfifo(workspace / "pipe")
    assert ok(await call("delete_file", path="a.txt")) == "deleted a.txt"
    assert not (workspace / "a.txt").exists()
    assert "does not exist" in failed(await call("delete_file", path="a.txt"), "NOT_FOUND")
    failed(await call("delete_file", path="dir"), "IS_A_DIRECTORY")
    failed(await call("delete_file", path="pipe"), "NOT_A_FILE")
    assert (workspace / "dir").is_dir()


async def test_move_file_renames_into_new_directories(call: Call, workspace: Path) -> None:
    (workspace / "a.txt").write_bytes(b"\x00binary too")
    assert ok(await call("move_file", path="a.txt", to="x/y/b.txt")) == "moved a.txt to x/y/b.txt"
    assert (workspace / "x" / "y" / "b.txt").read_bytes() == b"\x00binary too"
    assert not (workspace / "a.txt").exists()


async def test_move_file_refuses_what_would_lose_or_do_nothing(call: Call, workspace: Path) -> None:
    (workspace / "a.txt").write_text("a")
    (workspace / "b.txt").write_text("b")
    (workspace / "dir").mkdir()
    assert "already exists" in failed(
        await call("move_file", path="a.txt", to="b.txt"), "ALREADY_EXISTS"
    )
    failed(await call("move_file", path="a.txt", to="dir"), "ALREADY_EXISTS")
    failed(await call("move_file", path="a.txt", to="./a.txt"), "INVALID_ARGS")
    failed(await call("move_file", path="gone.txt", to="c.txt"), "NOT_FOUND")
    failed(await call("move_file", path="dir", to="c.txt"), "IS_A_DIRECTORY")
    assert (workspace / "a.txt").read_text() == "a" and (workspace / "b.txt").read_text() == "b"


def test_a_destination_directory_swapped_for_a_link_is_refused(tmp_path: Path) -> None:
    root, outside = tmp_path / "ws", tmp_path / "outside"
    root.mkdir()
    outside.mkdir()
    (root / "a.txt").write_text("a")
    os.symlink(outside, root / "docs")  # what confinement saw was a directory
    with pytest.raises(ToolError) as caught:
        files.move(root / "a.txt", "a.txt", root / "docs" / "a.txt", "docs/a.txt", root)
    assert caught.value.code == "OUTSIDE_WORKSPACE"
    assert list(outside.iterdir()) == [] and (root / "a.txt").exists()


def test_a_move_the_system_refuses_is_an_os_error(tmp_path: Path) -> None:
    (tmp_path / "file").write_text("x")
    with pytest.raises(ToolError) as caught:
        files.move(tmp_path / "a.txt", "a.txt", tmp_path / "file" / "b", "file/b", tmp_path)
    assert caught.value.code == "OS_ERROR"


def test_a_delete_the_system_refuses_is_an_os_error(tmp_path: Path) -> None:
    with pytest.raises(ToolError) as caught:
        files.delete(tmp_path / "gone", "gone")
    assert caught.value.code == "OS_ERROR"


def test_a_file_that_cannot_be_read_cannot_be_changed(tmp_path: Path) -> None:
    target = tmp_path / "dir" / "x"
    (tmp_path / "dir").mkdir()
    target.write_text("x")
    target.chmod(0)
    try:
        if os.access(target, os.R_OK):
            pytest.skip("running as a user who reads any file (root)")
        for prepare in (files.prepare_write, files.prepare_delete):
            with pytest.raises(ToolError) as caught:
                prepare(target, "dir/x")
            assert caught.value.code == "OS_ERROR"
    finally:
        target.chmod(0o644)


async def test_every_change_records_the_previous_state_first(workspace: Path) -> None:
    (workspace / "a.txt").write_text("one")
    config = {"permissions": {"mode": "full"}}
    async with Harness(load_entrypoints=False, plugins=[FsToolsPlugin], config=config) as h:
        agent = h.agent_loop.create("fs", AgentOptions(workspace=str(workspace)))

        async def run(name: str, **args: str) -> None:
            outcome = await h.tools.execute(ToolExecution("c1", name, json.dumps(args), agent))
            assert not outcome.is_error, text(outcome)

        await run("edit_file", path="a.txt", old="one", new="two")
        await run("write_file", path="b.txt", content="bee")
        await run("move_file", path="b.txt", to="c.txt")
        await run("delete_file", path="a.txt")
        events = list(agent.session.events)
    blobs = {e.data.digest: e.data.data for e in events if isinstance(e.data, FileBlob)}
    changes = [e.data for e in events if isinstance(e.data, FileChange)]
    one, two, bee = digest_of(b"one"), digest_of(b"two"), digest_of(b"bee")
    a, b, c = (str(workspace / n) for n in ("a.txt", "b.txt", "c.txt"))
    assert [(x.tool, x.path, x.before, x.after) for x in changes] == [
        ("edit_file", a, one, two),
        ("write_file", b, None, bee),
        ("move_file", b, bee, None),
        ("move_file", c, None, bee),
        ("delete_file", a, two, None),
    ]
    assert set(blobs) == {one, bee, two}
    assert {x.call_id for x in changes} == {"c1"} and {x.turn for x in changes} == {0}


async def test_a_call_outside_any_agent_changes_without_recording(
    workspace: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.chdir(workspace)  # no agent: the workspace is the current directory
    config = {"permissions": {"mode": "full"}}
    async with Harness(load_entrypoints=False, plugins=[FsToolsPlugin], config=config) as h:
        args = json.dumps({"path": "a.txt", "content": "x"})
        outcome = await h.tools.execute(ToolExecution("c1", "write_file", args))
    assert text(outcome) == "created a.txt (1 bytes, 1 lines)"
    assert (workspace / "a.txt").read_text() == "x"


@pytest.mark.parametrize("mode", ["read-only", "plan"])
async def test_the_permission_policy_holds_deletes_and_moves_like_writes(
    workspace: Path, mode: str
) -> None:
    (workspace / "a.txt").write_text("a")
    config = {"permissions": {"mode": mode}}
    plugins = [FsToolsPlugin, PermissionsPlugin]
    async with Harness(load_entrypoints=False, plugins=plugins, config=config) as h:
        agent = h.agent_loop.create("fs", AgentOptions(workspace=str(workspace)))
        for name, args in (
            ("delete_file", {"path": "a.txt"}),
            ("move_file", {"path": "a.txt", "to": "b"}),
        ):
            outcome = await h.tools.execute(ToolExecution("c", name, json.dumps(args), agent))
            assert (outcome.is_error, outcome.code) == (True, "DENIED")
        assert not [e for e in agent.session.events if isinstance(e.data, FileChange)]
    assert (workspace / "a.txt").read_text() == "a"


async def test_nothing_is_changed_when_the_previous_state_cannot_be_saved(workspace: Path) -> None:
    (workspace / "a.txt").write_text("a")
    store = FullDisk("checkpoint")
    config = {"permissions": {"mode": "full"}}
    async with Harness(load_entrypoints=False, plugins=[FsToolsPlugin, store], config=config) as h:
        agent = h.agent_loop.create("fs", AgentOptions(workspace=str(workspace)))
        args = json.dumps({"path": "a.txt"})
        outcome = await h.tools.execute(ToolExecution("c", "delete_file", args, agent))
        assert (outcome.is_error, outcome.code) == (True, "SESSION_NOT_SAVED")
        assert "nothing was changed" in text(outcome) and "No space left" in text(outcome)
        changes = [e.data for e in agent.session.events if isinstance(e.data, FileChange)]
        assert [c.error is None for c in changes] == [True, False]
        store.full.clear()
    assert (workspace / "a.txt").read_text() == "a"
