"""BlockAssembler: a hypothesis state machine, generated messy streams, and the edge rules."""

from __future__ import annotations

import pytest
from hypothesis import given
from hypothesis import strategies as st
from hypothesis.stateful import (
    Bundle,
    RuleBasedStateMachine,
    consumes,
    invariant,
    precondition,
    rule,
)

from dsh.llm._assembler import BlockAssembler, assemble
from dsh.testing.strategies import StreamCase, chunk_streams, token_usages
from dsh.values._chunks import (
    BlockEnd,
    BlockStart,
    Finish,
    FinishMaxTokens,
    FinishStop,
    FinishToolCalls,
    ReasoningDelta,
    TextDelta,
    TokenUsage,
    ToolCallDelta,
    UsageChunk,
)
from dsh.values._content import Block, Reasoning, Text, ToolCall
from dsh.values._errors import LlmError


@given(chunk_streams())
def test_any_valid_stream_assembles_to_what_it_means(case: StreamCase) -> None:
    assert assemble(case.chunks) == case.expected


class AssemblerMachine(RuleBasedStateMachine):
    """Drives one assembler chunk by chunk and keeps a model of the blocks it must hold."""

    open_blocks = Bundle("open_blocks")

    def __init__(self) -> None:
        super().__init__()
        self.assembler = BlockAssembler()
        self.model: dict[int, Block] = {}
        self.order: list[int] = []
        self.closed: set[int] = set()
        self.usage: TokenUsage | None = None
        self.next_index = 0

    def _open(self, block: Block) -> int:
        index = self.next_index
        self.next_index += 1
        self.model[index] = block
        self.order.append(index)
        return index

    @rule(target=open_blocks, kind=st.sampled_from(["text", "reasoning"]), announce=st.booleans())
    def open_text(self, kind: str, announce: bool) -> int:
        index = self._open(Text("") if kind == "text" else Reasoning(""))
        if announce:
            self.assembler.push(BlockStart(index, kind))  # type: ignore[arg-type]
        else:  # delta-only: the first delta opens the block
            self.assembler.push((TextDelta if kind == "text" else ReasoningDelta)(index, ""))
        return index

    @rule(
        target=open_blocks,
        call_id=st.text("abc", min_size=1, max_size=3),
        name=st.sampled_from(["f", "g"]),
    )
    def open_tool_call(self, call_id: str, name: str) -> int:
        index = self._open(ToolCall(call_id, name, ""))
        self.assembler.push(ToolCallDelta(index, call_id, "", name))
        return index

    @rule(index=open_blocks, piece=st.text(max_size=5))
    def delta(self, index: int, piece: str) -> None:
        if index not in self.model:  # a block of an earlier stream
            return
        block = self.model[index]
        if isinstance(block, Text):
            self.model[index] = Text(block.text + piece)
            self.assembler.push(TextDelta(index, piece))
        elif isinstance(block, Reasoning):
            self.model[index] = Reasoning(block.text + piece)
            self.assembler.push(ReasoningDelta(index, piece))
        else:
            assert isinstance(block, ToolCall)
            self.model[index] = ToolCall(block.id, block.name, block.arguments + piece)
            self.assembler.push(ToolCallDelta(index, "", piece))  # empty id never overwrites

    @rule(index=consumes(open_blocks), authoritative=st.booleans())
    def end(self, index: int, authoritative: bool) -> None:
        if index not in self.model:  # a block of an earlier stream
            return
        if authoritative:  # block-end wins over what the deltas said
            self.model[index] = Text("authoritative")
        self.assembler.push(BlockEnd(index, self.model[index]))
        self.closed.add(index)

    @precondition(lambda self: bool(self.closed))
    @rule(data=st.data())
    def noise_after_end(self, data: st.DataObject) -> None:
        index = data.draw(st.sampled_from(sorted(self.closed)))
        self.assembler.push(TextDelta(index, "late"))
        self.assembler.push(BlockEnd(index, Text("second end")))

    @rule(usage=token_usages)
    def usage_chunk(self, usage: TokenUsage) -> None:
        self.assembler.push(UsageChunk(usage))
        self.usage = usage

    @invariant()
    def blocks_match_the_model(self) -> None:
        assert self.assembler.blocks() == [self.model[i] for i in self.order]
        assert self.assembler.usage == self.usage

    @rule(reason=st.sampled_from([FinishStop(), FinishToolCalls(), FinishMaxTokens()]))
    def finish(self, reason: FinishStop | FinishToolCalls | FinishMaxTokens) -> None:
        self.assembler.push(Finish(reason))
        result = self.assembler.result()
        expected = [self.model[i] for i in self.order]
        if isinstance(reason, FinishMaxTokens):
            expected = [b for b in expected if not isinstance(b, ToolCall)]
        assert list(result.message.content) == expected
        assert result.finish == reason
        self.assembler.push(TextDelta(0, "ignored after finish"))
        assert self.assembler.result() == result
        # Start a new stream; indexes keep counting, so old bundle entries are recognisably stale.
        self.assembler = BlockAssembler()
        self.model, self.order, self.closed, self.usage = {}, [], set(), None


TestAssemblerMachine = AssemblerMachine.TestCase


def test_missing_finish_means_stop_and_unclosed_call_gets_an_id() -> None:
    result = assemble([ToolCallDelta(3, "", '{"a"', "f"), ToolCallDelta(3, "", ":1}")])
    assert result.finish == FinishStop()
    assert result.message.content == (ToolCall("call-3", "f", '{"a":1}'),)
    assert result.usage is None


def test_a_delta_of_the_wrong_type_is_malformed() -> None:
    with pytest.raises(LlmError, match="MALFORMED_RESPONSE: a reasoning delta arrived for block 0"):
        assemble([TextDelta(0, "a"), ReasoningDelta(0, "b")])


def test_a_repeated_block_start_is_ignored() -> None:
    result = assemble([BlockStart(0, "text"), TextDelta(0, "a"), BlockStart(0, "text")])
    assert result.message.content == (Text("a"),)


def test_block_end_without_deltas_is_the_block() -> None:
    assert assemble([BlockEnd(2, Reasoning("r"))]).message.content == (Reasoning("r"),)
