"""Signal: asyncio.Event's behaviour (set, clear, wait, is_set) without a deque per instance."""

from __future__ import annotations

import asyncio
import contextlib

import pytest

from dsh.loop._inbox import Inbox, InboxMessage, Signal
from dsh.values._content import Text


async def test_set_wakes_every_waiter_and_a_set_signal_does_not_wait() -> None:
    signal = Signal()
    assert not signal.is_set()
    woken: list[int] = []

    async def waiter(n: int) -> None:
        await signal.wait()
        woken.append(n)

    tasks = [asyncio.create_task(waiter(n)) for n in range(3)]
    await asyncio.sleep(0)
    assert woken == []
    signal.set()
    signal.set()  # again: nothing left to wake
    await asyncio.gather(*tasks)
    assert sorted(woken) == [0, 1, 2] and signal.is_set()
    await asyncio.wait_for(signal.wait(), 10)  # set: returns at once
    signal.clear()
    assert not signal.is_set()


async def test_a_cancelled_waiter_leaves_the_others_waiting() -> None:
    signal = Signal()
    first = asyncio.create_task(signal.wait())
    second = asyncio.create_task(signal.wait())
    await asyncio.sleep(0)
    first.cancel()
    with pytest.raises(asyncio.CancelledError):
        await first
    assert not second.done()
    signal.set()
    await asyncio.wait_for(second, 10)


async def test_a_signal_set_and_cleared_before_its_waiters_ran_still_wakes_them() -> None:
    signal = Signal()
    waiter = asyncio.create_task(signal.wait())
    await asyncio.sleep(0)
    signal.set()
    signal.clear()
    await asyncio.wait_for(waiter, 10)  # as asyncio.Event: a set is never missed


async def test_the_inbox_drains_each_fifo_whole_and_in_order() -> None:
    inbox = Inbox()
    messages = [InboxMessage((Text(str(n)),)) for n in range(3)]
    inbox.enqueue(messages[0])
    inbox.enqueue(messages[1])
    inbox.steer(messages[2])
    await asyncio.wait_for(inbox.wait_for_queued(), 10)
    assert inbox.drain_queued() == messages[:2] and not inbox.has_queued
    assert inbox.drain_steering() == messages[2:] and not inbox.has_steering
    assert inbox.drain_queued() == []
    waiting = asyncio.create_task(inbox.wait_for_queued())
    await asyncio.sleep(0)
    inbox.close()
    await asyncio.wait_for(waiting, 10)


def test_a_signal_set_after_its_waiters_loop_closed_does_nothing_but_set_the_flag() -> None:
    # An agent task finalised after its event loop closed sets its inbox's signal on the way
    # out, while the future it waited on still belongs to the closed loop.
    signal = Signal()
    loop = asyncio.new_event_loop()

    async def leave_a_waiter() -> asyncio.Future[None]:
        waiter = asyncio.ensure_future(signal.wait())
        await asyncio.sleep(0)
        return waiter

    waiter = loop.run_until_complete(leave_a_waiter())
    loop.close()
    signal.set()
    assert signal.is_set()
    assert not waiter.done()  # nobody ran it: its loop is gone
    with contextlib.suppress(RuntimeError):
        waiter.cancel()  # let the test's garbage go without a "destroyed pending" warning
