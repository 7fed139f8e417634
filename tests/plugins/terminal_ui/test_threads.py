"""The terminal thread's pump and the loop thread."""

from __future__ import annotations

import asyncio
import concurrent.futures
import os
from collections.abc import Iterator

import pytest

from dsh_plugins.terminal_ui.threads import (
    Approval,
    Done,
    Eof,
    Idle,
    Interrupt,
    Line,
    LoopThread,
    Pump,
)


@pytest.fixture
def pipe() -> Iterator[tuple[Pump, int]]:
    read, write = os.pipe()
    pump = Pump(read)
    yield pump, write
    pump.close()
    os.close(read)
    with pytest.raises(OSError, match="Bad file descriptor"):
        os.close(write)  # the tests close the writing end themselves


def test_posted_messages_come_first_in_order(pipe: tuple[Pump, int]) -> None:
    pump, write = pipe
    os.write(write, b"typed\n")
    pump.post(Idle())
    pump.post(Interrupt())
    assert pump.next(stdin=True) == Idle()
    pump.push_back([Eof(), Idle()])
    assert [pump.next(stdin=False) for _ in range(3)] == [Eof(), Idle(), Interrupt()]
    assert pump.next(stdin=True) == Line("typed")
    os.close(write)


def test_lines_are_assembled_from_pieces_until_the_end(pipe: tuple[Pump, int]) -> None:
    pump, write = pipe
    os.write(write, b"hel")
    pump.post(Idle())  # wakes the wait while the line is still partial
    assert pump.next(stdin=True) == Idle()
    os.write(write, "lo wörld\r\nsecond\nlast".encode())
    os.close(write)
    assert pump.next(stdin=True) == Line("hello wörld")
    assert pump.next(stdin=True) == Line("second")
    assert pump.next(stdin=True) == Line("last")
    assert pump.next(stdin=True) == Eof()
    assert pump.eof and pump.next(stdin=True) == Eof()


def test_without_stdin_only_posts_wake_it(pipe: tuple[Pump, int]) -> None:
    pump, write = pipe
    os.write(write, b"waits\n")
    future: concurrent.futures.Future[bool] = concurrent.futures.Future()
    approval = Approval("allow?", future)
    pump.post(approval)
    assert pump.next(stdin=False) is approval
    os.close(write)


def test_a_full_wake_pipe_loses_no_message(pipe: tuple[Pump, int]) -> None:
    pump, write = pipe
    for _ in range(70_000):  # more than a pipe holds
        pump.post(Idle())
    assert sum(isinstance(pump.next(stdin=False), Idle) for _ in range(70_000)) == 70_000
    os.close(write)


def test_the_loop_thread_runs_coroutines_and_cancels_leftovers() -> None:
    thread = LoopThread()
    thread.start()

    async def answer() -> int:
        return 42

    assert thread.submit(answer()).result(timeout=5) == 42
    forever = thread.submit(asyncio.Event().wait())
    thread.stop()
    assert forever.cancelled() and thread.loop.is_closed()
    done = Done(forever)
    assert done.future is forever
