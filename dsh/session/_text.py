"""Session events as people read them: one line of words per event, never a Python repr.

``dsh sessions show`` and ``dsh sessions resume`` print a log with :func:`describe`;
``dsh sessions list`` says how a session's last turn ended with :func:`outcome`.
"""

from __future__ import annotations

from typing import Any

import attrs

from dsh.values._content import Block, ToolCall, text_of
from dsh.values._events import (
    ErrorEvent,
    RawEventData,
    SessionEvent,
    StepBoundary,
    ToolCallEvent,
    TurnEnd,
    TurnEndReason,
    TurnError,
    TurnStart,
)
from dsh.values._rare_events import (
    FileBlob,
    FileChange,
    HistoryPrune,
    HistoryRewriteEnd,
    HistoryRewriteStart,
    HistorySummary,
    SessionRewind,
)

__all__ = ["brief", "describe", "file_change", "outcome"]


def brief(value: Any, limit: int = 70) -> str:
    """``value`` on one line, cut to ``limit`` characters."""
    text = " ".join(str(value).split())
    return text if len(text) <= limit else f"{text[: limit - 3]}..."


def outcome(reason: TurnEndReason) -> str:
    """How a turn ended, in words: ``completed``, ``error: SERVER: down``, ``aborted
    (interrupted)``."""
    if isinstance(reason, TurnError):
        return f"error: {reason.failure.code}: {reason.failure.message}"
    detail = getattr(reason, "reason", None)
    return f"{reason.type} ({detail})" if detail else reason.type


def describe(event: SessionEvent) -> str:
    """One line about ``event``: its text, its call, how its turn ended..."""
    data = event.data
    if isinstance(data, TurnEnd):
        return brief(f"turn {data.turn} {outcome(data.reason)}")
    if isinstance(data, TurnStart):
        return f"turn {data.turn}"
    if isinstance(data, StepBoundary):
        return f"turn {data.turn} step {data.step}"
    if isinstance(data, ErrorEvent):
        return brief(f"{data.message} [{data.code}]" if data.code else data.message)
    if isinstance(data, HistoryRewriteStart | HistoryPrune | HistorySummary | HistoryRewriteEnd):
        return brief(_rewrite(data))
    if isinstance(data, FileChange | FileBlob | SessionRewind):
        return brief(_files(data), 200)
    content: tuple[Block, ...] | None = getattr(data, "content", None)
    if content is not None:
        return _content(content, getattr(data, "model", None))
    if isinstance(data, ToolCallEvent):
        return brief(f"{data.name}({data.arguments})")
    return brief(_fields(data.fields if isinstance(data, RawEventData) else data))


def _rewrite(data: HistoryRewriteStart | HistoryPrune | HistorySummary | HistoryRewriteEnd) -> str:
    """A history rewrite (whichever plugin wrote it) as what the model now sees."""
    if isinstance(data, HistoryRewriteStart):
        return f"rewriting the history ({data.reason}): {data.tokens_before:,} tokens"
    if isinstance(data, HistoryPrune):
        return f"{len(data.elided)} old tool result(s) now shown as a note"
    if isinstance(data, HistorySummary):
        return f"summary of the history before seq {data.replaces_upto}: {data.summary}"
    failed = f"; {data.error}" if data.error else ""
    return f"history now about {data.tokens_after:,} tokens{failed}"


def file_change(change: FileChange) -> str:
    """A file change in words: ``changed /w/a.txt [edit_file]`` and what was not kept."""
    if change.error is not None:
        what = f"not changed ({change.error})"
    elif change.before is None:
        what = "created"
    elif change.after is None:
        what = "deleted"
    else:
        what = "changed"
    lost = f" (not restorable: {change.lost})" if change.lost else ""
    return f"{what} {change.path} [{change.tool}]{lost}"


def _files(data: FileChange | FileBlob | SessionRewind) -> str:
    if isinstance(data, FileChange):
        return file_change(data)
    if isinstance(data, FileBlob):
        return f"kept {data.size:,} bytes as {data.digest[:19]}"
    counts = [
        f"{len(data.restored)} restored",
        f"{len(data.conflicts)} conflict(s) kept",
        f"{len(data.lost)} not restorable",
        f"{data.shell_calls} shell command(s) not undone",
    ]
    return f"files of {data.source} rewound to before turn {data.to_turn}: " + ", ".join(counts)


def _content(content: tuple[Block, ...], model: str | None) -> str:
    calls = [f"{b.name}({b.arguments})" for b in content if isinstance(b, ToolCall)]
    text = text_of(content) or " ".join(calls) or "(empty)"
    return brief(f"{text} ({model})" if model else text)


def _fields(data: Any) -> str:
    """An attrs value as ``name value`` pairs (nested values alike); anything else as text."""
    if not attrs.has(type(data)):
        return str(data)
    parts = [
        f"{field.name} {_fields(value)}"
        for field in attrs.fields(type(data))
        if (value := getattr(data, field.name)) is not None and value != ()
    ]
    return ", ".join(parts) or type(data).__name__
