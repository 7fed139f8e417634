"""Running one command in its own process group, and making sure the whole group dies.

The command is started with ``start_new_session=True``, so it and everything it spawns share a
process group whose id is the command's pid. On a timeout or a cancellation (the agent aborted)
the group gets SIGTERM, then SIGKILL once ``grace_s`` has passed or as soon as the cancellation
is repeated: a command that ignores SIGTERM, or leaves children behind, still dies. A process
that deliberately leaves the group (``setsid``) is out of reach; if it keeps the output open,
the command's output simply ends at its timeout.

The output goes through a pipe this module owns (not asyncio's subprocess pipes), so that
waiting for the command never waits for whoever else holds the pipe, and the pipe is closed
when the call ends, whatever is still running.
"""

from __future__ import annotations

import asyncio
import contextlib
import os
import signal
from collections.abc import AsyncIterator, Mapping, Sequence
from pathlib import Path

from attrs import frozen

from dsh.plugin import HeadTail, Value

__all__ = ["Completed", "run_command", "terminate_group"]

CHUNK = 65536
#: How often to look whether a terminated group is gone.
POLL_S = 0.01


@frozen(repr=False, eq=False)
class Completed(Value):
    """How a command ended: its exit status (negative: killed by that signal), and whether it
    ran out of time (then its group was killed)."""

    returncode: int
    timed_out: bool = False


async def run_command(
    argv: Sequence[str],
    *,
    cwd: Path,
    env: Mapping[str, str],
    timeout_s: float,
    grace_s: float,
    output: HeadTail,
) -> Completed:
    """Run ``argv`` with stdin closed and stdout and stderr together into ``output``."""
    async with _output_pipe() as (reader, write_fd):
        try:
            process = await _spawn(argv, cwd, env, write_fd, grace_s)
        finally:
            os.close(write_fd)  # the command has its own copy; ours would hide the end of output
        try:
            async with asyncio.timeout(timeout_s):
                await _pump(reader, output)
                return Completed(await process.wait())
        except TimeoutError:
            await terminate_group(process, grace_s)
            # What the command printed while it was being stopped is worth showing too.
            with contextlib.suppress(TimeoutError):
                async with asyncio.timeout(grace_s):
                    await _pump(reader, output)
            return Completed(process.returncode or 0, timed_out=True)
        except BaseException:  # cancelled: the call is abandoned, its processes must not outlive it
            await terminate_group(process, grace_s)
            raise


@contextlib.asynccontextmanager
async def _output_pipe() -> AsyncIterator[tuple[asyncio.StreamReader, int]]:
    """A pipe for the command's output: its read end as a stream, its write end as a file
    descriptor for the command (the caller closes it). The read end closes on exit."""
    read_fd, write_fd = os.pipe()
    reader = asyncio.StreamReader()
    loop = asyncio.get_running_loop()
    transport, _ = await loop.connect_read_pipe(
        lambda: asyncio.StreamReaderProtocol(reader), os.fdopen(read_fd, "rb", buffering=0)
    )
    try:
        yield reader, write_fd
    finally:
        transport.close()


async def _spawn(
    argv: Sequence[str], cwd: Path, env: Mapping[str, str], output_fd: int, grace_s: float
) -> asyncio.subprocess.Process:
    """Start the command in a new session (so a new process group).

    The process runs before ``create_subprocess_exec`` returns; cancelled meanwhile, asyncio
    would kill only the group leader. So the start is shielded, and a cancellation that
    arrives during it stops the whole group once the start is complete.
    """
    starting = asyncio.ensure_future(
        asyncio.create_subprocess_exec(
            *argv,
            cwd=cwd,
            env=dict(env),
            stdin=asyncio.subprocess.DEVNULL,
            stdout=output_fd,
            stderr=output_fd,
            start_new_session=True,
        )
    )
    try:
        return await asyncio.shield(starting)
    except asyncio.CancelledError:
        await terminate_group(await starting, grace_s)
        raise


async def _pump(stream: asyncio.StreamReader, output: HeadTail) -> None:
    while chunk := await stream.read(CHUNK):
        output.feed(chunk)


async def terminate_group(process: asyncio.subprocess.Process, grace_s: float) -> None:
    """SIGTERM the process group; SIGKILL whatever is left of it once ``grace_s`` has passed
    (or at once if this is cancelled meanwhile); reap the leader."""
    group = process.pid
    _signal_group(group, signal.SIGTERM)
    try:
        with contextlib.suppress(TimeoutError):
            async with asyncio.timeout(grace_s):
                # Nothing signals that a process group emptied: look, briefly and often.
                while _group_alive(group):  # noqa: ASYNC110
                    await asyncio.sleep(POLL_S)
    finally:
        _signal_group(group, signal.SIGKILL)
    await process.wait()


def _signal_group(group: int, signum: int) -> None:
    with contextlib.suppress(ProcessLookupError, PermissionError):
        os.killpg(group, signum)


def _group_alive(group: int) -> bool:
    try:
        os.killpg(group, 0)
    except (ProcessLookupError, PermissionError):  # gone, or (macOS) only zombies are left
        return False
    return True
