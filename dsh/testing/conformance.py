"""Adapter conformance kit: the StreamChunk contract, checked on an LLM adapter against the
bundled DeepSeek mock server.

For every mock-server scenario (:data:`CASES`: answers, reasoning, tool calls, usage
placements, keep-alives, and each fault) :func:`run_case` streams one call straight from the
adapter and checks the StreamChunk rules (:func:`check_stream`), what the stream means (the
answer the wire carried, or the canonical failure), then runs one turn of a real agent on it
(``Harness`` + ``agent_loop.create`` + ``send`` + ``wait_idle``) and checks the turn's outcome
and its session log. Any problem raises :class:`ConformanceError`, which lists them all::

    import pytest
    from dsh.testing.conformance import CASES, ConformanceCase, Endpoint, adapter_target, run_case

    def make_adapter(endpoint: Endpoint) -> MyAdapter:
        return MyAdapter(endpoint.base_url, endpoint.api_key, endpoint.idle_timeout_s)

    TARGET = adapter_target("my-provider/deepseek-v4-flash", make_adapter)

    @pytest.mark.parametrize("case", CASES, ids=str)
    async def test_conformance(case: ConformanceCase) -> None:
        await run_case(TARGET, case)

(or subclass :class:`AdapterContract`). :func:`plugin_target` tests a plugin through its
config section instead. Two adapters for the same endpoint can be compared case by case with
:func:`compare_reports`. Needs pytest and pytest-asyncio. See ``docs/conformance.md``.
"""

from __future__ import annotations

import asyncio
import itertools
import json
import re
from collections.abc import AsyncIterator, Callable, Mapping, Sequence
from contextlib import asynccontextmanager
from typing import Any, Literal

import attrs
import pytest
from attrs import field, frozen

from dsh.app._harness import Harness
from dsh.hooks._markers import hookimpl
from dsh.llm._assembler import AssembledMessage, assemble
from dsh.llm._service import LlmAdapter
from dsh.llm._sse import parse_sse
from dsh.session._verify import verify
from dsh.testing.mockserver import MockServer, Scenario, completion_json, reply
from dsh.testing.mockserver import anthropic as anthropic_wire
from dsh.testing.mockserver.anthropic_checks import openai_body, thinking_on
from dsh.testing.mockserver.catalogue import ScenarioSpec, resolve
from dsh.testing.mockserver.conversation import in_thinking_mode, thinking_enabled
from dsh.testing.mockserver.validate import serving_model
from dsh.testing.mockserver.wire import frame_bytes
from dsh.tools._registry import Tool, ToolExecution
from dsh.values._agent import AgentOptions
from dsh.values._chunks import (
    BlockEnd,
    BlockStart,
    BlockType,
    Finish,
    FinishAborted,
    FinishError,
    FinishMaxTokens,
    FinishReason,
    FinishStop,
    FinishToolCalls,
    LlmFailure,
    ReasoningDelta,
    StreamChunk,
    TextDelta,
    TokenUsage,
    ToolCallDelta,
    UsageChunk,
)
from dsh.values._content import Block, Message, Reasoning, Text, ToolCall
from dsh.values._errors import LlmError
from dsh.values._events import (
    AssistantChunk,
    AssistantMessage,
    ErrorEvent,
    SessionEvent,
    TurnAborted,
    TurnCompleted,
    TurnEnd,
    TurnEndReason,
    TurnError,
    TurnMaxTokens,
)
from dsh.values._request import LlmRequest, ToolSchema
from dsh.values._value import Value

__all__ = [
    "ANTHROPIC_PATH",
    "API_KEY",
    "CASES",
    "DEADLINE_S",
    "MODEL",
    "PROMPT",
    "QUOTED_CHARS",
    "STRICT_TOOLS",
    "WIRES",
    "AdapterContract",
    "AdapterTarget",
    "Agreement",
    "CaseKind",
    "CaseReport",
    "ConformanceCase",
    "ConformanceError",
    "Endpoint",
    "Wire",
    "adapter_target",
    "check_stream",
    "compare_reports",
    "compare_wires",
    "expected_answer",
    "headline",
    "plugin_target",
    "run_case",
]

#: The bearer token the mock server requires in the kit's runs.
API_KEY = "sk-conformance"
#: What the user says in every case.
PROMPT = "hi"
#: How long one stream, or one agent turn, may take before the kit gives up on it.
DEADLINE_S = 20.0
_IDLE_S = 5.0
_STALL_IDLE_S = 0.5
_ABORT_REASON = "conformance abort"
_CODE = re.compile(r"[A-Z][A-Z0-9_]*")


# -- what the kit runs against -------------------------------------------------------------


@frozen(repr=False, eq=False)
class Endpoint(Value):
    """Where the adapter under test must send its requests, for one run: the mock server's
    ``base_url`` (``POST {base_url}/chat/completions``), the ``api_key`` it requires, the
    ``idle_timeout_s`` to use (short in the stall cases) and, in the queued cases, the
    ``first_data_timeout_s`` (how long keep-alive comments may hold off the first data event;
    ``None``: the adapter's default, which must be long — DeepSeek queues for up to 10 minutes)."""

    base_url: str
    api_key: str
    idle_timeout_s: float
    first_data_timeout_s: float | None = None

    def section(self, **options: Any) -> dict[str, Any]:
        """A config section in the shape the built-in adapters share (``base_url``,
        ``api_key``, ``idle_timeout_s``, and ``first_data_timeout_s`` when set), plus
        ``options``."""
        base: dict[str, Any] = {"base_url": self.base_url, "api_key": self.api_key}
        if self.first_data_timeout_s is not None:
            base["first_data_timeout_s"] = self.first_data_timeout_s
        return {**base, "idle_timeout_s": self.idle_timeout_s, **options}


Wire = Literal["openai", "anthropic"]
"""A wire format the mock server speaks: DeepSeek's chat completions (``openai``, at the
server's root) or the Anthropic Messages API (``anthropic``, under :data:`ANTHROPIC_PATH`)."""
WIRES: tuple[Wire, ...] = ("openai", "anthropic")
#: Where the mock server's Messages endpoint lives: ``POST {url}/anthropic/v1/messages``, as
#: DeepSeek's Anthropic-format base URL is ``https://api.deepseek.com/anthropic``.
ANTHROPIC_PATH = "/anthropic"


@frozen(repr=False, eq=False)
class AdapterTarget(Value):
    """The adapter under test: the model id it serves, and how to build a harness in which
    it serves that id against an :class:`Endpoint` — the ``plugins`` to load and the
    ``config``. Build one with :func:`adapter_target` or :func:`plugin_target`. ``wire``: the
    format it speaks; an ``anthropic`` target's endpoint is the mock's Messages base URL."""

    model: str
    plugins: Callable[[Endpoint], Sequence[object]]
    config: Callable[[Endpoint], Mapping[str, Any]] = lambda endpoint: {}
    wire: Wire = "openai"


class _Serves:
    """A host plugin that registers one adapter for one model id."""

    def __init__(self, model: str, adapter: LlmAdapter) -> None:
        self.model = model
        self.adapter = adapter

    @hookimpl
    def dsh_register_llm_adapters(self, register: Callable[..., Any]) -> None:
        register([self.model], self.adapter)


def adapter_target(model: str, factory: Callable[[Endpoint], LlmAdapter]) -> AdapterTarget:
    """Test the adapter ``factory(endpoint)`` builds, registered for ``model``. The kit closes
    it (``aclose``) with its harness."""
    return AdapterTarget(model, lambda endpoint: [_Serves(model, factory(endpoint))])


def plugin_target(model: str, plugin: object, section: str, **options: Any) -> AdapterTarget:
    """Test the adapter ``plugin`` registers for ``model``, configured by ``[section]``
    (``base_url``, ``api_key`` and ``idle_timeout_s`` from the endpoint, plus ``options``)."""
    return AdapterTarget(
        model, lambda endpoint: [plugin], lambda endpoint: {section: endpoint.section(**options)}
    )


# -- the cases -----------------------------------------------------------------------------

CaseKind = Literal["answer", "fault", "abort"]
Agreement = Literal["chunks", "outcome"]
"""What adapters of different wire formats must agree on in a case: the same ``chunks``
(the wires carry the same content, in the same order), or only the same ``outcome``."""


@frozen(repr=False, eq=False)
class ConformanceCase(Value):
    """One mock-server scenario and what it must come to.

    ``answer`` cases must stream the answer the wire carried (:func:`expected_answer`);
    ``fault`` cases must fail with ``code`` after streaming exactly ``partial`` (the text and
    reasoning the wire delivered before the fault); the ``abort`` case cancels the consumer
    mid-stream, which must close the response and let the cancellation through. ``thinking``
    is sent with every request of the case (``None``: left to the server, whose default is
    on). ``tools`` are offered with every request (the agent gets tools of those schemas).
    ``stalls`` cases run with a short idle timeout; ``first_data_timeout_s`` is set in the
    queued cases. ``wires``: the wire formats the case exists in (framing only the
    chat-completions wire has is ``("openai",)``); ``agreement``: what adapters of two wire
    formats must agree on (:func:`compare_wires`).
    """

    name: str
    scenario: ScenarioSpec
    kind: CaseKind = "answer"
    thinking: bool | None = False
    code: str | None = None
    partial: str = ""
    stalls: bool = False
    tools: tuple[ToolSchema, ...] = ()
    first_data_timeout_s: float | None = None
    wires: tuple[Wire, ...] = WIRES
    agreement: Agreement = "chunks"

    def __str__(self) -> str:
        return self.name

    @property
    def idle_timeout_s(self) -> float:
        return _STALL_IDLE_S if self.stalls else _IDLE_S


def _answer(name: str, thinking: bool | None = False, **params: Any) -> ConformanceCase:
    return ConformanceCase(name, {"name": name, **params} if params else name, thinking=thinking)


def _fault(name: str, code: str, partial: str = "", stalls: bool = False) -> ConformanceCase:
    return ConformanceCase(name, name, "fault", code=code, partial=partial, stalls=stalls)


#: The tools of the ``strict-tools`` case: a plain one (which the scripted model calls) beside a
#: strict one whose schema leaves objects open (a nested object, an array of objects, an
#: optional property). Strict mode wants every function strict and every object closed, so an
#: adapter must send both closed, to the ``/beta`` base URL.
STRICT_TOOLS = (
    ToolSchema(
        "weather",
        "The weather in a city.",
        {"type": "object", "properties": {"city": {"type": "string"}}, "required": ["city"]},
    ),
    ToolSchema(
        "book_flight",
        "Book a flight.",
        {
            "type": "object",
            "properties": {
                "route": {
                    "type": "object",
                    "properties": {"from": {"type": "string"}, "to": {"type": "string"}},
                    "required": ["from"],
                },
                "passengers": {
                    "type": "array",
                    "items": {
                        "type": "object",
                        "properties": {"name": {"type": "string"}, "age": {"type": "integer"}},
                    },
                },
                "note": {"type": "string"},
            },
            "required": ["route"],
        },
        strict=True,
    ),
)


_PARTIAL = "Partial answer"
_OPENAI_ONLY: tuple[Wire, ...] = ("openai",)


def _slow_answer() -> Scenario:
    return attrs.evolve(reply(text="word " * 100, name="slow"), interval_s=0.02)


#: Every scenario of the mock server, each as a case.
CASES: tuple[ConformanceCase, ...] = (
    _answer("scripted", thinking=True),
    _answer("text"),
    _answer("text-v4"),
    _answer("thinking", thinking=True),
    _answer("thinking-length", thinking=True),
    _answer("tool-calls-parallel"),
    _answer("tool-call-thinking", thinking=True),
    # The Messages API streams blocks one after the other: the interleaved fragments arrive
    # call by call.
    attrs.evolve(_answer("tool-calls-one-chunk"), agreement="outcome"),
    _answer("usage-trailing"),
    _answer("usage-running", thinking=True),
    _answer("keep-alive", thinking=True),
    _answer("finish-with-content"),
    _answer("finish-without-delta"),
    _answer("reasoning-only", thinking=True),
    _answer("data-after-done"),
    attrs.evolve(_answer("framing-fields"), wires=_OPENAI_ONLY),
    attrs.evolve(_answer("done-whitespace"), wires=_OPENAI_ONLY),
    attrs.evolve(_answer("usage-choices-null"), wires=_OPENAI_ONLY),
    attrs.evolve(_answer("usage-no-choices"), wires=_OPENAI_ONLY),
    _answer("invalid-utf8"),
    attrs.evolve(_answer("queued"), stalls=True),
    _answer("long-text", chunks=40),
    _answer("deltas", chunks=40),
    _answer("tool-loop", steps=1),
    ConformanceCase(
        "passback-empty-reasoning",
        {"name": "tool-loop", "steps": 1, "reasoning": ""},
        thinking=True,
        agreement="outcome",
    ),
    ConformanceCase(
        "passback-thinking-default",
        {"name": "tool-loop", "steps": 1, "reasoning": ""},
        thinking=None,
        agreement="outcome",
    ),
    ConformanceCase("strict-tools", "scripted", tools=STRICT_TOOLS, wires=_OPENAI_ONLY),
    _fault("bad-request", "INVALID_REQUEST"),
    _fault("context-length", "CONTEXT_WINDOW_EXCEEDED"),
    _fault("auth", "AUTH"),
    _fault("insufficient-balance", "INSUFFICIENT_BALANCE"),
    _fault("unprocessable", "INVALID_REQUEST"),
    _fault("rate-limit", "RATE_LIMIT"),
    _fault("server-error", "SERVER"),
    _fault("overloaded", "SERVER"),
    _fault("disconnect", "STREAM_CLOSED", _PARTIAL),
    _fault("stall", "TIMEOUT", _PARTIAL, stalls=True),
    _fault("keep-alive-stall", "TIMEOUT", _PARTIAL, stalls=True),
    _fault("malformed-json", "MALFORMED_RESPONSE", _PARTIAL),
    _fault("missing-done", "STREAM_CLOSED", _PARTIAL),
    _fault("error-event", "SERVER", _PARTIAL),
    _fault("empty", "EMPTY_RESPONSE"),
    _fault("content-filter", "CONTENT_FILTER", _PARTIAL),
    # An overloaded_error event ends a Messages stream at once: no block end, no usage.
    attrs.evolve(_fault("insufficient-resource", "SERVER", "Thinking hard"), agreement="outcome"),
    _fault("unknown-finish", "UNKNOWN_FINISH", _PARTIAL),
    attrs.evolve(_fault("queued-stall", "TIMEOUT", stalls=True), first_data_timeout_s=1.0),
    _fault("json-error-200", "RATE_LIMIT"),
    _fault("completion-200", "MALFORMED_RESPONSE"),
    _fault("html-200", "MALFORMED_RESPONSE"),
    _fault("empty-200", "MALFORMED_RESPONSE"),
    ConformanceCase("abort", _slow_answer(), "abort"),
)


# -- the StreamChunk rules -----------------------------------------------------------------

_DELTA_KINDS: dict[type, BlockType] = {
    TextDelta: "text",
    ReasoningDelta: "reasoning",
    ToolCallDelta: "tool-call",
}
_BLOCK_KINDS: dict[type, BlockType] = {Text: "text", Reasoning: "reasoning", ToolCall: "tool-call"}
_CHUNK_TYPES = (BlockStart, TextDelta, ReasoningDelta, ToolCallDelta, BlockEnd, UsageChunk, Finish)


class _Block:
    """What the deltas of one block said."""

    def __init__(self, kind: BlockType) -> None:
        self.kind = kind
        self.pieces: list[str] = []
        self.ids: set[str] = set()
        self.name: str | None = None
        self.started_by_delta = False
        self.ended = False


class _Rules:
    """Checks a chunk sequence against the StreamChunk rules, one chunk at a time."""

    def __init__(self) -> None:
        self.problems: list[str] = []
        self.blocks: dict[int, _Block] = {}
        self.finish: FinishReason | None = None

    def check(
        self, chunks: Sequence[object], raised: LlmFailure | None, complete: bool
    ) -> list[str]:
        for position, chunk in enumerate(chunks):
            self._chunk(position, chunk)
        if complete:
            self._ending(raised)
        return self.problems

    def _problem(self, position: int, text: str) -> None:
        self.problems.append(f"chunk {position}: {text}")

    def _chunk(self, position: int, chunk: object) -> None:
        if not isinstance(chunk, _CHUNK_TYPES):
            self._problem(position, f"{chunk!r:.80} is not a StreamChunk")
            return
        if self.finish is not None:
            self._problem(position, f"{chunk.type} after finish: nothing may follow finish")
            return
        if isinstance(chunk, Finish):
            self.finish = chunk.reason
            _check_finish(chunk.reason, lambda text: self._problem(position, text))
        elif isinstance(chunk, UsageChunk):
            _check_usage(chunk.usage, lambda text: self._problem(position, text))
        elif isinstance(chunk, BlockStart):
            self._start(position, chunk)
        elif isinstance(chunk, BlockEnd):
            self._end(position, chunk)
        else:
            self._delta(position, chunk)

    def _block(self, position: int, index: object, kind: BlockType) -> _Block | None:
        """The block at ``index``, opened now if new; ``None`` (and a problem) if the index is
        not a non-negative int or the block has another kind."""
        if not isinstance(index, int) or index < 0:
            self._problem(position, f"index {index!r} is not a non-negative int")
            return None
        block = self.blocks.setdefault(index, _Block(kind))
        if block.kind != kind:
            self._problem(position, f"a {kind} chunk for block {index}, which is {block.kind}")
            return None
        return block

    def _start(self, position: int, chunk: BlockStart) -> None:
        if chunk.index in self.blocks:
            self._problem(position, f"block-start for block {chunk.index}, which already began")
            return
        self._block(position, chunk.index, chunk.block_type)

    def _delta(self, position: int, chunk: TextDelta | ReasoningDelta | ToolCallDelta) -> None:
        block = self._block(position, chunk.index, _DELTA_KINDS[type(chunk)])
        if block is None:
            return
        if block.ended:
            self._problem(position, f"a delta for block {chunk.index} after its block-end")
            return
        # Typed as str, but an adapter may still hand over parsed arguments or None.
        piece: object = chunk.arguments_delta if isinstance(chunk, ToolCallDelta) else chunk.text
        if not isinstance(piece, str):
            self._problem(position, f"the delta of block {chunk.index} is not a string")
            return
        block.started_by_delta = True
        block.pieces.append(piece)
        if isinstance(chunk, ToolCallDelta):
            block.ids.update({chunk.id} if chunk.id else set())
            block.name = block.name or chunk.name
            if len(block.ids) > 1:
                self._problem(position, f"the tool-call deltas of block {chunk.index} change id")

    def _end(self, position: int, chunk: BlockEnd) -> None:
        kind = _BLOCK_KINDS.get(type(chunk.block))
        if kind is None:
            self._problem(position, f"block-end carries {type(chunk.block).__name__}")
            return
        block = self._block(position, chunk.index, kind)
        if block is None:
            return
        if block.ended:
            self._problem(position, f"a second block-end for block {chunk.index}")
            return
        block.ended = True
        for text in _authority(block, chunk.block):
            self._problem(position, f"block-end {chunk.index} is not what its deltas said: {text}")

    def _ending(self, raised: LlmFailure | None) -> None:
        if raised is not None:
            if self.finish is not None:
                self.problems.append("the adapter raised after finish")
            _check_failure(raised, self.problems.append)
            return
        if self.finish is None:
            self.problems.append("the stream ended without finish (and without raising)")
        elif isinstance(self.finish, FinishStop | FinishToolCalls | FinishMaxTokens):
            for index, block in sorted(self.blocks.items()):
                if not block.ended:
                    self.problems.append(f"block {index} never ended, yet the stream succeeded")


def _authority(block: _Block, ended: Block) -> list[str]:
    """How a block-end disagrees with the deltas of its block (block-end authority: the
    complete block is exactly what the deltas assembled)."""
    if not block.started_by_delta:
        return []
    joined = "".join(block.pieces)
    if isinstance(ended, ToolCall):
        problems = [] if ended.arguments == joined else [f"arguments {ended.arguments!r:.80}"]
        if block.ids and ended.id not in block.ids:
            problems.append(f"id {ended.id!r}, the deltas said {sorted(block.ids)}")
        if block.name is not None and ended.name != block.name:
            problems.append(f"name {ended.name!r}, the deltas said {block.name!r}")
        return problems
    text = getattr(ended, "text", None)
    return [] if text == joined else [f"text {text!r:.60}, the deltas said {joined!r:.60}"]


def _check_usage(usage: object, report: Callable[[str], None]) -> None:
    """Usage counts are disjoint and sane: non-negative ints, reasoning inside output."""
    if not isinstance(usage, TokenUsage):
        report(f"usage {usage!r:.80} is not a TokenUsage")
        return
    counts = attrs.asdict(usage)
    bad = [name for name, value in counts.items() if not isinstance(value, int) or value < 0]
    if bad:
        report(f"usage counts {', '.join(bad)} are not non-negative ints")
    elif usage.reasoning_tokens > usage.output_tokens:
        report("usage: reasoning_tokens must be counted inside output_tokens")


def _check_finish(reason: object, report: Callable[[str], None]) -> None:
    if isinstance(reason, FinishError | FinishAborted):
        _check_failure(reason.failure, report)
        if isinstance(reason, FinishAborted) != (reason.failure.code == "ABORTED"):
            report(f"finish{{{reason.type}}} with code {reason.failure.code!r}: aborted ⇔ ABORTED")
    elif not isinstance(reason, FinishStop | FinishToolCalls | FinishMaxTokens):
        report(f"finish reason {reason!r:.80} is not a FinishReason")


def _check_failure(failure: LlmFailure, report: Callable[[str], None]) -> None:
    code: object = failure.code
    if not isinstance(code, str) or not _CODE.fullmatch(code):
        report(f"failure code {code!r} is not a canonical UPPER_SNAKE code")
    message: object = failure.message
    if not isinstance(message, str) or not message:
        report("the failure has no message")


def check_stream(
    chunks: Sequence[object], raised: LlmFailure | None = None, *, complete: bool = True
) -> list[str]:
    """The StreamChunk rules ``chunks`` break (empty: none). ``raised`` is the failure of the
    ``LlmError`` the adapter raised after them, if it did; ``complete=False`` when the consumer
    stopped reading early (then the stream need not have ended).

    The rules: every item is a StreamChunk; indexes are non-negative ints; a block keeps one
    kind (start, deltas, end); a ``block-start`` comes first and once; no delta after its
    block's end, no second end; a ``block-end`` is exactly what its deltas assembled (text,
    tool-call id, name, arguments); tool-call deltas keep one id; usage counts are disjoint
    (non-negative, reasoning inside output); nothing follows ``finish`` (so ``usage`` comes
    before it); a stream that did not raise ends with ``finish``, a successful one after every
    block ended; failures carry canonical codes, and ``finish{aborted}`` is ``ABORTED``.
    """
    return _Rules().check(chunks, raised, complete)


# -- what a scenario means -------------------------------------------------------------------

_FINISHES: dict[str, FinishReason] = {
    "stop": FinishStop(),
    "tool_calls": FinishToolCalls(),
    "length": FinishMaxTokens(),
}


def _wire_usage(usage: Mapping[str, Any] | None) -> TokenUsage | None:
    """DeepSeek counts cache hits inside ``prompt_tokens``; dsh's counts are disjoint."""
    if usage is None:
        return None
    hits = usage.get("prompt_cache_hit_tokens")
    if hits is None:
        hits = (usage.get("prompt_tokens_details") or {}).get("cached_tokens") or 0
    reasoning = (usage.get("completion_tokens_details") or {}).get("reasoning_tokens") or 0
    return TokenUsage(
        input_tokens=usage["prompt_tokens"] - hits,
        output_tokens=usage["completion_tokens"],
        cache_read_tokens=hits,
        reasoning_tokens=reasoning,
    )


def expected_answer(scenario: Scenario, wire_format: Wire = "openai") -> AssembledMessage:
    """The message, usage and finish an answer scenario must assemble to, read from its wire
    frames (folded as a non-streaming completion): reasoning, then text, then the tool calls
    (dropped on ``max-tokens``, as the assembler does). ``wire_format="anthropic"``:
    ``scenario`` is in the Messages format (the mock's encoding), read block by block."""
    if wire_format == "anthropic":
        return _expected_message(scenario)
    completion = json.loads(completion_json(scenario))
    choice = completion["choices"][0]
    wire = choice["message"]
    blocks: list[Block] = []
    if wire.get("reasoning_content"):
        blocks.append(Reasoning(wire["reasoning_content"]))
    if wire.get("content"):
        blocks.append(Text(wire["content"]))
    finish = _FINISHES[choice["finish_reason"]]
    if not isinstance(finish, FinishMaxTokens):
        blocks += [
            ToolCall(call["id"], call["function"]["name"], call["function"]["arguments"])
            for call in wire.get("tool_calls") or ()
        ]
    message = Message("assistant", tuple(blocks))
    return AssembledMessage(message, _wire_usage(completion.get("usage")), finish)


_STOPS: dict[str, FinishReason] = {
    "end_turn": FinishStop(),
    "stop_sequence": FinishStop(),
    "tool_use": FinishToolCalls(),
    "max_tokens": FinishMaxTokens(),
}


def _expected_message(scenario: Scenario) -> AssembledMessage:
    """What a Messages-format answer carries: each content block (a thinking block with its
    signature; a tool call's arguments as its ``input_json_delta`` fragments joined, or its
    start ``input`` when none came), the usage (disjoint already) and the stop reason."""
    blocks: dict[int, dict[str, Any]] = {}
    counts: dict[str, int] = {}
    reason = ""
    events = (json.loads(e.data) for e in parse_sse(frame_bytes("".join(scenario.frames))))
    # What follows message_stop is not the message's (and may not be Messages events at all).
    for payload in itertools.takewhile(lambda p: p["type"] != "message_stop", events):
        kind = payload["type"]
        if kind == "message_start":
            counts.update(payload["message"]["usage"])
        elif kind == "content_block_start":
            blocks[payload["index"]] = {**payload["content_block"], "pieces": ""}
        elif kind == "content_block_delta":
            delta = payload["delta"]
            name = next(key for key in delta if key != "type")
            target = "pieces" if name in ("text", "thinking", "partial_json") else name
            blocks[payload["index"]][target] += delta[name]
        elif kind == "message_delta":
            counts.update(payload["usage"])
            reason = payload["delta"]["stop_reason"]
    finish = _STOPS[reason]
    built = [_block_of(blocks[index]) for index in sorted(blocks)]
    if isinstance(finish, FinishMaxTokens):
        built = [block for block in built if not isinstance(block, ToolCall)]
    usage = TokenUsage(
        input_tokens=counts["input_tokens"],
        output_tokens=counts["output_tokens"],
        cache_read_tokens=counts["cache_read_input_tokens"],
        cache_write_tokens=counts["cache_creation_input_tokens"],
    )
    return AssembledMessage(Message("assistant", tuple(built)), usage, finish)


def _block_of(wire: dict[str, Any]) -> Block:
    if wire["type"] == "thinking":
        return Reasoning(wire["pieces"], wire["signature"])
    if wire["type"] == "text":
        return Text(wire["pieces"])
    return ToolCall(wire["id"], wire["name"], wire["pieces"] or json.dumps(wire["input"]))


#: How much of a body that is neither an error object nor a stream a failure must quote.
QUOTED_CHARS = 60


def _http_expectation(scenario: Scenario) -> tuple[int | None, float | None, str]:
    """An HTTP-error (or HTTP 200 but not event-stream) scenario's status, ``Retry-After`` (in
    seconds) and what the failure must quote: the error message, else the body's start."""
    if scenario.status == 200 and scenario.event_stream:
        return None, None, ""
    try:
        says = str(json.loads(scenario.body)["error"]["message"])
    except (ValueError, TypeError, KeyError):
        says = scenario.body.strip()[:QUOTED_CHARS]
    retry_after = dict(scenario.headers).get("Retry-After")
    return scenario.status, None if retry_after is None else float(retry_after), says


# -- running a case --------------------------------------------------------------------------


@frozen(repr=False, eq=False)
class CaseReport(Value):
    """What one adapter did in one case.

    ``model``: the id the adapter served; ``chunks``: what it streamed; ``raised``: the
    failure it raised, if it did; ``requests``: the JSON bodies the mock server received for
    that call, and ``paths`` the paths they were posted to; ``events``: the session log of
    the agent's turn.
    """

    case: ConformanceCase
    model: str
    chunks: tuple[StreamChunk, ...]
    raised: LlmFailure | None
    requests: tuple[Any, ...]
    events: tuple[SessionEvent, ...]
    scenario: Scenario | None = field(default=None, eq=False)
    wire: Wire = "openai"
    paths: tuple[str, ...] = ()

    @property
    def stream(self) -> tuple[StreamChunk, ...]:
        """The chunks with a raised failure written as the in-band ``finish`` it stands for:
        both error paths in one shape (the loop logs them this way too)."""
        if self.raised is None:
            return self.chunks
        return (*self.chunks, _failed_finish(self.raised))


class ConformanceError(AssertionError):
    """The adapter broke the contract in ``case``; ``problems`` lists every way."""

    def __init__(self, case: str, problems: Sequence[str]) -> None:
        self.case = case
        self.problems = list(problems)
        listed = "\n".join(f"  - {problem}" for problem in problems)
        super().__init__(f"adapter conformance, case {case!r}:\n{listed}")


def _failed_finish(failure: LlmFailure) -> Finish:
    return Finish(FinishAborted(failure) if failure.code == "ABORTED" else FinishError(failure))


@asynccontextmanager
async def _served(
    target: AdapterTarget, case: ConformanceCase, *plugins: object
) -> AsyncIterator[tuple[MockServer, Harness]]:
    """A fresh mock server and a started harness whose adapter points at it."""
    async with MockServer(api_key=API_KEY) as server:
        base_url = server.url + (ANTHROPIC_PATH if target.wire == "anthropic" else "")
        endpoint = Endpoint(base_url, API_KEY, case.idle_timeout_s, case.first_data_timeout_s)
        harness = Harness(
            [*target.plugins(endpoint), *plugins],
            dict(target.config(endpoint)),
            load_entrypoints=False,
        )
        async with harness:
            yield server, harness


class _Streamed:
    """The outcome of streaming one call."""

    def __init__(self) -> None:
        self.chunks: list[StreamChunk] = []
        self.raised: LlmFailure | None = None
        self.problems: list[str] = []


async def _collect(stream: AsyncIterator[StreamChunk], into: _Streamed) -> None:
    deadline = asyncio.timeout(DEADLINE_S)
    try:
        async with deadline:
            async for chunk in stream:
                into.chunks.append(chunk)
    except LlmError as exc:
        into.raised = exc.failure
    except Exception as exc:
        if deadline.expired():
            into.problems.append(f"the stream did not end within {DEADLINE_S} s")
            return
        into.problems.append(f"the adapter raised {type(exc).__name__} instead of LlmError")
        into.raised = LlmFailure(f"{type(exc).__name__}: {exc}", "ADAPTER_ERROR")
    finally:
        close = getattr(stream, "aclose", None)
        if close is not None:
            await close()


async def _abort_stream(stream: AsyncIterator[StreamChunk], into: _Streamed) -> None:
    """Consume until the first chunk, then cancel the consumer: the cancellation must come
    through, not a chunk."""
    first = asyncio.Event()

    async def consume() -> None:
        async for chunk in stream:
            into.chunks.append(chunk)
            first.set()

    task = asyncio.create_task(consume())
    started = asyncio.create_task(first.wait())
    async with asyncio.timeout(DEADLINE_S):
        await asyncio.wait([task, started], return_when="FIRST_COMPLETED")
    started.cancel()
    task.cancel()
    try:
        await task
    except asyncio.CancelledError:
        return
    except Exception as exc:
        into.problems.append(f"cancelled, the stream raised {type(exc).__name__}")
        return
    into.problems.append("the stream swallowed the consumer's cancellation")


async def _stream_phase(target: AdapterTarget, case: ConformanceCase) -> CaseReport:
    async with _served(target, case) as (server, harness):
        adapter = harness.llm.adapter_for(target.model)
        request = LlmRequest(
            target.model,
            (Message("user", (Text(PROMPT),)),),
            tools=case.tools,
            thinking=case.thinking,
        )
        server.queue(case.scenario)
        streamed = _Streamed()
        if case.kind == "abort":
            await _abort_stream(adapter.stream(request), streamed)
            streamed.problems += await _closed_connection(server)
        else:
            await _collect(adapter.stream(request), streamed)
        bodies = tuple(r.body for r in server.requests)
        paths = tuple(r.path for r in server.requests)
    scenario = _scenario_of(target.wire, case.scenario, bodies[0]) if bodies else None
    report = CaseReport(
        case,
        target.model,
        tuple(streamed.chunks),
        streamed.raised,
        bodies,
        (),
        scenario,
        target.wire,
        paths,
    )
    problems = [*streamed.problems, *_stream_problems(report, server)]
    if problems:
        raise ConformanceError(case.name, [f"stream: {problem}" for problem in problems])
    return report


def _scenario_of(wire: Wire, spec: ScenarioSpec, body: Any) -> Scenario:
    """What the mock answered to ``body``: the scenario resolved for the request as the mock's
    scenarios read it (a legacy model name served by its successor, in whose name the answer
    comes), as it answers the request's thinking mode; on the Messages wire, then encoded."""
    if wire == "openai":
        served = {**body, "model": serving_model(str(body["model"]))}
        scenario = resolve(spec, served)
        return in_thinking_mode(scenario) if thinking_enabled(served) else scenario
    return anthropic_wire.encode(resolve(spec, openai_body(body)), thinking_on(body))


async def _closed_connection(server: MockServer) -> list[str]:
    try:
        async with asyncio.timeout(2.0):
            await server.client_gone()
    except TimeoutError:
        return ["cancelling the consumer did not close the response"]
    return []


def _stream_problems(report: CaseReport, server: MockServer) -> list[str]:
    case = report.case
    problems = check_stream(report.chunks, report.raised, complete=case.kind != "abort")
    if not report.requests:
        return [*problems, f"no request reached the mock server (raised: {report.raised})"]
    if case.kind == "abort" or report.scenario is None:
        return problems
    try:
        outcome = assemble(report.stream)
    except LlmError as exc:
        return [*problems, f"the chunks do not assemble: {exc}"]
    if case.kind == "answer":
        expected = expected_answer(report.scenario, report.wire)
        return [*problems, *_answer_problems(outcome, expected)]
    failure = _failure_in(outcome)
    request_id = f"mock-{len(server.requests)}"
    return [*problems, *_fault_problems(case, report.scenario, outcome, failure, request_id)]


def _failure_in(outcome: AssembledMessage) -> LlmFailure | None:
    """The failure the loop would see in an assembled stream (an empty ``stop`` is one)."""
    finish = outcome.finish
    if isinstance(finish, FinishError | FinishAborted):
        return finish.failure
    empty = all(isinstance(b, Text | Reasoning) and not b.text for b in outcome.message.content)
    if isinstance(finish, FinishStop) and empty:
        return LlmFailure("the model returned an empty completion", "EMPTY_RESPONSE")
    return None


def _answer_problems(outcome: AssembledMessage, expected: AssembledMessage) -> list[str]:
    problems = []
    if outcome.message != expected.message:
        problems.append(f"assembled {outcome.message.content}, the wire said {expected.message}")
    if outcome.usage != expected.usage:
        problems.append(f"usage {outcome.usage}, the wire said {expected.usage}")
    if outcome.finish != expected.finish:
        problems.append(f"finish {outcome.finish}, the wire said {expected.finish}")
    return problems


def _fault_problems(
    case: ConformanceCase,
    scenario: Scenario,
    outcome: AssembledMessage,
    failure: LlmFailure | None,
    request_id: str,
) -> list[str]:
    if failure is None:
        return [f"the call succeeded; it must fail with {case.code}"]
    problems = []
    if failure.code != case.code:
        problems.append(f"failure code {failure.code!r}, expected {case.code!r}")
    streamed = "".join(b.text for b in outcome.message.content if isinstance(b, Text | Reasoning))
    if streamed != case.partial:
        problems.append(f"streamed {streamed!r} before failing, the wire sent {case.partial!r}")
    status, retry_after, says = _http_expectation(scenario)
    if (failure.status, failure.retry_after_s) != (status, retry_after):
        problems.append(
            f"status {failure.status} and retry_after_s {failure.retry_after_s}, "
            f"the answer said {status} and {retry_after}"
        )
    if status is not None and failure.request_id != request_id:
        problems.append(f"request_id {failure.request_id!r}, the answer said {request_id!r}")
    if says not in failure.message:
        problems.append(f"the failure message does not quote the answer's {says!r}")
    return problems


class _AbortOnFirstChunk:
    """A host plugin that aborts the agent's turn once its first chunk streamed."""

    @hookimpl
    def dsh_agent_stream_chunk(self, agent: Any) -> None:
        agent.abort(_ABORT_REASON)


class _Tools:
    """A host plugin that gives the agent tools of the case's schemas (each answers "ok")."""

    def __init__(self, schemas: Sequence[ToolSchema]) -> None:
        self.schemas = schemas

    @hookimpl
    def dsh_register_tools(self, register: Callable[..., Any]) -> None:
        for schema in self.schemas:
            register(Tool(schema, _ok))


async def _ok(args: Any, execution: ToolExecution) -> str:
    return "ok"


async def _agent_phase(target: AdapterTarget, report: CaseReport) -> CaseReport:
    case = report.case
    extra: list[object] = [_AbortOnFirstChunk()] if case.kind == "abort" else []
    extra += [_Tools(case.tools)] if case.tools else []
    async with _served(target, case, *extra) as (server, harness):
        options = AgentOptions(model=target.model, thinking=case.thinking)
        agent = harness.agent_loop.create("conformance", options)
        server.queue(case.scenario)
        agent.send(PROMPT)
        try:
            async with asyncio.timeout(DEADLINE_S):
                await agent.wait_idle()
        except TimeoutError:
            raise ConformanceError(
                case.name, [f"agent: the turn did not end within {DEADLINE_S} s"]
            ) from None
        problems = await _closed_connection(server) if case.kind == "abort" else []
        events = tuple(agent.session.events)
    report = attrs.evolve(report, events=events)
    problems += _turn_problems(report)
    if problems:
        raise ConformanceError(case.name, [f"agent: {problem}" for problem in problems])
    return report


def _expected_end(report: CaseReport) -> TurnEndReason:
    case = report.case
    if case.kind == "abort":
        return TurnAborted(_ABORT_REASON)
    failure = _failure_in(assemble(report.stream))
    if failure is not None:
        return TurnError(failure)
    finish = assemble(report.stream).finish
    return TurnMaxTokens() if isinstance(finish, FinishMaxTokens) else TurnCompleted()


def _turn_problems(report: CaseReport) -> list[str]:
    events = report.events
    ends = [e.data.reason for e in events if isinstance(e.data, TurnEnd)]
    expected = _expected_end(report)
    problems = [] if ends == [expected] else [f"the turn ended {ends}, expected [{expected}]"]
    errors = [e.data.code for e in events if isinstance(e.data, ErrorEvent)]
    wanted = [expected.failure.code] if isinstance(expected, TurnError) else []
    if errors != wanted:
        problems.append(f"error events with codes {errors}, expected {wanted}")
    replayed = verify(events)
    problems += [f"replay: {mismatch}" for mismatch in replayed.mismatches]
    if report.case.kind != "abort":
        problems += _first_step_problems(report)
    return problems


def _first_step_problems(report: CaseReport) -> list[str]:
    """The first step logged exactly what the adapter streamed, and its message is the one
    the stream assembles to."""
    problems = []
    logged = tuple(
        e.data.chunk
        for e in report.events
        if isinstance(e.data, AssistantChunk) and (e.data.turn, e.data.step) == (1, 1)
    )
    if logged != report.stream:
        problems.append("the first step logged other chunks than the adapter streamed")
    messages = [e.data for e in report.events if isinstance(e.data, AssistantMessage)]
    if report.case.kind == "fault" and messages:
        problems.append("a failed turn logged an assistant/message")
    if report.case.kind == "answer":
        outcome = assemble(report.stream)
        first = messages[0] if messages else None
        if first is None or (first.content, first.usage) != (
            outcome.message.content,
            outcome.usage,
        ):
            problems.append(f"the first assistant/message is {first}, the stream said {outcome}")
    return problems


async def run_case(target: AdapterTarget, case: ConformanceCase) -> CaseReport:
    """Run ``case`` on ``target``: one call streamed straight from the adapter, then one turn
    of a real agent, each against a fresh mock server. Raises :class:`ConformanceError` with
    every problem found; returns what the adapter did (for :func:`compare_reports`). A case
    that does not exist in the target's wire format (``case.wires``) is skipped."""
    if target.wire not in case.wires:
        pytest.skip(f"case {case.name!r} exists only on the {'/'.join(case.wires)} wire")
    report = await _stream_phase(target, case)
    return await _agent_phase(target, report)


# -- comparing two adapters ------------------------------------------------------------------


def headline(message: str) -> str:
    """A failure message up to its first ``": "``: what happened, without the details that
    may name an adapter's config section or its HTTP library's exception."""
    return message.partition(": ")[0]


MODEL = "<model>"


class _Normaliser:
    """Makes two adapters' records comparable: the model id each served becomes
    :data:`MODEL`; failure messages are cut to their :func:`headline` unless ``exact``."""

    def __init__(self, model: str, exact: bool) -> None:
        self.model = model
        self.exact = exact

    def __call__(self, value: Any) -> Any:
        if isinstance(value, str):
            return MODEL if value == self.model else value
        if isinstance(value, tuple):
            return tuple(self(item) for item in value)
        if isinstance(value, LlmFailure | ErrorEvent) and not self.exact:
            value = attrs.evolve(value, message=headline(value.message))
        if attrs.has(type(value)):
            fields = attrs.fields(type(value))
            return attrs.evolve(value, **{f.name: self(getattr(value, f.name)) for f in fields})
        return value


def _compared(report: CaseReport) -> list[SessionEvent]:
    if report.case.kind != "abort":
        return list(report.events)
    return [e for e in report.events if not isinstance(e.data, AssistantChunk)]


def compare_reports(a: CaseReport, b: CaseReport, *, exact_messages: bool = False) -> list[str]:
    """How two adapters for the same endpoint differ in one case (empty: they do not).

    They must send the same request bodies, stream the same chunks (a raised failure counts
    as the in-band ``finish`` it stands for) and leave the same session log — times and the
    model ids they serve aside. Failure messages are compared by :func:`headline` unless
    ``exact_messages``. In the ``abort`` case, where how much streamed before the abort is a
    matter of timing, the logs are compared without their chunks.
    """
    differences = []
    if a.requests != b.requests:
        differences.append(f"the request bodies differ:\n    {a.requests}\n    {b.requests}")
    left, right = _Normaliser(a.model, exact_messages), _Normaliser(b.model, exact_messages)
    if a.case.kind != "abort" and left(a.stream) != right(b.stream):
        differences.append(f"the streams differ:\n    {a.stream}\n    {b.stream}")
    events_a = [(e.type, left(e.data)) for e in _compared(a)]
    events_b = [(e.type, right(e.data)) for e in _compared(b)]
    differences += [
        f"event {position}: {one} ≠ {other}"
        for position, (one, other) in enumerate(zip(events_a, events_b, strict=False))
        if one != other
    ][:1]
    if len(events_a) != len(events_b):
        differences.append(f"{len(events_a)} events ≠ {len(events_b)} events")
    return differences


class _AcrossWires(_Normaliser):
    """Makes records of adapters for two wire formats comparable: besides the model id, what
    only one wire carries goes — a reasoning block's ``signature`` (Messages API only), the
    ``reasoning_tokens`` count (chat completions only), and an empty reasoning block (the
    Messages API sends a signed one in thinking mode even when nothing was reasoned) — and
    failures keep their code, status, ``retry_after_s`` and request id but not their message,
    which names the provider and its wire's words."""

    def __init__(self, model: str) -> None:
        super().__init__(model, exact=True)

    def __call__(self, value: Any) -> Any:
        if isinstance(value, tuple):
            value = tuple(item for item in value if not _empty_reasoning(item))
        elif isinstance(value, Reasoning):
            return Reasoning(value.text)
        elif isinstance(value, TokenUsage):
            return attrs.evolve(value, reasoning_tokens=0)
        elif isinstance(value, LlmFailure | ErrorEvent):
            value = attrs.evolve(value, message="")
        return super().__call__(value)


def _empty_reasoning(value: object) -> bool:
    return isinstance(value, Reasoning) and not value.text


def compare_wires(a: CaseReport, b: CaseReport) -> list[str]:
    """How two adapters that reach the same models over different wire formats differ in one
    case (empty: they do not).

    Their request bodies differ by nature and are not compared. In a case whose
    ``agreement`` is ``"chunks"`` they must stream the same chunks; in every case the streams
    must assemble to the same outcome (for a fault: what streamed before it, and the failure)
    and the session logs (chunks aside where only the outcome must agree, and in ``abort``)
    must match — all after :class:`_AcrossWires` drops what only one wire carries.
    """
    case = a.case
    left, right = _AcrossWires(a.model), _AcrossWires(b.model)
    differences = []
    if case.kind != "abort":
        if case.agreement == "chunks" and left(a.stream) != right(b.stream):
            differences.append(f"the streams differ:\n    {a.stream}\n    {b.stream}")
        one, other = left(_outcome(a)), right(_outcome(b))
        if one != other:
            differences.append(f"the outcomes differ:\n    {one}\n    {other}")
    chunks = case.kind == "abort" or case.agreement == "outcome"
    events_a = [(e.type, left(e.data)) for e in _events(a, chunks)]
    events_b = [(e.type, right(e.data)) for e in _events(b, chunks)]
    differences += [
        f"event {position}: {one} ≠ {other}"
        for position, (one, other) in enumerate(zip(events_a, events_b, strict=False))
        if one != other
    ][:1]
    if len(events_a) != len(events_b):
        differences.append(f"{len(events_a)} events ≠ {len(events_b)} events")
    return differences


def _outcome(report: CaseReport) -> object:
    """What a stream came to: the message, usage and finish; for a fault, the message (what
    streamed before it) and the finish — a stream that broke off carries no usage."""
    outcome = assemble(report.stream)
    if report.case.kind == "fault":
        return outcome.message, outcome.finish
    return outcome


def _events(report: CaseReport, without_chunks: bool) -> list[SessionEvent]:
    if not without_chunks:
        return list(report.events)
    return [e for e in report.events if not isinstance(e.data, AssistantChunk)]


# -- pytest ----------------------------------------------------------------------------------


class AdapterContract:
    """Every case as a test: subclass as ``Test<YourAdapter>`` and set ``target``::

    class TestMyAdapter(AdapterContract):
        target = adapter_target("my/deepseek-v4-flash", make_adapter)
    """

    target: AdapterTarget

    @pytest.mark.asyncio
    @pytest.mark.parametrize("case", CASES, ids=str)
    async def test_conformance(self, case: ConformanceCase) -> None:
        await run_case(self.target, case)
