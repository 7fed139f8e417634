"""``dsh chat``: the terminal side, on the main thread.

At the prompt, lines are read with GNU readline (history, editing) when stdin is a terminal.
While the agent works the terminal is in its ordinary line mode: a typed line steers the agent,
Ctrl-C aborts the running step and a second Ctrl-C quits. Tool approvals are asked here. The
agent side is :class:`~dsh_plugins.terminal_ui.chat.ChatSession`, on the loop thread.
"""

from __future__ import annotations

import argparse
import concurrent.futures
import os
import signal
import sys
import termios
from collections.abc import Coroutine, Iterator
from contextlib import contextmanager, suppress
from pathlib import Path
from types import FrameType, ModuleType
from typing import Any, TextIO, TypeVar

from dsh.plugin import DshError, Harness, get_logger
from dsh_plugins.terminal_ui import CHAT_HELP, startup
from dsh_plugins.terminal_ui.chat import ChatSession
from dsh_plugins.terminal_ui.headless import USAGE_ERROR
from dsh_plugins.terminal_ui.options import chat as configure
from dsh_plugins.terminal_ui.render import Lines, silence
from dsh_plugins.terminal_ui.style import Style, wants_color
from dsh_plugins.terminal_ui.threads import (
    Approval,
    Done,
    Draft,
    Eof,
    Idle,
    Interrupt,
    Line,
    LoopThread,
    Message,
    OutputClosed,
    Pump,
)

__all__ = ["HELP", "INTERRUPTED", "PROMPT", "Console", "History", "configure", "run"]

HELP = CHAT_HELP
PROMPT = "> "
MORE = "… "
#: Exit code when a second Ctrl-C quits while the agent works.
INTERRUPTED = 130

T = TypeVar("T")
log = get_logger("dsh_plugins.terminal_ui")


def history_path() -> Path:
    """``$XDG_DATA_HOME/dsh/chat_history`` (``~/.local/share/dsh/chat_history``)."""
    data_home = os.environ.get("XDG_DATA_HOME") or os.path.join("~", ".local", "share")
    return Path(data_home).expanduser() / "dsh" / "chat_history"


class History:
    """Line editing and input history through the ``readline`` module, kept in a file; does
    nothing without ``readline`` (input that is not a terminal)."""

    def __init__(self, readline: ModuleType | None, path: Path, size: int) -> None:
        self.readline = readline
        self.path = path
        self.size = size

    @classmethod
    def open(cls, size: int, *, terminal: bool) -> History:
        """The history file loaded into readline when stdin is a ``terminal``. (Importing
        ``readline`` turns line editing on for ``input()``, and may write to the terminal.)"""
        readline: ModuleType | None = None
        if terminal:
            with suppress(ImportError):  # Python built without readline: plain input()
                import readline
        history = cls(readline, history_path(), size)
        history.load()
        return history

    def load(self) -> None:
        if self.readline is None:
            return
        self.readline.set_history_length(self.size)
        with suppress(OSError):  # no history yet
            self.readline.read_history_file(self.path)

    def add(self, line: str) -> None:
        if self.readline is not None and line.strip():
            self.readline.add_history(line)

    def prefill(self, text: str) -> None:
        """Put ``text`` at the next prompt, to edit, send (Enter) or drop (Ctrl-C)."""
        readline = self.readline
        if readline is None:
            return

        def insert() -> None:
            readline.insert_text(text)
            readline.set_startup_hook(None)

        readline.set_startup_hook(insert)

    def line_buffer(self) -> str:
        """What is typed at the prompt right now."""
        return "" if self.readline is None else str(self.readline.get_line_buffer())

    def save(self) -> None:
        if self.readline is None:
            return
        try:
            self.path.parent.mkdir(parents=True, exist_ok=True)
            self.readline.write_history_file(self.path)
        except OSError as exc:
            log.warning("chat history not saved", path=str(self.path), error=str(exc))


class Console:
    """Runs a chat from the terminal. ``tty``: stdin is a terminal (readline at the prompt,
    answers to approvals echoed by the terminal); ``steering``: lines typed while the agent
    works steer it (with piped input they wait for the next prompt instead, so a piped script
    is a sequence of prompts)."""

    def __init__(
        self,
        chat: ChatSession,
        thread: LoopThread,
        pump: Pump,
        out: TextIO,
        *,
        tty: bool,
        steering: bool | None = None,
        history: History | None = None,
    ) -> None:
        self.chat = chat
        self.thread = thread
        self.pump = pump
        self.out = out
        self.tty = tty
        self.steering = tty if steering is None else steering
        self.history = history or History(None, history_path(), 0)
        self._at_prompt = False
        self._typed_at_interrupt = ""
        self._quit_armed = False  # Ctrl-C at an empty prompt said how to quit
        self._echo: tuple[list[Any], list[Any]] | None = None  # terminal modes while busy
        self._output_closed = False  # nobody reads the output any more: the chat ends

    def run(self) -> int:
        """Chat until the user quits; returns the exit code."""
        previous = signal.signal(signal.SIGINT, self._on_sigint)
        try:
            return self._chat()
        finally:
            signal.signal(signal.SIGINT, previous)

    def _on_sigint(self, signum: int, frame: FrameType | None) -> None:
        if self._at_prompt:  # readline is reading: only an exception ends its wait
            self._typed_at_interrupt = self.history.line_buffer()
            raise KeyboardInterrupt
        self.pump.post(Interrupt())

    def _chat(self) -> int:
        try:
            action = self.call(self.chat.start())
        except DshError as exc:
            self._write(f"dsh chat: {exc}\n")
            return USAGE_ERROR
        while action != "quit":
            if action is None:
                return INTERRUPTED
            if action == "busy":
                code = self.follow()
                if code is not None:
                    return code
                if self.pump.eof:
                    break
            line = self.read_prompt()
            if line is None:
                break
            # Nothing typed (a Ctrl-C at the prompt): straight back to it, so that a second
            # Ctrl-C reaches the prompt instead of cancelling a call about nothing.
            action = self.call(self.chat.submit(line)) or "idle" if line.strip() else "idle"
        return INTERRUPTED if self._output_closed else 0

    # -- waiting on the loop thread ----------------------------------------------------------
    def call(self, coro: Coroutine[Any, Any, T]) -> T | None:
        """Run ``coro`` on the loop thread and wait for it; Ctrl-C cancels it (``None``).

        A Ctrl-C that comes when ``coro`` has already finished (its ``Done`` not read yet: the
        signal handler can even run before the done callback is added) cancels nothing; it is
        kept for whoever waits next, so that it aborts the turn ``coro`` started instead of
        being lost (which left the console waiting for an agent that never went idle)."""
        future = self.thread.submit(coro)
        future.add_done_callback(lambda done: self.pump.post(Done(done)))
        held: list[Message] = []
        while True:
            message = self.pump.next(stdin=False)
            if isinstance(message, Done) and message.future is future:
                break
            if not (isinstance(message, Interrupt) and future.cancel()):
                held.append(message)
        self.pump.push_back(held)
        return None if future.cancelled() else future.result()

    def follow(self) -> int | None:
        """Wait until the agent is idle (``None``), steering it with typed lines and asking
        approvals; Ctrl-C aborts. Returns an exit code when the user quits meanwhile."""
        interrupted = False
        with self._typing_hidden():
            while True:
                message = self.pump.next(stdin=self.steering and not self.pump.eof)
                if isinstance(message, Idle):
                    return None
                code = self._while_busy(message, interrupted)
                if code is not None:
                    return code
                interrupted = interrupted or isinstance(message, Interrupt)

    def _while_busy(self, message: Message, interrupted: bool) -> int | None:
        """One message while the agent works; an exit code when the user quits."""
        if isinstance(message, Interrupt):
            if interrupted:
                return INTERRUPTED
            self.thread.submit(self.chat.abort())
        elif isinstance(message, OutputClosed):
            return INTERRUPTED  # the turn was aborted; closing the chat ends it
        elif isinstance(message, Line):
            self.history.add(message.text)
            action = self.call(self.chat.steer(message.text))
            if action == "quit":
                return 0
            if action is None:  # a Ctrl-C came while the line was handed over: it aborts
                return self._while_busy(Interrupt(), interrupted)
        elif isinstance(message, Approval):
            with self._typing_shown():
                self.ask(message)
        elif isinstance(message, Draft):
            self.history.prefill(message.text)
        return None

    @contextmanager
    def _typing_hidden(self) -> Iterator[None]:
        """While the agent writes, a terminal does not echo what is typed: the echo would land
        in the middle of the streamed answer. Each line typed is acknowledged on a line of its
        own instead (``↪ queued: …``)."""
        if not self.tty:
            yield
            return
        try:
            saved = termios.tcgetattr(self.pump.fd)
        except termios.error:  # not a terminal after all: nothing to hide
            yield
            return
        quiet = list(saved)
        quiet[3] &= ~termios.ECHO
        termios.tcsetattr(self.pump.fd, termios.TCSANOW, quiet)
        self._echo = (saved, quiet)
        try:
            yield
        finally:
            self._echo = None
            termios.tcsetattr(self.pump.fd, termios.TCSANOW, saved)

    @contextmanager
    def _typing_shown(self) -> Iterator[None]:
        """Echo again for a question the user answers (a tool approval)."""
        echo = self._echo
        if echo is None:
            yield
            return
        termios.tcsetattr(self.pump.fd, termios.TCSANOW, echo[0])
        try:
            yield
        finally:
            termios.tcsetattr(self.pump.fd, termios.TCSANOW, echo[1])

    def ask(self, approval: Approval) -> None:
        """Ask whether a tool call may run. Ctrl-C or the end of input deny it (and then do
        what they always do)."""
        self._write(approval.question)
        held: list[Message] = []
        allowed = False
        while True:
            message = self.pump.next(stdin=True)
            if isinstance(message, Line):
                allowed = message.text.strip().lower() in ("y", "yes")
                if not self.tty:
                    self._write(f"{message.text}\n")
                break
            if isinstance(message, Interrupt | Eof):
                self._write("\n")
                held.extend([message] if isinstance(message, Interrupt) else [])
                break
            held.append(message)
        self.pump.push_back(held)
        with suppress(concurrent.futures.InvalidStateError):  # the tool call was cancelled
            approval.answer.set_result(allowed)

    # -- the prompt --------------------------------------------------------------------------
    def read_prompt(self) -> str | None:
        """The next message typed at the prompt (a line ending in ``\\`` continues on the
        next); ``""`` when Ctrl-C dropped what was typed; ``None`` to quit (end of input, or
        a second Ctrl-C in a row at an empty prompt: the first says how to quit, so a Ctrl-C
        meant for an agent that had just finished does not end the chat without a word)."""
        parts: list[str] = []
        while True:
            if self.pump.take(OutputClosed):
                self._output_closed = True
                return None
            try:
                if self.pump.take_interrupts():  # a Ctrl-C between two prompts counts too
                    self._typed_at_interrupt = ""
                    raise KeyboardInterrupt
                line = self._read_line(MORE if parts else PROMPT)
            except KeyboardInterrupt:
                return self._interrupted_prompt(bool(parts or self._typed_at_interrupt))
            self._quit_armed = False
            if line is None:
                return None
            if not line.endswith("\\"):
                return "\n".join([*parts, line])
            parts.append(line[:-1])

    def _interrupted_prompt(self, typed: bool) -> str | None:
        if typed:
            self._quit_armed = False
            return ""
        if self._quit_armed:
            self._quit_armed = False
            return None
        self._quit_armed = True
        self._write("(Ctrl-C again to quit · or Ctrl-D, /quit)\n")
        return ""

    def _read_line(self, prompt: str) -> str | None:
        if self.tty:
            return self._readline(prompt)
        while True:
            message = self.pump.next(stdin=True)
            if isinstance(message, Line):
                return message.text
            if isinstance(message, Eof):
                return None
            if isinstance(message, Interrupt):
                self._typed_at_interrupt = ""
                raise KeyboardInterrupt
            if isinstance(message, OutputClosed):
                self._output_closed = True
                return None
            # Anything else is stale now that the agent is idle.

    def _readline(self, prompt: str) -> str | None:  # pragma: no cover - needs a terminal
        # GNU readline edits only a real terminal; tests drive this through a pseudo-terminal.
        self._at_prompt = True  # from here a Ctrl-C raises at once...
        try:
            self._raise_pending_interrupt()  # ...and one that came before waits in the pump
            return input(prompt)
        except EOFError:
            self._write("\n")
            return None
        except KeyboardInterrupt:
            self._write("\n")
            raise
        finally:
            self._at_prompt = False

    def _raise_pending_interrupt(self) -> None:
        """A Ctrl-C that came before the readline prompt (while no wait was reading the pump,
        or as a call's result was read) is a Ctrl-C at the prompt: readline does not read the
        pump, and left there it would cancel whatever the user did next."""
        if self.pump.take_interrupt():
            self._typed_at_interrupt = ""
            raise KeyboardInterrupt

    def _write(self, text: str) -> None:
        try:
            self.out.write(text)
            self.out.flush()
        except BrokenPipeError:  # nobody reads the chat any more: it ends
            silence(self.out)
            self.pump.post(OutputClosed())


def run(
    harness: Harness,
    args: argparse.Namespace,
    stdin: TextIO = sys.stdin,
    out: TextIO = sys.stdout,
    err: TextIO = sys.stderr,
) -> int:
    """``dsh chat``: returns the exit code (0, 2 when it cannot start, 130 after a second
    Ctrl-C while the agent worked)."""
    harness.load()
    startup.quiet_logs(args)
    problem = startup.options_problem(harness, args)
    if problem:
        print(f"dsh chat: {problem}", file=err)
        return USAGE_ERROR
    tty = stdin.isatty()
    history = History.open(startup.section(harness).history_size, terminal=tty)
    pump = Pump(stdin.fileno())
    thread = LoopThread()
    lines = Lines(out, Style(wants_color(out)))
    chat = ChatSession(harness, args, lines, pump.post, terminal=tty)
    console = Console(chat, thread, pump, out, tty=tty, history=history)
    thread.start()
    try:
        code = console.run()
    finally:
        thread.submit(chat.close()).result()
        thread.stop()
        pump.close()
        history.save()
    hint = chat.resume_hint()
    if hint is not None:
        lines.line(lines.style.dim(hint))  # not when nobody reads the output any more
    return code
