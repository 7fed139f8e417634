"""The kill test: a real dsh process is SIGKILLed mid-stream, mid-tool and between turns; a new
process resumes the session from the JSONL store and nothing that was checkpointed is lost.

The child (this file run as a script) runs an agent on the DeepSeek adapter against the mock
server of the test process, with the default JSONL store on the test's ``XDG_DATA_HOME``. It
prints a line for every session event and reads one message per stdin line; the test moves on
only when it has read the line it waits for, so there are no sleeps.
"""

from __future__ import annotations

import asyncio
import os
import signal
import sys
from collections.abc import Sequence
from pathlib import Path
from typing import IO, Any

import pytest

from dsh.session._codec import EventCodec
from dsh.testing.mockserver import MockServer
from dsh.values._events import (
    SessionEvent,
    ToolCallEvent,
    ToolResultEvent,
    TurnCompleted,
    TurnEnd,
    TurnInterrupted,
)
from dsh_plugins.persistence_jsonl import default_dir, file_name, read_session

SESSION = "crash-session"
MODEL = "deepseek-v4-flash"
TIMEOUT_S = 30


class Child:
    """A dsh process and the lines it printed."""

    def __init__(self, process: asyncio.subprocess.Process) -> None:
        self.process = process
        self.lines: list[str] = []

    @classmethod
    async def start(cls, tmp_path: Path, *args: str) -> Child:
        log = _log_file(tmp_path)  # the child's stderr, for when a test fails
        process = await asyncio.create_subprocess_exec(
            sys.executable,
            *args,
            stdin=asyncio.subprocess.PIPE,
            stdout=asyncio.subprocess.PIPE,
            stderr=log,
            # The mock model calls the first tool offered: offer only the test's own.
            env={
                **os.environ,
                "DSH_DISABLE_PLUGINS": _disabled("tools_fs,tools_shell,permissions,subagents"),
            },
        )
        log.close()
        return cls(process)

    @classmethod
    async def agent(cls, tmp_path: Path, server: MockServer, *options: str) -> Child:
        return await cls.start(tmp_path, __file__, server.url, *options)

    async def expect(self, wanted: str) -> list[str]:
        """Read lines until one starts with ``wanted``; the lines read."""
        assert self.process.stdout is not None
        read: list[str] = []
        while not (read and read[-1].startswith(wanted)):
            raw = await asyncio.wait_for(self.process.stdout.readline(), TIMEOUT_S)
            assert raw, f"the child exited before printing {wanted!r}; it printed {read}"
            read.append(raw.decode().rstrip("\n"))
        self.lines += read
        return read

    async def send(self, message: str) -> None:
        assert self.process.stdin is not None
        self.process.stdin.write(f"{message}\n".encode())
        await self.process.stdin.drain()

    async def kill(self) -> None:
        self.process.send_signal(signal.SIGKILL)
        assert await self.process.wait() == -signal.SIGKILL

    async def finish(self) -> None:
        """Close its stdin and wait for a clean exit."""
        assert self.process.stdin is not None
        self.process.stdin.close()
        assert await asyncio.wait_for(self.process.wait(), TIMEOUT_S) == 0

    def events(self) -> list[tuple[int, str]]:
        """``(seq, type)`` of every event the child appended."""
        found = (line.split() for line in self.lines if line.startswith("event "))
        return [(int(seq), type_) for _, seq, type_ in found]


def _disabled(names: str) -> str:
    """``names`` added to what ``DSH_DISABLE_PLUGINS`` already turns off (the test session
    turns off third-party plugins installed beside dsh; this file also runs as the child
    script, which cannot import ``tests.helpers``)."""
    return ",".join(filter(None, [os.environ.get("DSH_DISABLE_PLUGINS", ""), names]))


def _log_file(tmp_path: Path) -> IO[str]:
    return (tmp_path / f"child-{len(list(tmp_path.glob('child-*')))}.log").open("w")


def stored() -> list[SessionEvent]:
    return read_session(default_dir() / file_name(SESSION), EventCodec())


def check_nothing_checkpointed_is_lost(
    child: Child, events: Sequence[SessionEvent], last_checkpointed: str
) -> None:
    """The store holds a prefix of what the child appended, up to at least the last event of
    type ``last_checkpointed`` it appended."""
    appended = child.events()
    assert [(e.seq, e.type) for e in events] == appended[: len(events)]
    must_have = max(seq for seq, type_ in appended if type_ == last_checkpointed)
    assert len(events) > must_have


def tail_after_seed(events: Sequence[SessionEvent], stored_count: int) -> list[SessionEvent]:
    assert events[stored_count].type == "session/end-seed"
    return list(events[stored_count + 1 :])


def user_texts(server: MockServer) -> list[str]:
    """The user messages of the last request the model got."""
    messages = server.requests[-1].body["messages"]
    return [str(m["content"]) for m in messages if m["role"] == "user"]


@pytest.fixture
async def server() -> Any:
    async with MockServer() as mock:
        yield mock


async def test_killed_mid_stream(tmp_path: Path, server: MockServer) -> None:
    child = await Child.agent(tmp_path, server, "new")
    await child.send("one")
    await child.expect("idle")
    server.queue("stall")  # part of an answer, then silence: the stream hangs open
    await child.send("two")
    while not (await child.expect("event"))[-1].endswith("assistant/chunk"):
        pass  # the request was checkpointed; the first chunk of the answer is in
    await child.kill()
    before = stored()
    check_nothing_checkpointed_is_lost(child, before, "step/start")

    child = await Child.agent(tmp_path, server, "resume")
    await child.expect("resumed")
    await child.send("three")
    await child.expect("idle")
    await child.finish()
    closing = tail_after_seed(stored(), len(before))
    assert closing[0].type == "step/end"
    assert isinstance(closing[1].data, TurnEnd) and closing[1].data.reason == TurnInterrupted()
    assert isinstance(closing[-1].data, TurnEnd) and closing[-1].data.reason.type == "completed"
    assert user_texts(server) == ["one", "two", "three"]


async def test_killed_mid_tool(tmp_path: Path, server: MockServer) -> None:
    child = await Child.agent(tmp_path, server, "new", "--blocking-tool")
    await child.send("one")
    await child.expect("tool-started")
    await child.kill()
    before = stored()
    check_nothing_checkpointed_is_lost(child, before, "tool/call")
    assert before[-1].type == "tool/call"  # the call was logged durably before it ran

    child = await Child.agent(tmp_path, server, "resume")
    await child.expect("resumed")
    await child.send("two")
    await child.expect("idle")
    await child.finish()
    closing = tail_after_seed(stored(), len(before))
    result, call = closing[0].data, before[-1].data
    assert isinstance(result, ToolResultEvent) and isinstance(call, ToolCallEvent)
    assert result.code == "TOOL_OUTCOME_UNKNOWN"
    assert result.call_id == call.call_id
    assert [e.type for e in closing[1:3]] == ["step/end", "turn/end"]
    assert isinstance(closing[2].data, TurnEnd) and closing[2].data.reason == TurnInterrupted()
    assert isinstance(closing[-1].data, TurnEnd) and closing[-1].data.reason == TurnCompleted()
    messages = server.requests[-1].body["messages"]
    assert [m["role"] for m in messages] == ["user", "assistant", "tool", "user"]
    assert "TOOL_OUTCOME_UNKNOWN" not in messages[2]["content"]  # the model sees the text
    assert "unknown" in messages[2]["content"]


async def test_killed_between_turns_then_resumed_by_the_dsh_cli(
    tmp_path: Path, server: MockServer
) -> None:
    child = await Child.agent(tmp_path, server, "new")
    await child.send("one")
    await child.expect("idle")
    await child.kill()
    before = stored()
    assert [(e.seq, e.type) for e in before] == child.events()  # the turn end was flushed

    config = tmp_path / "dsh.toml"
    config.write_text(f'[llm_deepseek]\nbase_url = "{server.url}"\napi_key = "k"\n')
    cli = await Child.start(
        tmp_path,
        "-m",
        "dsh",
        "--config",
        str(config),
        "sessions",
        "resume",
        SESSION,
        "--model",
        MODEL,
        "--prompt",
        "two",
    )
    assert await asyncio.wait_for(cli.process.wait(), TIMEOUT_S) == 0
    after = tail_after_seed(stored(), len(before))
    assert isinstance(after[-1].data, TurnEnd) and after[-1].data.reason.type == "completed"
    assert user_texts(server) == ["one", "two"]
    assert server.requests[-1].body["messages"][1]["role"] == "assistant"


# -- the child -------------------------------------------------------------------------------


class Host:
    """The child's own plugin: prints every event; optionally offers a tool that blocks."""

    def __init__(self, blocking_tool: bool) -> None:
        self.blocking_tool = blocking_tool

    def dsh_session_event(self, event: SessionEvent) -> None:
        print(f"event {event.seq} {event.type}", flush=True)

    def dsh_register_tools(self, register: Any) -> None:
        from dsh import Tool
        from dsh.values._request import ToolSchema

        async def block(args: Any, execution: Any) -> str:
            print("tool-started", flush=True)
            await asyncio.Event().wait()
            raise AssertionError("unreachable")

        if self.blocking_tool:
            register(Tool(ToolSchema("block", "Wait.", {"type": "object"}), block))


async def child_main(url: str, action: str, *flags: str) -> None:
    from dsh import AgentOptions, Harness

    config = {"llm_deepseek": {"base_url": url, "api_key": "k"}}
    host = Host("--blocking-tool" in flags)
    async with Harness(plugins=[host], config=config) as harness:
        options = AgentOptions(model=MODEL)
        if action == "resume":
            agent = await harness.agent_loop.resume(SESSION, options)
            print("resumed", flush=True)
        else:
            agent = harness.agent_loop.create("crash", options, session_id=SESSION)
        while message := (await asyncio.to_thread(sys.stdin.readline)).strip():
            agent.send(message)
            await agent.wait_idle()
            print("idle", flush=True)


if __name__ == "__main__":
    asyncio.run(child_main(*sys.argv[1:]))
