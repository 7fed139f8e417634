"""Real processes: one writer per session, a SIGKILLed writer's session resumes, and a crash
during compaction's summary call loses nothing.

The children are this file run as a script. A holder resumes a stored session, checkpoints and
waits on stdin; a second one must be refused at once, naming the first; once the first is
SIGKILLed its lock (JSONL: the OS releases the file lock) or lease (SQLite: the holder's process
is gone) is free again.
"""

from __future__ import annotations

import asyncio
import signal
import sys
from pathlib import Path
from typing import IO, Any

import pytest

from dsh import Harness
from dsh.session._codec import EventCodec
from dsh.values._content import Text
from dsh.values._events import SessionEvent, UserMessage
from dsh_plugins.persistence_jsonl import JsonlStore, file_name, read_session
from dsh_plugins.persistence_sqlite import SqliteStore

SESSION = "shared"
TIMEOUT_S = 30
BUSY_EXIT = 3


def make_store(kind: str, location: str) -> Any:
    return JsonlStore(location) if kind == "jsonl" else SqliteStore(location)


def location_of(kind: str, tmp_path: Path) -> str:
    return str(tmp_path / ("sessions" if kind == "jsonl" else "sessions.db"))


async def load(kind: str, location: str) -> list[SessionEvent] | None:
    async with Harness(load_entrypoints=False, plugins=[make_store(kind, location)]) as h:
        return await h.sessions.load(SESSION)


def _log_file(tmp_path: Path) -> IO[str]:
    return (tmp_path / f"child-{len(list(tmp_path.glob('child-*')))}.log").open("w")


class Child:
    def __init__(self, process: asyncio.subprocess.Process) -> None:
        self.process = process

    @classmethod
    async def start(cls, tmp_path: Path, *args: str) -> Child:
        log = _log_file(tmp_path)  # the child's stderr
        process = await asyncio.create_subprocess_exec(
            sys.executable,
            *args,
            stdin=asyncio.subprocess.PIPE,
            stdout=asyncio.subprocess.PIPE,
            stderr=log,
        )
        log.close()
        return cls(process)

    async def line(self) -> str:
        assert self.process.stdout is not None
        raw = await asyncio.wait_for(self.process.stdout.readline(), TIMEOUT_S)
        return raw.decode().rstrip("\n")

    async def exit_code(self) -> int:
        return await asyncio.wait_for(self.process.wait(), TIMEOUT_S)

    async def kill(self) -> None:
        self.process.send_signal(signal.SIGKILL)
        assert await self.process.wait() == -signal.SIGKILL

    async def finish(self) -> None:
        assert self.process.stdin is not None
        self.process.stdin.close()
        assert await self.exit_code() == 0


@pytest.mark.parametrize("kind", ["jsonl", "sqlite"])
async def test_a_second_process_is_refused_until_the_first_dies(tmp_path: Path, kind: str) -> None:
    location = location_of(kind, tmp_path)
    async with Harness(load_entrypoints=False, plugins=[make_store(kind, location)]) as h:
        h.sessions.create(SESSION).append(UserMessage((Text("hello"),)))
    original = await load(kind, location)
    assert original is not None

    holder = await Child.start(tmp_path, __file__, "hold", kind, location)
    assert await holder.line() == "holding"
    second = await Child.start(tmp_path, __file__, "hold", kind, location)
    refusal = await second.line()
    assert await second.exit_code() == BUSY_EXIT
    assert refusal.startswith(f"busy: session '{SESSION}' is open for writing by process ")
    assert f"process {holder.process.pid} on host" in refusal

    cli = await Child.start(tmp_path, "-m", "dsh", "--config", config(tmp_path, kind, location),
                            "sessions", "resume", SESSION)  # fmt: skip
    assert await cli.exit_code() == 1
    assert f"process {holder.process.pid} on host" in (tmp_path / "child-2.log").read_text()

    await holder.kill()  # the OS releases the file lock; the lease's process is gone
    third = await Child.start(tmp_path, __file__, "hold", kind, location)
    assert await third.line() == "holding"
    await third.finish()
    after = await load(kind, location)
    assert after is not None
    assert after[: len(original)] == original  # nothing deleted, nothing of the refused ones
    assert [e.type for e in after[len(original) :]] == ["session/end-seed"] * 2


def config(tmp_path: Path, kind: str, location: str) -> str:
    path = tmp_path / "dsh.toml"
    if kind == "jsonl":
        path.write_text(f'[persistence_jsonl]\ndir = "{location}"\n')
    else:
        path.write_text(
            f"[persistence_jsonl]\nenabled = false\n\n[persistence_sqlite]\nenabled = true\n"
            f'path = "{location}"\n'
        )
    return str(path)


async def test_a_crash_during_the_summary_call_loses_no_message(tmp_path: Path) -> None:
    directory = str(tmp_path / "sessions")
    child = await Child.start(tmp_path, __file__, "compact", directory)
    assert await child.line() == "summarising"
    await child.kill()
    stored = read_session(Path(directory) / file_name(SESSION), EventCodec())
    users = [e.data.content for e in stored if isinstance(e.data, UserMessage)]
    assert users[-1] == (Text(LONG),)  # the message that started the compacting turn
    assert stored[-1].type == "compaction/start"


# -- the children ----------------------------------------------------------------------------

LONG = "b" * 2400


async def hold(kind: str, location: str) -> int:
    from dsh import DshError

    async with Harness(load_entrypoints=False, plugins=[make_store(kind, location)]) as h:
        try:
            agent = await h.agent_loop.resume(SESSION)
        except DshError as exc:
            print(f"busy: {exc}", flush=True)
            return BUSY_EXIT
        await agent.session.checkpoint()
        print("holding", flush=True)
        await asyncio.to_thread(sys.stdin.read)
    return 0


async def compact(directory: str) -> int:
    from dsh import AgentOptions
    from dsh.testing import ScriptedAdapter, text_response
    from dsh_plugins.compaction import CompactionPlugin

    class SlowSummary(ScriptedAdapter):
        async def stream(self, request: Any) -> Any:
            if request.purpose == "compaction":
                print("summarising", flush=True)
                await asyncio.Event().wait()
            async for chunk in super().stream(request):
                yield chunk

    plugin = CompactionPlugin()
    settings = {"compaction": {"context_window": 1000, "reserve_tokens": 100,
                               "keep_recent_tokens": 120}}  # fmt: skip
    plugins = [plugin, JsonlStore(directory)]
    async with Harness(load_entrypoints=False, plugins=plugins, config=settings) as h:
        plugin.meter.bounds = (1.0, 1.0)  # the scripted usage figures are made up
        h.llm.register_adapter(["m"], SlowSummary([text_response("ok")] * 3))
        agent = h.agent_loop.create("a", AgentOptions(model="m"), session_id=SESSION)
        agent.send("a" * 1400)  # fits
        await agent.wait_idle()
        agent.send(LONG)  # does not: summarised first
        await agent.wait_idle()
    return 0


if __name__ == "__main__":
    action, *rest = sys.argv[1:]
    sys.exit(asyncio.run(hold(*rest) if action == "hold" else compact(*rest)))
