"""Helpers for the shell tool tests: outcome text, process liveness, polling without sleeping
longer than needed."""

from __future__ import annotations

import asyncio
import os
from collections.abc import Awaitable, Callable
from pathlib import Path

from dsh import ToolOutcome
from dsh.values._content import Text

#: ``await call("shell", command="ls")``: run a tool as the test agent.
Call = Callable[..., Awaitable[ToolOutcome]]


def text(outcome: ToolOutcome) -> str:
    [block] = outcome.content
    assert isinstance(block, Text)
    return block.text


def alive(pid: int) -> bool:
    """Whether ``pid`` is a live process (a zombie waiting to be reaped is dead)."""
    stat = Path(f"/proc/{pid}/stat")
    try:
        return stat.read_text().rsplit(")", 1)[1].split()[0] != "Z"
    except FileNotFoundError:
        return False
    except OSError:  # no /proc here: ask the kernel
        try:
            os.kill(pid, 0)
        except ProcessLookupError:
            return False
        return True


def running_with(marker: str) -> list[int]:
    """Live processes whose command line contains ``marker``."""
    found = []
    for cmdline in Path("/proc").glob("[0-9]*/cmdline"):
        try:
            if marker.encode() in cmdline.read_bytes() and alive(int(cmdline.parent.name)):
                found.append(int(cmdline.parent.name))
        except OSError:  # the process ended while we looked
            continue
    return found


async def eventually(check: Callable[[], bool], timeout_s: float = 10.0) -> None:
    """Wait until ``check()`` holds, looking every 10 ms (the timeout only bounds a hang: on a
    loaded machine the OS may take its time to start, kill and reap processes)."""
    async with asyncio.timeout(timeout_s):
        while not check():  # noqa: ASYNC110 - polling the OS, which has no event to wait on
            await asyncio.sleep(0.01)


async def pids(*files: Path) -> list[int]:
    """The pids the command wrote into ``files``, once it has written them all."""
    await eventually(lambda: all(f.exists() and f.read_text().strip() for f in files))
    return [int(f.read_text()) for f in files]
