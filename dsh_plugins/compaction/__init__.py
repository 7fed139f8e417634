"""Compaction: keep long conversations inside the model's context window.

A ``dsh_agent_request`` implementation. When a request's calibrated token estimate passes the
threshold (the context window minus a reserve for the answer), it first prunes old tool results
(their content replaced by a note saying what was elided); if that does not bring the request
down to the low-water mark (``low_water`` of the window, 60% by default), it summarises the
older part of the conversation with a model call and replaces it with the summary. The recent
tail is kept verbatim, and a cut never separates a tool call from its result.

Why a low-water mark: stopping just under the threshold would compact again a step or two later,
and every compaction rewrites the conversation mid-prefix, which throws away the provider's
prompt cache. Compacting well below the threshold leaves headroom, so the history stays an
append-only prefix for many steps between compactions.

Everything is logged (``compaction/start``, ``compaction/prune``, ``compaction/summary``,
``compaction/end``) and ``Session.derive_messages()`` applies it, so the model sees exactly what
the log says and a resumed session sees the same. On ``CONTEXT_WINDOW_EXCEEDED`` the step is
compacted and retried once. ``await harness.compaction.compact(agent)`` compacts on demand.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable, Sequence
from typing import Any

from attrs import evolve, field, frozen
from attrs.validators import deep_mapping, instance_of, optional

from dsh import Retry, for_events, hookimpl
from dsh.plugin import (
    Agent,
    AssistantMessage,
    DshError,
    Harness,
    LlmError,
    LlmFailure,
    LlmRequest,
    Message,
    ModelInfo,
    SessionEvent,
    Text,
    TokenMeter,
    TokenUsage,
    ToolResult,
    Value,
    at_least,
    at_most,
    greater_than,
    message_tokens,
    summary_message,
    text_of,
)

__all__ = ["CompactionConfig", "CompactionPlugin"]

SUMMARY_SYSTEM = (
    "You compress conversations between a user and an AI agent so the agent can continue "
    "the work without the full transcript."
)
SUMMARY_INSTRUCTION = (
    "Summarise the conversation above for the agent that will continue it. Keep: the user's "
    "requests and constraints (quote the latest request verbatim), decisions made, facts "
    "learned from tool results (file names, values, errors), work done and work remaining. "
    "Be concise; write only the summary."
)


@frozen(repr=False, eq=False)
class CompactionConfig(Value):
    """Section ``compaction``.

    The threshold is the context window minus ``reserve_tokens`` (at most the model's output
    limit and half its window, see :meth:`CompactionPlugin.reserve`); the window comes from
    ``context_windows[model]``, else ``context_window``, else the adapter's model info, else
    ``default_context_window``. A compaction aims at ``low_water`` times the window (never
    above the threshold): 1.0 compacts only just under the threshold.
    """

    enabled: bool = True
    context_window: int | None = field(default=None, validator=optional(at_least(1)))
    context_windows: dict[str, int] = field(
        factory=dict, validator=deep_mapping(instance_of(str), at_least(1))
    )
    default_context_window: int = field(default=128_000, validator=at_least(1))
    reserve_tokens: int = field(default=16_384, validator=at_least(0))
    low_water: float = field(default=0.6, validator=[greater_than(0), at_most(1)])
    keep_recent_tokens: int = field(default=20_000, validator=at_least(0))
    prune_min_chars: int = field(default=400, validator=at_least(0))
    summary_model: str | None = None
    summary_max_tokens: int = field(default=4_096, validator=at_least(1))


def choose_cut(history: Sequence[tuple[int, Message]], keep_recent_tokens: int) -> int:
    """Where the kept tail starts: an index into ``history``.

    The tail holds at least ``keep_recent_tokens`` (or everything). The cut never lands on a
    tool-result message, so every call and its result stay on the same side. 0 means there is
    nothing older to compact.
    """
    cut, kept = len(history), 0
    while cut > 0 and kept < keep_recent_tokens:
        cut -= 1
        kept += message_tokens(history[cut][1])
    while cut > 0 and _is_tool_result(history[cut][1]):
        cut -= 1
    return cut


def _is_tool_result(message: Message) -> bool:
    return any(isinstance(b, ToolResult) for b in message.content)


def _elision_note(result: ToolResult) -> str:
    size = sum(len(b.text) for b in result.content if isinstance(b, Text))
    return (
        f"[tool result elided by compaction: {size} characters; call the tool again if you need it]"
    )


class CompactionPlugin:
    """Compacts agents' histories; also offered to hosts as ``harness.compaction``."""

    def __init__(self) -> None:
        self.meter = TokenMeter()
        self.config = CompactionConfig()
        self._harness: Harness | None = None
        self._estimates: dict[str, tuple[str, int]] = {}  # session id -> (model, raw estimate)
        self._overflowed: set[tuple[str, int, int]] = set()
        self._forced: set[str] = set()

    @hookimpl
    def dsh_register_config(self, register: Callable[[str, type[Any]], Any]) -> None:
        register("compaction", CompactionConfig)

    @hookimpl
    def dsh_harness_start(self, harness: Harness) -> None:
        self._harness = harness
        self.config = harness.config.section("compaction", CompactionConfig)
        harness.add_service("compaction", self)

    # -- thresholds ------------------------------------------------------------------------
    def context_window(self, model: str) -> int:
        return self._window(model, self._info(model))

    def reserve(self, model: str) -> int:
        """The tokens kept free for the answer: ``reserve_tokens``, but never more than the
        model's output limit (its answer cannot be longer) nor half its window (a small local
        model would otherwise be compacted before every request, or always)."""
        info = self._info(model)
        return self._reserve(self._window(model, info), info)

    def threshold(self, model: str) -> int:
        return self.limits(model)[0]

    def target(self, model: str) -> int:
        """What a compaction aims at: the low-water mark, never above the threshold."""
        return self.limits(model)[1]

    def limits(self, model: str) -> tuple[int, int]:
        """The threshold and the target of ``model``, asking its adapter about it once (this
        runs before every request)."""
        harness = self._harness
        info = harness.llm.model_info(model) if harness is not None else None  # _info, inline
        window = self._window(model, info)
        threshold = window - self._reserve(window, info)
        return threshold, min(threshold, int(window * self.config.low_water))

    def _info(self, model: str) -> ModelInfo | None:
        return self._harness.llm.model_info(model) if self._harness else None

    def _window(self, model: str, info: ModelInfo | None) -> int:
        config = self.config
        if model in config.context_windows:
            return config.context_windows[model]
        if config.context_window is not None:
            return config.context_window
        if info is not None and info.context_window is not None:
            return info.context_window
        return config.default_context_window

    def _reserve(self, window: int, info: ModelInfo | None) -> int:
        limit = info.max_output_tokens if info is not None else None
        return min(self.config.reserve_tokens, window // 2, limit or window)

    # -- hooks -----------------------------------------------------------------------------
    @hookimpl(trylast=True)
    def dsh_agent_request(
        self, agent: Agent, turn: int, request: LlmRequest
    ) -> Awaitable[LlmRequest] | None:
        """Compact when the request would not fit (runs last: it sees the final request).

        A ``def``, not an ``async def``: a request that fits (almost every one) is measured and
        passed on (``None``) with no coroutine made; one to compact gets the compaction, an
        awaitable of the compacted request, which the waterfall awaits."""
        if not self.config.enabled or request.purpose is not None:
            return None
        forced = agent.id in self._forced
        self._forced.discard(agent.id)
        raw = self.meter.raw(request)
        limit, target = self.limits(request.model)
        if self.meter.estimate(request, raw) > limit or forced:
            reason = "overflow" if forced else "threshold"
            return self._compacted(agent, turn, request, reason, target)
        self._estimates[agent.session.id] = (request.model, raw)
        return None

    async def _compacted(
        self, agent: Agent, turn: int, request: LlmRequest, reason: str, target: int
    ) -> LlmRequest:
        """``request`` with ``agent``'s history compacted (towards ``target`` tokens)."""
        await self._compact(agent, turn, request, reason, target)
        request = evolve(request, messages=agent.session.derive_messages())
        self._estimates[agent.session.id] = (request.model, self.meter.raw(request))
        return request

    @hookimpl
    @for_events(AssistantMessage)
    def dsh_session_event(self, session: Any, event: SessionEvent) -> None:
        """Calibrate the meter from the usage each response reports."""
        data = event.data
        if isinstance(data, AssistantMessage) and data.usage is not None:
            found = self._estimates.pop(session.id, None)
            if found is not None:
                self.meter.calibrate(found[0], found[1], data.usage)

    @hookimpl
    def dsh_agent_disposed(self, agent: Agent) -> None:
        """Forget what was kept for the agent (a long-running host creates them without end)."""
        self._estimates.pop(agent.session.id, None)
        self.meter.forget(agent.session.id)
        self._forced.discard(agent.id)
        self._overflowed = {key for key in self._overflowed if key[0] != agent.id}

    @hookimpl
    def dsh_agent_request_error(
        self, agent: Agent, turn: int, step: int, failure: LlmFailure
    ) -> Retry | None:
        """The context window overflowed: compact and retry the step, once."""
        key = (agent.id, turn, step)
        if failure.code != "CONTEXT_WINDOW_EXCEEDED" or key in self._overflowed:
            return None
        self._overflowed.add(key)
        self._forced.add(agent.id)
        return Retry(0.0, record=False)  # the compaction/start (overflow) that follows says it

    # -- compaction --------------------------------------------------------------------------
    async def compact(self, agent: Agent) -> bool:
        """Compact ``agent``'s history now, whatever its size. Returns whether anything was
        compacted. Call it while the agent is idle (or from a hook)."""
        # The history rewrite events are defined when first needed: a run that never
        # compacts never builds their classes.
        from dsh.plugin import HistoryPrune, HistorySummary

        if not agent.options.model:
            raise DshError(f"agent {agent.id!r} has no model to summarise with")
        request = LlmRequest(agent.options.model, agent.session.derive_messages())
        before = len(agent.session)
        turn = agent.session.last_turn
        await self._compact(agent, turn, request, "manual", 0)
        return any(
            isinstance(e.data, HistoryPrune | HistorySummary) for e in agent.session.events[before:]
        )

    async def _compact(
        self, agent: Agent, turn: int, request: LlmRequest, reason: str, limit: int
    ) -> None:
        from dsh.plugin import HistoryRewriteEnd, HistoryRewriteStart

        session = agent.session
        before = self.meter.estimate(request)
        session.append(HistoryRewriteStart(turn, reason, before))
        history = session.history()
        cut = choose_cut(history, self.config.keep_recent_tokens)
        self._prune(agent, history[:cut])
        after = self._estimate(request, session.derive_messages())
        error: str | None = None
        if cut > 0 and (after > limit or reason != "threshold"):
            # The summary is a paid model request: like any, it comes after a checkpoint, so a
            # crash during it cannot lose the user's message (a failed write ends the turn).
            await session.checkpoint()
            try:
                after = await self._summarise(
                    agent, request, session.history()[:cut], history[cut][0]
                )
            except (LlmError, DshError) as exc:
                error = f"summary failed: {exc}"
        session.append(HistoryRewriteEnd(after, error))

    def _prune(self, agent: Agent, head: Sequence[tuple[int, Message]]) -> None:
        from dsh.plugin import ElidedResult, HistoryPrune

        elided = tuple(
            ElidedResult(block.tool_call_id, _elision_note(block))
            for _, message in head
            for block in message.content
            if isinstance(block, ToolResult)
            and sum(len(b.text) for b in block.content if isinstance(b, Text))
            > self.config.prune_min_chars
        )
        if elided:
            agent.session.append(HistoryPrune(elided))

    def _estimate(self, request: LlmRequest, messages: Sequence[Message]) -> int:
        return self.meter.estimate(evolve(request, messages=tuple(messages)))

    async def _summarise(
        self,
        agent: Agent,
        request: LlmRequest,
        head: Sequence[tuple[int, Message]],
        replaces_upto: int,
    ) -> int:
        from dsh.plugin import HistorySummary

        model = self.config.summary_model or request.model
        summary, usage = await self._summary_call(agent, model, [m for _, m in head])
        session = agent.session
        tail = [m for seq, m in session.history() if seq >= replaces_upto]
        before = self._estimate(request, session.derive_messages())
        after = self._estimate(request, [summary_message(summary), *tail])
        data = HistorySummary(replaces_upto, summary, before, after, usage, model)
        session.append(data)
        return after

    async def _summary_call(
        self, agent: Agent, model: str, head: list[Message]
    ) -> tuple[str, TokenUsage | None]:
        assert self._harness is not None
        request = LlmRequest(
            model=model,
            messages=(*head, Message("user", (Text(SUMMARY_INSTRUCTION),))),
            system=SUMMARY_SYSTEM,
            max_tokens=self.config.summary_max_tokens,
            session_id=agent.session.id,
            purpose="compaction",
        )
        result = await self._harness.llm.complete(request)
        summary = text_of(result.message.content).strip()
        if not summary:
            raise DshError("the model returned an empty summary")
        return summary, result.usage
