"""Rendering: the stream, tool calls and results, errors, turn ends, styles, closed pipes."""

from __future__ import annotations

import io
import os

import pytest

from dsh.chunks import (
    BlockEnd,
    BlockStart,
    Finish,
    FinishStop,
    LlmFailure,
    ReasoningDelta,
    TextDelta,
    TokenUsage,
    ToolCallDelta,
    UsageChunk,
)
from dsh.content import Text
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
    TurnDisposed,
    TurnError,
    TurnMaxTokens,
)
from dsh_plugins.terminal_ui.render import Lines, Renderer, one_line, preview
from dsh_plugins.terminal_ui.style import Style, wants_color


def renderer(
    *, color: bool = False, split: bool = False
) -> tuple[Renderer, io.StringIO, io.StringIO]:
    answer, notes = io.StringIO(), io.StringIO()
    style = Style(color)
    out = Lines(answer, style)
    return Renderer(out, Lines(notes, style) if split else out), answer, notes


def event(type_: str, data: object) -> SessionEvent:
    return SessionEvent(type_, 0, 0.0, data)


def test_text_and_reasoning_stream_on_their_own_lines() -> None:
    r, answer, _ = renderer()
    for chunk in (
        BlockStart(0, "reasoning"),
        ReasoningDelta(0, "Let me "),
        ReasoningDelta(0, "think."),
        BlockStart(1, "text"),
        TextDelta(1, "Hello"),
        TextDelta(1, " world"),
        BlockEnd(1, Text("Hello world")),
        UsageChunk(TokenUsage()),
        Finish(FinishStop()),
    ):
        r.chunk(chunk)
    assert answer.getvalue() == "thinking: Let me think.\nHello world\n"


def test_reasoning_is_dimmed_and_can_be_hidden() -> None:
    r, answer, _ = renderer(color=True)
    r.chunk(BlockStart(0, "reasoning"))
    r.chunk(ReasoningDelta(0, "hmm"))
    assert answer.getvalue() == "\x1b[2mthinking: \x1b[0m\x1b[2mhmm\x1b[0m"
    r.show_reasoning = False
    r.chunk(BlockStart(1, "reasoning"))
    r.chunk(ReasoningDelta(1, "hidden"))
    assert "hidden" not in answer.getvalue()


def test_split_streams_keep_the_answer_clean() -> None:
    r, answer, notes = renderer(split=True)
    r.chunk(BlockStart(0, "reasoning"))
    r.chunk(ReasoningDelta(0, "pondering"))
    r.chunk(BlockStart(1, "text"))
    r.chunk(TextDelta(1, "Let me check."))
    r.chunk(ToolCallDelta(2, "c1", '{"te', name="word_count"))  # shown by its tool/call event
    r.event(event("tool/call", ToolCallEvent(1, 1, "c1", "word_count", '{"text": "a b"}')))
    r.event(event("tool/result", ToolResultEvent(1, 1, "c1", (Text("2"),))))
    r.chunk(BlockStart(0, "text"))
    r.chunk(TextDelta(0, "Two words."))
    r.turn_end(TurnCompleted())
    assert answer.getvalue() == "Let me check.\nTwo words.\n"
    assert notes.getvalue() == ('thinking: pondering\n→ word_count {"text": "a b"}\n  ← 2\n')


def test_tool_results_are_previewed_and_errors_stand_out() -> None:
    r, answer, _ = renderer()
    long = "\n".join(f"line {i}" for i in range(10))
    r.event(event("tool/result", ToolResultEvent(1, 1, "c1", (Text(long),))))
    r.event(event("tool/result", ToolResultEvent(1, 1, "c2", (Text("Error: no"),), True)))
    assert answer.getvalue().splitlines() == [
        "  ← line 0",
        "    line 1",
        "    line 2",
        "    … 7 more lines",
        "  ✗ Error: no",
    ]


def test_errors_steering_and_compaction_are_noted() -> None:
    r, answer, _ = renderer()
    r.event(event("error", ErrorEvent(1, 1, "rate limited", "RATE_LIMIT")))
    r.event(event("error", ErrorEvent(1, 1, "odd")))
    r.event(event("steering/message", SteeringMessage(1, (Text("also  this\nplease"),))))
    r.event(event("compaction/start", CompactionStart(1, "manual", 12345)))
    r.event(event("compaction/end", CompactionEnd(2345)))
    r.event(event("compaction/end", CompactionEnd(2345, "summary failed: boom")))
    r.event(event("step/start", None))  # not shown
    assert answer.getvalue().splitlines() == [
        "error: rate limited [RATE_LIMIT]",
        "error: odd",
        "↪ steering: also this please",
        "compacting the conversation (12,345 tokens)…",
        "compacted: now about 2,345 tokens",
        "compaction: summary failed: boom",
    ]


@pytest.mark.parametrize(
    ("reason", "shown"),
    [
        (TurnAborted("interrupted"), "⏹ aborted (interrupted)"),
        (TurnAborted(), "⏹ aborted"),
        (TurnAborted("aborted"), "⏹ aborted"),
        (TurnMaxTokens(), "stopped: the answer reached the output token limit"),
        (TurnCompleted("budget: max_steps_per_turn reached (2 of 2)"), "stopped: budget:"),
        (TurnCompleted(), ""),
        (TurnError(LlmFailure("x", "SERVER")), ""),  # its error event says it
        (TurnDisposed(), ""),
    ],
)
def test_turn_ends_say_why_a_turn_stopped_early(reason: object, shown: str) -> None:
    r, answer, _ = renderer()
    r.chunk(TextDelta(0, "partial"))
    r.turn_end(reason)  # type: ignore[arg-type]
    assert answer.getvalue().startswith("partial\n")
    assert answer.getvalue().removeprefix("partial\n").startswith(shown)
    assert bool(shown) == (answer.getvalue() != "partial\n")


def test_one_line_and_preview() -> None:
    assert one_line("a\n  b\tc ") == "a b c"
    assert one_line("x" * 10, 5) == "xxxx…"
    assert preview("") == ["(empty)"]
    assert preview("a\n\nb\nc\nd", max_lines=3) == ["a", "b", "c", "… 1 more line"]


def test_styles_and_when_colour_is_used(monkeypatch: pytest.MonkeyPatch) -> None:
    plain, colour = Style(False), Style(True)
    assert plain.bold("x") == plain.red("x") == plain.yellow("x") == "x"
    assert colour.bold("x") == "\x1b[1mx\x1b[0m"
    assert colour.red("x") == "\x1b[31mx\x1b[0m"
    assert colour.yellow("x") == "\x1b[33mx\x1b[0m"
    assert colour.dim("") == ""

    class Terminal(io.StringIO):
        def isatty(self) -> bool:
            return True

    monkeypatch.setenv("TERM", "xterm")
    assert wants_color(Terminal()) and not wants_color(io.StringIO())
    monkeypatch.setenv("TERM", "dumb")
    assert not wants_color(Terminal())
    monkeypatch.setenv("TERM", "xterm")
    monkeypatch.setenv("NO_COLOR", "1")
    assert not wants_color(Terminal())


def test_a_closed_pipe_stops_the_output_and_is_reported_once() -> None:
    read, write = os.pipe()
    stream = os.fdopen(write, "w")
    closed: list[bool] = []
    lines = Lines(stream, Style(False), on_closed=lambda: closed.append(True))
    lines.write("first\n")
    assert os.read(read, 100) == b"first\n"
    os.close(read)
    lines.write("nobody reads this")
    lines.write("nor this")
    assert closed == [True] and lines.closed
    stream.close()  # the descriptor now leads to /dev/null: closing is quiet


def test_a_closed_stream_without_descriptor_is_just_dropped() -> None:
    class Gone(io.StringIO):
        def write(self, text: str) -> int:
            raise BrokenPipeError

    lines = Lines(Gone(), Style(False))
    lines.write("x")
    assert lines.closed
