"""The file tools: what each returns, its caps, and the errors a model can correct from."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from dsh import Harness
from dsh_plugins.tools_fs import FsConfig, FsToolsPlugin
from tests.plugins.tools_fs.support import Call, failed, ok


def lines(*texts: str) -> str:
    return "".join(f"{t}\n" for t in texts)


async def test_the_tools_are_registered_with_their_contract() -> None:
    async with Harness(load_entrypoints=False, plugins=[FsToolsPlugin]) as h:
        tools = {name: h.tools.get(name) for name in h.tools.names()}
        assert h.config.section("tools_fs", FsConfig) == FsConfig()
    params = {name: list(t.schema.parameters["properties"]) for name, t in tools.items() if t}
    assert params == {
        "delete_file": ["path"],
        "edit_file": ["path", "old", "new"],
        "glob": ["pattern"],
        "grep": ["pattern", "path"],
        "list_dir": ["path"],
        "move_file": ["path", "to"],
        "read_file": ["path", "offset", "limit"],
        "write_file": ["path", "content"],
    }
    safe = {name for name, t in tools.items() if t and t.concurrency_safe}
    assert safe == {"read_file", "list_dir", "glob", "grep"}
    effects = {name: t.effect for name, t in tools.items() if t}
    writers = ("write_file", "edit_file", "delete_file", "move_file")
    assert effects == dict.fromkeys(safe, "read") | dict.fromkeys(writers, "write")


# -- read_file -------------------------------------------------------------------------------


async def test_read_file_numbers_lines_and_reads_ranges(call: Call, workspace: Path) -> None:
    (workspace / "a.txt").write_text(lines("one", "two", "three", "four") + "five")
    assert ok(await call("read_file", path="a.txt")) == (
        "     1\tone\n     2\ttwo\n     3\tthree\n     4\tfour\n     5\tfive"
    )
    assert ok(await call("read_file", path="a.txt", offset=2, limit=2)) == (
        "     2\ttwo\n     3\tthree\n[more lines follow: call read_file with offset=4]"
    )
    assert ok(await call("read_file", path="a.txt", offset=5, limit=9)) == "     5\tfive"


async def test_read_file_edge_cases(call: Call, workspace: Path) -> None:
    (workspace / "empty.txt").write_text("")
    (workspace / "crlf.txt").write_bytes(b"a\r\n\xff\r\n")
    (workspace / "image.png").write_bytes(b"\x89PNG\0\0\0")
    (workspace / "dir").mkdir()
    assert ok(await call("read_file", path="empty.txt")) == "(empty.txt is empty)"
    assert ok(await call("read_file", path="crlf.txt")) == "     1\ta\n     2\t\ufffd"
    assert "past its end" in failed(
        await call("read_file", path="crlf.txt", offset=3), "OUT_OF_RANGE"
    )
    binary = failed(await call("read_file", path="image.png"), "BINARY_FILE")
    assert binary == "Error: image.png is a binary file (7 bytes); read_file reads text only"
    assert "list_dir" in failed(await call("read_file", path="missing.txt"), "NOT_FOUND")
    assert "is a directory" in failed(await call("read_file", path="dir"), "IS_A_DIRECTORY")
    for bad in ({"offset": 0}, {"limit": 0}):
        assert "from 1" in failed(await call("read_file", path="crlf.txt", **bad), "INVALID_ARGS")
    assert failed(await call("read_file", path="crlf.txt", offset="2"), "INVALID_ARGS")


@pytest.mark.parametrize("fs_config", [{"max_lines": 3, "max_line_chars": 5}])
async def test_read_file_caps_lines_and_characters(call: Call, workspace: Path) -> None:
    (workspace / "long.txt").write_text(lines("abcdefgh", "b", "c", "d", "e"))
    assert ok(await call("read_file", path="long.txt", limit=100)) == (
        "     1\tabcde [... 3 more characters]\n     2\tb\n     3\tc\n"
        "[more lines follow: call read_file with offset=4]"
    )


@pytest.mark.parametrize("fs_config", [{"max_output_bytes": 30}])
async def test_read_file_caps_bytes_but_returns_at_least_one_line(
    call: Call, workspace: Path
) -> None:
    (workspace / "wide.txt").write_text(lines("x" * 40, "y" * 5, "z" * 5, "w"))
    assert ok(await call("read_file", path="wide.txt")) == (
        f"     1\t{'x' * 40}\n[more lines follow: call read_file with offset=2]"
    )
    assert ok(await call("read_file", path="wide.txt", offset=2)) == (
        "     2\tyyyyy\n     3\tzzzzz\n[more lines follow: call read_file with offset=4]"
    )


# -- write_file and edit_file ----------------------------------------------------------------


async def test_write_file_creates_and_overwrites(call: Call, workspace: Path) -> None:
    assert ok(await call("write_file", path="new/deep/a.txt", content="hi\nthere")) == (
        "created new/deep/a.txt (8 bytes, 2 lines)"
    )
    assert (workspace / "new/deep/a.txt").read_text() == "hi\nthere"
    assert ok(await call("write_file", path="new/deep/a.txt", content="")) == (
        "overwrote new/deep/a.txt (0 bytes, 0 lines)"
    )
    assert ok(await call("write_file", path="b.txt", content="x\n")).endswith("(2 bytes, 1 lines)")
    assert failed(await call("write_file", path="new", content="x"), "IS_A_DIRECTORY")
    blocked = failed(await call("write_file", path="b.txt/c.txt", content="x"), "OS_ERROR")
    assert blocked.startswith("Error: cannot write b.txt/c.txt: ")


async def test_edit_file_replaces_one_exact_match(call: Call, workspace: Path) -> None:
    target = workspace / "code.py"
    target.write_text(lines("def f():", "    return 1", "", "def g():", "    return 1"))
    outcome = await call("edit_file", path="code.py", old="def g():\n    return 1", new="pass")
    assert ok(outcome) == "edited code.py: replaced 1 match at line 4"
    assert target.read_text() == lines("def f():", "    return 1", "", "pass")


async def test_edit_file_says_why_it_cannot_edit(call: Call, workspace: Path) -> None:
    target = workspace / "code.py"
    original = lines("x = 1", "y = 2", "x = 1", "x = 1")
    target.write_text(original)
    assert failed(
        await call("edit_file", path="code.py", old="x = 1", new="z"), "AMBIGUOUS_MATCH"
    ) == (
        "Error: old text is not unique in code.py: 3 matches (at lines 1, 3, 4); include more "
        "surrounding text so that it matches exactly once"
    )
    missing = failed(await call("edit_file", path="code.py", old="x=1", new="z"), "NO_MATCH")
    assert "not found in code.py (0 matches)" in missing
    assert failed(await call("edit_file", path="code.py", old="", new="z"), "INVALID_ARGS")
    assert target.read_text() == original
    (workspace / "blob.bin").write_bytes(b"a\0b")
    (workspace / "latin.txt").write_bytes(b"caf\xe9")
    for name in ("blob.bin", "latin.txt"):
        assert "not UTF-8 text" in failed(
            await call("edit_file", path=name, old="a", new="b"), "BINARY_FILE"
        )
    assert failed(await call("edit_file", path="nope.py", old="a", new="b"), "NOT_FOUND")


# -- list_dir, glob, grep --------------------------------------------------------------------


@pytest.mark.parametrize("fs_config", [{"max_entries": 3}])
async def test_list_dir(call: Call, workspace: Path) -> None:
    for name in ("b.txt", "a.txt"):
        (workspace / name).write_text("x")
    (workspace / "sub").mkdir()
    (workspace / "empty").mkdir()
    assert ok(await call("list_dir", path="sub")) == "(sub is empty)"
    assert ok(await call("list_dir", path="empty/..")) == (
        "a.txt\nb.txt\nempty/\n[only the first 3 entries are shown; narrow the path or pattern]"
    )
    (workspace / "empty").rmdir()
    assert ok(await call("list_dir")) == "a.txt\nb.txt\nsub/"
    assert failed(await call("list_dir", path="gone"), "NOT_FOUND")
    assert "use read_file" in failed(await call("list_dir", path="a.txt"), "NOT_A_DIRECTORY")


def tree(root: Path) -> None:
    for path in ("src/pkg/mod.py", "src/pkg/data.txt", "src/top.py", "setup.py", ".git/config"):
        (root / path).parent.mkdir(parents=True, exist_ok=True)
        (root / path).write_text("import os\nvalue = 1\n")


async def test_glob_matches_relative_paths(call: Call, workspace: Path, tmp_path: Path) -> None:
    tree(workspace)
    (tmp_path / "outside").mkdir()
    (tmp_path / "outside" / "leak.py").write_text("")
    os.symlink(tmp_path / "outside", workspace / "linked")
    assert ok(await call("glob", pattern="**/*.py")) == "setup.py\nsrc/pkg/mod.py\nsrc/top.py"
    assert ok(await call("glob", pattern="src/*")) == "src/pkg/\nsrc/top.py"
    assert ok(await call("glob", pattern="src/**")) == (
        "src/pkg/\nsrc/pkg/data.txt\nsrc/pkg/mod.py\nsrc/top.py"
    )
    assert ok(await call("glob", pattern="**/[dm]?[!x]*.*")) == "src/pkg/data.txt\nsrc/pkg/mod.py"
    assert ok(await call("glob", pattern="*.rs")) == "no paths match '*.rs'"
    for pattern in ("../*", "/etc/*", "src/../../*"):
        assert "may not contain '..'" in failed(
            await call("glob", pattern=pattern), "OUTSIDE_WORKSPACE"
        )


@pytest.mark.parametrize("fs_config", [{"max_entries": 2}])
async def test_glob_is_capped(call: Call, workspace: Path) -> None:
    tree(workspace)
    assert ok(await call("glob", pattern="**")) == (
        "setup.py\nsrc/\n[only the first 2 paths are shown; narrow the path or pattern]"
    )


async def test_grep_reports_matching_lines(call: Call, workspace: Path, tmp_path: Path) -> None:
    tree(workspace)
    (workspace / "src" / "blob.bin").write_bytes(b"value\0")
    (tmp_path / "secret.txt").write_text("value = secret\n")
    os.symlink(tmp_path / "secret.txt", workspace / "src" / "secret.txt")
    assert ok(await call("grep", pattern=r"^val\w+")) == (
        "setup.py:2:value = 1\nsrc/pkg/data.txt:2:value = 1\nsrc/pkg/mod.py:2:value = 1\n"
        "src/top.py:2:value = 1"
    )
    assert ok(await call("grep", pattern="import", path="src/top.py")) == "src/top.py:1:import os"
    assert (
        ok(await call("grep", pattern="nothing", path="src")) == "no matches for 'nothing' in src"
    )
    assert "invalid regular expression '('" in failed(
        await call("grep", pattern="("), "INVALID_ARGS"
    )
    assert failed(await call("grep", pattern="x", path="gone"), "NOT_FOUND")


@pytest.mark.parametrize("fs_config", [{"max_matches": 2, "max_grep_file_bytes": 25}])
async def test_grep_is_capped_and_skips_large_files(call: Call, workspace: Path) -> None:
    tree(workspace)
    (workspace / "big.txt").write_text("value\n" * 10)
    assert ok(await call("grep", pattern="value|import")) == (
        "setup.py:1:import os\nsetup.py:2:value = 1\n"
        "[only the first 2 matches are shown; narrow the path or pattern]"
    )


async def test_named_pipes_are_never_opened(call: Call, workspace: Path) -> None:
    # Opening a pipe nobody writes to would block the tool's worker thread for good.
    os.mkfifo(workspace / "pipe")
    (workspace / "a.txt").write_text("x\n")
    assert ok(await call("grep", pattern="x", path="pipe")) == "no matches for 'x' in pipe"
    assert ok(await call("grep", pattern="x")) == "a.txt:1:x"
    for name, args in [
        ("read_file", {}),
        ("edit_file", {"old": "a", "new": "b"}),
        ("write_file", {"content": "x"}),
    ]:
        message = failed(await call(name, path="pipe", **args), "NOT_A_FILE")
        assert message == "Error: pipe is not a regular file (a pipe, socket or device)"


def test_the_plugin_is_registered_as_an_entry_point() -> None:
    from importlib.metadata import entry_points

    (found,) = entry_points(group="dsh", name="tools_fs")
    assert found.load() is FsToolsPlugin
