"""``fallback``: when a model keeps failing, move the turn to the next model of its chain.

Two hooks. ``dsh_agent_request_error`` (``trylast``, like ``retry``) decides: a failure whose
code is in ``codes``, that the retry plugin will not retry (any more), switches the step to the
next model of ``chains[<primary>]`` that is registered and usable, logs an ``llm/fallback``
event and asks for the step again at once. ``dsh_agent_request`` then rewrites each request
of the turn to the fallback model, with the history re-serialised for it: reasoning is
provider-specific (DeepSeek's ``reasoning_content`` must go back only to DeepSeek; a thinking
block's signature is only valid where it was made), so reasoning blocks are kept only in the
assistant messages of models served by the same adapter under the same provider prefix as the
target. The next turn starts on the primary model again, unless ``sticky``.

How it meets the retry plugin: whichever of the two is asked first, the primary model is
retried as ``[retry]`` says before fallback moves on; a fallback model then gets its own
retries, counted from the switch. Configured by section ``fallback``; see
``docs/plugins/fallback.md``.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import TYPE_CHECKING, Any, ClassVar

from attrs import evolve, field, frozen

from dsh.plugin import (
    Agent,
    AssistantMessage,
    LlmFailure,
    LlmRequest,
    Message,
    Reasoning,
    Retry,
    Value,
    hookimpl,
)

if TYPE_CHECKING:
    from dsh.plugin import Harness
    from dsh_plugins.fallback._switch import Switch

__all__ = ["FALLBACK_EVENT", "FallbackConfig", "FallbackEvent", "FallbackPlugin"]

FALLBACK_EVENT = "llm/fallback"
SECTION = "fallback"


@frozen(repr=False, eq=False)
class FallbackConfig(Value):
    """Section ``fallback``. ``chains`` maps a model id to the ids to try after it, in order;
    ``codes`` are the failure codes that move a turn on (the transient ones, and those another
    provider may not share: a missing key, an empty balance); ``sticky`` keeps an agent on the
    fallback model for later turns instead of going back to the primary one."""

    chains: dict[str, tuple[str, ...]] = field(factory=dict)
    codes: tuple[str, ...] = (
        "RATE_LIMIT",
        "SERVER",
        "TIMEOUT",
        "TRANSPORT",
        "STREAM_CLOSED",
        "EMPTY_RESPONSE",
        "AUTH",
        "INSUFFICIENT_BALANCE",
    )
    sticky: bool = False


@frozen(repr=False, eq=False)
class FallbackEvent(Value):
    """Data of ``llm/fallback``: attempt ``attempt`` of step ``step`` on ``from_model`` failed
    with ``code`` (``message``); the step runs again on ``to_model``."""

    type: ClassVar[str] = FALLBACK_EVENT
    turn: int
    step: int
    attempt: int
    from_model: str
    to_model: str
    code: str
    message: str


class FallbackPlugin:
    """Per-model fallback chains for every agent of a harness."""

    def __init__(self) -> None:
        self._config = FallbackConfig()
        self._harness: Harness | None = None
        self._switches: dict[str, Switch] = {}
        self._primary: dict[str, str] = {}  # agent id -> the model its last request named
        self._switched: set[str] = set()  # agents whose history has another provider's turns

    @hookimpl
    def dsh_register_config(self, register: Callable[[str, type[Any]], Any]) -> None:
        register(SECTION, FallbackConfig)

    @hookimpl
    def dsh_register_event_types(self, register: Callable[[str, type[Any]], Any]) -> None:
        register(FallbackEvent.type, FallbackEvent)

    @hookimpl
    def dsh_harness_start(self, harness: Harness) -> None:
        self._harness = harness
        self._config = harness.config.section(SECTION, FallbackConfig)

    @hookimpl
    def dsh_agent_disposed(self, agent: Agent) -> None:
        self._switches.pop(agent.id, None)
        self._primary.pop(agent.id, None)
        self._switched.discard(agent.id)

    # -- the request -------------------------------------------------------------------------
    @hookimpl
    def dsh_agent_request(self, agent: Agent, turn: int, request: LlmRequest) -> LlmRequest | None:
        """Name the fallback model while one is in effect; re-serialise the history."""
        if request.purpose is not None:
            return None
        self._primary[agent.id] = request.model
        switch = self._switches.get(agent.id)
        if switch is not None and switch.primary == request.model:
            if switch.turn == turn or self._config.sticky:
                request = evolve(request, model=switch.model)
            else:
                del self._switches[agent.id]
        if agent.id not in self._switched:
            return request
        return evolve(request, messages=self._for_model(agent, request.model, request.messages))

    def _for_model(
        self, agent: Agent, model: str, messages: Sequence[Message]
    ) -> tuple[Message, ...]:
        """``messages`` with the reasoning of other providers' turns left out."""
        made_by: dict[Message, str] = {}
        events = agent.session.events
        for seq, message in agent.session.history():
            data = events[seq].data
            if isinstance(data, AssistantMessage) and data.model:
                made_by[message] = data.model
        target = self._family(model)
        return tuple(
            m
            if m.role != "assistant" or self._family(made_by.get(m, "")) == target
            else Message(m.role, tuple(b for b in m.content if not isinstance(b, Reasoning)))
            for m in messages
        )

    def _family(self, model: str) -> tuple[int, str] | None:
        """What reasoning is valid across: one adapter under one provider prefix."""
        assert self._harness is not None
        if not self._harness.llm.serves(model):
            return None
        prefix = model.partition("/")[0] if "/" in model else ""
        return id(self._harness.llm.adapter_for(model)), prefix

    # -- the failure -------------------------------------------------------------------------
    @hookimpl(trylast=True)
    def dsh_agent_request_error(
        self, agent: Agent, turn: int, step: int, failure: LlmFailure, attempt: int
    ) -> Retry | None:
        """Retry as ``[retry]`` says, then move on along the chain."""
        if failure.code not in self._config.codes:
            return None
        switch = self._switches.get(agent.id)
        primary = self._primary.get(agent.id, agent.options.model)
        current = primary
        offset = 0
        if switch is not None and switch.primary == primary:
            current = switch.model
            offset = switch.offset if (switch.turn, switch.step) == (turn, step) else 0
        delay_s = self._retry_delay(failure, attempt - offset)
        if delay_s is not None:
            if offset == 0:
                return None  # the retry plugin answers this attempt itself
            return Retry(delay_s, attempt - offset)  # counted from the switch
        following = self._next(primary, current)
        if following is None:
            return None
        data = FallbackEvent(turn, step, attempt, current, following, failure.code, failure.message)
        agent.session.append(data)
        from dsh_plugins.fallback._switch import Switch

        self._switches[agent.id] = Switch(primary, following, turn, step, attempt)
        self._switched.add(agent.id)
        return Retry(0.0, record=False)  # the switch event says it

    def _retry_delay(self, failure: LlmFailure, attempt: int) -> float | None:
        """What the retry plugin (if loaded) waits before retrying ``attempt``, or ``None``
        when it gives up."""
        assert self._harness is not None
        # The retry plugin is the one offering ``delay_for`` (documented in its page): found by
        # what it offers, not by its class, since a plugin never imports another plugin.
        plugins = self._harness.plugins.pm.get_plugins()
        offers = [getattr(plugin, "delay_for", None) for plugin in plugins]
        delay_for: Any = next((offer for offer in offers if callable(offer)), None)
        return None if delay_for is None else delay_for(failure, attempt)

    def _next(self, primary: str, current: str) -> str | None:
        """The first model after ``current`` in ``primary``'s chain that can be called."""
        assert self._harness is not None
        # ``current`` is the primary or a model taken from this very chain.
        chain = [primary, *self._config.chains.get(primary, ())]
        llm = self._harness.llm
        for model in chain[chain.index(current) + 1 :]:
            if llm.serves(model) and llm.unavailable(model) is None:
                return model
        return None
