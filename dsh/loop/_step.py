"""One step of a turn, as it runs inside the step task the loop can cancel.

A step asks the model (building the request from the assembled system prompt, the agent's
options and the history the session derives), records the stream as it arrives, lets plugins
retry a failed call or rewrite the answer, logs the answer and runs its tool calls::

    request  = waterfall dsh_agent_request (after system_prompt.assemble())
    stream llm.stream(request) → 'assistant/chunk' (+ dsh_agent_stream_chunk)
    failed?  dsh_agent_request_error → 'llm/retry', retry after a delay; or the step fails
    message  = waterfall dsh_agent_step_result
    'assistant/message' (with usage)
    each tool call: 'tool/call' → tools.execute() → 'tool/result'
    drain steering → 'steering/message'

The loop driver (:mod:`dsh.loop._loop`) owns what happens around it: the step's boundaries, its
cancellation, and what a failure means for the turn.
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable
from typing import TYPE_CHECKING

from attrs import frozen

from dsh.llm._assembler import AssembledMessage, BlockAssembler
from dsh.llm._batches import ChunkBatch, ChunkBatches, ChunkView, Deltas
from dsh.llm._prompt import PromptAssembly, render
from dsh.loop._dispatch import ToolDispatch, with_unique_call_ids
from dsh.loop._failures import StepFailed, adapter_error, failed_finish, failure_of
from dsh.values._chunks import FinishMaxTokens, LlmFailure, StreamChunk
from dsh.values._config import AgentLoopConfig
from dsh.values._content import ToolCall
from dsh.values._errors import HookError, LlmError
from dsh.values._events import AssistantMessage
from dsh.values._request import LlmRequest
from dsh.values._value import Value

if TYPE_CHECKING:
    from dsh.app._harness import Harness
    from dsh.loop._approvals import Approvals
    from dsh.values._agent import Agent

__all__ = ["Step", "StepOutcome"]


@frozen(repr=False, eq=False)
class StepOutcome(Value):
    """How a step ended: whether the turn should go on (tool calls ran or steering arrived),
    and whether the model stopped at its token limit."""

    proceed: bool
    max_tokens: bool


class Step:
    """Step ``step`` of turn ``turn`` of ``agent``.

    ``call_ids`` are the session's tool-call ids (kept up to date as calls are made unique);
    ``steering`` logs the steering that arrived, and says whether any did.
    """

    def __init__(
        self,
        harness: Harness,
        agent: Agent,
        turn: int,
        step: int,
        *,
        call_ids: set[str],
        steering: Callable[[], bool],
        approvals: Approvals,
    ) -> None:
        self.harness = harness
        self.agent = agent
        self.turn = turn
        self.step = step
        self._call_ids = call_ids
        self._deliver_steering = steering
        self._approvals = approvals

    async def run(self) -> StepOutcome:
        result, model = await self._call_model()
        agent, turn, step = self.agent, self.turn, self.step
        message = await self.harness.hooks.agent_step_result(agent, turn, step, result.message)
        message = with_unique_call_ids(message, self._call_ids)
        data = AssistantMessage(turn, step, message.content, result.usage, model)
        agent.session.append(data)
        calls = [block for block in message.content if isinstance(block, ToolCall)]
        await self._dispatch().run(calls)
        steered = self._deliver_steering()
        return StepOutcome(bool(calls) or steered, isinstance(result.finish, FinishMaxTokens))

    async def resume_parked(self, parked: list[ToolCall]) -> StepOutcome:
        """The rest of a step a resume found parked (:func:`dsh.loop._recovery.parked_step`):
        wait for the decisions on ``parked``, run what was allowed, deliver steering."""
        await self._dispatch().settle(parked)
        self._deliver_steering()
        return StepOutcome(True, False)

    def _dispatch(self) -> ToolDispatch:
        limit = self.harness.config.section("agent_loop", AgentLoopConfig).max_parallel_tools
        tools = self.harness.tools
        return ToolDispatch(self.agent, tools, self.turn, self.step, limit, self._approvals)

    async def _call_model(self) -> tuple[AssembledMessage, str]:
        """Stream the request; ask ``dsh_agent_request_error`` after each failed attempt.
        Returns what the model said and the model id the final request named."""
        attempt = 0
        while True:
            attempt += 1
            request = await self._request()
            await self.agent.session.checkpoint()  # the request is about to be paid for
            try:
                result = await self._stream(request)
            except LlmError as exc:
                failure = exc.failure
            else:
                found = failure_of(result)
                if found is None:
                    return result, request.model
                failure = found
            retry = await self.harness.hooks.agent_request_error(
                self.agent, self.turn, self.step, failure, attempt
            )
            if retry is None:
                raise StepFailed(failure)
            if retry.record:  # the policy decides, the loop records
                event = retry.event(self.turn, self.step, attempt, failure)
                self.agent.session.append(event)
            await self.harness.sleep(retry.delay_s)

    async def _request(self) -> LlmRequest:
        assembly = await self.harness.system_prompt.assemble()
        request = await self.harness.hooks.agent_request(
            self.agent, self.turn, self.step, self._build_request(assembly)
        )
        if not request.model:
            raise StepFailed(
                LlmFailure(
                    f"agent {self.agent.id!r} has no model: set AgentOptions(model=...) or pick "
                    f"one of {', '.join(self.harness.llm.models()) or 'no registered models'}",
                    "NO_MODEL",
                )
            )
        return request

    def _build_request(self, assembly: PromptAssembly) -> LlmRequest:
        options, session = self.agent.options, self.agent.session
        system = "\n\n".join(p for p in (render(assembly), options.system_prompt) if p)
        return LlmRequest(
            model=options.model,
            messages=session.derive_messages(),
            system=system or None,
            tools=assembly.tools,
            temperature=options.temperature,
            max_tokens=options.max_tokens,
            reasoning_effort=options.reasoning_effort,
            thinking=options.thinking,
            response_format=options.response_format,
            session_id=session.id,
        )

    async def _stream(self, request: LlmRequest) -> AssembledMessage:
        stream = await self.harness.llm.stream(request)
        assembler = BlockAssembler()
        agent, turn, step, session = self.agent, self.turn, self.step, self.agent.session
        hooks = self.harness.hooks
        per_chunk, per_batch = hooks.stream_observers()
        observe, observe_batch = hooks.agent_stream_chunk, hooks.agent_stream_batch
        push, push_deltas = assembler.push, assembler.push_deltas

        def record(chunk: StreamChunk) -> None:
            # The reference: what record_batch does for each batch, one chunk at a time.
            log_batch((chunk,))
            observe(agent, turn, step, chunk)
            if per_batch:
                observe_batch(agent, turn, step, (chunk,))
            push(chunk)

        def record_batch(batch: ChunkBatch) -> None:
            done = 0
            try:
                for item in batch:
                    if isinstance(item, Deltas):
                        push_deltas(item)
                    else:
                        push(item)
                    done += 1
            except BaseException:
                # Logged and observed as far as record would have gone: to the chunk the
                # assembler refused (a run of deltas is refused at its first).
                refused = batch[done]
                if isinstance(refused, Deltas):
                    refused = Deltas(refused.kind, refused.index, refused.texts[:1])
                deliver([*batch[:done], refused])
                raise
            if batch:
                deliver(batch)

        def deliver(batch: ChunkBatch) -> None:
            log_batch(batch)
            chunks = ChunkView(batch)  # the runs' deltas built once, if an observer reads them
            if per_chunk:
                for chunk in chunks:
                    observe(agent, turn, step, chunk)
            if per_batch:
                observe_batch(agent, turn, step, chunks)

        log_batch = session.chunk_batch_log(turn, step)
        try:
            if isinstance(stream, ChunkBatches):
                async for batch in stream.batches():
                    record_batch(batch)
            else:
                async for chunk in stream:
                    record(chunk)
        except (HookError, asyncio.CancelledError):
            raise
        except Exception as exc:
            error = exc if isinstance(exc, LlmError) else adapter_error(exc)
            if assembler.finish is None:
                # Log a raised failure as the finish chunk the in-band path sends, so that the
                # session and the chunk observers see one shape whichever way the adapter failed.
                record(failed_finish(error.failure))
            if error is exc:
                raise
            raise error from exc
        finally:
            close = getattr(stream, "aclose", None)
            if close is not None:
                await close()
        return assembler.result()
