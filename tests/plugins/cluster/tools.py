"""The tools the test hosts offer (imported by name inside the Ray workers)."""

from __future__ import annotations

import asyncio
import os
from typing import Any

import dsh
from dsh import ToolExecution
from dsh.values._content import text_of


@dsh.tool(effect="read", concurrency_safe=True)
async def echo(text: str, *, execution: ToolExecution) -> str:
    """Say the text back.

    Args:
        text: What to say.
    """
    return f"echo: {text}"


@dsh.tool(effect="read")
async def hold(what: str, *, execution: ToolExecution) -> str:
    """Hold on to something for a long while (until the host dies).

    Args:
        what: What to hold.
    """
    await asyncio.sleep(3600)
    return f"held {what}"


@dsh.tool(effect="read", concurrency_safe=True)
async def pause(text: str, *, execution: ToolExecution) -> str:
    """Take two seconds to say the text back (a tool that works a while).

    Args:
        text: What to say.
    """
    await asyncio.sleep(2)
    return f"paused: {text}"


@dsh.tool(effect="execute")
async def stamp(text: str, *, execution: ToolExecution) -> str:
    """Stamp the text (runs a command: it needs approval in the default mode).

    Args:
        text: What to stamp.
    """
    return f"stamped: {text}"


class HostTools:
    @dsh.hookimpl
    def dsh_register_tools(self, register: Any) -> None:
        register(echo)
        register(hold)
        register(pause)
        register(stamp)


#: The message that makes a test host's process exit at once, as a crash would.
CRASH_CUE = "crash the host now"


class CrashOnCue:
    """Ends the host's process when :data:`CRASH_CUE` is sent to it (while it takes it)."""

    @dsh.hookimpl
    def dsh_agent_queued(self, agent: Any, message: Any, steering: bool) -> None:
        if text_of(message.content) == CRASH_CUE:
            os._exit(70)
