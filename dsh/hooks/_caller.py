"""How hooks are called: the seven call styles over pluggy's registry, and the typed facade.

pluggy finds, validates and orders implementations; it never awaits, so :class:`HookRuntime`
calls them itself, in pluggy's call order (last registered first, ``tryfirst``/``trylast``
honoured). :class:`Hooks` is the typed facade: one method per hook, the only caller the loop uses.
"""

from __future__ import annotations

import asyncio
import inspect
import operator
from collections.abc import AsyncIterator, Awaitable, Callable, Mapping, Sequence
from typing import TYPE_CHECKING, Any, TypeVar, cast

import pluggy

from dsh._log import get_logger
from dsh.hooks import _specs as hookspecs
from dsh.hooks._markers import SYNC_STYLES, Stop, Style, event_types_of, style_of
from dsh.values._errors import HookError, PluginLoadError
from dsh.values._events import defined_classes

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

__all__ = ["HOOK_ARGS", "HOOK_STYLES", "SESSION_HOOKS", "HookRuntime", "Hooks", "Impl"]

log = get_logger("dsh.hooks")
T = TypeVar("T")

HOOK_STYLES: dict[str, Style] = {
    name: style_of(fn) for name, fn in vars(hookspecs).items() if name.startswith("dsh_")
}
#: Each hook's arguments, in the order of its spec.
HOOK_ARGS: dict[str, tuple[str, ...]] = {
    name: tuple(inspect.signature(getattr(hookspecs, name)).parameters) for name in HOOK_STYLES
}

#: The hooks of a session's life (``dsh_session_*``). A plugin whose ``session_hooks_active``
#: attribute is false (a store configured off) is left out of them: it would do nothing, and
#: ``dsh_session_event`` runs for every streamed chunk.
SESSION_HOOKS = frozenset(name for name in HOOK_STYLES if name.startswith("dsh_session_"))


def _takes_part(hook: str, hookimpl: pluggy.HookImpl) -> bool:
    """Whether ``hookimpl`` is called for ``hook`` (see :data:`SESSION_HOOKS`)."""
    return hook not in SESSION_HOOKS or getattr(hookimpl.plugin, "session_hooks_active", True)


class Impl:
    """One implementation, prepared for calling: the function, its argument names, its plugin.

    The arguments it takes are picked from the call's keyword mapping by a prebuilt
    ``itemgetter``: notify-sync hooks run for every streamed chunk.
    """

    __slots__ = ("_get", "_many", "argnames", "function", "plugin")

    def __init__(self, hookimpl: pluggy.HookImpl) -> None:
        self.function: Callable[..., Any] = hookimpl.function
        self.argnames: tuple[str, ...] = tuple(hookimpl.argnames)
        self.plugin: str = hookimpl.plugin_name
        self._get = operator.itemgetter(*self.argnames) if self.argnames else None
        self._many = len(self.argnames) > 1

    def __call__(self, kwargs: Mapping[str, Any]) -> Any:
        get = self._get
        if get is None:
            return self.function()
        if self._many:
            return self.function(*get(kwargs))
        return self.function(get(kwargs))


def _nothing(*args: Any) -> None:
    """The notifier of a hook without implementations: a call that does nothing."""


def _positional(impl: Impl, argnames: tuple[str, ...]) -> Callable[..., Any]:
    """``impl`` as a function of the hook's arguments in spec order: the plugin's own function
    when it takes all of them in that order (the common case), else one that picks its own."""
    function = impl.function
    if impl.argnames == argnames:
        return function
    if not impl.argnames:
        return lambda *args: function()
    get = operator.itemgetter(*(argnames.index(name) for name in impl.argnames))
    if len(impl.argnames) == 1:
        return lambda *args: function(get(args))
    return lambda *args: function(*get(args))


def _notifier(hook: str, argnames: tuple[str, ...], impls: list[Impl]) -> Callable[..., None]:
    """One function calling every implementation of notify-sync ``hook`` in call order with
    the hook's arguments, positional, each failure logged: no mapping built and no argument
    picked per call where the plugin takes the spec's arguments."""
    if not impls:
        return _nothing
    calls = tuple((_positional(impl, argnames), impl.plugin) for impl in impls)
    wanted = [event_types_of(impl.function) for impl in impls]
    if any(wanted):  # only hooks with an event argument take the marker (check_impl)
        return _event_notifier(hook, argnames.index("event"), calls, wanted)

    def notify(*args: Any) -> None:
        for call, plugin in calls:
            try:
                call(*args)
            except Exception:
                log.exception("hook failed", hook=hook, plugin=plugin)

    return notify


Calls = tuple[tuple[Callable[..., Any], str], ...]


def _event_notifier(
    hook: str, at: int, calls: Calls, wanted: list[tuple[type[Any] | str, ...] | None]
) -> Callable[..., None]:
    """``_notifier`` for a hook carrying an event (argument ``at``), some of whose
    implementations want only some events (``wanted``, by :func:`~dsh.hooks._markers.for_events`):
    the calls for each class of event data are picked on its first event, and an event nobody wants
    costs a lookup. (The calling loop is ``_notifier``'s: one call per implementation per event,
    no helper between.)"""
    by_class: dict[type[Any], Calls] = {}

    def calls_for(cls: type[Any]) -> Calls:
        picked = tuple(
            pair for pair, types in zip(calls, wanted, strict=True) if _takes(types, cls)
        )
        by_class[cls] = picked
        return picked

    def notify(*args: Any) -> None:
        cls = type(args[at].data)
        picked = by_class.get(cls)
        for call, plugin in calls_for(cls) if picked is None else picked:
            try:
                call(*args)
            except Exception:
                log.exception("hook failed", hook=hook, plugin=plugin)

    return notify


def _takes(types: tuple[type[Any] | str, ...] | None, cls: type[Any]) -> bool:
    """Whether an implementation that wants events of ``types`` (``None``: every event, as
    :func:`~dsh.hooks._markers.event_types_of` says) takes one whose data is a ``cls``. (Asked
    once per class, when its first event comes: a tag's class is defined by then if ``cls``
    derives from it.)"""
    return not types or issubclass(cls, defined_classes(types))


def _pending(value: Any) -> bool:
    """Whether an implementation's ``value`` is an awaitable to await (tolerant callers: it may
    return a value or an awaitable of one). ``None``, what most return, is told first: no
    coroutine of a helper per call, several hooks run at every step."""
    return value is not None and inspect.isawaitable(value)


#: Set on an exception the rest of a middleware chain raised (a ``call_next``), so that the
#: middleware that called it does not take the blame: an adapter's ``LlmError`` must reach the
#: loop as itself.
_DOWNSTREAM = "_dsh_downstream"


def check_impl(hook: str, hookimpl: pluggy.HookImpl) -> None:
    """Reject implementations that cannot honour their hook's call style."""
    style = HOOK_STYLES[hook]
    fn = hookimpl.function
    where = f"plugin {hookimpl.plugin_name!r} implements {hook}"
    if hookimpl.hookwrapper or hookimpl.wrapper:
        # dsh calls every implementation itself (pluggy never awaits), so pluggy wrappers
        # would silently not wrap anything: the middleware hooks are the way to wrap.
        raise PluginLoadError(
            f"{where} as a pluggy wrapper, but {hook} is a {style} hook; dsh hooks take no "
            "wrappers (wrap behaviour with the middleware hooks dsh_llm_stream and "
            "dsh_tools_execute)"
        )
    if event_types_of(fn) and "event" not in HOOK_ARGS[hook]:
        raise PluginLoadError(
            f"{where} marked with for_events, but {hook} carries no event: for_events filters "
            "dsh_session_event"
        )
    is_async = inspect.iscoroutinefunction(fn) or inspect.isasyncgenfunction(fn)
    if is_async and style in SYNC_STYLES:
        raise PluginLoadError(f"{where} with 'async def', but {hook} is {style}: use 'def'")


class HookRuntime:
    """Calls hooks in their style. Ordered implementation lists are cached per hook and dropped
    whenever a plugin is registered or unregistered, and once the harness has started (where
    plugins read their configuration, and a store learns whether it is on): :meth:`invalidate`.
    """

    def __init__(self, pm: pluggy.PluginManager) -> None:
        self.pm = pm
        self._impls: dict[str, list[Impl]] = {}
        self._notifiers: dict[str, Callable[..., None]] = {}
        self._observed: dict[tuple[str, type[Any]], bool] = {}

    def invalidate(self) -> None:
        self._impls.clear()
        self._notifiers.clear()
        self._observed.clear()

    def impls(self, hook: str) -> list[Impl]:
        """The implementations of ``hook`` in call order."""
        found = self._impls.get(hook)
        if found is None:
            caller: pluggy.HookCaller = getattr(self.pm.hook, hook)
            found = [Impl(h) for h in reversed(caller.get_hookimpls()) if _takes_part(hook, h)]
            self._impls[hook] = found
        return found

    def call_register(
        self, hook: str, make_register: Callable[[str], Callable[..., Any]], harness: Harness
    ) -> None:
        """Call a register hook, handing each plugin a ``register`` bound to its name."""
        for impl in self.impls(hook):
            try:
                impl({"register": make_register(impl.plugin), "harness": harness})
            except Exception as exc:
                raise HookError(hook, impl.plugin, exc) from exc

    async def notify(self, hook: str, kwargs: Mapping[str, Any]) -> None:
        for impl in self.impls(hook):
            try:
                result = impl(kwargs)
                if _pending(result):
                    await result
            except Exception:
                log.exception("hook failed", hook=hook, plugin=impl.plugin)

    def notify_sync(self, hook: str, kwargs: Mapping[str, Any]) -> None:
        for impl in self.impls(hook):
            try:
                impl(kwargs)
            except Exception:
                log.exception("hook failed", hook=hook, plugin=impl.plugin)

    def notifier(self, hook: str) -> Callable[..., None]:
        """A function that calls notify-sync ``hook`` as :meth:`notify_sync` does, its arguments
        positional in the order of the hookspec. The hooks run per streamed chunk use it:
        a hook nobody implements costs one call that does nothing."""
        found = self._notifiers.get(hook)
        if found is None:
            found = _notifier(hook, HOOK_ARGS[hook], self.impls(hook))
            self._notifiers[hook] = found
        return found

    def observed(self, hook: str, cls: type[Any]) -> bool:
        """Whether an implementation of ``hook``, which carries an event, takes an event whose
        data is a ``cls`` (one without :func:`~dsh.hooks._markers.for_events` takes every event)."""
        key = (hook, cls)
        found = self._observed.get(key)
        if found is None:
            wanted = (event_types_of(impl.function) for impl in self.impls(hook))
            found = self._observed[key] = any(_takes(types, cls) for types in wanted)
        return found

    async def waterfall(self, hook: str, key: str, kwargs: dict[str, Any]) -> Any:
        """Thread ``kwargs[key]`` through the implementations; returns the final value."""
        for impl in self.impls(hook):
            try:
                result = impl(kwargs)
                if _pending(result):
                    result = await result
            except Exception as exc:
                raise HookError(hook, impl.plugin, exc) from exc
            if isinstance(result, Stop):
                return result.value
            if result is not None:
                kwargs[key] = result
        return kwargs[key]

    async def middleware(
        self, hook: str, key: str, value: Any, terminal: Callable[[Any], Any]
    ) -> Any:
        """Run the chain of implementations around ``terminal(value)``."""
        impls = self.impls(hook)

        async def call(position: int, current: Any) -> Any:
            # Every position after the first is a call_next: what it raises is marked as the
            # rest of the chain's (no coroutine of a wrapper per link).
            try:
                if position == len(impls):
                    result = terminal(current)
                    return await result if _pending(result) else result
                impl = impls[position]

                def call_next(changed: Any) -> Awaitable[Any]:
                    return call(position + 1, changed)

                try:
                    result = impl({key: current, "call_next": call_next})
                    return await result if _pending(result) else result
                except Exception as exc:
                    if isinstance(exc, HookError) or getattr(exc, _DOWNSTREAM, False):
                        raise
                    raise HookError(hook, impl.plugin, exc) from exc
            except Exception as exc:
                if position:
                    setattr(exc, _DOWNSTREAM, True)
                raise

        return await call(0, value)

    async def first(self, hook: str, kwargs: Mapping[str, Any]) -> Any:
        for impl in self.impls(hook):
            try:
                result = impl(kwargs)
                if _pending(result):
                    result = await result
            except Exception as exc:
                raise HookError(hook, impl.plugin, exc) from exc
            if result is not None:
                return result
        return None

    async def parallel(self, hook: str, kwargs: Mapping[str, Any]) -> None:
        """Run every implementation concurrently; raise all failures together once all settle.

        Sync implementations simply run in call order; only awaitables are gathered. The
        checkpoint hook runs twice per step, and a task per call would cost more than the small
        buffered write a persistence plugin does there.
        """
        failures: list[HookError] = []
        waiting: list[tuple[Impl, Awaitable[Any]]] = []
        for impl in self.impls(hook):
            try:
                result = impl(kwargs)
            except Exception as exc:
                failures.append(HookError(hook, impl.plugin, exc))
                continue
            if _pending(result):
                waiting.append((impl, result))
        if waiting:
            results = await asyncio.gather(*(w for _, w in waiting), return_exceptions=True)
            failures += [
                HookError(hook, impl.plugin, result)
                for (impl, _), result in zip(waiting, results, strict=True)
                if isinstance(result, BaseException)
            ]
        if failures:
            raise ExceptionGroup(f"{len(failures)} implementation(s) of {hook} failed", failures)


class Hooks:
    """The typed facade over :class:`HookRuntime`: one method per hook in ``dsh.hooks._specs``."""

    def __init__(self, runtime: HookRuntime) -> None:
        self.runtime = runtime

    # -- harness ---------------------------------------------------------------------------
    def harness_start(self, harness: Harness) -> Awaitable[None]:
        return self.runtime.notify("dsh_harness_start", {"harness": harness})

    def harness_stop(self, harness: Harness) -> Awaitable[None]:
        return self.runtime.notify("dsh_harness_stop", {"harness": harness})

    # -- agent lifecycle -------------------------------------------------------------------
    def agent_created(self, agent: Agent) -> Awaitable[None]:
        return self.runtime.notify("dsh_agent_created", {"agent": agent})

    def agent_disposed(self, agent: Agent) -> Awaitable[None]:
        return self.runtime.notify("dsh_agent_disposed", {"agent": agent})

    def agent_status(self, agent: Agent, status: AgentStatus) -> Awaitable[None]:
        return self.runtime.notify("dsh_agent_status", {"agent": agent, "status": status})

    def agent_queued(self, agent: Agent, message: InboxMessage, steering: bool) -> Awaitable[None]:
        kwargs = {"agent": agent, "message": message, "steering": steering}
        return self.runtime.notify("dsh_agent_queued", kwargs)

    def agent_turn_start(self, agent: Agent, turn: int) -> Awaitable[None]:
        return self.runtime.notify("dsh_agent_turn_start", {"agent": agent, "turn": turn})

    def agent_turn_end(self, agent: Agent, turn: int, reason: TurnEndReason) -> Awaitable[None]:
        kwargs = {"agent": agent, "turn": turn, "reason": reason}
        return self.runtime.notify("dsh_agent_turn_end", kwargs)

    def agent_step_start(self, agent: Agent, turn: int, step: int) -> Awaitable[None]:
        kwargs = {"agent": agent, "turn": turn, "step": step}
        return self.runtime.notify("dsh_agent_step_start", kwargs)

    def agent_step_end(self, agent: Agent, turn: int, step: int) -> Awaitable[None]:
        kwargs = {"agent": agent, "turn": turn, "step": step}
        return self.runtime.notify("dsh_agent_step_end", kwargs)

    def agent_error(
        self, agent: Agent, turn: int, step: int, error: BaseException
    ) -> Awaitable[None]:
        kwargs = {"agent": agent, "turn": turn, "step": step, "error": error}
        return self.runtime.notify("dsh_agent_error", kwargs)

    # -- the step --------------------------------------------------------------------------
    def system_prompt_assemble(self, assembly: PromptAssembly) -> Awaitable[PromptAssembly]:
        kwargs: dict[str, Any] = {"assembly": assembly}
        return self.runtime.waterfall("dsh_system_prompt_assemble", "assembly", kwargs)

    def agent_request(
        self, agent: Agent, turn: int, step: int, request: LlmRequest
    ) -> Awaitable[LlmRequest]:
        kwargs = {"agent": agent, "turn": turn, "step": step, "request": request}
        return self.runtime.waterfall("dsh_agent_request", "request", kwargs)

    def llm_stream(
        self,
        request: LlmRequest,
        terminal: Callable[[LlmRequest], AsyncIterator[StreamChunk]],
    ) -> Awaitable[AsyncIterator[StreamChunk]]:
        return self.runtime.middleware("dsh_llm_stream", "request", request, terminal)

    def agent_stream_chunk(self, agent: Agent, turn: int, step: int, chunk: StreamChunk) -> None:
        self.runtime.notifier("dsh_agent_stream_chunk")(agent, turn, step, chunk)

    def agent_stream_batch(
        self, agent: Agent, turn: int, step: int, chunks: Sequence[StreamChunk]
    ) -> None:
        self.runtime.notifier("dsh_agent_stream_batch")(agent, turn, step, chunks)

    def stream_observers(self) -> tuple[bool, bool]:
        """Whether ``dsh_agent_stream_chunk`` and ``dsh_agent_stream_batch`` have
        implementations: a step calls neither per chunk or per read where none would run."""
        return (
            bool(self.runtime.impls("dsh_agent_stream_chunk")),
            bool(self.runtime.impls("dsh_agent_stream_batch")),
        )

    def agent_request_error(
        self, agent: Agent, turn: int, step: int, failure: LlmFailure, attempt: int
    ) -> Awaitable[Retry | None]:
        kwargs = {
            "agent": agent,
            "turn": turn,
            "step": step,
            "failure": failure,
            "attempt": attempt,
        }
        return self.runtime.first("dsh_agent_request_error", kwargs)

    def agent_step_result(
        self, agent: Agent, turn: int, step: int, message: Message
    ) -> Awaitable[Message]:
        kwargs = {"agent": agent, "turn": turn, "step": step, "message": message}
        return self.runtime.waterfall("dsh_agent_step_result", "message", kwargs)

    def tools_execute(
        self, execution: ToolExecution, terminal: Callable[[ToolExecution], Awaitable[ToolOutcome]]
    ) -> Awaitable[ToolOutcome]:
        return self.runtime.middleware("dsh_tools_execute", "execution", execution, terminal)

    def agent_turn_continuation(
        self, agent: Agent, turn: int, decision: Continuation
    ) -> Awaitable[Continuation]:
        kwargs = {"agent": agent, "turn": turn, "decision": decision}
        return self.runtime.waterfall("dsh_agent_turn_continuation", "decision", kwargs)

    # -- sessions --------------------------------------------------------------------------
    def session_created(self, session: Session) -> None:
        self.runtime.notify_sync("dsh_session_created", {"session": session})

    def session_event(self, session: Session, event: SessionEvent) -> None:
        self.runtime.notifier("dsh_session_event")(session, event)

    def session_event_observed(self, cls: type[Any]) -> bool:
        """Whether a ``dsh_session_event`` implementation takes events carrying a ``cls``."""
        return self.runtime.observed("dsh_session_event", cls)

    def session_checkpoint(self, session: Session) -> Awaitable[None]:
        return self.runtime.parallel("dsh_session_checkpoint", {"session": session})

    def session_closed(self, session: Session) -> Awaitable[None]:
        return self.runtime.notify("dsh_session_closed", {"session": session})

    def session_flush(self, session: Session) -> Awaitable[None]:
        return self.runtime.parallel("dsh_session_flush", {"session": session})

    async def session_load(self, session_id: str) -> list[SessionEvent] | None:
        found = await self.runtime.first("dsh_session_load", {"session_id": session_id})
        return cast("list[SessionEvent] | None", found)

    async def session_list(self, query: str | None, limit: int) -> list[SessionSummary] | None:
        found = await self.runtime.first("dsh_session_list", {"query": query, "limit": limit})
        return cast("list[SessionSummary] | None", found)

    # -- tool policy -----------------------------------------------------------------------
    async def tools_approve(self, execution: ToolExecution, reason: str) -> bool | None:
        """The first host's answer; ``None`` when no host answered (which means no)."""
        kwargs = {"execution": execution, "reason": reason}
        found = await self.runtime.first("dsh_tools_approve", kwargs)
        return None if found is None else bool(found)
