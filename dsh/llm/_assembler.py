"""BlockAssembler: the single fold from a chunk stream to a message, its usage and its finish.

Tolerant by design: a delta may open its block without a ``block-start``; ``block-end`` is
authoritative and final (later deltas and a second end for the same index are ignored); chunks
after ``finish`` are ignored. On ``max-tokens`` every tool call is dropped, since a truncated
call is unsafe to run. The cost is linear in the stream: text is joined once, at the end.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable

from attrs import frozen

from dsh.llm._batches import Deltas
from dsh.values._chunks import (
    BlockEnd,
    BlockStart,
    BlockType,
    Finish,
    FinishMaxTokens,
    FinishReason,
    FinishStop,
    ReasoningDelta,
    StreamChunk,
    TextDelta,
    TokenUsage,
    ToolCallDelta,
    UsageChunk,
)
from dsh.values._content import Block, Message, Reasoning, Text, ToolCall
from dsh.values._errors import LlmError
from dsh.values._value import Value

__all__ = ["AssembledMessage", "BlockAssembler", "assemble"]


@frozen(repr=False, eq=False)
class AssembledMessage(Value):
    """What one model call produced."""

    message: Message
    usage: TokenUsage | None
    finish: FinishReason


class _Partial:
    __slots__ = ("block_type", "id", "name", "parts")

    def __init__(self, block_type: BlockType) -> None:
        self.block_type = block_type
        self.parts: list[str] = []
        self.id = ""
        self.name = ""

    def build(self, index: int) -> Block:
        joined = "".join(self.parts)
        if self.block_type == "text":
            return Text(joined)
        if self.block_type == "reasoning":
            return Reasoning(joined)
        return ToolCall(self.id or f"call-{index}", self.name, joined)


class BlockAssembler:
    """Feed chunks with :meth:`push`; read the outcome with :meth:`result`."""

    def __init__(self) -> None:
        self._open: dict[int, _Partial] = {}
        self._closed: dict[int, Block] = {}
        self._order: list[int] = []
        self.usage: TokenUsage | None = None
        self.finish: FinishReason | None = None
        self._handlers: dict[type, Callable[..., None]] = {
            TextDelta: self._text,
            ReasoningDelta: self._reasoning,
            ToolCallDelta: self._tool_call,
            BlockStart: self._start,
            BlockEnd: self._end,
            UsageChunk: self._usage,
            Finish: self._finish,
        }

    def push(self, chunk: StreamChunk) -> None:
        if self.finish is None:
            self._handlers[type(chunk)](chunk)

    def push_deltas(self, run: Deltas) -> None:
        """What pushing each delta ``run`` stands for does, at once: they are of one block and
        one kind, so the assembler takes all of them or refuses the first."""
        if self.finish is None and run.texts:
            kind: BlockType = "text" if run.kind is TextDelta else "reasoning"
            partial = self._partial(run.index, kind)
            if partial is not None:
                partial.parts += run.texts

    def _partial(self, index: int, block_type: BlockType) -> _Partial | None:
        """The open block at ``index`` (opened now if new), or ``None`` once it has ended."""
        partial = self._open.get(index)
        if partial is None:
            if index in self._closed:
                return None
            partial = self._open[index] = _Partial(block_type)
            self._order.append(index)
        elif partial.block_type != block_type:
            raise LlmError.of(
                "MALFORMED_RESPONSE",
                f"a {block_type} delta arrived for block {index}, which is {partial.block_type}",
            )
        return partial

    def _start(self, chunk: BlockStart) -> None:
        if chunk.index not in self._open:
            self._partial(chunk.index, chunk.block_type)

    def _text(self, chunk: TextDelta) -> None:
        partial = self._partial(chunk.index, "text")
        if partial is not None:
            partial.parts.append(chunk.text)

    def _reasoning(self, chunk: ReasoningDelta) -> None:
        partial = self._partial(chunk.index, "reasoning")
        if partial is not None:
            partial.parts.append(chunk.text)

    def _tool_call(self, chunk: ToolCallDelta) -> None:
        partial = self._partial(chunk.index, "tool-call")
        if partial is not None:
            partial.id = chunk.id or partial.id
            partial.name = chunk.name or partial.name
            partial.parts.append(chunk.arguments_delta)

    def _end(self, chunk: BlockEnd) -> None:
        if chunk.index in self._closed:
            return
        if self._open.pop(chunk.index, None) is None:
            self._order.append(chunk.index)
        self._closed[chunk.index] = chunk.block

    def _usage(self, chunk: UsageChunk) -> None:
        self.usage = chunk.usage

    def _finish(self, chunk: Finish) -> None:
        self.finish = chunk.reason

    def blocks(self) -> list[Block]:
        """The blocks so far in first-seen order; open blocks are built from their deltas."""
        closed, open_ = self._closed, self._open
        return [
            closed[index] if index in closed else open_[index].build(index) for index in self._order
        ]

    def result(self) -> AssembledMessage:
        finish = self.finish or FinishStop()
        blocks = self.blocks()
        if isinstance(finish, FinishMaxTokens):
            blocks = [b for b in blocks if not isinstance(b, ToolCall)]
        return AssembledMessage(Message("assistant", tuple(blocks)), self.usage, finish)


def assemble(chunks: Iterable[StreamChunk]) -> AssembledMessage:
    """Fold a whole chunk sequence."""
    assembler = BlockAssembler()
    for chunk in chunks:
        assembler.push(chunk)
    return assembler.result()
