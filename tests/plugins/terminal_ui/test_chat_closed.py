"""``dsh chat`` whose output nobody reads any more (``dsh chat < script | head``): the running
turn is aborted and the chat ends, exit 130, whichever thread finds out."""

from __future__ import annotations

import io
import os

from dsh.testing import MemoryStore, hang, text_response
from dsh.values._events import TurnAborted, TurnEnd
from dsh_plugins.terminal_ui.console import Console
from dsh_plugins.terminal_ui.threads import OutputClosed, Pump
from tests.helpers import data_of
from tests.plugins.terminal_ui.conftest import Kit, make_harness
from tests.plugins.terminal_ui.test_console import Terminal, bare, text_then_hang, wait_until

__all__ = ["bare"]  # the fixture, imported for the tests below


class ClosedAfter(io.StringIO):
    """An output whose reader goes away as ``text`` is written."""

    def __init__(self, text: str) -> None:
        super().__init__()
        self.text = text

    def write(self, text: str) -> int:
        if self.text in self.getvalue() + text:
            raise BrokenPipeError
        return super().write(text)


def test_a_reader_gone_mid_answer_aborts_the_turn_and_ends_the_chat() -> None:
    kit = Kit([text_then_hang("Once upon a time"), text_response("never asked")])
    store = MemoryStore()
    term = Terminal(make_harness(kit, store=store))
    term.out = ClosedAfter("Once upon a time")
    term.type("tell me a story", "and another")
    assert term.run() == 130
    (events,) = store.stored.values()
    assert data_of(events, TurnEnd) == [TurnEnd(1, TurnAborted("the output was closed"))]
    assert len(kit.adapter.requests) == 1  # the second line never became a turn


def test_a_reader_gone_before_the_first_prompt_ends_the_chat() -> None:
    term = Terminal(make_harness(Kit([text_response("never asked")])))
    term.out = ClosedAfter("")  # not even the greeting is read
    term.type("hello")
    assert term.run() == 130


def test_a_reader_gone_while_the_model_is_silent_is_noticed_too() -> None:
    """A real pipe, and a model that sends nothing: no write finds out, the watch does."""
    kit = Kit([hang()])
    reader, writer = os.pipe()
    term = Terminal(make_harness(kit))
    term.out = os.fdopen(writer, "w")  # type: ignore[assignment]

    def driver(term: Terminal) -> None:
        term.type("tell me a story")
        wait_until(lambda: bool(kit.adapter.requests), "the model call")
        os.close(reader)

    try:
        assert term.run(driver) == 130
    finally:
        term.out.close()  # its descriptor is /dev/null's now


def test_the_terminal_thread_finds_out_too(bare: tuple[Console, Pump, int]) -> None:
    console_, pump, _ = bare
    console_.out = ClosedAfter("")
    console_._write("allow it? [y/N] ")
    assert console_.read_prompt() is None  # the chat ends
    pump.post(OutputClosed())
    assert console_._read_line("> ") is None  # while waiting for a line
    pump.post(OutputClosed())
    assert console_.follow() == 130  # while the agent works


def test_dsh_chat_into_a_closed_pipe_ends_quietly() -> None:
    """The real command line: its stdout a pipe nobody reads, its stdin a script."""
    import subprocess
    import sys

    from tests.helpers import disabled_plugins

    reader, writer = os.pipe()
    os.close(reader)
    boot = "import sys; from dsh.cli import main; sys.exit(main(sys.argv[1:]))"
    env = dict(os.environ, DSH_DISABLE_PLUGINS=disabled_plugins(), DEEPSEEK_API_KEY="unused")
    try:
        done = subprocess.run(
            [sys.executable, "-c", boot, "chat"],
            input=b"hello\n",
            stdout=writer,
            stderr=subprocess.PIPE,
            env=env,
            check=False,
        )
    finally:
        os.close(writer)
    assert (done.returncode, done.stderr.decode()) == (130, "")
