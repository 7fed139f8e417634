"""Security: no file tool reads, writes or lists anything outside the agent's workspace."""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any

import pytest

from tests.plugins.tools_fs.support import Call, failed, ok

SECRET = "top secret\n"


@pytest.fixture
def outside(tmp_path: Path) -> Path:
    """A directory next to the workspace holding a secret file."""
    root = tmp_path / "outside"
    root.mkdir()
    (root / "secret.txt").write_text(SECRET)
    return root


def calls_on(path: str) -> list[tuple[str, dict[str, Any]]]:
    return [
        ("read_file", {"path": path}),
        ("write_file", {"path": path, "content": "pwned\n"}),
        ("edit_file", {"path": path, "old": "top", "new": "pwned"}),
        ("delete_file", {"path": path}),
        ("move_file", {"path": path, "to": "stolen.txt"}),
        ("move_file", {"path": "mine.txt", "to": path}),
        ("list_dir", {"path": path}),
        ("grep", {"pattern": "secret", "path": path}),
    ]


async def refused(call: Call, path: str, how: str) -> None:
    for name, args in calls_on(path):
        message = failed(await call(name, **args), "OUTSIDE_WORKSPACE")
        assert how in message, (name, message)
        assert "Use a path inside the workspace" in message


async def test_path_traversal_is_refused(call: Call, outside: Path) -> None:
    await refused(call, "../outside/secret.txt", "climbs out with '..'")
    await refused(call, "sub/../../outside/secret.txt", "climbs out with '..'")
    await refused(call, "..", "climbs out with '..'")
    assert (outside / "secret.txt").read_text() == SECRET


async def test_absolute_paths_outside_are_refused(call: Call, outside: Path) -> None:
    await refused(call, str(outside / "secret.txt"), "is an absolute path outside it")
    await refused(call, "/etc/passwd", "is an absolute path outside it")
    assert (outside / "secret.txt").read_text() == SECRET


async def test_absolute_paths_inside_are_allowed(call: Call, workspace: Path) -> None:
    (workspace / "mine.txt").write_text("mine\n")
    assert ok(await call("read_file", path=str(workspace / "mine.txt"))) == "     1\tmine"


async def test_symlinks_that_lead_outside_are_refused(
    call: Call, workspace: Path, outside: Path
) -> None:
    os.symlink(outside / "secret.txt", workspace / "innocent.txt")
    os.symlink(outside, workspace / "docs")
    await refused(call, "innocent.txt", "through a symbolic link")
    await refused(call, "docs/secret.txt", "through a symbolic link")
    await refused(call, "docs", "through a symbolic link")
    await refused(call, "docs/new.txt", "through a symbolic link")
    assert not (outside / "new.txt").exists()
    assert (outside / "secret.txt").read_text() == SECRET


async def test_symlinks_inside_the_workspace_work(call: Call, workspace: Path) -> None:
    (workspace / "real.txt").write_text("real\n")
    os.symlink(workspace / "real.txt", workspace / "alias.txt")
    assert ok(await call("read_file", path="alias.txt")) == "     1\treal"


async def test_searches_do_not_follow_links_outside(
    call: Call, workspace: Path, outside: Path
) -> None:
    os.symlink(outside, workspace / "docs")
    os.symlink(outside / "secret.txt", workspace / "innocent.txt")
    assert ok(await call("grep", pattern="secret")) == "no matches for 'secret' in ."
    assert ok(await call("glob", pattern="**/*.txt")) == "no paths match '**/*.txt'"
    assert ok(await call("list_dir")) == "docs/\ninnocent.txt"
