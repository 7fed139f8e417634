"""``dsh chat`` in-process: the terminal thread over a pipe, the agent on the loop thread.

Ctrl-C is a real SIGINT sent to the main thread, where the console runs. Every wait polls for
an observable fact (printed text, an event set by the model) with a timeout.
"""

from __future__ import annotations

import asyncio
import concurrent.futures
import io
import os
import pty
import signal
import sys
import termios
import threading
import time
import types
from collections.abc import Callable, Iterator, Sequence
from pathlib import Path
from typing import Any, cast

import pytest
from structlog.testing import capture_logs

from dsh import Harness
from dsh.loop._loop import LoopAgent
from dsh.testing import MemoryStore, hang, text_response, tool_call_response
from dsh.values._chunks import BlockStart, TextDelta
from dsh.values._content import Text
from dsh.values._request import LlmRequest
from dsh_plugins.terminal_ui import console
from dsh_plugins.terminal_ui.chat import ChatSession
from dsh_plugins.terminal_ui.console import Console, History, history_path
from dsh_plugins.terminal_ui.render import Lines
from dsh_plugins.terminal_ui.style import Style
from dsh_plugins.terminal_ui.threads import (
    Approval,
    Done,
    Draft,
    Idle,
    Interrupt,
    Line,
    LoopThread,
    Pump,
)
from tests.plugins.terminal_ui.conftest import Kit, chat_args, make_harness

TIMEOUT_S = 10


def wait_until(fact: Callable[[], bool], what: str) -> None:
    deadline = time.monotonic() + TIMEOUT_S
    while not fact():
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out waiting for {what}")
        time.sleep(0.002)


def at_the_prompt() -> bool:
    """Whether the console (on the main thread) is reading the prompt's line: what it printed
    last may come from a call that has not returned yet, and a Ctrl-C then cancels that call."""
    frame = sys._current_frames().get(threading.main_thread().ident or 0)
    while frame is not None:
        if frame.f_code.co_name == "_read_line":
            return True
        frame = frame.f_back
    return False


def ctrl_c() -> None:
    """What the terminal does on Ctrl-C: SIGINT, to the thread that waits on it."""
    main = threading.main_thread().ident
    assert main is not None
    signal.pthread_kill(main, signal.SIGINT)


class Terminal:
    """A chat over a pipe: ``type`` lines into it, read what it printed."""

    def __init__(self, harness: Harness, *argv: str) -> None:
        self.harness = harness
        self.argv = argv
        read, self._write = os.pipe()
        self.stdin = os.fdopen(read)
        self.out = io.StringIO()
        self.err = io.StringIO()
        self.pump: Pump | None = None

    def type(self, *lines: str) -> None:
        os.write(self._write, "".join(f"{line}\n" for line in lines).encode())

    def end(self) -> None:
        if self._write >= 0:
            os.close(self._write)
            self._write = -1

    def printed(self) -> str:
        return self.out.getvalue()

    def wait_for(self, text: str) -> None:
        wait_until(lambda: text in self.printed(), repr(text))

    def run(self, driver: Callable[[Terminal], None] | None = None, **console_kw: Any) -> int:
        """Chat on this (main) thread while ``driver`` types and presses keys on another.

        A driver that fails ends the input, so that a console waiting for a line returns, and
        its error is raised here (not lost in its thread)."""
        failures: list[BaseException] = []

        def drive() -> None:
            assert driver is not None
            try:
                driver(self)
            except BaseException as exc:
                failures.append(exc)
                self.end()

        thread = threading.Thread(target=drive) if driver else None
        if thread is not None:
            thread.start()
        try:
            if console_kw:
                return self._run_console(**console_kw)
            return console.run(self.harness, chat_args(*self.argv), self.stdin, self.out, self.err)
        finally:
            if thread is not None:
                thread.join(TIMEOUT_S)
            self.end()
            self.stdin.close()
            if failures:
                raise failures[0]

    def _run_console(self, **console_kw: Any) -> int:
        """What ``console.run`` does, with options the command does not expose."""
        pump = self.pump = Pump(self.stdin.fileno())
        loop = LoopThread()
        chat = ChatSession(
            self.harness, chat_args(*self.argv), Lines(self.out, Style(False)), pump.post
        )
        loop.start()
        try:
            return Console(chat, loop, pump, self.out, tty=False, **console_kw).run()
        finally:
            loop.submit(chat.close()).result()
            loop.stop()
            pump.close()


def text_then_hang(text: str) -> Any:
    return hang([BlockStart(0, "text"), TextDelta(0, text)])


def test_a_piped_conversation(tmp_path: Path) -> None:
    term = Terminal(make_harness(Kit([text_response("Hi!")])))
    term.type("hello", "/help", "", "/quit")
    assert term.run() == 0
    lines = term.printed().splitlines()
    assert lines[1:3] == ["Hi!", lines[2]] and lines[2].startswith("── 10 in")
    assert "  /resume ID       switch to a stored session" in lines
    assert not any("Ctrl-C" in line for line in lines)  # no key hints for a pipe
    assert lines[-1].startswith("resume this chat: dsh chat --resume chat-")


def test_the_end_of_input_quits() -> None:
    term = Terminal(make_harness(Kit([text_response("Hi!")])))
    term.type("hello")
    term.end()
    assert term.run() == 0
    assert "Hi!" in term.printed()


def test_what_prevents_a_start_exits_2() -> None:
    term = Terminal(make_harness(Kit()), "--model", "gpt-9")
    assert term.run() == 2
    assert term.err.getvalue().startswith("dsh chat: no adapter serves model 'gpt-9'")
    term = Terminal(make_harness(Kit()), "--resume", "nope")
    assert term.run() == 2
    assert "dsh chat: no stored session 'nope'" in term.printed()


def test_ctrl_c_aborts_the_step_and_the_prompt_comes_back() -> None:
    kit = Kit([text_then_hang("Once upon a time"), text_response("Next.")])

    def driver(term: Terminal) -> None:
        term.type("tell me a story")
        term.wait_for("Once upon a time")
        ctrl_c()
        term.wait_for("⏹ aborted (interrupted)")
        term.type("go on", "/quit")

    term = Terminal(make_harness(kit))
    assert term.run(driver) == 0
    assert term.printed().index("⏹ aborted") < term.printed().index("Next.")


class HoldTurnEnd:
    """Keeps a turn from ending until the agent is disposed: the chat is still busy when the
    second Ctrl-C comes."""

    async def dsh_agent_turn_end(self, agent: Any) -> None:
        while not agent.disposing:  # noqa: ASYNC110 - a flag, not an event, says it
            await asyncio.sleep(0.002)


def test_a_second_ctrl_c_quits_at_once() -> None:
    kit = Kit([text_then_hang("Once")])

    def driver(term: Terminal) -> None:
        term.type("story")
        term.wait_for("Once")
        ctrl_c()
        term.wait_for("⏹ aborted")
        ctrl_c()

    term = Terminal(make_harness(kit, extra=[HoldTurnEnd()]))
    assert term.run(driver) == 130


def test_ctrl_c_at_the_prompt_says_how_to_quit_and_a_second_quits() -> None:
    def driver(term: Terminal) -> None:
        term.type("/help")
        term.wait_for("/quit            leave")  # the help was shown...
        wait_until(at_the_prompt, "the prompt")  # ...and its call returned
        ctrl_c()
        term.wait_for("(Ctrl-C again to quit · or Ctrl-D, /quit)")
        ctrl_c()

    assert Terminal(make_harness(Kit())).run(driver) == 0


def test_the_docs_say_what_ctrl_c_at_an_empty_prompt_does() -> None:
    """One Ctrl-C at an empty prompt says how to quit (above); the docs must not promise that
    it quits."""
    docs = Path(__file__).parents[3] / "docs"
    for page in (docs / "cli.md", docs / "plugins" / "terminal_ui.md"):
        text = " ".join(page.read_text().split())
        assert "(Ctrl-C again to quit · or Ctrl-D, /quit)" in text, page
        assert "on an empty prompt it quits" not in text, page


def test_typing_while_the_agent_works_steers_it() -> None:
    release = threading.Event()

    async def slow_tool_call(request: LlmRequest) -> Any:
        await asyncio.to_thread(release.wait, TIMEOUT_S)
        return tool_call_response("c1", "word_count", {"text": "a b"})

    kit = Kit([slow_tool_call, text_response("done")], ask=False)
    harness = make_harness(kit)

    def driver(term: Terminal) -> None:
        term.type("work")
        wait_until(lambda: bool(kit.adapter.requests), "the first model call")
        term.type("also count c", "")
        agents = harness.agents
        wait_until(lambda: cast(LoopAgent, agents.list()[0]).inbox.has_steering, "the steering")
        release.set()
        term.wait_for("done")
        term.type("/quit")

    term = Terminal(harness)
    assert term.run(driver, steering=True) == 0
    assert "↪ steering: also count c" in term.printed()
    assert kit.adapter.requests[1].messages[-1].content == (Text("also count c"),)


def test_quit_while_the_agent_works() -> None:
    kit = Kit([hang()])

    def driver(term: Terminal) -> None:
        term.type("work")
        wait_until(kit.adapter.started.is_set, "the model call")
        term.type("/quit")

    assert Terminal(make_harness(kit)).run(driver, steering=True) == 0


def tool_script() -> list[Any]:
    return [tool_call_response("c1", "word_count", {"text": "a b c"}), text_response("ok")]


@pytest.mark.parametrize(
    ("answer", "shown"), [("y", "  ← 3"), ("n", "  ✗ Error: the user said no")]
)
def test_approvals_are_asked_at_the_terminal(answer: str, shown: str) -> None:
    term = Terminal(make_harness(Kit(tool_script())))
    term.type("count", answer, "/quit")
    assert term.run() == 0
    assert f'allow word_count {{"text": "a b c"}}? [y/N] {answer}\n' in term.printed()
    assert shown in term.printed().splitlines()


def test_the_end_of_input_denies_an_approval() -> None:
    term = Terminal(make_harness(Kit(tool_script())))
    term.type("count")
    term.end()
    assert term.run() == 0
    assert "  ✗ Error: the user said no" in term.printed()


def test_ctrl_c_at_an_approval_denies_it_and_aborts() -> None:
    def driver(term: Terminal) -> None:
        term.type("count")
        term.wait_for("[y/N] ")
        ctrl_c()
        term.type("/quit")

    term = Terminal(make_harness(Kit(tool_script())))
    assert term.run(driver) == 0
    printed = term.printed()
    assert "[y/N] \n" in printed
    # Ctrl-C both answers the question (no) and aborts the step; whichever lands first
    # decides the wording of the error, never whether the tool runs.
    assert "  ← 3" not in printed
    assert "  ✗ Error: the user said no" in printed or "(interrupted)" in printed


def test_ctrl_c_cancels_a_slow_command() -> None:
    started = threading.Event()

    class SlowCompaction:
        async def compact(self, agent: Any) -> bool:
            started.set()
            await asyncio.Event().wait()
            return True

    class Offer:
        def dsh_harness_start(self, harness: Harness) -> None:
            harness.add_service("compaction", SlowCompaction())

    def driver(term: Terminal) -> None:
        term.type("/compact")
        wait_until(started.is_set, "the compaction")
        ctrl_c()
        term.type("/quit")

    assert Terminal(make_harness(Kit(), extra=[Offer()])).run(driver) == 0


def test_a_backslash_continues_the_message() -> None:
    kit = Kit([text_response("ok")])
    term = Terminal(make_harness(kit))
    term.type("first \\", "second", "/quit")
    assert term.run() == 0
    assert kit.adapter.requests[0].messages[-1].content == (Text("first \nsecond"),)


def test_without_a_store_there_is_nothing_to_resume() -> None:
    class NoStore(MemoryStore):
        dsh_session_load = None  # type: ignore[assignment]

    term = Terminal(make_harness(Kit([text_response("ok")]), store=NoStore()))
    term.type("hi", "/quit")
    assert term.run() == 0
    assert "resume this chat" not in term.printed()
    term = Terminal(make_harness(Kit()))
    term.type("/quit")
    term.run()
    assert "resume this chat" not in term.printed()  # nothing was said


# -- pieces of the console ------------------------------------------------------------------


@pytest.fixture
def bare() -> Iterator[tuple[Console, Pump, int]]:
    """A console with a pump over a pipe and no chat behind it."""
    read, write = os.pipe()
    pump = Pump(read)
    loop = LoopThread()
    loop.start()
    yield Console(None, loop, pump, io.StringIO(), tty=False), pump, write  # type: ignore[arg-type]
    loop.stop()
    pump.close()
    os.close(read)
    os.close(write)


def scripted_reads(console_: Console, reads: Sequence[object]) -> None:
    pending = list(reads)

    def read_line(prompt: str) -> str | None:
        item = pending.pop(0)
        if item is KeyboardInterrupt:
            raise KeyboardInterrupt
        return item  # type: ignore[return-value]

    console_._read_line = read_line  # type: ignore[method-assign]


def test_read_prompt_continuations_and_ctrl_c(bare: tuple[Console, Pump, int]) -> None:
    console_ = bare[0]
    scripted_reads(console_, ["a \\", "b"])
    assert console_.read_prompt() == "a \nb"
    scripted_reads(console_, ["a \\", KeyboardInterrupt])
    assert console_.read_prompt() == ""
    scripted_reads(console_, [KeyboardInterrupt, KeyboardInterrupt])
    assert console_.read_prompt() == ""  # the first says how to quit
    assert console_.read_prompt() is None  # the second quits
    scripted_reads(console_, [KeyboardInterrupt, "hi", KeyboardInterrupt])
    assert console_.read_prompt() == ""
    assert console_.read_prompt() == "hi"
    assert console_.read_prompt() == ""  # a line in between: asks again
    printed = console_.out
    assert isinstance(printed, io.StringIO)
    assert printed.getvalue().count("(Ctrl-C again to quit · or Ctrl-D, /quit)") == 3
    console_._typed_at_interrupt = "half a thought"
    scripted_reads(console_, [KeyboardInterrupt])
    assert console_.read_prompt() == ""
    scripted_reads(console_, [None])
    assert console_.read_prompt() is None


def test_stale_messages_at_the_prompt_are_dropped(bare: tuple[Console, Pump, int]) -> None:
    console_, pump, write = bare
    pump.post(Idle())
    os.write(write, b"hello\n")
    assert console_._read_line("> ") == "hello"


def test_a_call_keeps_messages_meant_for_others(bare: tuple[Console, Pump, int]) -> None:
    console_, pump, _ = bare

    async def answer() -> int:
        return 7

    other = Done(console_.thread.submit(answer()))
    pump.post(other)
    assert console_.call(answer()) == 7
    assert pump.next(stdin=False) is other


def test_a_ctrl_c_after_the_call_finished_is_kept_for_the_next_wait(
    bare: tuple[Console, Pump, int], monkeypatch: pytest.MonkeyPatch
) -> None:
    """The race that hung the chat: ``submit`` started a turn and returned, the first words
    were on screen, and Ctrl-C came before the console read its ``Done``. The Ctrl-C must
    abort the turn, not be spent on a call that had already finished."""
    console_, pump, _ = bare
    submit = console_.thread.submit

    def submit_then_ctrl_c(coro: Any) -> concurrent.futures.Future[Any]:
        future = submit(coro)
        future.result(TIMEOUT_S)  # the coroutine has finished...
        console_._on_sigint(signal.SIGINT, None)  # ...and Ctrl-C comes before its Done
        return future

    monkeypatch.setattr(console_.thread, "submit", submit_then_ctrl_c)

    async def start_turn() -> str:
        return "busy"

    assert console_.call(start_turn()) == "busy"
    pump.post(Idle())
    assert pump.next(stdin=False) == Interrupt()  # what follow() reads next: it aborts
    assert pump.next(stdin=False) == Idle()


def test_a_kept_ctrl_c_reaches_the_readline_prompt(bare: tuple[Console, Pump, int]) -> None:
    """The readline prompt does not read the pump: a Ctrl-C left there would cancel whatever
    the user does next. It counts as a Ctrl-C at the prompt instead."""
    console_, pump, _ = bare
    console_._typed_at_interrupt = "stale"
    console_._raise_pending_interrupt()  # nothing pending: nothing happens
    pump.post(Idle())
    pump.post(Interrupt())
    with pytest.raises(KeyboardInterrupt):
        console_._raise_pending_interrupt()
    assert console_._typed_at_interrupt == ""
    console_._raise_pending_interrupt()  # it was taken
    assert pump.next(stdin=False) == Idle()  # other messages stay for their reader


def test_a_ctrl_c_during_a_call_cancels_it(bare: tuple[Console, Pump, int]) -> None:
    console_, pump, _ = bare
    started = threading.Event()

    async def slow() -> str:
        started.set()
        await asyncio.Event().wait()
        raise AssertionError("cancelled before")

    def press() -> None:
        started.wait(TIMEOUT_S)
        console_._on_sigint(signal.SIGINT, None)

    presser = threading.Thread(target=press)
    presser.start()
    assert console_.call(slow()) is None
    presser.join()
    pump.post(Idle())
    assert pump.next(stdin=False) == Idle()  # the Ctrl-C was spent on the cancelled call


def test_ctrl_c_at_the_readline_prompt_remembers_what_was_typed(
    bare: tuple[Console, Pump, int],
) -> None:
    console_, pump, _ = bare

    class FakeReadline:
        @staticmethod
        def get_line_buffer() -> str:
            return "draft"

    console_._at_prompt = True
    with pytest.raises(KeyboardInterrupt):
        console_._on_sigint(signal.SIGINT, None)
    assert console_._typed_at_interrupt == ""
    console_.history = History(FakeReadline, Path("unused"), 10)  # type: ignore[arg-type]
    with pytest.raises(KeyboardInterrupt):
        console_._on_sigint(signal.SIGINT, None)
    assert console_._typed_at_interrupt == "draft"
    console_._at_prompt = False
    console_._on_sigint(signal.SIGINT, None)
    assert pump.next(stdin=False) == Interrupt()


def test_history_is_kept_in_the_data_directory(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("XDG_DATA_HOME", str(tmp_path))
    assert history_path() == tmp_path / "dsh" / "chat_history"
    history = History.open(50, terminal=True)
    assert history.readline is not None and history.size == 50
    history.add("first line")
    history.add("   ")
    assert history.line_buffer() == ""
    history.save()
    assert "first line" in history_path().read_text()
    history.load()
    assert history.readline.get_history_item(history.readline.get_current_history_length()) == (
        "first line"
    )
    monkeypatch.delenv("XDG_DATA_HOME")
    assert history_path() == Path("~/.local/share/dsh/chat_history").expanduser()


def test_without_a_terminal_there_is_no_history(tmp_path: Path) -> None:
    history = History.open(5, terminal=False)
    history.path = tmp_path / "history"
    history.add("x")
    history.save()
    assert history.line_buffer() == "" and not history.path.exists()


def test_a_history_that_cannot_be_saved_is_a_warning(tmp_path: Path) -> None:
    history = History.open(5, terminal=True)
    history.path = tmp_path  # a directory: writing it fails
    with capture_logs() as logs:
        history.save()
    assert logs[0]["event"] == "chat history not saved"


def test_the_end_of_input_while_the_agent_works_quits_after_the_turn() -> None:
    release = threading.Event()

    async def slow_answer(request: LlmRequest) -> Any:
        await asyncio.to_thread(release.wait, TIMEOUT_S)
        return text_response("the answer")

    kit = Kit([slow_answer])

    def driver(term: Terminal) -> None:
        term.type("work")
        wait_until(lambda: bool(kit.adapter.requests), "the model call")
        term.end()
        wait_until(lambda: term.pump is not None and term.pump.eof, "the end of input")
        release.set()

    term = Terminal(make_harness(kit))
    assert term.run(driver, steering=True) == 0
    assert "the answer" in term.printed()


def test_ctrl_c_while_starting_quits() -> None:
    starting = threading.Event()

    class SlowStart:
        async def dsh_harness_start(self) -> None:
            starting.set()
            await asyncio.Event().wait()

    def driver(term: Terminal) -> None:
        wait_until(starting.is_set, "the harness start")
        ctrl_c()

    assert Terminal(make_harness(Kit(), extra=[SlowStart()])).run(driver) == 130


def test_on_a_terminal_the_answer_to_an_approval_is_not_echoed(
    bare: tuple[Console, Pump, int],
) -> None:
    console_, pump, write = bare
    console_.tty = True
    answer: concurrent.futures.Future[bool] = concurrent.futures.Future()
    pump.post(Idle())  # arrives while asking: kept for later
    os.write(write, b"yes\n")
    console_.ask(Approval("allow x {}? [y/N] ", answer))
    assert answer.result() is True
    assert console_.out.getvalue() == "allow x {}? [y/N] "  # type: ignore[attr-defined]
    assert pump.next(stdin=False) == Idle()


def test_an_approval_whose_call_was_cancelled_is_dropped(
    bare: tuple[Console, Pump, int],
) -> None:
    console_, _, write = bare
    answer: concurrent.futures.Future[bool] = concurrent.futures.Future()
    answer.cancel()
    os.write(write, b"y\n")
    console_.ask(Approval("allow? ", answer))
    assert answer.cancelled()


def test_on_a_terminal_readline_reads_the_prompt(bare: tuple[Console, Pump, int]) -> None:
    console_ = bare[0]
    console_.tty = True
    console_._readline = lambda prompt: f"typed at {prompt!r}"  # type: ignore[method-assign]
    assert console_.read_prompt() == "typed at '> '"


def test_steering_lines_go_to_the_history(bare: tuple[Console, Pump, int]) -> None:
    added: list[str] = []

    class FakeReadline:
        @staticmethod
        def add_history(line: str) -> None:
            added.append(line)

    console_, pump, _ = bare
    console_.history = History(FakeReadline, Path("unused"), 10)  # type: ignore[arg-type]
    console_.steering = True

    class Chat:
        async def steer(self, line: str) -> str:
            return "quit"

    console_.chat = Chat()  # type: ignore[assignment]
    pump.post(Line("steer this"))
    assert console_.follow() == 0
    assert added == ["steer this"]


def test_a_draft_is_put_at_the_next_prompt() -> None:
    calls: list[tuple[str, object]] = []
    fake = types.ModuleType("readline")
    fake.insert_text = lambda text: calls.append(("insert", text))  # type: ignore[attr-defined]
    fake.set_startup_hook = lambda hook: calls.append(("hook", hook))  # type: ignore[attr-defined]
    history = History(fake, Path("unused"), 10)
    history.prefill("send me")
    (_, hook), *_ = calls
    assert callable(hook)
    hook()  # readline calls it when the prompt starts: the text, once
    assert calls[1:] == [("insert", "send me"), ("hook", None)]
    History(None, Path("unused"), 10).prefill("no readline: nothing to do")


def test_a_draft_while_busy_goes_to_the_prompt(bare: tuple[Console, Pump, int]) -> None:
    console_, pump, _ = bare
    prefilled: list[str] = []
    console_.history.prefill = prefilled.append  # type: ignore[method-assign,assignment]
    pump.post(Draft("and this"))
    pump.post(Idle())
    assert console_.follow() is None
    assert prefilled == ["and this"]


def test_while_the_agent_works_a_terminal_does_not_echo_typing() -> None:
    master, slave = pty.openpty()
    pump = Pump(slave)
    loop = LoopThread()
    try:
        console_ = Console(None, loop, pump, io.StringIO(), tty=True)  # type: ignore[arg-type]

        def echoing() -> bool:
            return bool(termios.tcgetattr(slave)[3] & termios.ECHO)

        assert echoing()
        with console_._typing_hidden():
            assert not echoing()
            with console_._typing_shown():  # an approval's answer is echoed
                assert echoing()
            assert not echoing()
        assert echoing()
        with console_._typing_shown():  # not hidden: nothing to show
            assert echoing()
    finally:
        pump.close()
        os.close(master)
        os.close(slave)


def test_without_a_real_terminal_there_is_nothing_to_hide(
    bare: tuple[Console, Pump, int],
) -> None:
    console_, _, _ = bare
    console_.tty = True  # says so, but the descriptor is a pipe
    with console_._typing_hidden():
        assert console_._echo is None


def test_a_ctrl_c_between_two_prompts_counts_at_the_next(
    bare: tuple[Console, Pump, int],
) -> None:
    console_, pump, _ = bare
    scripted_reads(console_, ["never read"])
    pump.post(Interrupt())
    pump.post(Interrupt())
    assert console_.read_prompt() == ""  # says how to quit
    assert not pump.take_interrupts()
    pump.post(Interrupt())
    assert console_.read_prompt() is None  # the second in a row quits


def test_a_ctrl_c_while_a_steering_line_is_handed_over_still_aborts(
    bare: tuple[Console, Pump, int],
) -> None:
    console_, pump, _ = bare
    aborted = threading.Event()
    handing_over = threading.Event()

    class SlowChat:
        async def steer(self, line: str) -> str:
            handing_over.set()
            await asyncio.Event().wait()  # cancelled by the Ctrl-C
            return "busy"

        async def abort(self) -> None:
            aborted.set()
            pump.post(Idle())

    console_.chat = SlowChat()  # type: ignore[assignment]
    pump.post(Line("steer this"))

    def press() -> None:
        handing_over.wait(TIMEOUT_S)
        pump.post(Interrupt())

    presser = threading.Thread(target=press)
    presser.start()
    assert console_.follow() is None
    presser.join()
    assert aborted.is_set()
