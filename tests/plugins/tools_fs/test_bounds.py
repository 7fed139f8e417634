"""What one call of ``grep`` or ``read_file`` may cost: a pattern that backtracks for minutes
runs in a worker process that the tool's timeout kills, without freezing the event loop; a file
that is one huge line is read in bounded memory."""

from __future__ import annotations

import asyncio
import io
import itertools
import json
import os
import subprocess
import sys
import textwrap
import time
from pathlib import Path
from typing import Any

import pytest
from hypothesis import given
from hypothesis import strategies as st

from dsh import AgentOptions, Harness, ToolExecution
from dsh_plugins.tools_fs import FsToolsPlugin, files, search
from dsh_plugins.tools_fs.search import cut
from tests.plugins.tools_fs.support import failed, ok

#: ``(a+)+$`` against ``a…ab`` tries every way of splitting the a's: 2**40 steps.
CATASTROPHIC = "(a+)+$"
#: The grep call's timeout: a loop the search blocked would not tick for at least this long (in
#: fact for minutes), which no load on the machine comes near.
TIMEOUT_S = 1.0


def worker_processes() -> list[int]:
    """The pids of this process's children that run the grep worker (Linux ``/proc``)."""
    found = []
    for entry in Path("/proc").iterdir():
        try:
            status = (entry / "status").read_text()
            command = (entry / "cmdline").read_bytes()
        except OSError:  # not a process, or it ended meanwhile
            continue
        if f"PPid:\t{os.getpid()}\n" in status and search.__file__.encode() in command:
            found.append(int(entry.name))
    return found


async def test_a_catastrophic_pattern_times_out_and_the_loop_keeps_running(
    tmp_path: Path,
) -> None:
    (tmp_path / "trap.txt").write_text("a" * 40 + "b\n")
    config = {"tools": {"default_timeout_s": TIMEOUT_S}}
    async with Harness(load_entrypoints=False, plugins=[FsToolsPlugin], config=config) as h:
        agent = h.agent_loop.create("fs", AgentOptions(workspace=str(tmp_path)))
        ticks: list[float] = []

        async def tick() -> None:
            while True:
                ticks.append(time.monotonic())
                await asyncio.sleep(0.01)

        ticker = asyncio.ensure_future(tick())
        args = json.dumps({"pattern": CATASTROPHIC})
        started = time.monotonic()
        outcome = await h.tools.execute(ToolExecution("c", "grep", args, agent))
        elapsed = time.monotonic() - started
        ticker.cancel()
    assert "timed out after 1.0 s" in failed(outcome, "TOOL_TIMEOUT")
    assert TIMEOUT_S <= elapsed < TIMEOUT_S + 10, elapsed  # not the minutes of the search
    gaps = [b - a for a, b in itertools.pairwise(ticks)]
    assert len(ticks) > 5 and max(gaps) < TIMEOUT_S, max(gaps)  # the loop was never blocked
    assert worker_processes() == []  # the search was killed, not left running


async def test_a_worker_that_fails_is_a_tool_error(tmp_path: Path) -> None:
    (tmp_path / "a.txt").write_text("a\n")
    async with Harness(load_entrypoints=False, plugins=[FsToolsPlugin]) as h:
        agent = h.agent_loop.create("fs", AgentOptions(workspace=str(tmp_path)))
        nested = "(" * 5000 + "a" + ")" * 5000  # valid, but too deep for the compiler
        args = json.dumps({"pattern": nested})
        outcome = await h.tools.execute(ToolExecution("c", "grep", args, agent))
    message = failed(outcome, "TOOL_ERROR")
    assert message.startswith("Error: the search failed (worker exit status 1: RecursionError")


def request(root: Path, pattern: str, **caps: Any) -> dict[str, Any]:
    return {
        "pattern": pattern,
        "root": str(root),
        "target": str(root),
        "max_matches": 10,
        "max_line_chars": 20,
        "max_file_bytes": 1000,
        "ignore": [".git"],
        **caps,
    }


def test_the_worker_answers_one_request_in_json(tmp_path: Path) -> None:
    (tmp_path / "a.txt").write_text("one\ntwo\nthree\n")
    (tmp_path / ".git").mkdir()
    (tmp_path / ".git" / "x.txt").write_text("one\n")
    out = io.StringIO()
    search.main(io.StringIO(json.dumps(request(tmp_path, "o"))), out)
    assert json.loads(out.getvalue()) == {"matches": ["a.txt:1:one", "a.txt:2:two"]}
    capped = search.search(request(tmp_path, "e", max_matches=1))
    assert capped == {"matches": ["a.txt:1:one", "a.txt:3:three"]}  # one more: "there are more"
    assert "invalid regular expression" in search.search(request(tmp_path, "("))["error"]


def test_the_worker_imports_nothing_from_dsh(tmp_path: Path) -> None:
    (tmp_path / "a.txt").write_text("x\n")
    code = files._BOOT + "; print(sorted(m for m in sys.modules if m.startswith('dsh')))"
    done = subprocess.run(
        [sys.executable, "-I", "-c", code, search.__file__],
        input=json.dumps(request(tmp_path, "x")),
        capture_output=True,
        text=True,
        check=True,
    )
    assert done.stdout == '{"matches": ["a.txt:1:x"]}[]\n'


# -- read_file -------------------------------------------------------------------------------


PEAK = """
import sys, tracemalloc
from pathlib import Path
from dsh_plugins.tools_fs.config import FsConfig
from dsh_plugins.tools_fs.files import read_text

path = Path(sys.argv[1])
tracemalloc.start()
text = read_text(path, "big.txt", 1, None, FsConfig())
print(tracemalloc.get_traced_memory()[1])
print(text)
"""


def test_a_huge_single_line_file_is_read_in_bounded_memory(tmp_path: Path) -> None:
    size = 50 * 1024 * 1024
    path = tmp_path / "big.txt"
    with path.open("wb") as file:
        for _ in range(size // (1 << 20)):
            file.write(b"a" * (1 << 20))
        file.write(b"\nsecond line\n")
    done = subprocess.run(
        [sys.executable, "-c", textwrap.dedent(PEAK), str(path)],
        capture_output=True,
        text=True,
        check=True,
    )
    peak, text = done.stdout.split("\n", 1)
    assert int(peak) < 2 * 1024 * 1024, f"read_file held {int(peak) / 2**20:.1f} MiB"
    assert text == (
        f"     1\t{'a' * 2000} [... {size - 2000} more characters]\n     2\tsecond line\n"
    )


@pytest.mark.parametrize("fs_config", [{"max_line_chars": 3}])
async def test_long_lines_are_measured_to_their_end(call: Any, workspace: Path) -> None:
    # 4 * 3 + 4 = 16 bytes of a line are held; the rest is only counted.
    lines = ["é" * 20, "x" * 15 + "\r", "y" * 16, "z" * 40 + "\r\r", "short"]
    (workspace / "f.txt").write_bytes("\n".join(lines).encode() + b"\r\n")
    assert ok(await call("read_file", path="f.txt")) == (
        "     1\tééé [... 17 more characters]\n"
        "     2\txxx [... 12 more characters]\n"
        "     3\tyyy [... 13 more characters]\n"
        "     4\tzzz [... 37 more characters]\n"
        "     5\tsho [... 2 more characters]"
    )
    assert ok(await call("read_file", path="f.txt", offset=5)) == (
        "     5\tsho [... 2 more characters]"
    )


def reference(data: bytes, max_chars: int) -> list[str]:
    """What read_file shows of each line, computed the simple way (whole lines in memory)."""
    return [
        cut(raw.decode("utf-8", "replace").rstrip("\r\n"), max_chars) for raw in io.BytesIO(data)
    ]


@given(
    st.lists(st.text(alphabet="ab\r\né€😀") | st.binary(max_size=40), max_size=6).map(
        lambda parts: b"".join(p.encode() if isinstance(p, str) else p for p in parts)
    ),
    st.integers(min_value=1, max_value=6),
    st.sampled_from([4, 64]),
)
def test_bounded_lines_show_what_whole_lines_would(data: bytes, max_chars: int, chunk: int) -> None:
    saved, files._SKIP_CHUNK = files._SKIP_CHUNK, chunk  # small chunks: many boundaries
    try:
        shown = [
            cut(head, max_chars, excess)
            for head, excess in files._bounded_lines(io.BytesIO(data), max_chars)
        ]
    finally:
        files._SKIP_CHUNK = saved
    assert shown == reference(data, max_chars)


def test_the_worker_skips_what_it_cannot_search(tmp_path: Path) -> None:
    (tmp_path / "big.txt").write_text("match\n" * 200)  # over max_file_bytes
    (tmp_path / "blob.bin").write_bytes(b"match\0")
    os.mkfifo(tmp_path / "pipe")  # opening it would block the search for good
    (tmp_path / "ok.txt").write_text("match\n")
    assert search.search(request(tmp_path, "match")) == {"matches": ["ok.txt:1:match"]}
    for gone in ("pipe", "vanished"):  # a directory removed since the tool looked is empty
        target = {"target": str(tmp_path / gone)}
        assert search.search({**request(tmp_path, "match"), **target}) == {"matches": []}
