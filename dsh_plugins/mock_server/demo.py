"""``dsh demo``: a real agent on the DeepSeek adapter, against the mock server on loopback.

Streams the model's reasoning (dimmed on a terminal) and text as they arrive, shows the tool call
and its result, then the token usage (the usage line of ``dsh chat``), where the session is
stored and how to continue it. No API key, no network.
"""

from __future__ import annotations

import argparse
import os
import sys
from typing import Any, TextIO

from dsh.plugin import (
    AgentOptions,
    BlockStart,
    DshError,
    Finish,
    Harness,
    ReasoningDelta,
    SessionEvent,
    StreamChunk,
    TextDelta,
    Tool,
    ToolCallEvent,
    ToolExecution,
    ToolResultEvent,
    ToolSchema,
    TurnCompleted,
    TurnEnd,
    UsageMeter,
    price_book,
    text_of,
)
from dsh.testing.mockserver.server import MockServer
from dsh_plugins.mock_server.options import DEMO_PROMPT
from dsh_plugins.mock_server.options import demo as configure

__all__ = ["DEMO_MODEL", "DEMO_PROMPT", "DemoHost", "configure", "run"]

DEMO_MODEL = "deepseek-flash"


async def _word_count(args: Any, execution: ToolExecution) -> str:
    return str(len(str(args.get("text", "")).split()))


WORD_COUNT = Tool(
    ToolSchema(
        "word_count",
        "Count the words in a text.",
        {
            "type": "object",
            "properties": {"text": {"type": "string", "description": "the text to count"}},
            "required": ["text"],
        },
    ),
    _word_count,
    # It only computes: the permission policy lets it run without asking.
    effect="read",
)


class DemoHost:
    """The demo's own plugin, registered only in the demo's harness: the word-count tool and a
    console that prints what the agent does as it happens."""

    def __init__(self, out: TextIO, color: bool) -> None:
        self.out = out
        self.meter: UsageMeter | None = None
        self._dim, self._plain = ("\x1b[2m", "\x1b[0m") if color else ("", "")
        self._line_open = False

    def dsh_register_tools(self, register: Any) -> None:
        register(WORD_COUNT)

    def dsh_agent_stream_chunk(self, chunk: StreamChunk) -> None:
        # DeepSeek ends blocks only at [DONE], so a line ends when the next block starts.
        if isinstance(chunk, BlockStart | Finish):
            self._end_line()
        if isinstance(chunk, BlockStart) and chunk.block_type == "reasoning":
            self._write(f"{self._dim}thinking: ")
            self._line_open = True
        elif isinstance(chunk, BlockStart) and chunk.block_type == "text":
            self._write("assistant: ")
            self._line_open = True
        elif isinstance(chunk, ReasoningDelta | TextDelta):
            self._write(chunk.text)

    def dsh_session_event(self, event: SessionEvent) -> None:
        data = event.data
        if isinstance(data, ToolCallEvent):
            self._write(f"→ {data.name}({data.arguments})\n")
        elif isinstance(data, ToolResultEvent):
            self._write(f"← {text_of(data.content)}\n")
        if self.meter is not None:
            self.meter.observe(event)

    def usage_line(self) -> str:
        """The usage line ``dsh chat`` and ``dsh run --usage`` print."""
        line = self.meter.line() if self.meter is not None else None
        return f"── {line or 'no usage reported'}"

    def _end_line(self) -> None:
        if self._line_open:
            self._write(f"{self._plain}\n")
            self._line_open = False

    def _write(self, text: str) -> None:
        self.out.write(text)
        self.out.flush()


async def run(args: argparse.Namespace, out: TextIO = sys.stdout) -> int:
    """Run one turn; exit 0 when it completes."""
    host = DemoHost(out, color=out.isatty() and "NO_COLOR" not in os.environ)
    async with MockServer() as server:
        print(f"dsh demo: a {DEMO_MODEL} agent against the mock server at {server.url}", file=out)
        print("(no API key, no network)\n", file=out)
        print(f"you: {args.prompt}", file=out)
        config = {"llm_deepseek": {"base_url": server.url, "api_key": "demo-key"}}
        try:
            async with Harness(plugins=[host], config=config) as harness:
                host.meter = UsageMeter(price_book(harness))
                agent = harness.agent_loop.create("demo", AgentOptions(DEMO_MODEL, thinking=True))
                agent.send(args.prompt)
                await agent.wait_idle()
                end = next(
                    e.data for e in reversed(agent.session.events) if isinstance(e.data, TurnEnd)
                )
        except DshError as exc:
            print(f"\ndsh demo failed: {exc}", file=out)
            return 1
    assert isinstance(end, TurnEnd)
    if not isinstance(end.reason, TurnCompleted):
        print(f"\ndsh demo failed: the turn ended {end.reason}", file=out)
        return 1
    print(f"\n{host.usage_line()}", file=out)
    print(stored_hint(harness, agent.session.id), file=out)
    return 0


def stored_hint(harness: Harness, session_id: str) -> str:
    """Where the demo's session is stored and how to continue it."""
    # A store that keeps one file per session says which (``session_file``); the demo asks
    # each plugin rather than importing a store plugin.
    files = []
    for name in harness.plugins.names():
        locate: Any = getattr(harness.plugins.get(name), "session_file", None)
        found = None if locate is None else locate(session_id)
        if found is not None:
            files.append(found)
    if not harness.sessions.persistent:
        return f"session {session_id} was not stored: no persistence plugin is enabled"
    where = f"stored in {files[0]}" if files else "stored (dsh sessions list)"
    return (
        f"session {session_id} {where}\n"
        f"continue it: dsh chat --resume {session_id} "
        "(against the real API: set DEEPSEEK_API_KEY first)"
    )
