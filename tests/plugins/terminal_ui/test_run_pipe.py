"""``dsh run`` into a pipe whose reader goes away (issue #34): the answer is held until its
step's stream succeeds, so no write finds out that the reader left; the pipe itself is watched,
and the model stream is stopped at once. Real processes, the mock server as the model."""

from __future__ import annotations

import asyncio
import io
import os
import sys
from pathlib import Path

import pytest
from attrs import evolve

from dsh import AgentOptions
from dsh.testing import hang, text_response
from dsh.testing.mockserver import MockServer
from dsh.testing.mockserver.catalogue import long_text
from dsh.testing.mockserver.scenario import Scenario
from dsh.values._events import TurnAborted, TurnEnd
from dsh_plugins.terminal_ui import headless
from dsh_plugins.terminal_ui.render import Lines
from dsh_plugins.terminal_ui.style import Style
from dsh_plugins.terminal_ui.view import OUTPUT_CLOSED, OutputGuard
from tests.helpers import data_of, disabled_plugins
from tests.plugins.terminal_ui.conftest import Kit, make_harness, run_args
from tests.plugins.terminal_ui.test_run import Terminal

pytestmark = pytest.mark.skipif(sys.platform == "win32", reason="needs POSIX pipes")

BOOT = "import sys; from dsh.cli import main; sys.exit(main(sys.argv[1:]))"
#: The issue's answer: 200,000 chunks (about 45 MB of frames; far more than socket buffers hold).
CHUNKS = 200_000


class Meter:
    """A TCP proxy in front of the mock server that counts the bytes of answers it passed on to
    the client: what the client took (plus what socket buffers hold), whatever the server does
    inside. ``started`` is set once ``STARTED`` bytes went through."""

    STARTED = 64 * 1024

    def __init__(self, upstream: str) -> None:
        host, _, port = upstream.removeprefix("http://").partition(":")
        self.upstream = (host, int(port))
        self.passed = 0
        self.started = asyncio.Event()
        self.url = ""
        self._server: asyncio.Server | None = None
        self._pumps: set[asyncio.Task[None]] = set()

    async def __aenter__(self) -> Meter:
        self._server = await asyncio.start_server(self._serve, "127.0.0.1", 0)
        self.url = f"http://127.0.0.1:{self._server.sockets[0].getsockname()[1]}"
        return self

    async def __aexit__(self, *exc: object) -> None:
        assert self._server is not None
        self._server.close()
        for pump in self._pumps:
            pump.cancel()
        await asyncio.gather(*self._pumps, return_exceptions=True)
        await self._server.wait_closed()

    async def _serve(
        self, client_in: asyncio.StreamReader, client_out: asyncio.StreamWriter
    ) -> None:
        server_in, server_out = await asyncio.open_connection(*self.upstream)
        for pump in (
            self._pump(client_in, server_out, count=False),
            self._pump(server_in, client_out, count=True),
        ):
            task = asyncio.ensure_future(pump)
            self._pumps.add(task)

    async def _pump(
        self, source: asyncio.StreamReader, sink: asyncio.StreamWriter, *, count: bool
    ) -> None:
        try:
            while data := await source.read(1 << 16):
                sink.write(data)
                await sink.drain()
                if count:
                    self.passed += len(data)
                    if self.passed >= self.STARTED:
                        self.started.set()
        except ConnectionError:
            pass
        finally:
            sink.close()  # one side went away: so does the other


def long_answer(chunks: int) -> Scenario:
    """The mock server's long answer, ``chunks`` content deltas long, built in no time: one
    delta repeated (``long_text`` itself takes seconds for this many)."""
    short = long_text({"model": "deepseek-v4-flash"}, chunks=1)
    opening, delta, *closing = short.frames
    return evolve(short, frames=(opening, *([delta] * chunks), *closing))


LONG = long_answer(CHUNKS)


def child_env(tmp_path: Path) -> dict[str, str]:
    env = dict(os.environ, DSH_DISABLE_PLUGINS=disabled_plugins())
    env["XDG_DATA_HOME"] = str(tmp_path / "data")
    env.pop("NO_COLOR", None)
    return env


async def test_a_reader_gone_while_the_answer_is_held_stops_the_stream(
    mock_server: MockServer, tmp_path: Path
) -> None:
    async with Meter(mock_server.url) as meter:
        await reader_gone_mid_answer(meter, mock_server, tmp_path)


async def reader_gone_mid_answer(meter: Meter, mock_server: MockServer, tmp_path: Path) -> None:
    config = tmp_path / "dsh.toml"
    config.write_text(f'[llm_deepseek]\nbase_url = "{meter.url}"\napi_key = "k"\n')
    total = sum(len(frame.encode()) for frame in LONG.frames)
    mock_server.queue(LONG)
    reader, writer = os.pipe()
    child = await asyncio.create_subprocess_exec(
        sys.executable, "-c", BOOT, "--config", str(config), "run", "write a lot",
        stdin=asyncio.subprocess.DEVNULL, stdout=writer, stderr=asyncio.subprocess.PIPE,
        env=child_env(tmp_path),
    )  # fmt: skip
    os.close(writer)
    try:
        await meter.started.wait()  # the answer streams; dsh holds it: nothing in the pipe
    finally:
        os.close(reader)  # the reader goes away (``| head`` that had enough, a closed pager)
    _, err = await child.communicate()
    notes = err.decode()
    assert child.returncode == 130, notes
    assert "⏹ aborted (the output was closed)" in notes
    assert "Traceback" not in notes
    # The mock server saw the client go away in the middle of the answer, long before its end:
    # the stream was stopped, not read to its end. The server learns it after the child's exit
    # (through the meter's proxy, which closes its side once the child's is gone): wait for it.
    async with asyncio.timeout(60):  # noticed as the proxy closes: this only bounds a hang
        await mock_server.client_gone()
    assert mock_server.disconnects == 1
    # ... and the client took a small part of it (socket buffers hold a few MB).
    assert meter.passed < total // 2, f"{meter.passed:,} of {total:,} bytes were passed on"


async def test_in_process_a_reader_gone_aborts_a_turn_that_writes_nothing() -> None:
    kit = Kit([hang()])
    reader, writer = os.pipe()
    out = os.fdopen(writer, "w")
    try:
        running = asyncio.create_task(
            headless.run(make_harness(kit), run_args("hi"), Terminal(), out, io.StringIO())
        )
        await kit.adapter.started.wait()  # the model call runs; nothing is written meanwhile
        os.close(reader)
        assert await running == 130
    finally:
        out.close()  # its descriptor is /dev/null's now


async def test_a_fifo_this_process_reads_too_is_left_alone(tmp_path: Path) -> None:
    """Data in it makes a FIFO opened for reading and writing ready: that is no closed reader,
    and watching it on would spin; the watch stops."""
    fifo = tmp_path / "fifo"
    os.mkfifo(fifo)
    stream = os.fdopen(os.open(fifo, os.O_RDWR), "w")
    lines = Lines(stream, Style(False))
    checked = asyncio.Event()
    check = lines._check_reader

    def checking(loop: asyncio.AbstractEventLoop, fd: int) -> None:
        check(loop, fd)
        checked.set()

    lines._check_reader = checking  # type: ignore[method-assign]
    try:
        with lines.reader_watched():
            lines.write("data\n")
            await checked.wait()
        assert not lines.closed
    finally:
        stream.close()


async def test_a_turn_that_starts_after_the_reader_left_is_aborted() -> None:
    lines = Lines(io.StringIO(), Style(False))
    guard = OutputGuard(lines)
    assert lines.on_closed is not None
    lines.on_closed()  # no agent yet: nothing to abort
    lines.closed = True  # the reader went away before the turn began
    async with make_harness(Kit([text_response("unread")]), extra=[guard]) as harness:
        agent = harness.agent_loop.create("run", AgentOptions("scripted"))
        guard.watch(agent)
        agent.send("hi")
        await agent.wait_idle()
    (end,) = data_of(agent.session.events, TurnEnd)
    assert end.reason == TurnAborted(OUTPUT_CLOSED)
