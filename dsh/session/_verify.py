"""Replay verification: do the logged chunks give exactly the logged messages?

Every ``assistant/message`` of a session was assembled from the ``assistant/chunk`` events
logged before it in its step. :func:`verify` folds those chunks through the same
:class:`~dsh.llm._assembler.BlockAssembler` and compares the outcome (content and usage) with the
logged message — an integrity check of the log.

A step may hold several attempts: one that failed and was retried has chunks but no message.
Attempts are told apart as the loop tells them apart: a failing finish (``error``, ``aborted``,
an empty ``stop``) ends one — the loop logs such a finish when an adapter raises, too — and so
does an ``llm/retry`` event of the step (the loop logs one before each retry). A log in
which an attempt ended by a raise without either marker (written before the loop logged that
finish) cannot be split, and replay reports a mismatch for that step; so it does for a message
a plugin rewrote in ``dsh_agent_step_result``.
"""

from __future__ import annotations

from collections.abc import Iterable

from attrs import frozen

from dsh.llm._assembler import AssembledMessage, BlockAssembler
from dsh.values._chunks import FinishAborted, FinishError, FinishStop, TokenUsage
from dsh.values._content import Block, Reasoning, Text
from dsh.values._errors import LlmError
from dsh.values._events import AssistantChunk, AssistantMessage, RetryEvent, SessionEvent, StepEnd
from dsh.values._value import Value

__all__ = ["Mismatch", "ReplayReport", "verify"]


@frozen(repr=False, eq=False)
class Mismatch(Value):
    """The message logged at ``seq`` (turn ``turn``, step ``step``) is not what its chunks,
    ``first_chunk``..``last_chunk`` (seqs; ``None`` when there were none), assemble to."""

    seq: int
    turn: int
    step: int
    first_chunk: int | None
    last_chunk: int | None
    detail: str

    def __str__(self) -> str:
        chunks = (
            "no chunks"
            if self.first_chunk is None
            else f"chunks seq {self.first_chunk}..{self.last_chunk}"
        )
        return (
            f"seq {self.seq} (turn {self.turn}, step {self.step}): the assistant/message differs "
            f"from its {chunks}: {self.detail}"
        )


@frozen(repr=False, eq=False)
class ReplayReport(Value):
    """What :func:`verify` found: ``verified`` messages matched, ``mismatches`` did not;
    ``unanswered`` steps had chunks but no message (failed, aborted or interrupted)."""

    verified: int
    mismatches: tuple[Mismatch, ...]
    unanswered: int

    @property
    def ok(self) -> bool:
        return not self.mismatches


class _Attempt:
    """The chunks of one model call, folded as they come."""

    def __init__(self) -> None:
        self.assembler = BlockAssembler()
        self.seqs: list[int] = []
        self.error: str | None = None

    def push(self, seq: int, data: AssistantChunk) -> None:
        self.seqs.append(seq)
        if self.error is None:
            try:
                self.assembler.push(data.chunk)
            except LlmError as exc:
                self.error = f"the chunks do not assemble: {exc}"

    @property
    def failed(self) -> bool:
        """Whether the loop would have rejected this attempt once it finished."""
        finish = self.assembler.finish
        if finish is None:
            return False
        if isinstance(finish, FinishError | FinishAborted):
            return True
        return isinstance(finish, FinishStop) and _is_empty(self.assembler.result())


def _is_empty(result: AssembledMessage) -> bool:
    return all(isinstance(b, Text | Reasoning) and not b.text for b in result.message.content)


def verify(events: Iterable[SessionEvent]) -> ReplayReport:
    """Re-assemble every step's last attempt and compare it with the logged message."""
    attempts: dict[tuple[int, int], _Attempt] = {}
    verified, unanswered = 0, 0
    mismatches: list[Mismatch] = []
    for event in events:
        data = event.data
        if isinstance(data, AssistantChunk):
            attempt = attempts.setdefault((data.turn, data.step), _Attempt())
            if attempt.failed:
                attempt = attempts[data.turn, data.step] = _Attempt()
            attempt.push(event.seq, data)
        elif isinstance(data, RetryEvent):
            attempts.pop((data.turn, data.step), None)
        elif isinstance(data, AssistantMessage):
            mismatch = _compare(event, data, attempts.pop((data.turn, data.step), _Attempt()))
            if mismatch is None:
                verified += 1
            else:
                mismatches.append(mismatch)
        elif isinstance(data, StepEnd):
            unanswered += attempts.pop((data.turn, data.step), None) is not None
    return ReplayReport(verified, tuple(mismatches), unanswered)


def _compare(event: SessionEvent, data: AssistantMessage, attempt: _Attempt) -> Mismatch | None:
    seqs = attempt.seqs
    first, last = (seqs[0], seqs[-1]) if seqs else (None, None)
    detail = attempt.error or _difference(
        data.content, data.usage, attempt.assembler.result() if seqs else None
    )
    if detail is None:
        return None
    return Mismatch(event.seq, data.turn, data.step, first, last, detail)


def _difference(
    logged: tuple[Block, ...], usage: TokenUsage | None, replayed: AssembledMessage | None
) -> str | None:
    """How the replayed message differs from the logged one, or ``None`` if it does not."""
    got = () if replayed is None else replayed.message.content
    if len(got) != len(logged):
        return f"{len(logged)} block(s) logged, {len(got)} replayed"
    for index, (want, have) in enumerate(zip(logged, got, strict=True)):
        if want != have:
            return (
                f"block {index}: logged {_show(want)}, replayed {_show(have)}{_where(want, have)}"
            )
    replayed_usage = None if replayed is None else replayed.usage
    if usage != replayed_usage:
        return f"usage: logged {usage}, replayed {replayed_usage}"
    return None


def _show(block: Block, limit: int = 60) -> str:
    text = repr(block)
    return text if len(text) <= limit else f"{text[: limit - 3]}..."


def _where(want: Block, have: Block) -> str:
    """Where two texts of the same kind first differ."""
    if not (isinstance(want, Text | Reasoning) and isinstance(have, type(want))):
        return ""
    pairs = enumerate(zip(want.text, have.text, strict=False))
    position = next((i for i, (a, b) in pairs if a != b), min(len(want.text), len(have.text)))
    return f" (first difference at character {position})"
