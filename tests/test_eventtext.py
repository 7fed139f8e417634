"""Session events in words: what ``dsh sessions show`` prints, never a Python repr."""

from __future__ import annotations

from typing import Any

from dsh.session._text import brief, describe, outcome
from dsh.values._chunks import LlmFailure, TextDelta
from dsh.values._content import Text, ToolCall
from dsh.values._events import (
    AssistantChunk,
    AssistantMessage,
    ErrorEvent,
    RawEventData,
    SessionEvent,
    StepBoundary,
    ToolCallEvent,
    TurnAborted,
    TurnCompleted,
    TurnEnd,
    TurnError,
    TurnStart,
)
from dsh.values._rare_events import (
    ElidedResult,
    HistoryPrune,
    HistoryRewriteEnd,
    HistoryRewriteStart,
    HistorySummary,
    WithdrawnMessage,
)


def said(type_: str, data: Any) -> str:
    return describe(SessionEvent(type_, 0, 0.0, data))


def test_turns_steps_and_outcomes_in_words() -> None:
    assert said("turn/start", TurnStart(2)) == "turn 2"
    assert said("step/end", StepBoundary(2, 3)) == "turn 2 step 3"
    assert said("turn/end", TurnEnd(1, TurnCompleted())) == "turn 1 completed"
    assert said("turn/end", TurnEnd(1, TurnCompleted("budget"))) == "turn 1 completed (budget)"
    assert outcome(TurnAborted("interrupted")) == "aborted (interrupted)"
    assert outcome(TurnError(LlmFailure("down", "SERVER"))) == "error: SERVER: down"


def test_messages_calls_errors_and_the_rest() -> None:
    answer = AssistantMessage(1, 1, (Text("Hi"),), model="m")
    assert said("assistant/message", answer) == "Hi (m)"
    calls = AssistantMessage(1, 1, (ToolCall("c", "echo", '{"a": 1}'),))
    assert said("assistant/message", calls) == 'echo({"a": 1})'
    assert said("assistant/message", AssistantMessage(1, 1, ())) == "(empty)"
    assert said("tool/call", ToolCallEvent(1, 1, "c", "echo", "{}")) == "echo({})"
    assert said("error", ErrorEvent(1, 1, "down", "SERVER")) == "down [SERVER]"
    assert said("error", ErrorEvent(1, 1, "odd")) == "odd"
    assert said("compaction/end", HistoryRewriteEnd(1200)) == "history now about 1,200 tokens"
    failed = HistoryRewriteEnd(9, "summary failed: down")
    assert said("compaction/end", failed) == "history now about 9 tokens; summary failed: down"
    start = HistoryRewriteStart(2, "manual", 12345)
    assert said("compaction/start", start) == "rewriting the history (manual): 12,345 tokens"
    pruned = HistoryPrune((ElidedResult("c1", "gone"), ElidedResult("c2", "gone")))
    assert said("compaction/prune", pruned) == "2 old tool result(s) now shown as a note"
    summary = HistorySummary(40, "we  talked\nabout x", 900, 100)
    assert said("compaction/summary", summary) == (
        "summary of the history before seq 40: we talked about x"
    )
    assert said("inbox/withdrawn", WithdrawnMessage(4)) == "queued_seq 4"
    chunk = AssistantChunk(1, 1, TextDelta(0, "x"))
    assert said("assistant/chunk", chunk) == "turn 1, step 1, chunk index 0, text x"
    assert said("x/empty", TurnCompleted()) == "TurnCompleted"
    assert said("x/plain", "just text") == "just text"
    assert said("gone/plugin", RawEventData({"kept": [1]})) == "{'kept': [1]}"
    assert brief("a\nb " * 40, 10) == "a b a b..."
