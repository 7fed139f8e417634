"""What an agent does, as terminal text: streamed answers, dimmed reasoning, tool calls with a
short preview of their results, errors, and why a turn stopped early.

The answer and the notes (reasoning, tool activity) may go to different streams: ``dsh run``
writes the answer to stdout and the rest to stderr, ``dsh chat`` writes both to stdout.
"""

from __future__ import annotations

import os
import re
from collections.abc import Callable
from contextlib import suppress
from typing import Any, TextIO

from dsh.chunks import BlockStart, Finish, ReasoningDelta, StreamChunk, TextDelta
from dsh.content import text_of
from dsh.events import (
    CompactionEnd,
    CompactionStart,
    ErrorEvent,
    SessionEvent,
    SteeringMessage,
    ToolCallEvent,
    ToolResultEvent,
    TurnAborted,
    TurnCompleted,
    TurnEndReason,
    TurnMaxTokens,
)
from dsh_plugins.terminal_ui.style import Style

__all__ = ["Lines", "Renderer", "one_line", "preview"]

_SPACES = re.compile(r"\s+")


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


class Lines:
    """An output stream that remembers whether its cursor is in the middle of a line.

    When the reader goes away (``dsh run ... | head``) it stops writing, calls ``on_closed``
    (which aborts the agent, as SIGPIPE would end a classic Unix tool) and points the
    descriptor at ``/dev/null`` so that the interpreter's final flush stays quiet.
    """

    def __init__(
        self, stream: TextIO, style: Style, on_closed: Callable[[], None] | None = None
    ) -> None:
        self.stream = stream
        self.style = style
        self.on_closed = on_closed
        self.mid_line = False
        self.closed = False

    def write(self, text: str) -> None:
        if not text or self.closed:
            return
        try:
            self.stream.write(text)
            self.stream.flush()
        except BrokenPipeError:
            self._reader_gone()
            return
        self.mid_line = not text.endswith("\n")

    def _reader_gone(self) -> None:
        self.closed = True
        with suppress(OSError, ValueError):  # no descriptor (a StringIO): nothing to silence
            devnull = os.open(os.devnull, os.O_WRONLY)
            os.dup2(devnull, self.stream.fileno())
            os.close(devnull)
        if self.on_closed is not None:
            self.on_closed()

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
    """

    def __init__(self, answer: Lines, notes: Lines, *, show_reasoning: bool = True) -> None:
        self.answer = answer
        self.notes = notes
        self.show_reasoning = show_reasoning
        self._events: dict[str, Callable[[Any], None]] = {
            "tool/call": self._tool_call,
            "tool/result": self._tool_result,
            "error": self._error,
            "steering/message": self._steering,
            "compaction/start": self._compaction_start,
            "compaction/end": self._compaction_end,
        }

    # -- the stream --------------------------------------------------------------------------
    def chunk(self, chunk: StreamChunk) -> None:
        if isinstance(chunk, TextDelta):
            self.answer.write(chunk.text)
        elif isinstance(chunk, ReasoningDelta):
            if self.show_reasoning:
                self.notes.write(self.notes.style.dim(chunk.text))
        elif isinstance(chunk, BlockStart):
            self._block_start(chunk)
        elif isinstance(chunk, Finish):
            self.end_lines()

    def _block_start(self, chunk: BlockStart) -> None:
        # DeepSeek ends every block only at the end of the stream, so a new block ends the line.
        if chunk.block_type == "text":
            self.end_lines()
        elif chunk.block_type == "reasoning" and self.show_reasoning:
            self.end_lines()
            self.notes.write(self.notes.style.dim("thinking: "))

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
        self.end_lines()
        self.notes.line(text)

    def _tool_call(self, data: ToolCallEvent) -> None:
        style = self.notes.style
        self.note(f"{style.dim('→')} {style.bold(data.name)} {one_line(data.arguments)}")

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
        self.note(self.notes.style.red(f"error: {data.message}{code}"))

    def _steering(self, data: SteeringMessage) -> None:
        self.note(self.notes.style.dim(f"↪ steering: {one_line(text_of(data.content))}"))

    def _compaction_start(self, data: CompactionStart) -> None:
        tokens = f"{data.tokens_before:,} tokens"
        self.note(self.notes.style.dim(f"compacting the conversation ({tokens})…"))

    def _compaction_end(self, data: CompactionEnd) -> None:
        style = self.notes.style
        if data.error:
            self.note(style.red(f"compaction: {data.error}"))
        else:
            self.note(style.dim(f"compacted: now about {data.tokens_after:,} tokens"))

    # -- turn end ----------------------------------------------------------------------------
    def turn_end(self, reason: TurnEndReason) -> None:
        """End open lines and say why the turn stopped, when it stopped early (errors are
        shown by their ``error`` event)."""
        self.end_lines()
        style = self.notes.style
        if isinstance(reason, TurnAborted):
            self.note(style.yellow(f"⏹ aborted{_detail(reason.reason)}"))
        elif isinstance(reason, TurnMaxTokens):
            self.note(style.yellow("stopped: the answer reached the output token limit"))
        elif isinstance(reason, TurnCompleted) and reason.reason:
            self.note(style.yellow(f"stopped: {reason.reason}"))


def _detail(reason: str | None) -> str:
    return f" ({reason})" if reason and reason != "aborted" else ""
