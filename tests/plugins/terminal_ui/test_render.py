"""Rendering: the stream, tool calls and results, errors, turn ends, styles, closed pipes."""

from __future__ import annotations

import asyncio
import io
import os

import pytest

from dsh.values._chunks import (
    BlockEnd,
    BlockStart,
    Finish,
    FinishError,
    FinishStop,
    LlmFailure,
    ReasoningDelta,
    TextDelta,
    TokenUsage,
    ToolCallDelta,
    UsageChunk,
)
from dsh.values._content import Text
from dsh.values._events import (
    ErrorEvent,
    RetryEvent,
    SessionEvent,
    StepStart,
    ToolCallEvent,
    ToolResultEvent,
    TurnAborted,
    TurnCompleted,
    TurnDisposed,
    TurnError,
    TurnMaxTokens,
)
from dsh.values._rare_events import (
    ElidedResult,
    EventData,
    HistoryPrune,
    HistoryRewriteEnd,
    HistoryRewriteStart,
    HistorySummary,
    SteeringMessage,
)
from dsh_plugins.terminal_ui.progress import Progress, wants_progress
from dsh_plugins.terminal_ui.render import (
    Lines,
    Renderer,
    failure_text,
    one_line,
    preview,
    seconds,
)
from dsh_plugins.terminal_ui.style import Style, wants_color


def renderer(
    *, color: bool = False, split: bool = False
) -> tuple[Renderer, io.StringIO, io.StringIO]:
    answer, notes = io.StringIO(), io.StringIO()
    style = Style(color)
    out = Lines(answer, style)
    return Renderer(out, Lines(notes, style) if split else out), answer, notes


def event(type_: str, data: EventData) -> SessionEvent:
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
    r.event(event("error", ErrorEvent(1, 1, "slow down", "RATE_LIMIT")))
    r.event(event("error", ErrorEvent(1, 1, "odd")))
    r.event(event("steering/message", SteeringMessage(1, (Text("also  this\nplease"),))))
    r.event(event("compaction/start", HistoryRewriteStart(1, "manual", 12345)))
    r.event(event("compaction/end", HistoryRewriteEnd(12345)))
    r.event(event("compaction/start", HistoryRewriteStart(1, "threshold", 12345)))
    r.event(event("compaction/prune", HistoryPrune((ElidedResult("c1", "gone"),))))
    r.event(event("compaction/end", HistoryRewriteEnd(9000)))
    r.event(event("compaction/start", HistoryRewriteStart(2, "overflow", 20000)))
    r.event(event("compaction/prune", HistoryPrune((ElidedResult("c2", "-"),) * 2)))
    r.event(event("compaction/summary", HistorySummary(5, "S", 20000, 2345)))
    r.event(event("compaction/end", HistoryRewriteEnd(2345)))
    r.event(event("compaction/start", HistoryRewriteStart(3, "threshold", 5000)))
    r.event(event("compaction/end", HistoryRewriteEnd(5000, "summary failed: SERVER: boom")))
    r.event(event("step/start", StepStart(1, 1)))  # no terminal: no status line
    assert answer.getvalue().splitlines() == [
        "error: rate limited (slow down) [RATE_LIMIT]",
        "error: odd",
        "↪ steering: also this please",
        "compacting the conversation (12,345 tokens)…",
        "nothing to compact: the conversation (12,345 tokens) is all recent enough to keep "
        "as it is",
        "compacting the conversation (12,345 tokens)…",
        "compacted: 12,345 → about 9,000 tokens (elided 1 old tool result)",
        "the conversation (20,000 tokens) did not fit the model's context window: compacting…",
        "compacted: 20,000 → about 2,345 tokens "
        "(elided 2 old tool results; summarised the older conversation)",
        "compacting the conversation (5,000 tokens)…",
        "compaction: summary failed: SERVER: boom",
    ]


def test_failures_read_as_sentences() -> None:
    payload = (
        "the connection broke before [DONE]: ClientPayloadError: Response payload is not "
        "completed: <TransferEncodingError: 400, message='Not enough data to satisfy transfer "
        "length header.'>"
    )
    assert failure_text(payload, "STREAM_CLOSED") == (
        "the connection broke off in the middle of the answer "
        "(the connection broke before [DONE]: Response payload is not completed)"
    )
    assert failure_text("", "TIMEOUT") == "the model stopped answering"
    assert failure_text("", None) == "failed"
    assert failure_text("ValueError: bad", "ODD") == "bad"
    assert (seconds(3.0), seconds(0.5), seconds(2.75)) == ("3", "0.5", "2.8")


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


# -- retries, abandoned attempts, held answers, the status line ----------------------------------


class Tty(io.StringIO):
    def isatty(self) -> bool:
        return True


def label(progress: Progress) -> str | None:
    """What the status line says now (a call, so that checks do not narrow the type)."""
    return progress.label


class Clock:
    def __init__(self) -> None:
        self.now = 100.0

    def __call__(self) -> float:
        return self.now


def test_retries_are_visible() -> None:
    r, answer, _ = renderer()
    r.event(event("llm/retry", RetryEvent(1, 1, 1, "RATE_LIMIT", "slow down", 3.0, 429, 5)))
    r.event(event("llm/retry", RetryEvent(1, 1, 2, "TRANSPORT", "refused", 0.5)))
    r.event(event("llm/retry", RetryEvent(1, 1, 3, "ODD", "OSError: gone <x>", 1.25)))
    assert answer.getvalue().splitlines() == [
        "↻ 429 rate limited — retrying in 3 s (2/5)",
        "↻ cannot connect to the model's server — retrying in 0.5 s (attempt 3)",
        "↻ gone — retrying in 1.2 s (attempt 4)",
    ]


def failed() -> Finish:
    return Finish(FinishError(LlmFailure("stalled", "TIMEOUT")))


def test_an_answer_that_is_not_a_terminal_gets_only_succeeded_steps() -> None:
    answer, notes = io.StringIO(), io.StringIO()
    r = Renderer(Lines(answer, Style(False)), Lines(notes, Style(False)), hold_answer=True)
    r.chunk(BlockStart(0, "text"))
    r.chunk(TextDelta(0, "Partial answer"))
    r.chunk(failed())
    assert answer.getvalue() == ""
    r.chunk(BlockStart(0, "text"))
    r.chunk(TextDelta(0, "The real "))
    r.chunk(TextDelta(0, "answer."))
    assert answer.getvalue() == ""
    r.chunk(Finish(FinishStop()))
    r.chunk(TextDelta(0, "never finished"))
    r.turn_end(TurnAborted())
    assert answer.getvalue() == "The real answer.\n"


def test_on_a_terminal_an_abandoned_attempt_is_marked_and_a_fresh_line_starts() -> None:
    r, answer, _ = renderer()
    r.chunk(TextDelta(0, "Partial answer"))
    r.chunk(failed())
    r.chunk(failed())  # a failure with nothing shown marks nothing
    r.chunk(TextDelta(0, "Good."))
    r.chunk(Finish(FinishStop()))
    assert answer.getvalue() == "Partial answer [cut off]\nGood.\n"


async def test_the_status_line_says_what_is_waited_for_and_for_how_long() -> None:
    out, clock = Tty(), Clock()
    lines = Lines(out, Style(False))
    progress = Progress(lines, enabled=True, clock=clock, interval_s=0.001, delay_s=0.5)
    r = Renderer(lines, lines, show_reasoning=False, progress=progress)
    r.event(event("step/start", StepStart(1, 1)))
    r.event(event("step/start", StepStart(1, 1)))  # the same wait: the clock keeps running
    await asyncio.sleep(0.01)
    assert out.getvalue() == ""  # not before the delay: quick answers do not flicker
    clock.now += 3
    while "waiting" not in out.getvalue():  # noqa: ASYNC110 - the output, not an event, says it
        await asyncio.sleep(0.001)
    assert out.getvalue().startswith("\r⠋ waiting for the model · 3s\x1b[K")
    r.chunk(ReasoningDelta(0, "hidden"))  # a new label restarts the clock
    assert label(progress) == "thinking" and progress.text().endswith("thinking · 0s")
    r.chunk(TextDelta(0, "Hi"))  # the first token erases the line
    assert out.getvalue().endswith("\r\x1b[KHi") and label(progress) is None
    lines.status("over a line in progress")  # not drawn
    assert out.getvalue().endswith("Hi")
    r.chunk(Finish(FinishStop()))
    r.event(event("tool/call", ToolCallEvent(1, 1, "c1", "shell", "{}")))
    assert label(progress) == "running shell"
    r.event(event("tool/result", ToolResultEvent(1, 1, "c1", (Text("ok"),))))
    assert label(progress) is None
    r.event(event("compaction/start", HistoryRewriteStart(1, "manual", 10)))
    assert label(progress) == "compacting"
    r.turn_end(TurnCompleted())
    assert label(progress) is None
    await asyncio.sleep(0.01)  # the spinner task ends by itself


def test_the_status_line_needs_a_terminal(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("TERM", "xterm")
    assert wants_progress(Tty()) and not wants_progress(io.StringIO())
    monkeypatch.setenv("TERM", "dumb")
    assert not wants_progress(Tty())
    out = io.StringIO()
    lines = Lines(out, Style(False))
    Progress(lines, enabled=False).start("never drawn")  # no loop needed: nothing to do
    lines.closed = True
    lines.status("gone")
    assert out.getvalue() == ""
