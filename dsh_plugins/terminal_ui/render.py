"""What an agent does, as terminal text: streamed answers, dimmed reasoning, tool calls with a
short preview of their results, errors, and why a turn stopped early.

The answer and the notes (reasoning, tool activity) may go to different streams: ``dsh run``
writes the answer to stdout and the rest to stderr, ``dsh chat`` writes both to stdout.

An answer that is not a terminal (``dsh run ... > answer.md``) gets a step's text only once its
stream succeeded, so an attempt abandoned for a retry never ends up in the file; on a terminal
the text streams live and an abandoned attempt is marked ``[cut off]``. On a terminal a
transient status line (:class:`~.progress.Progress`) says what is being waited for.
"""

from __future__ import annotations

import asyncio
import os
import re
import select
import stat
from collections.abc import Callable, Iterator
from contextlib import contextmanager, suppress
from typing import Any, TextIO

from attrs import evolve, frozen

from dsh.plugin import (
    BlockStart,
    ErrorEvent,
    Finish,
    FinishAborted,
    FinishError,
    HistoryPrune,
    HistoryRewriteEnd,
    HistoryRewriteStart,
    HistorySummary,
    ReasoningDelta,
    RetryEvent,
    SessionEvent,
    SteeringMessage,
    StepStart,
    StreamChunk,
    TextDelta,
    ToolCallEvent,
    ToolResultEvent,
    TurnAborted,
    TurnCompleted,
    TurnEndReason,
    TurnMaxTokens,
    Value,
    text_of,
)
from dsh_plugins.terminal_ui.progress import Progress
from dsh_plugins.terminal_ui.style import Style

__all__ = ["Lines", "Renderer", "failure_text", "one_line", "preview", "seconds", "silence"]

_SPACES = re.compile(r"\s+")
# Python's own words in an exception text: ``<TransferEncodingError: 400, ...>`` reprs and
# ``ClientPayloadError: `` class-name prefixes say nothing to a user.
_REPR = re.compile(r":?\s*<[^<>]*>")
_CLASS_PREFIX = re.compile(r"\b[A-Z][A-Za-z]*(?:Error|Exception|Warning): ")
#: What a failure code means, in words.
FAILURE_WORDS = {
    "RATE_LIMIT": "rate limited",
    "SERVER": "the model's server failed",
    "TIMEOUT": "the model stopped answering",
    "TRANSPORT": "cannot connect to the model's server",
    "STREAM_CLOSED": "the connection broke off in the middle of the answer",
    "EMPTY_RESPONSE": "the model sent an empty answer",
    "MALFORMED_RESPONSE": "the model's server sent something unreadable",
    "CONTEXT_WINDOW_EXCEEDED": "the conversation no longer fits the model's context window",
    "AUTH": "the API key was refused",
    "INSUFFICIENT_BALANCE": "the account has no balance left",
}


def failure_text(message: str, code: str | None = None) -> str:
    """A failure as a sentence: what its code means, then the detail without Python's
    exception names and reprs."""
    detail = _CLASS_PREFIX.sub("", _REPR.sub("", message)).strip()
    words = FAILURE_WORDS.get(code or "")
    if words is None or not detail:
        return detail or words or "failed"
    return f"{words} ({detail})"


def seconds(value: float) -> str:
    """``3`` for 3.0, ``0.5`` for 0.5: a delay as people write it."""
    return f"{value:.1f}".removesuffix(".0")


def one_line(text: str, limit: int = 160) -> str:
    """``text`` on one line (whitespace runs collapsed), cut to ``limit`` characters."""
    flat = _SPACES.sub(" ", text).strip()
    return flat if len(flat) <= limit else flat[: limit - 1] + "…"


def preview(text: str, max_lines: int = 3, width: int = 160) -> list[str]:
    """The first ``max_lines`` non-empty lines of ``text``, each cut to ``width``, and a note
    saying how many more lines there are."""
    lines = [line for line in text.splitlines() if line.strip()]
    shown = [one_line(line, width) for line in lines[:max_lines]]
    if len(lines) > max_lines:
        more = len(lines) - max_lines
        shown.append(f"… {more} more line{'s' if more > 1 else ''}")
    return shown or ["(empty)"]


def silence(stream: TextIO) -> None:
    """Point ``stream``'s descriptor at ``/dev/null``: its reader went away, and what is still
    written (the interpreter's final flush among it) goes nowhere, quietly."""
    with suppress(OSError, ValueError):  # no descriptor (a StringIO): nothing to silence
        devnull = os.open(os.devnull, os.O_WRONLY)
        os.dup2(devnull, stream.fileno())
        os.close(devnull)


class Lines:
    """An output stream that remembers whether its cursor is in the middle of a line.

    When the reader goes away (``dsh run ... | head``) it stops writing, calls ``on_closed``
    (which aborts the agent, as SIGPIPE would end a classic Unix tool) and points the
    descriptor at ``/dev/null`` so that the interpreter's final flush stays quiet. A write
    finds that out; :meth:`reader_watched` finds it out while nothing is written too.
    """

    def __init__(
        self, stream: TextIO, style: Style, on_closed: Callable[[], None] | None = None
    ) -> None:
        self.stream = stream
        self.style = style
        self.on_closed = on_closed
        self.mid_line = False
        self.closed = False
        self._status = False

    def write(self, text: str) -> None:
        if not text or self.closed:
            return
        self.clear_status()
        self._raw(text)
        self.mid_line = not text.endswith("\n")

    def status(self, text: str) -> None:
        """Show ``text`` as a transient status line (a terminal only): drawn over itself with a
        carriage return, erased by the next write. Not over a line in progress."""
        if self.closed or self.mid_line:
            return
        self._raw(f"\r{text}\x1b[K")
        self._status = not self.closed

    def clear_status(self) -> None:
        if self._status:
            self._status = False
            self._raw("\r\x1b[K")

    def _raw(self, text: str) -> None:
        try:
            self.stream.write(text)
            self.stream.flush()
        except BrokenPipeError:
            self._reader_gone()

    def _reader_gone(self) -> None:
        self.closed = True
        silence(self.stream)
        if self.on_closed is not None:
            self.on_closed()

    @contextmanager
    def reader_watched(self) -> Iterator[None]:
        """Within it, a pipe's reader going away is noticed at once, even while nothing is
        written (``dsh run`` holds a step's text until the step's stream succeeded, which
        can be a long, paid while): the running loop watches the pipe's write end, which
        turns ready when the read end is closed. Nothing to watch for other streams."""
        fd = self._pipe()
        if fd is None:
            yield
            return
        loop = asyncio.get_running_loop()
        loop.add_reader(fd, self._check_reader, loop, fd)
        try:
            yield
        finally:
            loop.remove_reader(fd)

    def _pipe(self) -> int | None:
        try:
            fd = self.stream.fileno()
            return fd if stat.S_ISFIFO(os.fstat(fd).st_mode) else None
        except (OSError, ValueError):  # no descriptor (a StringIO), or a closed one
            return None

    def _check_reader(self, loop: asyncio.AbstractEventLoop, fd: int) -> None:
        """The pipe turned ready: with its read end closed, ``poll`` says ``POLLERR``. (Else it
        is a FIFO this process reads too, with data in it: watching it would spin.)"""
        loop.remove_reader(fd)
        poller = select.poll()
        poller.register(fd, 0)  # errors and hang-ups are reported whatever the mask
        if poller.poll(0):
            self._reader_gone()

    def end_line(self) -> None:
        if self.mid_line:
            self.write("\n")

    def line(self, text: str) -> None:
        """``text`` as a line of its own."""
        self.end_line()
        self.write(f"{text}\n")


class Renderer:
    """Turns one agent's stream chunks and session events into text on ``answer`` and ``notes``.

    ``show_reasoning`` may be flipped at any time (``/reasoning`` in ``dsh chat``).
    ``hold_answer``: write a step's text only once its stream succeeded (for an answer that is
    not a terminal). ``progress``: the status line while waiting (none: no status line).
    """

    def __init__(
        self,
        answer: Lines,
        notes: Lines,
        *,
        show_reasoning: bool = True,
        hold_answer: bool = False,
        progress: Progress | None = None,
    ) -> None:
        self.answer = answer
        self.notes = notes
        self.show_reasoning = show_reasoning
        self.hold_answer = hold_answer
        self.progress = progress or Progress(notes, enabled=False)
        self._held: list[str] = []
        self._streamed = False  # text of the current attempt is on screen
        self._compaction = _Tally()
        self._events: dict[str, Callable[[Any], None]] = {
            StepStart.type: self._step_start,
            ToolCallEvent.type: self._tool_call,
            ToolResultEvent.type: self._tool_result,
            ErrorEvent.type: self._error,
            SteeringMessage.type: self._steering,
            RetryEvent.type: self._retry,
            HistoryRewriteStart.type: self._compaction_start,
            HistoryPrune.type: self._compaction_prune,
            HistorySummary.type: self._compaction_summary,
            HistoryRewriteEnd.type: self._compaction_end,
        }

    # -- the stream --------------------------------------------------------------------------
    def chunk(self, chunk: StreamChunk) -> None:
        if isinstance(chunk, TextDelta):
            self._text(chunk.text)
        elif isinstance(chunk, ReasoningDelta):
            if self.show_reasoning:
                self.progress.stop()
                self.notes.write(self.notes.style.dim(chunk.text))
            else:
                self.progress.start("thinking")
        elif isinstance(chunk, BlockStart):
            self._block_start(chunk)
        elif isinstance(chunk, Finish):
            self._finish(chunk)

    def _text(self, text: str) -> None:
        self.progress.stop()
        if self.hold_answer:
            self._held.append(text)
        else:
            self._streamed = True
            self.answer.write(text)

    def _block_start(self, chunk: BlockStart) -> None:
        # DeepSeek ends every block only at the end of the stream, so a new block ends the line.
        if chunk.block_type == "text":
            self.end_lines()
        elif chunk.block_type == "reasoning" and self.show_reasoning:
            self.progress.stop()
            self.end_lines()
            self.notes.write(self.notes.style.dim("thinking: "))

    def _finish(self, chunk: Finish) -> None:
        """The attempt's stream ended: write what was held, or drop (mark) a failed attempt."""
        failed = isinstance(chunk.reason, FinishError | FinishAborted)
        held, self._held = "".join(self._held), []
        if failed and self._streamed:
            self.answer.write(self.answer.style.dim(" [cut off]"))
        elif not failed:
            self.answer.write(held)
        self._streamed = False
        self.end_lines()

    def end_lines(self) -> None:
        self.answer.end_line()
        self.notes.end_line()

    # -- session events ----------------------------------------------------------------------
    def event(self, event: SessionEvent) -> None:
        show = self._events.get(event.type)
        if show is not None:
            show(event.data)

    def note(self, text: str) -> None:
        """A line of its own on the notes stream."""
        self.progress.stop()
        self.end_lines()
        self.notes.line(text)

    def _step_start(self, data: Any) -> None:
        self.progress.start("waiting for the model")

    def _tool_call(self, data: ToolCallEvent) -> None:
        style = self.notes.style
        self.note(f"{style.dim('→')} {style.bold(data.name)} {one_line(data.arguments)}")
        self.progress.start(f"running {data.name}")

    def _tool_result(self, data: ToolResultEvent) -> None:
        style = self.notes.style
        first, *rest = preview(text_of(data.content))
        if data.is_error:
            self.note(style.red(f"  ✗ {first}"))
        else:
            self.note(style.dim(f"  ← {first}"))
        for line in rest:
            self.note(style.dim(f"    {line}"))

    def _error(self, data: ErrorEvent) -> None:
        code = f" [{data.code}]" if data.code else ""
        self.note(self.notes.style.red(f"error: {failure_text(data.message, data.code)}{code}"))

    def _steering(self, data: SteeringMessage) -> None:
        self.note(self.notes.style.dim(f"↪ steering: {one_line(text_of(data.content))}"))

    def _retry(self, data: RetryEvent) -> None:
        """``↻ 429 rate limited — retrying in 3 s (2/5)`` (an ``llm/retry`` event)."""
        words = FAILURE_WORDS.get(data.code) or failure_text(data.message)
        cause = f"{data.status} {words}" if data.status else words
        limit = data.max_attempts
        count = f" ({data.attempt + 1}/{limit})" if limit else f" (attempt {data.attempt + 1})"
        line = f"↻ {cause} — retrying in {seconds(data.delay_s)} s{count}"
        self.note(self.notes.style.yellow(line))
        self.progress.start(f"retrying in {seconds(data.delay_s)} s")

    def _compaction_start(self, data: HistoryRewriteStart) -> None:
        self._compaction = _Tally(before=data.tokens_before)
        tokens = f"{data.tokens_before:,} tokens"
        if data.reason == "overflow":
            what = f"the conversation ({tokens}) did not fit the model's context window: compacting"
        else:
            what = f"compacting the conversation ({tokens})"
        self.note(self.notes.style.dim(f"{what}…"))
        self.progress.start("compacting")

    def _compaction_prune(self, data: HistoryPrune) -> None:
        self._compaction = evolve(self._compaction, elided=len(data.elided))

    def _compaction_summary(self, data: HistorySummary) -> None:
        self._compaction = evolve(self._compaction, summarised=True)

    def _compaction_end(self, data: HistoryRewriteEnd) -> None:
        style = self.notes.style
        tally = self._compaction
        done = tally.done()
        if done:
            size = f"{tally.before:,} → about {data.tokens_after:,} tokens"
            self.note(style.dim(f"compacted: {size} ({done})"))
        if data.error:
            self.note(style.red(f"compaction: {failure_text(data.error)}"))
        elif not done:
            self.note(
                style.dim(
                    f"nothing to compact: the conversation ({tally.before:,} tokens) is all "
                    "recent enough to keep as it is"
                )
            )

    # -- turn end ----------------------------------------------------------------------------
    def turn_end(self, reason: TurnEndReason) -> None:
        """End open lines and say why the turn stopped, when it stopped early (errors are
        shown by their ``error`` event). Text held for a step that never finished is dropped."""
        self.progress.stop()
        self._held = []
        self._streamed = False
        self.end_lines()
        style = self.notes.style
        if isinstance(reason, TurnAborted):
            self.note(style.yellow(f"⏹ aborted{_detail(reason.reason)}"))
        elif isinstance(reason, TurnMaxTokens):
            self.note(style.yellow("stopped: the answer reached the output token limit"))
        elif isinstance(reason, TurnCompleted) and reason.reason:
            self.note(style.yellow(f"stopped: {reason.reason}"))


@frozen(repr=False, eq=False)
class _Tally(Value):
    """What one compaction did, gathered from its events."""

    before: int = 0
    elided: int = 0
    summarised: bool = False

    def done(self) -> str:
        parts = [f"elided {self.elided} old tool result{'s' if self.elided != 1 else ''}"]
        parts = parts if self.elided else []
        if self.summarised:
            parts.append("summarised the older conversation")
        return "; ".join(parts)


def _detail(reason: str | None) -> str:
    return f" ({reason})" if reason and reason != "aborted" else ""
