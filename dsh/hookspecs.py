"""The extension surface of dsh: every hook a plugin can implement.

Hooks are grouped by lifecycle phase. Each one names its **call style** (see
``docs/architecture.md``) in its ``spec(...)`` marker, which the runtime reads:

* ``register`` — sync; the implementation receives a ``register`` callable and contributes things
  (and may take ``harness`` to read its config: sections are loaded right after
  ``dsh_register_config``). Every registration returns a disposer.
* ``notify`` — observers, awaited in call order; a failure is logged and contained.
* ``notify-sync`` — hot-path observers; sync implementations only; contained like ``notify``.
* ``waterfall`` — the value is threaded through implementations in call order. Return ``None``
  to pass it on, a new value to replace it, or ``Stop(value)`` to end the chain with ``value``.
* ``middleware`` — each implementation receives the input and ``call_next``; ``await
  call_next(input)`` to continue (possibly with a changed input, possibly wrapped), or return
  without calling it to veto. The terminal is dsh's default behaviour.
* ``first`` — the first non-``None`` result wins.
* ``parallel`` — all implementations run concurrently; failures are raised together.

Implementations may be ``def`` or ``async def`` unless the style is sync. Implementations take
any subset of the arguments, by name. An exception from a waterfall, middleware or first hook
inside a turn ends the turn (never the loop); the error names the plugin and the hook.
"""

from __future__ import annotations

from collections.abc import AsyncIterator, Awaitable, Callable
from typing import TYPE_CHECKING, Any

from dsh.markers import Stop, spec

if TYPE_CHECKING:
    from dsh.agent import Agent, AgentStatus, Continuation, Retry
    from dsh.chunks import LlmFailure, StreamChunk
    from dsh.content import Message
    from dsh.events import SessionEvent, TurnEndReason
    from dsh.harness import Harness
    from dsh.inbox import InboxMessage
    from dsh.prompt import PromptAssembly
    from dsh.request import LlmRequest
    from dsh.session import Session, SessionSummary
    from dsh.tools import ToolExecution, ToolOutcome

# ---------------------------------------------------------------------------------------------
# Contributions: called once while the harness starts, in this order.
# ---------------------------------------------------------------------------------------------


@spec("register")
def dsh_register_config(register: Callable[[str, type[Any]], Any], harness: Harness) -> None:
    """Declare a configuration section: ``register(section_name, attrs_class)``.

    The harness structures ``config[section_name]`` into the class (defaults when absent) and
    reports every error of every section at once. Read it back with
    ``harness.config.section(section_name)``.
    """


@spec("register")
def dsh_register_event_types(register: Callable[[str, type[Any]], Any], harness: Harness) -> None:
    """Declare a session event type: ``register("my/event", attrs_class_of_its_data)``."""


@spec("register")
def dsh_register_llm_adapters(
    register: Callable[..., Callable[[], None]], harness: Harness
) -> None:
    """Contribute model adapters: ``register(model_ids, adapter)``.

    ``adapter`` has ``stream(request) -> AsyncIterator[StreamChunk]`` and may have ``aclose()``
    (awaited at harness stop) and ``model_info(model_id)``. Registering a model id twice fails,
    naming both plugins. An id ``provider/*`` registers a prefix: the adapter also serves any id
    under ``provider/`` that no adapter registered exactly (the longest prefix wins; listings
    show only exact ids).

    ``adapter`` may instead be a :class:`dsh.llm.DeferredAdapter` (``DeferredAdapter(build)``):
    ``build()`` runs the first time one of the ids is used, so a harness that never calls the
    model never imports what the adapter needs (the built-in adapters register so: loading
    them does not import aiohttp). A build that raises ends that use with ``ADAPTER_ERROR``,
    naming the plugin and the model, and is tried again at the next.
    """


@spec("register")
def dsh_register_tools(register: Callable[..., Callable[[], None]], harness: Harness) -> None:
    """Contribute tools: ``register(tool)`` where ``tool`` is a :class:`dsh.tools.Tool`."""


@spec("register")
def dsh_register_prompt_sections(
    register: Callable[..., Callable[[], None]], harness: Harness
) -> None:
    """Contribute system prompt sections: ``register(PromptSection(name, order, text))``."""


@spec("register")
def dsh_register_commands(register: Callable[..., Callable[[], None]], harness: Harness) -> None:
    """Contribute CLI subcommands: ``register(Command(name, help, run, configure))``."""


# ---------------------------------------------------------------------------------------------
# Harness lifetime.
# ---------------------------------------------------------------------------------------------


@spec("notify")
def dsh_harness_start(harness: Harness) -> None:
    """After every contribution is registered and config is loaded, before agents are created."""


@spec("notify")
def dsh_harness_stop(harness: Harness) -> None:
    """While the harness closes, after every agent is disposed and every session flushed."""


# ---------------------------------------------------------------------------------------------
# Agent lifecycle observers.
# ---------------------------------------------------------------------------------------------


@spec("notify")
def dsh_agent_created(agent: Agent) -> None:
    """An agent was created and registered; its loop is about to start."""


@spec("notify")
def dsh_agent_disposed(agent: Agent) -> None:
    """An agent was disposed; its loop has ended."""


@spec("notify")
def dsh_agent_status(agent: Agent, status: AgentStatus) -> None:
    """The agent's status changed to ``idle``, ``running`` or ``disposed``."""


@spec("notify")
def dsh_agent_queued(agent: Agent, message: InboxMessage, steering: bool) -> None:
    """A message was queued for the agent (``steering``: delivered between steps)."""


@spec("notify")
def dsh_agent_turn_start(agent: Agent, turn: int) -> None:
    """A turn started (its ``user/message`` and ``turn/start`` events are logged)."""


@spec("notify")
def dsh_agent_turn_end(agent: Agent, turn: int, reason: TurnEndReason) -> None:
    """A turn ended with ``reason`` (its ``turn/end`` event is logged, not yet flushed)."""


@spec("notify")
def dsh_agent_step_start(agent: Agent, turn: int, step: int) -> None:
    """A step started: the system prompt is about to be assembled and the model called."""


@spec("notify")
def dsh_agent_step_end(agent: Agent, turn: int, step: int) -> None:
    """A step ended: the model answered and every tool call has its result."""


@spec("notify")
def dsh_agent_error(agent: Agent, turn: int, step: int, error: BaseException) -> None:
    """A step or turn failed with ``error`` (an ``error`` event is logged)."""


# ---------------------------------------------------------------------------------------------
# The step: request, stream, result, tools, continuation.
# ---------------------------------------------------------------------------------------------


@spec("waterfall")
def dsh_system_prompt_assemble(assembly: PromptAssembly) -> PromptAssembly | Stop[Any] | None:
    """Rewrite the assembled system prompt (sections and tool schemas) before a request."""


@spec("waterfall")
def dsh_agent_request(
    agent: Agent, turn: int, step: int, request: LlmRequest
) -> LlmRequest | Stop[Any] | None:
    """Rewrite the ``LlmRequest`` about to be streamed: compaction, model switching, tool
    filtering. Anything added to what the model sees must also be logged in the session."""


@spec("middleware")
def dsh_llm_stream(
    request: LlmRequest, call_next: Callable[[LlmRequest], Awaitable[AsyncIterator[StreamChunk]]]
) -> Any:
    """Around every model call: replay, caching, routing, recording.

    Return the chunk stream: ``return await call_next(request)``, or an async generator that
    iterates it, or a stream of your own (veto). The terminal resolves the adapter for
    ``request.model``.
    """


@spec("notify-sync")
def dsh_agent_stream_chunk(agent: Agent, turn: int, step: int, chunk: StreamChunk) -> None:
    """Each chunk as it streams, after it is logged as ``assistant/chunk``: the UI feed."""


@spec("first")
def dsh_agent_request_error(
    agent: Agent, turn: int, step: int, failure: LlmFailure, attempt: int
) -> Retry | None:
    """A model call failed (raised, or finished ``error``/``aborted``). Return ``Retry(delay_s)``
    to run the step's request again; ``None`` lets the step fail. ``attempt`` counts from 1.
    The loop logs the retry as an ``llm/retry`` event (unless ``Retry(record=False)``)."""


@spec("waterfall")
def dsh_agent_step_result(
    agent: Agent, turn: int, step: int, message: Message
) -> Message | Stop[Any] | None:
    """Rewrite the assembled assistant message before it is logged and its tools dispatched."""


@spec("middleware")
def dsh_tools_execute(
    execution: ToolExecution, call_next: Callable[[ToolExecution], Awaitable[ToolOutcome]]
) -> Any:
    """Around every tool call: the one seam for sandbox, permission, approval, plan mode and
    timeouts. ``return await call_next(execution)`` to run it, or return a ``ToolOutcome``
    without calling it to veto."""


@spec("waterfall")
def dsh_agent_turn_continuation(
    agent: Agent, turn: int, decision: Continuation
) -> Continuation | Stop[Any] | None:
    """Decide whether the turn runs another step. The default proceeds when the step had tool
    calls or steering was delivered. Budget guards force-stop; goal loops force-continue."""


# ---------------------------------------------------------------------------------------------
# Sessions: observers, durability, loading.
# ---------------------------------------------------------------------------------------------


@spec("notify-sync")
def dsh_session_created(session: Session) -> None:
    """A session was created (fresh, seeded from a fork, or loaded for resume), before any
    event is appended to it. Sync, so it is ordered before every ``dsh_session_event``."""


@spec("notify-sync")
def dsh_session_event(session: Session, event: SessionEvent) -> None:
    """An event was appended to ``session``: it runs for every streamed chunk, so keep it cheap
    (stores need not buffer here: the log is the buffer, read at the next checkpoint). An
    implementation that wants only some events says which with ``@dsh.for_events(DataClass,
    ...)`` and is not called for the others (most of a step's events are streamed chunks)."""


@spec("parallel")
def dsh_session_checkpoint(session: Session) -> None:
    """Hand what was appended to the operating system (enough to survive the process being
    killed). The loop awaits it before each model request and before each tool execution, so a
    crash never forgets a request already paid for or a side effect already done."""


@spec("parallel")
def dsh_session_flush(session: Session) -> None:
    """Make what was appended durable (by default with an fsync). The loop awaits it at every
    turn end; the harness at close."""


@spec("notify")
def dsh_session_closed(session: Session) -> None:
    """The session's agent was disposed and its events are flushed: release what you keep for
    it (open files, buffers, counters). Events appended to it later (a host reusing the
    session) must still be stored: treat them like those of a session seen for the first time
    (after ``session.persisted``, what its close stored).
    """


@spec("first")
def dsh_session_load(session_id: str) -> list[SessionEvent] | None:
    """The stored events of ``session_id``, for resume and fork; ``None`` if unknown here."""


@spec("first")
def dsh_session_list(query: str | None, limit: int) -> list[SessionSummary] | None:
    """Stored sessions, newest first: at most ``limit``, only those whose id or text contains
    ``query`` when given. ``None`` if this plugin stores no sessions."""


# ---------------------------------------------------------------------------------------------
# Tool policy.
# ---------------------------------------------------------------------------------------------


@spec("first")
def dsh_tools_approve(execution: ToolExecution, reason: str) -> bool | None:
    """A permission policy asks whether ``execution`` may run (``reason`` says why it asks).
    Hosts answer ``True``/``False``; ``None`` lets the next implementation answer. Nobody
    answering means no."""
