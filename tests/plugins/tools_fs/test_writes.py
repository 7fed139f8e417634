"""Writes cannot escape the workspace through links: ``write_file`` and ``edit_file`` write a
new file beside the target and rename it over the target."""

from __future__ import annotations

import os
import stat
from pathlib import Path

import pytest

from dsh.tools._registry import ToolError
from dsh_plugins.tools_fs.replace import replace_file
from tests.plugins.tools_fs.support import Call, failed, ok

ORIGINAL = "outside, untouched\n"


@pytest.fixture
def outside_file(tmp_path: Path) -> Path:
    outside = tmp_path / "outside"
    outside.mkdir()
    target = outside / "precious.txt"
    target.write_text(ORIGINAL)
    return target


def untouched(path: Path) -> bool:
    """Whether the file outside still has its content and no other name."""
    return path.read_text() == ORIGINAL and path.stat().st_nlink == 1


def leftovers(directory: Path) -> list[str]:
    return [p.name for p in directory.iterdir() if p.name.endswith(".dsh-tmp")]


async def test_write_file_does_not_write_through_a_hard_link(
    call: Call, workspace: Path, outside_file: Path
) -> None:
    os.link(outside_file, workspace / "linked.txt")
    assert ok(await call("write_file", path="linked.txt", content="new\n")).startswith("overwrote")
    assert untouched(outside_file)  # the link is broken, not written through
    assert (workspace / "linked.txt").read_text() == "new\n"
    assert (workspace / "linked.txt").stat().st_nlink == 1
    assert leftovers(workspace) == []


async def test_edit_file_does_not_write_through_a_hard_link(
    call: Call, workspace: Path, outside_file: Path
) -> None:
    os.link(outside_file, workspace / "linked.txt")
    assert ok(await call("edit_file", path="linked.txt", old="untouched", new="edited"))
    assert untouched(outside_file)
    assert (workspace / "linked.txt").read_text() == "outside, edited\n"
    assert leftovers(workspace) == []


async def test_a_rewritten_file_keeps_its_mode(call: Call, workspace: Path) -> None:
    script = workspace / "run.sh"
    script.write_text("echo 1\n")
    script.chmod(0o750)
    ok(await call("write_file", path="run.sh", content="echo 2\n"))
    assert stat.S_IMODE(script.stat().st_mode) == 0o750
    ok(await call("edit_file", path="run.sh", old="2", new="3"))
    assert stat.S_IMODE(script.stat().st_mode) == 0o750
    assert script.read_text() == "echo 3\n"


async def test_a_new_file_gets_the_usual_mode(call: Call, workspace: Path) -> None:
    umask = os.umask(0o022)
    try:
        ok(await call("write_file", path="sub/new.txt", content="x"))
    finally:
        os.umask(umask)
    assert stat.S_IMODE((workspace / "sub" / "new.txt").stat().st_mode) == 0o644


def test_a_directory_swapped_for_a_link_after_confinement_is_refused(
    tmp_path: Path, outside_file: Path
) -> None:
    root = tmp_path / "ws"
    root.mkdir()
    os.symlink(outside_file.parent, root / "docs")  # what confinement saw was a directory
    with pytest.raises(ToolError) as caught:
        replace_file(root / "docs" / "precious.txt", "docs/precious.txt", b"pwned", root)
    assert caught.value.code == "OUTSIDE_WORKSPACE"
    assert "its directory now leads outside the workspace" in caught.value.message
    assert outside_file.read_text() == ORIGINAL
    assert leftovers(outside_file.parent) == []


def test_a_failed_rename_leaves_no_temporary_file(tmp_path: Path) -> None:
    target = tmp_path / "now-a-directory"
    target.mkdir()
    (target / "inside").write_text("x")  # appeared after the checks: a rename cannot replace it
    with pytest.raises(ToolError) as caught:
        replace_file(target, "now-a-directory", b"data", tmp_path)
    assert caught.value.code == "OS_ERROR"
    assert caught.value.message.startswith("cannot write now-a-directory: ")
    assert leftovers(tmp_path) == []


def test_a_directory_that_cannot_be_written_is_an_os_error(tmp_path: Path) -> None:
    missing = tmp_path / "gone" / "file.txt"  # its directory vanished after the checks
    with pytest.raises(ToolError) as caught:
        replace_file(missing, "gone/file.txt", b"data", tmp_path)
    assert caught.value.code == "OS_ERROR"
    assert "No such file or directory" in caught.value.message


async def test_a_symlinked_file_inside_is_replaced_not_followed_out(
    call: Call, workspace: Path
) -> None:
    (workspace / "real.txt").write_text("real\n")
    os.symlink(workspace / "real.txt", workspace / "alias.txt")
    ok(await call("write_file", path="alias.txt", content="through the alias\n"))
    assert (workspace / "real.txt").read_text() == "through the alias\n"


async def test_write_refusals_are_unchanged(call: Call, workspace: Path) -> None:
    (workspace / "d").mkdir()
    failed(await call("write_file", path="d", content="x"), "IS_A_DIRECTORY")
