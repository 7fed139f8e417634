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

from collections.abc import AsyncIterator, Awaitable, Callable, Sequence
from typing import TYPE_CHECKING, Any

from dsh.hooks._markers import Stop, spec

if TYPE_CHECKING:
    from dsh.app._harness import Harness
    from dsh.llm._prompt import PromptAssembly
    from dsh.loop._inbox import InboxMessage
    from dsh.session._session import Session, SessionSummary
    from dsh.tools._registry import ToolExecution, ToolOutcome
    from dsh.values._agent import Agent, AgentStatus, Continuation, Retry
    from dsh.values._chunks import LlmFailure, StreamChunk
    from dsh.values._content import Message
    from dsh.values._events import SessionEvent, TurnEndReason
    from dsh.values._request import LlmRequest

# ---------------------------------------------------------------------------------------------
# Contributions: called once while the harness starts, in this order.
# ---------------------------------------------------------------------------------------------


@spec("register")
def dsh_register_config(register: Callable[[str, type[Any]], Any], harness: Harness) -> None:
    """Declare a configuration section: ``register(section_name, attrs_class)``.

    The harness structures ``config[section_name]`` into the class (defaults when absent) and
    reports every error of every section at once. Read it back with
    ``harness.config.section(section_name)``.

    Register: called once, synchronously (``def`` only), while the harness loads its plugins,
    before the other ``dsh_register_*`` hooks; an exception ends the load, naming the plugin.

    :param register: ``register(section_name, attrs_class)`` claims one section; a section
        claimed by two plugins with different classes is an error.
    :param harness: The harness being loaded; its config is loaded right after this hook.
    """


@spec("register")
def dsh_register_event_types(register: Callable[[str, type[Any]], Any], harness: Harness) -> None:
    """Declare a session event type: ``register("my/event", attrs_class_of_its_data)``.

    Register: called once, synchronously (``def`` only), while the harness loads its plugins;
    an exception ends the load, naming the plugin.

    :param register: ``register(event_type, data_class)`` declares one type; a name already
        registered with another class is an error.
    :param harness: The harness being loaded; its config is loaded.
    """


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

    ``adapter`` may instead be a :class:`dsh.plugin.DeferredAdapter`
    (``DeferredAdapter(build)``): ``build()`` runs the first time one of the ids is used, so a
    harness that never calls the model never imports what the adapter needs (the built-in adapters
    register so: loading them does not import aiohttp). A build that raises ends that use with
    ``ADAPTER_ERROR``, naming the plugin and the model, and is tried again at the next.

    Register: called once, synchronously (``def`` only), while the harness loads its plugins;
    an exception ends the load, naming the plugin.

    :param register: ``register(model_ids, adapter)`` serves the ids with the adapter (all or
        none of them) and returns a disposer.
    :param harness: The harness being loaded; its config is loaded.
    """


@spec("register")
def dsh_register_tools(register: Callable[..., Callable[[], None]], harness: Harness) -> None:
    """Contribute tools: ``register(tool)`` where ``tool`` is a
    :class:`dsh.plugin.Tool`.

    Register: called once, synchronously (``def`` only), while the harness loads its plugins;
    an exception ends the load, naming the plugin.

    :param register: ``register(tool)`` adds one tool and returns a disposer; a tool refused
        for its name or schema is logged and left out, and the plugin's other tools go on.
    :param harness: The harness being loaded; its config is loaded.
    """


@spec("register")
def dsh_register_prompt_sections(
    register: Callable[..., Callable[[], None]], harness: Harness
) -> None:
    """Contribute system prompt sections: ``register(PromptSection(name, order, text))``.

    Register: called once, synchronously (``def`` only), while the harness loads its plugins;
    an exception ends the load, naming the plugin.

    :param register: ``register(section)`` adds one section and returns a disposer; section
        names are unique.
    :param harness: The harness being loaded; its config is loaded.
    """


@spec("register")
def dsh_register_commands(register: Callable[..., Callable[[], None]], harness: Harness) -> None:
    """Contribute CLI subcommands: ``register(Command(name, help, run, configure))``.

    Register: called once, synchronously (``def`` only), while the harness loads its plugins;
    an exception ends the load, naming the plugin.

    :param register: ``register(command)`` adds one subcommand and returns a disposer; command
        names are unique.
    :param harness: The harness being loaded; its config is loaded.
    """


# ---------------------------------------------------------------------------------------------
# Harness lifetime.
# ---------------------------------------------------------------------------------------------


@spec("notify")
def dsh_harness_start(harness: Harness) -> None:
    """After every contribution is registered and config is loaded, before agents are created.

    Notify: every implementation is called, and awaited, in call order; what it returns is
    ignored, and an exception is logged without reaching the harness or the other
    implementations.

    :param harness: The harness starting; read your config with ``harness.config.section``.
    """


@spec("notify")
def dsh_harness_stop(harness: Harness) -> None:
    """While the harness closes, after every agent is disposed and every session flushed.

    Notify: every implementation is called, and awaited, in call order; what it returns is
    ignored, and an exception is logged without reaching the harness or the other
    implementations. The adapters are closed after it.

    :param harness: The harness closing.
    """


# ---------------------------------------------------------------------------------------------
# Agent lifecycle observers.
# ---------------------------------------------------------------------------------------------


@spec("notify")
def dsh_agent_created(agent: Agent) -> None:
    """An agent was created and registered; its loop is about to start.

    Notify: every implementation is called, and awaited, in call order; what it returns is
    ignored, and an exception is logged without reaching the agent or the other
    implementations.

    :param agent: The new agent (``agent.id``, ``agent.options``, ``agent.session``).
    """


@spec("notify")
def dsh_agent_disposed(agent: Agent) -> None:
    """An agent was disposed; its loop has ended.

    Notify: every implementation is called, and awaited, in call order; what it returns is
    ignored, and an exception is logged without reaching the agent or the other
    implementations.

    :param agent: The disposed agent; its session is closed.
    """


@spec("notify")
def dsh_agent_status(agent: Agent, status: AgentStatus) -> None:
    """The agent's status changed to ``idle``, ``running``, ``waiting`` (its turn waits for
    decisions on parked tool calls, its own or a sub-agent's it waits for) or ``disposed``.

    Notify: every implementation is called, and awaited, in call order; what it returns is
    ignored, and an exception is logged without reaching the agent or the other
    implementations.

    :param agent: The agent whose status changed.
    :param status: Its new status, also ``agent.status``.
    """


@spec("notify")
def dsh_agent_queued(agent: Agent, message: InboxMessage, steering: bool) -> None:
    """A message was queued for the agent (``steering``: delivered between steps).

    Notify: every implementation is called, and awaited, in call order; what it returns is
    ignored, and an exception is logged without reaching the agent or the other
    implementations. It runs in a task of its own: sending does not wait for it.

    :param agent: The agent the message was sent to.
    :param message: The queued message: its ``content``, its ``source``, and ``queued_seq``,
        the seq of its ``inbox/queued`` event if it has one (a message to a busy agent is
        logged so).
    :param steering: True for a message steered into the running turn (delivered between its
        steps), False for one that waits for the next turn.
    """


@spec("notify")
def dsh_agent_turn_start(agent: Agent, turn: int) -> None:
    """A turn started (its ``user/message`` and ``turn/start`` events are logged).

    Notify: every implementation is called, and awaited, in call order; what it returns is
    ignored, and an exception is logged without reaching the agent or the other
    implementations.

    :param agent: The agent running the turn.
    :param turn: The turn's number in the agent's session (turns count from 1).
    """


@spec("notify")
def dsh_agent_turn_end(agent: Agent, turn: int, reason: TurnEndReason) -> None:
    """A turn ended with ``reason`` (its ``turn/end`` event is logged, not yet flushed).

    Notify: every implementation is called, and awaited, in call order; what it returns is
    ignored, and an exception is logged without reaching the agent or the other
    implementations.

    :param agent: The agent that ran the turn.
    :param turn: The turn's number in the agent's session (turns count from 1).
    :param reason: Why it ended: ``TurnCompleted``, ``TurnAborted``, ``TurnError``,
        ``TurnMaxTokens`` or ``TurnDisposed``.
    """


@spec("notify")
def dsh_agent_step_start(agent: Agent, turn: int, step: int) -> None:
    """A step started: the system prompt is about to be assembled and the model called.

    Notify: every implementation is called, and awaited, in call order; what it returns is
    ignored, and an exception is logged without reaching the agent or the other
    implementations.

    :param agent: The agent running the step.
    :param turn: The number of the turn the step belongs to.
    :param step: The step's number within its turn (from 1).
    """


@spec("notify")
def dsh_agent_step_end(agent: Agent, turn: int, step: int) -> None:
    """A step ended: the model answered and every tool call has its result.

    Notify: every implementation is called, and awaited, in call order; what it returns is
    ignored, and an exception is logged without reaching the agent or the other
    implementations. It also runs after a step that failed or was stopped.

    :param agent: The agent that ran the step.
    :param turn: The number of the turn the step belongs to.
    :param step: The step's number within its turn (from 1).
    """


@spec("notify")
def dsh_agent_error(agent: Agent, turn: int, step: int, error: BaseException) -> None:
    """A step or turn failed with ``error`` (an ``error`` event is logged).

    Notify: every implementation is called, and awaited, in call order; what it returns is
    ignored, and an exception is logged without reaching the agent or the other
    implementations.

    :param agent: The agent whose turn failed.
    :param turn: The number of the failed turn.
    :param step: The number of the failed step; 0 when the failure was outside a step.
    :param error: The exception: a ``HookError`` names the plugin and the hook; a model call
        that failed for good arrives as an exception whose ``failure`` is its ``LlmFailure``.
    """


# ---------------------------------------------------------------------------------------------
# The step: request, stream, result, tools, continuation.
# ---------------------------------------------------------------------------------------------


@spec("waterfall")
def dsh_system_prompt_assemble(assembly: PromptAssembly) -> PromptAssembly | Stop[Any] | None:
    """Rewrite the assembled system prompt (sections and tool schemas) before a request.

    Waterfall: each implementation receives ``assembly`` as the previous one left it and
    returns ``None`` to pass it on, a new ``PromptAssembly`` to replace it, or ``Stop(value)``
    to end the chain with ``value``. An exception is raised as a ``HookError`` naming the
    plugin; in a step, it ends the turn.

    :param assembly: The prompt sections, sorted by ``order``, and the schemas of the
        registered tools, as the previous implementation left them.
    """


@spec("waterfall")
def dsh_agent_request(
    agent: Agent, turn: int, step: int, request: LlmRequest
) -> LlmRequest | Stop[Any] | None:
    """Rewrite the ``LlmRequest`` about to be streamed: compaction, model switching, tool
    filtering. Anything added to what the model sees must also be logged in the session.

    Waterfall: each implementation receives ``request`` as the previous one left it and
    returns ``None`` to pass it on, a new ``LlmRequest`` to replace it, or ``Stop(value)`` to
    end the chain with ``value``. An exception ends the turn, naming the plugin.

    :param agent: The agent whose step calls the model.
    :param turn: The number of the step's turn.
    :param step: The step's number within its turn (from 1).
    :param request: The request built from the agent's options, its session's history and the
        assembled system prompt (built again for each attempt), as the previous
        implementation left it.
    """


@spec("middleware")
def dsh_llm_stream(
    request: LlmRequest, call_next: Callable[[LlmRequest], Awaitable[AsyncIterator[StreamChunk]]]
) -> Any:
    """Around every model call: replay, caching, routing, recording.

    Return the chunk stream: ``return await call_next(request)``, or an async generator that
    iterates it, or a stream of your own (veto). The terminal resolves the adapter for
    ``request.model``.

    Middleware: each implementation receives the input and ``call_next``, which runs the later
    implementations and, last, the terminal; call it with the input (possibly changed), or
    return without calling it to veto. An exception from an implementation is raised as a
    ``HookError`` naming the plugin; one from further down passes through as it is.

    :param request: The request to stream: an agent step's, or another caller's
        (``request.purpose`` names it, e.g. ``"compaction"``).
    :param call_next: ``await call_next(request)`` runs the later implementations, then the
        terminal, and returns their chunk stream.
    """


@spec("notify-sync")
def dsh_agent_stream_chunk(agent: Agent, turn: int, step: int, chunk: StreamChunk) -> None:
    """Each chunk as it streams, after it is logged as ``assistant/chunk``: the UI feed.

    Notify-sync: every implementation is called synchronously, in call order (``async def``
    is refused when the plugin loads); what it returns is ignored, and an exception is logged
    without reaching the step or the other implementations.

    :param agent: The agent whose step is streaming.
    :param turn: The number of the step's turn.
    :param step: The step's number within its turn (from 1).
    :param chunk: The chunk just streamed; a failure raised by the adapter arrives as the
        finish chunk it is logged as.
    """


@spec("notify-sync")
def dsh_agent_stream_batch(
    agent: Agent, turn: int, step: int, chunks: Sequence[StreamChunk]
) -> None:
    """The chunks of one network read together, after they are logged: the UI feed of a host
    that draws once per read rather than once per chunk (a reply of thousands of deltas
    arrives in a few dozen reads). Every chunk of the step comes to this hook once, in order:
    from an adapter that streams in batches (:class:`~dsh.llm._batches.ChunkBatches`) a read's
    chunks come together; from one that streams chunk by chunk, each chunk is a batch of its own.

    Notify-sync: every implementation is called synchronously, in call order (``async def``
    is refused when the plugin loads); what it returns is ignored, and an exception is logged
    without reaching the step or the other implementations.

    :param agent: The agent whose step is streaming.
    :param turn: The number of the step's turn.
    :param step: The step's number within its turn (from 1).
    :param chunks: The chunks, in order (never empty); a failure raised by the adapter arrives
        as the finish chunk it is logged as.
    """


@spec("first")
def dsh_agent_request_error(
    agent: Agent, turn: int, step: int, failure: LlmFailure, attempt: int
) -> Retry | None:
    """A model call failed (raised, or finished ``error``/``aborted``). Return ``Retry(delay_s)``
    to run the step's request again; ``None`` lets the step fail. ``attempt`` counts from 1.
    The loop logs the retry as an ``llm/retry`` event (unless ``Retry(record=False)``).

    First: implementations are asked in call order until one returns something other than
    ``None``; that answer wins and the later ones are not called. An exception ends the turn,
    naming the plugin.

    :param agent: The agent whose step called the model.
    :param turn: The number of the step's turn.
    :param step: The step's number within its turn (from 1).
    :param failure: Why the call failed: ``failure.code`` is canonical (``RATE_LIMIT``,
        ``SERVER``, ``TIMEOUT``, ...); ``failure.retry_after_s`` is the provider's hint, if any.
    :param attempt: Which model call of the step failed, counting from 1.
    """


@spec("waterfall")
def dsh_agent_step_result(
    agent: Agent, turn: int, step: int, message: Message
) -> Message | Stop[Any] | None:
    """Rewrite the assembled assistant message before it is logged and its tools dispatched.

    Waterfall: each implementation receives ``message`` as the previous one left it and
    returns ``None`` to pass it on, a new ``Message`` to replace it, or ``Stop(value)`` to end
    the chain with ``value``. An exception ends the turn, naming the plugin.

    :param agent: The agent whose step this is.
    :param turn: The number of the step's turn.
    :param step: The step's number within its turn (from 1).
    :param message: The assistant message assembled from the stream, as the previous
        implementation left it.
    """


@spec("middleware")
def dsh_tools_execute(
    execution: ToolExecution, call_next: Callable[[ToolExecution], Awaitable[ToolOutcome]]
) -> Any:
    """Around every tool call: the one seam for sandbox, permission, approval, plan mode and
    timeouts. ``return await call_next(execution)`` to run it, or return a ``ToolOutcome``
    without calling it to veto.

    Middleware: each implementation receives the input and ``call_next``, which runs the later
    implementations and, last, the terminal (the tool); call it with the input (possibly
    changed), or return without calling it to veto. An exception becomes the call's
    ``TOOL_ERROR`` outcome.

    :param execution: The call: its ``call_id``, the tool's ``name``, the raw JSON
        ``arguments`` and the calling ``agent`` (``None`` when no agent calls).
    :param call_next: ``await call_next(execution)`` runs the later implementations, then the
        tool, and returns the ``ToolOutcome``.
    """


@spec("waterfall")
def dsh_agent_turn_continuation(
    agent: Agent, turn: int, decision: Continuation
) -> Continuation | Stop[Any] | None:
    """Decide whether the turn runs another step. The default proceeds when the step had tool
    calls or steering was delivered. Budget guards force-stop; goal loops force-continue.

    Waterfall: each implementation receives ``decision`` as the previous one left it and
    returns ``None`` to pass it on, a new ``Continuation`` to replace it, or ``Stop(value)``
    to end the chain with ``value``. An exception ends the turn, naming the plugin.

    :param agent: The agent running the turn.
    :param turn: The turn's number in the agent's session.
    :param decision: ``proceed`` (whether to run another step) and its ``reason``, as the
        previous implementation left them.
    """


# ---------------------------------------------------------------------------------------------
# Sessions: observers, durability, loading.
# ---------------------------------------------------------------------------------------------


@spec("notify-sync")
def dsh_session_created(session: Session) -> None:
    """A session was created (fresh, seeded from a fork, or loaded for resume), before any
    event is appended to it. Sync, so it is ordered before every ``dsh_session_event``.

    Notify-sync: every implementation is called synchronously, in call order (``async def``
    is refused when the plugin loads); what it returns is ignored, and an exception is logged
    without reaching the caller or the other implementations.

    :param session: The new session: its ``id``, its seed ``events``, the ``parent`` it was
        forked from, and ``persisted``, how many of its events a store already holds.
    """


@spec("notify-sync")
def dsh_session_event(session: Session, event: SessionEvent) -> None:
    """An event was appended to ``session``: it runs for every streamed chunk, so keep it cheap
    (stores need not buffer here: the log is the buffer, read at the next checkpoint). An
    implementation that wants only some events says which with ``@dsh.for_events(DataClass,
    ...)`` and is not called for the others (most of a step's events are streamed chunks); a
    built-in type whose class is defined when first needed may be named by its tag
    (``HISTORY_SUMMARY``), so that loading the plugin does not define it.

    Notify-sync: every implementation is called synchronously, in call order (``async def``
    is refused when the plugin loads); what it returns is ignored, and an exception is logged
    without reaching the session or the other implementations.

    :param session: The session appended to.
    :param event: The event: its ``type``, its ``seq`` (contiguous from 0), its ``time``
        (epoch seconds) and its ``data``.
    """


@spec("parallel")
def dsh_session_checkpoint(session: Session) -> None:
    """Hand what was appended to the operating system (enough to survive the process being
    killed). The loop awaits it before each model request and before each tool execution, so a
    crash never forgets a request already paid for or a side effect already done.

    Parallel: every implementation is called in call order, and the awaitables they return
    run concurrently; once all have settled, their failures are raised together as an
    ``ExceptionGroup`` of ``HookError``.

    :param session: The session whose appended events to write.
    """


@spec("parallel")
def dsh_session_flush(session: Session) -> None:
    """Make what was appended durable (by default with an fsync). The loop awaits it at every
    turn end; the harness at close.

    Parallel: every implementation is called in call order, and the awaitables they return
    run concurrently; once all have settled, their failures are raised together as an
    ``ExceptionGroup`` of ``HookError``.

    :param session: The session whose appended events to make durable.
    """


@spec("notify")
def dsh_session_closed(session: Session) -> None:
    """The session's agent was disposed and its events are flushed: release what you keep for
    it (open files, buffers, counters). Events appended to it later (a host reusing the
    session) must still be stored: treat them like those of a session seen for the first time
    (after ``session.persisted``, what its close stored).

    Notify: every implementation is called, and awaited, in call order; what it returns is
    ignored, and an exception is logged without reaching the caller or the other
    implementations.

    :param session: The closed session.
    """


@spec("first")
def dsh_session_load(session_id: str) -> list[SessionEvent] | None:
    """The stored events of ``session_id``, for resume and fork; ``None`` if unknown here.

    First: implementations are asked in call order until one returns something other than
    ``None``; that answer wins and the later ones are not called. An exception is raised to
    the caller as a ``HookError`` naming the plugin.

    :param session_id: The id of the session to read.
    """


@spec("first")
def dsh_session_list(query: str | None, limit: int) -> list[SessionSummary] | None:
    """Stored sessions, newest first: at most ``limit``, only those whose id or text contains
    ``query`` when given. ``None`` if this plugin stores no sessions.

    First: implementations are asked in call order until one returns something other than
    ``None``; that answer wins and the later ones are not called. An exception is raised to
    the caller as a ``HookError`` naming the plugin.

    :param query: The text to look for; ``None`` lists every session.
    :param limit: The most summaries to return.
    """


# ---------------------------------------------------------------------------------------------
# Tool policy.
# ---------------------------------------------------------------------------------------------


@spec("first")
def dsh_tools_approve(execution: ToolExecution, reason: str) -> bool | None:
    """A permission policy asks whether ``execution`` may run (``reason`` says why it asks).
    Hosts answer ``True``/``False``; ``None`` lets the next implementation answer. Nobody
    answering means no.

    First: implementations are asked in call order until one returns something other than
    ``None``; that answer wins and the later ones are not called. An exception is raised to
    the asking policy as a ``HookError`` naming the plugin.

    :param execution: The tool call waiting for an answer.
    :param reason: Why the policy asks, for whoever answers to show.
    """
